"""benchmarks/bench_plan_choice.py on a stage written like a real one: the plans' probabilities
are the stage checkpoint's (perturbed weights, not the exported config's fresh ones), computed as
the training code computes a log-prob at a temperature, after the task's own prompt; the expected
deviations count the policy tokens only; bad input stops with the reason."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_plan_choice  # noqa: E402

from data_gen.family import ChainSpec  # noqa: E402
from src.models import load_actor  # noqa: E402
from src.models.actor import sequence_logprobs  # noqa: E402

SPEC = {"dtype": "float32", "ops": ["mul_scalar:1.5"], "reduction": "sum", "shape": [256, 512]}
TASK = "fam_test0000001"


@pytest.fixture(scope="module")
def stage(tiny_model_dir, tmp_path_factory):
    """A stage whose checkpoint holds perturbed actor weights and whose actor/ holds only the
    config and tokenizer, as a stage returned from a device call does."""
    stage = tmp_path_factory.mktemp("plan") / "agentic_full"
    shutil.copytree(tiny_model_dir, stage / "actor")
    for f in (stage / "actor").iterdir():
        if f.suffix in (".safetensors", ".bin"):
            f.unlink()
    actor = load_actor(str(tiny_model_dir))
    torch.manual_seed(1)
    with torch.no_grad():
        for param in actor.parameters():
            param.add_(0.5 * torch.randn_like(param))
    (stage / "checkpoints").mkdir()
    torch.save({"state_dict": {f"actor.{k}": v for k, v in actor.state_dict().items()}},
               stage / "checkpoints" / "last.ckpt")
    return stage, actor


def write_inputs(tmp_path: Path, policy_tokens: list[int]) -> tuple[Path, Path, list[int]]:
    prompt = [5 + k % 40 for k in range(12)]
    row = {"task": f"{TASK}.py", "token_ids": prompt + policy_tokens + [3, 4],
           "loss_mask": [0] * len(prompt) + [1] * len(policy_tokens) + [0, 0], "reward": 1.0}
    other = dict(row, token_ids=[9] * 20)  # a second episode of the same task: its prompt is not used
    rows = tmp_path / "val.jsonl"
    rows.write_text(json.dumps(row) + "\n" + json.dumps(other) + "\n")
    tasks = tmp_path / "tasks.parquet"
    pq.write_table(pa.table({"id": [TASK, "fam_other"], "spec": [json.dumps(SPEC)] * 2}), tasks)
    return rows, tasks, prompt


def test_plan_probabilities_are_the_checkpoint_s_log_probs_after_the_task_s_prompt(stage, tmp_path):
    stage_dir, actor = stage
    rows, tasks, prompt = write_inputs(tmp_path, [7, 8, 9])
    out = tmp_path / "plan.json"
    assert bench_plan_choice.main(["--stage", str(stage_dir), "--prompts", str(rows), "--tasks", str(tasks),
                                   "--temperatures", "1,0.5", "--episodes", "0", "--out", str(out),
                                   "--plot", str(tmp_path / "plan.png")]) == 0
    assert (tmp_path / "plan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    found = json.loads(out.read_text())["stages"][str(stage_dir)]
    openings = bench_plan_choice.openings(ChainSpec.from_json(json.dumps(SPEC)), "cpu")
    assert openings["vectorised"].startswith("The task: ") and "SIMD" in openings["vectorised"]
    for t in (1.0, 0.5):
        scores = []
        for plan in bench_plan_choice.PLANS:
            tokens = actor.tokenizer.encode(openings[plan], add_special_tokens=False)
            ids = torch.tensor([prompt + tokens])
            with torch.no_grad():
                logprobs, _ = sequence_logprobs(actor.model, ids, torch.ones_like(ids), t)
            scores.append(float(logprobs[0, len(prompt):].sum()))
        expected = torch.softmax(torch.tensor(scores), dim=0).tolist()
        assert list(found["per_task"][TASK][str(t)].values()) == pytest.approx(expected, rel=1e-4, abs=1e-6)
        summary = found["by_temperature"][str(t)]
        assert sum(summary["p_plan"].values()) == pytest.approx(1.0, abs=1e-5)
        assert sum(summary["top_plan_tasks"].values()) == found["tasks"] == 1
        assert summary["openings_mass"] == pytest.approx(float(torch.tensor(scores).exp().sum()), rel=1e-4)


def test_expected_deviations_count_the_policy_tokens_at_each_temperature(stage, tmp_path):
    stage_dir, actor = stage
    # The actor's own greedy continuation: p_T(argmax) is then the recorded token's probability,
    # which the training code's log-prob gives independently.
    prompt = [5 + k % 40 for k in range(12)]
    with torch.no_grad():
        ids = actor.model.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False,
                                   pad_token_id=actor.tokenizer.pad_token_id)[0, len(prompt):].tolist()
    rows, tasks, _ = write_inputs(tmp_path, ids)
    row = bench_plan_choice.read_episodes(rows)[0]
    found = bench_plan_choice.expected_deviations(bench_plan_choice.load_stage_actor(stage_dir).model, row, [1.0, 0.5])
    full = torch.tensor([row["token_ids"]])
    for t, got in zip((1.0, 0.5), found):
        with torch.no_grad():
            logprobs, _ = sequence_logprobs(actor.model, full, torch.ones_like(full), t)
        policy = torch.tensor(row["loss_mask"], dtype=torch.bool)
        assert got == pytest.approx(float((1 - logprobs[0, policy].exp()).sum()), rel=1e-4, abs=1e-6)
    assert 0 < found[1] < found[0] < len(ids)  # a colder sample leaves the greedy path less often


def test_a_stage_stopped_before_its_export_is_read_with_another_directory_s_config(stage, tmp_path, capsys):
    """A PPO stage stopped midway has a checkpoint but no actor/ yet: --config names a directory
    with the architecture (the stage it started from), and the weights are still its own."""
    stage_dir, _ = stage
    stopped = tmp_path / "stopped"
    shutil.copytree(stage_dir / "checkpoints", stopped / "checkpoints")
    rows, tasks, _ = write_inputs(tmp_path, [7, 8, 9])
    base = ["--prompts", str(rows), "--tasks", str(tasks), "--episodes", "1"]
    with pytest.raises(SystemExit) as no_config:
        bench_plan_choice.main(["--stage", str(stopped), *base])
    assert no_config.value.code == 2 and "--config DIR" in capsys.readouterr().err
    out_exported, out_stopped = tmp_path / "exported.json", tmp_path / "stopped.json"
    assert bench_plan_choice.main(["--stage", str(stage_dir), *base, "--out", str(out_exported)]) == 0
    assert bench_plan_choice.main(["--stage", str(stopped), "--config", str(stage_dir / "actor"), *base,
                                   "--out", str(out_stopped)]) == 0
    exported = json.loads(out_exported.read_text())["stages"][str(stage_dir)]
    found = json.loads(out_stopped.read_text())["stages"][str(stopped)]
    assert found["per_task"][TASK]["1.0"] == pytest.approx(exported["per_task"][TASK]["1.0"])
    assert found["by_temperature"]["1.0"]["deviations_mean"] == pytest.approx(
        exported["by_temperature"]["1.0"]["deviations_mean"])


def test_unusable_input_is_refused_with_the_reason(stage, tmp_path, capsys):
    stage_dir, _ = stage
    rows, tasks, _ = write_inputs(tmp_path, [7, 8])
    with pytest.raises(SystemExit) as missing:
        bench_plan_choice.main(["--stage", str(tmp_path / "nowhere"), "--prompts", str(rows), "--tasks", str(tasks)])
    assert missing.value.code == 2 and "no such file or directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as cold:
        bench_plan_choice.main(["--stage", str(stage_dir), "--prompts", str(rows), "--tasks", str(tasks),
                                "--temperatures", "1,0"])
    assert cold.value.code == 2 and "positive temperatures" in capsys.readouterr().err
    other_tasks = tmp_path / "other.parquet"
    pq.write_table(pa.table({"id": ["fam_other"], "spec": [json.dumps(SPEC)]}), other_tasks)
    with pytest.raises(SystemExit, match="no spec for 1 task"):
        bench_plan_choice.main(["--stage", str(stage_dir), "--prompts", str(rows), "--tasks", str(other_tasks)])
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"task": "x.py", "token_ids": [1, 2], "loss_mask": [0, 0]}) + "\n")
    with pytest.raises(SystemExit, match="no episode rows"):
        bench_plan_choice.main(["--stage", str(stage_dir), "--prompts", str(empty), "--tasks", str(tasks)])
