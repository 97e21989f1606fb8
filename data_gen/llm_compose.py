"""The LLM composer: a model writes the task program for a plan drawn by the offline composer.

The offline composer picks which operators, in which order, on which input shape and runtime
target (so the plan is feasible and the mix follows the config); the LLM writes the program.
Every raw response is appended to a JSONL log (prompts and responses; never an API key).
A response that is not a valid KernelBench task gets the problem fed back, up to
``max_attempts`` times; transport failures are retried inside the chat client.
"""
from __future__ import annotations

import json
import re
import string
import threading
import time
from pathlib import Path
from typing import Any, Optional

from sandbox.errors import TaskError
from src.llm import ChatModel, LLMError

from .compose import Candidate, OfflineComposer
from .program import check_task_source, model_ops

PROMPT_PATH = Path(__file__).resolve().parent / "prompts" / "compose_task.md"
EXAMPLE_TASK = Path(__file__).resolve().parent.parent / "examples" / "tasks" / "linear_relu.py"
CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


def extract_program(text: str) -> str:
    """The last fenced code block, or the whole reply when it has none."""
    blocks = CODE_BLOCK.findall(text)
    return (blocks[-1] if blocks else text).strip() + "\n"


def missing_ops(code: str, ops: list[str]) -> list[str]:
    """Requested operators the program does not use, as a module (nn.X) or by name (F.x, torch.x)."""
    used = set(model_ops(code))
    lowered = code.lower()
    return [op for op in ops if op not in used and op.lower() not in lowered]


class LLMComposer:
    name = "llm"

    def __init__(self, chat: ChatModel, planner: OfflineComposer, log_path: Path, device: str = "GPU",
                 max_attempts: int = 3, sampling: Optional[dict[str, Any]] = None,
                 max_consecutive_errors: int = 5, prompt_path: Path = PROMPT_PATH):
        self.chat, self.planner = chat, planner
        self.seed = planner.seed
        self.log_path, self.device = log_path, device
        self.max_attempts, self.sampling = max_attempts, dict(sampling or {})
        self.max_consecutive_errors = max_consecutive_errors
        self.template = string.Template(prompt_path.read_text())
        self.example = EXAMPLE_TASK.read_text().strip() if EXAMPLE_TASK.exists() else ""
        self._lock = threading.Lock()
        self._consecutive_errors = 0

    def compose(self, index: int) -> Candidate:
        plan = self.planner.compose(index)
        if plan.error or not plan.data_source.startswith("torch"):
            return plan  # standalone transformers tasks are inlined, not written by the LLM
        cand = Candidate(f"{self.name}-{self.seed}-{index:06d}", index, self.name, self.seed,
                         ops=list(plan.ops), data_source=plan.data_source, target_ms=plan.target_ms)
        messages = [{"role": "user", "content": self.prompt(plan)}]
        for attempt in range(1, self.max_attempts + 1):
            text = self.ask(messages, index, attempt, plan.ops)
            problem = self.problem_with(text, plan.ops)
            if problem is None:
                cand.code = extract_program(text)
                return cand
            messages += [{"role": "assistant", "content": text},
                         {"role": "user", "content": f"That program is not usable: {problem}. "
                                                     "Answer with the corrected complete program."}]
        cand.error = f"LLM gave no usable program in {self.max_attempts} attempts (last: {problem})"
        return cand

    def prompt(self, plan: Candidate) -> str:
        import torch.nn as nn

        from .crawl import signature_of

        shape = re.search(r"torch\.randn\(([^)]*)\)", plan.code)
        return self.template.substitute(
            ops=" -> ".join(plan.ops), signatures="; ".join(signature_of(getattr(nn, op)) for op in plan.ops),
            input_shape=input_shape_text(plan.code, shape.group(1) if shape else "?"),
            target_ms=f"{plan.target_ms:.2g}" if plan.target_ms else "a few", device=self.device,
            example=self.example)

    def ask(self, messages: list[dict[str, str]], index: int, attempt: int, ops: list[str]) -> str:
        start = time.time()
        entry: dict[str, Any] = {"index": index, "attempt": attempt, "ops": ops, "messages": messages}
        try:
            reply = self.chat.chat(messages, **self.sampling)
        except LLMError as exc:
            entry.update(error=str(exc), seconds=round(time.time() - start, 3))
            self.log(entry)
            with self._lock:
                self._consecutive_errors += 1
                if self._consecutive_errors >= self.max_consecutive_errors:
                    raise LLMError(f"{self._consecutive_errors} LLM calls in a row failed; last: {exc}") from None
            return ""
        with self._lock:
            self._consecutive_errors = 0
        entry.update(response=reply.text, raw=reply.raw, seconds=round(time.time() - start, 3))
        self.log(entry)
        return reply.text

    def problem_with(self, text: str, ops: list[str]) -> Optional[str]:
        if not text.strip():
            return "the reply was empty"
        code = extract_program(text)
        try:
            check_task_source(code)
        except TaskError as exc:
            return str(exc)
        missing = missing_ops(code, ops)
        return f"it does not use {', '.join(missing)}" if missing else None

    def log(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, default=str)
        with self._lock, open(self.log_path, "a") as fh:
            fh.write(line + "\n")


def input_shape_text(code: str, dims: str) -> str:
    """Resolve constant names in the plan's input expression to numbers: (batch_size=64, ...)."""
    values = dict(re.findall(r"^(\w+) = (\d+)$", code, re.MULTILINE))
    return "(" + ", ".join(f"{d.strip()}={values.get(d.strip(), d.strip())}" for d in dims.split(",")) + ")"
