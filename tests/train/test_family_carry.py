"""scripts/family_carry.py: the carry of the next GPU call merged from an earlier carry, what a
call returned and runs made on another machine, with the weights that the stages still to run
start from and nothing else."""
from __future__ import annotations

import csv
import io
import json
import sys
import tarfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import family_carry  # noqa: E402
import family_pipeline as fp  # noqa: E402
import family_state as fs  # noqa: E402

from .conftest import finished_stage, write_metrics_csv  # noqa: E402

PLAN = ["--seeds", "0,1,2", "--rewards", "graduated", "--reward-stages", "agentic", "--steps", "3,3,3,6"]


def state(where: Path, runs: Path, baselines: dict[str, str], weights_of: list[str] = ()) -> Path:
    """What a call returns: family_runs.tar.gz (runs without checkpoints, baselines) and the
    weights of ``weights_of`` (stages under ``runs``)."""
    for name, text in baselines.items():
        (runs.parent / "baselines").mkdir(parents=True, exist_ok=True)
        (runs.parent / "baselines" / name).write_text(text)
    if weights_of:
        fs.export_weights([runs / rel for rel in weights_of], runs, where)
    where.mkdir(parents=True, exist_ok=True)
    with tarfile.open(where / family_carry.BUNDLE, "w:gz") as tar:
        tar.add(runs, arcname="runs", filter=family_carry.bundle_filter)
        if (runs.parent / "baselines").exists():
            tar.add(runs.parent / "baselines", arcname="baselines")
    return where


def journal(runs: Path, *lines: str) -> None:
    with (runs / "pipeline.jsonl").open("a") as f:
        f.writelines(line + "\n" for line in lines)


def test_the_carry_takes_each_stage_from_its_latest_place_with_its_own_weights(tmp_path, capsys):
    # The earlier carry: seed 1's warm-up (its RFT stopped midway), seed 2's warm-up, seed 0's value stage.
    old = tmp_path / "old" / "runs"
    for rel in ("graduated/seed0/warmup", "graduated/seed0/rft", "graduated/seed0/value",
                "graduated/seed1/warmup", "graduated/seed2/warmup"):
        finished_stage(old, rel, seed=len(rel))
    write_metrics_csv(old / "graduated/seed1/rft", [{"step": 0, "rft/loss": 2.0}])
    journal(old, '{"stage": "seed1/warmup"}', '{"stage": "seed0/value"}')
    carry = state(tmp_path / "carry", old, {"a.json": "A"},
                  ["graduated/seed0/value", "graduated/seed1/warmup", "graduated/seed2/warmup"])
    # What the GPU call returned: seed 0's PPO finished; seed 2's warm-up ran again there (a
    # newer run, its weights left on that machine).
    gpu = tmp_path / "gpu" / "runs"
    finished_stage(gpu, "graduated/seed0/agentic_full")
    write_metrics_csv(gpu / "graduated/seed0/agentic_full", [{"step": -1, "val/reward_mean": 0.5}])
    (gpu / "graduated/seed0/agentic_full/rollouts").mkdir()
    (gpu / "graduated/seed0/agentic_full/rollouts/episodes.jsonl").write_text("{}\n")
    finished_stage(gpu, "graduated/seed2/warmup", seed=99)
    (gpu / "graduated/seed0/agentic_full.killed.log").write_text("stopped at the call's limit\n")
    journal(gpu, '{"stage": "seed0/value"}', '{"stage": "seed0/agentic_full"}')
    returned = state(tmp_path / "returned", gpu, {"b.json": "B"})
    # The CPU machine: seed 1's RFT and value stages, and an unfinished copy of seed 0's warm-up.
    cpu = tmp_path / "cpu"
    for rel in ("graduated/seed1/warmup", "graduated/seed1/rft", "graduated/seed1/value"):
        finished_stage(cpu, rel, seed=7)
    (cpu / "graduated/seed0/warmup").mkdir(parents=True)
    journal(cpu, '{"stage": "seed1/value"}')

    dest = tmp_path / "next"
    code = family_carry.main(["--from", str(carry), "--from", str(returned), "--add", str(cpu),
                              "--to", str(dest), "--with", str(tmp_path / "none"), *PLAN, "--export-dtype", "float16"])
    assert code == 0
    err = capsys.readouterr().err
    assert "graduated/seed0/warmup: kept finished" in err
    assert "graduated/seed2/warmup finished, but its weights are in none" in err

    # Weights: only what a stage still to run starts from (seed 0's PPO is done), from the place
    # its files came from.
    manifest = fs.read_manifest(dest)
    assert {e["stage"]: e["dtype"] for e in manifest.values()} == {"graduated/seed1/value": "float16"}
    sent = fs.carried_state(dest, "graduated__seed1__value", manifest["graduated__seed1__value"])["state_dict"]
    made = torch.load(cpu / "graduated/seed1/value/checkpoints/last.ckpt", weights_only=False)["state_dict"]
    assert all(torch.equal(sent[k], v.half().float()) for k, v in made.items())

    with tarfile.open(dest / family_carry.BUNDLE) as tar:
        names = set(tar.getnames())
        lines = tar.extractfile("runs/pipeline.jsonl").read().decode().splitlines()
    assert not [n for n in names if n.endswith(".ckpt") or "rollouts" in n]
    assert {"baselines/a.json", "baselines/b.json", "runs/graduated/seed0/agentic_full/metrics.csv",
            f"runs/graduated/seed1/value/{fp.DONE}", "runs/graduated/seed2/warmup.uncarried",
            "runs/graduated/seed0/agentic_full.killed.log"} <= names
    # seed 0's warm-up stays the finished one; seed 1's RFT is the CPU's finished one.
    assert f"runs/graduated/seed0/warmup/{fp.DONE}" in names
    assert f"runs/graduated/seed1/rft/{fp.DONE}" in names and "runs/graduated/seed1/rft/metrics.csv" not in names
    assert lines == ['{"stage": "seed1/warmup"}', '{"stage": "seed0/value"}', '{"stage": "seed0/agentic_full"}',
                     '{"stage": "seed1/value"}']


def test_an_unfinished_stages_sampling_travels_so_it_resumes_and_nothing_else_of_the_rollouts(tmp_path):
    """A value stage stopped while sampling (its episodes cut off, no checkpoint): the episodes it
    sampled go with the carry, so that the next machine samples only the rest; a finished
    stage's sampling and any stage's training rollouts stay behind."""
    gpu = tmp_path / "gpu" / "runs"
    for rel in ("graduated/seed0/warmup", "graduated/seed0/rft"):
        finished_stage(gpu, rel)
    rft_rollouts = gpu / "graduated/seed0/rft/rollouts"
    rft_rollouts.mkdir()
    (rft_rollouts / "sample.rank0.jsonl").write_text('{"episode_id": "r"}\n')
    (rft_rollouts / "sample.rank0.done").touch()
    value = gpu / "graduated/seed0/value/rollouts"
    value.mkdir(parents=True)
    cut = '{"episode_id": "sample.rank0-s000000-r0-0000-t"}\n{"episode_id": "sample.rank0-s0'
    (value / "sample.rank0.jsonl").write_text(cut)
    (value / "sample.rank0.jsonl.orig").write_text("earlier\n")
    (value / "train.jsonl").write_text("{}\n")
    (value.parent / "train.log").write_text("sampling\n")
    returned = state(tmp_path / "returned", gpu, {}, ["graduated/seed0/rft"])
    dest = tmp_path / "next"
    assert family_carry.main(["--from", str(returned), "--to", str(dest), "--with", str(tmp_path / "none"),
                              "--seeds", "0", "--rewards", "graduated", "--reward-stages", "agentic",
                              "--steps", "3,3,3,6"]) == 0
    with tarfile.open(dest / family_carry.BUNDLE) as tar:
        files = {n: tar.extractfile(n).read().decode() for n in tar.getnames() if tar.getmember(n).isfile()}
    assert files["runs/graduated/seed0/value/rollouts/sample.rank0.jsonl"] == cut
    assert files["runs/graduated/seed0/value/rollouts/sample.rank0.jsonl.orig"] == "earlier\n"
    assert [n for n in files if "rollouts" in n] == sorted(n for n in files if "/value/rollouts/sample" in n)
    assert "runs/graduated/seed0/value/train.log" in files


def rows(*steps: int, tag: str = "train") -> str:
    return "".join(json.dumps({"episode_id": f"{tag}-s{s:06d}-{i}", "train_step": s}) + "\n"
                   for i, s in enumerate(steps))


def test_of_an_unfinished_ppo_stages_rollouts_the_batch_a_resume_takes_travels(tmp_path):
    """A PPO stage stopped in step 2 (its checkpoint: step 2's start) resumes there taking the
    episodes step 2 finished: those travel, not steps 0 and 1's; its start validation finished
    (in metrics.csv at step -1), so its episodes stay behind. A stage stopped in its start
    validation takes that validation's finished episodes; a line cut off mid-write stays behind."""
    stepped, starting = tmp_path / "runs" / "agentic_full", tmp_path / "runs" / "agentic_no_rft"
    for stage in (stepped, starting):
        (stage / "rollouts").mkdir(parents=True)
    (stepped / "rollouts" / "train.jsonl").write_text(rows(0, 0, 1, 1, 2) + '{"episode_id": "train-s0000')
    (stepped / "rollouts" / "val.jsonl").write_text(rows(0, 0, tag="val"))
    write_metrics_csv(stepped, [{"step": -1, "val/reward_mean": 0.5}, {"step": 0, "rollout/reward_mean": 0.1}])
    (starting / "rollouts" / "val.jsonl").write_text(rows(0, 0, tag="val"))
    copied = {}
    for stage in (stepped, starting):
        family_carry.copy_resumable(stage, tmp_path / "carry" / stage.name)
        copied.update({f"{stage.name}/{f.name}": f.read_text()
                       for f in (tmp_path / "carry" / stage.name / "rollouts").iterdir()})
    assert copied == {"agentic_full/train.jsonl": rows(0, 0, 1, 1, 2).splitlines(keepends=True)[-1],
                      "agentic_no_rft/val.jsonl": rows(0, 0, tag="val")}


def test_a_carry_over_the_limit_or_from_an_unreadable_place_says_so(tmp_path, capsys, monkeypatch):
    runs = tmp_path / "cpu"
    finished_stage(runs, "graduated/seed0/warmup")
    monkeypatch.setattr(family_carry, "CARRY_LIMIT", 1000)
    assert family_carry.main(["--add", str(runs), "--to", str(tmp_path / "a"), *PLAN]) == 1
    assert "over what a call may carry" in capsys.readouterr().err
    assert json.loads((tmp_path / "a" / fs.MANIFEST).read_text())  # written all the same, to look at
    assert family_carry.main(["--from", str(tmp_path), "--to", str(tmp_path / "b"), *PLAN]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert family_carry.main(["--add", str(runs), "--to", str(tmp_path / "a"), *PLAN]) == 2  # not empty


def test_with_names_what_the_call_carries_beside_the_state_each_path_once():
    parse = lambda *extra: family_carry.parse_args(["--add", "runs", "--to", "new", *extra])[0].also  # noqa: E731
    assert parse() == [".whl"]
    assert parse("--with", "wheels") == ["wheels"]  # instead of the default, not beside it
    assert parse("--with", ".whl", "--with", ".whl", "--with", "x") == [".whl", "x"]


def test_a_carry_committed_and_replaced_since_is_read_from_history_with_a_stopped_stage(tmp_path, capsys,
                                                                                        monkeypatch):
    """data/family/carry holds what the next call needs; what it no longer holds stays in history.
    Seed 1's value stage was committed, then the folder was replaced by seed 0's PPO stopped
    midway (its checkpoint, carried to resume); the next carry takes both, each from its commit."""
    import subprocess

    from .test_family_state import stopped_stage

    repo = tmp_path / "repo"
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)  # noqa: E731
    repo.mkdir()
    git("init", "-q")
    git("config", "user.email", "t@t")
    git("config", "user.name", "t")
    old = tmp_path / "old" / "runs"
    for rel in ("graduated/seed1/warmup", "graduated/seed1/rft", "graduated/seed1/value"):
        finished_stage(old, rel, seed=3)
    state(repo / "carry", old, {}, ["graduated/seed1/value"])
    git("add", "carry")
    git("commit", "-q", "-m", "seed 1's value stage")
    new = tmp_path / "new" / "runs"
    for rel in ("graduated/seed0/warmup", "graduated/seed0/rft", "graduated/seed0/value"):
        finished_stage(new, rel, seed=4)
    stopped_stage(new, "graduated/seed0/agentic_full")
    for f in (repo / "carry").iterdir():
        f.unlink()
    fs.export_weights([], new, repo / "carry", dtype="float16", resumable=[new / "graduated/seed0/agentic_full"])
    state(repo / "carry", new, {})
    git("add", "-A", "carry")
    git("commit", "-q", "-m", "seed 0's PPO, stopped")
    monkeypatch.setattr(family_carry, "ROOT", repo)

    dest = tmp_path / "next"
    code = family_carry.main(["--from", "git:HEAD~1:carry", "--from", "git:HEAD:carry", "--to", str(dest),
                              "--replacing", "carry", *PLAN, "--seeds", "0,1", "--export-dtype", "float16"])
    assert code == 0, capsys.readouterr().err
    manifest = fs.read_manifest(dest)
    assert {e["stage"]: bool(e.get("resume")) for e in manifest.values()} == \
        {"graduated/seed0/agentic_full": True, "graduated/seed1/value": False}
    assert "with .whl and the tracked files but carry" in capsys.readouterr().out
    assert family_carry.main(["--from", "git:HEAD~5:carry", "--to", str(tmp_path / "x"), *PLAN]) == 2
    assert "git cannot give it" in capsys.readouterr().err


def test_anew_runs_a_stage_again_from_the_same_start_with_its_start_validation_banked(tmp_path, capsys):
    """A new arm of PPO from the value stages an earlier arm started from: seed 0's finished PPO
    stage (it judged its start) and seed 1's stopped one (its start banked already) leave the
    carry, seed 0's start validation is banked without the rows of the run set aside, and the
    weights carried are the value stages' (what the new runs start from), not the old PPO's."""
    from .test_family_state import stopped_stage

    runs = tmp_path / "gpu" / "runs"
    for seed in (0, 1):
        for rel in ("warmup", "rft", "value"):
            finished_stage(runs, f"graduated/seed{seed}/{rel}", seed=seed)
    ppo0 = finished_stage(runs, "graduated/seed0/agentic_full", seed=5)
    write_metrics_csv(ppo0, [{"step": -1, "val/reward_mean": 1.9}, {"step": 0, "rollout/reward_mean": 0.5},
                             {"step": 2, "val/reward_mean": 2.1}])
    (runs / "graduated/seed0/agentic_full.killed.log").write_text("stopped at the call's limit\n")
    ppo1, _ = stopped_stage(runs, "graduated/seed1/agentic_full")
    write_metrics_csv(ppo1, [{"step": 0, "rollout/reward_mean": 0.1}])
    write_metrics_csv(runs / "graduated/seed1/agentic_full.start", [{"step": -1, "val/reward_mean": 0.9}])
    fs.export_weights([runs / f"graduated/seed{s}/value" for s in (0, 1)], runs, tmp_path / "returned",
                      dtype="float16", resumable=[ppo1])
    returned = state(tmp_path / "returned", runs, {})
    plan = [*PLAN, "--seeds", "0,1", "--export-dtype", "float16"]

    as_is = tmp_path / "as_is"
    assert family_carry.main(["--from", str(returned), "--to", str(as_is), "--with", str(tmp_path / "none"),
                              *plan]) == 0
    assert {e["stage"] for e in fs.read_manifest(as_is).values()} == {"graduated/seed1/agentic_full"}

    assert family_carry.main(["--from", str(returned), "--to", str(tmp_path / "typo"), "--anew", "agentic_ful",
                              *plan]) == 2
    assert "--anew agentic_ful: no run of that stage in the places (stages there: agentic_full," in \
        capsys.readouterr().err
    dest = tmp_path / "anew"
    assert family_carry.main(["--from", str(returned), "--to", str(dest), "--with", str(tmp_path / "none"),
                              "--anew", "agentic_full", *plan]) == 0
    err = capsys.readouterr().err
    assert "graduated/seed0/agentic_full set aside to run anew; its start validation banked" in err
    assert {e["stage"] for e in fs.read_manifest(dest).values()} == {"graduated/seed0/value", "graduated/seed1/value"}
    with tarfile.open(dest / family_carry.BUNDLE) as tar:
        names = set(tar.getnames())
        banked0 = tar.extractfile("runs/graduated/seed0/agentic_full.start/metrics.csv").read().decode()
        banked1 = tar.extractfile("runs/graduated/seed1/agentic_full.start/metrics.csv").read().decode()
    assert not [n for n in names if "/agentic_full/" in n or n.endswith(("/agentic_full", "agentic_full.killed.log"))]
    rows = lambda text: [{k: v for k, v in r.items() if v} for r in csv.DictReader(io.StringIO(text))]  # noqa: E731
    assert rows(banked0) == [{"step": "-1", "val/reward_mean": "1.9"}]  # the start's row only
    assert rows(banked1) == [{"step": "-1", "val/reward_mean": "0.9"}]  # banked earlier: kept as it was
