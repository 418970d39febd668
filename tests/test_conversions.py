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
@pytest.mark.parametrize("slope", [1.0, 0.75, 2.0**-13, 1.0 + 2.0**-7, 6.0e4])
def test_one_element_at_a_time(name, slope):
    """The conversions of single elements (an NXC tensor of 15 channels, fewer than a block:
    every element goes one by one, through F16C's scalar instructions where the CPU has them)
    give the bits of the block ones: slope * diff_dst (exact in f32) rounded once, NaNs quiet."""
    values = all_values(name)
    channels = 15
    padded = np.concatenate([values, np.zeros(-values.size % channels, values.dtype)]).reshape(-1, channels)
    slope_array = np.full(channels, slope, TYPES[name])
    got = opgen.prelu_backward(-np.ones_like(padded), slope_array, padded, data_format="NXC").diff_src
    got = got.reshape(-1)[: values.size]
    with np.errstate(over="ignore", invalid="ignore"):  # NaN and overflow on purpose
        wide = values.astype(np.float64)
        expected = (wide * float(slope_array[0])).astype(TYPES[name])
    nan = np.isnan(wide)
    same = (got.view(np.uint16) == expected.view(np.uint16)) | ((got == 0) & (expected == 0))
    wrong = ~nan & ~same
    assert not wrong.any(), f"first mismatch: {values[wrong][0]!r} * {slope_array[0]!r} -> {got[wrong][0]!r}"
    quiet_bit = 0x0200 if name == "f16" else 0x0040
    assert np.isnan(got[nan].astype(np.float32)).all() and (got[nan].view(np.uint16) & quiet_bit).all()


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


def narrow_sums(name: str, sums: np.ndarray) -> np.ndarray:
    """opgen_narrow_<name> (the sums of broadcast_reduce to the output dtype) on float64 `sums`."""
    module = opgen.bundled.module
    dtype = np.float32 if name == "f32" else TYPES[name]
    out = np.zeros(sums.size, dtype)
    c_type = "float" if name == "f32" else f"opgen_{name}"
    getattr(module.lib, f"opgen_narrow_{name}")(
        module.ffi.from_buffer("double[]", sums), module.ffi.from_buffer(f"{c_type}[]", out), sums.size
    )
    return out


def edge_sums(name: str) -> np.ndarray:
    """Doubles around every rounding the narrowing makes: f32 and `name` ties (and one f64 ulp
    either side), subnormals of both, overflow, zeros of both signs, infinities and NaN."""
    dtype = np.float32 if name == "f32" else TYPES[name]
    info = ml_dtypes.finfo(dtype)
    bits = int(info.nmant)
    ones = [1.0, 1.0 + 2.0**-bits, 1.5]
    ties = [v * (1 + 2.0 ** -(bits + 1)) for v in ones] + [v * (1 + 2.0**-24) for v in ones]
    scales = [1.0, 2.0**-20, 2.0**-126, 2.0**-140, float(info.tiny), float(info.smallest_subnormal), 2.0**100]
    base = np.array([t * s for t in ties + ones for s in scales])
    nudged = np.concatenate([base, np.nextafter(base, np.inf), np.nextafter(base, -np.inf)])
    largest = float(info.max)
    edges = [0.0, largest, largest * (1 + 2.0 ** -(bits + 1)), 3.4028235e38, 3.5e38, 1e300, np.inf, np.nan]
    values = np.concatenate([nudged, edges])
    return np.concatenate([values, -values])


@pytest.mark.parametrize("name", ["f32", *TYPES])
@pytest.mark.parametrize("count", [0, 1, 15, 16, 17, 33, 1000, 70001])
def test_sums_narrow_as_stated(name, count):
    """Sums round to f32, then to the dtype (round to nearest even, subnormals kept, NaN made
    quiet), in the vector blocks, the tail and the threaded path alike."""
    generator = np.random.default_rng(count)
    edges = edge_sums(name)
    sums = np.concatenate([edges, generator.standard_normal(count) * 2.0 ** generator.integers(-150, 130, count)])
    sums = generator.permutation(sums)[:count].copy() if count < sums.size else sums[:count].copy()
    got = narrow_sums(name, sums)
    dtype = np.float32 if name == "f32" else TYPES[name]
    with np.errstate(over="ignore"):
        expected = sums.astype(np.float32).astype(dtype)
    nan = np.isnan(expected.astype(np.float32))
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
    width = np.uint32 if name == "f32" else np.uint16
    assert np.array_equal(got.view(width)[~nan], expected.view(width)[~nan]), (
        f"first mismatch: {sums[~nan][got.view(width)[~nan] != expected.view(width)[~nan]][:3]}"
    )
