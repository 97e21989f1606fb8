"""The task's weights, reference -> run worker, through sealed shared memory (sandbox.weights)."""
from __future__ import annotations

import mmap
import os

import pytest
import torch

from sandbox.inputs import WorkerFailure
from sandbox.measurement import ErrorKind
from sandbox.weights import WeightsMemory, read_weights, weights_memory, write_weights


def closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def test_weights_arrive_as_written_and_nobody_can_change_them_afterwards():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.BatchNorm1d(32))
    judge_copy = weights_memory()
    reference, run = os.dup(judge_copy), os.dup(judge_copy)
    write_weights(reference, [64, 32.5], model)
    arrived = read_weights(run)
    # Each worker's descriptor is gone once used: the run worker's solution finds no memfd open.
    assert closed(reference) and closed(run)
    assert arrived["init_inputs"] == [64, 32.5]
    expected = model.state_dict()
    assert set(arrived["state_dict"]) == set(expected)
    for name, tensor in expected.items():
        assert torch.equal(arrived["state_dict"][name], tensor), name
    # Sealed: no write, no growth, no writable shared mapping, for anyone holding a descriptor.
    with pytest.raises(PermissionError):
        os.pwrite(judge_copy, b"\0" * 8, 0)
    with pytest.raises(PermissionError):
        os.ftruncate(judge_copy, os.fstat(judge_copy).st_size * 2)
    with pytest.raises(PermissionError):
        mmap.mmap(judge_copy, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_WRITE)
    os.close(judge_copy)


def test_the_run_worker_refuses_weights_the_reference_did_not_seal():
    memfd = weights_memory()
    with pytest.raises(WorkerFailure) as empty:
        read_weights(os.dup(memfd))
    assert empty.value.kind == ErrorKind.SANDBOX_ERROR
    # Written but never sealed (a reference worker that died mid-way, or anyone else's archive).
    with os.fdopen(os.dup(memfd), "wb") as archive:
        torch.save({"init_inputs": [], "state_dict": {}}, archive)
    with pytest.raises(WorkerFailure, match="not written and sealed"):
        read_weights(os.dup(memfd))
    os.close(memfd)


def test_the_judge_keeps_its_descriptor_only_until_both_workers_hold_theirs():
    memory = WeightsMemory()
    fd = memory.fd
    memory.passed_to("run")  # pooled: the run worker is spawned (held) before the reference
    assert memory.fd == fd and not closed(fd)
    memory.passed_to("reference")
    assert memory.fd is None and closed(fd)
    memory.close()  # the evaluation's end closes nothing twice
