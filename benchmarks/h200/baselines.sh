#!/usr/bin/env bash
# Eager and torch.compile baselines of every KernelBench problem (docs/benchmarks.md), resumable:
# the lines of an earlier call ($PREVIOUS, default docs/data/kernelbench_baselines_h200_*.jsonl's
# newest) are copied to $OUT first, so each call times only what is left; Ctrl-C at the limit
# (SIGINT) ends the call with every finished line kept. GPU utilisation beside it (dmon).
# Usage: bash benchmarks/h200/baselines.sh [LIMIT_S] [WORKERS]    (needs the tree in .kb:
# scripts/fetch_kernelbench.py says how it is made and checked)
set -u
source benchmarks/h200/setup.sh
if ! python3 scripts/fetch_kernelbench.py --root .kb --manifest benchmarks/kernelbench_manifest.json > "$OUT/kb_check.txt"; then
    tail -5 "$OUT/kb_check.txt"; exit 2
fi
PREVIOUS=${PREVIOUS:-$(ls docs/data/kernelbench_baselines_h200_*.jsonl 2>/dev/null | tail -1)}
[ -n "$PREVIOUS" ] && [ ! -f "$OUT/baselines.jsonl" ] && cp "$PREVIOUS" "$OUT/baselines.jsonl"
nvidia-smi dmon -s um -d 5 > "$OUT/dmon.txt" 2>&1 &
DMON=$!
start=$(date +%s)
timeout --signal=INT "${1:-540}" python3 -m sandbox baselines --benchmark-root .kb --out "$OUT/baselines.jsonl" \
    --workers "${2:-8}" --backend cuda 2> "$OUT/baselines.log"
echo "baselines rc=$? in $(( $(date +%s) - start )) s; lines: $(wc -l < "$OUT/baselines.jsonl")"
kill $DMON; tail -3 "$OUT/baselines.log"
