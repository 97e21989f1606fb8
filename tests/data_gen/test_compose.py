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


def test_programs_run_in_a_separate_process(composed, tmp_path):
    """Composed programs build and run (in a child process: synthesized code never runs here)."""
    for cand in composed:
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
    assert len(json.loads(proc.stdout)) == len(composed)


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
