"""Training throughput: our PPO stage beside TRL's PPO trainer on the same model, batch and
lengths (single-turn, the warm-up stage's shape), and the agentic stage at a fixed size through
the real sandbox.

Part 1, like for like (no sandbox on either side: the reward is synthetic, the share of reply
tokens in one half of the vocabulary, computed on the host for ours and by a reward model
forward for TRL's, which takes only a model): per step, B prompts of P tokens, replies of
exactly R tokens (no early stop), one PPO update over the batch in micro-batches of M rows,
bf16 autocast on a GPU. Reported: step seconds (median of the steps after the first), episodes
and tokens per second, our generation / update split, peak GPU memory. TRL: trl 1.12 (the last
release with PPOTrainer, in trl.experimental.ppo), run with report_to=none.

Part 2, the agentic stage (multi-turn episodes through the sandbox pool) for --agentic-steps
steps via train.py's own train(), read back from its metrics.csv: rollout and update tokens per
second, the step time split (generation / sandbox / update) and peak memory.

Launch lines (repository root):
  CPU smoke:  python benchmarks/bench_train.py --model tiny --device cpu --steps 3 --batch 4 \\
                  --prompt-tokens 32 --response-tokens 16 --micro-batch 2 --agentic-steps 2 --out bench_train_cpu.json
  1 GPU:      python benchmarks/bench_train.py --model llama_0p2b --device cuda --steps 4 --batch 32 \\
                  --prompt-tokens 512 --response-tokens 512 --micro-batch 8 --agentic-steps 3 --out bench_train.json
  N GPUs:     part 1 is single-process; part 2 takes train.py overrides, e.g. --agentic-overrides trainer=ddp trainer.devices=4
"""
from __future__ import annotations

import argparse
import copy
import csv
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

MODELS = {
    # The embedded actor (a few MB).
    "tiny": {"name_or_path": str(ROOT / "data" / "models" / "tiny_actor")},
    # ~0.2 B parameters from a config (conf/model/llama_0p2b.yaml), random weights.
    "llama_0p2b": {"tokenizer": str(ROOT / "data" / "models" / "tiny_actor"),
                   "from_config": {"hidden_size": 1024, "num_hidden_layers": 16, "num_attention_heads": 16,
                                   "intermediate_size": 2816, "max_position_embeddings": 32768,
                                   "tie_word_embeddings": True}},
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny", help=f"one of {sorted(MODELS)} or an HF directory")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=4, help="PPO steps per trainer (the first is warm-up)")
    p.add_argument("--batch", type=int, default=16, help="episodes per step (B)")
    p.add_argument("--prompt-tokens", type=int, default=256, help="P")
    p.add_argument("--response-tokens", type=int, default=256, help="R (exactly; no early stop)")
    p.add_argument("--micro-batch", type=int, default=8, help="rows per forward/backward (M)")
    p.add_argument("--skip-trl", action="store_true")
    p.add_argument("--skip-ours", action="store_true")
    p.add_argument("--agentic-steps", type=int, default=0, help="part 2: agentic steps through the sandbox (0: skip)")
    p.add_argument("--agentic-overrides", nargs="*", default=[], help="extra train.py overrides for part 2")
    p.add_argument("--out", default="", help="JSON report path")
    return p.parse_args(argv)


def model_fields(name: str) -> dict[str, Any]:
    return dict(MODELS.get(name, {"name_or_path": name}))


def prompts(tokenizer: Any, n: int, length: int, seed: int = 0) -> list[list[int]]:
    """Random token ids (specials excluded): every prompt exactly ``length`` tokens."""
    gen = torch.Generator().manual_seed(seed)
    low = len(tokenizer.all_special_ids) + 1
    return torch.randint(low, len(tokenizer), (n, length), generator=gen).tolist()


def share_in_target(ids: list[int], vocab: int) -> float:
    return sum(1 for i in ids if i < vocab // 2) / max(len(ids), 1)


def precision(device: str) -> str:
    return "bf16-mixed" if device == "cuda" else "32-true"


# ---------------------------------------------------------------------- ours

def run_ours(args: argparse.Namespace) -> dict[str, Any]:
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    from src.agent.episode import AgentConfig
    from src.data.batch import collate_rows
    from src.models import build_critic, load_actor
    from src.stages.ppo import PPOStage

    actor = load_actor(dtype="float32", **model_fields(args.model))
    critic = build_critic(actor)
    batch_prompts = prompts(actor.tokenizer, args.batch, args.prompt_tokens)
    vocab = len(actor.tokenizer)
    steps: list[dict[str, float]] = []

    class SyntheticPPO(PPOStage):
        def training_step(self, batch, batch_idx):
            policy = self.policy()
            policy.stop_ids = []  # exactly R tokens, as TRL's stop_token=None
            sync(args.device)
            start = time.monotonic()
            replies = policy.generate_batch([(p, args.response_tokens) for p in batch_prompts])
            sync(args.device)
            generated = time.monotonic()
            rows = [{"token_ids": p + r.token_ids, "loss_mask": [0] * len(p) + [1] * len(r.token_ids),
                     "logprobs": [0.0] * len(p) + list(r.logprobs), "reward": share_in_target(r.token_ids, vocab),
                     "sampling": policy.sampling} for p, r in zip(batch_prompts, replies)]
            self.ppo_update(collate_rows(rows, actor.tokenizer.pad_token_id or 0).to(self.device))
            sync(args.device)
            done = time.monotonic()
            steps.append({"generation_s": generated - start, "update_s": done - generated, "step_s": done - start})

    module = SyntheticPPO(actor, critic, AgentConfig(), actor_optimizer=lambda p: torch.optim.AdamW(p, lr=3e-6),
                          critic_optimizer=lambda p: torch.optim.AdamW(p, lr=6e-6),
                          sampling={"temperature": 1.0, "max_batch": 1}, micro_batch_size=args.micro_batch)
    reset_peak(args.device)
    trainer = pl.Trainer(accelerator="gpu" if args.device == "cuda" else "cpu", devices=1, max_steps=args.steps,
                         precision=precision(args.device), logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, train_dataloaders=DataLoader(list(range(args.steps)), batch_size=1))
    timed = steps[1:] or steps
    step_s = statistics.median(s["step_s"] for s in timed)
    return {"params": sum(p.numel() for p in actor.parameters()), "steps": steps,
            "step_s": step_s, "generation_s": statistics.median(s["generation_s"] for s in timed),
            "update_s": statistics.median(s["update_s"] for s in timed),
            "episodes_per_s": args.batch / step_s,
            "generated_tokens_per_s": args.batch * args.response_tokens / statistics.median(s["generation_s"] for s in timed),
            "update_tokens_per_s": args.batch * (args.prompt_tokens + args.response_tokens)
                                   / statistics.median(s["update_s"] for s in timed),
            "peak_memory_gb": peak_gb(args.device)}


# ---------------------------------------------------------------------- TRL

def run_trl(args: argparse.Namespace) -> dict[str, Any]:
    import transformers
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, TrainerCallback
    from trl.experimental.ppo import PPOConfig, PPOTrainer

    from src.models import load_actor

    actor = load_actor(dtype="float32", **model_fields(args.model))
    policy, tokenizer = actor.model, actor.tokenizer
    config = copy.deepcopy(policy.config)
    config.num_labels = 1
    value_model = AutoModelForSequenceClassification.from_config(config)
    reward_model = AutoModelForSequenceClassification.from_config(config)
    ref_model = copy.deepcopy(policy)
    dataset = Dataset.from_dict({"input_ids": prompts(tokenizer, args.batch * args.steps, args.prompt_tokens)})
    stamps: list[float] = []

    class StepTimes(TrainerCallback):
        def on_step_end(self, *a, **k):
            sync(args.device)
            stamps.append(time.monotonic())

    with tempfile.TemporaryDirectory() as out:
        ppo_args = PPOConfig(
            output_dir=out, per_device_train_batch_size=args.micro_batch,
            gradient_accumulation_steps=max(1, args.batch // args.micro_batch), num_mini_batches=1, num_ppo_epochs=1,
            total_episodes=args.batch * args.steps, response_length=args.response_tokens, stop_token=None,
            temperature=1.0, learning_rate=3e-6, kl_coef=0.0, missing_eos_penalty=None, report_to="none",
            save_strategy="no", num_sample_generations=0, local_rollout_forward_batch_size=args.micro_batch,
            bf16=args.device == "cuda", use_cpu=args.device == "cpu", logging_steps=1, dataloader_num_workers=0,
            seed=0)
        trainer = PPOTrainer(args=ppo_args, processing_class=tokenizer, model=policy, ref_model=ref_model,
                             reward_model=reward_model, train_dataset=dataset, value_model=value_model,
                             callbacks=[StepTimes()])
        reset_peak(args.device)
        sync(args.device)
        start = time.monotonic()
        trainer.train()
    times = [b - a for a, b in zip([start] + stamps, stamps)]
    timed = times[1:] or times
    step_s = statistics.median(timed)
    return {"trl_version": __import__("trl").__version__, "transformers": transformers.__version__,
            "steps": times, "step_s": step_s, "episodes_per_s": args.batch / step_s,
            "tokens_per_s": args.batch * (args.prompt_tokens + args.response_tokens) / step_s,
            "peak_memory_gb": peak_gb(args.device)}


# ---------------------------------------------------------------------- part 2

def run_agentic(args: argparse.Namespace) -> dict[str, Any]:
    from hydra import compose, initialize_config_dir

    import train

    with tempfile.TemporaryDirectory() as out:
        overrides = [f"output_dir={out}", "stage=agentic_rl", f"trainer.max_steps={args.agentic_steps}",
                     "trainer.val_check_interval=1000", "trainer.enable_progress_bar=false", "export_actor=false",
                     f"trainer={'gpu' if args.device == 'cuda' else 'cpu'}"]
        if args.model in MODELS and args.model != "tiny":
            overrides.append(f"model={args.model}")
        elif args.model not in MODELS:
            overrides += ["model=hf", f"model.actor.name_or_path={args.model}"]
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            cfg = compose(config_name="train", overrides=overrides + list(args.agentic_overrides))
        start = time.monotonic()
        train.train(cfg)
        wall = time.monotonic() - start
        with open(Path(out) / "metrics.csv") as f:
            rows = [r for r in csv.DictReader(f) if r.get("perf/step_s")]
    keys = ["perf/step_s", "perf/rollout_s", "perf/generation_s", "perf/sandbox_s", "perf/update_s",
            "perf/rollout_tokens_per_s", "perf/update_tokens_per_s", "perf/peak_memory_gb", "rollout/reward_mean",
            "rollout/episodes", "rollout/tokens_mean", "rollout/turns_mean", "rollout/drift_episodes"]
    timed = rows[1:] or rows
    return {"overrides": overrides + list(args.agentic_overrides), "wall_s": wall, "steps": len(rows),
            "median": {k: statistics.median(float(r[k]) for r in timed if r.get(k)) for k in keys
                       if any(r.get(k) for r in timed)},
            "per_step": [{k: float(r[k]) for k in keys if r.get(k)} for r in rows]}


# ---------------------------------------------------------------------- helpers

def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def reset_peak(device: str) -> None:
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()


def peak_gb(device: str) -> float | None:
    return torch.cuda.max_memory_allocated() / 2 ** 30 if device == "cuda" else None


def markdown(report: dict[str, Any]) -> str:
    a = report["args"]
    lines = [f"model {a['model']} on {a['device']}: B={a['batch']}, P={a['prompt_tokens']}, R={a['response_tokens']}, "
             f"M={a['micro_batch']}, {a['steps']} steps (median of steps 2..)", "",
             "| trainer | step s | episodes/s | generation s | update s | peak GB |", "|---|---|---|---|---|---|"]
    ours, trl = report.get("ours"), report.get("trl")
    if ours:
        lines.append(f"| ours | {ours['step_s']:.3f} | {ours['episodes_per_s']:.2f} | {ours['generation_s']:.3f} | "
                     f"{ours['update_s']:.3f} | {fmt(ours['peak_memory_gb'])} |")
    if trl:
        lines.append(f"| TRL {trl['trl_version']} PPOTrainer | {trl['step_s']:.3f} | {trl['episodes_per_s']:.2f} | - | - | "
                     f"{fmt(trl['peak_memory_gb'])} |")
    if report.get("agentic"):
        med = report["agentic"]["median"]
        lines += ["", "agentic stage through the sandbox (medians): " + ", ".join(f"{k} {v:.3g}" for k, v in med.items())]
    return "\n".join(lines)


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda but no CUDA GPU is visible (use --device cpu)")
    report: dict[str, Any] = {"args": vars(args), "torch": torch.__version__,
                              "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None}
    parts = [("ours", run_ours, not args.skip_ours), ("trl", run_trl, not args.skip_trl),
             ("agentic", run_agentic, bool(args.agentic_steps))]
    for name, run, wanted in parts:
        if not wanted:
            continue
        start = time.monotonic()
        report[name] = run(args)
        report[name]["part_wall_s"] = time.monotonic() - start
        if args.out:  # after every part: a run cut short still leaves what it measured
            Path(args.out).write_text(json.dumps(report, indent=2))
        print(f"{name} done in {report[name]['part_wall_s']:.1f} s", file=sys.stderr, flush=True)
    print(markdown(report))
    return report


if __name__ == "__main__":
    main()
