"""The rollout DataModule's device gate: on when the sandbox times on the training device."""
from __future__ import annotations

import contextlib

import pytest

from sandbox.gate import DeviceGate
from src.data.rollout import RolloutDataModule


def datamodule(tmp_path, backend: str, gate: str, devices=()):
    return RolloutDataModule(tasks=str(tmp_path), output_dir=str(tmp_path / "out"), reward="graduated",
                             sandbox={"backend": backend, "devices": list(devices)}, device_gate=gate)


@pytest.mark.parametrize("backend,devices,gate,expected", [
    ("cpu", (), "auto", "cpu"),          # CPU training beside the CPU sandbox: timing on the same cores
    ("cuda", ("0",), "auto", None),      # the sandbox times on GPU 0, training is on the CPU
    ("cuda", ("0",), "always", "cpu"),
    ("cpu", (), "never", None),
])
def test_gate_follows_the_devices(tmp_path, backend, devices, gate, expected):
    dm = datamodule(tmp_path, backend, gate, devices)
    held = dm.device_gate()
    if expected is None:
        assert isinstance(held, contextlib.nullcontext)
    else:
        assert isinstance(held, DeviceGate) and held.key == expected
        with held:
            pass
        assert held.holds == 1 and dm.gate_wait_s() >= 0.0
    assert dm.device_gate() is held  # one gate per run: its wait time adds up


def test_an_unknown_gate_mode_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="device_gate='sometimes'"):
        datamodule(tmp_path, "cpu", "sometimes")
