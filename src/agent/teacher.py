"""A scripted teacher for the task family (data_gen/family.py): graded solutions, and multi-turn
episodes through the real tools and sandbox that warm-up, RFT and value pretraining learn from.

    python -m src.agent.teacher --tasks data/family/cpu/tasks.parquet --split train --count 64 \
        --backend cpu --out outputs/teacher/cpu_train.jsonl

Variants of one task's solution (``write_solution``), from slow to fast, and two that fail:
  naive       one kernel per op, each into a new buffer (GPU reductions: one thread per row)
  fused       the whole chain in one kernel: one read of each input, one write
  vectorised  fused, with float4 loads (GPU; needs cols % 4 == 0) or SIMD loops and a libm-free
              exp (CPU)
  wrong       fused, with a plausible bug that verification catches: two ops swapped, an op
              left out, or the reduction written wrongly; chosen among the bugs that really
              change the output (checked on probe inputs, family.run_chain)
  broken      fused, with a missing semicolon: a compile error
Plans (``PLANS``) string them into episodes: write naive -> compile -> verify -> profile ->
write fused -> profile -> finish; write wrong -> verify (mismatch) -> rewrite -> verify ->
profile -> finish; and so on, so the trajectories carry every graduated reward (-1, 1, 2, 3).
The replies are fixed in advance (ScriptedPolicy): the teacher knows what each variant does.
"""
from __future__ import annotations

import argparse
import asyncio
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from data_gen.family import (REDUCTIONS, ChainSpec, bound_steps, describe, family_specs,
                             forward_inputs, init_arguments, render_task, run_chain)

from .episode import AgentConfig, run_episode
from .policies import ScriptedPolicy
from .teacher_cuda import cuda_fused, cuda_naive
from .teacher_kernels import (BINDING_PATH, KERNEL_STEM, KernelChain, binding_source, cpu_fused, cpu_naive,
                              fused_calls, model_new_source, naive_calls)
from .toolcall import ToolCall, format_tool_call
from .trajectory import Trajectory, TrajectoryWriter

VARIANTS = ("naive", "fused", "vectorised", "wrong", "broken")
# The verdict each variant is written to get (verdict_class of its judge_variants record).
EXPECTED_VERDICT = {"naive": "correct", "fused": "correct", "vectorised": "correct", "wrong": "mismatch",
                    "broken": "compile_error"}
# How the wrong variant's reduction differs, and that bug as a torch expression of x (to check
# on probe inputs that verification can see it).
REDUCTION_BUGS = {
    "sum": ("divides the row sum by cols", "torch.sum(x, dim=-1) / x.shape[-1]"),
    "max": ("starts the running max at 0 instead of -inf", "torch.clamp(torch.amax(x, dim=-1), min=0.0)"),
    "softmax": ("skips the max subtraction before exp", "torch.exp(x) / torch.exp(x).sum(dim=-1, keepdim=True)"),
    "rmsnorm": ("divides by the mean square instead of its square root",
                "x / (x.pow(2).mean(dim=-1, keepdim=True) + 1e-6)"),
}
# A bug counts as visible when it moves the output by more than this (abs and rel: 100x the
# float32 verification tolerance) on probe inputs.
VISIBLE_DIFF = 1e-2


VARIANT_TITLES = {"naive": "one kernel per op, an intermediate buffer each",
                  "fused": "the whole chain in one kernel",
                  "vectorised": "one fused kernel with vector loads and SIMD-friendly math"}


def vectorisable(backend: str, cols: int) -> bool:
    """float4 loads need rows that start 16-byte aligned; CPU SIMD loops handle any length."""
    return backend == "cpu" or cols % 4 == 0


def kernel_source(chain: KernelChain, variant: str, backend: str) -> str:
    if variant == "naive":
        return cuda_naive(chain) if backend == "cuda" else cpu_naive(chain)
    vector = variant == "vectorised"
    return cuda_fused(chain, vector) if backend == "cuda" else cpu_fused(chain, vector)


def solution_files(chain: KernelChain, variant: str, backend: str, init_args: list[str], params: list[str],
                   inputs: list[str], title: str) -> dict[str, str]:
    """The workspace files (path -> text) of ``chain`` written as ``variant``; ``init_args``,
    ``params`` and ``inputs`` are Model's (ModelNew keeps its signature and parameters)."""
    calls = naive_calls(chain) if variant == "naive" else fused_calls(chain)
    suffix = ".cu" if backend == "cuda" else ".cpp"
    return {KERNEL_STEM + suffix: kernel_source(chain, variant, backend), BINDING_PATH: binding_source(backend),
            "model_new.py": model_new_source(init_args, params, inputs, calls, chain.reduction in ("sum", "max"),
                                             title)}


@dataclass
class Solution:
    """One variant's workspace files, and what is wrong with it (wrong, broken)."""

    variant: str
    files: dict[str, str]
    # wrong: the bug in words; broken: empty (the compiler says what is wrong).
    note: str = ""
    # broken: the edit that repairs it (old_text, new_text) in the kernel file.
    fix: Optional[tuple[str, str]] = None

    def write(self, directory: str | Path) -> Path:
        directory = Path(directory)
        for rel, text in self.files.items():
            (directory / rel).parent.mkdir(parents=True, exist_ok=True)
            (directory / rel).write_text(text, encoding="utf-8")
        return directory


def model_chain(spec: ChainSpec) -> KernelChain:
    return KernelChain(tuple(bound_steps(spec)), spec.reduction)


def bug_candidates(spec: ChainSpec) -> list[tuple[KernelChain, str]]:
    """Every plausible bug: adjacent ops swapped, one op left out, the reduction's own bug."""
    steps = bound_steps(spec)
    out = []
    for i in range(len(steps) - 1):
        swapped = steps[:i] + [steps[i + 1], steps[i]] + steps[i + 2:]
        out.append((KernelChain(tuple(swapped), spec.reduction), f"applies {steps[i + 1].name} before {steps[i].name}"))
    for i, b in enumerate(steps):
        out.append((KernelChain(tuple(steps[:i] + steps[i + 1:]), spec.reduction), f"leaves out {b.name}"))
    if spec.reduction:
        out.append((KernelChain(tuple(steps), spec.reduction, True), REDUCTION_BUGS[spec.reduction][0]))
    return out


def visible(spec: ChainSpec, chain: KernelChain) -> bool:
    """Whether the bug changes the output beyond VISIBLE_DIFF on probe inputs (16 rows)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    rows, cols = 16, spec.shape[1]
    x = torch.randn(rows, cols, generator=gen)
    tensors = {b.operand.name: torch.randn(rows, cols, generator=gen) if b.operand.role == "input"
               else torch.randn(cols, generator=gen) for b in bound_steps(spec) if b.operand}
    reduction = REDUCTIONS.get(spec.reduction or "")
    want = run_chain(bound_steps(spec), reduction, x, tensors)
    got = run_chain(list(chain.steps), REDUCTION_BUGS[spec.reduction][1] if chain.reduction_bug else reduction,
                    x, tensors)
    return got.shape != want.shape or not torch.allclose(got, want, atol=VISIBLE_DIFF, rtol=VISIBLE_DIFF)


def choose_bug(spec: ChainSpec, seed: int = 0) -> Optional[tuple[KernelChain, str]]:
    """A visible bug for ``spec`` (deterministic in spec and seed); None when there is none."""
    bugs = [(chain, note) for chain, note in bug_candidates(spec) if visible(spec, chain)]
    return random.Random(f"{spec.id}:{seed}").choice(bugs) if bugs else None


def available(spec: ChainSpec, backend: str) -> list[str]:
    """The variants the teacher can write for this task on this backend."""
    out = ["naive", "fused", "broken"]
    out += ["vectorised"] if vectorisable(backend, spec.shape[1]) else []
    return out + (["wrong"] if choose_bug(spec) is not None else [])


def write_solution(spec: ChainSpec, variant: str, backend: str, seed: int = 0) -> Solution:
    """The files of ``variant`` (VARIANTS) for ``spec`` on ``backend`` ("cpu" or "cuda")."""
    if backend not in ("cpu", "cuda"):
        raise ValueError(f"backend must be cpu or cuda, got {backend!r}")
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
    if variant == "vectorised" and not vectorisable(backend, spec.shape[1]):
        raise ValueError(f"no vectorised variant on {backend} for cols={spec.shape[1]} (float4 needs cols % 4 == 0)")
    chain, note = model_chain(spec), ""
    if variant == "wrong":
        bug = choose_bug(spec, seed)
        if bug is None:
            raise ValueError(f"no visible bug for {spec.id} ({describe(spec)})")
        chain, note = bug
    args = [name for name, _ in init_arguments(spec)]
    params = [b.operand.name for b in bound_steps(spec) if b.operand and b.operand.role == "param"]
    kind = "fused" if variant in ("wrong", "broken") else variant
    files = solution_files(chain, kind, backend, args, params, forward_inputs(spec),
                           f"{spec.id}: {describe(spec)}; {VARIANT_TITLES[kind]}.")
    if variant != "broken":
        return Solution(variant, files, note)
    path = next(p for p in files if p.startswith(KERNEL_STEM))
    files[path], fix = drop_a_semicolon(files[path], seed)
    return Solution(variant, files, "", fix)


def drop_a_semicolon(source: str, seed: int) -> tuple[str, tuple[str, str]]:
    """The source with one statement's ';' removed, and the edit that puts it back (its old
    text occurs exactly once in the broken source, as edit_file requires)."""
    lines = source.split("\n")
    picks = [i for i, line in enumerate(lines) if line.rstrip().endswith(";") and lines.count(line) == 1
             and line.startswith("  ") and "for (" not in line]
    for i in random.Random(seed).sample(picks, len(picks)):
        broken = lines[i].rstrip()[:-1]
        text = "\n".join(lines[:i] + [broken] + lines[i + 1:])
        if text.count(broken + "\n") == 1:
            return text, (broken + "\n", lines[i] + "\n")
    raise ValueError("no statement to break")


# ---------------------------------------------------------------------- plans and replies

# Each plan is a list of moves; a write and the sandbox call after it share one reply.
PLANS: dict[str, tuple[str, ...]] = {
    "naive_fused": ("write:naive", "compile", "verify", "profile", "write:fused", "profile", "finish"),
    "fused_vectorised": ("write:fused", "compile", "verify", "profile", "write:vectorised", "profile", "finish"),
    "wrong_fix": ("write:wrong", "compile", "verify", "write:fused", "verify", "profile", "finish"),
    "broken_fix": ("write:broken", "compile", "fix", "compile", "verify", "profile", "finish"),
    "naive": ("write:naive", "compile", "verify", "profile", "finish"),
    "fused": ("write:fused", "compile", "verify", "profile", "finish"),
    "vectorised": ("write:vectorised", "compile", "verify", "profile", "finish"),
    "wrong": ("write:wrong", "compile", "verify", "finish"),
}
# The default mix of plans (weights): most episodes end correct at some speed, some fail.
DEFAULT_MIX = {"naive_fused": 0.15, "fused_vectorised": 0.15, "wrong_fix": 0.15, "broken_fix": 0.10,
               "naive": 0.10, "fused": 0.10, "vectorised": 0.10, "wrong": 0.15}


def adapt_plan(plan: str, spec: ChainSpec, backend: str) -> tuple[str, ...]:
    """The plan's moves, with variants this task lacks replaced: vectorised -> fused (a write
    identical to the last one is dropped later), wrong -> fused."""
    if plan not in PLANS:
        raise ValueError(f"unknown plan {plan!r}; known: {', '.join(PLANS)}")
    have = set(available(spec, backend))
    return tuple(m if not m.startswith("write:") or m[6:] in have else "write:fused" for m in PLANS[plan])


def call(name: str, **arguments: Any) -> str:
    return format_tool_call(ToolCall(name, arguments))


class Script:
    """Turns a plan into replies, keeping track of the workspace files it has written."""

    def __init__(self, spec: ChainSpec, backend: str, seed: int = 0):
        self.spec, self.backend, self.seed = spec, backend, seed
        self.files: dict[str, str] = {}
        self.last: Optional[Solution] = None

    def write(self, variant: str) -> tuple[str, list[str]]:
        """(thought, calls) writing the variant's files that differ from the workspace."""
        previous, sol = self.last, write_solution(self.spec, variant, self.backend, self.seed)
        calls = [call("write_file", path=p, content=t) for p, t in sol.files.items() if self.files.get(p) != t]
        self.files.update(sol.files)
        self.last = sol
        return self.thought(variant, previous), calls

    def thought(self, variant: str, previous: Optional[Solution]) -> str:
        ops, target = describe(self.spec), "float4 loads and stores" if self.backend == "cuda" else \
            "SIMD loops (#pragma omp simd) and a polynomial exp the compiler can vectorise"
        if previous is not None and previous.variant == "wrong":
            return f"The outputs do not match: my kernel {previous.note}. Rewrite it to follow model.py step by step."
        if variant == "naive":
            return f"The task: {ops}. First one kernel per op, each into a new buffer; fuse once it is correct."
        if variant == "vectorised":
            lead = "It is correct. Now vectorise the fused kernel" if previous else f"The task: {ops}. One fused kernel"
            return f"{lead}: {target}."
        if previous is not None:
            return "It is correct. Now fuse the chain into one kernel: one read of each input, one write."
        return f"The task: {ops}. One fused kernel: the chain in registers, one read of each input, one write."

    def replies(self, moves: Sequence[str]) -> list[str]:
        # pending: (thought, calls) of a write awaiting its sandbox call; a write that changes
        # nothing (a fallback to the variant already there) drops the call after it too.
        replies, pending, skip = [], None, False
        for move in moves:
            if move.startswith("write:"):
                thought, calls = self.write(move[6:])
                pending, skip = ((thought, calls), False) if calls else (None, True)
                continue
            if skip and move != "finish":
                skip = False
                continue
            if move == "fix":
                old, new = self.last.fix
                path = next(p for p in self.files if p.startswith(KERNEL_STEM))
                self.files[path] = self.files[path].replace(old, new)
                pending = ("The compiler reports a missing semicolon; add it.",
                           [call("edit_file", path=path, old_text=old, new_text=new)])
                continue
            thought, calls = pending or (MOVE_THOUGHTS[move], [])
            replies.append(thought + "\n" + "".join(calls + [call(move)]))
            pending = None
        return replies


MOVE_THOUGHTS = {"compile": "Compile it.", "verify": "Check it against the reference.",
                 "profile": "Time it against eager PyTorch and torch.compile.",
                 "finish": "The workspace holds my solution."}


def plan_replies(spec: ChainSpec, backend: str, plan: str, seed: int = 0) -> list[str]:
    return Script(spec, backend, seed).replies(adapt_plan(plan, spec, backend))


# ---------------------------------------------------------------------- episodes

def write_tasks(rows: Sequence[dict], directory: str | Path) -> list[tuple[ChainSpec, Path]]:
    """Each family row's program as ``<directory>/<id>.py``, with its spec."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for row, spec in zip(rows, family_specs(list(rows))):
        path = directory / f"{spec.id}.py"
        path.write_text(row.get("code") or render_task(spec), encoding="utf-8")
        out.append((spec, path))
    return out


def draw_plan(mix: dict[str, float], rng: random.Random) -> str:
    names = list(mix)
    return rng.choices(names, weights=[mix[n] for n in names])[0]


async def teacher_episode(spec: ChainSpec, task: Path, plan: str, pool: Any, cfg: AgentConfig, backend: str,
                          tokenizer: Any = None, episode_id: str = "", seed: int = 0,
                          reward: str = "graduated") -> Trajectory:
    """One episode of ``plan`` on ``task`` through the real tools and sandbox pool, scored with
    the ``reward`` function. The policy's name is ``teacher/<plan>``, so a trajectory row says
    which plan made it."""
    policy = ScriptedPolicy(plan_replies(spec, backend, plan, seed), tokenizer=tokenizer, name=f"teacher/{plan}")
    return await run_episode(task, policy, pool, cfg, backend, reward=reward, episode_id=episode_id)


async def teacher_episodes(tasks: Sequence[tuple[ChainSpec, Path]], count: int, pool: Any, cfg: AgentConfig,
                           backend: str, out: Optional[str | Path] = None, tokenizer: Any = None,
                           mix: Optional[dict[str, float]] = None, seed: int = 0,
                           concurrency: int = 4, reward: str = "graduated") -> list[Trajectory]:
    """``count`` episodes over ``tasks`` (task i % len(tasks)), plans drawn from ``mix``
    (DEFAULT_MIX) under (seed, i); each row is appended to ``out`` (trajectory JSONL) as its
    episode ends."""
    if not tasks:
        raise ValueError("teacher episodes need at least one task")
    mix = mix or DEFAULT_MIX
    writer = TrajectoryWriter(out) if out is not None else None
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(i: int) -> Trajectory:
        spec, task = tasks[i % len(tasks)]
        plan = draw_plan(mix, random.Random(f"teacher:{seed}:{i}"))
        async with gate:
            traj = await teacher_episode(spec, task, plan, pool, cfg, backend, tokenizer,
                                         f"{i:05d}-{spec.id}-{plan}", seed, reward)
        if writer is not None:
            writer.append(traj)
        return traj

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def judge_variants(specs: Sequence[ChainSpec], backend: str, pool: Any, directory: str | Path,
                         variants: Sequence[str] = VARIANTS, reward: str = "graduated",
                         stop_after: str = "timing") -> list[dict[str, Any]]:
    """Each available variant of each spec judged by the sandbox pool (no agent loop): one
    record per (spec, variant) with the verdict, the reward and the speedups (``stop_after``
    "verify": verdicts only, no timing)."""
    from sandbox.pool import EvalRequest
    from sandbox.reward import reward_fn

    directory = Path(directory)
    requests, meta = [], {}
    for spec in specs:
        task = directory / "tasks" / f"{spec.id}.py"
        task.parent.mkdir(parents=True, exist_ok=True)
        task.write_text(render_task(spec), encoding="utf-8")
        for variant in [v for v in variants if v in available(spec, backend)]:
            sol = write_solution(spec, variant, backend)
            key = f"{spec.id}/{variant}"
            requests.append(EvalRequest(key, task, sol.write(directory / "solutions" / spec.id / variant), stop_after))
            meta[key] = {"id": spec.id, "variant": variant, "signature": spec.signature, "note": sol.note}
    results = await asyncio.gather(*(pool.evaluate(r) for r in requests))
    records = []
    for result in results:
        m = result.measurement
        record = {**meta[result.id], "task_error": result.task_error}
        if m is not None:
            record.update(compiled=m.compiled, correct=m.correct, error=m.error, violations=list(m.violations),
                          reward=reward_fn(reward)(m), runtime_us=m.runtime_us, eager_us=m.eager_us,
                          compile_us=m.compile_us, speedup_vs_eager=m.speedup_vs_eager,
                          speedup_vs_compile=m.speedup_vs_compile, max_abs_diff=m.max_abs_diff)
        records.append(record)
    return records


def verdict_class(record: dict[str, Any]) -> str:
    """"correct", or the sandbox's error kind (mismatch, compile_error, ...), of a record."""
    if record.get("task_error"):
        return "task_error"
    return "correct" if record.get("correct") and not record.get("error") else str(record.get("error"))


def corpus_texts(specs: Sequence[ChainSpec], backend: str) -> list[str]:
    """Every text the teacher writes for these specs (programs, replies of every plan): a corpus
    for training a tokenizer on the project's own kernels."""
    texts = []
    for spec in specs:
        texts.append(render_task(spec))
        for plan in PLANS:
            texts += plan_replies(spec, backend, plan)
    return texts


def main(argv: Optional[list[str]] = None) -> int:
    from data_gen.dataset import load_tasks
    from sandbox.config import SandboxConfig
    from sandbox.pool import SandboxPool

    parser = argparse.ArgumentParser(prog="python -m src.agent.teacher", description="Teacher episodes for the family.")
    parser.add_argument("--tasks", type=Path, required=True, help="a family parquet (python -m data_gen.family)")
    parser.add_argument("--split", choices=("train", "heldout", "all"), default="train")
    parser.add_argument("--count", type=int, default=64, help="episodes (tasks are cycled)")
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--out", type=Path, required=True, help="trajectory JSONL (appended to)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=4, help="episodes at once")
    parser.add_argument("--tokenizer", default="", help="HF tokenizer directory: rows get token ids")
    args = parser.parse_args(argv)
    try:
        rows = [r for r in load_tasks(args.tasks) if args.split == "all" or r.get("split") == args.split]
        family_specs(rows)
    except (FileNotFoundError, ValueError) as exc:
        print(f"teacher: error: {exc}", file=sys.stderr)
        return 2
    if not rows or args.count < 1:
        print(f"teacher: error: no {args.split} tasks in {args.tasks} or --count < 1", file=sys.stderr)
        return 2
    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    tasks = write_tasks(rows, args.out.parent / f"{args.out.stem}_tasks")
    with SandboxPool(SandboxConfig(backend=args.backend)) as pool:
        trajs = asyncio.run(teacher_episodes(tasks, args.count, pool, AgentConfig(), args.backend, args.out,
                                             tokenizer, seed=args.seed, concurrency=args.concurrency))
    rewards = sorted(t.reward for t in trajs if t.reward is not None)
    print(f"wrote {len(trajs)} episodes to {args.out}; rewards: "
          + ", ".join(f"{r:g}: {rewards.count(r)}" for r in sorted(set(rewards))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
