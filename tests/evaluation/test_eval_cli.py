"""eval.py as a user meets it: --help, the machine's default backend, the one-line errors, and
stdout that carries only the Markdown summary."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "kernelbench_sample"
CPU_SOLUTIONS = REPO / "examples" / "kernelbench_sample_solutions" / "cpu"
FALLBACK_LINE = "no CUDA GPU visible: the sandbox runs on the cpu backend"


def run_eval(*overrides: str, cwd: Path = REPO, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "eval.py"), *overrides], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def no_gpu() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible: the default backend is cuda here")


def test_help_is_this_scripts_own():
    proc = run_eval("--help")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("Benchmark evaluation: judge a policy's solutions")
    assert "python eval.py sandbox=cpu policy.solutions=examples/kernelbench_sample_solutions/cpu" in out
    assert "benchmark.root=/path/to/KernelBench \\\n" in out  # launch lines keep their continuations
    assert "  benchmark: kernelbench, sample*\n" in out and "  policy: api, hf, replay*\n" in out
    assert "  workers=null\n      Evaluations in flight at once" in out
    assert "powered by Hydra" not in out and "data_gen" not in out  # groups eval.py does not compose
    assert out.index("== Config groups") < out.index("== Fields of conf/eval.yaml")
    chosen = run_eval("sandbox=cpu", "--help").stdout
    assert "  sandbox: cpu*, default\n" in chosen


def test_explicit_cuda_without_a_gpu_is_one_line_naming_the_hydra_override(tmp_path):
    no_gpu()
    proc = run_eval("sandbox.backend=cuda", f"policy.solutions={CPU_SOLUTIONS}", f"output_dir={tmp_path}")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: backend 'cuda' needs a CUDA GPU and a CUDA build of torch; none is visible here (use sandbox=cpu)"]


def test_without_a_gpu_the_default_is_cpu_said_once_and_stdout_is_only_the_summary(tmp_path, cli_env):
    """From another directory, as a user types it: the default output directory names the cpu
    backend; problems without a solution and one without ModelNew are verdicts of nothing run."""
    no_gpu()
    solutions = tmp_path / "solutions" / "level3"
    solutions.mkdir(parents=True)
    shutil.copy(CPU_SOLUTIONS / "level3" / "2_Residual_MLP_Block.py", solutions)
    proc = run_eval(f"benchmark.root={SAMPLE}", f"policy.solutions={solutions.parent}", "progress=false",
                    cwd=tmp_path, env=cli_env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count(FALLBACK_LINE) == 1, proc.stderr
    out_dir = tmp_path / "outputs" / "eval" / "sample-replay-cpu"
    assert proc.stdout == (out_dir / "summary.md").read_text() + "\n"  # the log went to stderr
    assert f"results, summary and plots in {out_dir.relative_to(tmp_path)}" in proc.stderr
    assert "results, summary and plots" in (out_dir / "eval.log").read_text()
    rows = [json.loads(line) for line in (out_dir / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and {r["backend"] for r in rows} == {"cpu"}
    assert {r["error"] for r in rows} == {"missing_solution", "invalid_solution"}
    assert {(r["stopped_after"], r["num_trials"]) for r in rows} == {("none", 0)}
