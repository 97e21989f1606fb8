#!/usr/bin/env bash
# Issue 17's curves on the lent GPU host (docs/family.md): scripts/family_pipeline.py from the
# actor ACTOR (default: the committed data/family/actor_small.tar.gz, unpacked to /tmp/family_actor;
# ACTOR=/tmp/actor_corpus takes family_actor.sh's from an earlier call on the same warm machine)
# for SEEDS, the three rewards and the three ablations
# (warm-up, RFT and value pretraining shared between rewards), the model on the GPU and the family's
# CPU sandbox on the host's cores, stopped at LIMIT_S. EXTRA adds family_pipeline.py arguments
# (e.g. "--steps 4,8,8,12"). HARNESS_BESIDE=true lets the sandbox's reference-worker commands run
# beside timed sections (sandbox.timing.harness_beside_timing; auto: as BENCH_LOAD=1 measured it).
#
# Resumable two ways. On the same warm machine (the next call within 30 s of the last one's end):
# outputs/ and the sandbox cache in /tmp stay between calls, finished stages are skipped and a
# stopped one resumes from its checkpoint. On a bare machine (a later call, a new session): what
# the last call returned, copied into STATE (default .famstate, named in the call's carry), is
# unpacked first: the runs' small files, the task baselines timed so far (the cache key names the
# CPU model and the software, so they are reused only on a host of the same kind) and the weights
# of the finished stages that a stage still to run starts from; a stage that was stopped midway
# starts again (RFT and value pretraining keeping the episodes their sampling finished: the bundle
# holds rollouts/), and a finished one whose weights did not travel runs again.
# What comes back in $OUT (at most 8 files, 64 MiB, and the same 64 MiB carry the state back in,
# beside the ~13 MB of tracked files): family_runs.tar.gz (runs/: metrics.csv, pipeline.jsonl,
# markers, rollouts, logs, no checkpoints, for scripts/plot_family.py; baselines/; family_logs/:
# the pipeline's and the decoder check's logs), rewritten every minute while the pipeline runs, so
# that a call killed at its limit still returns what it did; weights.json and weights.*.part*
# (scripts/family_state.py; written after each stage that finishes, so a call killed at the run
# tool's limit, which can be shorter than LIMIT_S where less device time is left, still returns
# the finished stages' weights), at most EXPORT_MB (default 40: one stage of the family actor and its
# critic, 31.7 MB; the stages furthest along go first, the rest run again on the next machine), as
# EXPORT_DTYPE (float32, or float16: 16.9 MB a stage, a one-time rounding of the next stage's start).
# A stage stopped at LIMIT_S (a PPO stage is longer than one call) travels first, as its checkpoint
# with the weights in EXPORT_DTYPE and Adam's moments as EXPORT_MOMENTS (bfloat16: 48.7 MB with
# float16 weights; drop: 16.9 MB, the moments start anew at the resume), and resumes on the next
# machine; one killed from outside before the pipeline's own stop starts again there.
# LIMIT_S must end inside the call's own limit: the run tool's timeout_s, or the device time
# left when that is less.
# Usage: bash benchmarks/h200/family_runs.sh [SEEDS] [LIMIT_S]
set -u
t0=$(date +%s)
source benchmarks/h200/setup.sh
SEEDS=${1:-0} LIMIT=${2:-540} ACTOR=${ACTOR:-/tmp/family_actor} STATE=${STATE:-.famstate}
if [ "$ACTOR" = /tmp/family_actor ] && [ ! -f /tmp/family_actor/config.json ]; then
    tar xzf data/family/actor_small.tar.gz -C /tmp
fi
LOGS=/tmp/family_logs
mkdir -p "$LOGS" "$CUDA_AGENT_CACHE"
# The run tool returns at most 8 files from $OUT, and the bundle, weights.json and three stages'
# weights (two parts each) are 8: a file the caller wrote there first (a test's log) would push
# weights.json out. Such files travel inside the bundle, in family_logs/ (an earlier run's own
# bundle and weights, in the same command, are left for this run to replace).
for f in "$OUT"/*; do
    case "${f##*/}" in family_runs.tar.gz | weights.*) continue ;; esac
    if [ -f "$f" ]; then mv "$f" "$LOGS/" && echo "moved into family_logs/: ${f##*/}"; fi
done
carried=()
if [ ! -d outputs/family/runs ] && [ -f "$STATE/family_runs.tar.gz" ]; then
    mkdir -p outputs/family
    tar xzf "$STATE/family_runs.tar.gz" -C outputs/family runs
    # baselines/ inside the bundle (a separate baselines.tar.gz until 2026-12-04).
    tar xzf "$STATE/family_runs.tar.gz" -C "$CUDA_AGENT_CACHE" baselines 2>/dev/null
    if [ -f "$STATE/baselines.tar.gz" ]; then tar xzf "$STATE/baselines.tar.gz" -C "$CUDA_AGENT_CACHE"; fi
    if [ -f "$STATE/weights.json" ]; then carried=(--import-weights "$STATE"); fi
    echo "continuing from $STATE: $(ls "$CUDA_AGENT_CACHE"/baselines 2>/dev/null | wc -l) cached baselines, ${carried[*]:-no weights}"
fi
# The family tasks' baselines timed on earlier hosts (data/family/baselines_<host>.tar.gz: the H200
# host's 36 tasks, the H100 host's 62, the reduced plan's with --val-tasks 0; cache entries keyed by
# CPU model, core count and software, so a host of another kind misses them and times its own: 253 s
# for 14 tasks on the H100 host on 2026-12-05); entries already in the cache are kept.
for b in data/family/baselines_*.tar.gz; do tar xzf "$b" -C "$CUDA_AGENT_CACHE" --skip-old-files; done
# The reply decoder: DECODER=hf or static, or "check" (the default): the static-cache decoder's GPU
# test (tests/agent/test_static_decode_gpu.py, ~25 s) decides; BENCH_DECODE=1 adds
# benchmarks/bench_decode.py's speeds of both decoders on the actor with the host's cores busy
# (logs/decode.json; ~60 s). The choice is kept in /tmp for the warm machine's later calls.
DECODER=${DECODER:-check}
if [ "$DECODER" = check ] && [ -f /tmp/family_decoder ]; then DECODER=$(cat /tmp/family_decoder); fi
if [ "$DECODER" = check ]; then
    # Passed, not skipped (a host without CUDA skips the test and exits 0).
    if python3 -m pytest -q -p no:cacheprovider tests/agent/test_static_decode_gpu.py > "$LOGS/decoder_check.log" 2>&1 \
        && ! grep -q skipped "$LOGS/decoder_check.log"; then
        DECODER=static
    else
        DECODER=hf
    fi
    echo "$DECODER" > /tmp/family_decoder
    echo "decoder: $DECODER"; tail -3 "$LOGS/decoder_check.log"
fi
if [ "${BENCH_DECODE:-0}" = 1 ]; then
    timeout 120 python3 benchmarks/bench_decode.py --actor "$ACTOR" --rows 1,8,16 --steps 256 --load \
        --out "$LOGS/decode.json" >> "$LOGS/decoder_check.log" 2>&1
    tail -6 "$LOGS/decoder_check.log"
fi
# BENCH_PHASES=1: one family evaluation's seconds by phase on this host, alone, before the
# pipeline loads it (benchmarks/bench_family_phases.py; family_logs/phases.json; ~30 s).
if [ "${BENCH_PHASES:-0}" = 1 ]; then
    timeout 180 python3 benchmarks/bench_family_phases.py --tasks 3 --out "$LOGS/phases.json" 2> "$LOGS/phases.log"
fi
# GPU_TESTS=1: the sandbox's GPU tests first (pytest -m gpu tests/sandbox, 4 workers;
# family_logs/gpu_tests.log; a few minutes), for sandbox changes made since they last ran there.
if [ "${GPU_TESTS:-0}" = 1 ]; then
    timeout 240 python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider -rfEs tests/sandbox > "$LOGS/gpu_tests.log" 2>&1
    echo "sandbox gpu tests rc=$?"; tail -3 "$LOGS/gpu_tests.log"
fi
# BENCH_LOAD=1: the family's sandbox under the pipeline's load on this host, before the pipeline
# (benchmarks/bench_family_load.py: 3 pools at once, as the chains run them, with the reference
# worker's commands waiting for timed sections and beside them; family_logs/load_*.json; ~3 min),
# and what one worker's start costs here against a fork (bench_worker_start.py; ~20 s).
if [ "${BENCH_LOAD:-0}" = 1 ]; then
    timeout 60 python3 benchmarks/bench_worker_start.py --repeats 5 --out "$LOGS/worker_start.json" > /dev/null \
        2> "$LOGS/worker_start.log"
    for beside in false true; do
        timeout 150 python3 benchmarks/bench_family_load.py --pools 3 --evals 12 --lane-slots 4 \
            --set timing.harness_beside_timing=$beside --out "$LOGS/load_beside_$beside.json" 2> "$LOGS/load_beside_$beside.log" | head -1
    done
fi
# HARNESS_BESIDE: true, false, or auto (the default): what BENCH_LOAD measured on this machine
# favours (bench_family_load.py --choose: no lower throughput, the same solutions timed at most 5 %
# slower, runtime spread within 25 %), kept in
# /tmp for the warm machine's later calls; false where nothing was measured.
HARNESS_BESIDE=${HARNESS_BESIDE:-auto}
if [ "$HARNESS_BESIDE" = auto ]; then
    if [ -f "$LOGS/load_beside_false.json" ] && [ -f "$LOGS/load_beside_true.json" ]; then
        python3 benchmarks/bench_family_load.py --choose "$LOGS/load_beside_false.json" "$LOGS/load_beside_true.json" \
            > /tmp/family_harness_beside 2> "$LOGS/load_choose.log"
    fi
    HARNESS_BESIDE=$(cat /tmp/family_harness_beside 2>/dev/null || echo false)
fi
echo "harness beside timed sections: $HARNESS_BESIDE"
# The bundle of small files, whole at every moment (written beside, then renamed into $OUT).
bundle() {
    tar czf /tmp/family_bundle.tar.gz --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.bin' \
        --exclude='wandb' -C outputs/family runs -C "$CUDA_AGENT_CACHE" baselines -C /tmp family_logs 2>/dev/null
    mv -f /tmp/family_bundle.tar.gz "$OUT/family_runs.tar.gz"
}
start=$(date +%s)
# sampling.max_batch=16: every episode in flight (conf/data/family.yaml) in one generation batch;
# a 4 M-parameter actor's decode step is launch-bound, so 16 rows should cost about what 8 do
# (the runs until 2026-12-04 used 8: compare perf/generation_s).
mkdir -p outputs/family/runs
# Every minute while the pipeline runs; stopped through a file, so a bundle being written is
# finished (not cut off to race the last one).
rm -f /tmp/family_bundle.stop
(n=0; until [ -f /tmp/family_bundle.stop ]; do sleep 5; n=$((n + 5)); if [ $n -ge 60 ]; then bundle; n=0; fi; done) &
refresher=$!
# shellcheck disable=SC2086  # EXTRA is a list of arguments
python3 scripts/family_pipeline.py --actor "$ACTOR" --out outputs/family/runs --trainer gpu \
    --seeds "$SEEDS" --rewards graduated,binary,continuous --ablations full,no_rft,no_value --reward-stages agentic \
    --time-budget-s $((LIMIT - 45 - (start - t0))) --jobs 3 --set sandbox.lane_cpus=0 --set sandbox.lane_slots=4 \
    --set data.prewarm_baselines=12 --set sampling.max_batch=16 --set sampling.decoder="$DECODER" \
    --set sandbox.timing.harness_beside_timing="$HARNESS_BESIDE" "${carried[@]}" \
    --export-weights "$OUT" --export-max-mb "${EXPORT_MB:-40}" --export-dtype "${EXPORT_DTYPE:-float32}" \
    --export-moments "${EXPORT_MOMENTS:-bfloat16}" ${EXTRA:-} > "$LOGS/pipeline.log" 2>&1
echo "pipeline rc=$? in $(( $(date +%s) - start )) s"
touch /tmp/family_bundle.stop; wait "$refresher"
grep "^family_pipeline" "$LOGS/pipeline.log"
tail -5 outputs/family/runs/pipeline.jsonl 2>/dev/null
bundle
ls -l "$OUT"
