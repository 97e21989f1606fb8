#!/usr/bin/env bash
# The family's starting actor (docs/family.md): clone from the committed demonstrations plus
# 3,000 corpus demonstrations (~260 s on an H200 for 2,400 steps), one clone per seed in SEEDS, in
# parallel on the one GPU (they share it: three of 2,400 steps each had not finished after 460 s,
# so give a call ~250 s per seed); probe each under teacher forcing (scripts/probe_family_actor.py),
# keep the one whose chain bodies are right in most held-out tasks (then training tasks) as
# /tmp/actor_corpus, and save its fp16 copy to $OUT/actor_corpus.tar.gz (what is committed; one
# tarball, since the device returns at most 8 files). Then evaluate that copy on 8 held-out, then 8
# training tasks, greedy and at temperature 1, for at most EVAL_S seconds (default 240; 0: none).
# STEPS (default 2400) sets the cloning's steps, CORPUS (default 3000) its corpus demonstrations.
# DEVICE (default cuda) is where cloning and probing run. BODY_WEIGHT (default 1) is the loss weight
# of the chain bodies' tokens (make_family_actor.py --body-weight). PRETRAIN (default 0) short
# snippets (task code -> reply) are cloned first for PRETRAIN_STEPS (default 1500) steps of 32, at
# most PRETRAIN_S seconds (0: no limit); REHEARSE of them stay among the demonstrations, whose
# cloning takes at most TIME_S seconds (0: no limit). LRS (default 5e-3) lists learning rates: one
# clone per seed and rate, all probed, the best kept. BF16=1 clones under bfloat16 autocast.
# Usage: SEEDS="0 1" STEPS=2400 EVAL_S=0 bash benchmarks/h200/family_actor.sh
set -u
source benchmarks/h200/setup.sh
work=outputs/family/actor_work
mkdir -p $work && tar xzf data/family/demos_cpu.tar.gz -C $work
SEEDS=${SEEDS:-0} LRS=${LRS:-5e-3}
clones=$(for seed in $SEEDS; do for lr in $LRS; do echo "s${seed}_lr$lr"; done; done)
# The host's cores split between the clones (each would otherwise start one torch thread per core).
threads=$(( $(nproc) / $(echo $clones | wc -w) ))
# A warm machine keeps /tmp: nothing of an earlier call may pass for this call's clones.
rm -rf /tmp/actor_corpus /tmp/actor_corpus_fp16 /tmp/actor_s* /tmp/probe_s*.json
for clone in $clones; do
    seed=${clone%%_lr*} lr=${clone##*_lr}
    ( time OMP_NUM_THREADS=$(( threads > 0 ? threads : 1 )) python3 scripts/make_family_actor.py --out /tmp/actor_$clone --work-dir $work --size small \
        --corpus-demos "${CORPUS:-3000}" --steps "${STEPS:-2400}" --batch-size 8 --device "${DEVICE:-cuda}" --seed "${seed#s}" --lr "$lr" \
        --body-weight "${BODY_WEIGHT:-1}" --pretrain-snippets "${PRETRAIN:-0}" --pretrain-steps "${PRETRAIN_STEPS:-1500}" \
        --pretrain-time-s "${PRETRAIN_S:-0}" --rehearse-snippets "${REHEARSE:-0}" --time-s "${TIME_S:-0}" \
        $([ "${BF16:-0}" = 1 ] && echo --bf16) --no-progress ) > /tmp/make_actor_$clone.log 2>&1 &
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
