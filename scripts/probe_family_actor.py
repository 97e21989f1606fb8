"""A family actor under teacher forcing, in seconds: for the first tasks of each split, the
teacher's single-turn reply (``--variant``, fused by default) is scored token by token, and the
tokens of the kernel's ``chain()`` body (the few that decide which ops the kernel computes) are
reported apart from the rest. An actor that composes must predict every body token greedily; a
mean loss of 0.05 over a ~1,500-token reply can hide several wrong body tokens, each of which
writes another chain. Cheaper than scripts/eval_family_actor.py (no generation, no sandbox), so
it is the first check of a freshly cloned actor; it does not replace the evaluation.

Launch lines (from the repository root; CPU is enough, a GPU is faster):
    python scripts/probe_family_actor.py --actor outputs/family/actor --max-tasks 6
    python scripts/probe_family_actor.py --actor /tmp/actor_corpus --device cuda --max-tasks 38 --out probe.json

Prints one line per task (split, chain signature, mean loss over the reply, mean loss over the
body, body tokens, body tokens whose argmax is not the teacher's) and a summary per split: the
fraction of tasks whose body is argmax-correct throughout.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from make_family_actor import body_mask, single_turn_config  # noqa: E402

from data_gen.dataset import load_tasks  # noqa: E402
from data_gen.family import family_specs  # noqa: E402
from src.agent.episode import SingleReplyTokens  # noqa: E402
from src.agent.teacher import Script  # noqa: E402

SPLITS = ("train", "heldout")


def probe_reply(model: Any, tokenizer: Any, ids: list[int], loss_mask: list[int]) -> dict[str, float]:
    """Teacher-forced loss over the reply's generated tokens and over its chain body."""
    import torch

    x = torch.tensor([ids], device=model.device)
    with torch.no_grad():
        logits = model(x).logits[0, :-1].float()
    target = x[0, 1:]
    nll = torch.nn.functional.cross_entropy(logits, target, reduction="none")
    generated = torch.tensor(loss_mask[1:], dtype=torch.bool, device=x.device)
    body = torch.tensor(body_mask(tokenizer, ids)[1:], dtype=torch.bool, device=x.device) & generated
    wrong = (logits.argmax(-1) != target) & body
    return {"reply_nll": float(nll[generated].mean()), "body_nll": float(nll[body].mean()) if body.any() else 0.0,
            "body_tokens": int(body.sum()), "body_wrong": int(wrong.sum())}


def probe(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.actor)
    model = AutoModelForCausalLM.from_pretrained(args.actor, dtype=torch.float32).to(args.device).eval()
    render = SingleReplyTokens(tokenizer, single_turn_config(), args.backend)
    rows = load_tasks(args.tasks)
    report: dict[str, Any] = {"actor": args.actor, "variant": args.variant, "tasks": [], "splits": {}}
    for split in SPLITS:
        chosen = [r for r in rows if r.get("split") == split][:args.max_tasks or None]
        results = []
        for row, spec in zip(chosen, family_specs(chosen)):
            thought, calls = Script(spec, args.backend).write(args.variant)
            ids, mask = render.tokens(row["code"], thought + "\n" + "".join(calls))
            result = {"split": split, "signature": spec.signature, **probe_reply(model, tokenizer, ids, mask)}
            print(json.dumps(result), flush=True)
            results.append(result)
        report["tasks"] += results
        if results:
            report["splits"][split] = {"tasks": len(results),
                                       "body_all_correct": sum(r["body_wrong"] == 0 for r in results) / len(results),
                                       "reply_nll_mean": sum(r["reply_nll"] for r in results) / len(results),
                                       "body_nll_mean": sum(r["body_nll"] for r in results) / len(results)}
    return report


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--actor", required=True, help="a saved actor (save_pretrained directory)")
    p.add_argument("--tasks", default=str(ROOT / "data" / "family" / "cpu" / "tasks.parquet"), help="family parquet")
    p.add_argument("--backend", choices=("cpu", "cuda"), default="cpu", help="whose teacher kernels")
    p.add_argument("--variant", default="fused", help="the teacher variant scored (naive, fused, vectorised)")
    p.add_argument("--max-tasks", type=int, default=6, help="first N tasks of each split (0: all)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default="", help="also write the report here (JSON)")
    args = p.parse_args(argv)
    if not Path(args.actor).is_dir():
        p.error(f"--actor {args.actor}: no such directory")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    report = probe(args)
    for split, summary in report["splits"].items():
        print(f"{split}: {summary['tasks']} tasks, chain body argmax-correct in {summary['body_all_correct']:.0%}, "
              f"reply loss {summary['reply_nll_mean']:.3f}, body loss {summary['body_nll_mean']:.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
