"""Sandbox configuration: tolerances, timing method, timeouts, build settings.

One frozen dataclass tree with defaults that mirror ``conf/sandbox/default.yaml``; the CLI and
the Hydra entry points both end up here (``SandboxConfig.from_dict``).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

# Per-dtype (atol, rtol). KernelBench's current main checks fp32 at 1e-4 and half types at 1e-2;
# the CUDA Agent paper used 1e-2 for everything, which lets TF32/FP16 arithmetic pass as fp32.
TOLERANCE_PRESETS: dict[str, dict[str, float]] = {
    "kernelbench": {"float64": 1e-4, "float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2},
    "paper": {"float64": 1e-2, "float32": 1e-2, "float16": 1e-2, "bfloat16": 1e-2},
}


@dataclass(frozen=True)
class TimingConfig:
    # Untimed runs before measuring (module load, autotuning, caches warm).
    warmup: int = 5
    # ...and at least this long: an idle GPU needs tens of ms of work to reach its boost clock.
    warmup_ms: float = 100.0
    # Timed runs; the median is the reported runtime.
    repeats: int = 20
    # Overwrite a buffer larger than L2 before every timed run (CUDA only).
    flush_l2: bool = True
    # Draw a fresh input set from get_inputs() before every timed run (defeats output caching).
    fresh_inputs: bool = True
    # Threads for torch and OpenMP during CPU timing; fixed so numbers are comparable.
    cpu_threads: int = 1
    # Chance that a timed run's output is compared with the reference, drawn independently for
    # each run after it returned (0: none). 0.25: 5 of 20 runs on average; garbage in the 10 runs
    # that set the median goes unseen 5.6 % of the time (docs/sandbox.md, "Spot checks").
    spot_check_probability: float = 0.25
    # CPU backend: the reference worker's commands (trusted harness work: the reference outputs,
    # the checks) run beside other evaluations' timed sections, as builds and worker start-ups
    # already do, instead of a timed section waiting for them; solution code never runs beside
    # one either way. True trades timing noise for a shorter convoy behind each timed section.
    harness_beside_timing: bool = False


@dataclass(frozen=True)
class SandboxConfig:
    # "cuda" (nvcc, GPU timing) or "cpu" (C++/OpenMP, wall-clock timing).
    backend: str = "cuda"
    # Number of random input sets each solution must match the reference on.
    num_correct_trials: int = 5
    # Tolerance preset name (see TOLERANCE_PRESETS).
    tolerance: str = "kernelbench"
    # Seconds allowed for building/importing the solution.
    compile_timeout_s: float = 600.0
    # Seconds allowed for running the solution (verification and timing together).
    run_timeout_s: float = 300.0
    # Seconds allowed for the reference run and the baselines (torch.compile included).
    reference_timeout_s: float = 900.0
    # Time torch.compile as a second baseline (needs a working C++ compiler / Triton).
    compile_baseline: bool = True
    # CUDA arch like "9.0"; empty means read it off the device.
    cuda_arch: str = ""
    # Index of the GPU to use (the worker sees only this device).
    device_index: int = 0
    # Extra flags for workspace builds (the paper's: -O3 --use_fast_math for nvcc).
    nvcc_flags: tuple[str, ...] = ("-O3", "--use_fast_math")
    # Extra flags for C++ files of a workspace (OpenMP is what the cpu backend offers).
    cxx_flags: tuple[str, ...] = ("-O3", "-fopenmp")
    # Parallel compile jobs for load_inline (MAX_JOBS) and workspace builds.
    build_jobs: int = 4
    # Compile workspace files that start with torch's extension header against a precompiled copy
    # (built once per toolchain into the cache, about 750 MB): about half their compile time.
    precompiled_header: bool = True
    # Where build objects, extensions and baselines are cached; empty: $CUDA_AGENT_CACHE or
    # ~/.cache/cuda-agent.
    cache_dir: str = ""
    # Characters of worker logs kept in a measurement.
    log_chars: int = 4000
    # Run workers in their own PID and network namespaces when root (unshare); else as is.
    isolate: bool = True
    # Apply the anti-gaming guards (torch ops in forward, libraries, backend flags, background work).
    guards: bool = True
    # Libraries a solution may call besides its own kernels (name stems: cublas matches libcublas*).
    allowed_libraries: tuple[str, ...] = ("cublas", "cublasLt", "cudnn")
    # Extra correctness trials run after timing, on the verification buffers refilled in place.
    post_timing_trials: int = 2
    # Largest file a solution's worker may write (objects, logs), in MiB (RLIMIT_FSIZE; see docs/sandbox.md).
    file_size_limit_mb: int = 4096
    # Largest output of one call the run worker hands over (shared memory; host memory), in MiB.
    max_output_mb: int = 32768
    # CUDA: hand checked outputs over in device memory (no host round trip); false: sealed host memory.
    device_handover: bool = True
    # Host memory per worker, GiB: RLIMIT_AS (cpu backend); as root, the cgroup limit too; 0: none.
    host_memory_limit_gb: float = 32.0
    # GPU memory the solution's caching allocator may hold, GiB (torch's per-process fraction); 0: none.
    device_memory_limit_gb: float = 40.0
    # Processes + threads a solution worker may have at once (cgroup pids.max, as root); 0: none.
    max_processes: int = 512
    # Timing method settings.
    timing: TimingConfig = field(default_factory=TimingConfig)
    # Pool: evaluations in flight at once (0: build workers + 2 per device + 2).
    pool_workers: int = 0
    # Pool: builds at once, each on CPU only (0: half the cores this process may use).
    build_workers: int = 0
    # Pool: devices to time on, as CUDA_VISIBLE_DEVICES entries (empty: every visible GPU).
    devices: tuple[str, ...] = ()
    # Pool: host cores reserved for each device lane's workers, builds get the rest (0: no pinning).
    lane_cpus: int = 2
    # Pool: evaluations in their device phase at once per device; timing stays exclusive (1: one per lane).
    lane_slots: int = 1
    # Pool engine: "local" (worker processes on this machine) or "ray" (Ray actors, any nodes).
    pool_backend: str = "local"
    # Ray: cluster address ("" starts or joins a local instance).
    ray_address: str = ""
    # Ray: number of evaluator actors (0: one per GPU of the cluster; cpu backend: one per 2 CPUs).
    ray_actors: int = 0

    def __post_init__(self) -> None:
        if self.backend not in ("cuda", "cpu"):
            raise ValueError(f"backend must be 'cuda' or 'cpu', got {self.backend!r}")
        if self.tolerance not in TOLERANCE_PRESETS:
            raise ValueError(f"tolerance must be one of {sorted(TOLERANCE_PRESETS)}, got {self.tolerance!r}")
        if self.num_correct_trials < 1:
            raise ValueError("num_correct_trials must be >= 1")
        if self.pool_backend not in ("local", "ray"):
            raise ValueError(f"pool_backend must be 'local' or 'ray', got {self.pool_backend!r}")
        if self.lane_slots < 1:
            raise ValueError(f"lane_slots must be >= 1, got {self.lane_slots}")
        if self.timing.repeats < 1:
            raise ValueError("timing.repeats must be >= 1")
        if not 0.0 <= self.timing.spot_check_probability <= 1.0:
            raise ValueError(f"timing.spot_check_probability must be in [0, 1], got {self.timing.spot_check_probability}")

    @property
    def cache_root(self) -> Path:
        root = self.cache_dir or os.environ.get("CUDA_AGENT_CACHE") or "~/.cache/cuda-agent"
        return Path(root).expanduser().resolve()

    def tolerance_for(self, dtype_name: str) -> float:
        return TOLERANCE_PRESETS[self.tolerance].get(dtype_name, 0.0)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "SandboxConfig":
        """Build from a plain mapping (a Hydra/OmegaConf node converted to a dict)."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown sandbox config keys: {sorted(unknown)}")
        kwargs = dict(values)
        if "timing" in kwargs and not isinstance(kwargs["timing"], TimingConfig):
            timing_known = {f.name for f in dataclasses.fields(TimingConfig)}
            bad = set(kwargs["timing"]) - timing_known
            if bad:
                raise ValueError(f"unknown sandbox.timing keys: {sorted(bad)}")
            kwargs["timing"] = TimingConfig(**kwargs["timing"])
        for key in ("nvcc_flags", "cxx_flags", "allowed_libraries", "devices"):
            if key in kwargs:
                kwargs[key] = tuple(kwargs[key])
        return cls(**kwargs)
