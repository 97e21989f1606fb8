"""Parquet round trip, dedupe, and reading the released CUDA-Agent-Ops-6K schema."""
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_gen.dataset import dedupe, load_tasks, write_dataset

CODE = '"""A task."""\nimport torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return x.relu()\n'


def row(code=CODE, **extra):
    return {"code": code, "ops": ["ReLU"], "data_source": "torch#1", "id": "offline-0-000001", "composer": "offline",
            "seed": 0, "index": 1, "eager_ms": 2.5, "compile_ms": 1.5, "device": "NVIDIA H200",
            "verdicts": {"eager": {"passed": True, "reason": ""}}, **extra}


def test_round_trip_keeps_columns_and_provenance(tmp_path):
    path = write_dataset([row()], tmp_path / "tasks.parquet")
    (back,) = load_tasks(path)
    assert back["code"] == CODE and back["ops"] == ["ReLU"] and back["data_source"] == "torch#1"
    assert back["composer"] == "offline" and back["eager_ms"] == 2.5 and back["device"] == "NVIDIA H200"
    assert back["verdicts"] == {"eager": {"passed": True, "reason": ""}}
    assert pq.read_schema(path).field("ops").type == pa.list_(pa.string())


def test_dedupe_ignores_docstrings_and_formatting():
    variant = CODE.replace('"""A task."""', '"""Same task, other words."""').replace("x.relu()", "x.relu( )")
    other = CODE.replace("relu", "tanh")
    rows, dropped = dedupe([row(), row(code=variant), row(code=other)])
    assert dropped == 1 and [r["code"] for r in rows] == [CODE, other]
    assert all(len(r["code_sha256"]) == 64 for r in rows)


def test_reads_the_released_schema_from_a_directory(tmp_path):
    (tmp_path / "data").mkdir()
    table = pa.table({"code": [CODE, CODE], "ops": [["Conv2d", "ReLU"], ["GELU"]],
                      "data_source": ["torch#2", "torch#1"]})
    pq.write_table(table, tmp_path / "data" / "train-00000-of-00001.parquet")
    rows = load_tasks(tmp_path)
    assert [r["ops"] for r in rows] == [["Conv2d", "ReLU"], ["GELU"]]
    # some exports store the list as text
    pq.write_table(pa.table({"code": [CODE], "ops": ["['Linear', 'ReLU']"], "data_source": ["torch#2"]}),
                   tmp_path / "text_ops.parquet")
    assert load_tasks(tmp_path / "text_ops.parquet")[0]["ops"] == ["Linear", "ReLU"]


def test_missing_columns_and_paths_are_clear_errors(tmp_path):
    pq.write_table(pa.table({"code": [CODE]}), tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="lacks column"):
        load_tasks(tmp_path / "bad.parquet")
    with pytest.raises(FileNotFoundError):
        load_tasks(tmp_path / "missing.parquet")


def test_the_dedupe_hash_is_the_same_on_every_python_version():
    """Computed on Python 3.11, 3.12 and 3.13 alike (ast.dump's output differs between them, so
    a hash of the dump would make the same program two rows on different machines)."""
    from data_gen.dataset import normalized_hash

    assert normalized_hash("class Model:\n    '''doc'''\n    x = 1  # c\n") == (
        "fe0e46919ad44153f939d9c70add45a93aa3492677f9520e1eef05daff9a5533")
