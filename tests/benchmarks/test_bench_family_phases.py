"""benchmarks/bench_family_phases.py's summary: phases of the judgements with cached baselines only."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_family_phases import summary  # noqa: E402


def test_the_summary_leaves_out_judgements_that_timed_their_baselines():
    records = [
        {"repeat": 0, "wall_s": 9.0, "stages": {"build": 20.0, "compile": 4.5, "verify": 1.0}},  # timed baselines
        {"repeat": 1, "wall_s": 3.0, "stages": {"build": 1.0, "verify": 1.2}},
        {"repeat": 0, "wall_s": 4.0, "stages": {"build": 1.4, "verify": 1.4, "timing": 0.3}},  # baselines were cached
    ]
    s = summary(records)
    assert s["wall_s"] == {"median": 3.5, "min": 3.0, "max": 4.0, "n": 2}
    assert s["build"]["max"] == 1.4 and "compile" not in s
    assert s["timing"] == {"median": 0.15, "min": 0.0, "max": 0.3, "n": 2}  # a phase a judgement lacks counts 0
