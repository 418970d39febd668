"""The stated tolerances, as code: test data with edge values, ulp distances and error bounds.

The test suite and `opgen check` both judge results with these (docs/numerics.md, "Accuracy"):
- elementwise outputs: at most 1 ulp of the output dtype from the float64 oracle rounded to
  that dtype;
- sums: 1 ulp of the output dtype + 2 n 2^-53 sum|terms| (n - 1 double additions in the
  kernel, as many in the oracle), + r 2^-24 sum|terms| + n 2^-150 where the kernel adds
  float terms in float partial sums of at most r terms first (plan.float_runs: f16 and bf16
  PReLU; a bf16 product below 2^-134 is rounded to f32's subnormal grid, 2^-149);
- BatchNorm: the bounds of batch_norm_bounds, from counting its roundings (its NXC kernels
  add their terms, computed in float, in float runs too).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from opgen import runtime, shapes
from opgen.specs import DType

U32, U64 = 2.0**-24, 2.0**-53
ETA = 2.0**-150  # half the smallest f32 subnormal


def numpy_dtype(row: DType) -> np.dtype:
    return runtime.numpy_dtype(row.numpy)


def finfo(row: DType):
    dtype = numpy_dtype(row)
    return ml_dtypes.finfo(dtype) if dtype == np.dtype(ml_dtypes.bfloat16) else np.finfo(dtype)


def special_values(row: DType, nonfinite: bool) -> np.ndarray:
    """Zeros, subnormals, small integers (interval edges of HardSigmoid with alpha 1/4 or 1/6), tiny normals."""
    info = finfo(row)
    tiny, sub = float(info.tiny), float(info.smallest_subnormal)
    values = [0.0, -0.0, sub, -sub, 3 * sub, -5 * sub, tiny, -tiny, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0]
    if nonfinite:
        values += [np.nan, np.inf, -np.inf, float(info.max), -float(info.max)]
    return np.array(values)


def random_data(
    generator: np.random.Generator, shape: tuple[int, ...], row: DType, specials: str = "finite", scale: float = 1.0
) -> np.ndarray:
    """Normal random values of dtype `row`; specials 'none', 'finite' or 'all' sets a quarter to edge values."""
    values = np.asarray(generator.standard_normal(shape) * scale)
    if specials != "none" and values.size:
        pool = special_values(row, nonfinite=specials == "all")
        mask = generator.random(shape) < 0.25
        values[mask] = generator.choice(pool, size=int(mask.sum()))
    with np.errstate(over="ignore"):
        return values.astype(numpy_dtype(row))


def ordered(array: np.ndarray, row: DType) -> np.ndarray:
    """Integers in the order of the floats of dtype `row`: adjacent values differ by 1 (+0 == -0)."""
    bits = np.ascontiguousarray(array.astype(numpy_dtype(row)))
    width = bits.dtype.itemsize * 8
    raw = bits.view(np.uint16 if width == 16 else np.uint32).astype(np.int64)
    sign = 1 << (width - 1)
    return np.where(raw & sign, -(raw & (sign - 1)), raw)


def ulp(values: np.ndarray, row: DType) -> np.ndarray:
    """The spacing of dtype `row` at |values| (the subnormal spacing below the normal range)."""
    magnitude = np.abs(values)
    with np.errstate(divide="ignore"):
        exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
    exponent = np.maximum(np.where(magnitude > 0, exponent, row.min_exponent), row.min_exponent)
    return np.exp2(exponent - row.mantissa_bits)


def sum_bound(terms_abs_sum: np.ndarray, count: int, float_run: int = 0) -> np.ndarray:
    """Accumulation error of a double sum of `count` terms, in the kernel and in the oracle;
    with `float_run` > 0, the kernel first adds the terms in float, at most that many per
    float partial sum: (float_run - 1) u32 sum|terms| more, rounded up to float_run u32; and a
    term computed in float is exact except below f32's normal range (products of two bf16
    below 2^-134), where rounding to the subnormal grid loses at most 2^-150 per term."""
    rounding = (2.0 * max(count, 1) * U64 + float_run * U32) * terms_abs_sum
    return rounding + (max(count, 1) * 2.0**-150 if float_run else 0.0)


def sum_magnitudes(spec: Any, reference_function: Any, arrays: dict[str, np.ndarray], kwargs: dict[str, Any]) -> tuple:
    """For a broadcast_reduce op whose sum terms are products of its reference and its other
    tensor input: the oracle on -|reference| and -|other|, so every term counts and is positive,
    gives sum|terms| per slot (Inf where Inf * 0 made it NaN: such slots are checked for Inf/NaN)."""
    other = next(t for t in spec.inputs if t.kind == "tensor" and t.name != spec.reference)
    flipped = dict(arrays)
    for name in (spec.reference, other.name):
        flipped[name] = -np.abs(arrays[name].astype(np.float64))
    results = reference_function(*(flipped[t.name] for t in spec.inputs), **kwargs)
    return tuple(np.where(np.isnan(r), np.inf, r) for r in results)


def operand_shapes(form: str, shape: tuple[int, ...], layout: str) -> list[tuple[int, ...]]:
    """Operand shapes of one broadcast form for a reference of `shape` (written from the rules)."""
    rank = len(shape)
    if form == "per_channel":
        axis = shapes.channel_axis(rank, layout)
        return [] if axis is None else [(shape[axis],)]
    if form == "per_tensor":
        return [(1,)]
    if form == "trailing":
        return [shape[1:]]
    if form == "numpy":
        masks = [
            [d == 0 for d in range(rank)],
            [d == rank - 1 for d in range(rank)],
            [d in (0, rank - 1) for d in range(rank)],
            [d % 2 == 1 for d in range(rank)],
            [True] * rank,
        ]
        return list(dict.fromkeys(tuple(s if keep else 1 for s, keep in zip(shape, mask)) for mask in masks))
    if form == "single":
        return [(1,), (), (1, 1, 1)]
    if form == "channel_count":
        channels = shape[1] if rank > 1 else 1
        return [(channels,), (1, channels), (channels, 1, 1)]
    if form == "to_reference":
        return [shape[-2:], shape[-1:]]
    raise AssertionError(form)


def ulps_off(got: np.ndarray, expected64: np.ndarray, row: DType, ulps: int) -> np.ndarray:
    """Where got (dtype `row`) is more than `ulps` from the oracle rounded to that dtype, or NaN disagrees."""
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = expected64.astype(numpy_dtype(row))
    nan_got, nan_expected = np.isnan(got.astype(np.float64)), np.isnan(expected64)
    distance = np.abs(ordered(got, row) - ordered(rounded, row))
    return (nan_got != nan_expected) | (~nan_got & ~nan_expected & (distance > ulps))


def outside(got: np.ndarray, expected64: np.ndarray, row: DType, bound: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where |got - exact| > 1 ulp of dtype `row` + bound (non-finite values must agree); and the allowance."""
    got64 = got.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = expected64.astype(numpy_dtype(row)).astype(np.float64)
        finite = np.isfinite(rounded) & np.isfinite(got64)
        far = np.abs(ordered(got, row) - ordered(rounded, row)) > 1
        allowed = ulp(expected64, row) + bound
        # Where the bound reaches across the dtype's overflow threshold (a sum whose terms of
        # 1e77 cancel, say), a finite result and an infinity can both be right: an infinity
        # where the bound's far end rounds to it, a finite result where it lies within it.
        within = np.isfinite(expected64) & (np.abs(got64 - expected64) <= allowed)
        far_end = (expected64 + np.where(got64 > 0, allowed, -allowed)).astype(numpy_dtype(row)).astype(np.float64)
        reached = np.isinf(got64) & (far_end == got64)
        bad = np.isnan(got64) != np.isnan(rounded)
        bad |= np.isinf(got64) & (got64 != rounded) & far & ~reached
        bad |= np.isinf(rounded) & ~np.isinf(got64) & far & ~within
        bad |= finite & ~(np.abs(got64 - expected64) <= allowed)
    return bad, allowed


def gamma(k: int, unit: float = U32) -> float:
    """The classic bound on k roundings: (1 + d1)...(1 + dk) lies within 1 +- k u / (1 - k u)."""
    return k * unit / (1 - k * unit)


def batch_norm_bounds(src, diff_dst, mean, variance, gamma_, epsilon: float, axis: int, float_run: int = 0):
    """Error bounds of BatchNorm's diff_src, diff_gamma and diff_beta, from the inputs in float64.

    u32 = 2^-24, u64 = 2^-53; M terms per channel; r = float_run (0: every term in double):
    - diff_beta = sum(diff_dst): sum_bound (2 M u64 sum|diff_dst|, plus r u32 sum|diff_dst| and
      M 2^-150 with float runs).
    - sum(diff_dst * (src - mean)) in double: 2 M u64 sum|diff_dst (src - mean)|. With float
      runs each term is computed in float (2 roundings, or 2^-150 absolute below f32's normal
      range) and added to at most r - 1 others in float first: gamma(r + 1) (1 + 2 M u64) +
      2 M u64 times the sum, plus 2 M 2^-150. diff_gamma multiplies it by inv_std in double:
      8 u64 more.
    - diff_src = scale * (diff_dst - shift - (src - mean) * coefficient) in f32, where shift and
      coefficient come from those sums (their errors over M, coefficient's times inv_std^2),
      scale, shift and coefficient are rounded to f32 once (3 roundings) and the expression
      adds 5 (src - mean, *, -, -, *): at most 8 u32 times the magnitude of every term; each f32
      rounding that lands among the subnormals errs by up to 2^-150 absolute instead, times the
      factor its result is multiplied by.
    (1 ulp of the output dtype for the final store is added by `outside`.)"""
    with np.errstate(all="ignore"):  # NaN and Inf in the inputs make NaN and Inf bounds
        return _batch_norm_bounds(src, diff_dst, mean, variance, gamma_, epsilon, axis, float_run)


def _batch_norm_bounds(src, diff_dst, mean, variance, gamma_, epsilon: float, axis: int, float_run: int):
    x, dy = src.astype(np.float64), diff_dst.astype(np.float64)
    view = [1] * x.ndim
    view[axis] = x.shape[axis]
    axes = tuple(d for d in range(x.ndim) if d != axis)
    count = max(1, x.size // max(1, x.shape[axis]))
    centered = x - mean.astype(np.float64).reshape(view)
    inv_std = 1.0 / np.sqrt(variance.astype(np.float64) + float(np.float32(epsilon)))
    g = np.ones_like(inv_std) if gamma_ is None else gamma_.astype(np.float64)
    sum_dy = np.abs(dy).sum(axis=axes)
    sum_centered = np.abs(dy * centered).sum(axis=axes)
    beta_bound = sum_bound(sum_dy, count, float_run)
    double_sums = 2 * count * U64
    if float_run:
        centered_error = (gamma(float_run + 1) * (1 + double_sums) + double_sums) * sum_centered
        centered_error = centered_error + 2 * count * ETA
    else:
        centered_error = double_sums * sum_centered
    gamma_bound = (centered_error + 8 * U64 * sum_centered) * inv_std
    scale = np.abs(g * inv_std).reshape(view)
    shift_error = (beta_bound / count).reshape(view)
    coefficient_error = (inv_std * inv_std * centered_error / count).reshape(view)
    shift = (np.abs(dy.sum(axis=axes)) / count).reshape(view) + shift_error
    coefficient = (inv_std * inv_std * np.abs((dy * centered).sum(axis=axes)) / count).reshape(view)
    coefficient = coefficient + coefficient_error
    terms = np.abs(dy) + shift + np.abs(centered) * coefficient
    underflow = ETA * (terms + 1 + scale * (2 + np.abs(centered)) + 4 * scale)
    sums = scale * (shift_error + np.abs(centered) * coefficient_error)
    src_bound = 8 * U32 * scale * terms + sums + underflow
    return src_bound, gamma_bound, beta_bound
