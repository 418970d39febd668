"""The stated tolerances, as code: test data with edge values, ulp distances and error bounds.

The test suite and `opgen check` both judge results with these (docs/numerics.md, "Accuracy"); each
output's contract is stated by its spec (key `accuracy`, specs.ACCURACY), so no op is known
here by name:
- "exact" / "ulp": at most 0 / 1 ulp of the output dtype from the float64 oracle rounded to
  that dtype;
- "sum": 1 ulp of the output dtype + 2 n 2^-53 sum|terms| (n - 1 double additions in the
  kernel, as many in the oracle), + r 2^-24 sum|terms| + n 2^-150 where the kernel adds
  float terms in float partial sums of at most r terms first (plan.float_runs: PReLU and
  BatchNorm; a bf16 product below 2^-134 is rounded to f32's subnormal grid, 2^-149), + the
  roundings of each term computed in float (stated_sum_bound); sum|terms| evaluates the
  spec's own sum term in float64 (sum_magnitudes);
- "oracle:<function>": 1 ulp + the bound a function of the oracle module computes from the
  inputs (the bundled BatchNorm's, from counting its roundings: oracle.py).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any, cast

import ml_dtypes
import numpy as np

from opgen import expr, runtime, shapes, specs
from opgen.specs import DType

U32, U64 = 2.0**-24, 2.0**-53
ETA = 2.0**-150  # half the smallest f32 subnormal
# What a function call in a sum term counts as, in roundings: an allowance for functions
# within a few ulp (libm's, opgen_exp), not derived per function; a sum whose terms need a
# tighter or proven bound states an oracle bound function instead (accuracy "oracle:...").
FUNCTION_ROUNDINGS = 4


def numpy_dtype(row: DType) -> np.dtype:
    return runtime.numpy_dtype(row.numpy)


def finfo(row: DType) -> np.finfo[Any]:
    dtype = numpy_dtype(row)
    return ml_dtypes.finfo(dtype) if dtype == np.dtype(ml_dtypes.bfloat16) else np.finfo(dtype)


def special_values(row: DType, nonfinite: bool) -> np.ndarray:
    """Zeros, subnormals, small integers and halves (interval edges of piecewise ops), tiny normals."""
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
    spacing: np.ndarray = np.exp2(exponent - row.mantissa_bits)
    return spacing


def sum_bound(terms_abs_sum: np.ndarray, count: int, float_run: int = 0) -> np.ndarray:
    """Accumulation error of a double sum of `count` terms, in the kernel and in the oracle;
    with `float_run` > 0, the kernel first adds the terms in float, at most that many per
    float partial sum: (float_run - 1) u32 sum|terms| more, rounded up to float_run u32; and a
    term computed in float is exact except below f32's normal range (products of two bf16
    below 2^-134), where rounding to the subnormal grid loses at most 2^-150 per term."""
    rounding = (2.0 * max(count, 1) * U64 + float_run * U32) * terms_abs_sum
    return rounding + (max(count, 1) * 2.0**-150 if float_run else 0.0)


def term_roundings(tree: ast.expr) -> int:
    """Roundings a sum term takes where it is computed in floating point: one per operation,
    FUNCTION_ROUNDINGS per function call; selections, negations and comparisons are exact."""
    calls = sum(isinstance(node, ast.Call) for node in ast.walk(tree))
    return sum(isinstance(node, ast.BinOp) for node in ast.walk(tree)) + FUNCTION_ROUNDINGS * calls


def stated_sum_bound(spec: Any, name: str, magnitude: np.ndarray, count: int, float_run: int) -> np.ndarray:
    """The "sum" contract of sum `name` beyond 1 ulp: sum_bound, plus the roundings of its terms
    where the kernel computes them (in float within float runs, else in the accumulation
    type; a term exact in float, as a product of two bf16, takes none of them, and the bound
    holds for it too)."""
    bound = sum_bound(magnitude, count, float_run)
    roundings = term_roundings(next(e.tree for e in spec.math["sums"] if e.name == name))
    if not roundings:
        return bound
    unit = U32 if float_run else U64
    return (
        bound
        + gamma(roundings, unit) * (1 + 2 * max(count, 1) * U64 + float_run * U32) * magnitude
        + (max(count, 1) * roundings * ETA if float_run else 0.0)
    )


def sum_magnitudes(
    spec: Any, reference_function: Any, arrays: dict[str, np.ndarray], kwargs: dict[str, Any]
) -> tuple[np.ndarray | None, ...]:
    """Per output of a broadcast_reduce or reduce_then_apply op: sum|terms| of the sum it is
    (specs.sum_behind), shaped as the output, or None for an output that is no sum. The terms
    are the spec's own sum expressions evaluated in float64 on the inputs (Inf where a term
    is NaN: such slots are checked for Inf/NaN only). `reference_function` is not needed
    (kept for callers that pass it)."""
    layout = kwargs.get(spec.layout_attribute.name) if spec.layout_attribute else spec.layout
    magnitudes = term_magnitudes(spec, arrays, kwargs, layout or "NCX")
    return tuple(magnitudes.get(specs.sum_behind(spec, t.name) or "") for t in spec.outputs)


def term_magnitudes(
    spec: Any, arrays: dict[str, np.ndarray], kwargs: dict[str, Any], layout: str
) -> dict[str, np.ndarray]:
    """Sum name -> sum|term| over the elements each slot of it adds, in that sum's shape: the
    shape of the channel input its output is `like` (broadcast_reduce), [C] (reduce_then_apply)."""
    values, forms = expanded_inputs(spec, arrays, kwargs, layout)
    shape = np.shape(arrays[spec.reference])
    names = {**values, **_attribute_numbers(spec, kwargs)}
    result = {}
    for entry in spec.math.get("sums", ()):
        name = entry.name
        with np.errstate(all="ignore"):
            term = np.broadcast_to(np.abs(evaluate(entry.tree, names)), shape)
        term = np.where(np.isnan(term), np.inf, term)
        if spec.pattern == "broadcast_reduce":
            like = spec.tensor(name).like
            form, expanded = forms[like]
            axes = tuple(d for d, size in enumerate(expanded) if size == 1)
            target = shapes.reduced_shape(form, np.shape(arrays[like]), expanded)
        else:
            axis = shapes.channel_axis(len(shape), layout)
            axes = tuple(d for d in range(len(shape)) if d != axis)
            target = (shape[cast(int, axis)],)  # a reduce_then_apply reference has a channel dim
        with np.errstate(all="ignore"):
            result[name] = term.sum(axis=axes, keepdims=True).reshape(target)
    return result


def _attribute_numbers(spec: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The attributes the math reads: f32 values as the kernels get them, bools as conditions."""
    values = {a.name: kwargs.get(a.name, a.default) for a in spec.attributes}
    numbers = {a.name: float(np.float32(values[a.name])) for a in spec.attributes if a.type == "f32"}
    return numbers | {a.name: bool(values[a.name]) for a in spec.attributes if a.type == "bool"}


def expanded_inputs(
    spec: Any, arrays: Mapping[str, np.ndarray | None], kwargs: dict[str, Any], layout: str
) -> tuple[dict[str, np.ndarray], dict[str, tuple[str, tuple[int, ...]]]]:
    """Every input in float64, broadcast to the reference's shape (an absent or ignored optional
    input as its default); and (form, expanded shape) of each channel input, the first of its
    forms that fits, as the kernels choose."""
    reference = np.shape(cast(np.ndarray, arrays[spec.reference]))  # a required input
    values, forms = {}, {}
    for tensor in spec.inputs:
        array = arrays.get(tensor.name)
        ignored = tensor.ignored_unless is not None and not kwargs.get(tensor.ignored_unless, True)
        if array is None or ignored:
            values[tensor.name] = np.full(reference, np.float64(tensor.default or 0.0))
            continue
        array = np.asarray(array).astype(np.float64)
        if tensor.kind == "channel":
            form, expanded = next(
                (form, expanded)
                for form in tensor.broadcast
                if (expanded := shapes.expand(form, array.shape, reference, layout)) is not None
            )
            forms[tensor.name] = (form, expanded)
            array = array.reshape(expanded)
        values[tensor.name] = np.broadcast_to(array, reference)
    return values, forms


_ARITHMETIC = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.Div: np.divide}
_COMPARISON = {
    ast.Lt: np.less,
    ast.LtE: np.less_equal,
    ast.Gt: np.greater,
    ast.GtE: np.greater_equal,
    ast.Eq: np.equal,
    ast.NotEq: np.not_equal,
}
_FUNCTIONS = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "tanh": np.tanh,
    "abs": np.abs,
    "min": np.fmin,
    "max": np.fmax,
}


def evaluate(node: ast.expr, names: dict[str, Any]) -> Any:
    """A checked spec expression (opgen.expr) in float64 NumPy: the math as written, exact up to
    double's roundings; both arms of `a if c else b` are computed, as in the kernels."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, bool) else float(cast(float, node.value))
    if isinstance(node, ast.Name):
        return names[node.id]
    if isinstance(node, ast.BinOp):
        return _ARITHMETIC[type(node.op)](evaluate(node.left, names), evaluate(node.right, names))
    if isinstance(node, ast.UnaryOp):
        operand = evaluate(node.operand, names)
        if isinstance(node.op, ast.Not):
            return np.logical_not(operand)
        return np.negative(operand) if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BoolOp):
        join = np.logical_and if isinstance(node.op, ast.And) else np.logical_or
        result = evaluate(node.values[0], names)
        for value in node.values[1:]:
            result = join(result, evaluate(value, names))
        return result
    if isinstance(node, ast.Compare):
        result, left = True, evaluate(node.left, names)
        for op, comparator in zip(node.ops, node.comparators):
            right = evaluate(comparator, names)
            result = np.logical_and(result, _COMPARISON[type(op)](left, right))
            left = right
        return result
    if isinstance(node, ast.IfExp):
        return np.where(evaluate(node.test, names), evaluate(node.body, names), evaluate(node.orelse, names))
    if isinstance(node, ast.Call):
        name = cast(ast.Name, node.func).id  # checked: calls of names only
        return _FUNCTIONS[name](*(evaluate(arg, names) for arg in node.args))
    raise expr.ExprError(f"unsupported syntax: {ast.unparse(node)}")


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
    off: np.ndarray = (nan_got != nan_expected) | (~nan_got & ~nan_expected & (distance > ulps))
    return off


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
        # An infinite bound states no guarantee (a product whose partial values may leave the
        # range, the sign of x - mean within the mean's error times an infinite gamma): any
        # result, an infinity of either sign or NaN too. (A NaN bound, from NaN data, is strict.)
        bad &= ~(allowed == np.inf)
    return bad, allowed


def gamma(k: int, unit: float = U32) -> float:
    """The classic bound on k roundings: (1 + d1)...(1 + dk) lies within 1 +- k u / (1 - k u)."""
    return k * unit / (1 - k * unit)
