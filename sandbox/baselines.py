"""On-disk cache of eager / torch.compile baseline timings.

Keyed by everything that changes the numbers: the task's source, the device, the software
versions and the timing configuration. Files are written atomically, so concurrent
evaluations of the same task at worst time it twice.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
from pathlib import Path

import torch

from .timing import METHOD_VERSION

# Timing settings that decide which outputs are checked, or what other evaluations' harness work
# may run beside a timed section (scheduling), not what a baseline measures.
NOT_IN_KEY = ("spot_check_probability", "harness_beside_timing")


def software_versions() -> dict[str, str | None]:
    versions = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda}
    try:
        import triton  # noqa: F401  (inductor's GPU code generator)
        versions["triton"] = triton.__version__
    except Exception:
        versions["triton"] = None
    return versions


def baseline_cache_path(job: dict, device: str) -> Path:
    return cache_file(Path(job["task_path"]).read_bytes(), job, device)


def cache_file(task_bytes: bytes, job: dict, device: str) -> Path:
    """The cache file of a task's baselines: the task's bytes as the worker reads them, and the
    job's backend, timing, compile_baseline and cache_root."""
    task_hash = hashlib.sha256(task_bytes).hexdigest()
    timing = {k: v for k, v in job["timing"].items() if k not in NOT_IN_KEY}
    key = json.dumps({"task": task_hash, "backend": job["backend"], "device": device,
                      "software": software_versions(), "timing": timing, "method": METHOD_VERSION,
                      "compile_baseline": job["compile_baseline"]}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()
    return Path(job["cache_root"]) / "baselines" / f"{digest}.json"


def cached_baselines(task_path: str | Path, cfg) -> dict | None:
    """The task's baselines already in the cache under ``cfg`` on this host, read without a
    worker (None: not cached, or this process cannot tell: several GPU models visible, or
    CUDA not initialisable here). Raises TaskError for an unusable task file."""
    from .task import load_task_source
    from .worker_common import device_name

    if cfg.backend == "cuda":
        names = {torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())} \
            if torch.cuda.is_available() else set()
        if len(names) != 1:
            return None
        device = names.pop()
    else:
        device = device_name(torch.device("cpu"))
    # The evaluation writes the task's source out as UTF-8 text and the worker hashes that file.
    job = {"backend": cfg.backend, "timing": cfg.to_dict()["timing"], "compile_baseline": cfg.compile_baseline,
           "cache_root": str(cfg.cache_root)}
    return load_baselines(cache_file(load_task_source(task_path).encode("utf-8"), job, device))


def load_baselines(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "eager" in data else None


def store_baselines(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


