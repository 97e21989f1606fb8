"""What carrying a finished stage's weights in half precision does to the policy and the critic
(scripts/family_state.py, ``--export-dtype float16``): the stage's actor and critic as exported in
float32 against the same weights rounded to float16 and back, on trajectories the pipeline
sampled. Per policy token (``loss_mask``): the absolute difference of the log-probs of the sampled
tokens, KL(float32 || rounded) over the whole next-token distribution, whether the most likely next token is the same;
per position: the absolute difference of the critic's values. Float32 forward passes on the CPU.

Launch lines (from the repository root; STATE is a folder of exported weights: weights.json and
its parts, e.g. what benchmarks/h200/family_runs.sh returned):
    # CPU (a 4 M-parameter family actor: seconds):
    python benchmarks/bench_carry_dtype.py --weights .famstate --actor /tmp/family_actor \\
        --trajectories runs/graduated/seed0/rft/rollouts/sample.rank0.jsonl --episodes 8 --out carry.json
    # one GPU: the same with --device cuda
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from family_state import StateError, carried_state, cast_floating, read_manifest  # noqa: E402
from src.models.actor import load_actor  # noqa: E402
from src.models.critic import build_critic  # noqa: E402


def stage_state(folder: Path, key: str = "") -> tuple[str, dict]:
    """One stage's float32 ``state_dict`` from an export folder (the first listed, or ``key``)."""
    manifest = read_manifest(folder)
    key = key or next(iter(manifest), "")
    if key not in manifest:
        raise StateError(f"{folder}: no stage {key!r} (it has {', '.join(manifest) or 'none'})")
    return key, carried_state(folder, key, manifest[key])["state_dict"]


def policy_and_critic(actor_dir: str, state: dict, device: str) -> nn.Module:
    """The stage's actor and critic under the names its checkpoint uses (``actor.``, ``critic.``)."""
    holder = nn.Module()
    holder.actor = load_actor(actor_dir)
    holder.critic = build_critic(holder.actor)
    holder.load_state_dict(state)
    return holder.to(device).eval()


@torch.no_grad()
def compare(full: nn.Module, rounded: nn.Module, episodes: list[dict], device: str) -> dict:
    logprob_diff, kl, same_argmax, value_diff = [], [], [], []
    for episode in episodes:
        ids = torch.tensor([episode["token_ids"]], device=device)
        attention = torch.ones_like(ids)
        policy = torch.tensor(episode["loss_mask"], device=device).bool()
        logits = [m.actor.model(input_ids=ids, attention_mask=attention, use_cache=False).logits[0, :-1].float()
                  for m in (full, rounded)]
        logp = [torch.log_softmax(x, dim=-1) for x in logits]
        sampled = ids[0, 1:]
        mask = policy[1:]  # position t predicts token t + 1
        chosen = [lp.gather(-1, sampled[:, None])[:, 0] for lp in logp]
        logprob_diff.append((chosen[0] - chosen[1]).abs()[mask])
        p = logp[0].exp()
        kl.append((p * (logp[0] - logp[1])).sum(-1)[mask])
        same_argmax.append((logits[0].argmax(-1) == logits[1].argmax(-1))[mask].float())
        values = [m.critic(ids, attention)[0] for m in (full, rounded)]
        value_diff.append((values[0] - values[1]).abs()[1:])
    cat = lambda xs: torch.cat(xs).double()  # noqa: E731
    return {"episodes": len(episodes), "policy_tokens": int(cat(logprob_diff).numel()),
            "logprob_abs_diff_mean": cat(logprob_diff).mean().item(),
            "logprob_abs_diff_max": cat(logprob_diff).max().item(),
            "kl_mean": cat(kl).mean().item(), "kl_max": cat(kl).max().item(),
            "argmax_agreement": cat(same_argmax).mean().item(),
            "value_abs_diff_mean": cat(value_diff).mean().item(), "value_abs_diff_max": cat(value_diff).max().item()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--weights", required=True, help="a folder of exported weights (weights.json and parts)")
    p.add_argument("--stage", default="", help="which exported stage (default: the first listed)")
    p.add_argument("--actor", required=True, help="the family actor's directory (its config and tokenizer)")
    p.add_argument("--trajectories", required=True, help="a rollouts jsonl with token_ids and loss_mask")
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    try:
        key, state = stage_state(Path(args.weights), args.stage)
    except StateError as exc:
        print(f"bench_carry_dtype: {exc}", file=sys.stderr)
        return 2
    try:
        lines = Path(args.trajectories).read_text().splitlines()
        episodes = [e for e in map(json.loads, lines) if e.get("token_ids")][:args.episodes]
    except (OSError, ValueError) as exc:
        print(f"bench_carry_dtype: cannot read trajectories {args.trajectories}: {exc}", file=sys.stderr)
        return 2
    if not episodes:
        print(f"bench_carry_dtype: {args.trajectories} has no episode with token_ids", file=sys.stderr)
        return 2
    full = policy_and_critic(args.actor, state, args.device)
    rounded = policy_and_critic(args.actor, cast_floating(cast_floating(state, torch.float16), torch.float32),
                                args.device)
    report = {"stage": key, "trajectories": args.trajectories, **compare(full, rounded, episodes, args.device)}
    print(json.dumps(report, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
