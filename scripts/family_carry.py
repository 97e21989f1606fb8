"""Pack what the next GPU call carries (benchmarks/h200/family_runs.sh's STATE, .famstate) from
the family pipeline's state in several places: what earlier calls returned (their
family_runs.tar.gz and weights.*, or a carry made by this script) and runs made on other machines
(scripts/family_pipeline.py --out, e.g. the stages before PPO on a CPU machine, checkpoints in it).

    python scripts/family_carry.py --from .famstate --from /tmp/returned --add /tmp/cpu_prefix/runs \
        --to /tmp/famstate.new --seeds 0,1,2 --rewards graduated --reward-stages agentic --steps 3,3,3,6 \
        --export-dtype float16
    rm -rf .famstate && mv /tmp/famstate.new .famstate

The other arguments are family_pipeline.py's plan (seeds, rewards, ablations, steps; no --actor
needed): the weights carried are those of the finished stages that a stage still to run in that
plan starts from (in --export-dtype, at most --export-max-mb), as the GPU host's own export picks
them; a finished stage whose weights are in none of the places is set aside as
``<stage>.uncarried`` and runs again there. --to gets those weights, weights.json and
family_runs.tar.gz: the runs' small files (no checkpoints, model files, rollouts or W&B files, but an
unfinished stage's sampling, so that it resumes there), the
pipeline's journal (every place's, in order) and the sandbox baselines timed on the GPU hosts
(--from only: a CPU machine's baselines are keyed by its own CPU and would never be used there).

A --from may be ``git:REV:PATH``: a carry committed at REV and replaced since (data/family/carry
holds what the next call needs; the stages it does not need stay in history, since every call
carries the tracked files: data/family/carry/README.md says which commit holds which stage).

Places are read in the order given, --from before --add, oldest first: a stage in several places
is taken from the last one, except that a finished stage (pipeline_done.json) is never replaced by
one that is not. A stage's weights come from the place its files were taken from. ``--anew
agentic_full`` leaves every seed's run of that stage out, so that the plan runs it again from the
same start (a new arm of PPO from the same value stages: other settings, more steps); the start
validation it judged is banked as ``agentic_full.start`` (family_pipeline reads it instead of
judging the same actor again: a call on another kind of host should remove it). Says how much
the call would carry with the tracked files and exits 1 when that is over what a call may carry
(64 MiB), 2 with one line for a place that cannot be read.
"""
from __future__ import annotations

import argparse
import csv
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
import family_pipeline as fp  # noqa: E402
import family_state  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = "family_runs.tar.gz"
JOURNAL = "pipeline.jsonl"
# What a run call may carry: the tracked files, the carry paths and untracked files together.
CARRY_LIMIT = 64 * 2 ** 20
# Left out of the runs' copy here (a stage's checkpoint is kept: its weights are exported from it).
NOT_COPIED = ("rollouts", "wandb", "*.safetensors", "*.bin")
# Left out of the bundle too: the weights travel as parts.
NOT_BUNDLED = {"rollouts", "wandb", "checkpoints"}
# But an unfinished stage's sampling (family_pipeline.SAMPLING: episodes of its init actor, finished
# or cut off) travels, so that it resumes where it stopped instead of sampling again: ~140 KB an
# episode before compression, and a value stage's 48 outlast a call.
SAMPLING = fp.SAMPLING
# And of an unfinished PPO stage's rollouts files (family_pipeline.SHARED_ROLLOUTS), the batch a
# resume there can take (last_batch): a PPO step's 16 episodes or a validation's 38 take minutes.
SHARED_ROLLOUTS = fp.SHARED_ROLLOUTS


def seed_entries(runs: Path) -> list[Path]:
    """What a pipeline's --out holds per seed, <reward>/seed<k>/*: the stage directories (set-aside
    ones too) and the files beside them (the log of a stage that was stopped, <stage>.killed.log)."""
    return sorted(runs.glob("*/seed*/*"))


def finished(stage_dir: Path) -> bool:
    return (stage_dir / fp.DONE).is_file()


def merge_runs(places: list[Path], into: Path) -> dict[str, Path]:
    """Copy the stage directories of ``places`` (runs directories, oldest first) into ``into``
    and join their journals; returns each stage (relative path) -> the place it was taken from."""
    taken: dict[str, Path] = {}
    for runs in places:
        for entry in seed_entries(runs):
            rel = entry.relative_to(runs).as_posix()
            target = into / rel
            if rel in taken and finished(target) and not finished(entry):
                print(f"family_carry: {rel}: kept finished from {taken[rel]}, not the unfinished one in {runs}",
                      file=sys.stderr)
                continue
            lay_down(entry, target, shutil.ignore_patterns(*NOT_COPIED))
            if entry.is_dir() and not finished(entry):
                copy_resumable(entry, target)
            taken[rel] = runs
    join_journals(places, into)
    return taken


def lay_down(entry: Path, target: Path, ignore=None) -> None:
    """``entry`` (a stage directory, or a file beside the stages) copied to ``target``, in place of
    whatever run of it is there."""
    if target.is_dir():
        shutil.rmtree(target)
    if entry.is_dir():
        shutil.copytree(entry, target, ignore=ignore)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(entry, target)


def copy_resumable(stage_dir: Path, target: Path) -> None:
    """What a resume of ``stage_dir`` takes into ``target``'s rollouts: its sampling files
    (SAMPLING) and, of its PPO rollouts files (SHARED_ROLLOUTS), the last batch, unless that was a
    validation that finished (a resumed or restarted stage takes a batch only as its first: its
    start validation, the validation its checkpoint owes, or the step after its checkpoint)."""
    rollouts = stage_dir / "rollouts"
    files = [f for pattern in SAMPLING for f in rollouts.glob(pattern)]
    if files:
        (target / "rollouts").mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copy2(f, target / "rollouts" / f.name)
    for name in SHARED_ROLLOUTS:
        step, lines = last_batch(rollouts / name)
        if lines and not (name == "val.jsonl" and step is not None and fp.has_validation(stage_dir, step)):
            (target / "rollouts").mkdir(parents=True, exist_ok=True)
            (target / "rollouts" / name).write_text("".join(lines), encoding="utf-8")


def last_batch(path: Path) -> tuple[Optional[int], list[str]]:
    """The step of the last batch in a rollouts file (rows' ``train_step``) and its whole lines."""
    from src.agent.trajectory import trajectory_lines  # here: src.agent's import costs ~2 s of start-up

    if not path.is_file():
        return None, []
    batches: dict[int, list[str]] = {}
    for line, row in trajectory_lines(path):
        if row is not None and isinstance(row.get("train_step"), int):
            batches.setdefault(row["train_step"], []).append(line)
    if not batches:
        return None, []
    step = max(batches)
    return step, batches[step]


def join_journals(places: list[Path], into: Path) -> None:
    """``into``'s journal: the lines of every place's, in the places' order, each line once (a
    carry made from another repeats the lines they share)."""
    journal: dict[str, None] = {}
    for runs in places:
        if (runs / JOURNAL).is_file():
            journal.update(dict.fromkeys(line for line in (runs / JOURNAL).read_text().splitlines() if line.strip()))
    into.mkdir(parents=True, exist_ok=True)
    (into / JOURNAL).write_text("".join(line + "\n" for line in journal))


def bank_start_rows(stage_dir: Path) -> bool:
    """Keep ``stage_dir``'s start validation (its metrics rows at step -1) as ``<stage>.start/
    metrics.csv``, family_pipeline's banked start, unless one is banked already; the rows after
    it belong to the run being set aside and are left out. Returns whether a start is banked."""
    kept = fp.banked_start(stage_dir)
    if fp.has_start_validation(kept):
        return True
    if not fp.has_start_validation(stage_dir):
        return False
    with open(stage_dir / "metrics.csv", newline="") as f:
        reader = csv.DictReader(f)
        header, rows = reader.fieldnames, [r for r in reader if r.get("step") and float(r["step"]) == -1]
    kept.mkdir(exist_ok=True)
    with open(kept / "metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
    return True


def set_aside_anew(out: Path, stages: list[str]) -> list[str]:
    """Every seed's run of each stage named in ``stages`` leaves the merged runs (it stays in the
    place it came from), so that the plan runs it again from the same start: a new arm (other
    settings, more steps) without another judging of that start, whose validation is banked
    (bank_start_rows). Returns the stages set aside, relative to ``out``."""
    gone = []
    for name in stages:
        runs = sorted(p for p in out.glob(f"*/seed*/{name}") if p.is_dir())
        if not runs:
            known = sorted({p.name for p in out.glob("*/seed*/*") if p.is_dir()})
            raise family_state.StateError(f"--anew {name}: no run of that stage in the places (stages there: "
                                          f"{', '.join(known) or 'none'})")
        for stage_dir in runs:
            banked = bank_start_rows(stage_dir)
            shutil.rmtree(stage_dir)
            (stage_dir.parent / f"{name}.killed.log").unlink(missing_ok=True)
            rel = stage_dir.relative_to(out).as_posix()
            gone.append(rel)
            print(f"family_carry: {rel} set aside to run anew"
                  f"{'; its start validation banked as ' + name + fp.BANKED_START if banked else ''}", file=sys.stderr)
    return gone


def state_folder(spec: str, tmp: Path) -> Path:
    """A --from place: a folder, or ``git:REV:PATH``, that folder as commit REV of this repository
    holds it (a carry committed earlier and replaced since: the stages a call does not need stay in
    history, out of what every call carries), written out under ``tmp``."""
    if not spec.startswith("git:"):
        return Path(spec)
    rev, _, path = spec[len("git:"):].partition(":")
    if not rev or not path:
        raise family_state.StateError(f"--from {spec}: give git:REV:PATH (e.g. git:HEAD~1:data/family/carry)")
    into = Path(tempfile.mkdtemp(prefix="git.", dir=tmp))
    archive = subprocess.run(["git", "archive", "--format=tar", rev, path], cwd=ROOT, capture_output=True)
    if archive.returncode != 0:
        raise family_state.StateError(f"--from {spec}: git cannot give it ({archive.stderr.decode().strip()})")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return into / path


def unpack(state: Path, into: Path) -> Path:
    """A returned state's bundle into ``into`` (runs/, baselines/); returns its runs directory."""
    bundle = state / BUNDLE
    if not bundle.is_file():
        raise family_state.StateError(f"{state}: no {BUNDLE} (what a call returns, or a carry made here)")
    try:
        with tarfile.open(bundle) as tar:
            # The data filter (no absolute paths, links out or devices) where this Python has it.
            tar.extractall(into, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    except (tarfile.TarError, OSError) as exc:
        raise family_state.StateError(f"{bundle}: cannot be unpacked ({exc})") from exc
    return into / "runs"


def bundle_filter(info: tarfile.TarInfo) -> Optional[tarfile.TarInfo]:
    path = Path(info.name)
    # The runs' copy holds no rollouts but what unfinished stages resume from (merge_runs).
    resumable = SAMPLING + SHARED_ROLLOUTS
    if (info.isdir() and path.name == "rollouts") or (path.parent.name == "rollouts"
                                                       and any(path.match(p) for p in resumable)):
        return info
    if NOT_BUNDLED & set(path.parts) or info.name.endswith((".ckpt", ".safetensors", ".bin")):
        return None
    return info


def write_bundle(work: Path, dest: Path) -> None:
    with tarfile.open(dest / BUNDLE, "w:gz") as tar:
        for name in ("runs", "baselines"):
            if (work / name).exists():
                tar.add(work / name, arcname=name, filter=bundle_filter)


def tracked_bytes(replaced: str = "") -> int:
    """The bytes of the files git tracks here (they travel with every call), but those under
    ``replaced`` (a tracked folder the new carry takes the place of)."""
    try:
        names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return 0
    prefix = replaced.rstrip("/") + "/" if replaced else None
    return sum((ROOT / n).stat().st_size for n in names.decode().split("\0")
               if n and (ROOT / n).is_file() and not (prefix and n.startswith(prefix)))


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def parse_args(argv: Optional[list[str]]) -> tuple[argparse.Namespace, argparse.Namespace]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="states", action="append", default=[],
                   help="a returned state or an earlier carry (family_runs.tar.gz, weights.*), or git:REV:PATH "
                        "(such a folder as a commit holds it); repeatable")
    p.add_argument("--add", action="append", default=[],
                   help="a family_pipeline.py --out made elsewhere, checkpoints in it; repeatable")
    p.add_argument("--to", required=True, help="the new carry (a directory that does not exist yet or is empty)")
    p.add_argument("--replacing", default="data/family/carry",
                   help="the tracked folder the new carry takes the place of (its files are not counted in the "
                        "call's size; '' counts every tracked file)")
    p.add_argument("--anew", action="append", default=[], metavar="STAGE",
                   help="a stage name (e.g. agentic_full) whose runs in the places are left out, so that the plan "
                        "runs it again from the same start, its start validation banked; repeatable")
    p.add_argument("--with", dest="also", action="append", default=None,
                   help="other paths the call carries, counted in its size; repeatable (default: .whl)")
    args, plan = p.parse_known_args(argv)
    # Not argparse's default=[".whl"]: "append" adds to that list, so --with .whl counted it twice.
    args.also = list(dict.fromkeys(args.also or [".whl"]))
    if not args.states and not args.add:
        p.error("nothing to pack: give --from or --add")
    return args, plan


def main(argv: Optional[list[str]] = None) -> int:
    args, plan_argv = parse_args(argv)
    dest = Path(args.to)
    if dest.exists() and any(dest.iterdir()):
        print(f"family_carry: error: --to {dest} is not empty", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="family_carry.") as tmp:
        work = Path(tmp) / "work"
        plan = fp.parse_args([*plan_argv, "--out", str(work / "runs")])
        out, seeds, rewards, ablations, settings = fp.planned(plan)
        try:
            states = [state_folder(s, Path(tmp)) for s in args.states]
            unpacked = [unpack(s, Path(tmp) / f"from{i}") for i, s in enumerate(states)]
            added = [Path(a) for a in args.add]
            for runs in added:
                if not runs.is_dir():
                    raise family_state.StateError(f"--add {runs}: not a directory")
            taken = merge_runs(unpacked + added, out)
            for rel in set_aside_anew(out, args.anew):
                taken.pop(rel, None)
            for runs in unpacked:
                if (runs.parent / "baselines").is_dir():
                    shutil.copytree(runs.parent / "baselines", work / "baselines", dirs_exist_ok=True)
            for state, runs in zip(states, unpacked):
                if (state / family_state.MANIFEST).is_file():
                    mine = {rel for rel, place in taken.items() if place == runs}
                    family_state.import_weights(state, out, fp.DONE, stages=mine)
            chains = fp.plan_chains(out, seeds, rewards, ablations, settings)
            for stage_dir in family_state.reopen_uncarried(chains, fp.DONE, fp.ACTOR_ONLY):
                print(f"family_carry: {Path(stage_dir).relative_to(out)} finished, but its weights are in none of "
                      "the places: set aside, it runs again", file=sys.stderr)
            fp.export(chains, out, dest, int(plan.export_max_mb * 1e6), plan.export_dtype, plan.export_moments)
        except family_state.StateError as exc:
            print(f"family_carry: {exc}", file=sys.stderr)
            return 2
        write_bundle(work, dest)
    carried = dir_bytes(dest)
    also = sum(dir_bytes(Path(a)) if Path(a).is_dir() else Path(a).stat().st_size for a in args.also if Path(a).exists())
    total = carried + also + tracked_bytes(args.replacing)
    weights = family_state.read_manifest(dest)
    print(f"family_carry: {dest}: {len(weights)} stages' weights ({', '.join(e['stage'] for e in weights.values()) or 'none'}), "
          f"{carried / 1e6:.1f} MB; with {', '.join(args.also)} and the tracked files"
          f"{' but ' + args.replacing if args.replacing else ''} {total / 1e6:.1f} MB "
          f"of the {CARRY_LIMIT / 1e6:.1f} MB a call may carry")
    if total > CARRY_LIMIT:
        print("family_carry: over what a call may carry: fewer seeds in the plan, --export-max-mb, or --export-dtype float16",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
