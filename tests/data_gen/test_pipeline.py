"""End to end through the Hydra entry point: `python -m data_gen` on a few tiny CPU tasks."""
import json
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

from data_gen.compose import PAPER_OP_COUNT_WEIGHTS, Sizing
from data_gen.dataset import load_tasks
from data_gen.filter import FilterConfig

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf" / "data_gen"


def run_data_gen(out: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "data_gen", f"output_dir={out}", "num_candidates=3", "filter.workers=2",
           "filter.isolate=false", "filter.compile_backend=eager", "progress=false", "crawl.transformers=false",
           "profile.sizing.target_ms=[0.3,2.0]", "profile.timing.repeats=2", *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=420)


def test_pipeline_writes_dataset_and_report_then_resumes(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "relu_add.py").write_text((ROOT / "examples" / "tasks" / "relu_add.py").read_text())
    out = tmp_path / "run"
    first = run_data_gen(out, f"decontaminate.benchmark_dir={bench}")
    assert first.returncode == 0, first.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["compose"]["composed"] == 3 and report["filter"]["judged"] == 3
    assert set(report["filter"]["rubrics"]) == {"eager", "deterministic", "nontrivial", "runtime", "compile"}
    assert report["decontaminate"]["benchmark_programs"] == 1
    rows = load_tasks(out / "tasks.parquet")
    assert len(rows) == report["final"]["rows"] == report["filter"]["accepted"] - report["decontaminate"]["dropped"] \
        - report["dedupe"]["dropped"]
    assert all(r["data_source"].startswith("torch#") and r["composer"] == "offline" for r in rows)
    assert (out / "report.md").read_text().count("| torch#2 |") == 1
    assert report["filter"]["judged_now"] == 3 and report["filter"]["stage_s_median"]["eager"] > 0
    if report["filter"]["accepted"]:
        assert (out / "runtime_hist.png").stat().st_size > 1000
    assert "decontamination SKIPPED" not in first.stderr
    assert first.stdout.splitlines() == [f"accepted {report['filter']['accepted']} of 3 judged; {len(rows)} tasks "
                                         f"in {out / 'tasks.parquet'}"]  # the log is on stderr and in data_gen.log
    assert "wrote" in first.stderr and "wrote" in (out / "data_gen.log").read_text()
    assert not (out / "__main__.log").exists()
    again = run_data_gen(out)  # no benchmark_dir this time: the console says decontamination was skipped
    assert again.returncode == 0, again.stderr[-3000:]
    assert "decontamination SKIPPED: no benchmark_dir given" in again.stderr
    resumed = json.loads((out / "report.json").read_text())["filter"]
    assert resumed["reused_from_earlier_run"] == 3 and resumed["judged_now"] == 0
    assert resumed["accepted_per_hour"] == 0.0  # nothing judged now: the reused verdicts do not count


def test_configs_match_the_code():
    cfg = OmegaConf.load(CONF / "pipeline.yaml")
    assert list(cfg.mix.op_count_weights) == list(PAPER_OP_COUNT_WEIGHTS)
    filt = {k: v for k, v in OmegaConf.to_container(cfg.filter).items() if k != "time_budget_s"}
    FilterConfig.from_dict(filt)  # every key is a FilterConfig field
    for profile in ("cpu", "gpu"):
        p = OmegaConf.to_container(OmegaConf.load(CONF / "profile" / f"{profile}.yaml"))
        Sizing.from_dict(p["sizing"])
    gpu = OmegaConf.load(CONF / "profile" / "gpu.yaml")
    assert list(gpu.window_ms) == [1.0, 100.0] and gpu.device == "cuda"


def test_unreachable_llm_is_a_clear_error(tmp_path):
    proc = run_data_gen(tmp_path / "llm", "composer=llm", "composer.llm.base_url=http://127.0.0.1:9/v1",
                        "composer.llm.model=m", "composer.llm.max_retries=0", "composer.llm.api_key_env=",
                        "num_candidates=6")
    assert proc.returncode == 2
    assert "data_gen: error:" in proc.stderr and "cannot reach" in proc.stderr


def test_verdicts_survive_a_change_of_placement_but_not_of_judgement():
    from data_gen.filter import FilterConfig
    from data_gen.pipeline import filter_key

    base = FilterConfig(device="cuda", workers=12, devices=(0,))
    moved = FilterConfig(device="cuda", workers=28, devices=(0, 1))
    stricter = FilterConfig(device="cuda", workers=12, devices=(0,), compile_tol=1e-4)
    code = "class Model: pass\n"
    assert filter_key(code, base) == filter_key(code, moved)
    assert filter_key(code, base) != filter_key(code, stricter)
    assert filter_key(code, base) != filter_key(code + "#\n", base)


def test_help_is_the_entry_scripts_own():
    proc = subprocess.run([sys.executable, "-m", "data_gen", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("Synthesize a CUDA-Agent-Ops-style training set")
    assert "python -m data_gen num_candidates=64 filter.workers=2" in out
    assert "  composer: llm, offline*\n" in out and "  profile: cpu*, gpu\n" in out
    assert "  filter.workers=2\n      Candidates judged at once" in out
    assert "powered by Hydra" not in out and "benchmark:" not in out
