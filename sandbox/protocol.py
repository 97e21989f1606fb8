"""What the judge and its workers say to each other, defined once for both sides.

- Commands, one line each on a worker's stdin: ``go NONCE`` (time now), ``check NONCE SEED,...``
  (reference worker: compute the reference for these per-call seeds), anything else: stop.
  Every report a worker sends afterwards carries the command's nonce.
- Frames on the reference worker's outputs pipe: a length header, then a ``torch.save`` of
  ``{"inputs": [digest, ...], "outputs": [...]}``, one entry per seed of the check command
  (``inputs_digest`` of the regenerated inputs).
- Checked calls: the run worker keeps a copy of a call's output in a file of its directory and
  names it in its report as ``{"path", "sha256", "calls": [{"label", "seed", "inputs_after"},
  ...]}`` (``inputs_after``: the digest of the inputs as the call left them); the file's digest,
  sent over the nonce-checked pipe, makes a file swapped in afterwards a forgery.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

# Length prefix of a frame on the reference outputs pipe (the judge reads exactly that many bytes).
FRAME_HEADER = struct.Struct("<Q")


@dataclass(frozen=True)
class Command:
    name: str                    # "go", "check" or "stop"
    nonce: str = ""
    seeds: tuple[int, ...] = ()

    def line(self) -> str:
        if self.name == "check":
            return f"check {self.nonce} {','.join(map(str, self.seeds)) or '-'}"
        return f"{self.name} {self.nonce}".strip()

    @classmethod
    def parse(cls, line: str) -> "Command":
        words = line.split()
        if words[:1] == ["go"] and len(words) == 2:
            return cls("go", words[1])
        if words[:1] == ["check"] and len(words) == 3:
            seeds = () if words[2] == "-" else tuple(int(s) for s in words[2].split(","))
            return cls("check", words[1], seeds)
        return cls("stop")


def frame(payload: bytes) -> bytes:
    return FRAME_HEADER.pack(len(payload)) + payload


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
