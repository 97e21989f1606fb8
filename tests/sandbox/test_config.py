"""Tests for sandbox.config.SandboxConfig and sandbox.build.summarize_compiler_output."""

import pytest

from sandbox.build import summarize_compiler_output
from sandbox.config import SandboxConfig, TimingConfig


# --- validation --------------------------------------------------------------------------------

def test_unknown_backend_raises():
    with pytest.raises(ValueError, match="tpu"):
        SandboxConfig(backend="tpu")


def test_unknown_tolerance_raises():
    with pytest.raises(ValueError, match="strict"):
        SandboxConfig(backend="cpu", tolerance="strict")


def test_zero_trials_raises():
    with pytest.raises(ValueError, match="num_correct_trials"):
        SandboxConfig(backend="cpu", num_correct_trials=0)


def test_zero_timing_repeats_raises():
    with pytest.raises(ValueError, match="repeats"):
        SandboxConfig(backend="cpu", timing=TimingConfig(repeats=0))


def test_tolerance_for_presets():
    kb = SandboxConfig(backend="cpu")
    paper = SandboxConfig(backend="cpu", tolerance="paper")
    assert (kb.tolerance_for("float32"), kb.tolerance_for("float16"), kb.tolerance_for("bfloat16")) == (1e-4, 1e-2, 1e-2)
    assert paper.tolerance_for("float32") == 1e-2
    assert kb.tolerance_for("int64") == 0.0


# --- from_dict ---------------------------------------------------------------------------------

def test_from_dict_builds_nested_timing_config():
    cfg = SandboxConfig.from_dict({"backend": "cpu", "timing": {"warmup": 2, "repeats": 7}})
    assert isinstance(cfg.timing, TimingConfig)
    assert (cfg.timing.warmup, cfg.timing.repeats) == (2, 7)
    assert cfg.timing.flush_l2 is True  # untouched default


def test_from_dict_unknown_key_raises():
    with pytest.raises(ValueError, match="bogus"):
        SandboxConfig.from_dict({"backend": "cpu", "bogus": 1})


def test_from_dict_unknown_timing_key_raises():
    with pytest.raises(ValueError, match="sandbox.timing"):
        SandboxConfig.from_dict({"backend": "cpu", "timing": {"repeat": 3}})


def test_from_dict_turns_flag_lists_into_tuples():
    cfg = SandboxConfig.from_dict({"backend": "cpu", "nvcc_flags": ["-O2"], "cxx_flags": ["-O1", "-g"]})
    assert cfg.nvcc_flags == ("-O2",)
    assert cfg.cxx_flags == ("-O1", "-g")


def test_from_dict_to_dict_round_trip():
    cfg = SandboxConfig(backend="cpu", tolerance="paper", timing=TimingConfig(repeats=3))
    assert SandboxConfig.from_dict(cfg.to_dict()) == cfg


def test_from_dict_still_validates():
    with pytest.raises(ValueError):
        SandboxConfig.from_dict({"backend": "tpu"})


# --- cache_root --------------------------------------------------------------------------------

def test_cache_root_uses_cache_dir_over_env(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_AGENT_CACHE", str(tmp_path / "from_env"))
    cfg = SandboxConfig(backend="cpu", cache_dir=str(tmp_path / "explicit"))
    assert cfg.cache_root == (tmp_path / "explicit").resolve()


def test_cache_root_uses_env_var_when_no_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_AGENT_CACHE", str(tmp_path / "from_env"))
    assert SandboxConfig(backend="cpu").cache_root == (tmp_path / "from_env").resolve()


def test_cache_root_relative_cache_dir_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = SandboxConfig(backend="cpu", cache_dir="rel/cache").cache_root
    assert root.is_absolute()
    assert root == tmp_path.resolve() / "rel" / "cache"


def test_cache_root_relative_env_var_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_AGENT_CACHE", "envcache")
    root = SandboxConfig(backend="cpu").cache_root
    assert root.is_absolute() and root == tmp_path.resolve() / "envcache"


def test_cache_root_default_is_under_home(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_AGENT_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    root = SandboxConfig(backend="cpu").cache_root
    assert root == tmp_path.resolve() / ".cache" / "cuda-agent"


def test_cache_root_expands_tilde_in_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert SandboxConfig(backend="cpu", cache_dir="~/c").cache_root == tmp_path.resolve() / "c"


# --- summarize_compiler_output -----------------------------------------------------------------

GCC_LOG = """c++ -O3 -fopenmp -I/very/long/include/path -c add.cpp -o add.o
In file included from add.cpp:1:
add.cpp:7:12: error: expected ';' before '}' token
compilation terminated.
"""

NVCC_LOG = """nvcc -O3 --use_fast_math -gencode=arch=compute_90,code=sm_90 -c x.cu -o x.o
x.cu(3): error: identifier "blockIdy" is undefined
1 error detected in the compilation of "x.cu".
"""


def test_summary_puts_gcc_error_line_first():
    summary = summarize_compiler_output(GCC_LOG)
    assert summary.splitlines()[0] == "add.cpp:7:12: error: expected ';' before '}' token"


def test_summary_puts_nvcc_error_line_first():
    summary = summarize_compiler_output(NVCC_LOG)
    assert summary.splitlines()[0] == 'x.cu(3): error: identifier "blockIdy" is undefined'


def test_summary_keeps_full_output_after_marker():
    summary = summarize_compiler_output(GCC_LOG)
    head, tail = summary.split("\n\n--- full compiler output (tail) ---\n")
    assert head == "add.cpp:7:12: error: expected ';' before '}' token"
    assert tail == GCC_LOG


def test_summary_lists_linker_errors():
    log = "g++ -shared a.o -o m.so\na.o: in function `f':\na.cpp:(.text+0x5): undefined reference to `g'\n"
    assert summarize_compiler_output(log).splitlines()[0] == "a.cpp:(.text+0x5): undefined reference to `g'"


def test_summary_without_diagnostics_starts_with_first_line():
    assert summarize_compiler_output("ld returned 1\nmore\n").splitlines()[0] == "ld returned 1"


def test_summary_of_empty_output():
    assert summarize_compiler_output("").startswith("build failed\n\n")
