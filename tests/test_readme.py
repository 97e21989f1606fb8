"""The README's commands, read from the README and run the way a user types them.

Every fenced block's info string says what its commands are (README, "This README is tested"):
``bash`` runs anywhere and is run here, on the CPU, in a scratch copy of the checkout (so its
outputs land where the README says, not in the repository); ``bash gpu`` needs a CUDA GPU and
``bash template`` has placeholders to fill in: both are skipped, and their Hydra commands are
composed with ``--cfg job`` so that a renamed group or field fails here; ``bash setup`` is the
set-up this suite runs inside; ``text`` is a synopsis. ``python`` is the interpreter running the
tests (CI's ``.venv/bin/python``, what ``source .venv/bin/activate`` gives a user).

Speed: the runnable commands are started together by the module fixture ``started``, one chain per
entry (``train.py``, ``eval.py``, ``python -m sandbox``, ...): commands of one entry run one after
another in README order, as a user types them, while different entries overlap (each is mostly one
busy process, and each writes only its own ``outputs/`` directory). Each test then checks its own
command's result.
"""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MARKERS = {"bash": None, "bash gpu": "needs a CUDA GPU", "bash template": "has placeholders to fill in",
           "bash setup": "set-up: this suite runs inside the environment it makes"}
# Blocks that hold no commands: a synopsis, a layout.
PROSE = ("text", "")
# Generous: a cold CPU eval of the sample builds 6 kernels and times 12 baselines.
COMMAND_TIMEOUT_S = 900
# An opening or closing fence: three backticks, then an info string without backticks (CommonMark).
FENCE = re.compile(r"^```(?!`)([^`]*)$")


class Command(NamedTuple):
    section: str
    marker: str
    line: str

    @property
    def id(self) -> str:
        return f"{self.section}: {shlex.join(shlex.split(self.line, comments=True))}"


def readme_commands(text: str) -> list[Command]:
    """Each command of each fenced block (continuation lines joined, comment lines dropped)."""
    commands, section, marker, pending = [], "", None, ""
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        fence = FENCE.match(line)
        if fence:
            marker = fence.group(1).strip() if marker is None else None
            assert marker is None or marker in MARKERS or marker in PROSE, \
                f"README block marked {marker!r}: use one of {list(MARKERS) + list(PROSE)}"
            continue
        if marker is None or marker in PROSE or not line.strip() or line.lstrip().startswith("#"):
            continue
        pending += line.rstrip().removesuffix("\\")
        if not line.rstrip().endswith("\\"):
            commands.append(Command(section, marker, " ".join(pending.split())))
            pending = ""
    return commands


COMMANDS = readme_commands(README.read_text())


def argv_of(line: str) -> tuple[dict[str, str], list[str]]:
    """(environment assignments, argv) of a command line, ``python`` as this interpreter."""
    words = shlex.split(line, comments=True)
    env = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    if words and words[0] in ("python", ".venv/bin/python"):
        words[0] = sys.executable
    return env, words


def is_hydra(argv: list[str]) -> bool:
    return argv[0] == sys.executable and (argv[1:2] == ["eval.py"] or argv[1:3] == ["-m", "data_gen"]
                                          or argv[1:2] == ["train.py"])


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A scratch copy of the checkout, as a user's: links to everything but outputs/."""
    root = tmp_path_factory.mktemp("readme") / "checkout"
    root.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in ("outputs", ".git"):
            (root / entry.name).symlink_to(entry)
    return root


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, errors="replace",
                          timeout=COMMAND_TIMEOUT_S)


def entry_of(argv: list[str]) -> tuple[str, ...]:
    """The script or module a command runs (``("train.py",)``, ``("-m", "sandbox")``)."""
    return tuple(argv[1:3]) if argv[1:2] == ["-m"] else tuple(argv[1:2])


# Commands of the longest chain: a test may wait for them all.
LONGEST_CHAIN = max(Counter(entry_of(argv_of(c.line)[1]) for c in COMMANDS if not MARKERS[c.marker]).values())


def run_chain(commands: list[Command], futures: dict[str, Future], cwd: Path, env: dict[str, str]) -> None:
    """Run one entry's commands in README order, each result into its future."""
    for command in commands:
        extra_env, argv = argv_of(command.line)
        try:
            futures[command.id].set_result(run(argv, cwd, {**env, **extra_env}))
        except BaseException as exc:  # noqa: BLE001 - handed to the test of that command
            futures[command.id].set_exception(exc)


@pytest.fixture(scope="module")
def started(request, checkout: Path, cli_env: dict[str, str]) -> dict[str, Future]:
    """Start every selected runnable command of the README: one chain per entry (see the docstring)."""
    selected = {item.callspec.params["command"].id for item in request.session.items
                if item.module is request.module and item.originalname == "test_readme_command_runs_as_typed"}
    chains: dict[tuple[str, ...], list[Command]] = {}
    for command in COMMANDS:
        argv = argv_of(command.line)[1]
        if command.id in selected and not MARKERS[command.marker] and argv[0] == sys.executable:
            chains.setdefault(entry_of(argv), []).append(command)
    futures = {c.id: Future() for chain in chains.values() for c in chain}
    pool = ThreadPoolExecutor(max(len(chains), 1), thread_name_prefix="readme-command")
    for chain in chains.values():
        pool.submit(run_chain, chain, futures, checkout, cli_env)
    yield futures
    pool.shutdown(wait=True)


def check_outputs(argv: list[str], proc: subprocess.CompletedProcess, checkout: Path) -> None:
    """What the README says each entry writes and prints is there."""
    readme = README.read_text()
    if argv[1:2] == ["eval.py"]:
        out_dirs = [d for d in (checkout / "outputs" / "eval").iterdir() if (d / "summary.md").exists()]
        assert len(out_dirs) == 1, out_dirs
        out_dir = out_dirs[0]
        assert f"`{out_dir.relative_to(checkout)}/`" in readme, f"the README does not name {out_dir}"
        for name in ("results.jsonl", "summary.json", "fast_p.png", "speedups.png", "eval.log", "run.json"):
            assert (out_dir / name).is_file(), name
        assert proc.stdout == (out_dir / "summary.md").read_text() + "\n"
    elif argv[1:3] == ["-m", "data_gen"]:
        out_dir = checkout / "outputs" / "data_gen"
        assert "`outputs/data_gen/`" in readme
        for name in ("tasks.parquet", "report.md", "report.json", "data_gen.log"):
            assert (out_dir / name).is_file(), name
        assert re.fullmatch(r"accepted \d+ of \d+ judged; \d+ tasks in \S+tasks.parquet\n", proc.stdout), proc.stdout
    elif argv[1:2] == ["train.py"]:
        stage = next(a.split("=", 1)[1] for a in argv if a.startswith("stage="))
        out_dir = checkout / "outputs" / "train" / stage
        assert f"`{out_dir.relative_to(checkout)}/`" in readme, f"the README does not name {out_dir}"
        for name in ("checkpoints/last.ckpt", "metrics.csv", "rollouts/train.jsonl", "actor/config.json"):
            assert (out_dir / name).is_file(), name
        assert re.fullmatch(rf"{stage}: [1-9]\d* steps; reward_mean -?[\d.]+, pass_rate [\d.]+; checkpoint "
                            rf"\S+/checkpoints/last.ckpt\n", proc.stdout), proc.stdout
    elif argv[1:3] == ["-m", "sandbox"] and "--json" in argv:
        assert json.loads(proc.stdout)["reward"] is not None
    elif argv[1:3] == ["-m", "sandbox"]:
        assert proc.stdout.startswith("reward "), proc.stdout


# The commands' own limits decide, not the suite's 600 s: a command may wait for those before it.
@pytest.mark.timeout(COMMAND_TIMEOUT_S * LONGEST_CHAIN + 60)
@pytest.mark.parametrize("command", COMMANDS, ids=[c.id for c in COMMANDS])
def test_readme_command_runs_as_typed(command: Command, checkout: Path, started: dict[str, Future]):
    if MARKERS[command.marker]:
        pytest.skip(f"the README marks it: {MARKERS[command.marker]}")
    argv = argv_of(command.line)[1]
    assert argv[0] == sys.executable, f"a README command that is not a python command: {command.line}"
    proc = started[command.id].result()
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    check_outputs(argv, proc, checkout)


NOT_RUN = [c for c in COMMANDS if MARKERS[c.marker] and is_hydra(argv_of(c.line)[1])]


@pytest.mark.parametrize("command", NOT_RUN, ids=[c.id for c in NOT_RUN])
def test_readme_hydra_command_composes(command: Command, checkout: Path, cli_env: dict[str, str]):
    """Commands the CPU cannot run still name groups and fields that exist."""
    extra_env, argv = argv_of(command.line)
    proc = run([*argv, "--cfg", "job"], checkout, {**cli_env, **extra_env})
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_the_readme_has_commands_of_every_kind():
    kinds = {c.marker for c in COMMANDS}
    assert {"bash", "bash gpu", "bash template", "bash setup"} <= kinds, kinds
    assert any(is_hydra(argv_of(c.line)[1]) for c in NOT_RUN)
