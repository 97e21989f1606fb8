"""Tests for sandbox.compare.compare_outputs: structure, type, shape, dtype and tolerance checks."""
import pytest
import torch

from sandbox.compare import compare_outputs
from sandbox.config import SandboxConfig

KB = SandboxConfig(backend="cpu").tolerance_for                    # fp32 1e-4, fp16/bf16 1e-2
PAPER = SandboxConfig(backend="cpu", tolerance="paper").tolerance_for  # 1e-2 everywhere

NAN, INF = float("nan"), float("inf")


def t(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


# --- tensors: values and tolerances ------------------------------------------------------------

def test_identical_tensors_pass_with_zero_diff():
    c = compare_outputs(t([1.0, -2.0, 3.5]), t([1.0, -2.0, 3.5]), KB)
    assert c.ok and c.reason == "" and c.max_abs_diff == 0.0


def test_fp32_diff_5e_4_fails_under_kernelbench():
    # bound = atol + rtol * |ref| = 1e-4 + 1e-4 * 1 = 2e-4 < 5e-4
    c = compare_outputs(t([1.0]), t([1.0005]), KB)
    assert not c.ok
    assert "1/1 values outside atol=rtol=0.0001" in c.reason
    assert c.max_abs_diff == pytest.approx(5e-4, abs=1e-7)


def test_fp64_uses_kernelbench_1e_4_too():
    c = compare_outputs(t([1.0], torch.float64), t([1.0005], torch.float64), KB)
    assert not c.ok and c.max_abs_diff == pytest.approx(5e-4)


def test_fp32_diff_5e_4_passes_under_paper():
    # bound = 1e-2 + 1e-2 * 1 = 2e-2
    assert compare_outputs(t([1.0]), t([1.0005]), PAPER).ok


def test_fp32_diff_within_kernelbench_bound_passes():
    # 1.5e-4 < 2e-4
    assert compare_outputs(t([1.0], torch.float64), t([1.00015], torch.float64), KB).ok


def test_rtol_scales_with_reference_magnitude():
    # ref 1000: bound = 1e-4 + 0.1 = 0.1001; diff 0.0625 passes, diff 0.125 fails.
    assert compare_outputs(t([1000.0]), t([1000.0625]), KB).ok
    assert not compare_outputs(t([1000.0]), t([1000.125]), KB).ok


def test_fp16_within_1e_2_passes():
    # 1.0078125 is representable in fp16; diff 0.0078125 < bound 0.02
    c = compare_outputs(t([1.0], torch.float16), t([1.0078125], torch.float16), KB)
    assert c.ok and c.max_abs_diff == 0.0078125


def test_fp16_outside_bound_fails():
    # diff 0.03125 > bound 0.02
    assert not compare_outputs(t([1.0], torch.float16), t([1.03125], torch.float16), KB).ok


def test_bf16_within_1e_2_passes():
    assert compare_outputs(t([1.0], torch.bfloat16), t([1.0078125], torch.bfloat16), KB).ok


def test_max_abs_diff_is_largest_elementwise_difference():
    # ref 1024, 2048 -> bounds 0.1025, 0.2049; diffs 0.0625, 0.125 (exact in fp32).
    c = compare_outputs(t([1024.0, 2048.0]), t([1024.0625, 2047.875]), KB)
    assert c.ok and c.max_abs_diff == 0.125


def test_max_abs_diff_reported_on_failure():
    c = compare_outputs(t([0.0, 1.0, 2.0]), t([0.5, 1.0, 2.25]), PAPER)
    assert not c.ok
    assert c.max_abs_diff == 0.5
    assert "2/3 values outside" in c.reason


def test_max_abs_diff_is_worst_over_nested_parts():
    ref = (t([1024.0]), [t([2048.0])])
    out = (t([1024.0625]), [t([2047.875])])
    c = compare_outputs(ref, out, KB)
    assert c.ok and c.max_abs_diff == 0.125


# --- non-finite values -------------------------------------------------------------------------

def test_nan_in_output_where_reference_finite_fails():
    c = compare_outputs(t([1.0, 2.0]), t([1.0, NAN]), PAPER)
    assert not c.ok and "NaN/Inf" in c.reason


def test_finite_output_where_reference_is_nan_fails():
    assert not compare_outputs(t([1.0, NAN]), t([1.0, 2.0]), PAPER).ok


def test_nan_in_same_place_passes():
    c = compare_outputs(t([NAN, 2.0]), t([NAN, 2.0]), KB)
    assert c.ok and c.max_abs_diff == 0.0


def test_plus_inf_vs_minus_inf_fails():
    assert not compare_outputs(t([INF, 1.0]), t([-INF, 1.0]), PAPER).ok


def test_same_infinities_pass():
    assert compare_outputs(t([INF, -INF, 1.0]), t([INF, -INF, 1.0]), KB).ok


def test_nan_vs_inf_fails():
    assert not compare_outputs(t([NAN]), t([INF]), PAPER).ok


# --- integer / bool tensors --------------------------------------------------------------------

def test_integer_tensors_equal_pass():
    assert compare_outputs(t([1, 2, 3], torch.int64), t([1, 2, 3], torch.int64), PAPER).ok


def test_integer_tensors_off_by_one_fail_even_under_paper():
    c = compare_outputs(t([100, 200], torch.int64), t([100, 201], torch.int64), PAPER)
    assert not c.ok and "integer/bool values differ" in c.reason


def test_bool_tensors_must_match_exactly():
    assert not compare_outputs(t([True, False], torch.bool), t([True, True], torch.bool), PAPER).ok


# --- type, shape, dtype ------------------------------------------------------------------------

def test_shape_mismatch_fails():
    c = compare_outputs(torch.zeros(2, 3), torch.zeros(3, 2), PAPER)
    assert not c.ok and "shape (3, 2) != reference (2, 3)" in c.reason


def test_broadcastable_shape_still_fails():
    assert not compare_outputs(torch.zeros(2, 3), torch.zeros(1, 3), PAPER).ok


def test_dtype_mismatch_fails_even_with_equal_values():
    c = compare_outputs(t([1.0]), t([1.0], torch.float64), PAPER)
    assert not c.ok and "dtype" in c.reason


def test_non_tensor_output_for_tensor_reference_fails():
    c = compare_outputs(t([1.0]), [1.0], PAPER)
    assert not c.ok and "expected a tensor" in c.reason


def test_tensor_output_for_float_reference_fails():
    assert not compare_outputs(1.0, torch.tensor(1.0, dtype=torch.float64), PAPER).ok


def test_parameter_subclass_output_fails():
    out = torch.nn.Parameter(t([1.0, 2.0]))
    c = compare_outputs(t([1.0, 2.0]), out, PAPER)
    assert not c.ok and "expected a tensor" in c.reason and "Parameter" in c.reason


# --- containers --------------------------------------------------------------------------------

def test_tuple_length_mismatch_fails():
    c = compare_outputs((t([1.0]), t([2.0])), (t([1.0]),), PAPER)
    assert not c.ok and "expected tuple of 2" in c.reason


def test_list_vs_tuple_fails():
    c = compare_outputs((t([1.0]),), [t([1.0])], PAPER)
    assert not c.ok and "expected tuple" in c.reason


def test_dict_key_mismatch_fails():
    c = compare_outputs({"a": t([1.0]), "b": t([2.0])}, {"a": t([1.0]), "c": t([2.0])}, PAPER)
    assert not c.ok and "['a', 'b']" in c.reason


def test_dict_vs_non_dict_fails():
    assert not compare_outputs({"a": t([1.0])}, [t([1.0])], PAPER).ok


def test_matching_dict_passes():
    assert compare_outputs({"x": t([1.0]), "y": 3}, {"y": 3, "x": t([1.0])}, KB).ok


def test_nested_failure_reason_names_path():
    ref = (t([1.0]), t([2.0]))
    out = (t([1.0]), t([9.0]))
    c = compare_outputs(ref, out, PAPER)
    assert not c.ok and c.reason.startswith("output[1]:")


def test_deeply_nested_failure_reason_names_full_path():
    ref = [t([0.0]), {"k": (t([1.0]), t([2.0], torch.float64))}]
    out = [t([0.0]), {"k": (t([1.0]), t([2.0]))}]
    c = compare_outputs(ref, out, PAPER)
    assert not c.ok and c.reason.startswith("output[1]['k'][1]: dtype")


def test_first_failure_is_reported():
    c = compare_outputs((t([1.0]), t([1.0])), (torch.zeros(2), t([5.0])), PAPER)
    assert c.reason.startswith("output[0]: shape")


# --- python scalars ----------------------------------------------------------------------------

def test_python_float_within_tolerance_passes():
    # float64 under kernelbench: bound 1e-4 + 1e-4 * 1 = 2e-4 > 1e-4
    assert compare_outputs(1.0, 1.0001, KB).ok


def test_python_float_outside_tolerance_fails():
    c = compare_outputs(1.0, 1.001, KB)
    assert not c.ok and c.max_abs_diff == pytest.approx(1e-3)


def test_python_float_reference_accepts_int_output():
    assert compare_outputs(2.0, 2, KB).ok


def test_python_float_reference_rejects_bool_output():
    assert not compare_outputs(1.0, True, PAPER).ok


def test_python_float_nan_matches_nan():
    assert compare_outputs(NAN, NAN, KB).ok


def test_python_int_must_be_equal():
    assert compare_outputs(3, 3, PAPER).ok
    assert not compare_outputs(3, 4, PAPER).ok


def test_python_int_reference_rejects_float_output():
    assert not compare_outputs(3, 3.0, PAPER).ok


def test_none_matches_none_only():
    assert compare_outputs(None, None, PAPER).ok
    assert not compare_outputs(None, 0, PAPER).ok


# --- known bug: complex tensors ----------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:Casting complex values to real")
def test_complex_imaginary_difference_fails():
    ref = t([1 + 1j], torch.complex64)
    out = t([1 + 5j], torch.complex64)
    assert not compare_outputs(ref, out, PAPER).ok


# --- reading the output through a hook (the device channel's private chunk copies) -------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.complex64])
def test_every_chunk_of_the_output_is_read_once_and_judged_as_read(monkeypatch, dtype):
    # The device channel compares the run worker's memory chunk by chunk, each through a private
    # copy it checked (Handed.read): what the comparison judges must be what read returned.
    import sandbox.compare as compare

    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", 4)
    ref = torch.arange(10).to(dtype)
    garbage = torch.full_like(ref, 7)
    flat_ref, base = torch.cat(compare.chunks(ref)), compare.chunks(garbage)[0].data_ptr()
    seen = []

    def read(chunk):  # the right values in place of the garbage the memory holds
        seen.append((chunk.data_ptr(), chunk.numel()))
        start = (chunk.data_ptr() - base) // chunk.element_size()
        return flat_ref[start:start + chunk.numel()].clone()

    assert compare_outputs(ref, garbage, KB, read=read).ok
    pieces = compare.chunks(garbage)
    assert len(pieces) == (5 if dtype.is_complex else 3)  # complex: as 20 real parts
    assert sorted(seen) == sorted((p.data_ptr(), p.numel()) for p in pieces)
    assert not compare_outputs(ref, garbage, KB).ok  # without the hook: the memory as it is
