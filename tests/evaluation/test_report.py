"""results.jsonl survives a crash mid-write; the summary and plots are written from rows."""
import json

import pytest

from src.evaluation.metrics import summarize_by_level
from src.evaluation.report import ResultsFileError, markdown_summary, read_results, write_plots, write_summary


def row(level, problem_id, runtime=None, eager=None, compile=None, error=None, violations=()):
    return {"level": level, "problem_id": problem_id, "compiled": True, "correct": error is None,
            "violations": list(violations), "error": error, "runtime_us": runtime, "eager_us": eager,
            "compile_us": compile}


ROWS = [row(1, 1, 50.0, 100.0, 80.0), row(1, 2, error="mismatch", eager=10.0),
        row(2, 1, 25.0, 100.0, None), row(3, 1, error="missing_solution")]


def test_a_line_cut_short_is_dropped_and_the_file_repaired(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps(ROWS[1]) + "\n" + '{"level": 2, "probl')
    assert read_results(path) == ROWS[:2]
    assert path.read_text().endswith("\n") and len(path.read_text().splitlines()) == 2


def test_damage_before_the_last_line_is_an_error(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text("{oops\n" + json.dumps(ROWS[0]) + "\n")
    with pytest.raises(ResultsFileError, match="results.jsonl:1 is not valid JSON"):
        read_results(path)


def test_no_results_file_yet(tmp_path):
    assert read_results(tmp_path / "results.jsonl") == []


def test_markdown_has_a_line_per_level_and_overall():
    text = markdown_summary(summarize_by_level(ROWS))
    # overall: 2 of 4 passed; both > 5% faster than eager; 1 of 4 faster than compile (the other
    # passed task has no compile time); geomeans 2.0 * 4.0 -> 2.83x and 1.6 -> 1.60x.
    assert "| overall | 4 | 50.0% | 50.0% | 25.0% | 2.83x | 1.60x | 50.0% | 50.0% | 50.0% | 25.0% |" in text
    assert "| level2 | 1 | 100.0% | 100.0% | n/a | 4.00x | n/a |" in text
    assert "| level3 | 1 | 0.0% | 0.0% | 0.0% | n/a | n/a |" in text
    assert "| overall | 1 | 1 |" in text  # errors: mismatch 1, missing_solution 1


def test_summary_and_plots_files(tmp_path):
    summary = write_summary(ROWS, tmp_path, {"benchmark": "unit"})
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(summary))
    assert on_disk["context"] == {"benchmark": "unit"}
    assert set(on_disk["levels"]) == {"level1", "level2", "level3", "overall"}
    assert (tmp_path / "summary.md").read_text().startswith("# Benchmark summary")
    for path in write_plots(ROWS, tmp_path):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
