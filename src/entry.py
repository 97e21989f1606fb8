"""What the @hydra.main entry scripts share (eval.py, ``python -m data_gen``, train.py).

- ``--help`` starts with the running script's own docstring (what it does, its launch lines),
  then lists only the config groups that script composes, each with its options and the comment
  of its defaults-list line, then every field of the root config with the comment above it.
  Hydra's generic help names neither the script nor its launch lines and lists every group
  under the config directory, used or not.
- ``sandbox.backend`` defaults to the machine's backend (cuda with a visible GPU, else cpu),
  said in one line on stderr when that is cpu; ``sandbox=cpu`` or ``sandbox.backend=cuda`` pick
  explicitly.

To adopt both, an entry script calls ``register_resolvers()`` before its ``@hydra.main``
function runs, and its root config sets ``hydra.help.template: ${entry_help:}``.
"""
from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any, Iterable

from omegaconf import OmegaConf

# The Hydra footer of every --help text.
HYDRA_FLAGS = ("Hydra: --cfg job prints the composed config (--resolve resolves it); --hydra-help lists "
               "Hydra's own flags; -m runs a sweep over comma-separated values.")


def register_resolvers() -> None:
    """Make ``${entry_help:}`` and ``${visible_backend:}`` usable in configs (idempotent)."""
    for name, fn in (("entry_help", entry_help), ("visible_backend", announced_backend)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


@functools.cache
def announced_backend() -> str:
    """The machine's backend; the first time it is cpu, one line on stderr says so and how to
    choose (printed directly: Hydra resolves the run directory before logging is set up)."""
    from sandbox.backend import visible_backend

    backend = visible_backend()
    if backend == "cpu":
        print("no CUDA GPU visible: the sandbox runs on the cpu backend (sandbox=cpu; "
              "sandbox.backend=cuda insists on a GPU)", file=sys.stderr)
    return backend


def entry_help(_root_: Any) -> str:
    """hydra.help.template for the running script, from its docstring and its composed config."""
    hydra_cfg = _root_.hydra
    conf_dir = next(Path(s.path) for s in hydra_cfg.runtime.config_sources if s.provider == "main")
    choices = {g: o for g, o in hydra_cfg.runtime.choices.items() if not g.startswith("hydra/")}
    doc = sys.modules["__main__"].__doc__ or ""
    text = help_text(doc, conf_dir, hydra_cfg.job.config_name, choices)
    return text.replace("$", "$$")  # Hydra fills the template with string.Template


def help_text(doc: str, conf_dir: Path, config_name: str, choices: dict[str, str]) -> str:
    """Docstring, then the groups in ``choices`` (chosen option starred), then the root fields."""
    root_text = (conf_dir / f"{config_name}.yaml").read_text()
    fields = commented_fields(root_text)
    group_notes = {key: note for key, _, note in defaults_entries(root_text)}
    order = list(group_notes) + sorted(set(choices) - set(group_notes))  # the defaults list's order
    lines = [doc.strip(), "", f"== Config groups (group=option; * chosen now; files in {conf_dir.name}/<group>/) =="]
    for group in (g for g in order if g in choices):
        chosen = choices[group]
        options = sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))
        listed = ", ".join(o + ("*" if o == chosen else "") for o in options)
        lines += [f"  {group}: {listed}", *indented(group_notes.get(group, ""))]
    lines += ["", f"== Fields of {conf_dir.name}/{config_name}.yaml (key=value) ==",
              "  A group's own fields are set the same way (e.g. group.field=value); their comments "
              "are in its files."]
    for key, value, note in fields:
        lines += [f"  {key}=" + value if value else f"  {key}.*", *indented(note)]
    return "\n".join(lines + ["", HYDRA_FLAGS, ""])


def indented(note: str) -> list[str]:
    return [f"      {note}"] if note else []


def defaults_entries(text: str) -> Iterable[tuple[str, str, str]]:
    """(group, option, comment above) for each ``- group: option`` line of the defaults list."""
    comment: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comment.append(stripped.lstrip("#").strip())
            continue
        if stripped.startswith("- ") and ":" in stripped:
            group, _, option = stripped[2:].partition(":")
            yield group.strip(), option.strip(), " ".join(comment)
        comment = []


def commented_fields(text: str) -> list[tuple[str, str, str]]:
    """(dotted key, value as written, comment above) for each field of a YAML file whose fields
    carry a comment line above (a project rule), leaving out the defaults list and Hydra's block.
    A mapping's own line has an empty value."""
    out, comment, parents = [], [], []  # parents: (indent, key) of the enclosing mappings
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("-"):
            comment = []
            continue
        if stripped.startswith("#"):
            comment.append(stripped.lstrip("#").strip())
            continue
        indent = len(line) - len(line.lstrip())
        key, _, value = stripped.partition(":")
        while parents and parents[-1][0] >= indent:
            parents.pop()
        path = [k for _, k in parents] + [key.strip()]
        parents.append((indent, key.strip()))
        if path[0] not in ("defaults", "hydra"):
            out.append((".".join(path), value.strip(), " ".join(comment)))
        comment = []
    return out
