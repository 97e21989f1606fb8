r"""The kernel sandbox from the shell: judge a solution (a ``ModelNew`` file or a CUDA-Agent
workspace) against a KernelBench-format task: build, verify on fresh inputs, time against eager
and torch.compile, run the anti-gaming guards, and report the measurement and its reward.

    python -m sandbox demo             # the bundled relu_add workspace, on the GPU if one is visible
    python -m sandbox evaluate --task examples/tasks/relu_add.py \
        --solution examples/solutions/cpu/relu_add_workspace --backend cpu --json

Synopsis:

    python -m sandbox evaluate --task TASK.py --solution PATH [--backend cpu|cuda]
                               [--reward graduated|binary|continuous]
                               [--tolerance kernelbench|paper] [--json]
    python -m sandbox evaluate-batch --manifest IN.jsonl --out OUT.jsonl [--workers N]
                               [--backend cpu|cuda] [--pool local|ray]
    python -m sandbox baselines --benchmark-root DIR --out OUT.jsonl [--workers N]
                               [--backend cpu|cuda] [--no-compile-baseline]
    python -m sandbox demo

baselines times eager and torch.compile for every task file under DIR (one line per task in
OUT, into the shared baseline cache; ids already in OUT are skipped, so it resumes). With
--workers N, N tasks at once: their torch.compile work overlaps, their timed runs never do.

With --json, stdout carries exactly one JSON object, whatever the solution prints. Exit status
is 0 whenever an evaluation result was produced (reward -1 included) and 2 for unusable
arguments or tasks, with a one-line reason on stderr.

evaluate-batch reads one request per line, ``{"id": ..., "task": PATH, "solution": PATH}``
(relative paths are relative to the manifest), judges them through the sandbox pool and
appends one line per result to OUT: the same id plus the fields of ``evaluate --json`` (or
``task_error``). Ids already in OUT are skipped, so an interrupted batch resumes where it
stopped. Launch lines: CPU ``--backend cpu``; 1 GPU: the default; N GPUs of one host: the
default too (one lane per visible GPU; narrow with CUDA_VISIBLE_DEVICES); several hosts:
``--pool ray`` against a running Ray cluster (RAY_ADDRESS).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

from .backend import visible_backend
from .config import SandboxConfig
from .errors import TaskError

USAGE_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("evaluate", help="judge one solution against one task")
    ev.add_argument("--task", required=True, help="KernelBench-format task file")
    ev.add_argument("--solution", required=True, help="model_new .py file or workspace directory")
    add_judging_options(ev)
    ev.add_argument("--stop-after", choices=["build", "verify", "timing"], default="timing",
                    help="build: compile only; verify: correctness, no timing; timing: the full verdict")
    ev.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    batch = sub.add_parser("evaluate-batch", help="judge many (task, solution) pairs through the pool")
    batch.add_argument("--manifest", required=True, help='JSONL: {"id", "task", "solution"} per line')
    batch.add_argument("--out", required=True, help="JSONL of results (appended; ids already there are skipped)")
    batch.add_argument("--workers", type=int, default=None, help="evaluations in flight (default: automatic)")
    batch.add_argument("--build-workers", type=int, default=None, help="builds at once (default: half the cores)")
    batch.add_argument("--pool", choices=["local", "ray"], default="local", help="pool engine (default local)")
    add_judging_options(batch)
    base = sub.add_parser("baselines", help="time eager and torch.compile for every task of a benchmark")
    base.add_argument("--benchmark-root", required=True, help="directory of task files (searched recursively)")
    base.add_argument("--out", required=True, help="JSONL of baseline times (appended; ids already there are skipped)")
    base.add_argument("--workers", type=int, default=1,
                      help="tasks at once: their compiles overlap, each timed run has the device to itself (default 1)")
    add_judging_options(base)
    demo = sub.add_parser("demo", help="judge the bundled example kernel (relu_add, workspace form)")
    demo.add_argument("--backend", choices=["cpu", "cuda"], default=None,
                      help="default: cuda when a GPU is visible, else cpu")
    return parser


def add_judging_options(ev: argparse.ArgumentParser) -> None:
    """Options shared by evaluate and evaluate-batch: how solutions are judged and rewarded."""
    ev.add_argument("--backend", choices=["cpu", "cuda"], default=None,
                    help="default: cuda when a GPU is visible, else cpu")
    ev.add_argument("--reward", choices=["graduated", "binary", "continuous"], default="graduated",
                    help="graduated: the paper's -1/1/2/3 by speed vs eager and torch.compile; binary: "
                         "1 correct, -1 otherwise; continuous: t_compile / t (default graduated)")
    ev.add_argument("--tolerance", choices=["kernelbench", "paper"], default="kernelbench",
                    help="kernelbench: fp32 1e-4, fp16/bf16 1e-2; paper: 1e-2 for every dtype (default kernelbench)")
    defaults = SandboxConfig()
    ev.add_argument("--trials", type=int, default=defaults.num_correct_trials,
                    help=f"random input sets checked (default {defaults.num_correct_trials})")
    ev.add_argument("--warmup", type=int, default=None,
                    help=f"untimed warm-up runs (default {defaults.timing.warmup})")
    ev.add_argument("--repeats", type=int, default=None, help=f"timed runs (default {defaults.timing.repeats})")
    ev.add_argument("--compile-timeout", type=float, default=None,
                    help=f"seconds for the build (default {defaults.compile_timeout_s:g})")
    ev.add_argument("--run-timeout", type=float, default=None,
                    help=f"seconds for verify + timing (default {defaults.run_timeout_s:g})")
    ev.add_argument("--no-compile-baseline", action="store_true", help="skip the torch.compile baseline")
    ev.add_argument("--no-guards", action="store_true",
                    help="turn the anti-gaming guards off (debugging and ablations only)")
    ev.add_argument("--arch", default="", help='CUDA arch such as "9.0" (default: the device\'s)')
    ev.add_argument("--cache-dir", default="", help="cache root (default $CUDA_AGENT_CACHE or ~/.cache/cuda-agent)")


def demo_paths(backend: str) -> tuple[Path, Path]:
    """The bundled example task and the workspace solution for this backend."""
    examples = Path(__file__).resolve().parent.parent / "examples"
    return examples / "tasks" / "relu_add.py", examples / "solutions" / backend / "relu_add_workspace"


def config_from_args(args: argparse.Namespace) -> SandboxConfig:
    backend = args.backend or visible_backend()
    if args.command == "demo":
        return SandboxConfig(backend=backend)
    cfg = SandboxConfig(backend=backend, tolerance=args.tolerance, num_correct_trials=args.trials,
                        compile_baseline=not args.no_compile_baseline, cuda_arch=args.arch,
                        guards=not args.no_guards,
                        cache_dir=args.cache_dir)
    overrides = {k: v for k, v in (("compile_timeout_s", args.compile_timeout),
                                   ("run_timeout_s", args.run_timeout)) if v is not None}
    if args.command == "evaluate-batch":
        overrides.update(pool_backend=args.pool, build_workers=args.build_workers or 0)
    timing = {k: v for k, v in (("warmup", args.warmup), ("repeats", args.repeats)) if v is not None}
    if timing:
        overrides["timing"] = replace(cfg.timing, **timing)
    return replace(cfg, **overrides)


def demo_needs_a_build(solution: Path, cfg: SandboxConfig) -> bool:
    """True when the demo workspace's module is not in the build cache yet (a cold first run),
    or when that cannot be told (no compiler, no arch)."""
    import tempfile

    from .build import cached_module, make_toolchain
    from .errors import CompileError
    from .pool import device_arch

    try:
        arch = cfg.cuda_arch or (device_arch(str(cfg.device_index)) if cfg.backend == "cuda" else None)
        tc = make_toolchain(cfg.backend, arch, cfg.cxx_flags, cfg.nvcc_flags)
    except (CompileError, TaskError, OSError):
        return True
    with tempfile.TemporaryDirectory() as scratch:
        return cached_module(solution, Path(scratch), tc, cfg.cache_root) is None


def announce_demo(task: Path, solution: Path, cfg: SandboxConfig) -> None:
    """One stderr line: what the demo judges, and that a cold first run takes a while."""
    cold = " (first run: it builds the kernel and times the baselines, a minute or two)" \
        if demo_needs_a_build(solution, cfg) else ""
    print(f"judging {solution.name} on task {task.name} on the {cfg.backend} backend{cold}", file=sys.stderr)


def render_text(result: dict) -> str:
    lines = [f"reward {result['reward']:g}  compiled={result['compiled']}  correct={result['correct']}"]
    if result["error"]:
        lines.append(f"error: {result['error']}: {(result['error_detail'] or '').strip()[:2000]}")
    for key in ("runtime_us", "eager_us", "compile_us"):
        if result[key] is not None:
            lines.append(f"{key:<11} {result[key]:12.1f}")
    for key in ("speedup_vs_eager", "speedup_vs_compile"):
        if result[key] is not None:
            lines.append(f"{key:<19} {result[key]:.3f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .judge import check_backend, evaluate

    if args.command in ("evaluate-batch", "baselines"):
        from .baselines_cli import run_baselines
        from .batch import run_batch

        try:
            cfg = config_from_args(args)
            # Before any task: each task's own check would be a task error, recorded as done.
            check_backend(cfg)
            run = run_batch if args.command == "evaluate-batch" else run_baselines
            return run(args, cfg)
        except (TaskError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return USAGE_ERROR

    if args.command == "demo":
        args.reward, args.json = "graduated", False
        args.backend = args.backend or visible_backend()
        args.task, args.solution = demo_paths(args.backend)
    elif not Path(args.solution).exists():
        print(f"error: --solution {args.solution}: no such file or directory", file=sys.stderr)
        return USAGE_ERROR
    try:
        cfg = config_from_args(args)
        if args.command == "demo":
            announce_demo(args.task, args.solution, cfg)
        measurement = evaluate(args.task, args.solution, cfg, stop_after=getattr(args, "stop_after", "timing"))
    except (TaskError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    from .reward import result_record

    result = result_record(measurement, args.reward)
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        print(render_text(result))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        os._exit(130)
