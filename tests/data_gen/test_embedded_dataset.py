"""The embedded default training set (data/ops_h200): present, loadable, and what its README says."""
import json
from collections import Counter

from data_gen.dataset import DEFAULT_TASKS, load_tasks, normalized_hash
from data_gen.filter_worker import RUBRICS
from data_gen.program import check_task_source, model_ops


def test_the_embedded_set_is_the_default_and_holds_at_least_500_tasks():
    rows = load_tasks()
    assert DEFAULT_TASKS.exists() and len(rows) >= 500
    report = json.loads((DEFAULT_TASKS.parent / "report.json").read_text())
    decontam = json.loads((DEFAULT_TASKS.parent / "decontamination.json").read_text())
    assert report["final"]["rows"] - len(decontam["dropped_rows"]) == decontam["kept"] == len(rows)
    dropped = {d["id"] for d in decontam["dropped_rows"]}
    assert not dropped & {row["id"] for row in rows}  # decontaminated against KernelBench levels 1-3
    assert decontam["benchmark_programs"] >= 250 and all(row["decontam_similarity"] <= 0.9 for row in rows)


def test_every_task_is_wellformed_accepted_and_in_the_window():
    rows = load_tasks()
    for row in rows:
        check_task_source(row["code"], row["id"])
        assert model_ops(row["code"]) == row["ops"] or row["data_source"] == "transformers#1"
        lib, _, n = row["data_source"].partition("#")
        assert lib in ("torch", "transformers") and (lib == "transformers" or int(n) == len(row["ops"]))
        assert all(row["verdicts"][r]["passed"] is True for r in RUBRICS), row["id"]
        assert 1.0 <= row["eager_ms"] <= 100.0 and row["compile_ms"] > 0 and "H200" in row["device"]
        assert row["code_sha256"] == normalized_hash(row["code"])
    assert len({row["code_sha256"] for row in rows}) == len(rows)  # deduplicated


def test_the_mix_follows_the_paper_mostly_two_op_tasks():
    mix = Counter(row["data_source"] for row in load_tasks())
    assert mix.most_common(1)[0][0] == "torch#2" and mix["torch#2"] / sum(mix.values()) > 0.7
    assert {"torch#1", "torch#3", "torch#4", "torch#5", "transformers#1"} <= set(mix)
