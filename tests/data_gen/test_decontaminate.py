"""The AST similarity measure on hand-made near-duplicates and unrelated programs."""
import pytest

from data_gen.decontaminate import Benchmark, contaminated, model_tokens, similarity

BENCH = '''import torch
import torch.nn as nn

class Model(nn.Module):
    """Conv2d, GELU, then GroupNorm."""
    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        x = self.conv(x)
        x = torch.nn.functional.gelu(x)
        x = self.group_norm(x)
        return x

batch_size = 128
def get_inputs():
    return [torch.randn(batch_size, 3, 32, 32)]
def get_init_inputs():
    return [3, 16, 3, 8]
'''

NEAR_COPIES = {
    "renamed": BENCH.replace("self.conv", "self.c1").replace("group_norm", "gn").replace("x", "h"),
    "new_sizes_and_docs": BENCH.replace('"""Conv2d, GELU, then GroupNorm."""', '"""A fused block."""')
                               .replace("128", "64").replace("[3, 16, 3, 8]", "[8, 32, 5, 4]"),
    "keywords": BENCH.replace("nn.Conv2d(in_channels, out_channels, kernel_size)",
                              "nn.Conv2d(in_channels=in_channels, out_channels=out_channels, kernel_size=kernel_size)"),
    "reformatted_with_comments": BENCH.replace("        x = self.conv(x)\n",
                                               "        # convolution first\n        x = self.conv(\n            x)\n"),
}

UNRELATED = {
    "matmul_sum": '''import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim
    def forward(self, A, B):
        return torch.matmul(A, B).sum(dim=self.dim)
''',
    "lstm_head": '''import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self, n_in, n_hidden, n_out):
        super().__init__()
        self.rnn = nn.LSTM(n_in, n_hidden, batch_first=True)
        self.head = nn.Linear(n_hidden, n_out)
    def forward(self, x):
        out, _ = self.rnn(x)
        return torch.softmax(self.head(out[:, -1, :]), dim=-1)
''',
}


@pytest.mark.parametrize("name", list(NEAR_COPIES))
def test_near_copies_score_above_the_threshold(name):
    assert similarity(model_tokens(BENCH), model_tokens(NEAR_COPIES[name])) > 0.9


@pytest.mark.parametrize("name", list(UNRELATED))
def test_unrelated_programs_score_low(name):
    # Shared boilerplate (__init__, super(), self.x = nn.X(...)) keeps unrelated classes near 0.4-0.7.
    assert similarity(model_tokens(BENCH), model_tokens(UNRELATED[name])) < 0.75


def test_identical_is_one_and_measure_is_symmetric():
    a, b = model_tokens(BENCH), model_tokens(UNRELATED["lstm_head"])
    assert similarity(a, a) == 1.0
    assert similarity(a, b) == pytest.approx(similarity(b, a), abs=0.05)


def test_benchmark_dir_drops_near_copies_only(tmp_path):
    (tmp_path / "level2").mkdir()
    (tmp_path / "level2" / "1_Conv2d_GELU_GroupNorm.py").write_text(BENCH)
    (tmp_path / "notes.py").write_text("print('no Model here')\n")
    bench = Benchmark.from_dir(tmp_path)
    assert len(bench) == 1
    sources = [NEAR_COPIES["renamed"], UNRELATED["matmul_sum"]]
    matches = contaminated(sources, bench, threshold=0.9)
    assert matches[0].similarity > 0.9 and matches[0].closest.endswith("1_Conv2d_GELU_GroupNorm.py")
    assert matches[1].similarity < 0.9


def test_missing_benchmark_dir_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="benchmark directory not found"):
        Benchmark.from_dir(tmp_path / "nope")


def test_a_written_dataset_is_decontaminated_afterwards(tmp_path):
    """The CLI drops the near-copy row of a parquet dataset, keeps the other with its score, and
    names what it dropped."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from data_gen.dataset import load_tasks, write_dataset

    bench = tmp_path / "bench" / "level2"
    bench.mkdir(parents=True)
    (bench / "1_Conv2d_GELU_GroupNorm.py").write_text(BENCH)
    rows = [{"code": NEAR_COPIES["renamed"], "ops": ["Conv2d", "GELU", "GroupNorm"], "data_source": "torch#3", "id": "near"},
            {"code": UNRELATED["matmul_sum"], "ops": ["Linear"], "data_source": "torch#1", "id": "far"}]
    data = write_dataset(rows, tmp_path / "tasks.parquet")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "data_gen.decontaminate", str(data), "--benchmark-dir",
                           str(tmp_path / "bench"), "--summary", str(tmp_path / "d.json")],
                          cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((tmp_path / "d.json").read_text())
    assert summary["benchmark_programs"] == 1 and summary["checked"] == 2 and summary["kept"] == 1
    assert [d["id"] for d in summary["dropped_rows"]] == ["near"]
    assert summary["dropped_rows"][0]["closest"] == "level2/1_Conv2d_GELU_GroupNorm.py"
    (kept,) = load_tasks(data)
    assert kept["id"] == "far" and kept["decontam_similarity"] < 0.9 and kept["decontam_closest"]
    missing = subprocess.run([sys.executable, "-m", "data_gen.decontaminate", str(data), "--benchmark-dir",
                              str(tmp_path / "nowhere")], cwd=root, capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "benchmark directory not found" in missing.stderr
