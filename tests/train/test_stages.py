"""Every stage runs on CPU at tiny size through the real sandbox, and init_from carries each
stage's checkpoint into the next: warm-up -> RFT (on an expert trajectory) -> value pretraining
-> agentic PPO. Plus what one run writes (checkpoints, metrics.csv, rollouts) and the errors a
user sees for unusable input."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch


def ckpt_state(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]


def part(state: dict, name: str) -> dict[str, torch.Tensor]:
    return {k: v for k, v in state.items() if k.startswith(name + ".")}


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def metric_columns(run: Path) -> tuple[list[str], list[dict]]:
    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    return (list(rows[0]) if rows else []), rows


def test_the_four_stages_chain_through_init_from(compose_train, expert_trajectories, tmp_path):
    chain_four_stages(compose_train, expert_trajectories, tmp_path, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("model", ["tiny", "llama_0p2b"])
def test_the_four_stages_chain_on_the_gpu(compose_train, expert_trajectories, tmp_path, tiny_model_dir, model):
    """The same chain trained in bf16 on the GPU, with the sandbox timing on it too (the device
    gate keeps them apart): the tiny test model, and a ~0.2 B Llama built from its config (with
    the test tokenizer, which the expert trajectory was tokenised with)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    chosen = () if model == "tiny" else ("model=llama_0p2b", f"model.actor.tokenizer={tiny_model_dir}")
    chain_four_stages(compose_train, expert_trajectories, tmp_path, "cuda", chosen)


def chain_four_stages(compose_train, expert_trajectories, tmp_path, device: str, model: tuple = ()) -> None:
    from train import train

    def compose(*extra, out_dir):
        return compose_train(*extra, out_dir=out_dir, device=device, model=model)

    warmup = tmp_path / "warmup"
    train(compose("stage=warmup", out_dir=warmup))
    columns, rows = metric_columns(warmup)
    for name in ("rollout/reward_mean", "rollout/pass_rate", "actor/loss", "actor/entropy", "actor/clip_fraction",
                 "actor/logprob_mismatch", "actor/grad_norm", "critic/loss", "critic/explained_var",
                 "perf/step_s", "perf/generation_s", "perf/sandbox_s", "perf/update_s", "perf/peak_memory_gb"):
        assert name in columns, name
    episodes = [json.loads(line) for line in (warmup / "rollouts" / "train.jsonl").read_text().splitlines()]
    assert len(episodes) == 4 and {e["mode"] for e in episodes} == {"single_turn"}
    assert sorted({e["train_step"] for e in episodes}) == [0, 1]
    warm = ckpt_state(warmup)

    rft = tmp_path / "rft"
    train(compose("stage=rft", f"init_from={warmup}", f"stage.module.trajectories={expert_trajectories}",
                  out_dir=rft))
    after_rft = ckpt_state(rft)
    assert not same(part(after_rft, "actor"), part(warm, "actor"))  # SFT changed the actor
    assert same(part(after_rft, "critic"), part(warm, "critic"))  # the warm-up critic, carried
    columns, rows = metric_columns(rft)
    assert "actor/sft_loss" in columns and float(next(r["rft/kept"] for r in rows if r.get("rft/kept"))) == 1

    value = tmp_path / "value"
    train(compose("stage=value_pretrain", f"init_from={rft}",
                  f"stage.module.trajectories={expert_trajectories}", out_dir=value))
    after_value = ckpt_state(value)
    assert same(part(after_value, "actor"), part(after_rft, "actor"))  # the RFT actor, carried
    assert not same(part(after_value, "critic"), part(after_rft, "critic"))

    agentic = tmp_path / "agentic"
    start = ("stage.module.validate_at_start=true", "trainer.val_check_interval=2")
    train(compose("stage=agentic_rl", f"init_from={value}", "trainer.max_steps=1", *start, out_dir=agentic))
    train(compose("stage=agentic_rl", f"init_from={value}", "ckpt_path=last", *start, out_dir=agentic))  # resumed
    episodes = [json.loads(line) for line in (agentic / "rollouts" / "train.jsonl").read_text().splitlines()]
    assert {e["mode"] for e in episodes} == {"multi_turn"}
    # The first rollout batch was sampled by the value stage's actor: version 0 of this run.
    assert {e["policy_version"][0]
            for e in episodes if e["train_step"] == 0} == {0}
    # Held-out episodes before the first step (the actor it starts from), once: not again on
    # resume; then Lightning's validation after the second update.
    held_out = [json.loads(line) for line in (agentic / "rollouts" / "val.jsonl").read_text().splitlines()]
    assert sorted({e["train_step"] for e in held_out}) == [0, 2]
    assert len([e for e in held_out if e["train_step"] == 0]) == len([e for e in held_out if e["train_step"] == 2])
    assert {e["policy_version"][0] for e in held_out if e["train_step"] == 0} == {0}
    _, rows = metric_columns(agentic)
    # Logged at step -1 (before any update) and at step 1 (Lightning's, after updates 0 and 1).
    assert [int(r["step"]) for r in rows if r.get("val/reward_mean")] == [-1, 1]

    # The value stage's actor judged again alone (another host's before point): its held-out
    # episodes at step -1, then the run stops before any rollout or update.
    # Greedily (sampling.val_temperature=0): the held-out rows record the distribution they were drawn from.
    judge = tmp_path / "judge"
    train(compose("stage=agentic_rl", f"init_from={value}", "stage.module.judge_only=true",
                  "sampling.val_temperature=0", out_dir=judge))
    held_out = [json.loads(line) for line in (judge / "rollouts" / "val.jsonl").read_text().splitlines()]
    assert held_out and {e["policy_version"][0] for e in held_out} == {0}
    assert {e["sampling"]["temperature"] for e in held_out} == {0.0}
    assert {e["sampling"]["temperature"] for e in episodes} == {1.0}  # the PPO stage's rollouts
    assert not (judge / "rollouts" / "train.jsonl").exists()
    _, rows = metric_columns(judge)
    assert [int(r["step"]) for r in rows if r.get("val/reward_mean")] == [-1]
    assert not any(r.get("rollout/reward_mean") or r.get("actor/loss") for r in rows)


def test_lora_model_group_trains_adapters_only(compose_train, tmp_path, tiny_model_dir):
    from train import train

    run = tmp_path / "lora"
    train(compose_train("stage=warmup", "model=lora", f"model.actor.name_or_path={tiny_model_dir}",
                        "model.actor.dtype=float32", "model.actor.gradient_checkpointing=false",
                        "trainer.max_steps=1", "model.actor.lora.target_modules=[q_proj,v_proj]", out_dir=run))
    actor = part(ckpt_state(run), "actor")
    assert any("lora_A" in k for k in actor)


def test_rollouts_sampled_colder_are_trained_at_their_temperature(compose_train, tmp_path):
    """sampling.temperature below 1 (the family's rollouts, where T = 1 derails a small model's
    long replies): the rows record it and the update's log-probs are taken at it, so the
    trainer's old log-probs agree with the sampler's (at T = 1 they would differ by the
    temperature's whole effect)."""
    from train import train

    run = tmp_path / "cold"
    train(compose_train("stage=agentic_rl", "trainer.max_steps=1", "sampling.temperature=0.5", out_dir=run))
    episodes = [json.loads(line) for line in (run / "rollouts" / "train.jsonl").read_text().splitlines()]
    assert episodes and {e["sampling"]["temperature"] for e in episodes} == {0.5}
    _, rows = metric_columns(run)
    mismatch = [float(r["actor/logprob_mismatch"]) for r in rows if r.get("actor/logprob_mismatch")]
    assert mismatch and max(mismatch) < 1e-3


def test_unusable_input_is_one_clear_error(compose_train, tmp_path, monkeypatch):
    from src.data.tasks import TaskSetError
    from src.models import ModelLoadError
    from src.stages.common import InitError
    from train import UsageError, train

    with pytest.raises(InitError, match="no such checkpoint"):
        train(compose_train("init_from=/does/not/exist.ckpt"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskSetError, match="no usable task"):
        train(compose_train(f"data.tasks={tmp_path / 'empty'}"))
    with pytest.raises(UsageError, match="greedy episodes of one task repeat"):
        train(compose_train("sampling.val_temperature=0", "data.val_samples_per_task=2"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="cannot load model 'no-org/no-model'"):
        train(compose_train("model.actor.name_or_path=no-org/no-model"))
    assert not (tmp_path / "run" / "checkpoints").exists()  # nothing a resume would trust


def test_cli_errors_exit_2_with_one_line(run_train, tmp_path):
    out = run_train(tmp_path / "a", "stage=nope", small=False, timeout=120)
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0, out.stderr
    assert "stage=nope is not a stage config" in out.stderr and "agentic_rl" in out.stderr
    # One error raised inside train() (the others are checked in-process above).
    bad, says = ("init_from=/does/not/exist.ckpt", "error: init_from") if torch.cuda.is_available() else \
        ("trainer=gpu", "error: trainer=gpu needs a CUDA GPU")
    out = run_train(tmp_path / "b", bad, timeout=300)
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1].startswith(says), out.stderr[-2000:]
