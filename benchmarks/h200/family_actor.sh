#!/usr/bin/env bash
# The family's starting actor (docs/family.md): clone from the committed demonstrations plus
# 3,000 corpus demonstrations (~270 s on an H200), probe it under teacher forcing, save an fp16
# copy to $OUT/actor_corpus (what is committed; it comes back as one tarball, since the device returns at most 8 files), and
# evaluate that copy on 8 held-out, then 8 training tasks, greedy and at temperature 1, for at most
# EVAL_S seconds (default 240; 0: none). STEPS (default 2400) sets the cloning's steps.
# Usage: bash benchmarks/h200/family_actor.sh
set -u
source benchmarks/h200/setup.sh
work=outputs/family/actor_work
mkdir -p $work && tar xzf data/family/demos_cpu.tar.gz -C $work
( time python3 scripts/make_family_actor.py --out /tmp/actor_corpus --work-dir $work --size small \
    --corpus-demos 3000 --steps "${STEPS:-2400}" --batch-size 8 --device cuda --no-progress ) > "$OUT/make_actor.log" 2>&1
tail -5 "$OUT/make_actor.log"
# Seconds: the chain bodies under teacher forcing, every task of both splits (scripts/probe_family_actor.py).
python3 scripts/probe_family_actor.py --actor /tmp/actor_corpus --device cuda --max-tasks 0 --out "$OUT/probe.json" \
    2>&1 | tail -2
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
[ "${EVAL_S:-240}" -gt 0 ] || exit 0  # EVAL_S=0: the probe above only
( time timeout "${EVAL_S:-240}" python3 scripts/eval_family_actor.py --actor /tmp/actor_corpus_fp16 --device cuda \
    --splits heldout,train --max-tasks 8 --temperatures 0,1 --workers "${EVAL_WORKERS:-12}" --no-compile-baseline --out /tmp/actor_eval.json ) \
    > "$OUT/actor_eval.log" 2>&1
cp /tmp/actor_eval.json "$OUT/" 2>/dev/null
tail -8 "$OUT/actor_eval.log"
