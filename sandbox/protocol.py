"""What the judge and its workers say to each other, defined once for both sides.

- Commands, one line each on a worker's stdin: ``go NONCE`` (time now), ``compile NONCE``
  (reference worker: do torch.compile's compile work now, untimed, so that "go" times compiled
  code only), ``next NONCE`` (run worker: the call you handed over is checked, carry on),
  ``check NONCE SEED PEER`` (reference worker: take the output the run worker handed over with
  nonce PEER, check it against the reference for input seed SEED), anything else: stop. Every
  report a worker sends afterwards carries the command's nonce.
- Reports, one JSON line each on the worker's report pipe: ``{"phase", "nonce", "payload"}``.
  The run worker's ``kept`` report names a checked call: ``{"kind", "label", "seed",
  "inputs_after", "channel", "violations"}`` (``inputs_after``: the digest of the inputs as the call left
  them; ``violations``: harness or task tampering found so far, which decides before the check); its
  output travels separately, in shared memory (``sandbox.handover``). The reference
  worker's ``checked`` report is ``sandbox.checks.judge_call``'s result (or ``{"forged": why}``);
  its ``compiled`` report (after "compile") is ``{"compile_error"}`` (None: compiled). A held
  worker (pooled) reports ``held`` once its imports are done, then waits for
  ``start DEVICE CPUS`` (``sandbox.process.WorkerProcess.start``) before anything else.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

# Commands that bring a fresh nonce (and so make every earlier report line stale).
NONCE_COMMANDS = ("go", "compile", "next", "check")


@dataclass(frozen=True)
class Command:
    name: str                    # "go", "compile", "next", "check" or "stop"
    nonce: str = ""
    seed: int = 0                # check: the input seed of the call to check
    peer: str = ""               # check: the nonce the run worker's hand-over carries

    def line(self) -> str:
        if self.name == "check":
            return f"check {self.nonce} {self.seed} {self.peer}"
        return f"{self.name} {self.nonce}".strip()

    @classmethod
    def parse(cls, line: str) -> "Command":
        words = line.split()
        if words[:1] in (["go"], ["compile"], ["next"]) and len(words) == 2:
            return cls(words[0], words[1])
        if words[:1] == ["check"] and len(words) == 4 and words[2].isdigit():
            return cls("check", words[1], int(words[2]), words[3])
        return cls("stop")


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
