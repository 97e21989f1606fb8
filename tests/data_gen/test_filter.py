"""Each filter rubric rejects a hand-made bad program for the right reason (in worker processes)."""
from __future__ import annotations

import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from data_gen.compose import Candidate
from data_gen.filter import FilterConfig, filter_candidates

HEADER = "import os, time\nimport torch\nimport torch.nn as nn\n\n"
INPUTS = "\n\ndef get_inputs():\n    return [torch.randn(64, 32)]\n\n\ndef get_init_inputs():\n    return []\n"


def program(forward_body: str, init_body: str = "pass") -> str:
    """A task whose forward is ``forward_body`` (lines separated by newlines, no indentation)."""
    body = textwrap.indent(forward_body, " " * 8)
    return (HEADER + "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            f"        {init_body}\n\n    def forward(self, x):\n{body}\n" + INPUTS)


PROGRAMS = {
    # name: (source, rubric expected to fail first (None: accepted), words in the reason)
    "good": (program("return torch.tanh(x @ x.t())"), None, ""),
    "init_raises": (program("return x", "raise ValueError('bad size')"), "eager", "building Model failed"),
    "forward_raises": (program("return x @ torch.randn(7, 3)"), "eager", "forward failed"),
    "returns_string": (program("return 'done'"), "eager", "not a tensor"),
    "dropout": (program("return self.drop(x)", "self.drop = nn.Dropout(0.5)"), "deterministic", "same inputs"),
    "constant": (program("return torch.zeros_like(x) + 3.0"), "nontrivial", "constant"),
    "indistinguishable": (program("return torch.arange(x.numel()).float() + x.mean() * 1e-6"), "nontrivial",
                          "indistinguishable"),
    "nan": (program("return torch.log(-x.abs() - 1.0)"), "nontrivial", "NaN"),
    "too_slow": (program("time.sleep(0.25)\nreturn x * 2"), "runtime", "outside"),
    # Compiled code that computes something else than eager (the compile rubric's check).
    "compile_differs": (program("if torch.compiler.is_compiling():\n    return x * 3\nreturn x * 2"), "compile",
                        "differs from eager"),
    "crash": (program("os._exit(3)"), "eager", "exited with code 3"),
    # Out of device memory (the allocator's error; a kernel's, as the text): the load, not the task.
    "device_oom": (program("raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB')"),
                   "eager", "out of device memory"),
    "device_oom_in_init": (program("return x", "raise RuntimeError('CUDA error: out of memory')"), "eager",
                           "out of device memory"),
}

CFG = FilterConfig(window_ms=(0.0, 100.0), workers=2, timeout_s=180.0, isolate=False,
                   timing={"warmup": 1, "warmup_ms": 0.0, "repeats": 2, "cpu_threads": 1})


def candidates(names):
    return [Candidate(name, i, "handmade", 0, code=PROGRAMS[name][0]) for i, name in enumerate(names)]


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    work = tmp_path_factory.mktemp("filter")
    return {r.id: r for r in filter_candidates(candidates(list(PROGRAMS)), CFG, work)}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_rubric_rejects_for_the_right_reason(verdicts, name):
    _, rubric, words = PROGRAMS[name]
    result = verdicts[name]
    if rubric is None:
        assert result.accepted, result.verdicts
        assert all(v["passed"] for v in result.verdicts.values())
        assert result.eager_ms is not None and result.compile_ms is not None and result.device.startswith("cpu")
        return
    assert not result.accepted
    assert result.first_failure == rubric, result.verdicts
    assert words in result.verdicts[rubric]["reason"], result.verdicts[rubric]
    # later rubrics were not run: they are reported as such, not as passes
    later = list(result.verdicts)[list(result.verdicts).index(rubric) + 1:]
    assert all(result.verdicts[r]["passed"] is None for r in later)


def test_out_of_device_memory_is_a_worker_error_judged_again_on_resume(verdicts):
    for name in ("device_oom", "device_oom_in_init"):
        assert "out of device memory" in verdicts[name].worker_error  # load_previous skips these
    assert verdicts["forward_raises"].worker_error == ""  # an ordinary failure stays a verdict


def test_out_of_device_memory_is_judged_again_with_fewer_workers(tmp_path):
    """Out of memory on the first attempt only (as when big neighbours hold the GPU): the retry
    at the end gives the task its verdict; with retries off it stays a worker error."""
    code = program("if not os.path.exists('tried'):\n    open('tried', 'w').close()\n"
                   "    raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB')\n"
                   "return torch.tanh(x @ x.t())")
    cands = [Candidate("oom_once", 0, "handmade", 0, code=code)]
    (retried,) = list(filter_candidates(cands, CFG, tmp_path / "retry"))
    assert retried.accepted and not retried.worker_error
    (left,) = list(filter_candidates(cands, replace(CFG, oom_retry_workers=0), tmp_path / "no_retry"))
    assert not left.accepted and "out of device memory" in left.worker_error


def test_hanging_candidate_is_killed_at_the_timeout(tmp_path):
    cfg = FilterConfig(window_ms=(0.0, 100.0), workers=1, timeout_s=4.0, isolate=False)
    hang = Candidate("hang", 0, "handmade", 0, code=program("while True:\n    pass"))
    (result,) = list(filter_candidates([hang], cfg, tmp_path))
    assert not result.accepted
    assert result.first_failure == "eager"
    assert "timeout after 4 s" in result.verdicts["eager"]["reason"]


def test_the_candidate_runs_in_another_process(tmp_path):
    """A candidate that records its pid proves it did not run in the pipeline's process."""
    import os

    marker = tmp_path / "pid.txt"
    code = program(f"open({str(marker)!r}, 'w').write(str(os.getpid()))\nreturn x * 2")
    cfg = FilterConfig(window_ms=(0.0, 100.0), workers=1, isolate=False, stop_at_first_failure=True,
                       compile_backend="eager", time_compiled=False)
    list(filter_candidates([Candidate("pid", 0, "handmade", 0, code=code)], cfg, tmp_path / "work"))
    assert int(Path(marker).read_text()) != os.getpid()


def test_the_time_budget_stops_candidates_in_flight_and_leaves_them_unjudged(tmp_path):
    import time

    hang = Candidate("hang", 0, "handmade", 0, code=program("time.sleep(600)\nreturn x"))
    start = time.monotonic()
    results = list(filter_candidates([hang], CFG, tmp_path / "work", deadline=start + 4.0))
    assert results == []  # nothing recorded: a rerun judges it
    assert time.monotonic() - start < 30  # stopped at the budget, not at the 180 s timeout


def test_worker_errors_are_judged_again_on_resume(tmp_path):
    import json

    from data_gen.pipeline import load_previous

    log = tmp_path / "filter_results.jsonl"
    judged = {"id": "a", "verdicts": {}, "accepted": False, "worker_error": ""}
    timed_out = {"id": "b", "verdicts": {}, "accepted": False, "worker_error": "timeout after 100 s"}
    log.write_text(json.dumps({"key": "ka", "result": judged}) + "\n"
                   + json.dumps({"key": "kb", "result": timed_out}) + "\n" + '{"key": "kc", "res')
    assert set(load_previous(log)) == {"ka"}


def test_a_timeout_in_a_later_rubric_is_that_rubrics_failure(tmp_path):
    """Killed while compiling: the report must say compile failed (timeout), not 'not run'."""
    cfg = FilterConfig(window_ms=(0.0, 100.0), workers=1, timeout_s=25.0, isolate=False,
                       timing={"warmup": 1, "warmup_ms": 0.0, "repeats": 2, "cpu_threads": 1})
    code = program("if torch.compiler.is_compiling():\n    time.sleep(600)\nreturn x * 2")
    (result,) = list(filter_candidates([Candidate("slow_compile", 0, "handmade", 0, code=code)], cfg, tmp_path))
    assert result.verdicts["runtime"]["passed"] is True
    assert result.first_failure == "compile"
    assert "timeout after 25 s" in result.verdicts["compile"]["reason"]


def test_outputs_are_compared_chunk_by_chunk_to_the_last_element(monkeypatch):
    import torch

    from data_gen import filter_worker

    monkeypatch.setattr(filter_worker, "COMPARE_CHUNK", 4)  # 10 elements: chunks of 4, 4, 2
    a = torch.arange(10, dtype=torch.float32).reshape(2, 5)
    b = a.clone()
    assert filter_worker.close([a], [b], 1e-5, 1e-5) and filter_worker.max_diff([a], [b]) == 0.0
    b[1, 4] += 0.5  # only in the last, short chunk
    assert not filter_worker.close([a], [b], 1e-5, 1e-5)
    assert filter_worker.max_diff([a], [b]) == pytest.approx(0.5)
    assert not filter_worker.close([a], [a.reshape(5, 2)], 1e-5, 1e-5)  # same data, other shape
