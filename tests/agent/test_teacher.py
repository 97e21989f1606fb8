"""The scripted teacher: every variant's kernels compile with the real compilers, the sandbox
gives each variant its verdict class, bugs are only ever ones verification can see, and
teacher episodes run through the real tools and pool to the rewards their plans imply."""
from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest

from data_gen.family import ChainSpec, example_specs, render_task
from src.agent import AgentConfig, read_trajectories
from src.agent.teacher import (EXPECTED_VERDICT, PLANS, available, bug_candidates, choose_bug, judge_variants, plan_replies,
                               teacher_episodes, verdict_class, visible, write_solution)
from src.agent.teacher_kernels import KERNEL_STEM
from src.agent.toolcall import parse_tool_calls

# Small shapes: tests check verdicts, not speed.
SPECS = example_specs((16, 256))


def compile_source(source: str, path: Path, compiler: list[str]) -> subprocess.CompletedProcess:
    path.write_text(source)
    return subprocess.run([*compiler, "-c", str(path), "-o", str(path.with_suffix(".o"))], capture_output=True,
                          text=True, timeout=600)


def one_translation_unit(sources: list[str]) -> str:
    """Many kernel files as one: each in its own namespace, its launcher renamed (extern "C"
    names share one namespace), includes hoisted. One compiler run instead of one per file."""
    includes, blocks = [], []
    for n, source in enumerate(sources):
        lines = source.splitlines()
        includes += [line for line in lines if line.startswith("#include")]
        body = [line for line in lines if not line.startswith("#include")]
        blocks += [f"#define family_launch family_launch_{n}", f"namespace k{n} {{", *body, "}", "#undef family_launch"]
    return "\n".join(sorted(set(includes)) + blocks) + "\n"


def check_compiles(backend: str, compiler: list[str], suffix: str, directory: Path) -> None:
    """Every correct variant of SPECS (and one task whose rows are not float4-aligned) compiles
    without a warning; the broken variant does not."""
    specs = SPECS + [ChainSpec(("gelu", "add_bias"), "softmax", (16, 250))]
    sources = [next(t for p, t in write_solution(spec, variant, backend).files.items() if p.startswith(KERNEL_STEM))
               for spec in specs for variant in available(spec, backend) if variant != "broken"]
    proc = compile_source(one_translation_unit(sources), directory / f"all{suffix}", compiler)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr[-3000:]
    broken = write_solution(SPECS[0], "broken", backend)
    proc = compile_source(next(t for p, t in broken.files.items() if p.startswith(KERNEL_STEM)),
                          directory / f"broken{suffix}", compiler)
    assert proc.returncode != 0 and "error" in proc.stderr


def test_cpu_kernels_compile(tmp_path):
    check_compiles("cpu", ["c++", "-O3", "-fopenmp", "-fPIC", "-std=c++17", "-Wall", "-Wno-unused-parameter"],
                   ".cpp", tmp_path)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit), not a GPU")
def test_cuda_kernels_compile_with_nvcc(tmp_path):
    check_compiles("cuda", ["nvcc", "-arch=sm_90", "-O3", "--use_fast_math", "-std=c++17", "-Xcompiler", "-fPIC"],
                   ".cu", tmp_path)


def test_broken_variant_is_repaired_by_its_edit():
    for spec in SPECS:
        broken = write_solution(spec, "broken", "cpu")
        fused = write_solution(spec, "fused", "cpu")
        path = next(p for p in broken.files if p.startswith(KERNEL_STEM))
        old, new = broken.fix
        assert broken.files[path].count(old) == 1
        assert broken.files[path].replace(old, new) == fused.files[path]


def test_bugs_are_ones_verification_can_see():
    for spec in SPECS:
        chain, note = choose_bug(spec)
        assert visible(spec, chain) and note
    # softmax is shift-invariant: leaving out "+ 1" before it changes nothing, and without large
    # values a missing max subtraction changes nothing either, so this task has no wrong variant.
    invisible = ChainSpec(("add_scalar:1.0",), "softmax", (16, 256))
    assert choose_bug(invisible) is None and "wrong" not in available(invisible, "cpu")
    # With exp in front, values reach e^7: no overflow, so the missing max subtraction and the
    # missing shift stay invisible; swapping the ops or leaving out exp are the visible bugs.
    with_exp = ChainSpec(("exp", "add_scalar:1.0"), "softmax", (16, 256))
    seen = {note for chain, note in bug_candidates(with_exp) if visible(with_exp, chain)}
    assert seen == {"applies add_scalar before exp", "leaves out exp"}


def test_vectorised_needs_aligned_rows_on_cuda_only():
    odd = ChainSpec(("relu",), None, (16, 250))
    assert "vectorised" in available(odd, "cpu") and "vectorised" not in available(odd, "cuda")
    with pytest.raises(ValueError, match="cols % 4"):
        write_solution(odd, "vectorised", "cuda")


@pytest.mark.parametrize("backend,variant", [("cpu", "fused"), ("cpu", "vectorised"), ("cuda", "fused")])
def test_the_chain_names_each_op_above_its_line_and_takes_its_values_op_by_op(backend, variant):
    # An input op between two constant ops: chain()'s parameters and every call's arguments
    # follow the ops left to right (an operand, then the op's constants), and a comment names
    # each op on the line above the line that computes it.
    spec = ChainSpec(("leaky_relu:0.1", "mul_input", "clamp:-1.0:1.0"), "sum", (16, 256))
    source = next(t for p, t in write_solution(spec, variant, backend).files.items() if p.startswith(KERNEL_STEM))
    lines = source.splitlines()
    head = next(n for n, line in enumerate(lines) if " chain(float v" in line)
    assert lines[head - 1] == "// On one element: leaky_relu -> mul_input -> clamp."
    params = lines[head].split("chain(")[1].split(")")[0]
    assert params == "float v, float negative_slope, float y, float min_value, float max_value"
    assert lines[head + 1:head + 7] == ["  // leaky_relu", "  v = v > 0.0f ? v : v * negative_slope;",
                                        "  // mul_input", "  v = v * y;", "  // clamp",
                                        "  v = v < min_value ? min_value : (v > max_value ? max_value : v);"]
    calls = [line.split("chain(", 1)[1] for line in lines[head + 8:] if "chain(" in line]
    assert calls and all(", negative_slope, y" in c and c.rstrip(");").endswith("min_value, max_value")
                         for c in calls), calls


def test_every_plan_is_a_script_of_valid_calls():
    spec = SPECS[0]
    for plan in PLANS:
        replies = plan_replies(spec, "cpu", plan)
        calls = [parse_tool_calls(r) for r in replies]
        assert all(not c.errors and c.calls for c in calls), plan
        assert [c.name for c in calls[-1].calls] == ["finish"]
        names = [c.name for reply in calls for c in reply.calls]
        assert names.count("write_file") >= 3  # kernel, binding, model_new
    # A fallback variant identical to the one written already costs no reply: fused_vectorised on
    # a task without float4 rows is the fused plan.
    odd = ChainSpec(("relu",), None, (16, 250))
    assert plan_replies(odd, "cuda", "fused_vectorised") == plan_replies(odd, "cuda", "fused")


def test_variants_get_their_verdict_through_the_sandbox(agent_pool, tmp_path):
    """Every variant of softmax-after-tanh; the polynomial exp and the rmsnorm paths (vectorised,
    and its wrong variant) of rmsnorm-after-exp."""

    async def judge():
        return [*await judge_variants([SPECS[0]], "cpu", agent_pool, tmp_path / "a", stop_after="verify"),
                *await judge_variants([SPECS[3]], "cpu", agent_pool, tmp_path / "b", ("vectorised", "wrong"),
                                      stop_after="verify")]

    records = asyncio.run(judge())
    assert sorted(r["variant"] for r in records) == sorted([*available(SPECS[0], "cpu"), "vectorised", "wrong"])
    wrong = [r for r in records if verdict_class(r) != EXPECTED_VERDICT[r["variant"]]]
    assert not wrong, wrong
    assert all(r["reward"] == 1.0 for r in records if verdict_class(r) == "correct")


def test_teacher_episodes_reach_the_rewards_of_their_plans(agent_pool, chat_tokenizer, tmp_path):
    spec = SPECS[0]
    task = tmp_path / f"{spec.id}.py"
    task.write_text(render_task(spec))
    out = tmp_path / "teacher.jsonl"
    cfg = AgentConfig()
    failing = asyncio.run(teacher_episodes([(spec, task)], 1, agent_pool, cfg, "cpu", out, chat_tokenizer,
                                           mix={"wrong": 1.0}))
    fixed = asyncio.run(teacher_episodes([(spec, task)], 1, agent_pool, cfg, "cpu", out, chat_tokenizer,
                                         mix={"wrong_fix": 1.0}, seed=1))
    assert failing[0].stop_reason == "finish" and failing[0].reward == -1.0
    assert fixed[0].stop_reason == "finish" and fixed[0].reward >= 1.0 and fixed[0].invalid_tool_calls == 0
    verify = [c.result for t in fixed[0].turns for c in t.tool_calls if c.name == "verify"]
    assert "verify FAILED (mismatch)" in verify[0] and "verify passed" in verify[1]
    rows = read_trajectories(out)
    assert [r["policy"] for r in rows] == ["teacher/wrong", "teacher/wrong_fix"]
    assert all(sum(r["loss_mask"]) > 0 and len(r["token_ids"]) == len(r["loss_mask"]) for r in rows)
    assert rows[1]["episode_id"].endswith(f"{spec.id}-wrong_fix")
