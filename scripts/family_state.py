"""Carry the family pipeline (scripts/family_pipeline.py) between machines that share nothing.

Issue 17's GPU calls run on hosts that start bare each session, and what comes back from one is
limited (a few files of at most 16 MiB). Within a machine's life a stopped stage resumes from its
full checkpoint. Across machines travel the small files of every run (metrics, rollouts,
markers: benchmarks/h200/family_runs.sh tars them) and, here, in parts: the weights of each
finished stage that a stage not yet started starts from (without optimizer state), and the
checkpoint of each stage stopped midway, made smaller (``compact_checkpoint``: weights in the
carry's dtype, Adam's moments in bfloat16 or dropped), so that a PPO stage longer than one call
resumes on the next machine instead of starting again.

    python scripts/family_pipeline.py ... --export-weights $OUT    # after the run, on the GPU host
    python scripts/family_pipeline.py ... --import-weights .famstate   # before it, on the next host

The weights travel float32 by default. ``dtype="float16"`` halves them (a stage of the family
actor and critic: 31.7 -> 16.9 MB, so three seeds' value stages fit in one call's carry): a
one-time rounding of the point the next stage starts from (relative error <= 2^-11), which then
trains in float32 again (the PPO stages move weights by ~1e-5 a step, which half precision would
round away if it trained in it). The import turns them back into float32; the start validation
of the PPO stage judges the rounded actor, so its before and after compare like with like.
A part's name says its stage and content (``weights.graduated__seed0__rft.<sha256[:12]>.pt.part00``);
``weights.json`` lists the parts, each stage's dtype and SHA-256, checked when the parts are joined.
Exporting into a folder again replaces its manifest in one rename and then removes the parts it no
longer lists, so the folder is usable at every moment (the pipeline exports after each stage).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path
from typing import Collection, Iterable, Optional, Sequence

MANIFEST = "weights.json"
# Under the 16 MiB a returned file may have.
PART_BYTES = 15 * 2 ** 20
CHECKPOINT = Path("checkpoints") / "last.ckpt"


# What the weights may travel as (export_weights' dtype).
CARRY_DTYPES = ("float32", "float16")
# What a stopped stage's optimizer moments travel as (export_weights' moments): bfloat16 (Adam's
# first and second moments at 8 significant bits), or dropped (the resumed stage starts them anew).
CARRY_MOMENTS = ("bfloat16", "drop")


class StateError(RuntimeError):
    """Carried state that cannot be used: the message says which file and why."""


def stage_key(stage_dir: Path, runs: Path) -> str:
    """``graduated/seed0/rft`` -> ``graduated__seed0__rft`` (a name a returned file may have)."""
    return "__".join(stage_dir.relative_to(runs).parts)


def export_weights(stage_dirs: Iterable[Path], runs: Path, dest: Path, part_bytes: int = PART_BYTES,
                   max_bytes: int = 0, dtype: str = "float32", resumable: Iterable[Path] = (),
                   moments: str = "bfloat16") -> dict:
    """Each finished stage's ``state_dict`` (its last.ckpt without optimizer or loop state;
    floating tensors in ``dtype``: float32 or float16) and each ``resumable`` stage's whole
    checkpoint (a stage stopped midway: weights in ``dtype``, optimizer moments as ``moments``,
    loops and step counters as they are: ``compact_checkpoint``) as parts of at most
    ``part_bytes`` in ``dest``, and the manifest; returns the manifest. With ``max_bytes``,
    stages are taken in the order given, resumable ones first, while they fit in it; the rest are
    left out (the next machine runs a finished one again: ``reopen_uncarried``, and restarts a
    stopped one)."""
    import torch

    if dtype not in CARRY_DTYPES:
        raise StateError(f"weights travel as {' or '.join(CARRY_DTYPES)}, not {dtype!r}")
    if moments not in CARRY_MOMENTS:
        raise StateError(f"optimizer moments travel as {' or '.join(CARRY_MOMENTS)}, not {moments!r}")
    dest.mkdir(parents=True, exist_ok=True)
    manifest, used = {}, 0
    todo = [(d, True) for d in dict.fromkeys(resumable)] + [(d, False) for d in dict.fromkeys(stage_dirs)]
    for stage_dir, resume in todo:
        ckpt = stage_dir / CHECKPOINT
        if not ckpt.is_file():
            what = "stopped" if resume else "finished"
            raise StateError(f"{stage_dir}: {what}, but its checkpoint {ckpt} is missing")
        full = torch.load(ckpt, map_location="cpu", weights_only=False)
        if resume:
            payload = compact_checkpoint(full, dtype, moments)
        else:
            payload = {"state_dict": cast_floating(full["state_dict"], getattr(torch, dtype))}
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        data, key = buffer.getvalue(), stage_key(stage_dir, runs)
        if max_bytes and used + len(data) > max_bytes:
            continue
        used += len(data)
        digest = hashlib.sha256(data).hexdigest()
        parts = write_parts(dest, f"weights.{key}.{digest[:12]}.pt", data, part_bytes)
        manifest[key] = {"stage": stage_dir.relative_to(runs).as_posix(), "parts": parts, "bytes": len(data),
                         "dtype": dtype, "sha256": digest}
        if resume:
            manifest[key].update(resume=True, moments=moments, step=int(full.get("global_step", 0)))
    replace_manifest(dest, manifest)
    return manifest


def compact_checkpoint(ckpt: dict, dtype: str, moments: str) -> dict:
    """A Lightning checkpoint of a stage stopped midway, smaller: the module's floating weights in
    ``dtype``, each optimizer's floating per-parameter state (Adam's ``exp_avg``,
    ``exp_avg_sq``) in bfloat16, or none of it with ``moments="drop"`` (Adam then starts its
    moments and step count anew at the next update, as at a stage's first); everything else (the
    step, loops, callbacks, the optimizers' hyper-parameters and step counters) as it is.
    ``restored_checkpoint`` turns it back into float32. The family actor and critic
    (8.5 M parameters): 95 MB -> 48.7 MB (float16, bfloat16 moments), 16.9 MB (dropped)."""
    import torch

    small = dict(ckpt)
    small["state_dict"] = cast_floating(ckpt["state_dict"], getattr(torch, dtype))
    small["optimizer_states"] = cast_moments(ckpt.get("optimizer_states", []),
                                             None if moments == "drop" else torch.bfloat16)
    return small


def cast_moments(optimizer_states: list, dtype) -> list:
    """Optimizer state dicts with each parameter's floating tensors in ``dtype`` (Adam's scalar
    step counter kept as it is), or with no per-parameter state at all when ``dtype`` is None;
    hyper-parameters and groups untouched."""
    import torch

    def cast(per_param: dict) -> dict:
        return {k: v.to(dtype) if torch.is_tensor(v) and v.is_floating_point() and v.dim() else v
                for k, v in per_param.items()}
    return [{**opt, "state": {} if dtype is None else {p: cast(per_param) for p, per_param in opt["state"].items()}}
            for opt in optimizer_states]


def restored_checkpoint(small: dict) -> dict:
    """``compact_checkpoint``'s output as a checkpoint to resume from: floating weights and
    optimizer state back in float32 (the rounding stays; Adam's step counters were never cast)."""
    import torch

    full = dict(small)
    full["state_dict"] = cast_floating(small["state_dict"], torch.float32)
    full["optimizer_states"] = cast_moments(small.get("optimizer_states", []), torch.float32)
    return full


def write_parts(dest: Path, stem: str, data: bytes, part_bytes: int) -> list[str]:
    """``data`` as ``<stem>.partNN`` files of at most ``part_bytes``. The stem names the content
    (its checksum), so a part already there is that content and is not written again: a folder
    exported into again and again while the pipeline runs (family_pipeline.py exports after each
    finished stage) rewrites only the stages that changed."""
    parts = []
    for i in range((len(data) + part_bytes - 1) // part_bytes):
        chunk, name = data[i * part_bytes:(i + 1) * part_bytes], f"{stem}.part{i:02d}"
        target = dest / name
        if not (target.is_file() and target.stat().st_size == len(chunk)):
            partial = dest / (name + ".partial")
            partial.write_bytes(chunk)
            os.replace(partial, target)
        parts.append(name)
    return parts


def replace_manifest(dest: Path, manifest: dict) -> None:
    """The new manifest in one rename, then the parts no longer listed removed: a process killed at
    any moment leaves a manifest whose parts are all there (at worst beside stale ones)."""
    partial = dest / (MANIFEST + ".partial")
    partial.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(partial, dest / MANIFEST)
    listed = {name for entry in manifest.values() for name in entry["parts"]}
    for stale in dest.glob("weights.*.part*"):
        if stale.name not in listed:
            stale.unlink()


def cast_floating(state: dict, dtype) -> dict:
    """``state`` with its floating-point tensors in ``dtype`` (integer buffers kept as they are)."""
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}


def read_manifest(src: Path) -> dict:
    """The manifest of an export folder: stage key -> its stage, parts, bytes, dtype, checksum."""
    manifest_path = src / MANIFEST
    if not manifest_path.is_file():
        raise StateError(f"{manifest_path}: no weights manifest (copy every file a run returned into {src})")
    return json.loads(manifest_path.read_text())


def joined_parts(src: Path, key: str, entry: dict) -> bytes:
    """One exported stage's bytes, its parts joined and checked against the manifest's checksum."""
    missing = [p for p in entry["parts"] if not (src / p).is_file()]
    if missing:
        raise StateError(f"{src}: parts missing for {key}: {', '.join(missing)}")
    data = b"".join((src / p).read_bytes() for p in entry["parts"])
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise StateError(f"{src}: the parts of {key} do not add up to what was exported (checksum differs)")
    return data


def carried_state(src: Path, key: str, entry: dict) -> dict:
    """One exported stage as a checkpoint to load, floating tensors back in float32: a finished
    stage's ``{"state_dict": ...}``, a stopped one's whole checkpoint (``restored_checkpoint``)."""
    import torch

    state = torch.load(io.BytesIO(joined_parts(src, key, entry)), map_location="cpu", weights_only=False)
    if entry.get("resume"):
        return restored_checkpoint(state)
    return {"state_dict": cast_floating(state["state_dict"], torch.float32)}


def import_weights(src: Path, runs: Path, done_marker: str, stages: Optional[Collection[str]] = None) -> list[str]:
    """Join the parts in ``src`` into ``<stage>/checkpoints/last.ckpt`` of each stage under
    ``runs`` that has no checkpoint yet (of ``stages`` only, relative to ``runs``, where given);
    returns the stages written. A finished stage's weights need it marked finished
    (``done_marker``) under ``runs``; a stopped stage's checkpoint (``resume`` in the manifest)
    needs its directory there (its metrics so far) and is passed over where the stage has
    finished since. A missing part or a wrong checksum is an error."""
    written = []
    for key, entry in read_manifest(src).items():
        if stages is not None and entry["stage"] not in stages:
            continue
        stage_dir = runs / entry["stage"]
        done = (stage_dir / done_marker).is_file()
        if entry.get("resume"):
            if done:
                continue
            if not stage_dir.is_dir():
                raise StateError(f"{stage_dir}: the carried checkpoint {key} belongs to a stage stopped at step "
                                 f"{entry.get('step')}, but the stage is not here (unpack the runs' small files "
                                 f"into {runs} first)")
        elif not done:
            raise StateError(f"{stage_dir}: the carried weights {key} belong to a finished stage, but it is not "
                             f"marked finished here (unpack the runs' small files into {runs} first)")
        target = stage_dir / CHECKPOINT
        if target.exists():
            continue
        if entry.get("dtype", "float32") == "float32" and not entry.get("resume"):
            data = joined_parts(src, key, entry)
        else:  # back to what the stages train in
            import torch

            buffer = io.BytesIO()
            torch.save(carried_state(src, key, entry), buffer)
            data = buffer.getvalue()
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        partial.write_bytes(data)
        os.replace(partial, target)
        written.append(entry["stage"])
    return written


# Where the no-value ablation's start (family_pipeline.ACTOR_ONLY: RFT's actor, a fresh critic) is
# cut from, in this order: RFT's checkpoint, or value pretraining's, whose actor is RFT's untouched
# (value_pretrain freezes it), so that the value stage's carried weights stand in where RFT's
# did not travel instead of RFT running again (another actor than the other ablations' start).
ACTOR_ONLY_SOURCES = ("rft", "value")


def actor_only_source(prefix: Path, done_marker: str) -> Path:
    """The finished stage of a seed's prefix whose weights are here and whose actor is RFT's
    (ACTOR_ONLY_SOURCES); RFT's where none's are (it runs again: reopen_uncarried)."""
    for name in ACTOR_ONLY_SOURCES:
        stage_dir = prefix / name
        if (stage_dir / done_marker).exists() and (stage_dir / CHECKPOINT).is_file():
            return stage_dir
    return prefix / ACTOR_ONLY_SOURCES[0]


def starts_needed(chains: Sequence[Sequence], done_marker: str, actor_only: str) -> list[Path]:
    """The finished stages that a stage still to run starts from (its ``init``: only those need
    their weights on the next machine). A stage stopped midway with its own checkpoint resumes
    from that and does not read its start (train.py). ``chains``: family_pipeline.plan_chains'
    StageRuns."""
    needed = []
    for chain in chains:
        for run in chain:
            if (run.stage_dir / done_marker).exists() or not run.stage.init or (run.stage_dir / CHECKPOINT).is_file():
                continue
            source = (actor_only_source(run.source, done_marker) if run.stage.init == actor_only
                      else run.source / run.stage.init)
            if (source / done_marker).exists() and source not in needed:
                needed.append(source)
    return needed


def stopped_stages(chains: Sequence[Sequence], done_marker: str) -> list[Path]:
    """The stages of ``chains`` stopped midway: a checkpoint, not finished (what an export carries
    so that the next machine resumes them rather than starting them again)."""
    return [run.stage_dir for chain in chains for run in chain
            if (run.stage_dir / CHECKPOINT).is_file() and not (run.stage_dir / done_marker).exists()]


def reopen_uncarried(chains: Sequence[Sequence], done_marker: str, actor_only: str) -> list[str]:
    """Finished stages that a stage still to run starts from but whose weights are not here (they
    did not travel: left out of an export, or not copied) are set aside as ``<stage>.uncarried``
    (their metrics and logs kept) so that they run again; repeated until every start is here,
    since a stage set aside may itself start from one. Returns the stages set aside."""
    reopened = []
    while True:
        lost = [d for d in starts_needed(chains, done_marker, actor_only) if not (d / CHECKPOINT).is_file()]
        if not lost:
            return reopened
        for stage_dir in lost:
            aside = stage_dir.with_name(stage_dir.name + ".uncarried")
            n = 1
            while aside.exists():
                n += 1
                aside = stage_dir.with_name(f"{stage_dir.name}.uncarried{n}")
            stage_dir.rename(aside)
            reopened.append(str(stage_dir))
