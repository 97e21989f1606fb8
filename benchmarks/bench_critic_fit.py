"""How well a stage's critic predicts the outcome of trajectories, on those it trained on and on
fresh ones (another stage's rollouts of the same actor).

The explained variance a PPO or value stage logs (critic/explained_var) compares the critic's
values with GAE targets that are themselves built from those values at lambda < 1, so a critic
can score well there while knowing little of the outcome. This measures it against the outcome
itself: with gamma 1 and the reward on the last token, the Monte-Carlo return of every policy
token is the episode's reward.

    # CPU, any machine (a forward pass of the critic per trajectory):
    python benchmarks/bench_critic_fit.py --stage RUNS/graduated/seed0/value \
        --trajectories RUNS/graduated/seed0/rft/rollouts/sample.rank0.jsonl \
        --trajectories RUNS/graduated/seed0/agentic_full/rollouts/train.jsonl --out critic_fit.json

Per trajectory file (JSON, one object per file, printed and written to --out):
    ev_outcome       explained variance of the values against the outcome on every policy token
    ev_gae           against the GAE(--lam) targets built from the same values (what stages log)
    first_token_corr correlation over episodes of V at the first policy token with the outcome
    value_mean, outcome_mean   token means (a critic that only learned the mean has ev ~ 0)
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from src.data.batch import collate_rows  # noqa: E402
from src.models import build_critic  # noqa: E402
from src.models.actor import Actor, load_tokenizer  # noqa: E402
from src.rl import explained_variance, gae_through_tools, masked_mean, outcome_rewards  # noqa: E402
from src.stages.common import load_init  # noqa: E402


class Parts(nn.Module):
    """The actor and critic under the names a stage's checkpoint uses."""

    def __init__(self, actor: nn.Module, critic: nn.Module):
        super().__init__()
        self.actor, self.critic = actor, critic


def stage_architecture(actor_dir: Path) -> Actor:
    """The stage's actor architecture and tokenizer from its exported config, weights left as
    placeholders: load_init replaces every critic weight from the checkpoint (a missing one is an
    error), so whether ``actor_dir`` also holds model files (a stage returned from a device call
    or unpacked from a carry does not: its weights travel in the checkpoint) does not matter."""
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(actor_dir))
    return Actor(model, load_tokenizer(str(actor_dir)), f"{actor_dir} (architecture)")


def load_critic(stage: Path) -> tuple[nn.Module, int]:
    """The stage's critic (its checkpoint's weights over the stage's exported actor config)."""
    actor = stage_architecture(stage / "actor")
    parts = Parts(actor, build_critic(actor))
    load_init(parts, stage, need=("critic",))
    return parts.critic.eval(), actor.tokenizer.pad_token_id


def read_rows(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    usable = [r for r in rows if r.get("token_ids") and sum(r.get("loss_mask", [])) > 0]
    if not usable:
        raise SystemExit(f"{path}: no trajectory rows with token ids and policy tokens")
    return usable


@torch.no_grad()
def fit(critic: nn.Module, pad_id: int, rows: list[dict], lam: float) -> dict[str, float]:
    """Values of every row (one at a time: CPU memory), against outcome and GAE targets."""
    values, outcomes, targets, first = [], [], [], []
    for row in rows:
        batch = collate_rows([row], pad_id)
        mask = batch.policy_mask
        v = critic(batch.ids, batch.attention).float()
        _, returns = gae_through_tools(outcome_rewards(batch.rewards, mask), v, mask, 1.0, lam)
        values.append(v[mask.bool()])
        targets.append(returns[mask.bool()])
        outcomes.append(torch.full_like(values[-1], float(row["reward"])))
        first.append((float(values[-1][0]), float(row["reward"])))
    v, o, g = (torch.cat(x)[None] for x in (values, outcomes, targets))
    m = torch.ones_like(v)  # the tokens kept are the policy tokens
    firsts = torch.tensor(first)
    corr = torch.corrcoef(firsts.T)[0, 1] if len(first) > 1 else torch.tensor(math.nan)
    return {"episodes": len(rows), "tokens": int(m.sum()), "ev_outcome": float(explained_variance(v, o, m)),
            "ev_gae": float(explained_variance(v, g, m)), "first_token_corr": float(corr),
            "value_mean": float(masked_mean(v, m)), "outcome_mean": float(masked_mean(o, m)),
            "episode_outcome_mean": float(firsts[:, 1].mean())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", type=Path, required=True, help="a stage directory with actor/ and checkpoints/")
    parser.add_argument("--trajectories", type=Path, action="append", required=True, help="a rollouts jsonl (repeat)")
    parser.add_argument("--lam", type=float, default=0.95, help="GAE lambda of the ev_gae targets")
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    for path in [args.stage, *args.trajectories]:
        if not path.exists():
            parser.error(f"{path}: no such file or directory")
    if not (args.stage / "actor" / "config.json").is_file():
        parser.error(f"{args.stage}: no actor/config.json (the stage's exported actor: its architecture)")
    critic, pad_id = load_critic(args.stage)
    results = {"stage": str(args.stage), "lam": args.lam, "files": {}}
    for path in args.trajectories:
        results["files"][str(path)] = fit(critic, pad_id, read_rows(path), args.lam)
        print(json.dumps({"file": str(path), **results["files"][str(path)]}), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
