"""scripts/family_figures.py: issue 17's committed figures drawn again from the committed run
bundles give the committed summaries, so the numbers docs/family.md quotes are the data's."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import family_figures  # noqa: E402


@pytest.mark.parametrize("figure", sorted(family_figures.FIGURES))
def test_a_committed_figure_is_drawn_again_from_the_committed_bundles(figure, tmp_path, capsys):
    assert family_figures.main([figure, "--out", str(tmp_path)]) == 0
    drawn, committed = tmp_path / figure, ROOT / "docs" / "figures" / figure
    for name in ("family_summary.json", "family_summary.md"):
        assert (drawn / name).read_text() == (committed / name).read_text(), name
    # The plots are written, and the one of every condition is left out as a repeat.
    assert sorted(p.name for p in drawn.glob("*.png")) == sorted(p.name for p in committed.glob("*.png"))
    assert not (drawn / "family_curves.png").exists()


def test_the_figure_takes_a_later_carrys_copy_of_a_stage(tmp_path, monkeypatch):
    # Two carries with the same stage: the one laid down last is the figure's.
    import tarfile

    for carry, value in (("first", "1.0"), ("second", "2.0")):
        stage = tmp_path / "src" / carry / "runs" / "graduated" / "seed0" / "agentic_full"
        stage.mkdir(parents=True)
        (stage / "metrics.csv").write_text(f"step,val/reward_mean\n0,{value}\n")
        (stage.parent.parent.parent / "pipeline.jsonl").write_text(f'{{"carry": "{carry}"}}')
        (tmp_path / "carry" / carry).mkdir(parents=True)
        with tarfile.open(tmp_path / "carry" / carry / "family_runs.tar.gz", "w:gz") as tar:
            tar.add(stage.parent.parent.parent, arcname="runs")
    monkeypatch.setattr(family_figures, "CARRY", tmp_path / "carry")
    monkeypatch.setitem(family_figures.FIGURES, "two", (("first", ("*/seed*/agentic_*",)),
                                                        ("second", ("graduated/seed0/agentic_full",))))
    runs = family_figures.assemble("two", tmp_path / "work")
    assert (runs / "graduated" / "seed0" / "agentic_full" / "metrics.csv").read_text().endswith("2.0\n")
    assert (runs / "pipeline.jsonl").read_text().splitlines() == ['{"carry": "first"}', '{"carry": "second"}']


def test_a_missing_carry_or_an_unknown_figure_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(family_figures, "CARRY", tmp_path / "nowhere")
    assert family_figures.main(["family_ablations", "--out", str(tmp_path / "out")]) == 2
    assert "no family_runs.tar.gz" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        family_figures.main(["family_nothing"])
    assert exc.value.code == 2
    assert "no figure family_nothing" in capsys.readouterr().err
