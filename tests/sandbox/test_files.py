"""sandbox.files: cache files appear whole or not at all."""
from __future__ import annotations

import pytest

from sandbox.files import replaced_atomically


def test_a_clean_exit_replaces_the_target_and_leaves_no_private_file(tmp_path):
    target = tmp_path / "sub" / "module.so"
    with replaced_atomically(target, ".so") as tmp:
        assert tmp.parent == target.parent and tmp != target and not target.exists()
        tmp.write_text("new")
    assert target.read_text() == "new" and [p.name for p in target.parent.iterdir()] == ["module.so"]


def test_a_failed_write_leaves_the_old_target_and_no_private_file(tmp_path):
    target = tmp_path / "object.o"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="compiler died"):
        with replaced_atomically(target, ".o") as tmp:
            tmp.write_text("half")
            raise RuntimeError("compiler died")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["object.o"]
