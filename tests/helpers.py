"""Test data with edge values, and comparisons with stated tolerances.

Tolerances (README, "Accuracy"):
- elementwise outputs: at most `ulps` units in the last place of the output dtype from the
  float64 oracle rounded to that dtype (ReLU, a pure selection: 0; everything else: 1);
- sums: |got - exact| <= 1 ulp of the output dtype (the final double -> f32 -> dtype rounding)
  + 2 * n * 2^-53 * sum(|terms|) (n - 1 double additions in the kernel, as many in the oracle).
"""

from __future__ import annotations

import os
import secrets

import ml_dtypes
import numpy as np

import opgen
from opgen.runtime import numpy_dtype

SEED = int(os.environ.get("OPGEN_TEST_SEED", secrets.randbelow(2**31)))
TABLE = opgen.bundled.table


def rng(*salt: object) -> np.random.Generator:
    """A generator for one test, reproducible from OPGEN_TEST_SEED (printed on failure)."""
    text = "/".join(str(s) for s in salt)
    return np.random.default_rng([SEED, int.from_bytes(text.encode()[:32].ljust(32, b"\0"), "little") % 2**63])


def dtype_of(name: str) -> np.dtype:
    return numpy_dtype(TABLE.dtypes[name].numpy)


def finfo(name: str):
    dtype = dtype_of(name)
    return ml_dtypes.finfo(dtype) if dtype == np.dtype(ml_dtypes.bfloat16) else np.finfo(dtype)


def special_values(name: str, nonfinite: bool) -> np.ndarray:
    """Zeros, subnormals, small integers (interval edges of HardSigmoid with alpha 1/4 or 1/6), tiny normals."""
    info = finfo(name)
    tiny, sub = float(info.tiny), float(info.smallest_subnormal)
    values = [0.0, -0.0, sub, -sub, 3 * sub, -5 * sub, tiny, -tiny, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0]
    if nonfinite:
        values += [np.nan, np.inf, -np.inf, float(info.max), -float(info.max)]
    return np.array(values)


def data(
    generator: np.random.Generator, shape: tuple[int, ...], name: str, *, specials: str = "finite", scale: float = 1.0
) -> np.ndarray:
    """Normal random values in dtype `name`; specials 'none', 'finite' or 'all' sets a quarter to edge values."""
    values = np.asarray(generator.standard_normal(shape) * scale)
    if specials != "none" and values.size:
        pool = special_values(name, nonfinite=specials == "all")
        mask = generator.random(shape) < 0.25
        values[mask] = generator.choice(pool, size=int(mask.sum()))
    with np.errstate(over="ignore"):
        return values.astype(dtype_of(name))


def _ordered(array: np.ndarray, name: str) -> np.ndarray:
    """Integers in the order of the floats of dtype `name`: adjacent values differ by 1 (+0 == -0)."""
    bits = np.ascontiguousarray(array.astype(dtype_of(name)))
    width = bits.dtype.itemsize * 8
    raw = bits.view(np.uint16 if width == 16 else np.uint32).astype(np.int64)
    sign = 1 << (width - 1)
    return np.where(raw & sign, -(raw & (sign - 1)), raw)


def describe(context: str) -> str:
    return f"{context} [OPGEN_TEST_SEED={SEED}]"


def assert_ulps(got: np.ndarray, expected64: np.ndarray, name: str, ulps: int, context: str) -> None:
    """got (dtype `name`) within `ulps` of the float64 oracle rounded to that dtype; NaN where it is NaN."""
    assert got.shape == expected64.shape, describe(f"{context}: shape {got.shape} != {expected64.shape}")
    assert got.dtype == dtype_of(name), describe(f"{context}: dtype {got.dtype}, expected {name}")
    got64 = got.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = expected64.astype(dtype_of(name))
    nan_got, nan_expected = np.isnan(got64), np.isnan(expected64)
    bad = nan_got != nan_expected
    both = ~nan_got & ~nan_expected
    distance = np.abs(_ordered(got, name) - _ordered(rounded, name))
    bad |= both & (distance > ulps)
    _report(
        bad,
        got64,
        expected64,
        context,
        f"off by more than {ulps} ulp",
        lambda where: f"rounded {float(rounded[where])!r}",
    )


def _report(bad: np.ndarray, got64: np.ndarray, expected64: np.ndarray, context: str, what: str, detail) -> None:
    """Fail naming how many elements are `bad` and the first of them."""
    if not bad.any():
        return
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    raise AssertionError(
        describe(
            f"{context}: {int(bad.sum())} of {bad.size} elements {what}; first at {where}: "
            f"got {got64[where]!r}, expected {expected64[where]!r}, {detail(where)}"
        )
    )


def ulp(values: np.ndarray, name: str) -> np.ndarray:
    """The spacing of dtype `name` at |values| (the subnormal spacing below the normal range)."""
    row = TABLE.dtypes[name]
    magnitude = np.abs(values)
    with np.errstate(divide="ignore"):
        exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
    exponent = np.maximum(np.where(magnitude > 0, exponent, row.min_exponent), row.min_exponent)
    return np.exp2(exponent - row.mantissa_bits)


def assert_within(got: np.ndarray, expected64: np.ndarray, name: str, bound: np.ndarray, context: str) -> None:
    """|got - exact| <= 1 ulp of dtype `name` + bound, elementwise; non-finite values must agree."""
    assert got.shape == expected64.shape, describe(f"{context}: shape {got.shape} != {expected64.shape}")
    assert got.dtype == dtype_of(name), describe(f"{context}: dtype {got.dtype}, expected {name}")
    got64 = got.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = expected64.astype(dtype_of(name)).astype(np.float64)
        finite = np.isfinite(rounded) & np.isfinite(got64)
        bad = np.isnan(got64) != np.isnan(rounded)
        bad |= np.isinf(got64) & (got64 != rounded) & (np.abs(_ordered(got, name) - _ordered(rounded, name)) > 1)
        bad |= np.isinf(rounded) & ~np.isinf(got64) & (np.abs(_ordered(got, name) - _ordered(rounded, name)) > 1)
        error = np.abs(got64 - expected64)
        allowed = ulp(expected64, name) + bound
        bad |= finite & ~(error <= allowed)
    _report(
        bad,
        got64,
        expected64,
        context,
        "outside the bound",
        lambda where: f"allowed error {float(np.broadcast_to(allowed, expected64.shape)[where])!r}",
    )


def sum_bound(terms_abs_sum: np.ndarray, count: int) -> np.ndarray:
    """Accumulation error of a double sum of `count` terms, in the kernel and in the oracle."""
    return 2.0 * max(count, 1) * 2.0**-53 * terms_abs_sum
