#!/usr/bin/env bash
# Issue 16's benchmark on the lent GPU host in one call (docs/benchmarks.md): first the baselines
# of the KernelBench problems the committed baselines file still lacks (at most BASELINES_S
# seconds, resumed from docs/data/kernelbench_baselines_h200_*.jsonl's newest), then
# benchmarks/bench_kernelbench.py: the pool over our solutions (POOL_S seconds), then the
# KernelBench-style loop (SEQ_S seconds; 0 skips a phase). One phase per call and --combine
# afterwards give each phase a whole call:
#   bash benchmarks/h200/kb_bench.sh 480 0          # the pool over all 30 pairs, then
#   bash benchmarks/h200/kb_bench.sh 0 540          # the loop; here: bench_kernelbench.py --combine a.json b.json
# LANE_SLOTS (default 1) evaluations share the GPU's lane at once in the pool (timing stays exclusive);
# LANE_SLOTS=2 judged all 30 pairs in 315 s on 2026-12-03 (6.1x the loop; docs/benchmarks.md).
# Usage: bash benchmarks/h200/kb_bench.sh POOL_S SEQ_S [PROBLEMS]   (needs .kb, carried)
set -u
source benchmarks/h200/setup.sh
POOL_S=${1:-240} SEQ_S=${2:-280} PROBLEMS=${3:-}
if [ "${BASELINES_S:-80}" -gt 0 ]; then
    timeout 600 bash benchmarks/h200/baselines.sh "${BASELINES_S:-80}" 10 > "$OUT/baselines.txt" 2>&1
    tail -2 "$OUT/baselines.txt"; rm -f "$OUT/dmon.txt" "$OUT/kb_check.txt"
fi
phases=()
[ "$POOL_S" -gt 0 ] || phases+=(--skip-pool)
[ "$SEQ_S" -gt 0 ] || phases+=(--skip-sequential)
python3 benchmarks/bench_kernelbench.py --benchmark-root .kb --solutions examples/kernelbench_solutions \
    ${PROBLEMS:+--problems "$PROBLEMS"} --pool-budget-s "$POOL_S" --sequential-budget-s "$SEQ_S" --lane-slots "${LANE_SLOTS:-1}" "${phases[@]}" \
    --out "$OUT/kb_bench.json" > "$OUT/kb_bench.md" 2> "$OUT/kb_bench.log"
echo "bench rc=$?"; head -30 "$OUT/kb_bench.md"
