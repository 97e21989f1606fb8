#!/usr/bin/env bash
# The GPU tests (pytest -m gpu) on one GPU host, 4 xdist workers, under a wall-clock limit;
# the log goes to $OUT/gpu_suite.log, and a test process still alive a minute after its session
# ended writes why to $OUT/exit_report.<worker>.txt (tests/conftest.py). Usage (repository root):
#   bash benchmarks/h200/gpu_suite.sh [LIMIT_S]
set -u
source benchmarks/h200/setup.sh
CUDA_AGENT_TEST_EXIT_REPORT="$OUT/exit_report" timeout "${1:-530}" python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider -rfEs --durations=20 \
    > "$OUT/gpu_suite.log" 2>&1
echo "gpu suite rc=$?"; tail -25 "$OUT/gpu_suite.log"
# One file for every process's report (the device returns at most 8 files). A worker that finished
# its share early reports too: it waits, idle in execnet's serve loop, for the others to end.
if ls "$OUT"/exit_report.*.txt > /dev/null 2>&1; then
    tail -n +1 "$OUT"/exit_report.*.txt > "$OUT/exit_reports.txt" && rm -f "$OUT"/exit_report.*.txt
fi
