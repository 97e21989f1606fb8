"""scripts/fetch_kernelbench.py: the normalisation of fork files and the checks of a tree against
its manifest (on a tiny tree; on the real .kb/ tree too when it is present)."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KB = REPO / ".kb"
PROBLEM = ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
           "        return x\n\ndef get_inputs():\n    return [torch.rand(4)]\n\ndef get_init_inputs():\n    return []\n")


@pytest.fixture(scope="module")
def fetch():
    spec = importlib.util.spec_from_file_location("fetch_kernelbench", REPO / "scripts" / "fetch_kernelbench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def entry(fetch, text: str) -> dict:
    return {"chars": len(text), "sha256": fetch.sha256(text)}


@pytest.fixture
def tiny(fetch, tmp_path):
    """level1 with problems 1 and 2, a baselines file, and the manifest that records them."""
    files = {"level1/1_A.py": PROBLEM, "level1/2_B.py": PROBLEM.replace("return x", "return x * 2")}
    baselines = {"timing/H100/baseline_time_torch.json": json.dumps({"level1": {"1_A.py": {"mean": 1.5}}})}
    for rel, text in {**files, **baselines}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    manifest = {"files": {rel: entry(fetch, t) for rel, t in files.items()},
                "baselines": {rel: entry(fetch, t) for rel, t in baselines.items()}}
    return tmp_path, manifest


def test_a_tree_as_recorded_verifies(fetch, tiny):
    root, manifest = tiny
    assert fetch.verify(root, manifest, {1: 2}) == []


def test_every_departure_is_named(fetch, tiny):
    root, manifest = tiny
    (root / "level1" / "2_B.py").write_text(PROBLEM.replace("def get_inputs", "def make_inputs"))
    (root / "level1" / "4_C.py").write_text(PROBLEM)
    errors = fetch.verify(root, manifest, {1: 2})
    assert any(e.startswith("level1/2_B.py: differs from the manifest") for e in errors)
    assert "level1/2_B.py: defines no get_inputs" in errors
    assert "level1/4_C.py: present but not in the manifest" in errors
    assert any(e.startswith("level1: ids are not 1..2") for e in errors)


def test_baselines_must_name_problems_of_the_tree(fetch, tiny):
    root, manifest = tiny
    text = json.dumps({"level1": {"7_Gone.py": {"mean": 1.0}}})
    rel = "timing/H100/baseline_time_torch.json"
    (root / rel).write_text(text)
    manifest["baselines"][rel] = entry(fetch, text)
    assert fetch.verify(root, manifest, {1: 2}) == [f"{rel}: level1/7_Gone.py is no problem of the tree"]


def test_fork_files_normalise_to_upstream_form(fetch):
    fork = fetch.META_HEADER + "x = x - x.mean(dim=1, keepdim=True)\n"
    assert fetch.normalise_text("level2/80_Gemm_Max_Subtract_GELU.py", fork) == "x = x - x.mean(dim=0, keepdim=True)\n"
    assert fetch.normalise_text("level1/1_A.py", fetch.META_HEADER + PROBLEM) == PROBLEM
    once = fetch.normalise_text("level2/83_Conv3d_GroupNorm_Min_Clamp_Dropout.py", "max_value = 1.0\n")
    assert once == "max_value = 0.5\n"
    assert fetch.normalise_text("level2/83_Conv3d_GroupNorm_Min_Clamp_Dropout.py", once) == once


def test_fix_rewrites_raw_files_then_the_tree_verifies(fetch, tiny):
    root, manifest = tiny
    (root / "level1" / "1_A.py").write_text(fetch.META_HEADER + PROBLEM)
    assert fetch.normalise_tree(root) == ["level1/1_A.py"]
    assert fetch.verify(root, manifest, {1: 2}) == []


def test_missing_manifest_exits_2(fetch, tmp_path):
    assert fetch.main(["--root", str(tmp_path)]) == 2


@pytest.mark.skipif(not (KB / "MANIFEST.json").is_file(), reason=".kb/ (the transcribed KernelBench tree) is absent")
def test_the_local_tree_is_the_recorded_one(fetch):
    assert fetch.main(["--root", str(KB)]) == 0


def test_record_writes_the_manifest_that_the_tree_then_verifies_against(fetch, tiny):
    root, _ = tiny
    (root / "sources").mkdir()
    source = {"repo": "org/KernelBench", "path": "KernelBench/level1/1_A.py", "commit": "c" * 40, "id": "7"}
    (root / "sources" / "part.json").write_text(json.dumps({"level1/1_A.py": source}))
    fetch.main(["--root", str(root), "--record"])  # exits 1 here: the tiny tree is no 100/100/50 one
    manifest = json.loads((root / "MANIFEST.json").read_text())
    assert manifest["files"]["level1/1_A.py"] == {**entry(fetch, PROBLEM), **source}
    assert set(manifest["files"]) == {"level1/1_A.py", "level1/2_B.py"}
    assert fetch.verify(root, manifest, {1: 2}) == []
    (root / "level1" / "2_B.py").write_text(PROBLEM.replace("return x", "return x * 3"))
    assert [e.split(":")[0] for e in fetch.verify(root, manifest, {1: 2})] == ["level1/2_B.py"]


def test_transcription_lists_hold_every_file_once_in_balanced_parts(fetch):
    manifest = {"files": {f"level1/{i}_P.py": {"chars": 100 * i, "sha256": "", "id": str(i)} for i in range(1, 9)},
                "baselines": {"timing/T/baseline_time_torch.json": {"chars": 50, "sha256": "", "id": "99"}}}
    parts = fetch.transcription_lists(manifest, 3)
    lines = [line for part in parts for line in part]
    assert sorted(line.split("\t")[0] for line in lines) == sorted([*manifest["files"], *manifest["baselines"]])
    assert "level1/8_P.py\t8\t800" in lines
    loads = [sum(int(line.split("\t")[2]) for line in part) for part in parts]
    assert max(loads) - min(loads) <= 800  # no part heavier than another by more than one file


def test_checking_some_files_normalises_them_and_names_each(fetch, tiny, tmp_path):
    root, manifest = tiny
    (root / "level1" / "1_A.py").write_text(fetch.META_HEADER + PROBLEM)  # a raw fork file
    (root / "level1" / "2_B.py").write_text(PROBLEM + "# typo\n")
    listed = tmp_path / "part0.txt"
    listed.write_text("level1/1_A.py\t1\t10\nlevel1/2_B.py\t2\t10\n")
    lines = fetch.check_files(root, manifest, [str(listed), "level1/9_Z.py"])
    assert lines[0] == "OK level1/1_A.py" and (root / "level1" / "1_A.py").read_text() == PROBLEM
    assert lines[1].startswith("BAD level1/2_B.py: differs from the manifest")
    assert lines[2] == "BAD level1/9_Z.py: not in the manifest"
