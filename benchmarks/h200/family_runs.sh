#!/usr/bin/env bash
# Issue 17's curves on the lent GPU host (docs/family.md): scripts/family_pipeline.py from the
# actor ACTOR (default: the committed data/family/actor_small.tar.gz, unpacked to /tmp/family_actor;
# ACTOR=/tmp/actor_corpus takes family_actor.sh's from an earlier call on the same warm machine)
# for SEEDS, the three rewards and the three ablations
# (warm-up, RFT and value pretraining shared between rewards), the model on the GPU and the family's
# CPU sandbox on the host's cores, stopped at LIMIT_S. EXTRA adds family_pipeline.py arguments
# (e.g. "--steps 4,8,8,12").
#
# Resumable two ways. On the same warm machine: outputs/ and the sandbox cache in /tmp stay between
# calls, finished stages are skipped and a stopped one resumes from its checkpoint. On a bare
# machine (a new session): what the last call returned, copied into STATE (default .famstate, named
# in the call's carry), is unpacked first: the runs' small files, the task baselines timed so far
# (the cache key names the CPU model and the software, so they are reused only on a host of the
# same kind) and the weights of the finished stages that a stage still to run starts from; a stage
# that was stopped midway starts again. What comes back in $OUT: family_runs.tar.gz (metrics.csv,
# pipeline.jsonl, markers, rollouts, logs; no checkpoints, for scripts/plot_family.py), pipeline.log,
# baselines.tar.gz, weights.json and weights.*.part* (scripts/family_state.py).
# Usage: bash benchmarks/h200/family_runs.sh [SEEDS] [LIMIT_S]
set -u
t0=$(date +%s)
source benchmarks/h200/setup.sh
SEEDS=${1:-0} LIMIT=${2:-540} ACTOR=${ACTOR:-/tmp/family_actor} STATE=${STATE:-.famstate}
if [ "$ACTOR" = /tmp/family_actor ] && [ ! -f /tmp/family_actor/config.json ]; then
    tar xzf data/family/actor_small.tar.gz -C /tmp
fi
carried=()
if [ ! -d outputs/family/runs ] && [ -f "$STATE/family_runs.tar.gz" ]; then
    mkdir -p outputs/family "$CUDA_AGENT_CACHE"
    tar xzf "$STATE/family_runs.tar.gz" -C outputs/family
    if [ -f "$STATE/baselines.tar.gz" ]; then tar xzf "$STATE/baselines.tar.gz" -C "$CUDA_AGENT_CACHE"; fi
    if [ -f "$STATE/weights.json" ]; then carried=(--import-weights "$STATE"); fi
    echo "continuing from $STATE: $(ls "$CUDA_AGENT_CACHE"/baselines 2>/dev/null | wc -l) cached baselines, ${carried[*]:-no weights}"
fi
# The family tasks' baselines timed on an earlier host of this kind (data/family/baselines_h200.tar.gz:
# cache entries keyed by CPU model, core count and software, so a host that differs misses them
# and times its own); entries already in the cache are kept.
mkdir -p "$CUDA_AGENT_CACHE"
tar xzf data/family/baselines_h200.tar.gz -C "$CUDA_AGENT_CACHE" --skip-old-files
# The reply decoder: DECODER=hf or static, or "check" (the default): the static-cache decoder's GPU
# test (tests/agent/test_static_decode_gpu.py) decides, and benchmarks/bench_decode.py records both
# decoders' speed on the actor with the host's cores busy (decode.json, decoder_check.log in $OUT);
# the choice is kept in /tmp for the warm machine's later calls.
DECODER=${DECODER:-check}
if [ "$DECODER" = check ] && [ -f /tmp/family_decoder ]; then DECODER=$(cat /tmp/family_decoder); fi
if [ "$DECODER" = check ]; then
    # Passed, not skipped (a host without CUDA skips the test and exits 0).
    if python3 -m pytest -q -p no:cacheprovider tests/agent/test_static_decode_gpu.py > "$OUT/decoder_check.log" 2>&1 \
        && ! grep -q skipped "$OUT/decoder_check.log"; then
        DECODER=static
        timeout 120 python3 benchmarks/bench_decode.py --actor "$ACTOR" --rows 1,8,16 --steps 256 --load \
            --out "$OUT/decode.json" >> "$OUT/decoder_check.log" 2>&1
    else
        DECODER=hf
    fi
    echo "$DECODER" > /tmp/family_decoder
    echo "decoder: $DECODER"; tail -8 "$OUT/decoder_check.log"
fi
start=$(date +%s)
# sampling.max_batch=16: every episode in flight (conf/data/family.yaml) in one generation batch;
# a 4 M-parameter actor's decode step is launch-bound, so 16 rows should cost about what 8 do
# (the runs until 2026-12-04 used 8: compare perf/generation_s).
# shellcheck disable=SC2086  # EXTRA is a list of arguments
python3 scripts/family_pipeline.py --actor "$ACTOR" --out outputs/family/runs --trainer gpu \
    --seeds "$SEEDS" --rewards graduated,binary,continuous --ablations full,no_rft,no_value --reward-stages agentic \
    --time-budget-s $((LIMIT - 45 - (start - t0))) --jobs 3 --set sandbox.lane_cpus=0 --set sandbox.lane_slots=4 \
    --set data.prewarm_baselines=12 --set sampling.max_batch=16 --set sampling.decoder="$DECODER" "${carried[@]}" --export-weights "$OUT" ${EXTRA:-} \
    > "$OUT/pipeline.log" 2>&1
echo "pipeline rc=$? in $(( $(date +%s) - start )) s"
tail -5 outputs/family/runs/pipeline.jsonl 2>/dev/null
tar czf "$OUT/family_runs.tar.gz" --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.bin' \
    --exclude='wandb' -C outputs/family runs
tar czf "$OUT/baselines.tar.gz" -C "$CUDA_AGENT_CACHE" baselines
ls -l "$OUT"
