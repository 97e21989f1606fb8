"""The build worker (``python -m sandbox.worker build JOB.json``): compiles the solution (the
workspace build, or the solution's own load_inline calls at import and in ``ModelNew.__init__``)
and imports it once. Runs solution code, confined once its compilers have run; no GPU.
"""
from __future__ import annotations

from pathlib import Path

import torch

from .build import summarize_compiler_output
from .extensions import Builds
from .inputs import WorkerFailure, call_task, check_inputs, load_module
from .measurement import ErrorKind
from .worker_common import Channel, confine_if_asked, import_solution, set_arch_env


def role_build(job: dict, out: Path, channel: Channel) -> None:
    from .build import build_workspace, make_toolchain
    from .errors import CompileError
    from .solution import read_solution

    solution_dir = Path(job["solution_dir"])
    arch = set_arch_env(job)
    report = {"compiled": [], "reused": [], "arch": arch}
    if read_solution(solution_dir).has_kernels:
        try:
            tc = make_toolchain(job["backend"], arch, tuple(job["cxx_flags"]), tuple(job["nvcc_flags"]))
            built = build_workspace(solution_dir, solution_dir / "build", tc, Path(job["cache_root"]),
                                    job["build_jobs"], job["compile_timeout_s"], job["precompiled_header"])
        except CompileError as exc:
            raise WorkerFailure(ErrorKind.COMPILE_ERROR, summarize_compiler_output(str(exc))) from None
        report.update(compiled=built.compiled, reused=built.reused, workspace_build_s=built.seconds,
                      precompiled=built.precompiled, torch_header=built.torch_header)
    # Only compilers ran so far (the object cache needed writing); solution code starts here.
    confine_if_asked(job)
    builds = Builds()
    builds.record_failures()
    model_cls = import_solution(solution_dir)
    construct_for_builds(model_cls, Path(job["task_path"]))
    if builds.failure():  # a failed load_inline, even one the solution caught and fell back from
        raise WorkerFailure(ErrorKind.COMPILE_ERROR, summarize_compiler_output(builds.failure()))
    channel.report("build", report)


def construct_for_builds(model_cls, task_path: Path) -> None:
    """ModelNew's __init__ once, on the meta device (no memory, no GPU): load_inline calls made
    there compile here, in the build worker, like those at import. Other failures of __init__
    are the run worker's to report, on the real device."""
    try:
        init_inputs = check_inputs(call_task(load_module(task_path, "model"), "get_init_inputs"), "get_init_inputs")
        with torch.device("meta"):
            model_cls(*init_inputs)
    except Exception:
        pass
