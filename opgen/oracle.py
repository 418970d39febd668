"""Float64 NumPy references, written from the math of each op and independent of specs and templates.

Each function takes the public API's arguments (arrays of any float dtype, converted exactly to
float64) and returns float64 results in the same order as the op. The only deliberate f32 step is
HardSigmoid's interval test, which the op defines as evaluated in f32.

A spec may name a bound function here as an output's accuracy contract (`accuracy.<output> =
"oracle:<function>"`): called with the op's arguments and `float_run` (plan.float_runs), it
returns per output the error allowed beyond 1 ulp of the output's dtype, from counting the
kernels' roundings (None: 1 ulp).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from opgen import accuracy as _accuracy


def _f64(array: npt.ArrayLike | None) -> npt.NDArray[np.float64]:
    return np.asarray(array).astype(np.float64)


def _channel_axis(rank: int, data_format: str) -> int:
    return 1 if data_format == "NCX" else rank - 1


def relu(src: np.ndarray) -> np.ndarray:
    x = _f64(src)
    return np.where(np.isnan(x), x, np.maximum(x, 0.0))


def sigmoid(src: np.ndarray) -> np.ndarray:
    x = _f64(src)
    with np.errstate(all="ignore"):
        # 1 / (1 + e^-x) = (1 + tanh(x / 2)) / 2, written without the exp that overflows
        return np.where(x >= 0, 0.5 + 0.5 * np.tanh(x / 2.0), np.exp(x) / (1.0 + np.exp(x)))


def tanh(src: np.ndarray) -> np.ndarray:
    return np.tanh(_f64(src))


def hard_sigmoid(src: np.ndarray, *, alpha: float, beta: float) -> np.ndarray:
    x = _f64(src)
    with np.errstate(all="ignore"):
        linear = x * float(np.float32(alpha)) + float(np.float32(beta))
    return np.where(np.isnan(linear), linear, np.clip(linear, 0.0, 1.0))


def relu_backward(src_or_dst: np.ndarray, diff_dst: np.ndarray, *, use_dst: bool = True) -> np.ndarray:
    x, dy = _f64(src_or_dst), _f64(diff_dst)
    return np.where(x > 0, dy, 0.0)


def hard_sigmoid_backward(src: np.ndarray, diff_dst: np.ndarray, *, alpha: float, beta: float) -> np.ndarray:
    x32 = np.asarray(src).astype(np.float32)
    with np.errstate(all="ignore"):
        linear = np.float32(alpha) * x32 + np.float32(beta)  # the op's test is defined in f32
    inside = (linear > 0) & (linear < 1)
    with np.errstate(all="ignore"):
        return np.where(inside, _f64(diff_dst) * float(np.float32(alpha)), 0.0)


def sigmoid_backward(src_or_dst: np.ndarray, diff_dst: np.ndarray, *, use_dst: bool = True) -> np.ndarray:
    x, dy = _f64(src_or_dst), _f64(diff_dst)
    with np.errstate(all="ignore"):
        if use_dst:
            return dy * x * (1.0 - x)
        # sigmoid'(x) = 1 / (4 cosh^2(x / 2))
        return dy / (4.0 * np.cosh(x / 2.0) ** 2)


def tanh_backward(src_or_dst: np.ndarray, diff_dst: np.ndarray, *, use_dst: bool = True) -> np.ndarray:
    x, dy = _f64(src_or_dst), _f64(diff_dst)
    with np.errstate(all="ignore"):
        if use_dst:
            return dy * (1.0 - x * x)  # x * x and 1 - x * x are exact for f32 x
        cosh: npt.NDArray[np.float64] = np.cosh(x)
        return dy / cosh**2  # tanh'(x) = sech^2(x)


def _binary_inputs(
    src_0: np.ndarray, src_1: np.ndarray, auto_broadcast: str
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The two inputs in float64; NumPy broadcasts them in the arithmetic ('numpy'), or their
    shapes must be equal ('none')."""
    a, b = _f64(src_0), _f64(src_1)
    if auto_broadcast == "none" and a.shape != b.shape:
        raise ValueError(f"oracle: shapes {a.shape} and {b.shape} differ and auto_broadcast is 'none'")
    np.broadcast_shapes(a.shape, b.shape)  # ValueError when they do not broadcast
    return a, b


# The binary ops: one float64 operation on two values of f32, bf16 or f16 (24 bits at most).
# Rounded to the dtype, its result is the exact one rounded once: 53 bits are at least 2p + 2
# for p <= 24, so the float64 rounding before never changes it (+ - * /).
def add(src_0: np.ndarray, src_1: np.ndarray, *, auto_broadcast: str = "numpy") -> np.ndarray:
    a, b = _binary_inputs(src_0, src_1, auto_broadcast)
    with np.errstate(all="ignore"):
        return a + b


def subtract(src_0: np.ndarray, src_1: np.ndarray, *, auto_broadcast: str = "numpy") -> np.ndarray:
    a, b = _binary_inputs(src_0, src_1, auto_broadcast)
    with np.errstate(all="ignore"):
        return a - b


def multiply(src_0: np.ndarray, src_1: np.ndarray, *, auto_broadcast: str = "numpy") -> np.ndarray:
    a, b = _binary_inputs(src_0, src_1, auto_broadcast)
    with np.errstate(all="ignore"):
        return a * b


def divide(src_0: np.ndarray, src_1: np.ndarray, *, auto_broadcast: str = "numpy") -> np.ndarray:
    a, b = _binary_inputs(src_0, src_1, auto_broadcast)
    with np.errstate(all="ignore"):
        return a / b


def maximum(src_0: np.ndarray, src_1: np.ndarray, *, auto_broadcast: str = "numpy") -> np.ndarray:
    """The larger value; NaN where either is NaN (NumPy's maximum)."""
    a, b = _binary_inputs(src_0, src_1, auto_broadcast)
    return np.maximum(a, b)


def minimum(src_0: np.ndarray, src_1: np.ndarray, *, auto_broadcast: str = "numpy") -> np.ndarray:
    """The smaller value; NaN where either is NaN (NumPy's minimum)."""
    a, b = _binary_inputs(src_0, src_1, auto_broadcast)
    return np.minimum(a, b)


def squared_difference(src_0: np.ndarray, src_1: np.ndarray, *, auto_broadcast: str = "numpy") -> np.ndarray:
    a, b = _binary_inputs(src_0, src_1, auto_broadcast)
    with np.errstate(all="ignore"):
        return np.square(a - b)


def _prelu(src: np.ndarray, slope_full: np.ndarray, diff_dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """diff_src and the per-element slope gradient (before summing), slope already broadcast."""
    positive = src > 0
    with np.errstate(all="ignore"):
        diff_src = np.where(positive, diff_dst, slope_full * diff_dst)
        slope_terms = np.where(positive, 0.0, src * diff_dst)
    return diff_src, slope_terms


def _sum_to(terms: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum `terms` over the dims where an operand of `shape` (same rank) was broadcast."""
    axes = tuple(d for d, size in enumerate(shape) if size == 1 and terms.shape[d] != 1)
    with np.errstate(all="ignore"):  # Inf - Inf is NaN, as it should be
        sums: np.ndarray = terms.sum(axis=axes, keepdims=True)
        return sums.reshape(shape)


def prelu_backward(
    src: np.ndarray, slope: np.ndarray, diff_dst: np.ndarray, *, data_format: str = "NXC"
) -> tuple[np.ndarray, np.ndarray]:
    x, w, dy = _f64(src), _f64(slope), _f64(diff_dst)
    rank = x.ndim
    channel_axis = _channel_axis(rank, data_format)
    if w.ndim == 1 and rank >= 2 and w.shape[0] == x.shape[channel_axis]:
        view = [1] * rank
        view[channel_axis] = w.shape[0]
    elif w.shape == (1,):
        view = [1] * rank
    elif w.shape == x.shape[1:]:
        view = [1, *w.shape]
    elif w.ndim == rank:
        view = list(w.shape)
    else:
        raise ValueError(f"oracle: slope shape {w.shape} does not fit src {x.shape}")
    diff_src, terms = _prelu(x, w.reshape(view), dy)
    diff_slope = _sum_to(terms, tuple(view)).reshape(w.shape)
    return diff_src, diff_slope


def aclnn_prelu_backward(
    grad_output: np.ndarray, self: np.ndarray, weight: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    x, w = _f64(self), _f64(weight)
    dy = np.broadcast_to(_f64(grad_output), x.shape)
    rank = x.ndim
    channels = x.shape[1] if rank > 1 else 1
    if w.size == 1:  # one weight for every element; its gradient keeps the weight's shape
        grad_input, terms = _prelu(x, w.reshape(()), dy)
        with np.errstate(all="ignore"):
            return grad_input, np.full(w.shape, terms.sum())
    if w.size != channels:
        raise ValueError(f"oracle: weight of {w.size} elements does not fit self {x.shape}")
    view = [1] * rank
    view[1] = channels
    grad_input, terms = _prelu(x, w.reshape(view), dy)
    return grad_input, _sum_to(terms, tuple(view)).reshape(channels)


def batch_norm_training_backward(
    src: np.ndarray,
    diff_dst: np.ndarray,
    mean: np.ndarray,
    variance: np.ndarray,
    gamma: np.ndarray | None = None,
    *,
    epsilon: float,
    data_format: str = "NXC",
    with_diff_gamma_beta: bool | None = None,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    if with_diff_gamma_beta is None:
        with_diff_gamma_beta = gamma is not None
    x, dy = _f64(src), _f64(diff_dst)
    axis = _channel_axis(x.ndim, data_format)
    view = [1] * x.ndim
    view[axis] = x.shape[axis]
    reduce_axes = tuple(d for d in range(x.ndim) if d != axis)
    count = x.size // x.shape[axis] if x.shape[axis] else 0
    mu = _f64(mean).reshape(view)
    inv_std = 1.0 / np.sqrt(_f64(variance) + float(np.float32(epsilon)))
    g = _f64(gamma) if (gamma is not None and with_diff_gamma_beta) else np.ones(x.shape[axis])
    with np.errstate(all="ignore"):
        x_hat = (x - mu) * inv_std.reshape(view)
        diff_beta = dy.sum(axis=reduce_axes)
        diff_gamma = (dy * x_hat).sum(axis=reduce_axes)
        diff_src = (g * inv_std).reshape(view) * (
            dy - diff_beta.reshape(view) / count - x_hat * diff_gamma.reshape(view) / count
        )
    if not with_diff_gamma_beta:
        return diff_src, None, None
    return diff_src, diff_gamma, diff_beta


def batch_norm_training_backward_bounds(
    src: np.ndarray,
    diff_dst: np.ndarray,
    mean: np.ndarray,
    variance: np.ndarray,
    gamma: np.ndarray | None = None,
    *,
    epsilon: float,
    data_format: str = "NXC",
    with_diff_gamma_beta: bool | None = None,
    float_run: int = 0,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Error bounds of batch_norm_training_backward's diff_src, diff_gamma and diff_beta beyond 1
    ulp of their dtype, from the inputs in float64 (its spec's accuracy contract).

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
    if with_diff_gamma_beta is None:
        with_diff_gamma_beta = gamma is not None
    axis = _channel_axis(np.ndim(src), data_format)
    with np.errstate(all="ignore"):  # NaN and Inf in the inputs make NaN and Inf bounds
        return _batch_norm_bounds(
            src, diff_dst, mean, variance, gamma if with_diff_gamma_beta else None, epsilon, axis, float_run
        )


def _batch_norm_bounds(
    src: np.ndarray,
    diff_dst: np.ndarray,
    mean: np.ndarray,
    variance: np.ndarray,
    gamma_: np.ndarray | None,
    epsilon: float,
    axis: int,
    float_run: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    beta_bound = _accuracy.sum_bound(sum_dy, count, float_run)
    double_sums = 2 * count * _accuracy.U64
    if float_run:
        centered_error = (_accuracy.gamma(float_run + 1) * (1 + double_sums) + double_sums) * sum_centered
        centered_error = centered_error + 2 * count * _accuracy.ETA
    else:
        centered_error = double_sums * sum_centered
    gamma_bound = (centered_error + 8 * _accuracy.U64 * sum_centered) * inv_std
    scale = np.abs(g * inv_std).reshape(view)
    shift_error = (beta_bound / count).reshape(view)
    coefficient_error = (inv_std * inv_std * centered_error / count).reshape(view)
    shift = (np.abs(dy.sum(axis=axes)) / count).reshape(view) + shift_error
    coefficient = (inv_std * inv_std * np.abs((dy * centered).sum(axis=axes)) / count).reshape(view)
    coefficient = coefficient + coefficient_error
    terms = np.abs(dy) + shift + np.abs(centered) * coefficient
    underflow = _accuracy.ETA * (terms + 1 + scale * (2 + np.abs(centered)) + 4 * scale)
    sums = scale * (shift_error + np.abs(centered) * coefficient_error)
    src_bound = 8 * _accuracy.U32 * scale * terms + sums + underflow
    return src_bound, gamma_bound, beta_bound


def soft_max(src: np.ndarray, *, axis: int = 1) -> np.ndarray:
    x = _f64(src)
    if x.shape[axis] == 0:
        return x.copy()
    with np.errstate(all="ignore"):
        # e^(x - max) / sum e^(x - max): a NaN makes its line NaN, as its max is
        e: npt.NDArray[np.float64] = np.exp(x - np.max(x, axis=axis, keepdims=True))
        total: npt.NDArray[np.float64] = np.sum(e, axis=axis, keepdims=True)
        return e / total


def soft_max_bounds(src: np.ndarray, *, axis: int = 1, float_run: int = 0) -> tuple[np.ndarray]:
    """soft_max's error bound beyond 1 ulp of dst's dtype, from the inputs in float64 (its spec's
    accuracy contract). u = 2^-24; per line of n elements, d = x - max:

    - x - max is rounded to f32 (the kernel computes in float): e^(d (1 + e)), |e| <= u, is
      e^d within a factor e^(|d| u); opgen's exp adds 1 ulp (2 u): rho = expm1(|d| u) + 2 u
      per term;
    - the sum of the terms, in double: within max(rho) of its exact value, plus n 2^-53; its
      reciprocal in double (2^-53), rounded to f32 for the elements: u;
    - the product: u (in f32; the store to a narrower dtype is the 1 ulp allowed anyway);
    - terms and products below f32's normal range: 2^-149 absolute each, at most 2^-148 in all.
    (Dividing by the sum rounded to f32 instead rounds twice as well.)
    So |dst - exact| <= exact (rho + max rho + 2 u + (n + 1) 2^-52) (1 + 1 %) + 2^-148;
    elements whose exact value is 0 (e^-inf) are exact."""
    x = _f64(src)
    if x.size == 0:
        return (np.zeros_like(x),)
    exact = soft_max(src, axis=axis)
    unit = _accuracy.U32
    with np.errstate(all="ignore"):
        d = np.abs(x - np.max(x, axis=axis, keepdims=True))
        rho = np.expm1(d * unit) + 2 * unit
        contributing = np.where(exact > 0, rho, 0.0)
        rho_max = np.max(contributing, axis=axis, keepdims=True)
        relative = rho + rho_max + 2 * unit + (x.shape[axis] + 1) * 2.0**-52
        bound = np.where(exact > 0, exact * relative * 1.01, 0.0) + 2.0**-148
    return (bound,)


def _split_axes(x: np.ndarray, begin_norm_axis: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(normalized axes, the other axes, the shape of a per-line value broadcast against x)."""
    first = begin_norm_axis % x.ndim
    return tuple(range(first, x.ndim)), tuple(range(first)), x.shape[:first] + (1,) * (x.ndim - first)


def layer_norm_backward(
    src: np.ndarray,
    diff_dst: np.ndarray,
    mean: np.ndarray,
    variance: np.ndarray,
    gamma: np.ndarray | None = None,
    *,
    begin_norm_axis: int = -1,
    epsilon: float = 1e-5,
    with_diff_gamma_beta: bool | None = None,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    if with_diff_gamma_beta is None:
        with_diff_gamma_beta = gamma is not None
    x, dy = _f64(src), _f64(diff_dst)
    axes, others, line = _split_axes(x, begin_norm_axis)
    with np.errstate(all="ignore"):
        inv_std = 1.0 / np.sqrt(_f64(variance).reshape(line) + float(np.float32(epsilon)))
        x_hat = (x - _f64(mean).reshape(line)) * inv_std
        g = dy * (_f64(gamma) if with_diff_gamma_beta else 1.0)
        count = max(1, int(np.prod([x.shape[d] for d in axes])))
        # d/dx of (x - mean(x)) / sqrt(var(x) + eps), with mean and variance of the line
        diff_src = inv_std * (
            g - g.sum(axis=axes, keepdims=True) / count - x_hat * (g * x_hat).sum(axis=axes, keepdims=True) / count
        )
        if not with_diff_gamma_beta:
            return diff_src, None, None
        return diff_src, (dy * x_hat).sum(axis=others), dy.sum(axis=others)


def layer_norm_backward_bounds(
    src: np.ndarray,
    diff_dst: np.ndarray,
    mean: np.ndarray,
    variance: np.ndarray,
    gamma: np.ndarray | None = None,
    *,
    begin_norm_axis: int = -1,
    epsilon: float = 1e-5,
    with_diff_gamma_beta: bool | None = None,
    float_run: int = 0,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Error bounds of layer_norm_backward's outputs beyond 1 ulp of their dtype, from the inputs
    in float64 (its spec's accuracy contract). u = 2^-24, U = 2^-53; n elements a line, L lines.

    - inv_std = 1 / sqrt(variance + epsilon) in double (4 U), rounded to f32 where the float
      math reads it (u).
    - Per line, sum_g of dy g (one f32 rounding each) and sum_c of dy g (x - mean) (three), in
      double: E1 = (u + n U) sum|dy g| + n 2^-149, E2 = (3 u + n U) sum|dy g (x - mean)| +
      2^-149 sum(|x - mean| + 2) (terms below f32's normal range err by 2^-149 absolute a
      rounding, the first one scaled by x - mean).
    - mean_g = sum_g / n and c = inv_std^2 sum_c / n in double, each rounded to f32 (u).
    - diff_src = inv_std (dy g - mean_g - (x - mean) c): six f32 roundings and the three
      narrowed values, at most 10 u of inv_std (|dy g| + |mean_g| + |(x - mean) c|), plus the
      sums' errors carried through: inv_std (E1 + |x - mean| inv_std^2 E2) / n.
    - diff_gamma = the sum across lines of dy (x - mean) inv_std (four roundings each, inv_std's
      included), in double: (4 u + L U) of the sum of magnitudes; diff_beta = the sum of dy
      (exact terms) in double: L U of the sum of magnitudes.
    - Results below f32's normal range err by up to 2^-149 absolute per rounding, times the
      factors that follow (inv_std): 16 2^-149 (1 + inv_std) in diff_src, 4 2^-149 (1 +
      inv_std) per line in diff_gamma, 4 L 2^-149 in diff_beta.
    (1 ulp of each output's dtype for the final store is added by `outside`.)"""
    if with_diff_gamma_beta is None:
        with_diff_gamma_beta = gamma is not None
    u, unit = _accuracy.U32, _accuracy.U64
    x, dy = _f64(src), _f64(diff_dst)
    axes, others, line = _split_axes(x, begin_norm_axis)
    count = max(1, int(np.prod([x.shape[d] for d in axes])))
    lines = max(1, int(np.prod([x.shape[d] for d in others])))
    tiny = 2.0**-149
    with np.errstate(all="ignore"):
        inv_std = 1.0 / np.sqrt(_f64(variance).reshape(line) + float(np.float32(epsilon)))
        centered = x - _f64(mean).reshape(line)
        g = dy * (_f64(gamma) if with_diff_gamma_beta else 1.0)
        # each term below f32's normal range: 2^-149 absolute a rounding (dy g; and dy g times
        # x - mean, whose first error it scales), which inv_std^2 and |x - mean| inv_std
        # magnify in diff_src
        error_g = (u + count * unit) * np.abs(g).sum(axis=axes, keepdims=True) + count * tiny
        error_c = (3 * u + count * unit) * np.abs(g * centered).sum(axis=axes, keepdims=True)
        error_c = error_c + tiny * (np.abs(centered) + 2).sum(axis=axes, keepdims=True)
        mean_g = np.abs(g.sum(axis=axes, keepdims=True)) / count
        coefficient = inv_std**2 * np.abs((g * centered).sum(axis=axes, keepdims=True)) / count
        magnitude = np.abs(g) + mean_g + np.abs(centered) * coefficient
        diff_src = inv_std * (10 * u * magnitude + (error_g + np.abs(centered) * inv_std**2 * error_c) / count)
        diff_src = diff_src * 1.01 + 16 * tiny * (1 + inv_std)
        if not with_diff_gamma_beta:
            return diff_src, None, None
        diff_gamma = (4 * u + lines * unit) * np.abs(dy * centered * inv_std).sum(axis=others) * 1.01
        diff_beta = lines * unit * np.abs(dy).sum(axis=others) * 1.01
        # a product below f32's normal range, rounded before the factor inv_std: 2^-149 inv_std
        line_factors = float(np.sum(np.broadcast_to(1 + inv_std, line)))
        return diff_src, diff_gamma + 4 * line_factors * tiny, diff_beta + 4 * lines * tiny


def log_soft_max(src: np.ndarray, *, axis: int = -1) -> np.ndarray:
    x = _f64(src)
    if x.shape[axis] == 0:
        return x.copy()
    with np.errstate(all="ignore"):
        # log(e^x / sum e^x) = (x - max) - log(sum e^(x - max)): a NaN makes its line NaN, as its max is
        shifted: npt.NDArray[np.float64] = x - np.max(x, axis=axis, keepdims=True)
        log_sum: npt.NDArray[np.float64] = np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
        return shifted - log_sum


def soft_max_backward(diff_dst: np.ndarray, dst: np.ndarray, *, axis: int = 1) -> np.ndarray:
    dy, y = _f64(diff_dst), _f64(dst)
    with np.errstate(all="ignore"):
        # d(softmax)/dx applied to dy: y * (dy - <dy, y>) along the axis
        dot: npt.NDArray[np.float64] = np.sum(dy * y, axis=axis, keepdims=True)
        return y * (dy - dot)


def log_soft_max_backward(diff_dst: np.ndarray, dst: np.ndarray, *, axis: int = -1) -> np.ndarray:
    dy, y = _f64(diff_dst), _f64(dst)
    with np.errstate(all="ignore"):
        # the softmax is e^dst: dy - softmax * sum(dy) along the axis
        total: npt.NDArray[np.float64] = np.sum(dy, axis=axis, keepdims=True)
        return dy - np.exp(y) * total


def _normalized_axes(rank: int, begin_norm_axis: int) -> tuple[int, ...]:
    first = begin_norm_axis + rank if begin_norm_axis < 0 else begin_norm_axis
    return tuple(range(first, rank))


def layer_norm(
    src: np.ndarray,
    gamma: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    *,
    begin_norm_axis: int = -1,
    epsilon: float = 1e-5,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = _f64(src)
    axes = _normalized_axes(x.ndim, begin_norm_axis)
    normalized = x.shape[axes[0] :]
    g = np.ones(normalized) if gamma is None else _f64(gamma)
    b = np.zeros(normalized) if beta is None else _f64(beta)
    count = float(np.prod(normalized))
    with np.errstate(all="ignore"):
        # two passes: the mean, then the mean square of the centered elements (biased); a line
        # of no elements has the mean and variance 0 / 0
        mean = np.sum(x, axis=axes, keepdims=True) / count
        variance = np.sum((x - mean) ** 2, axis=axes, keepdims=True) / count
        dst = (x - mean) / np.sqrt(variance + float(np.float32(epsilon))) * g + b
    line = x.shape[: axes[0]]
    return dst, mean.reshape(line), variance.reshape(line)


def log_soft_max_bounds(src: np.ndarray, *, axis: int = -1, float_run: int = 0) -> tuple[np.ndarray]:
    """log_soft_max's error bound beyond 1 ulp of dst's dtype, from the inputs in float64 (its
    spec's accuracy contract). u = 2^-24 (the kernel computes in f32); per line of n elements,
    d = x - max (<= 0, exact), L = log(sum e^d) (>= 0):

    - the sum's terms e^d, as in soft_max_bounds: each within rho = expm1(|d| u) + 2 u of its
      value (x - max rounded to f32, then opgen's exp within 1 ulp), or 2^-149 absolute below
      f32's normal range; their sum in double, in the kernel and in the oracle, n 2^-53 each:
      the sum is within r = max rho + n 2^-52 + n 2^-149 of its value, relatively (it is >= 1);
    - L = log of that sum, in double: log(S (1 + r)) - log(S) is within r (1 + r), and libm's
      log adds 4 roundings (accuracy.FUNCTION_ROUNDINGS) of 2^-53 of |L|; L is then rounded to
      f32 for the elements: u |L|;
    - each element: x - max again in f32 (u |d|), minus L in f32 (u (|d| + L), as
      |d - L| = |d| + L);
    - a difference below f32's normal range is exact; L rounded there errs by 2^-150.
    So |dst - exact| <= (2 u (|d| + L) + r (1 + r) + 2^-51 L) (1 + 1 %) + 2^-148; -inf where the
    oracle has -inf (an element of -inf), NaN where it has NaN."""
    x = _f64(src)
    if x.size == 0:
        return (np.zeros_like(x),)
    unit = _accuracy.U32
    count = x.shape[axis]
    with np.errstate(all="ignore"):
        d = np.abs(x - np.max(x, axis=axis, keepdims=True))
        terms = np.exp(-d)
        rho = np.where(terms > 0, np.expm1(d * unit) + 2 * unit, 0.0)
        relative = np.max(rho, axis=axis, keepdims=True) + count * (2.0**-52 + 2.0**-149)
        log_sum = np.abs(np.log(np.sum(terms, axis=axis, keepdims=True)))
        log_error = relative * (1 + relative) + _accuracy.FUNCTION_ROUNDINGS * _accuracy.U64 * log_sum
        bound = (2 * unit * (d + log_sum) + log_error) * 1.01 + 2.0**-148
    return (bound,)


class _WideUnits(NamedTuple):
    """The units of an along_axes op with compute = "wide" (opgen/lines.py): its reductions'
    terms and line values in the wide type (f16 data: f32; f32 and bf16 data: double), each
    element in f32 first and in the wide type where f32 left range. u and eta: a type's unit
    roundoff and half its smallest subnormal; `store`, 2^-24 where an element computed in double
    is rounded to f32 before its bf16 output (that f32 step, beyond the 1 ulp of bf16 allowed),
    else 0. An element's error in the wide type is within its bound in f32's units."""

    term_unit: float  # the terms' and line values' type
    term_eta: float
    unit: float  # the elements' type: f32 (the wide type's elements err less)
    eta: float
    store: float


def _wide_units(array: np.ndarray) -> _WideUnits:
    """_WideUnits of an op whose data has `array`'s dtype (the dtype table)."""
    dtype = np.dtype(np.asarray(array).dtype)
    if dtype == np.float16:
        return _WideUnits(_accuracy.U32, _accuracy.ETA, _accuracy.U32, _accuracy.ETA, 0.0)
    store = _accuracy.U32 if dtype.itemsize < 4 else 0.0
    return _WideUnits(_accuracy.U64, 2.0**-1075, _accuracy.U32, _accuracy.ETA, store)


def soft_max_backward_bounds(
    diff_dst: np.ndarray, dst: np.ndarray, *, axis: int = 1, float_run: int = 0
) -> tuple[np.ndarray]:
    """soft_max_backward's error bound beyond 1 ulp of diff_src's dtype, from the inputs in
    float64 (its spec's accuracy contract). u_t, eta_t: the unit roundoff and half the smallest
    subnormal of the terms' type, u, eta of the elements' (_wide_units: f32 elements; terms in
    f32 for f16 data, in double for f32 and bf16 data); per line of n elements,
    P = sum |diff_dst dst|, dot = sum diff_dst dst:

    - the dot product: each term rounded once (u_t, or eta_t absolute below the normal range),
      the sum in double (n 2^-53 P in the kernel and as much in the oracle):
      E = u_t P + n 2^-52 P + n eta_t; rounded to f32 for the elements: u (|dot| + E) and eta
      more, E' in all;
    - each element, y (diff_dst - dot) with y = dst: the difference is rounded (u |diff_dst -
      dot|, exact below the normal range), then the product (u |diff_src|, or eta);
    - in double, the result goes through f32 before a bf16 output: 2^-24 |diff_src| and 2^-150.
    So |diff_src - exact| <= |y| (E' + 2 u |diff_dst - dot|) (1 + 1 %) + (|y| + 1) eta (+ the
    f32 step)."""
    dy, y = _f64(diff_dst), _f64(dst)
    if dy.size == 0:
        return (np.zeros_like(dy),)
    units = _wide_units(diff_dst)
    unit, eta, store = units.unit, units.eta, units.store
    count = dy.shape[axis]
    with np.errstate(all="ignore"):
        products = dy * y
        magnitude = np.sum(np.abs(products), axis=axis, keepdims=True)
        dot = np.sum(products, axis=axis, keepdims=True)
        error = units.term_unit * magnitude + count * (2.0**-52 * magnitude + units.term_eta)
        error = error + unit * (np.abs(dot) + error) + eta
        exact = y * (dy - dot)
        bound = np.abs(y) * (error + 2 * unit * np.abs(dy - dot)) * 1.01 + (np.abs(y) + 1) * eta
        bound = bound + store * np.abs(exact) + (_accuracy.ETA if store else 0.0)
    return (bound,)


def log_soft_max_backward_bounds(
    diff_dst: np.ndarray, dst: np.ndarray, *, axis: int = -1, float_run: int = 0
) -> tuple[np.ndarray]:
    """log_soft_max_backward's error bound beyond 1 ulp of diff_src's dtype, from the inputs in
    float64 (its spec's accuracy contract). u, eta as in soft_max_backward_bounds; per line of
    n elements, s = sum diff_dst, A = sum |diff_dst|; per element e = exp(dst):

    - the sum, of exact terms, in double: n 2^-53 A in the kernel and as much in the oracle;
      rounded to f32 for the elements: u (|s| + E) and eta: E' = n 2^-52 A + u (|s| + n 2^-52 A) + eta;
    - exp(dst) in f32: opgen's exp within 1 ulp (2 u; 2^-149 absolute below the normal range);
    - e s rounded (u, or eta), then diff_dst - e s rounded (u (|diff_dst| + e |s|)).
    - an element computed again in double (f32 left range; fewer and smaller errors) goes
      through f32 before a bf16 output: 2^-24 |diff_src| and 2^-150.
    So |diff_src - exact| <= (e E' + 4 u e |s| + u |diff_dst|) (1 + 1 %) + 2 eta |s| + eta (+ the
    f32 step)."""
    dy, y = _f64(diff_dst), _f64(dst)
    if dy.size == 0:
        return (np.zeros_like(dy),)
    units = _wide_units(diff_dst)
    unit, eta, store = units.unit, units.eta, units.store
    exp_roundings = 2  # opgen's f32 exp
    count = dy.shape[axis]
    with np.errstate(all="ignore"):
        total = np.sum(dy, axis=axis, keepdims=True)
        sum_error = count * 2.0**-52 * np.sum(np.abs(dy), axis=axis, keepdims=True)
        sum_error = sum_error + unit * (np.abs(total) + sum_error) + eta
        e = np.exp(y)
        exact = dy - e * total
        bound = (e * sum_error + (exp_roundings + 2) * unit * e * np.abs(total) + unit * np.abs(dy)) * 1.01
        bound = bound + 2 * eta * np.abs(total) + eta
        bound = bound + store * np.abs(exact) + (_accuracy.ETA if store else 0.0)
    return (bound,)


def layer_norm_bounds(
    src: np.ndarray,
    gamma: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    *,
    begin_norm_axis: int = -1,
    epsilon: float = 1e-5,
    float_run: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """layer_norm's error bounds beyond 1 ulp of their dtypes, of dst, mean and variance, from
    the inputs in float64 (its spec's accuracy contract). u_t, eta_t: the unit roundoff and half
    the smallest subnormal of the terms' type, u, eta of the elements' (_wide_units: f32
    elements; terms in f32 for f16 data, in double for f32 and bf16 data); per line of n
    elements, A = sum |x|, m and V the exact mean and variance, r = 1 / sqrt(V + epsilon)
    (epsilon as the f32 the kernel gets):

    - mean, in double: the sum (n 2^-53 A in the kernel and as much in the oracle), over n
      (2^-53 |m|, in each): E_m = 2^-52 (A + |m|); rounded to the terms' type:
      D_t = E_m + u_t (|m| + E_m) + eta_t off m; to f32 for the elements: D (u, eta);
    - variance: each term (x - m')^2 with the rounded mean m' rounds twice (3 u_t with the
      product of two rounded factors, eta_t absolute below the normal range), the sum in double
      (n 2^-53 of it in each), over n (2^-53 in each): with sum (x - m')^2 = n (V + (m - m')^2),
      E_V = D_t^2 + (V + D_t^2) (3 u_t + (2 n + 2) 2^-53) + eta_t;
    - 1 / sqrt(variance + epsilon) in double: the variance's error moves it up by at most
      ((V + epsilon) / max(V + epsilon - E_V, epsilon))^(1/2) - 1, relatively (the kernel's
      variance, a sum of squares, is never below 0), and down by at most 1 - ((V + epsilon) /
      (V + epsilon + E_V))^(1/2); the add, sqrt and division 3 2^-53;
      rounded to f32: u, and eta absolute below its normal range; rho in all;
    - each element, ((x - m') * inv_std * gamma) + beta: the centered value is D off (times
      r (1 + rho)), inv_std's eta (times |x - m| |gamma|), and four roundings (x - m', two
      products, the sum's of |x - m| r |gamma| and |beta|);
    - line outputs go through f32 to their dtype (line values are double): 2^-24 and 2^-150
      (counted also where f32 is the output's dtype); in double, dst goes through f32 before a
      bf16 output: 2^-24 |dst| and 2^-150.
    So, with slack 1 % for products of small errors:
    mean: E_m (1 + 1 %) + 2^-24 |m| + 2^-150; variance: E_V (1 + 1 %) + 2^-24 V + 2^-150;
    dst: (|gamma| r D (1 + rho) + |gamma| |x - m| (r (rho + 4 u) + eta) + u |beta|) (1 + 1 %)
    + (|gamma| + 1) eta (+ the f32 step)."""
    x = _f64(src)
    axes = _normalized_axes(x.ndim, begin_norm_axis)
    normalized = x.shape[axes[0] :]
    line = x.shape[: axes[0]]
    count = int(np.prod(normalized))
    if count == 0:  # no elements: dst is empty, mean and variance are NaN in both
        return np.zeros_like(x), np.zeros(line), np.zeros(line)
    units = _wide_units(src)
    unit, eta, store = units.unit, units.eta, units.store
    g = np.ones(normalized) if gamma is None else np.abs(_f64(gamma))
    b = np.zeros(normalized) if beta is None else np.abs(_f64(beta))
    u64 = _accuracy.U64
    with np.errstate(all="ignore"):
        mean = np.sum(x, axis=axes, keepdims=True) / count
        centered = np.abs(x - mean)
        variance = np.sum(centered * centered, axis=axes, keepdims=True) / count
        mean_error = 2 * u64 * (np.sum(np.abs(x), axis=axes, keepdims=True) + np.abs(mean))
        term_off = mean_error + units.term_unit * (np.abs(mean) + mean_error) + units.term_eta
        off = mean_error + unit * (np.abs(mean) + mean_error) + eta
        term_rounding = 3 * units.term_unit + (2 * count + 2) * u64
        variance_error = term_off * term_off + (variance + term_off * term_off) * term_rounding + units.term_eta
        variance_error = variance_error * 1.01
        epsilon32 = float(np.float32(epsilon))
        plus_epsilon = variance + epsilon32
        inv_std = 1 / np.sqrt(plus_epsilon)
        # the kernel's variance is a sum of squares, never below 0: its variance + epsilon is
        # at least epsilon, however far the error bound reaches (further than V itself where
        # terms of 1e38 cancel)
        lowest = np.maximum(plus_epsilon - variance_error, epsilon32)
        up, down = np.sqrt(plus_epsilon / lowest) - 1, 1 - np.sqrt(plus_epsilon / (plus_epsilon + variance_error))
        rho = np.maximum(up, down) + 3 * u64 + unit
        exact = (x - mean) * inv_std * _f64(gamma if gamma is not None else np.ones(normalized))
        spread = np.where(centered > 0, g * centered * (inv_std * (rho + 4 * unit) + eta), 0.0)  # 0, not 0 * inf
        dst = (g * inv_std * off * (1 + rho) + spread + unit * b) * 1.01 + (g + 1) * eta
        if store:  # (0 * an infinite exact value would make the bound NaN)
            dst = dst + store * np.abs(exact + (0 if beta is None else _f64(beta))) + _accuracy.ETA
        mean_bound = mean_error * 1.01 + _accuracy.U32 * np.abs(mean) + _accuracy.ETA
        variance_bound = variance_error + _accuracy.U32 * variance + _accuracy.ETA
    return dst, mean_bound.reshape(line), variance_bound.reshape(line)


# ---- ReduceX over a set of axes (an int list; empty: each element its own reduction) ----


def _reduced(
    src: np.ndarray, axes: Sequence[int], keep_dims: bool
) -> tuple[np.ndarray, tuple[int, ...], int, Callable[[np.ndarray], np.ndarray]]:
    """(src in float64, its axes as a sorted tuple, the count of elements each result reduces,
    and a function giving a reduction's result its output shape)."""
    x = _f64(src)
    normalized = tuple(sorted({int(a) + x.ndim if int(a) < 0 else int(a) for a in axes}))
    count = int(np.prod([x.shape[a] for a in normalized]))

    def shaped(result: np.ndarray) -> np.ndarray:
        return result if keep_dims else np.squeeze(result, axis=normalized)

    return x, normalized, count, shaped


def reduce_sum(src: np.ndarray, *, axes: Sequence[int] = (), keep_dims: bool = False) -> np.ndarray:
    x, axes, _, shaped = _reduced(src, axes, keep_dims)
    with np.errstate(all="ignore"):
        return shaped(np.sum(x, axis=axes, keepdims=True))


def reduce_mean(src: np.ndarray, *, axes: Sequence[int] = (), keep_dims: bool = False) -> np.ndarray:
    """sum / count; 0 / 0 (NaN) where nothing is reduced."""
    x, axes, count, shaped = _reduced(src, axes, keep_dims)
    with np.errstate(all="ignore"):
        return shaped(np.sum(x, axis=axes, keepdims=True) / np.float64(count))


def reduce_max(src: np.ndarray, *, axes: Sequence[int] = (), keep_dims: bool = False) -> np.ndarray:
    """NaN where an element is NaN (NumPy's max); -inf where nothing is reduced."""
    x, axes, _, shaped = _reduced(src, axes, keep_dims)
    return shaped(np.max(x, axis=axes, keepdims=True, initial=-np.inf))


def reduce_min(src: np.ndarray, *, axes: Sequence[int] = (), keep_dims: bool = False) -> np.ndarray:
    """NaN where an element is NaN (NumPy's min); +inf where nothing is reduced."""
    x, axes, _, shaped = _reduced(src, axes, keep_dims)
    return shaped(np.min(x, axis=axes, keepdims=True, initial=np.inf))


def reduce_prod(src: np.ndarray, *, axes: Sequence[int] = (), keep_dims: bool = False) -> np.ndarray:
    """The exact product's special values: NaN with a NaN factor or an infinity times a 0,
    else an infinity (the factors' signs multiplied) with an infinite factor; float64's product
    elsewhere. (In float64 alone, factors whose product is below its range give 0, and times
    an infinity NaN.)"""
    x, axes, _, shaped = _reduced(src, axes, keep_dims)
    with np.errstate(all="ignore"):
        product = np.prod(x, axis=axes, keepdims=True)
        infinite = np.any(np.isinf(x), axis=axes, keepdims=True)
        zero = np.any(x == 0, axis=axes, keepdims=True)
        nan = np.any(np.isnan(x), axis=axes, keepdims=True)
        signed = np.prod(np.where(np.signbit(x), -1.0, 1.0), axis=axes, keepdims=True) * np.inf
        return shaped(np.where(infinite & ~zero & ~nan, signed, product))


def reduce_l1(src: np.ndarray, *, axes: Sequence[int] = (), keep_dims: bool = False) -> np.ndarray:
    x, axes, _, shaped = _reduced(src, axes, keep_dims)
    with np.errstate(all="ignore"):
        return shaped(np.sum(np.abs(x), axis=axes, keepdims=True))


def reduce_l2(src: np.ndarray, *, axes: Sequence[int] = (), keep_dims: bool = False) -> np.ndarray:
    x, axes, _, shaped = _reduced(src, axes, keep_dims)
    with np.errstate(all="ignore"):
        return shaped(np.sqrt(np.sum(x * x, axis=axes, keepdims=True)))


def _store_step(src: np.ndarray) -> tuple[float, float]:
    """(relative, absolute) error of the step from the kernel's double result through f32 to a
    narrower output dtype (beyond the 1 ulp of that dtype allowed): 2^-24 and half f32's
    smallest subnormal; none for f32 outputs."""
    narrow = np.dtype(np.asarray(src).dtype).itemsize < 4
    return (_accuracy.U32, _accuracy.ETA) if narrow else (0.0, 0.0)


def _sum_bound(magnitudes: np.ndarray, count: int) -> np.ndarray:
    """A sum of `count` terms exact in double, added in double in any order: within
    (count - 1) 2^-53 of the sum of their magnitudes, in the kernel and in the oracle each."""
    return 2 * max(count - 1, 0) * _accuracy.U64 * magnitudes


def reduce_sum_bounds(
    src: np.ndarray, *, axes: Sequence[int] = (), keep_dims: bool = False, float_run: int = 0
) -> tuple[np.ndarray]:
    """reduce_sum's bound beyond 1 ulp of dst's dtype. Each term (an element, exact in double)
    is added in double in the kernel (lanes, then their fold, then the blocks' partial sums: n - 1
    additions in all for n terms) and in the oracle (NumPy's pairwise sum): each within
    (n - 1) 2^-53 sum |x| of the exact sum; the double result goes to f32 once (the 1 ulp allowed;
    before a bf16 or f16 dst, that f32 step too: 2^-24 |sum| and 2^-150). So
    |dst - exact| <= 2 (n - 1) 2^-53 sum |x| (1 + 1 %) + store."""
    x, normalized, count, shaped = _reduced(src, axes, keep_dims)
    relative, absolute = _store_step(src)
    with np.errstate(all="ignore"):
        magnitudes = np.sum(np.abs(x), axis=normalized, keepdims=True)
        exact = np.abs(np.sum(x, axis=normalized, keepdims=True))
        bound = _sum_bound(magnitudes, count) * 1.01 + relative * exact + absolute
    return (shaped(bound),)


def reduce_l1_bounds(
    src: np.ndarray, *, axes: Sequence[int] = (), keep_dims: bool = False, float_run: int = 0
) -> tuple[np.ndarray]:
    """reduce_l1's bound beyond 1 ulp of dst's dtype: |x| is exact, so as reduce_sum's with the
    terms' magnitudes their sum: 2 (n - 1) 2^-53 sum |x| (1 + 1 %) + store."""
    return reduce_sum_bounds(np.abs(_f64(src)).astype(np.asarray(src).dtype), axes=axes, keep_dims=keep_dims)


def reduce_mean_bounds(
    src: np.ndarray, *, axes: Sequence[int] = (), keep_dims: bool = False, float_run: int = 0
) -> tuple[np.ndarray]:
    """reduce_mean's bound beyond 1 ulp of dst's dtype: the sum as in reduce_sum_bounds, over n
    (exact in double) with one more rounding in double in each of kernel and oracle (2^-53 of
    the mean): (2 (n - 1) 2^-53 sum |x| / n + 2 2^-53 |mean|) (1 + 1 %) + store."""
    x, normalized, count, shaped = _reduced(src, axes, keep_dims)
    if count == 0:  # 0 / 0: NaN in both
        return (shaped(np.zeros(np.sum(x, axis=normalized, keepdims=True).shape)),)
    relative, absolute = _store_step(src)
    with np.errstate(all="ignore"):
        magnitudes = np.sum(np.abs(x), axis=normalized, keepdims=True)
        mean = np.abs(np.sum(x, axis=normalized, keepdims=True) / count)
        bound = (_sum_bound(magnitudes, count) / count + 2 * _accuracy.U64 * mean) * 1.01
        bound = bound + relative * mean + absolute
    return (shaped(bound),)


def reduce_prod_bounds(
    src: np.ndarray, *, axes: Sequence[int] = (), keep_dims: bool = False, float_run: int = 0
) -> tuple[np.ndarray]:
    """reduce_prod's bound beyond 1 ulp of dst's dtype. The n factors are exact in double; the
    kernel's n - 1 products in double (lanes, their fold, the blocks' partial products), each
    rounded by 2^-53 relatively, and the oracle's as many: within 2 gamma(n - 1) |prod| (in
    units of 2^-53) while every partial product stays in double's normal range. Where it may
    not (the factors below 1 in magnitude could take a partial product under 2^-1000, or those
    above 1 over 2^1000; the order of the products decides) the bound is infinite (any result).
    So |dst - exact| <= 2 gamma(n - 1) |prod| (1 + 1 %) + store."""
    x, normalized, count, shaped = _reduced(src, axes, keep_dims)
    relative, absolute = _store_step(src)
    with np.errstate(all="ignore"):
        magnitude = np.abs(x)
        logs = np.log2(np.where(magnitude > 0, magnitude, 1.0))
        low = np.sum(np.minimum(logs, 0.0), axis=normalized, keepdims=True)
        high = np.sum(np.maximum(logs, 0.0), axis=normalized, keepdims=True)
        exact = np.abs(np.prod(x, axis=normalized, keepdims=True))
        rounding = 2 * _accuracy.gamma(max(count - 1, 0), _accuracy.U64)
        bound = rounding * exact * 1.01 + relative * exact + absolute
        bound = np.where((low < -1000) | (high > 1000), np.inf, bound)
    return (shaped(bound),)


def reduce_l2_bounds(
    src: np.ndarray, *, axes: Sequence[int] = (), keep_dims: bool = False, float_run: int = 0
) -> tuple[np.ndarray]:
    """reduce_l2's bound beyond 1 ulp of dst's dtype. Each square is exact in the compute type
    (double for f32 and bf16 data, float for f16: twice the mantissa bits fit, and the range);
    the sum of n squares in double is within (n - 1) 2^-53 of the exact sum S in the kernel
    and in the oracle each; the square root halves a relative error and adds 2^-53 in each.
    So |dst - exact| <= sqrt(S) ((n - 1) 2^-53 + 2 2^-53) (1 + 1 %) + store."""
    x, normalized, count, shaped = _reduced(src, axes, keep_dims)
    relative, absolute = _store_step(src)
    with np.errstate(all="ignore"):
        norm = np.sqrt(np.sum(x * x, axis=normalized, keepdims=True))
        bound = norm * (max(count - 1, 0) + 2) * _accuracy.U64 * 1.01 + relative * norm + absolute
    return (shaped(bound),)
