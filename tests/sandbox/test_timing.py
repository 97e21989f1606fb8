"""The timing method on the CPU: counts, fresh inputs per run, and what it measures."""
import time

import torch

from sandbox.config import TimingConfig
from sandbox.timing import measure

CPU = torch.device("cpu")


def counting_inputs():
    calls = []

    def make(i):
        calls.append(i)
        return [torch.full((4,), float(i))]

    return make, calls


def test_returns_one_sample_per_repeat_after_warmup():
    make, calls = counting_inputs()
    seen = []
    samples = measure(lambda inp: seen.append(float(inp[0][0])), make,
                      TimingConfig(warmup=3, warmup_ms=0, repeats=7), CPU)
    assert len(samples) == 7
    assert len(seen) == 10  # 3 warm-up runs + 7 timed runs


def test_every_run_gets_a_fresh_input_set():
    make, calls = counting_inputs()
    seen = []
    measure(lambda inp: seen.append(float(inp[0][0])), make, TimingConfig(warmup=2, warmup_ms=0, repeats=5), CPU)
    assert seen == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert calls == list(range(7))


def test_fresh_inputs_off_reuses_one_input_set():
    make, calls = counting_inputs()
    measure(lambda inp: None, make, TimingConfig(warmup=2, warmup_ms=0, repeats=5, fresh_inputs=False), CPU)
    assert calls == [0]


def test_warmup_lasts_at_least_warmup_ms():
    runs = []
    start = time.perf_counter()
    measure(lambda inp: runs.append(time.sleep(0.005)), lambda i: [torch.zeros(1)],
            TimingConfig(warmup=1, warmup_ms=60, repeats=1), CPU)
    assert time.perf_counter() - start >= 0.06
    assert len(runs) >= 3  # more than the 1 warm-up run + 1 timed run the counts alone ask for


def test_samples_are_microseconds_of_the_run():
    samples = measure(lambda inp: time.sleep(0.002), lambda i: [torch.zeros(1)],
                      TimingConfig(warmup=1, warmup_ms=0, repeats=3), CPU)
    assert all(1900 <= s <= 50_000 for s in samples)


def test_uses_the_configured_thread_count():
    threads = []
    measure(lambda inp: threads.append(torch.get_num_threads()), lambda i: [torch.zeros(1)],
            TimingConfig(warmup=0, warmup_ms=0, repeats=2, cpu_threads=1), CPU)
    assert threads == [1, 1]
