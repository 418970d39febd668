"""f16 and bf16 conversions in the generated C: exhaustive over every 16-bit pattern."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import opgen

TYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}


def all_values(name):
    return np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(TYPES[name])


@pytest.mark.parametrize("name", TYPES)
def test_every_value_round_trips(name):
    """16-bit -> f32 -> 16-bit is the identity; NaNs stay NaN (made quiet)."""
    values = all_values(name)
    got = opgen.relu_backward(np.ones_like(values), values)  # src > 0: diff_src = diff_dst
    bits, expected = got.view(np.uint16), values.view(np.uint16)
    nan = np.isnan(values.astype(np.float32))
    assert np.array_equal(bits[~nan], expected[~nan])
    assert np.isnan(got[nan].astype(np.float32)).all()
    quiet_bit = 0x0200 if name == "f16" else 0x0040
    assert (bits[nan] & quiet_bit).all(), "NaNs come back quiet"


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("slope", [0.75, -1.5, 2.0**-13, 3.0, 1.0 + 2.0**-7, 7.0e-3, 6.0e4])
def test_products_round_to_nearest_even(name, slope):
    """slope * diff_dst of two 16-bit values is exact in f32, so one rounding to 16 bits must be
    the correctly rounded product: ties, subnormals, underflow to zero and overflow to Inf."""
    values = all_values(name)
    finite = values[np.isfinite(values.astype(np.float32))]
    weight = np.array([slope], dtype=TYPES[name])
    got = opgen.prelu_backward(-np.ones_like(finite), weight, finite).diff_src  # src <= 0: slope * diff_dst
    exact = finite.astype(np.float64) * float(weight[0])
    with np.errstate(over="ignore"):
        expected = exact.astype(TYPES[name])
    same = (got.view(np.uint16) == expected.view(np.uint16)) | ((got == 0) & (expected == 0))
    assert same.all(), (
        f"first mismatch: {finite[~same][0]!r} * {weight[0]!r} -> {got[~same][0]!r}, expected {expected[~same][0]!r}"
    )


@pytest.mark.parametrize("name", TYPES)
def test_hard_sigmoid_edges_give_zero(name):
    """The interval 0 < alpha*src + beta < 1 is open: the exact edges give 0 in every dtype."""
    dtype = TYPES[name]
    for alpha, beta, edges, inside in [(0.25, 0.5, [-2.0, 2.0], [-1.5, 1.5]), (1 / 6, 0.5, [-3.0, 3.0], [-2.5, 2.5])]:
        src = np.array(edges + inside, dtype)
        diff_dst = np.ones(4, dtype)
        got = opgen.hard_sigmoid_backward(src, diff_dst, alpha=alpha, beta=beta).astype(np.float64)
        assert got[0] == 0 and got[1] == 0, (alpha, edges)
        expected = np.array([np.float32(alpha)] * 2).astype(dtype).astype(np.float64)
        assert np.array_equal(got[2:], expected)
