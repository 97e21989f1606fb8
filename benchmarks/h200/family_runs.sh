#!/usr/bin/env bash
# Issue 17's curves on the lent GPU host (docs/family.md): scripts/family_pipeline.py from the
# actor ACTOR (default: the committed data/family/actor_small.tar.gz, unpacked to /tmp/family_actor;
# ACTOR=/tmp/actor_corpus takes family_actor.sh's from an earlier call on the same warm machine)
# for SEEDS, the three rewards and the three ablations
# (warm-up, RFT and value pretraining shared between rewards), the model on the GPU and the family's
# CPU sandbox on the host's cores, stopped at LIMIT_S. Rerun on the same warm machine to continue:
# outputs/ stays there between calls, and finished stages are skipped. The small files (metrics.csv,
# pipeline.jsonl, markers, logs; no checkpoints) come back as $OUT/family_runs.tar.gz, for
# scripts/plot_family.py here. EXTRA adds family_pipeline.py arguments (e.g. "--steps 4,8,8,12").
# Usage: bash benchmarks/h200/family_runs.sh [SEEDS] [LIMIT_S]
set -u
source benchmarks/h200/setup.sh
SEEDS=${1:-0} LIMIT=${2:-540} ACTOR=${ACTOR:-/tmp/family_actor}
if [ "$ACTOR" = /tmp/family_actor ] && [ ! -f /tmp/family_actor/config.json ]; then
    tar xzf data/family/actor_small.tar.gz -C /tmp
fi
start=$(date +%s)
# shellcheck disable=SC2086  # EXTRA is a list of arguments
python3 scripts/family_pipeline.py --actor "$ACTOR" --out outputs/family/runs --trainer gpu \
    --seeds "$SEEDS" --rewards graduated,binary,continuous --ablations full,no_rft,no_value --reward-stages agentic \
    --time-budget-s $((LIMIT - 30)) --jobs 3 --set sandbox.lane_cpus=0 --set sandbox.lane_slots=4 \
    --set data.prewarm_baselines=12 ${EXTRA:-} \
    > "$OUT/pipeline.log" 2>&1
echo "pipeline rc=$? in $(( $(date +%s) - start )) s"
tail -5 outputs/family/runs/pipeline.jsonl 2>/dev/null
tar czf "$OUT/family_runs.tar.gz" --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.bin' \
    --exclude='wandb' -C outputs/family runs && ls -l "$OUT/family_runs.tar.gz"
