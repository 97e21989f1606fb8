"""Train a small actor from scratch for the task family (docs/family.md), standing in for
pre-training where no pretrained weights can be reached: a byte-level BPE tokenizer trained on
the project's own kernel corpus (the system prompt with SKILL.md and the tool schemas, every
training task's prompt, every text the scripted teacher writes for those tasks), then behaviour
cloning on teacher episodes that ran through the real tools and sandbox. The episodes mix the
teacher's plans (naive -> fused, fused -> vectorised, wrong -> fixed, broken -> fixed, and ones
that stay naive or wrong), multi-turn and single-turn, so the clone's own rollouts earn
different rewards: what warm-up, RFT and PPO need to learn from. Only the training split's
tasks are shown; the held-out ones (other chain signatures) stay unseen.

Launch lines (from the repository root):
    # CPU (2 cores: the "actor" size, ~1 h, most of it the teacher's sandbox calls):
    python scripts/make_family_actor.py --out outputs/family/actor --episodes 192 --size actor \\
        --steps 400 --device cpu
    # One GPU (the sandbox stays the CPU one: data/family/cpu holds the tasks; ~6 min on an H200 host):
    python scripts/make_family_actor.py --out outputs/family/actor --episodes 384 --size small \\
        --steps 600 --batch-size 8 --device cuda --workers 12
    # The committed actor's recipe (data/family/actor_small.tar.gz; docs/family.md): snippets first,
    # then the demonstrations, corpus demonstrations and rehearsed snippets (~7 min on one H200):
    python scripts/make_family_actor.py --out outputs/family/actor_small --work-dir outputs/family/actor_work \\
        --size small --lr 2e-3 --bf16 --pretrain-snippets 16000 --pretrain-steps 6000 --pretrain-time-s 280 \\
        --rehearse-snippets 2000 --corpus-demos 1000 --steps 2000 --time-s 80 --batch-size 8 --device cuda

Writes to --out: the model and tokenizer (save_pretrained: load with
model.actor.name_or_path=DIR), build.json (what was shown and the loss curve). --work-dir keeps
the tokenizer, the demonstrations (demos_multi.jsonl, demos_single.jsonl: trajectory rows) and
a demos.done marker: a rerun reuses recorded demonstrations and only trains again.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from data_gen.dataset import load_tasks  # noqa: E402
from data_gen.family import ChainSpec, family_specs, render_task, sample_specs  # noqa: E402
from sandbox.config import SandboxConfig, TimingConfig  # noqa: E402
from sandbox.pool import SandboxPool  # noqa: E402
from src.agent import AgentConfig, TrajectoryWriter, read_trajectories, run_episode  # noqa: E402
from src.agent.episode import SingleReplyTokens, task_prompt  # noqa: E402
from src.agent.offline_model import (behaviour_clone, build_chat_tokenizer, chat_corpus, save_policy,  # noqa: E402
                                     small_model_config)
from src.agent.policies import ScriptedPolicy  # noqa: E402
from src.agent.teacher import Script, available, corpus_texts, teacher_episodes, vectorisable, write_tasks  # noqa: E402
from src.agent.teacher_kernels import BINDING_PATH  # noqa: E402

# Single-turn demonstrations (the warm-up's mode: one reply of write_file calls, judged once):
# which variant the reply writes, so the warm-up sees every reward from -1 to 3.
SINGLE_TURN_MIX = {"naive": 0.2, "fused": 0.25, "vectorised": 0.3, "wrong": 0.15, "broken": 0.1}
# Corpus demonstrations (--corpus-demos): the teacher's correct single-turn variants on sampled
# training-split specs, rendered with the chat template, not judged (the stand-in pre-training
# corpus: many more chain signatures than the judged tasks, never a held-out one).
CORPUS_VARIANTS = ("naive", "fused", "vectorised")
# Where the kernel's chain body starts and ends in every teacher kernel (CPU and CUDA alike): its
# few tokens decide which ops the kernel computes (scripts/probe_family_actor.py, --body-weight).
BODY_START, BODY_END = "float chain(", "return v;"
# The agent settings the demonstrations run under; the pipeline (scripts/family_pipeline.py)
# gives rollouts the same turn limit.
MAX_TURNS = 10


def usage_error(message: str) -> None:
    """Unusable input: one line on stderr, exit status 2."""
    print(f"make_family_actor: error: {message}", file=sys.stderr)
    sys.exit(2)


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default=str(ROOT / "data" / "family" / "cpu" / "tasks.parquet"), help="family parquet")
    p.add_argument("--backend", choices=("cpu", "cuda"), default="cpu", help="sandbox backend of the demonstrations")
    p.add_argument("--out", default=str(ROOT / "outputs" / "family" / "actor"))
    p.add_argument("--work-dir", default="", help="tokenizer and demonstrations (default: <out>_work)")
    p.add_argument("--max-tasks", type=int, default=0, help="first N training tasks only (0: all)")
    p.add_argument("--episodes", type=int, default=192, help="multi-turn teacher episodes")
    p.add_argument("--single-turn", type=float, default=0.5, help="single-turn episodes per multi-turn one")
    p.add_argument("--corpus-demos", type=int, default=0,
                   help="unjudged single-turn demonstrations on sampled training-split specs (CORPUS_VARIANTS)")
    p.add_argument("--pretrain-snippets", type=int, default=0,
                   help="short (task code -> reply) snippets on sampled training-split specs, cloned first")
    p.add_argument("--pretrain-steps", type=int, default=1500, help="cloning steps on the snippets")
    p.add_argument("--pretrain-batch-size", type=int, default=32, help="snippets per pre-training step")
    p.add_argument("--pretrain-time-s", type=float, default=0.0,
                   help="at most this many seconds of snippet cloning (0: no limit; the cosine fits the budget)")
    p.add_argument("--rehearse-snippets", type=int, default=0,
                   help="this many of the snippets stay among the demonstrations cloned after (so composing is kept)")
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--size", default="actor", help="offline_model.MODEL_SIZES: tiny, actor, small, base")
    p.add_argument("--max-positions", type=int, default=16384, help="the model's context")
    p.add_argument("--steps", type=int, default=400, help="most behaviour-cloning steps")
    p.add_argument("--time-s", type=float, default=0.0,
                   help="at most this many seconds of cloning the demonstrations (0: no limit)")
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--bf16", action="store_true", help="cloning's forward under bfloat16 autocast (CUDA only)")
    p.add_argument("--batch-size", type=int, default=4, help="demonstrations per step (0: all)")
    p.add_argument("--target-loss", type=float, default=0.0, help="stop once a step's loss is below")
    p.add_argument("--body-weight", type=float, default=1.0,
                   help="loss weight of the chain body's generated tokens (the rest: 1); >1 stresses composition")
    p.add_argument("--device", default="cpu", help="where behaviour cloning runs (cpu, cuda)")
    p.add_argument("--workers", type=int, default=2, help="sandbox workers")
    p.add_argument("--timing-repeats", type=int, default=5, help="timed runs per profile call")
    p.add_argument("--no-compile-baseline", action="store_true",
                   help="skip the torch.compile baseline (cheaper; profile then reports eager only)")
    p.add_argument("--cache-dir", default="", help="sandbox cache (default: $CUDA_AGENT_CACHE or ~/.cache)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    if args.corpus_demos < 0:
        usage_error(f"--corpus-demos must be >= 0, got {args.corpus_demos}")
    if args.pretrain_snippets < 0 or args.pretrain_steps < 1 or args.pretrain_batch_size < 1:
        usage_error("--pretrain-snippets must be >= 0, --pretrain-steps and --pretrain-batch-size >= 1")
    if not 0 <= args.rehearse_snippets <= args.pretrain_snippets:
        usage_error("--rehearse-snippets must be between 0 and --pretrain-snippets")
    if args.pretrain_time_s < 0 or args.time_s < 0:
        usage_error("--pretrain-time-s and --time-s must be >= 0")
    if args.body_weight <= 0:
        usage_error(f"--body-weight must be > 0, got {args.body_weight}")
    return args


def training_specs(path: str, max_tasks: int) -> tuple[list[dict], list[ChainSpec]]:
    """The training split's rows and specs (the held-out signatures are never shown)."""
    rows = [r for r in load_tasks(path) if r.get("split") == "train"]
    rows = rows[:max_tasks] if max_tasks > 0 else rows
    if not rows:
        usage_error(f"{path} has no training task of the family")
    return rows, family_specs(rows)


def kernel_corpus(rows: Sequence[dict], specs: Sequence[ChainSpec], backend: str) -> list[str]:
    """Every text the episodes will hold but the sandbox's observations: system prompts and tool
    schemas of both agent modes, task prompts, the teacher's replies of every plan."""
    texts: list[str] = []
    for cfg in (multi_turn_config(), single_turn_config()):
        texts += chat_corpus([], cfg, backend) + [task_prompt(r["code"], cfg) for r in rows]
    return texts + corpus_texts(specs, backend)


def multi_turn_config() -> AgentConfig:
    return AgentConfig(max_turns=MAX_TURNS)


def single_turn_config() -> AgentConfig:
    return AgentConfig(mode="single_turn", max_turns=1, tools=("write_file",))


def single_turn_reply(spec: ChainSpec, backend: str, rng: random.Random) -> tuple[str, str]:
    """(variant, the one reply writing it): a thought and its write_file calls, no sandbox call."""
    have = set(available(spec, backend))
    names = [v for v in SINGLE_TURN_MIX if v in have]
    variant = rng.choices(names, weights=[SINGLE_TURN_MIX[v] for v in names])[0]
    thought, calls = Script(spec, backend).write(variant)
    return variant, thought + "\n" + "".join(calls)


async def single_turn_episodes(tasks: Sequence[tuple[ChainSpec, Path]], count: int, pool: Any, backend: str,
                               tokenizer: Any, out: Path, seed: int, concurrency: int) -> None:
    writer, gate = TrajectoryWriter(out), asyncio.Semaphore(max(1, concurrency))

    async def one(i: int) -> None:
        spec, task = tasks[i % len(tasks)]
        variant, reply = single_turn_reply(spec, backend, random.Random(f"single:{seed}:{i}"))
        policy = ScriptedPolicy([reply], tokenizer=tokenizer, name=f"teacher/single_{variant}")
        async with gate:
            writer.append(await run_episode(task, policy, pool, single_turn_config(), backend, reward="graduated",
                                            episode_id=f"single{i:05d}-{spec.id}-{variant}"))

    await asyncio.gather(*(one(i) for i in range(count)))


def record(args: argparse.Namespace, work: Path) -> Any:
    """The tokenizer, and the demonstrations written to ``work`` (reused once demos.done exists)."""
    from transformers import AutoTokenizer

    if (work / "demos.done").exists():
        return AutoTokenizer.from_pretrained(work / "tokenizer")
    rows, specs = training_specs(args.tasks, args.max_tasks)
    tokenizer = build_chat_tokenizer(kernel_corpus(rows, specs, args.backend), args.vocab_size)
    tokenizer.save_pretrained(work / "tokenizer")
    for stale in ("demos_multi.jsonl", "demos_single.jsonl"):
        (work / stale).unlink(missing_ok=True)
    tasks = write_tasks(rows, work / "tasks")
    sandbox = SandboxConfig(backend=args.backend, cache_dir=args.cache_dir, build_workers=args.workers,
                            compile_baseline=not args.no_compile_baseline,
                            timing=TimingConfig(warmup=1, warmup_ms=0.0, repeats=args.timing_repeats))
    with SandboxPool(sandbox) as pool:
        asyncio.run(teacher_episodes(tasks, args.episodes, pool, multi_turn_config(), args.backend,
                                     work / "demos_multi.jsonl", tokenizer, seed=args.seed,
                                     concurrency=args.workers * 2))
        asyncio.run(single_turn_episodes(tasks, round(args.episodes * args.single_turn), pool, args.backend,
                                         tokenizer, work / "demos_single.jsonl", args.seed, args.workers * 2))
    (work / "demos.done").touch()
    return tokenizer


def sampled_replies(count: int, backend: str, seed: int, stream: str):
    """(spec, variant, thought, calls) of ``count`` sampled training-split specs (never a held-out
    signature), each written as a correct variant drawn at random; ``stream`` names the draw
    (its specs come from sample_specs' seed ``seed`` + 1 for "corpus", + 2 for "snippets")."""
    rng = random.Random(f"{stream}:{seed}")
    offset = {"corpus": 1, "snippets": 2}[stream]
    specs = [s for s in sample_specs(2 * count + 50, backend, seed=seed + offset) if s.split() == "train"][:count]
    for spec in specs:
        variant = rng.choice([v for v in CORPUS_VARIANTS if v != "vectorised" or vectorisable(backend, spec.shape[1])])
        yield (spec, variant, *Script(spec, backend).write(variant))


def corpus_demonstrations(count: int, backend: str, tokenizer: Any, seed: int) -> list[dict]:
    """``count`` unjudged single-turn demonstrations on sampled specs whose signature is in the
    training split (so none shares its op sequence with a held-out task)."""
    rows, render = [], SingleReplyTokens(tokenizer, single_turn_config(), backend)
    for spec, variant, thought, calls in sampled_replies(count, backend, seed, "corpus"):
        ids, mask = render.tokens(render_task(spec), thought + "\n" + "".join(calls))
        rows.append({"token_ids": ids, "loss_mask": mask, "mode": "single_turn", "reward": None,
                     "policy": f"teacher/corpus_{variant}", "signature": spec.signature})
    return rows


def snippet_reply(thought: str, calls: Sequence[str]) -> str:
    """A reply as an episode writes it, less the call writing the fixed binding file."""
    return thought + "\n" + "".join(c for c in calls if json.dumps(BINDING_PATH) not in c)


def snippet_examples(count: int, backend: str, tokenizer: Any, seed: int) -> list[tuple[list[int], list[int]]]:
    """``count`` short (token_ids, loss_mask) pairs: a sampled training-split task's code, then a
    correct variant's reply (its thought and write_file calls, JSON-escaped as in an episode;
    without the fixed binding file), the reply's tokens labelled. ~1,000 tokens against an
    episode's ~2,500 (no system prompt, no tool schemas), so each op is chosen a few hundred
    tokens after the task's code that names it: cloned first, they teach composing, which the
    long demonstrations alone did not (docs/family.md)."""
    return [snippet_tokens(tokenizer, spec, thought, calls)
            for spec, _, thought, calls in sampled_replies(count, backend, seed, "snippets")]


def snippet_tokens(tokenizer: Any, spec: ChainSpec, thought: str, calls: Sequence[str]) -> tuple[list[int], list[int]]:
    """(token_ids, loss_mask) of one snippet: the task's code unlabelled, then the reply and an
    end-of-turn labelled."""
    prompt = tokenizer(render_task(spec) + "\n")["input_ids"]
    target = tokenizer(snippet_reply(thought, calls))["input_ids"] + [tokenizer.eos_token_id]
    return prompt + target, [0] * len(prompt) + [1] * len(target)


def body_mask(tokenizer: Any, ids: list[int], vocabulary: Sequence[str] | None = None) -> list[bool]:
    """Per token: does it end inside a chain body (from BODY_START to the BODY_END after it; every
    body of the text, a multi-turn demonstration writes several)? ``vocabulary``: each token id's
    text (``decoded_vocabulary``), when many texts are masked."""
    pieces = [vocabulary[t] for t in ids] if vocabulary is not None else tokenizer.batch_decode([[t] for t in ids])
    ends, total = [], 0
    for piece in pieces:
        total += len(piece)
        ends.append(total)
    text, spans, start = "".join(pieces), [], 0
    while (start := text.find(BODY_START, start)) >= 0:
        stop = text.find(BODY_END, start)
        stop = len(text) if stop < 0 else stop + len(BODY_END)
        spans.append((start, stop))
        start = stop
    inside, span = [], 0
    for end in ends:
        while span < len(spans) and end > spans[span][1]:
            span += 1
        inside.append(span < len(spans) and spans[span][0] < end <= spans[span][1])
    return inside


def decoded_vocabulary(tokenizer: Any) -> list[str]:
    """Each token id's text, decoded alone (the family's texts are ASCII: the pieces concatenate
    to the text)."""
    return tokenizer.batch_decode([[t] for t in range(len(tokenizer))])


def with_bodies(tokenizer: Any, examples: Sequence[tuple[list[int], list[int]]],
                count: int) -> list[tuple[list[int], list[int], list[bool]]]:
    """The first ``count`` examples that write a chain() body, each with its generated body tokens
    marked (the naive variant's texts have none: each op is its own function)."""
    vocabulary, out = decoded_vocabulary(tokenizer), []
    for ids, mask in examples:
        body = [b and m > 0 for b, m in zip(body_mask(tokenizer, ids, vocabulary), mask)]
        if any(body):
            out.append((ids, mask, body))
        if len(out) == count:
            break
    return out


def bodies_right(model: Any, scored: Sequence[tuple[list[int], list[int], list[bool]]], device: str) -> float:
    """The share of ``scored`` (with_bodies) whose every chain-body token is the argmax under
    teacher forcing."""
    import torch

    right = 0
    model.eval()
    for ids, _, body in scored:
        with torch.no_grad():
            pred = model(torch.tensor([ids], device=device)).logits[0, :-1].argmax(-1).tolist()
        right += all(pred[i - 1] == ids[i] for i in range(1, len(ids)) if body[i])
    return right / len(scored) if scored else 0.0


def fused_snippets(tokenizer: Any, backend: str, split: str, count: int) -> list[tuple[list[int], list[int]]]:
    """Snippets (task code -> the fused reply) of ``count`` sampled specs of one split, from draws
    no cloning text comes from (sample_specs seed 99)."""
    specs = [s for s in sample_specs(20 * count + 50, backend, seed=99) if s.split() == split][:count]
    return [snippet_tokens(tokenizer, spec, *Script(spec, backend).write("fused")) for spec in specs]


def snippet_bodies_right(model: Any, tokenizer: Any, backend: str, device: str, count: int = 48) -> dict[str, float]:
    """Per split, the share of ``count`` fresh fused snippets whose chain body the model writes
    (every body token argmax-correct): does the snippet cloning compose held-out chains?"""
    return {split: round(bodies_right(model, with_bodies(tokenizer, fused_snippets(tokenizer, backend, split, count),
                                                         count), device), 3) for split in ("train", "heldout")}


def weigh_bodies(rows: Sequence[dict], tokenizer: Any, weight: float) -> int:
    """The loss weight of every generated chain-body token set to ``weight`` (in place; the other
    generated tokens keep 1). Returns how many tokens were reweighted."""
    count, vocabulary = 0, decoded_vocabulary(tokenizer)
    for row in rows:
        body = body_mask(tokenizer, row["token_ids"], vocabulary)
        row["loss_mask"] = [weight if m and b else m for m, b in zip(row["loss_mask"], body)]
        count += sum(1 for m, b in zip(row["loss_mask"], body) if m and b)
    return count


def demonstrations(work: Path) -> list[dict]:
    rows = []
    for name in ("demos_multi.jsonl", "demos_single.jsonl"):
        path = work / name
        rows += [r for r in read_trajectories(path) if r.get("token_ids")] if path.exists() else []
    return rows


def reward_counts(rows: Sequence[dict]) -> dict[str, dict[str, int]]:
    """Per agent mode, how many demonstrations ended with each reward (the spread BC shows)."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        key = f"{r['reward']:g}" if r.get("reward") is not None else "none"
        counts = out.setdefault(r.get("mode", "multi_turn"), {})
        counts[key] = counts.get(key, 0) + 1
    return {mode: dict(sorted(c.items())) for mode, c in out.items()}


def clone(args: argparse.Namespace, tokenizer: Any, rows: Sequence[dict]) -> tuple[Any, dict]:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(small_model_config(tokenizer, args.size, args.max_positions))
    examples = [(r["token_ids"], r["loss_mask"]) for r in rows]
    start, pretraining = time.monotonic(), None
    if args.pretrain_snippets:
        snippets = snippet_examples(args.pretrain_snippets, args.backend, tokenizer, args.seed)
        losses = behaviour_clone(model, snippets, tokenizer.pad_token_id, args.pretrain_steps, args.lr, args.device,
                                 0.0, args.pretrain_batch_size, progress=not args.no_progress,
                                 time_budget_s=args.pretrain_time_s, bf16=args.bf16)
        pretraining = {"snippets": len(snippets), "steps": len(losses), "batch_size": args.pretrain_batch_size,
                       "seconds": round(time.monotonic() - start, 1), "first_loss": losses[0],
                       "final_loss": sum(losses[-20:]) / len(losses[-20:]),
                       "median_tokens": sorted(len(ids) for ids, _ in snippets)[len(snippets) // 2],
                       "bodies_right": snippet_bodies_right(model, tokenizer, args.backend, args.device),
                       "rehearsed": args.rehearse_snippets}
        print("after the snippets:", json.dumps(pretraining), flush=True)
        examples += random.Random(args.seed).sample(snippets, args.rehearse_snippets)
        start = time.monotonic()
    losses = behaviour_clone(model, examples, tokenizer.pad_token_id, args.steps, args.lr, args.device,
                             args.target_loss, args.batch_size, progress=not args.no_progress,
                             time_budget_s=args.time_s, bf16=args.bf16)
    every = max(1, len(losses) // 20)
    return model.cpu(), {"steps": len(losses), "lr": args.lr, "batch_size": args.batch_size, "device": args.device,
                         "bf16": args.bf16, "seconds": round(time.monotonic() - start, 1), "first_loss": losses[0],
                         "final_loss": sum(losses[-20:]) / len(losses[-20:]),
                         "loss_curve": [[i, round(losses[i], 5)] for i in range(0, len(losses), every)],
                         "pretraining": pretraining}


def main(argv: Optional[list[str]] = None) -> dict:
    args = parse_args(argv)
    out = Path(args.out)
    work = Path(args.work_dir) if args.work_dir else out.with_name(out.name + "_work")
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    tokenizer = record(args, work)
    rows = demonstrations(work)
    if not rows:
        usage_error(f"no token-level demonstration in {work}")
    rows += corpus_demonstrations(args.corpus_demos, args.backend, tokenizer, args.seed) if args.corpus_demos else []
    body_tokens = weigh_bodies(rows, tokenizer, args.body_weight) if args.body_weight != 1 else None
    model, training = clone(args, tokenizer, rows)
    save_policy(model, tokenizer, out)
    lengths = sorted(len(r["token_ids"]) for r in rows)
    build = {"command": "python scripts/make_family_actor.py " + " ".join(argv if argv is not None else sys.argv[1:]),
             "size": args.size, "parameters": sum(p.numel() for p in model.parameters()),
             "vocab_size": len(tokenizer), "demonstrations": len(rows), "rewards": reward_counts(rows),
             "corpus_signatures": len({r["signature"] for r in rows if "signature" in r}),
             "plans": dict(sorted({r["policy"]: sum(1 for x in rows if x["policy"] == r["policy"]) for r in rows}.items())),
             "tokens": {"min": lengths[0], "median": lengths[len(lengths) // 2], "max": lengths[-1]},
             "body_weight": args.body_weight, "body_tokens_weighted": body_tokens,
             "training": training, "total_s": round(time.monotonic() - started)}
    (out / "build.json").write_text(json.dumps(build, indent=1) + "\n")
    print(json.dumps({k: v for k, v in build.items() if k != "training"} | {"final_loss": training["final_loss"]}))
    return build


if __name__ == "__main__":
    main()
