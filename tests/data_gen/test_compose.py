"""The offline composer: reproducible, shape-checked programs in KernelBench format that run."""
import json
import random
import subprocess
import sys
from collections import Counter

import pytest

from data_gen.compose import OfflineComposer, Sizing, nice_batch, sample_count
from data_gen.crawl import crawl
from data_gen.program import check_task_source, model_ops

# Small tasks: the point here is validity, not runtime.
TINY = Sizing(target_ms=(0.05, 0.5), max_tensor_mb=8.0, max_param_mb=16.0, max_batch=64)


@pytest.fixture(scope="module")
def registry():
    return crawl(with_transformers=False)


@pytest.fixture(scope="module")
def composed(registry):
    composer = OfflineComposer(registry, TINY, seed=7, op_count_weights=(1, 1, 1, 1, 1))
    return [composer.compose(i) for i in range(16)]


def test_same_seed_and_index_give_the_same_program(registry, composed):
    again = OfflineComposer(registry, TINY, seed=7, op_count_weights=(1, 1, 1, 1, 1)).compose(3)
    assert again.code == composed[3].code
    other = OfflineComposer(registry, TINY, seed=8, op_count_weights=(1, 1, 1, 1, 1)).compose(3)
    assert other.code != composed[3].code


def test_programs_parse_and_name_their_ops(composed):
    for cand in composed:
        assert not cand.error, cand.error
        check_task_source(cand.code)
        assert model_ops(cand.code) == cand.ops
        assert cand.data_source == f"torch#{len(cand.ops)}"
        assert 1 <= len(cand.ops) <= 5


def run_in_child(cands, tmp_path) -> dict:
    """Build and run each program in a child process (synthesized code never runs here): path ->
    output shape."""
    for cand in cands:
        (tmp_path / f"{cand.id}.py").write_text(cand.code)
    script = (
        "import importlib.util, json, sys, torch\n"
        "out = {}\n"
        "for path in sys.argv[1:]:\n"
        "    spec = importlib.util.spec_from_file_location('t', path); m = importlib.util.module_from_spec(spec)\n"
        "    spec.loader.exec_module(m)\n"
        "    model = m.Model(*m.get_init_inputs())\n"
        "    with torch.no_grad(): y = model(*m.get_inputs())\n"
        "    out[path] = list(y.shape)\n"
        "print(json.dumps(out))\n")
    files = sorted(str(p) for p in tmp_path.glob("*.py"))
    proc = subprocess.run([sys.executable, "-c", script, *files], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_programs_run_in_a_separate_process(composed, tmp_path):
    assert len(run_in_child(composed, tmp_path)) == len(composed)


def test_every_standalone_transformers_task_runs(tmp_path):
    """Each crawled transformers module inlines with all it needs: GemmaMLP's GELUTanh once lost
    its functools import, and the task could not even build."""
    pytest.importorskip("transformers")
    from data_gen.compose import Candidate
    from data_gen.hf_ops import compose_standalone

    ops = crawl(["llama", "gemma", "gpt2", "bert"], with_transformers=True).usable("transformers")
    assert "GemmaMLP" in {op.name for op in ops}
    sizing = Sizing(target_ms=(0.05, 5.0), max_tensor_mb=8.0, max_param_mb=64.0, max_batch=64)  # MLPs fit
    cands = [compose_standalone(Candidate(f"hf-{i}", i, "offline", 0), op, random.Random(i), sizing)
             for i, op in enumerate(ops)]
    made = [c for c in cands if not c.error]
    assert "GemmaMLP" in {c.ops[0] for c in made}
    assert len(run_in_child(made, tmp_path)) == len(made)


def test_default_mix_is_mostly_two_ops():
    counts = Counter(sample_count(random.Random(i), (3.40, 83.77, 7.62, 2.80, 1.23)) for i in range(4000))
    assert 0.80 < counts[2] / 4000 < 0.88
    assert counts[1] and counts[3] and counts[4] and counts[5]


def test_batch_sizes_are_rounded_like_people_write_them():
    assert [nice_batch(x) for x in (0.3, 1, 2.9, 4.2, 5, 7, 100, 130)] == [1, 1, 3, 4, 6, 8, 96, 128]


def test_shape_awareness_rejects_impossible_chains(registry):
    from data_gen.chain import Chain, OpUse, infer_shapes
    from data_gen.recipes import RECIPES

    chain = Chain((2, 8, 4, 4), [OpUse("Linear", {"in_features": 3, "out_features": 5}, RECIPES["Linear"])])
    assert "Linear" in infer_shapes(chain)
    loss_first = Chain((2, 8), [OpUse("MSELoss", {}, RECIPES["MSELoss"]), OpUse("ReLU", {}, RECIPES["ReLU"])])
    assert "scalar" in infer_shapes(loss_first)


def full_length_cost(chain):
    """The chain's cost with recurrent modules unrolled over every step on meta (the slow way)."""
    import data_gen.chain as chain_module

    saved = chain_module.RECURRENT_META_STEPS
    chain_module.RECURRENT_META_STEPS = 10 ** 9
    try:
        return chain_module.chain_cost(chain)
    finally:
        chain_module.RECURRENT_META_STEPS = saved


@pytest.mark.parametrize("name, kwargs", [
    ("LSTM", {"input_size": 16, "hidden_size": 32, "num_layers": 2, "batch_first": True}),
    ("GRU", {"input_size": 16, "hidden_size": 24, "num_layers": 1, "batch_first": True}),
])
def test_recurrent_cost_from_a_short_run_matches_the_full_unroll(name, kwargs):
    from data_gen.chain import Chain, OpUse, chain_cost, infer_shapes
    from data_gen.recipes import RECIPES

    chain = Chain((4, 96, 16), [OpUse(name, kwargs, RECIPES[name]), OpUse("Tanh", {}, RECIPES["Tanh"])])
    assert infer_shapes(chain) is None
    assert chain.ops[0].out_shape == (4, 96, kwargs["hidden_size"])  # full length, not the short run's
    short, full = chain_cost(chain), full_length_cost(chain)
    assert short.flops == pytest.approx(full.flops, rel=0.02)
    assert short.bytes_moved == pytest.approx(full.bytes_moved, rel=0.15)
    assert short.kernels == pytest.approx(full.kernels, rel=0.15)
    assert short.peak_tensor_bytes == full.peak_tensor_bytes


def test_long_recurrent_chains_compose_quickly():
    import time

    from data_gen.chain import Chain, OpUse, chain_cost, infer_shapes
    from data_gen.recipes import RECIPES

    kwargs = {"input_size": 512, "hidden_size": 1024, "num_layers": 2, "nonlinearity": "tanh", "batch_first": True}
    chain = Chain((8, 2048, 512), [OpUse("RNN", kwargs, RECIPES["RNN"])])
    start = time.monotonic()
    assert infer_shapes(chain) is None
    cost = chain_cost(chain)
    # Unrolled on meta this took ~25 s; a short run scaled by the length is far under a second.
    assert time.monotonic() - start < 5
    assert cost.flops > 2 * 2048 * 8 * 1024 * (512 + 1024) * 2 * 0.9


def test_parameters_do_not_cap_the_batch():
    """A big weight must not shrink the batch: only activations grow with it."""
    from data_gen.chain import Chain, OpUse
    from data_gen.compose import scale_to_target
    from data_gen.recipes import RECIPES

    sizing = Sizing(target_ms=(2.0, 30.0), peak_flops=4e13, bandwidth=3.5e12, launch_us=6.0,
                    max_tensor_mb=2048.0, max_param_mb=2048.0, max_batch=4096)
    chain = Chain((8, 8192), [OpUse("Linear", {"in_features": 8192, "out_features": 8192}, RECIPES["Linear"]),
                              OpUse("Tanh", {}, RECIPES["Tanh"])])
    sized, estimate = scale_to_target(chain, sizing, 8.0)
    assert sized.input_shape[0] > 64  # the 256 MiB weight used to cap it at 64 (0.23 ms)
    assert 2.0 / 1.5 <= estimate <= 30 * 1.5


def test_unreachable_targets_are_redrawn_not_emitted():
    from data_gen.chain import Chain, OpUse
    from data_gen.compose import scale_to_target
    from data_gen.recipes import RECIPES

    sizing = Sizing(target_ms=(2.0, 30.0), peak_flops=4e13, bandwidth=3.5e12, launch_us=6.0, max_batch=16)
    chain = Chain((8, 64), [OpUse("ReLU", {}, RECIPES["ReLU"])])
    with pytest.raises(ValueError, match="outside the target"):
        scale_to_target(chain, sizing, 8.0)
