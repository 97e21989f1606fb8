"""scripts/family_state.py: the weights of finished family-pipeline stages, exported in parts and
joined on another machine, and the clear errors of carried state that cannot be used."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import family_pipeline as fp  # noqa: E402
import family_state as fs  # noqa: E402

from .conftest import finished_stage  # noqa: E402


def test_what_is_needed_is_what_a_stage_still_to_run_starts_from(tmp_path):
    runs = tmp_path / "runs"
    chains = lambda ablations: fp.plan_chains(runs, [0], ["graduated"], ablations, fp.Settings(actor="a"))  # noqa: E731
    assert fs.starts_needed(chains(["full"]), fp.DONE, fp.ACTOR_ONLY) == []  # nothing finished yet
    warmup = finished_stage(runs, "graduated/seed0/warmup")
    assert fs.starts_needed(chains(["full"]), fp.DONE, fp.ACTOR_ONLY) == [warmup]  # RFT starts from it
    rft = finished_stage(runs, "graduated/seed0/rft")
    # full: value pretraining starts from RFT; no_value's PPO from RFT's actor; no_rft's value from the warm-up.
    assert fs.starts_needed(chains(["full", "no_value"]), fp.DONE, fp.ACTOR_ONLY) == [rft]
    assert fs.starts_needed(chains(["full", "no_rft"]), fp.DONE, fp.ACTOR_ONLY) == [rft, warmup]


def test_the_no_value_start_is_cut_from_value_pretraining_where_rft_did_not_travel(tmp_path):
    runs = tmp_path / "runs"
    chains = fp.plan_chains(runs, [0], ["graduated"], ["no_value"], fp.Settings(actor="a"))
    finished_stage(runs, "graduated/seed0/warmup")
    rft = finished_stage(runs, "graduated/seed0/rft")
    value = finished_stage(runs, "graduated/seed0/value")  # not in this plan: carried beside it
    assert fs.starts_needed(chains, fp.DONE, fp.ACTOR_ONLY) == [rft]  # RFT's own checkpoint first
    (rft / fs.CHECKPOINT).unlink()  # RFT's weights stayed on the other machine, the value stage's came
    assert fs.actor_only_source(runs / "graduated/seed0", fp.DONE) == value
    assert fs.starts_needed(chains, fp.DONE, fp.ACTOR_ONLY) == [value]
    assert fs.reopen_uncarried(chains, fp.DONE, fp.ACTOR_ONLY) == []  # RFT does not run again
    (value / fs.CHECKPOINT).unlink()  # neither travelled: RFT runs again
    assert fs.reopen_uncarried(chains, fp.DONE, fp.ACTOR_ONLY) == [str(rft)]


def test_parts_join_into_the_weights_without_optimizer_state(tmp_path):
    runs, there = tmp_path / "runs", tmp_path / "there"
    stage = finished_stage(runs, "binary/seed1/value")
    manifest = fs.export_weights([stage], runs, tmp_path / "out", part_bytes=50_000)
    parts = manifest["binary__seed1__value"]["parts"]
    assert len(parts) == 3 and all((tmp_path / "out" / p).stat().st_size <= 50_000 for p in parts)
    (there / "binary/seed1/value").mkdir(parents=True)
    (there / "binary/seed1/value" / fp.DONE).write_text("{}\n")
    assert fs.import_weights(tmp_path / "out", there, fp.DONE) == ["binary/seed1/value"]
    carried = torch.load(there / "binary/seed1/value/checkpoints/last.ckpt", weights_only=False)
    original = torch.load(stage / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    assert set(carried) == {"state_dict"}
    assert all(torch.equal(carried["state_dict"][k], v) for k, v in original.items())


def test_half_precision_weights_travel_at_half_the_bytes_and_return_as_float32(tmp_path):
    runs, there = tmp_path / "runs", tmp_path / "there"
    stage = finished_stage(runs, "graduated/seed2/value")
    state = torch.load(stage / "checkpoints" / "last.ckpt", weights_only=False)
    state["state_dict"]["actor.steps"] = torch.tensor([7, 9])  # an integer buffer keeps its type
    torch.save(state, stage / "checkpoints" / "last.ckpt")
    full = fs.export_weights([stage], runs, tmp_path / "full")["graduated__seed2__value"]
    half = fs.export_weights([stage], runs, tmp_path / "half", dtype="float16")["graduated__seed2__value"]
    assert half["dtype"] == "float16" and full["dtype"] == "float32"
    assert 0.45 < half["bytes"] / full["bytes"] < 0.55
    (there / "graduated/seed2/value").mkdir(parents=True)
    (there / "graduated/seed2/value" / fp.DONE).write_text("{}\n")
    assert fs.import_weights(tmp_path / "half", there, fp.DONE) == ["graduated/seed2/value"]
    carried = torch.load(there / "graduated/seed2/value/checkpoints/last.ckpt", weights_only=False)["state_dict"]
    original = state["state_dict"]
    assert carried["actor.steps"].dtype == torch.int64 and torch.equal(carried["actor.steps"], original["actor.steps"])
    for key in ("actor.w", "critic.v"):
        assert carried[key].dtype == torch.float32
        # Rounded once to half precision: within its relative step, and not the same tensor.
        assert torch.allclose(carried[key], original[key], rtol=2 ** -11, atol=1e-7)
        assert not torch.equal(carried[key], original[key])
    with pytest.raises(fs.StateError, match="float32 or float16"):
        fs.export_weights([stage], runs, tmp_path / "x", dtype="bfloat16")


def test_carried_state_that_cannot_be_used_is_a_clear_error(tmp_path):
    runs, there, out = tmp_path / "runs", tmp_path / "there", tmp_path / "out"
    with pytest.raises(fs.StateError, match="no weights manifest"):
        fs.import_weights(out, there, fp.DONE)
    with pytest.raises(fs.StateError, match="checkpoint .* is missing"):
        (runs / "graduated/seed0/rft").mkdir(parents=True)
        fs.export_weights([runs / "graduated/seed0/rft"], runs, out)
    stage = finished_stage(tmp_path / "r2", "graduated/seed0/rft")
    manifest = fs.export_weights([stage], tmp_path / "r2", out, part_bytes=50_000)
    with pytest.raises(fs.StateError, match="not marked finished"):
        fs.import_weights(out, there, fp.DONE)
    (there / "graduated/seed0/rft").mkdir(parents=True)
    (there / "graduated/seed0/rft" / fp.DONE).write_text("{}\n")
    first = out / manifest["graduated__seed0__rft"]["parts"][0]
    first.write_bytes(first.read_bytes()[:-1] + b"x")
    with pytest.raises(fs.StateError, match="checksum differs"):
        fs.import_weights(out, there, fp.DONE)
    first.unlink()
    with pytest.raises(fs.StateError, match="parts missing"):
        fs.import_weights(out, there, fp.DONE)
    assert not (there / "graduated/seed0/rft/checkpoints/last.ckpt").exists()  # nothing half-written
    assert json.loads((out / fs.MANIFEST).read_text())["graduated__seed0__rft"]["stage"] == "graduated/seed0/rft"


def test_exporting_again_into_one_folder_rewrites_only_what_changed_and_drops_stale_parts(tmp_path):
    """The pipeline exports after every finished stage into the same folder ($OUT of a GPU call):
    a stage already there is not written again, one no longer needed is removed with its parts, and
    what the folder holds imports at every step."""
    runs, out = tmp_path / "runs", tmp_path / "out"
    warmup = finished_stage(runs, "graduated/seed0/warmup")
    first = fs.export_weights([warmup], runs, out, part_bytes=50_000)["graduated__seed0__warmup"]
    (out / "weights.graduated__seed0__old.0123456789ab.pt.part00").write_bytes(b"left by a killed export")
    stamps = {p: (out / p).stat().st_mtime_ns for p in first["parts"]}
    seed1 = finished_stage(runs, "graduated/seed1/rft", seed=1)
    both = fs.export_weights([warmup, seed1], runs, out, part_bytes=50_000)
    assert both["graduated__seed0__warmup"] == first
    assert {p: (out / p).stat().st_mtime_ns for p in first["parts"]} == stamps  # not written again
    listed = {p for entry in both.values() for p in entry["parts"]}
    assert {p.name for p in out.glob("weights.*")} == listed | {fs.MANIFEST}
    # The warm-up's weights change (a stage run again): new parts under a new name, the old ones gone.
    state = torch.load(warmup / "checkpoints" / "last.ckpt", weights_only=False)
    state["state_dict"]["actor.w"] += 1
    torch.save(state, warmup / "checkpoints" / "last.ckpt")
    changed = fs.export_weights([warmup], runs, out, part_bytes=50_000)["graduated__seed0__warmup"]
    assert changed["sha256"] != first["sha256"] and not set(changed["parts"]) & set(first["parts"])
    assert {p.name for p in out.glob("weights.*")} == set(changed["parts"]) | {fs.MANIFEST}
    there = tmp_path / "there" / "graduated/seed0/warmup"
    there.mkdir(parents=True)
    (there / fp.DONE).write_text("{}\n")
    assert fs.import_weights(out, tmp_path / "there", fp.DONE) == ["graduated/seed0/warmup"]
    carried = torch.load(there / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    assert torch.equal(carried["actor.w"], state["state_dict"]["actor.w"])


def test_the_pipeline_refuses_carried_state_it_cannot_use(tmp_path, capsys):
    actor = tmp_path / "actor"
    actor.mkdir()
    (actor / "config.json").write_text("{}")
    code = fp.main(["--actor", str(actor), "--out", str(tmp_path / "runs"), "--import-weights", str(tmp_path / "none")])
    assert code == 2 and "no weights manifest" in capsys.readouterr().err


def test_an_export_over_its_budget_keeps_the_stages_furthest_along(tmp_path, capsys):
    runs, out = tmp_path / "runs", tmp_path / "out"
    chains = fp.plan_chains(runs, [0, 1], ["graduated"], ["full"], fp.Settings(actor="a"))
    finished_stage(runs, "graduated/seed0/warmup")
    for rel in ("graduated/seed1/warmup", "graduated/seed1/rft", "graduated/seed1/value"):
        finished_stage(runs, rel, seed=1)
    one_stage = fs.export_weights([runs / "graduated/seed0/warmup"], runs, tmp_path / "one")
    one_stage = one_stage["graduated__seed0__warmup"]["bytes"] * 3 // 2  # room for one stage, not two
    # Seed 1's PPO starts from its value stage (three stages of work), seed 0's RFT from its warm-up.
    fp.export(chains, runs, out, max_bytes=one_stage)
    assert [e["stage"] for e in json.loads((out / fs.MANIFEST).read_text()).values()] == ["graduated/seed1/value"]
    assert "graduated/seed0/warmup left out" in capsys.readouterr().err
    fp.export(chains, runs, tmp_path / "all", max_bytes=0)
    assert len(json.loads((tmp_path / "all" / fs.MANIFEST).read_text())) == 2


def test_finished_stages_whose_weights_did_not_travel_run_again(tmp_path):
    runs = tmp_path / "runs"
    chains = fp.plan_chains(runs, [0], ["graduated"], ["full"], fp.Settings(actor="a"))
    warmup, rft = finished_stage(runs, "graduated/seed0/warmup"), finished_stage(runs, "graduated/seed0/rft")
    (rft / "metrics.csv").write_text("step\n0\n")
    (rft / "checkpoints" / "last.ckpt").unlink()  # marked finished; its weights stayed on the other machine
    assert fs.reopen_uncarried(chains, fp.DONE, fp.ACTOR_ONLY) == [str(rft)]
    assert not rft.exists() and (runs / "graduated/seed0/rft.uncarried/metrics.csv").read_text() == "step\n0\n"
    assert (warmup / fp.DONE).exists()  # RFT starts from it and its weights are here
    assert fs.reopen_uncarried(chains, fp.DONE, fp.ACTOR_ONLY) == []
    # A stage set aside may start from one whose weights are missing too: that one runs again as well.
    rft = finished_stage(runs, "graduated/seed0/rft")
    finished_stage(runs, "graduated/seed0/value")
    (runs / "graduated/seed0/value/checkpoints/last.ckpt").unlink()
    (warmup / "checkpoints" / "last.ckpt").unlink()
    (rft / "checkpoints" / "last.ckpt").unlink()
    assert fs.reopen_uncarried(chains, fp.DONE, fp.ACTOR_ONLY) == [
        str(runs / "graduated/seed0/value"), str(rft), str(warmup)]
    assert (runs / "graduated/seed0/rft.uncarried2").is_dir()  # the first one set aside is kept too


def test_the_stages_before_ppo_run_alone_and_export_what_ppo_starts_from(tmp_path, capsys):
    """--before-ppo: the prefix on one machine (here already finished: skipped), no PPO stage
    started, and the value stage's weights exported for the PPO stage on the next machine."""
    runs, actor = tmp_path / "runs", tmp_path / "actor"
    actor.mkdir()
    (actor / "config.json").write_text("{}\n")
    for name in ("warmup", "rft", "value"):
        finished_stage(runs, f"graduated/seed0/{name}")
    code = fp.main(["--actor", str(actor), "--out", str(runs), "--seeds", "0", "--before-ppo",
                    "--export-weights", str(tmp_path / "sent"), "--export-dtype", "float16"])
    assert code == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["stages"] == {"skipped": 3}
    assert not (runs / "graduated/seed0/agentic_full").exists()
    manifest = json.loads((tmp_path / "sent" / fs.MANIFEST).read_text())
    assert {k: v["dtype"] for k, v in manifest.items()} == {"graduated__seed0__value": "float16"}


def test_the_half_precision_carry_is_measured_on_real_models_and_trajectories(tiny_model_dir, tmp_path):
    """benchmarks/bench_carry_dtype.py: a stage's actor and critic against the same weights rounded
    to float16; the rounding shows (the log-probs differ) but stays within half precision's reach."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import bench_carry_dtype as bcd
    from torch import nn

    from src.models.actor import load_actor
    from src.models.critic import build_critic

    holder = nn.Module()
    holder.actor = load_actor(str(tiny_model_dir))
    holder.critic = build_critic(holder.actor)
    torch.nn.init.normal_(holder.critic.value_head.weight)  # a critic that says something
    stage = tmp_path / "runs" / "graduated/seed0/value"
    (stage / "checkpoints").mkdir(parents=True)
    torch.save({"state_dict": holder.state_dict()}, stage / "checkpoints" / "last.ckpt")
    fs.export_weights([stage], tmp_path / "runs", tmp_path / "sent")
    torch.manual_seed(1)
    ids = torch.randint(0, 512, (2, 40)).tolist()
    (tmp_path / "t.jsonl").write_text("".join(json.dumps({"token_ids": x, "loss_mask": [0] * 10 + [1] * 30}) + "\n"
                                              for x in ids))
    assert bcd.main(["--weights", str(tmp_path / "sent"), "--actor", str(tiny_model_dir), "--trajectories",
                     str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "r.json")]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["stage"] == "graduated__seed0__value" and report["policy_tokens"] == 2 * 30
    assert 0 < report["logprob_abs_diff_mean"] < 1e-2 and 0 <= report["kl_mean"] < 1e-4
    assert 0 < report["value_abs_diff_max"] < 1e-2 and report["argmax_agreement"] > 0.9
    assert bcd.main(["--weights", str(tmp_path / "none"), "--actor", str(tiny_model_dir),
                     "--trajectories", str(tmp_path / "t.jsonl")]) == 2
    assert bcd.main(["--weights", str(tmp_path / "sent"), "--actor", str(tiny_model_dir),
                     "--trajectories", str(tmp_path / "missing.jsonl")]) == 2


def stopped_stage(runs: Path, rel: str, step: int = 2) -> tuple[Path, dict]:
    """A stage stopped midway as train.py leaves it: a Lightning checkpoint with Adam's state (a
    step counter and two moments per parameter), loops and callbacks; no done marker."""
    stage = runs / rel
    (stage / "checkpoints").mkdir(parents=True)
    torch.manual_seed(step)
    adam = lambda n: {"step": torch.tensor(float(step)), "exp_avg": torch.randn(n) * 1e-3,  # noqa: E731
                      "exp_avg_sq": torch.rand(n) * 1e-6}
    ckpt = {"state_dict": {"actor.w": torch.randn(300, 100), "critic.v": torch.randn(100),
                           "actor.steps": torch.tensor([7, 9])},
            "optimizer_states": [{"state": {0: adam(30_000)}, "param_groups": [{"lr": 5e-5, "params": [0]}]},
                                 {"state": {0: adam(100)}, "param_groups": [{"lr": 1e-4, "params": [0]}]}],
            "global_step": step, "loops": {"fit_loop": {"epoch_loop.batch_progress": {"ready": step}}},
            "callbacks": {"AtomicModelCheckpoint": {"last_model_path": "/elsewhere/last.ckpt"}},
            "validated_step": step}
    torch.save(ckpt, stage / "checkpoints" / "last.ckpt")
    return stage, ckpt


def test_a_stopped_stage_travels_smaller_and_returns_as_a_float32_checkpoint_to_resume(tmp_path):
    runs, there = tmp_path / "runs", tmp_path / "there"
    stage, original = stopped_stage(runs, "graduated/seed0/agentic_full")
    whole = (stage / "checkpoints" / "last.ckpt").stat().st_size
    small = fs.export_weights([], runs, tmp_path / "small", dtype="float16",
                              resumable=[stage])["graduated__seed0__agentic_full"]
    dropped = fs.export_weights([], runs, tmp_path / "dropped", dtype="float16", resumable=[stage],
                                moments="drop")["graduated__seed0__agentic_full"]
    assert (small["resume"], small["moments"], small["step"], dropped["moments"]) == (True, "bfloat16", 2, "drop")
    # 12 bytes a parameter (weight, two moments in float32) -> 6 (2 + 2 + 2) -> 2.
    assert 0.45 < small["bytes"] / whole < 0.55 and 0.12 < dropped["bytes"] / whole < 0.2
    (there / "graduated/seed0/agentic_full").mkdir(parents=True)  # its small files, no checkpoint
    assert fs.import_weights(tmp_path / "small", there, fp.DONE) == ["graduated/seed0/agentic_full"]
    back = torch.load(there / "graduated/seed0/agentic_full/checkpoints/last.ckpt", weights_only=False)
    for key in ("actor.w", "critic.v"):
        assert back["state_dict"][key].dtype == torch.float32
        assert torch.equal(back["state_dict"][key], original["state_dict"][key].half().float())
    assert torch.equal(back["state_dict"]["actor.steps"], original["state_dict"]["actor.steps"])
    for opt, orig in zip(back["optimizer_states"], original["optimizer_states"]):
        assert opt["param_groups"] == orig["param_groups"]
        for name in ("exp_avg", "exp_avg_sq"):
            got, want = opt["state"][0][name], orig["state"][0][name]
            assert got.dtype == torch.float32 and torch.equal(got, want.bfloat16().float())
            assert torch.allclose(got, want, rtol=2 ** -8, atol=0) and not torch.equal(got, want)
        assert opt["state"][0]["step"].dtype == torch.float32 and float(opt["state"][0]["step"]) == 2.0
    assert {k: back[k] for k in ("global_step", "loops", "callbacks", "validated_step")} == \
        {k: original[k] for k in ("global_step", "loops", "callbacks", "validated_step")}
    # Dropped moments: Adam's state empty (it starts anew), its hyper-parameters kept.
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "graduated/seed0/agentic_full").mkdir(parents=True)
    fs.import_weights(tmp_path / "dropped", elsewhere, fp.DONE)
    fresh = torch.load(elsewhere / "graduated/seed0/agentic_full/checkpoints/last.ckpt", weights_only=False)
    assert [o["state"] for o in fresh["optimizer_states"]] == [{}, {}]
    groups = lambda ckpt: [o["param_groups"] for o in ckpt["optimizer_states"]]  # noqa: E731
    assert groups(fresh) == groups(original)
    with pytest.raises(fs.StateError, match="bfloat16 or drop"):
        fs.export_weights([], runs, tmp_path / "x", resumable=[stage], moments="float16")


def test_a_stopped_stages_checkpoint_needs_its_directory_and_is_passed_over_where_it_finished(tmp_path):
    runs = tmp_path / "runs"
    stage, _ = stopped_stage(runs, "graduated/seed0/agentic_full")
    fs.export_weights([], runs, tmp_path / "sent", dtype="float16", resumable=[stage])
    with pytest.raises(fs.StateError, match="stopped at step 2, but the stage is not here"):
        fs.import_weights(tmp_path / "sent", tmp_path / "bare", fp.DONE)
    done = tmp_path / "done" / "graduated/seed0/agentic_full"
    done.mkdir(parents=True)
    (done / fp.DONE).write_text("{}\n")
    assert fs.import_weights(tmp_path / "sent", tmp_path / "done", fp.DONE) == []
    assert not (done / "checkpoints").exists()


def test_a_stopped_stage_travels_first_and_no_longer_needs_its_start(tmp_path, capsys):
    runs = tmp_path / "runs"
    chains = fp.plan_chains(runs, [0], ["graduated"], ["full"], fp.Settings(actor="a"))
    for rel in ("warmup", "rft", "value"):
        finished_stage(runs, f"graduated/seed0/{rel}")
    value = runs / "graduated/seed0/value"
    assert fs.starts_needed(chains, fp.DONE, fp.ACTOR_ONLY) == [value]
    ppo, _ = stopped_stage(runs, "graduated/seed0/agentic_full")
    # PPO resumes from its own checkpoint: the value stage's weights are not read again.
    assert fs.stopped_stages(chains, fp.DONE) == [ppo]
    assert fs.starts_needed(chains, fp.DONE, fp.ACTOR_ONLY) == []
    # With another seed's PPO still to start, a budget for one stage keeps the stopped one.
    chains = fp.plan_chains(runs, [0, 1], ["graduated"], ["full"], fp.Settings(actor="a"))
    for rel in ("warmup", "rft", "value"):
        finished_stage(runs, f"graduated/seed1/{rel}", seed=1)
    sent = tmp_path / "sent"
    fp.export(chains, runs, sent, max_bytes=200_000, dtype="float16")
    assert [e["stage"] for e in fs.read_manifest(sent).values()] == ["graduated/seed0/agentic_full"]
    assert "graduated/seed1/value left out" in capsys.readouterr().err
