#!/usr/bin/env bash
# The family's starting actor (docs/family.md), the recipe that composes (2026-12-04: chain bodies
# right in 99 % of training and 97 % of held-out tasks; committed as data/family/actor_small.tar.gz):
# the small size (3.96 M) cloned first on PRETRAIN (default 16000) short snippets (task code ->
# reply) for at most PRETRAIN_S (default 280) seconds (PRETRAIN_STEPS, default 6000, caps the steps
# of 32; the cosine fits the time), then on the committed demonstrations plus CORPUS (default 1000)
# corpus demonstrations and REHEARSE (default 2000) of the snippets for at most TIME_S (default 80)
# seconds (STEPS, default 2000, caps the steps of 8), under bfloat16 autocast (BF16, default 1).
# One clone per seed in SEEDS and learning rate in LRS (default 2e-3; 5e-3 composed worse), in
# parallel on the one GPU (they share it; the time budgets hold either way); probe each under
# teacher forcing (scripts/probe_family_actor.py), keep the one whose chain bodies are right in
# most held-out tasks (then training tasks) as /tmp/actor_corpus, and save its fp16 copy to
# $OUT/actor_corpus.tar.gz (one tarball, since the device returns at most 8 files). Then evaluate
# that copy on 8 held-out, then 8 training tasks, greedy and at temperature 1, for at most EVAL_S
# seconds (default 240; 0: none). DEVICE (default cuda) is where cloning and probing run.
# BODY_WEIGHT (default 1) is the loss weight of the chain bodies' tokens (--body-weight).
# Usage (~500 s with two clones): SEEDS=0 LRS="2e-3" EVAL_S=0 timeout 580 bash benchmarks/h200/family_actor.sh
set -u
source benchmarks/h200/setup.sh
work=outputs/family/actor_work
mkdir -p $work && tar xzf data/family/demos_cpu.tar.gz -C $work
SEEDS=${SEEDS:-0} LRS=${LRS:-2e-3}
clones=$(for seed in $SEEDS; do for lr in $LRS; do echo "s${seed}_lr$lr"; done; done)
# The host's cores split between the clones (each would otherwise start one torch thread per core).
threads=$(( $(nproc) / $(echo $clones | wc -w) ))
# A warm machine keeps /tmp: nothing of an earlier call may pass for this call's clones.
rm -rf /tmp/actor_corpus /tmp/actor_corpus_fp16 /tmp/actor_s* /tmp/probe_s*.json
for clone in $clones; do
    seed=${clone%%_lr*} lr=${clone##*_lr}
    ( time OMP_NUM_THREADS=$(( threads > 0 ? threads : 1 )) python3 scripts/make_family_actor.py --out /tmp/actor_$clone --work-dir $work --size small \
        --corpus-demos "${CORPUS:-1000}" --steps "${STEPS:-2000}" --batch-size 8 --device "${DEVICE:-cuda}" --seed "${seed#s}" --lr "$lr" \
        --body-weight "${BODY_WEIGHT:-1}" --pretrain-snippets "${PRETRAIN:-16000}" --pretrain-steps "${PRETRAIN_STEPS:-6000}" \
        --pretrain-time-s "${PRETRAIN_S:-280}" --rehearse-snippets "${REHEARSE:-2000}" --time-s "${TIME_S:-80}" \
        $([ "${BF16:-1}" = 1 ] && echo --bf16) --no-progress ) > /tmp/make_actor_$clone.log 2>&1 &
done
wait
for clone in $clones; do
    echo "== $clone" >> "$OUT/make_actor.log"; grep "after the snippets" /tmp/make_actor_$clone.log >> "$OUT/make_actor.log"
    tail -5 /tmp/make_actor_$clone.log >> "$OUT/make_actor.log"
    cp /tmp/actor_$clone/build.json "$OUT/build_$clone.json" 2>/dev/null
    # Seconds: the chain bodies under teacher forcing, every task of both splits.
    python3 scripts/probe_family_actor.py --actor /tmp/actor_$clone --device "${DEVICE:-cuda}" --max-tasks 0 \
        --out /tmp/probe_$clone.json 2>&1 | tail -2 | sed "s/^/$clone: /"
done
tail -3 "$OUT/make_actor.log"
# shellcheck disable=SC2086  # one argument per clone
python3 - "$OUT/probe.json" $clones <<'PY' || exit 1
import json, shutil, sys
from pathlib import Path
probes = {c: json.loads(Path(f"/tmp/probe_{c}.json").read_text()) for c in sys.argv[2:]
          if Path(f"/tmp/probe_{c}.json").exists()}
if not probes:
    sys.exit("no clone was probed: see make_actor.log")
score = lambda s: tuple(probes[s]["splits"].get(k, {}).get("body_all_correct", 0.0) for k in ("heldout", "train"))
best = max(probes, key=score)
Path(sys.argv[1]).write_text(json.dumps({"best": best, "probes": probes}, indent=1) + "\n")
shutil.rmtree("/tmp/actor_corpus", ignore_errors=True)
shutil.copytree(f"/tmp/actor_{best}", "/tmp/actor_corpus")
print("kept", best, "held-out, train bodies right:", score(best))
PY
python3 - /tmp/actor_corpus /tmp/actor_corpus_fp16 <<'PY'
import shutil, sys, torch
from pathlib import Path
from transformers import AutoModelForCausalLM
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
model.half().save_pretrained(dst)  # half the bytes; the trainer loads it in its own dtype
for f in src.iterdir():
    if f.is_file() and not (dst / f.name).exists() and f.suffix != ".safetensors":
        shutil.copy(f, dst / f.name)
print("saved", dst, sum(p.numel() for p in model.parameters()), "parameters")
PY
tar czf "$OUT/actor_corpus.tar.gz" -C /tmp actor_corpus_fp16 && ls -l "$OUT/actor_corpus.tar.gz"
[ "${EVAL_S:-240}" -gt 0 ] || exit 0  # EVAL_S=0: the probes above only
( time timeout "${EVAL_S:-240}" python3 scripts/eval_family_actor.py --actor /tmp/actor_corpus_fp16 --device cuda \
    --splits heldout,train --max-tasks 8 --temperatures 0,1 --workers "${EVAL_WORKERS:-12}" --no-compile-baseline --out /tmp/actor_eval.json ) \
    > "$OUT/actor_eval.log" 2>&1
cp /tmp/actor_eval.json "$OUT/" 2>/dev/null
tail -8 "$OUT/actor_eval.log"
