"""Can a small Llama trained from scratch compose the family's chains from a short context? It is
cloned on short texts of training-split specs only, and at checkpoints every chain-body token of
training and held-out specs is scored under teacher forcing (a body is right when every token's
argmax is the teacher's). Two kinds of text:

- ``chain``: the task's code, then the teacher's chain() function as plain C (~280 tokens);
- ``snippet``: make_family_actor.snippet_examples (the task's code, then the reply as an episode
  writes it, JSON-escaped, without the binding file; ~1,000 tokens): what --pretrain-snippets
  clones before the long demonstrations.

Results: docs/benchmarks.md ("a teacher that names its ops, and short snippets cloned first").
Launch lines (repository root; the tokenizer of the committed demonstrations):
    mkdir -p /tmp/demos && tar xzf data/family/demos_cpu.tar.gz -C /tmp/demos tokenizer
    python benchmarks/bench_family_composition.py --tokenizer /tmp/demos/tokenizer --texts chain \\
        --size tiny --count 3000 --steps 1200 --batch-size 32 --checkpoints 1        # CPU, ~7 min
    python benchmarks/bench_family_composition.py --tokenizer /tmp/demos/tokenizer --texts snippet \\
        --size tiny --count 6000 --steps 1200 --batch-size 16 --checkpoints 2        # CPU, ~30 min
    python benchmarks/bench_family_composition.py ... --size small --device cuda     # one GPU
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import make_family_actor as mfa  # noqa: E402

from data_gen.family import render_task, sample_specs  # noqa: E402
from src.agent.teacher import model_chain  # noqa: E402
from src.agent.teacher_kernels import chain_function  # noqa: E402


def labelled(tokenizer, prompt: str, target: str) -> tuple[list[int], list[int]]:
    """(ids, mask): the prompt unlabelled, the target and an end-of-turn labelled."""
    p = tokenizer(prompt)["input_ids"]
    t = tokenizer(target)["input_ids"] + [tokenizer.eos_token_id]
    return p + t, [0] * len(p) + [1] * len(t)


def chain_text(spec) -> tuple[str, str]:
    """The task's code, then the teacher's chain() function as plain C."""
    return render_task(spec), "\n".join(chain_function(model_chain(spec), "cpu", False))


def training_texts(tokenizer, kind: str, count: int) -> list[tuple[list[int], list[int]]]:
    if kind == "snippet":
        return mfa.snippet_examples(count, "cpu", tokenizer, seed=0)
    specs = [s for s in sample_specs(3 * count + 50, "cpu", seed=1) if s.split() == "train"][:count]
    return [labelled(tokenizer, *chain_text(s)) for s in specs]


def heldout_texts(tokenizer, kind: str, count: int) -> list[tuple[list[int], list[int]]]:
    if kind == "snippet":
        return mfa.fused_snippets(tokenizer, "cpu", "heldout", count)
    specs = [s for s in sample_specs(20 * count + 50, "cpu", seed=99) if s.split() == "heldout"][:count]
    return [labelled(tokenizer, *chain_text(s)) for s in specs]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokenizer", required=True, help="a saved tokenizer (the demonstrations' tokenizer/)")
    p.add_argument("--texts", choices=("chain", "snippet"), default="snippet")
    p.add_argument("--size", default="tiny", help="offline_model.MODEL_SIZES")
    p.add_argument("--count", type=int, default=6000, help="training texts")
    p.add_argument("--scored", type=int, default=48, help="texts scored per split")
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--checkpoints", type=int, default=2, help="score after each of this many equal parts")
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    if not Path(args.tokenizer).is_dir():
        p.error(f"--tokenizer {args.tokenizer}: no such directory")
    if min(args.count, args.scored, args.steps, args.batch_size, args.checkpoints) < 1:
        p.error("--count, --scored, --steps, --batch-size and --checkpoints must be >= 1")

    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    from src.agent.offline_model import behaviour_clone, small_model_config

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    train = training_texts(tokenizer, args.texts, args.count)
    held = heldout_texts(tokenizer, args.texts, args.scored)
    tokens = sorted(len(ids) for ids, _ in train)[len(train) // 2]
    scored = {"train": mfa.with_bodies(tokenizer, train, args.scored), "heldout": mfa.with_bodies(tokenizer, held, args.scored)}
    print(f"{args.texts}: {len(train)} training texts (median {tokens} tokens); scored: "
          f"{len(scored['train'])} training, {len(scored['heldout'])} held-out", flush=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(small_model_config(tokenizer, args.size, 4096))
    start, done = time.monotonic(), 0
    for part in range(args.checkpoints):
        # Each part is its own warm-up and cosine decay (behaviour_clone's schedule).
        steps = args.steps // args.checkpoints + (1 if part < args.steps % args.checkpoints else 0)
        losses = behaviour_clone(model, train, tokenizer.pad_token_id, steps, lr=args.lr, device=args.device,
                                 batch_size=args.batch_size, progress=False)
        done += steps
        tail = losses[-20:]
        print(json.dumps({"steps": done, "seconds": round(time.monotonic() - start),
                          "loss": round(sum(tail) / len(tail), 4),
                          **{f"{split}_bodies_right": round(mfa.bodies_right(model, texts, args.device), 3)
                             for split, texts in scored.items()}}), flush=True)


if __name__ == "__main__":
    main()
