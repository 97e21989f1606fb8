"""The task family's whole toy pipeline at minimal size, so it cannot rot: a tiny actor trained
from scratch (tokenizer on the project's kernel corpus, behaviour cloning on real teacher
episodes through the CPU sandbox: scripts/make_family_actor.py), then warm-up -> RFT -> value
pretraining -> agentic PPO as four train.py runs (scripts/family_pipeline.py), a rerun that
skips every finished stage, and the plots (scripts/plot_family.py)."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import family_pipeline as fp  # noqa: E402
import make_family_actor as mfa  # noqa: E402
import plot_family  # noqa: E402
from src.agent.episode import SingleReplyTokens  # noqa: E402


@pytest.fixture(scope="module")
def family_actor(tmp_path_factory, sandbox_cache) -> Path:
    """One multi-turn and one single-turn teacher episode on one family task, a 145k-parameter
    Llama cloned on them for a few steps."""
    out = tmp_path_factory.mktemp("family") / "actor"
    mfa.main(["--out", str(out), "--max-tasks", "1", "--episodes", "1", "--single-turn", "1", "--size", "tiny",
              "--steps", "6", "--lr", "1e-2", "--vocab-size", "600", "--pretrain-snippets", "3",
              "--pretrain-steps", "2", "--pretrain-batch-size", "2", "--cache-dir", str(sandbox_cache),
              "--workers", "1", "--timing-repeats", "3", "--no-compile-baseline", "--no-progress"])
    return out


def tiny_settings(actor: Path, sandbox_cache: Path) -> fp.Settings:
    """Every size at its smallest; RFT keeps any sampled episode (a 6-step clone rarely earns
    reward > 0, and the stage must still run)."""
    extra = ["trainer.enable_progress_bar=false", f"sandbox.cache_dir={sandbox_cache}",
             "sandbox.compile_baseline=false", "sandbox.timing.warmup=1", "sandbox.timing.warmup_ms=0",
             "sandbox.timing.repeats=3", "sandbox.build_workers=1", "data.episodes_in_flight=2",
             "agent.max_consecutive_invalid=1", "sampling.max_batch=2", "export_actor=false",
             "rft:stage.module.min_reward=-2", "rft:+stage.module.filters.max_invalid_tool_calls=100"]
    return fp.Settings(actor=str(actor), steps=(1, 1, 1, 2), val_every=1, tasks_per_step=1, samples_per_task=2,
                       max_tasks=1, val_tasks=1, max_turns=2, max_new_tokens=12, extra=extra)


@pytest.fixture(scope="module")
def pipeline_run(family_actor, sandbox_cache, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("family_runs")
    statuses = fp.run_pipeline(out, [0], ["graduated"], ["full"], tiny_settings(family_actor, sandbox_cache))
    assert set(statuses.values()) == {"done"}, statuses
    return out


def test_the_actor_is_cloned_from_teacher_episodes_of_training_tasks(family_actor):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    build = json.loads((family_actor / "build.json").read_text())
    assert build["demonstrations"] == 2 and set(build["rewards"]) == {"multi_turn", "single_turn"}
    assert build["training"]["final_loss"] < build["training"]["first_loss"]  # cloning learned something
    model = AutoModelForCausalLM.from_pretrained(family_actor)
    assert sum(p.numel() for p in model.parameters()) == build["parameters"]
    # The tokenizer was trained on the teacher's kernels: their code is a few characters a token.
    tokenizer = AutoTokenizer.from_pretrained(family_actor)
    rows, specs = mfa.training_specs(str(ROOT / "data" / "family" / "cpu" / "tasks.parquet"), 1)
    kernel = mfa.corpus_texts(specs, "cpu")[2]
    assert len(tokenizer(kernel)["input_ids"]) < len(kernel) / 2.5
    assert {r["split"] for r in mfa.training_specs(str(ROOT / "data" / "family" / "cpu" / "tasks.parquet"), 0)[0]} == {"train"}


def test_snippets_label_a_training_tasks_reply_after_its_code_and_are_cloned_first(family_actor):
    from transformers import AutoTokenizer

    from data_gen.dataset import load_tasks

    pretraining = json.loads((family_actor / "build.json").read_text())["training"]["pretraining"]
    assert pretraining["snippets"] == 3 and pretraining["steps"] == 2 and pretraining["batch_size"] == 2
    tokenizer = AutoTokenizer.from_pretrained(family_actor)
    snippets = mfa.snippet_examples(8, "cpu", tokenizer, seed=0)
    held_out = {r["signature"] for r in load_tasks(str(ROOT / "data" / "family" / "cpu" / "tasks.parquet"))
                if r["split"] == "heldout"}
    assert len(snippets) == 8
    for ids, mask in snippets:
        first = mask.index(1)
        prompt, reply = tokenizer.decode(ids[:first]), tokenizer.decode(ids[first:])
        assert set(mask[:first]) == {0} and set(mask[first:]) == {1} and ids[-1] == tokenizer.eos_token_id
        assert prompt.startswith('"""Family task fam_') and "class Model(nn.Module)" in prompt
        assert '"path": "kernels/chain.cpp"' in reply and '"path": "model_new.py"' in reply
        assert "family_binding" not in reply and "<|im_start|>" not in prompt + reply  # no chat turns
        words = prompt.split('"""')[3]  # Model's docstring, e.g. "relu -> tanh, then sum over the last dim"
        ops, _, tail = words.partition(", then ")
        signature = ops.replace(" -> ", ">") + "|" + (tail.split(" over ")[0] if tail else "none")
        assert signature.split("|")[0] and signature not in held_out


def test_unjudged_corpus_demonstrations_tokenise_as_judged_episodes_do(family_actor):
    import random

    from transformers import AutoTokenizer

    from data_gen.dataset import load_tasks

    tasks = str(ROOT / "data" / "family" / "cpu" / "tasks.parquet")
    work = family_actor.with_name(family_actor.name + "_work")
    recorded = json.loads((work / "demos_single.jsonl").read_text().splitlines()[0])
    rows, specs = mfa.training_specs(tasks, 1)
    variant, reply = mfa.single_turn_reply(specs[0], "cpu", random.Random("single:0:0"))  # the fixture's episode 0
    assert recorded["episode_id"].endswith(variant)
    tokenizer = AutoTokenizer.from_pretrained(work / "tokenizer")
    assert SingleReplyTokens(tokenizer, mfa.single_turn_config(), "cpu").tokens(rows[0]["code"], reply) == \
        (recorded["token_ids"], recorded["loss_mask"])
    corpus = mfa.corpus_demonstrations(6, "cpu", tokenizer, seed=0)
    held_out = {r["signature"] for r in load_tasks(tasks) if r["split"] == "heldout"}
    assert len(corpus) == 6 and not held_out & {r["signature"] for r in corpus}
    assert all(sum(r["loss_mask"]) > 50 and r["policy"].split("_", 1)[1] in mfa.CORPUS_VARIANTS for r in corpus)


def test_the_four_stages_run_in_order_from_each_others_checkpoints(pipeline_run):
    run = pipeline_run / "graduated" / "seed0"
    for stage in ("warmup", "rft", "value", "agentic_full"):
        assert (run / stage / fp.DONE).exists() and (run / stage / "checkpoints" / "last.ckpt").exists(), stage
    log = (run / "agentic_full" / "pipeline.log").read_text()
    assert f"init_from {run / 'value'}: {{'actor'" in log and "'critic'" in log
    # Value pretraining fitted the trajectories RFT sampled, as the paper's recipe does.
    assert f"stage.module.trajectories={run / 'rft' / 'rollouts' / 'sample.rank0.jsonl'}" in \
        (run / "value" / fp.DONE).read_text()
    ppo = plot_family.read_metrics(run / "agentic_full" / "metrics.csv")
    for key, _ in plot_family.CURVES + plot_family.HELDOUT:
        assert ppo.get(key), key
    assert [step for step, _ in ppo["rollout/reward_mean"]] == [0, 1]
    # Held-out: the actor PPO starts from (step -1), then after each update; RFT's actor is
    # validated there, not in the RFT stage.
    assert [step for step, _ in ppo["val/reward_mean"]] == [-1, 0, 1]
    assert not plot_family.read_metrics(run / "rft" / "metrics.csv").get("val/reward_mean")


def test_a_rerun_skips_finished_stages_and_the_plots_are_written(pipeline_run, family_actor, sandbox_cache, tmp_path):
    start = time.monotonic()
    statuses = fp.run_pipeline(pipeline_run, [0], ["graduated"], ["full"], tiny_settings(family_actor, sandbox_cache))
    assert set(statuses.values()) == {"skipped"} and time.monotonic() - start < 10
    assert plot_family.main(["--runs", str(pipeline_run), "--out", str(tmp_path)]) == 0
    for name in ("family_curves.png", "family_heldout.png", "family_summary.md"):
        assert (tmp_path / name).stat().st_size > 0
    summary = json.loads((tmp_path / "family_summary.json").read_text())
    assert summary["graduated/full"]["aggregate"]["after_ppo"]["val/pass_rate"]["n"] == 1


def test_the_no_value_ablation_starts_from_the_rft_actor_alone(pipeline_run):
    rft = pipeline_run / "graduated" / "seed0" / "rft"
    actor_only = torch.load(fp.write_actor_only(rft), map_location="cpu", weights_only=False)["state_dict"]
    full = torch.load(rft / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    assert actor_only and all(k.startswith("actor.") for k in actor_only)
    assert any(k.startswith("critic.") for k in full)  # RFT carried the warm-up critic; the ablation drops it
    assert all(torch.equal(v, full[k]) for k, v in actor_only.items())


def test_the_no_value_start_cut_from_value_pretraining_is_the_rft_actor(pipeline_run, tmp_path):
    """Where RFT's weights did not travel and the value stage's did, the no-value ablation starts
    from the value stage's actor: the same tensors as RFT's (value pretraining trains the critic
    alone), without the critic it trained."""
    import shutil

    import family_state

    prefix = tmp_path / "graduated" / "seed0"
    shutil.copytree(pipeline_run / "graduated" / "seed0", prefix, ignore=shutil.ignore_patterns(fp.ACTOR_ONLY))
    (prefix / "rft" / family_state.CHECKPOINT).unlink()
    source = family_state.actor_only_source(prefix, fp.DONE)
    assert source == prefix / "value"
    from_value = torch.load(fp.write_actor_only(source), map_location="cpu", weights_only=False)["state_dict"]
    rft = pipeline_run / "graduated" / "seed0" / "rft" / family_state.CHECKPOINT
    rft_state = torch.load(rft, map_location="cpu", weights_only=False)["state_dict"]
    value_state = torch.load(source / family_state.CHECKPOINT, map_location="cpu", weights_only=False)["state_dict"]
    assert from_value and all(k.startswith("actor.") for k in from_value)
    assert {k for k in rft_state if k.startswith("actor.")} == from_value.keys()
    assert all(torch.equal(v, rft_state[k]) for k, v in from_value.items())
    # The critic value pretraining trained is left behind (it differs from the one RFT carried).
    critic = [k for k in value_state if k.startswith("critic.")]
    assert critic and any(not torch.equal(value_state[k], rft_state[k]) for k in critic)


def test_a_start_killed_before_its_first_checkpoint_restarts_and_its_log_is_kept(tmp_path):
    stage = tmp_path / "graduated" / "seed0" / "warmup"
    stage.mkdir(parents=True)
    (stage / "pipeline.log").write_text("baselines of 36 tasks ready in 410 s\n")
    (stage / "metrics.csv").write_text("step\n")  # no checkpoint: nothing of it can be resumed
    status = fp.run_stage(stage, ["stage=no_such_stage"], None, tmp_path / "pipeline.jsonl")
    assert status == "failed" and not (stage / "metrics.csv").exists()
    assert "410 s" in (stage.parent / "warmup.killed.log").read_text()
    assert "410 s" not in (stage / "pipeline.log").read_text()  # the new start's own log
    entry = json.loads((tmp_path / "pipeline.jsonl").read_text())
    # The journal names the machine (the sandbox's name for its CPU; no GPU visible here).
    assert entry["status"] == "failed" and entry["host"].startswith("cpu:")
    assert entry["host"].split(", gpu:")[0].endswith(f" x{os.cpu_count()}")


def test_each_ablation_needs_its_stages_once_in_order():
    names = lambda ablations: [s.name for s in fp.stages_for(ablations)]  # noqa: E731
    assert names(["full"]) == ["warmup", "rft", "value", "agentic_full"]
    assert names(["no_rft"]) == ["warmup", "value_no_rft", "agentic_no_rft"]
    assert names(["no_value"]) == ["warmup", "rft", "agentic_no_value"]
    assert names(list(fp.ABLATIONS)) == ["warmup", "rft", "value", "agentic_full", "value_no_rft", "agentic_no_rft",
                                         "agentic_no_value"]


def test_stage_overrides_chain_init_from_and_scope_per_stage_settings(tmp_path):
    settings = fp.Settings(actor="/models/a", steps=(3, 4, 5, 6), extra=["rft:stage.module.min_reward=-2", "x=1"])
    over = {s.name: fp.stage_overrides(s, tmp_path, "binary", 7, settings) for s in fp.stages_for(list(fp.ABLATIONS))}
    assert "trainer.max_steps=3" in over["warmup"] and not any(o.startswith("init_from") for o in over["warmup"])
    assert not any(o.startswith("agent.max_turns") for o in over["warmup"])  # the warm-up stays single-turn
    assert f"init_from={tmp_path / 'warmup'}" in over["value_no_rft"]
    assert not any("trajectories" in o for o in over["value_no_rft"])  # samples with the warm-up actor
    assert f"init_from={tmp_path / 'rft_actor_only' / 'actor_only.ckpt'}" in over["agentic_no_value"]
    assert all("reward=binary" in o and "seed=7" in o and "x=1" in o for o in over.values())
    assert [n for n, o in over.items() if "stage.module.min_reward=-2" in o] == ["rft"]
    # Every PPO stage validates the actor it starts from; RFT does not validate (that is its actor).
    assert sorted(n for n, o in over.items() if "stage.module.validate_at_start=true" in o) == \
        ["agentic_full", "agentic_no_rft", "agentic_no_value"]
    assert [n for n, o in over.items() if "trainer.limit_val_batches=0" in o] == ["rft"]
    assert all("data.val_samples_per_task=1" in o for o in over.values())
    assert not any(o.startswith("sampling.val_temperature") for o in over["agentic_full"])  # the rollouts'
    greedy = fp.stage_overrides(fp.STAGES["agentic_full"], tmp_path, "binary", 7,
                                fp.Settings(actor="/models/a", val_temperature=0.0))
    assert "sampling.val_temperature=0.0" in greedy
    not_first = fp.stage_overrides(fp.STAGES["agentic_no_value"], tmp_path, "binary", 7, settings,
                                   validate_at_start=False)
    assert "stage.module.validate_at_start=false" in not_first


def test_one_ppo_stage_per_seed_and_start_actor_validates_it_and_the_others_name_it(tmp_path):
    shared = fp.Settings(actor="/models/a", reward_stages="agentic")
    (chain,) = fp.plan_chains(tmp_path, [0], list(fp.REWARDS), list(fp.ABLATIONS), shared)
    rel = lambda p: p.relative_to(tmp_path).as_posix()  # noqa: E731
    validators = {rel(k): rel(v) for k, v in fp.start_validators(chain).items()}
    assert len(validators) == 9 and set(validators.values()) == {"graduated/seed0/agentic_full",
                                                                 "graduated/seed0/agentic_no_rft"}
    assert validators["binary/seed0/agentic_no_value"] == "graduated/seed0/agentic_full"  # both RFT's actor
    assert validators["continuous/seed0/agentic_no_rft"] == "graduated/seed0/agentic_no_rft"  # the warm-up's
    separate = fp.plan_chains(tmp_path, [0], ["graduated", "binary"], ["full", "no_value"], fp.Settings(actor="a"))
    assert [sorted({rel(v) for v in fp.start_validators(c).values()}) for c in separate] == \
        [["graduated/seed0/agentic_full"], ["binary/seed0/agentic_full"]]  # each reward its own RFT

    # Run the chain with every stage already done: the stages that did not validate name the one that did.
    for run in chain:
        run.stage_dir.mkdir(parents=True)
        (run.stage_dir / fp.DONE).write_text("{}\n")
    (tmp_path / "graduated" / "seed0" / fp.ACTOR_ONLY).mkdir()
    (tmp_path / "graduated" / "seed0" / fp.ACTOR_ONLY / "actor_only.ckpt").write_bytes(b"")
    statuses: dict[str, str] = {}
    fp.run_chain(chain, shared, None, tmp_path / "pipeline.jsonl", statuses)
    assert set(statuses.values()) == {"skipped"}
    pointers = {rel(p.parent): json.loads(p.read_text())["stage"] for p in tmp_path.glob(f"*/seed0/*/{fp.START_VALIDATION}")}
    assert pointers == {k: v for k, v in validators.items() if k != v} and len(pointers) == 7


def test_shared_stages_put_every_rewards_ppo_on_one_graduated_prefix(tmp_path):
    settings = fp.Settings(actor="/models/a", reward_stages="agentic")
    agentic = fp.STAGES["agentic_full"]
    over = fp.stage_overrides(agentic, tmp_path / "binary" / "seed0", "binary", 0, settings, tmp_path / "graduated" / "seed0")
    assert f"init_from={tmp_path / 'graduated' / 'seed0' / 'value'}" in over and "reward=binary" in over
    assert f"output_dir={tmp_path / 'binary' / 'seed0' / 'agentic_full'}" in over


def test_chains_run_apart_only_what_starts_from_nothing_shared(tmp_path):
    where = lambda chain: [r.stage_dir.relative_to(tmp_path).as_posix() for r in chain]  # noqa: E731
    shared = fp.Settings(actor="/models/a", reward_stages="agentic")
    chains = fp.plan_chains(tmp_path, [0, 1], ["graduated", "binary"], ["full", "no_value"], shared)
    assert [where(c) for c in chains] == [[f"graduated/seed{k}/{n}" for n in ("warmup", "rft", "value", "agentic_full",
                                                                            "agentic_no_value")]
                                          + [f"binary/seed{k}/agentic_full", f"binary/seed{k}/agentic_no_value"]
                                          for k in (0, 1)]
    assert {r.source for r in chains[1]} == {tmp_path / "graduated" / "seed1"}
    separate = fp.plan_chains(tmp_path, [0], ["graduated", "binary"], ["full"], fp.Settings(actor="/models/a"))
    assert [where(c) for c in separate] == [[f"{r}/seed0/{n}" for n in ("warmup", "rft", "value", "agentic_full")]
                                            for r in ("graduated", "binary")]
    assert separate[1][0].source == tmp_path / "binary" / "seed0" and separate[1][0].reward == "binary"


def test_the_actor_is_measured_on_training_and_held_out_tasks_before_rl(family_actor, sandbox_cache, tmp_path):
    import eval_family_actor

    report = eval_family_actor.main(["--actor", str(family_actor), "--max-tasks", "1", "--temperatures", "0",
                                     "--max-new-tokens", "12", "--workers", "1", "--no-compile-baseline",
                                     "--cache-dir", str(sandbox_cache), "--out", str(tmp_path / "eval.json")])
    assert [(e["split"], e["mode"], e["temperature"], e["episodes"]) for e in report] == \
        [("train", "single_turn", 0.0, 1.0), ("heldout", "single_turn", 0.0, 1.0)]
    # Twelve tokens write no kernel: the real sandbox judges nothing correct, reward -1.
    assert all(e["rewards"] == {"-1": 1} and e["pass_rate"] == 0.0 and e["reward_mean"] == -1.0 for e in report)
    assert json.loads((tmp_path / "eval.json").read_text())["results"] == report
    episodes = [json.loads(line) for line in (tmp_path / "eval.trajectories.jsonl").read_text().splitlines()]
    assert [(e["split"], e["reward"]) for e in episodes] == [("train", -1.0), ("heldout", -1.0)]
    with pytest.raises(SystemExit) as exit_info:
        eval_family_actor.main(["--actor", str(tmp_path / "missing"), "--out", str(tmp_path / "x.json")])
    assert exit_info.value.code == 2


def test_finished_stages_continue_on_another_machine_from_exported_weights(pipeline_run, tmp_path):
    """What family_runs.sh carries between GPU hosts: the small files of the runs, and the weights
    of the finished stages a stage still to run starts from. Here the no_value ablation has not
    run: it starts from RFT, so RFT's weights travel (in parts), and on the new machine its
    actor-only checkpoint is the one this machine would have written."""
    import shutil

    import family_state

    settings = fp.Settings(actor="/models/a")
    chains = fp.plan_chains(pipeline_run, [0], ["graduated"], ["full", "no_value"], settings)
    rft = pipeline_run / "graduated" / "seed0" / "rft"
    assert family_state.starts_needed(chains, fp.DONE, fp.ACTOR_ONLY) == [rft]
    sent = tmp_path / "sent"
    manifest = family_state.export_weights([rft], pipeline_run, sent, part_bytes=200_000)
    assert len(manifest["graduated__seed0__rft"]["parts"]) > 1
    there = tmp_path / "there"
    shutil.copytree(pipeline_run, there, ignore=shutil.ignore_patterns("*.ckpt"))
    assert family_state.import_weights(sent, there, fp.DONE) == ["graduated/seed0/rft"]
    assert family_state.import_weights(sent, there, fp.DONE) == []  # already there: nothing rewritten
    carried = torch.load(fp.write_actor_only(there / "graduated" / "seed0" / "rft"), map_location="cpu",
                         weights_only=False)["state_dict"]
    original = torch.load(fp.write_actor_only(rft), map_location="cpu", weights_only=False)["state_dict"]
    assert carried.keys() == original.keys() and all(torch.equal(v, original[k]) for k, v in carried.items())
    assert all(v.dtype == original[k].dtype for k, v in carried.items())


def test_a_discarded_ppo_start_keeps_its_start_validation_and_the_restart_does_not_judge_again(tmp_path):
    from .conftest import write_metrics_csv

    settings = fp.Settings(actor="/models/a")
    chain = fp.plan_chains(tmp_path, [0], ["graduated"], ["full"], settings)[0]
    ppo = next(r for r in chain if r.stage.stage == "agentic_rl")
    validators = fp.start_validators(chain)
    assert fp.start_validator(ppo, validators) == ppo.stage_dir  # nothing judged yet: it validates
    # A start stopped during its first step: training rows, no start validation yet.
    write_metrics_csv(ppo.stage_dir, [{"step": -1, "rollout/reward_mean": 0.0}])
    assert fp.start_validator(ppo, validators) == ppo.stage_dir
    assert not fp.banked_start(ppo.stage_dir).exists()
    # One stopped after it: kept beside the stage, which then names it instead of judging again.
    write_metrics_csv(ppo.stage_dir, [{"step": -1, "val/reward_mean": 0.25}, {"step": 0, "rollout/reward_mean": 0.5}])
    (ppo.stage_dir / "rollouts").mkdir()
    (ppo.stage_dir / "rollouts" / "val.jsonl").write_text('{"task": "t1", "train_step": 0, "reward": 1.0}\n')
    assert fp.start_validator(ppo, validators) == fp.banked_start(ppo.stage_dir)
    kept = fp.banked_start(ppo.stage_dir) / "metrics.csv"
    assert kept.read_text() == (ppo.stage_dir / "metrics.csv").read_text()
    # Its episodes too, for per-task comparisons with the points after.
    assert (kept.parent / "rollouts" / "val.jsonl").read_text() == \
        (ppo.stage_dir / "rollouts" / "val.jsonl").read_text()
    over = fp.stage_overrides(ppo.stage, ppo.stage_dir.parent, "graduated", 0, settings,
                              validate_at_start=fp.start_validator(ppo, validators) == ppo.stage_dir)
    assert "stage.module.validate_at_start=false" in over
    # A stage with a checkpoint resumes (no start validation on resume): nothing to keep.
    other = tmp_path / "x" / "agentic_full"
    write_metrics_csv(other, [{"step": -1, "val/reward_mean": 0.25}])
    (other / "checkpoints").mkdir()
    (other / "checkpoints" / "last.ckpt").write_bytes(b"")
    fp.bank_start_validation(other)
    assert not fp.banked_start(other).exists()


def test_a_restart_keeps_the_sampling_its_discarded_start_did_finished_or_cut_off(tmp_path, capsys):
    """RFT's and value pretraining's sampling (minutes of episodes from the init actor, which the
    restart starts from again) survives a discarded start: a finished batch, and a batch cut off
    midway (the restart samples only what it lacks: src/stages/common.collect_trajectories) with
    what an earlier resume of it dropped; so do a PPO start's validation and first step episodes
    (its restart takes those finished: src/data/rollout.SHARED_TAGS), and nothing else."""
    stage = tmp_path / "graduated" / "seed1" / "rft"
    rollouts = stage / "rollouts"
    rollouts.mkdir(parents=True)
    (rollouts / "sample.rank0.jsonl").write_text('{"episode_id": "a"}\n')
    (rollouts / "sample.rank0.done").touch()
    (rollouts / "sample2.rank0.jsonl").write_text('{"episode_id": "cut"}\n')  # no .done: cut off
    (rollouts / "sample2.rank0.jsonl.orig").write_text('{"episode_id": "cut"}\n{"epi')
    (rollouts / "train.jsonl").write_text('{"episode_id": "t"}\n')
    (rollouts / "val.jsonl").write_text('{"episode_id": "v"}\n')
    (rollouts / "val.jsonl.orig").write_text('{"episode_id": "v"}\n{"ep')
    (rollouts / "other.jsonl").write_text('{"episode_id": "o"}\n')
    status = fp.run_stage(stage, ["stage=no_such_stage"], None, tmp_path / "pipeline.jsonl")
    assert status == "failed"
    assert sorted(p.name for p in (stage / "rollouts").iterdir()) == [
        "sample.rank0.done", "sample.rank0.jsonl", "sample2.rank0.jsonl", "sample2.rank0.jsonl.orig",
        "train.jsonl", "val.jsonl", "val.jsonl.orig"]
    assert (stage / "rollouts" / "val.jsonl").read_text() == '{"episode_id": "v"}\n'
    assert (stage / "rollouts" / "sample.rank0.jsonl").read_text() == '{"episode_id": "a"}\n'
    assert (stage / "rollouts" / "sample2.rank0.jsonl").read_text() == '{"episode_id": "cut"}\n'
    assert not (stage.parent / "rft.samples").exists()
    assert "1 finished sampling batches and 1 cut off, train.jsonl, val.jsonl kept" in capsys.readouterr().err


def test_a_missing_or_unusable_actor_is_one_line_and_exit_2(tmp_path, capsys):
    actor = tmp_path / "actor"
    actor.mkdir()
    (actor / "config.json").write_text("{}")  # passes the actor check: the plan's own checks answer
    greedy_twice = ["--actor", str(actor), "--val-temperature", "0", "--val-samples", "2"]
    for argv, says in (([], "--actor is required"), (["--actor", str(tmp_path)], "is not a model directory"),
                       (greedy_twice, "--val-samples must be 1"),
                       (["--actor", str(actor), "--val-temperature", "-1"], "must be >= 0")):
        with pytest.raises(SystemExit) as exit_info:
            fp.main([*argv, "--out", str(tmp_path / "runs")])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and says in err and err.count("\n") == 1
    assert not (tmp_path / "runs").exists()


def test_a_pipeline_killed_from_outside_has_already_exported_the_stages_it_finished(pipeline_run, family_actor,
                                                                                      sandbox_cache, tmp_path):
    """A GPU call's hard limit kills the pipeline without warning (2026-12-05: seed 0's warm-up
    finished 40 s before such a kill and its weights were lost, the export being at the end).
    Here value pretraining runs again, then PPO starts from it; the pipeline is SIGKILLed during
    PPO, and the value stage's weights are already in the export folder, whole."""
    import os
    import shutil
    import signal
    import subprocess

    import family_state

    runs = tmp_path / "runs"
    shutil.copytree(pipeline_run, runs)
    seed = runs / "graduated" / "seed0"
    for stage in ("value", "agentic_full"):
        shutil.rmtree(seed / stage)
    s = tiny_settings(family_actor, sandbox_cache)
    sets = [a for item in s.extra for a in ("--set", item)]
    sent = tmp_path / "sent"
    command = [sys.executable, str(ROOT / "scripts" / "family_pipeline.py"), "--actor", s.actor, "--out", str(runs),
               "--seeds", "0", "--steps", ",".join(map(str, s.steps)), "--val-every", str(s.val_every),
               "--tasks-per-step", str(s.tasks_per_step), "--samples-per-task", str(s.samples_per_task),
               "--max-tasks", str(s.max_tasks), "--val-tasks", str(s.val_tasks), "--max-turns", str(s.max_turns),
               "--max-new-tokens", str(s.max_new_tokens), *sets, "--export-weights", str(sent)]
    proc = subprocess.Popen(command, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not (sent / family_state.MANIFEST).exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert proc.poll() is None, "the pipeline ended before PPO could be killed"
        assert (seed / "value" / fp.DONE).exists() and not (seed / "agentic_full" / fp.DONE).exists()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    manifest = json.loads((sent / family_state.MANIFEST).read_text())
    assert [entry["stage"] for entry in manifest.values()] == ["graduated/seed0/value"]
    there = tmp_path / "there" / "graduated" / "seed0" / "value"
    there.mkdir(parents=True)
    (there / fp.DONE).write_text("{}\n")
    assert family_state.import_weights(sent, tmp_path / "there", fp.DONE) == ["graduated/seed0/value"]
    carried = torch.load(there / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    original = torch.load(seed / "value" / "checkpoints" / "last.ckpt", map_location="cpu",
                          weights_only=False)["state_dict"]
    assert carried.keys() == original.keys() and all(torch.equal(v, original[k]) for k, v in carried.items())


def test_a_ppo_stage_stopped_midway_resumes_on_another_machine_from_its_carried_checkpoint(
        pipeline_run, family_actor, sandbox_cache, tmp_path):
    """A PPO stage is longer than one GPU call: stopped after 2 of 3 steps, its checkpoint travels
    (float16 weights, bfloat16 Adam moments) to a machine that has only the runs' small files,
    and the stage goes on from step 2 there, with Adam's state, without the value stage's weights
    (it does not start again) and without repeating the validation it had finished."""
    import csv
    import dataclasses
    import shutil

    import family_state

    runs = tmp_path / "runs"
    shutil.copytree(pipeline_run, runs)
    ppo = runs / "graduated" / "seed0" / "agentic_full"
    (ppo / fp.DONE).unlink()  # 2 steps of 3 done: stopped
    settings = dataclasses.replace(tiny_settings(family_actor, sandbox_cache), steps=(1, 1, 1, 3))
    chains = fp.plan_chains(runs, [0], ["graduated"], ["full"], settings)
    sent = tmp_path / "sent"
    fp.export(chains, runs, sent, max_bytes=0, dtype="float16", moments="bfloat16")
    manifest = family_state.read_manifest(sent)
    assert [(e["stage"], e.get("resume"), e.get("step")) for e in manifest.values()] == \
        [("graduated/seed0/agentic_full", True, 2)]
    there = tmp_path / "there"
    shutil.copytree(runs, there, ignore=shutil.ignore_patterns("*.ckpt", "rollouts", "actor"))
    assert family_state.import_weights(sent, there, fp.DONE) == ["graduated/seed0/agentic_full"]
    statuses = fp.run_pipeline(there, [0], ["graduated"], ["full"], settings)
    stage = there / "graduated" / "seed0" / "agentic_full"
    assert statuses == {str(there / "graduated/seed0" / s): "skipped" for s in ("warmup", "rft", "value")} | \
        {str(stage): "done"}, (stage / "pipeline.log").read_text()[-3000:]
    final = torch.load(stage / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert final["global_step"] == 3
    assert {int(v["step"]) for v in final["optimizer_states"][0]["state"].values()} == {3}  # Adam went on
    carried = torch.load(ppo / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    assert any(not torch.equal(final["state_dict"][k], v.half().float()) for k, v in carried.items()
               if k.startswith("actor."))  # the third step trained
    with open(stage / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted({int(r["step"]) for r in rows if r.get("rollout/reward_mean")}) == [0, 1, 2]
    # Validated before PPO and after each step (--val-every 1), each once.
    assert sorted(int(r["step"]) for r in rows if r.get("val/reward_mean")) == [-1, 0, 1, 2]
    assert "init_from" in (log := (stage / "pipeline.log").read_text()) and "not read" in log


def test_judge_stages_follow_the_ppo_stages_judge_their_start_actors_and_carry_their_starts(tmp_path):
    names = lambda ablations: [s.name for s in fp.stages_for(ablations, judge_starts=True)]  # noqa: E731
    assert names(["full"]) == ["warmup", "rft", "value", "agentic_full", "judge_rft"]
    assert names(["no_value", "no_rft"])[-2:] == ["judge_rft", "judge_warmup"]
    # Without value pretraining in the plan, RFT's actor starts the judge: no value stage only for it.
    assert names(["no_value"]) == ["warmup", "rft", "agentic_no_value", "judge_rft"]
    judge = fp.stages_for(["no_value"], judge_starts=True)[-1]
    assert f"init_from={tmp_path / 'rft_actor_only' / 'actor_only.ckpt'}" in fp.stage_overrides(
        judge, tmp_path, "graduated", 0, fp.Settings(actor="/models/a"))
    assert fp.stages_for(["full", "no_value"], judge_starts=True)[-1].init == "value"
    # Export ranks that judge by the plan's own stage: two stages before it (warm-up, RFT), not three.
    (no_value_chain,) = fp.plan_chains(tmp_path / "nv", [0], ["graduated"], ["no_value"],
                                       fp.Settings(actor="/models/a", judge_starts=True))
    rank = fp.export_rank([no_value_chain])
    assert [rank(r.stage_dir) for r in no_value_chain] == [0, -1, -2, -2]
    assert fp.depth("judge_rft") == 3 and rank(tmp_path / "nv" / "graduated" / "seed0" / "rft_actor_only") == -1
    settings = fp.Settings(actor="/models/a", reward_stages="agentic", judge_starts=True)
    (chain,) = fp.plan_chains(tmp_path, [0], ["graduated", "binary"], ["full"], settings)
    judges = [r for r in chain if r.stage.judge]
    assert [r.stage_dir.relative_to(tmp_path).as_posix() for r in judges] == \
        ["graduated/seed0/judge_rft", "binary/seed0/judge_rft"]  # per reward: the reward judges the episodes
    over = fp.stage_overrides(judges[1].stage, tmp_path / "binary" / "seed0", "binary", 0, settings,
                              tmp_path / "graduated" / "seed0")
    assert "stage.module.judge_only=true" in over and f"init_from={tmp_path / 'graduated' / 'seed0' / 'value'}" in over
    # A judge is no PPO stage's start validator, and it is judged whatever the PPO stages did.
    assert all(not v.name.startswith("judge") for v in fp.start_validators(chain).values())
    assert not any("judge_only" in o for o in fp.stage_overrides(fp.STAGES["agentic_full"], tmp_path, "binary", 0,
                                                                settings))
    # Every PPO stage finished, the judges not: the value stage's weights must travel to the next machine.
    for run in chain:
        run.stage_dir.mkdir(parents=True, exist_ok=True)
        if not run.stage.judge:
            (run.stage_dir / fp.DONE).write_text("{}\n")
    assert fp.family_state.starts_needed([chain], fp.DONE, fp.ACTOR_ONLY) == [tmp_path / "graduated" / "seed0" / "value"]


def test_actors_packed_from_a_carry_are_judged_side_by_side_on_the_held_out_tasks(pipeline_run, family_actor,
                                                                                   sandbox_cache, tmp_path, capsys):
    """scripts/judge_family_actors.py: PPO's actor and RFT's, taken from a carry (float16, no
    critic), judged at once in one run with the pipeline's validation settings; a rerun judges
    nothing again, and input it cannot use is one line and exit 2."""
    import family_state
    import judge_family_actors as jfa

    run = pipeline_run / "graduated" / "seed0"
    carry = tmp_path / "carry"
    family_state.export_weights([run / "agentic_full", run / "rft"], pipeline_run, carry, dtype="float16")
    packed = tmp_path / "packed"
    assert jfa.main(["pack", "--to", str(packed), "--from", str(carry), "--stage", "graduated/seed0/agentic_full=after",
                     "--stage", "graduated/seed0/rft=start"]) == 0
    after = torch.load(packed / "graduated" / "seed0" / "after.ckpt", weights_only=False)["state_dict"]
    trained = torch.load(run / "agentic_full" / "checkpoints" / "last.ckpt", map_location="cpu",
                         weights_only=False)["state_dict"]
    assert after and after.keys() == {k for k in trained if k.startswith("actor.")}
    assert all(v.dtype == torch.float16 and torch.allclose(v.float(), trained[k], atol=1e-3, rtol=1e-3)
               for k, v in after.items() if v.is_floating_point())

    settings = tiny_settings(family_actor, sandbox_cache)
    flags = ["--actor", str(family_actor), "--val-tasks", "1", "--max-turns", str(settings.max_turns),
             "--max-new-tokens", str(settings.max_new_tokens), "--tasks-per-step", "1", "--max-tasks", "1",
             *[a for item in settings.extra for a in ("--set", item)]]
    out = tmp_path / "judged"
    assert jfa.main(["judge", "--actors", str(packed), "--out", str(out), *flags]) == 0
    report = json.loads((out / "judged.json").read_text())
    judged = {row["judge"]: row for row in report["judges"]}
    assert set(judged) == {"graduated/seed0/judge_after", "graduated/seed0/judge_start"}
    for label in ("after", "start"):
        row = judged[f"graduated/seed0/judge_{label}"]
        assert row["status"] == "done" and row["val/episodes"] == 1 and -1 <= row["val/reward_mean"] <= 3
        # The per-task scores read from the episodes on disk agree with the validation's metrics.
        (task, score), = row["tasks"].items()
        assert score["graduated"] == row["val/graduated_reward_mean"]
        assert score["faster_than_compile"] == bool(row["val/faster_than_compile"])
        assert report["common"]["by_judge"][row["judge"]]["graduated_sum"] == score["graduated"]
        log = (out / "graduated" / "seed0" / f"judge_{label}" / "pipeline.log").read_text()
        assert f"init_from {packed / 'graduated' / 'seed0' / f'{label}.ckpt'}: {{'actor'" in log
    assert report["common"]["tasks"] == [task]
    capsys.readouterr()
    start = time.monotonic()
    assert jfa.main(["judge", "--actors", str(packed), "--out", str(out), *flags]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {row["status"] for row in printed[:-1]} == {"skipped"} and printed[-1]["common_tasks"] == 1
    assert time.monotonic() - start < 10

    assert jfa.main(["pack", "--to", str(tmp_path / "x"), "--from", str(carry),
                     "--stage", "graduated/seed1/value=v"]) == 2
    assert "no weights of graduated/seed1/value" in capsys.readouterr().err
    (tmp_path / "stray").mkdir()
    (tmp_path / "stray" / "actor.ckpt").write_bytes(b"")
    assert jfa.main(["judge", "--actors", str(tmp_path / "stray"), "--out", str(out), *flags]) == 2
    assert "not <reward>/seed<k>/<label>.ckpt" in capsys.readouterr().err


def test_judges_are_compared_on_the_tasks_every_one_finished():
    import judge_family_actors as jfa

    def score(graduated: float, passed: bool, faster: bool) -> dict:
        return {"graduated": graduated, "passed": passed, "faster_than_compile": faster}

    # The budget stopped b after two tasks; a also judged t3 (a failure, -1), left out of both sums.
    a = {"t1": score(3.0, True, True), "t2": score(2.0, True, False), "t3": score(-1.0, False, False)}
    b = {"t2": score(1.0, True, False), "t1": score(2.0, True, False)}
    common = jfa.on_common_tasks({"a": a, "b": b})
    assert common["tasks"] == ["t1", "t2"]
    assert common["by_judge"] == {"a": {"graduated_sum": 5.0, "passed": 2, "faster_than_compile": 1},
                                  "b": {"graduated_sum": 3.0, "passed": 2, "faster_than_compile": 0}}
    assert jfa.on_common_tasks({}) == {"tasks": [], "by_judge": {}}


def test_a_judge_cut_mid_write_loses_only_its_last_episode(tmp_path):
    import judge_family_actors as jfa

    (tmp_path / "rollouts").mkdir()
    (tmp_path / "rollouts" / "val.jsonl").write_text('{"episode_id": "val-s000000-r0-0000-fam_a", "task": "/t/fam')
    assert jfa.task_scores(tmp_path) == {} and jfa.task_scores(tmp_path / "none") == {}
