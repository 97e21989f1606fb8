"""Draw issue 17's committed figures again from the committed run bundles, one command each:

    python scripts/family_figures.py                       # every figure, into docs/figures/<name>
    python scripts/family_figures.py family_ablations --out /tmp/figs

A figure's runs were made in several places (arms of PPO carried and run in different sessions,
data/family/carry/README.md). Each carry's ``family_runs.tar.gz`` holds the runs of one plan; a
figure takes chosen stage directories from several of them, in order (a later one's copy of a
stage replaces an earlier one's), with every bundle's journal (``runs/pipeline.jsonl``, which
names the host of each stage) joined in the same order, and hands the tree to
``scripts/plot_family.py``. tests/train/test_family_figures.py draws them again and compares the
summaries with the committed ones, so the numbers in docs/family.md stay the data's.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
CARRY = ROOT / "data" / "family" / "carry"
sys.path.insert(0, str(Path(__file__).resolve().parent))

import family_carry  # noqa: E402
import plot_family  # noqa: E402
from family_state import StateError  # noqa: E402

# The graduated arm's PPO stages and their banked start validation (t05/: rollouts at T = 0.5,
# actor_lam 1), which every other arm of these figures is compared with.
GRADUATED_FULL = ("t05", ("graduated/seed*/agentic_full", "graduated/seed*/agentic_full.start"))
# Per figure: (carry, stage-directory patterns under runs/), in the order they are laid down.
FIGURES: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    # Graduated against binary and continuous on the full pipeline (the rewards bundle leaves out
    # the graduated PPO runs: they are t05's).
    "family_rewards": (("rewards", ("*/seed*/agentic_*",)), GRADUATED_FULL),
    # The ablations on the graduated reward: full, PPO without value pretraining, and value
    # pretraining and PPO from the warm-up actor (no RFT).
    "family_ablations": (GRADUATED_FULL,
                         ("no_value", ("graduated/seed*/agentic_no_value", "graduated/seed*/agentic_no_value.start")),
                         ("no_rft", ("graduated/seed*/agentic_no_rft", "graduated/seed*/agentic_no_rft.start"))),
}


def assemble(figure: str, work: Path) -> Path:
    """The runs tree of ``figure`` (FIGURES) under ``work``: the chosen stage directories of each
    carry in order, and their journals joined (family_carry.join_journals)."""
    runs = work / "runs"
    runs.mkdir(parents=True)
    sources = []
    for carry, patterns in FIGURES[figure]:
        source = family_carry.unpack(CARRY / carry, work / "bundles" / carry)
        chosen = sorted({p for pattern in patterns for p in source.glob(pattern) if p.is_dir()})
        if not chosen:
            raise ValueError(f"{figure}: no stage of {patterns} in data/family/carry/{carry}")
        for stage in chosen:
            family_carry.lay_down(stage, runs / stage.relative_to(source))
        sources.append(source)
    family_carry.join_journals(sources, runs)
    return runs


def draw(figure: str, out: Path) -> int:
    """Assemble ``figure``'s runs in a scratch directory and plot them into ``out``."""
    with tempfile.TemporaryDirectory(prefix=f"{figure}_") as scratch:
        runs = assemble(figure, Path(scratch))
        code = plot_family.main(["--runs", str(runs), "--out", str(out)])
    # Each figure is one of plot_family's comparisons (rewards, or ablations), so its plot of every
    # condition would repeat that comparison's plot.
    if not code and len(list(out.glob("family_curves_*.png"))) == 1:
        (out / "family_curves.png").unlink(missing_ok=True)
    return code


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("figures", nargs="*", metavar="FIGURE", help=f"which ({', '.join(FIGURES)}; default: all)")
    p.add_argument("--out", default=str(ROOT / "docs" / "figures"),
                   help="parent directory: each figure goes to <out>/<figure>")
    args = p.parse_args(argv)
    unknown = [f for f in args.figures if f not in FIGURES]
    if unknown:
        p.error(f"no figure {', '.join(unknown)} (there are: {', '.join(FIGURES)})")
    for figure in args.figures or list(FIGURES):
        try:
            code = draw(figure, Path(args.out) / figure)
        except (StateError, ValueError) as err:
            print(f"family_figures: error: {err}", file=sys.stderr)
            return 2
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
