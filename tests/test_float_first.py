"""Kernels that compute a block a cheaper way first (opgen/float_range.py, plan.kernel's
float_first): bf16 ones in float instead of double, f32 ones in double with a short exp. The
intervals the analysis derives, the arithmetic at their corners, and the kernels, on every
target, on blocks inside an interval, on its edges and just outside it."""

from __future__ import annotations

import ast
import math
import platform
import shutil
import subprocess
import textwrap
from dataclasses import replace
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import opgen
from opgen import accuracy, expr, float_range, oracle, plan
from opgen.compile import compiler
from opgen.plan import BLOCK, TARGETS
from opgen.render import BUNDLED_SPECS, render_library
from opgen.specs import load_spec
from tests.helpers import TABLE, assert_ulps, describe, rng, run_on_target

BF16 = ml_dtypes.bfloat16
LIBRARY = render_library()
KERNELS = [
    (spec, variant, plan.kernel(variant, TABLE).float_first)
    for spec in opgen.bundled.specs
    for variant in plan.variants(spec, TABLE)
    if spec.pattern == "elementwise" and plan.kernel(variant, TABLE).float_first
]
# bf16 kernels are computed in double, and their blocks inside the intervals in float
BF16_KERNELS = [(spec, variant, first) for spec, variant, first in KERNELS if variant.row[spec.reference] == "bf16"]
# f32 outputs need more than float's precision: their cheaper path is double with a short exp
F32_KERNELS = [(spec, variant, first) for spec, variant, first in KERNELS if variant.row[spec.reference] == "f32"]


def test_the_bundled_kernels_that_compute_in_float_first():
    # bf16 sigmoid and tanh, f16 from src (computed in float: its blocks inside only call
    # the unclamped exp), f32 from src (computed in double: its blocks inside call the short
    # exp). The seeds' ops are computed in float and call no exp. Intervals [2^-L, 2^H) widen together, then
    # each alone (by name); dd = diff_dst, s or t = src_or_dst, x = src.
    # bf16 in float: dd multiplies each whole result, so the blocks compute the rest first
    # and multiply by dd last (float_range.last_factors), leaving dd unchecked:
    # s * (1 - s): s < 2^H, 1 - s < 2^(H + 1), the product < 2^(2H + 1) <= 2^127: H = 63. A
    # nonzero 1 - s >= 2^-8 (s >= 1/2 is a multiple of 2^-8, else 1 - s > 1/2), so the
    # product >= 2^(-L - 8) >= 2^-126: L = 118.
    # (1 - t) * (1 + t): each factor < 2^(H + 1), 2H + 2 <= 127: H = 62; each factor >= 2^-8
    # whatever t, so L = 149 (a subnormal t is exact in float, and 1 - t rounds once).
    # e / ((1 + e) * (1 + e)), e = exp(-|x|) > 2^(-2^Hx log2(e)): normal for Hx = 6 (e >
    # 2^-92.4, lo -93, and one binade of margin: -94), not 7; Lx = 149 (a subnormal x is
    # exact, and e about 1). tanh: e = exp(-2|x|), 2|x| < 2^(Hx + 2) (2 is in [2, 4)): Hx = 4.
    # f16 data: the same bounds on x, and every finite f16 diff_dst (f16 spans [2^-24, 2^16)).
    # f32 in double: e = exp(-|x|) > 2^(-2^Hx log2(e)) is normal (lo -739, -740 with the
    # margin, >= -1022) for Hx = 9, not 10 (-1478); tanh's 2|x| < 2^(Hx + 2): Hx = 7. Then
    # every other node stays in double's range for every finite f32 (dd * e >= 2^(-149 - 740)),
    # subnormals too: [2^-149, 2^128).
    found = {variant.name: {n: str(i) for n, i in first.intervals.items()} for _, variant, first in KERNELS}
    assert found == {
        "sigmoid_backward_bf16_use_dst": {"src_or_dst": "[2^-118, 2^63)"},
        "tanh_backward_bf16_use_dst": {"src_or_dst": "[2^-149, 2^62)"},
        "sigmoid_backward_bf16_no_use_dst": {"src_or_dst": "[2^-149, 2^6)"},
        "tanh_backward_bf16_no_use_dst": {"src_or_dst": "[2^-149, 2^4)"},
        "sigmoid_backward_f16_no_use_dst": {"diff_dst": "[2^-149, 2^127)", "src_or_dst": "[2^-149, 2^6)"},
        "tanh_backward_f16_no_use_dst": {"diff_dst": "[2^-149, 2^127)", "src_or_dst": "[2^-149, 2^4)"},
        "sigmoid_backward_f32_no_use_dst": {"diff_dst": "[2^-149, 2^128)", "src_or_dst": "[2^-149, 2^9)"},
        "tanh_backward_f32_no_use_dst": {"diff_dst": "[2^-149, 2^128)", "src_or_dst": "[2^-149, 2^7)"},
    }
    assert {v.name: first.type for _, v, first in F32_KERNELS} == {
        "sigmoid_backward_f32_no_use_dst": "double",
        "tanh_backward_f32_no_use_dst": "double",
    }
    # from src computed in the kernel's own type (f32 in double, f16 in float), diff_dst spans
    # every finite value and only multiplies the result: its blocks are not checked; bf16's
    # blocks in float multiply by it last, unchecked too
    unchecked = {variant.name: first.unchecked for _, variant, first in KERNELS if first.unchecked}
    assert unchecked == {
        f"{op}_{dtype}_no_use_dst": ("diff_dst",)
        for op in ("sigmoid_backward", "tanh_backward")
        for dtype in ("f16", "f32")
    }
    last = {variant.name: first.last_factors for _, variant, first in KERNELS if first.last_factors}
    assert last == {variant.name: ("diff_dst",) for _, variant, _ in BF16_KERNELS} and len(last) == 4
    assert all(set(first.bounds) == set(first.intervals) - set(first.unchecked) for _, _, first in KERNELS)


def bf16_inputs(names: list[str]) -> dict:
    return {name: TABLE.dtypes["bf16"] for name in names}


def analyse(text: str, output: str = "bf16"):
    tree = expr.parse(text)
    names = sorted(expr.names(tree))
    return float_range.input_range(tree, bf16_inputs(names), {}, TABLE.dtypes[output])


@pytest.mark.parametrize(
    "text,why",
    [
        ("log(a) * b", "a function other than abs and exp"),
        ("exp(a * b * c * d) * e", "exp of a rounded argument"),
        ("b / a", "a division by a value that can be 0"),
        ("(exp(a) - 1) * b", "a difference of a rounded value and a number of either sign"),
        ("(a * b * c * d - 1) * e", "a sum of a rounded product (32 significant bits)"),
        ("a if a > 0 else b", "a selection"),
    ],
)
def test_the_analysis_refuses_what_it_cannot_bound(text, why):
    assert analyse(text) is None, why


def test_an_attribute_or_an_f32_output_gets_no_float_path():
    tree = expr.parse("a * alpha")
    assert float_range.input_range(tree, bf16_inputs(["a"]), {}, TABLE.dtypes["bf16"]) is None
    # for an f32 output float may only compute exactly: a product of three bf16 values and a
    # difference (at least 8 + 8 + 9 significant bits) always rounds; (a - 1) * b is exact
    # while |a| and |b| are small enough, and that is the range found
    assert analyse("(a - 1) * b * c", output="f32") is None
    assert analyse("(a - 1) * b", output="f32").roundings == 0


def test_in_double_the_short_exp_counts_as_its_error():
    tree = expr.parse("a * exp(-abs(b)) / (1 + exp(-abs(b)))")
    inputs = {name: TABLE.dtypes["f32"] for name in "ab"}
    assert float_range.input_range(tree, inputs, {}, TABLE.dtypes["f32"]) is None  # float: too few bits
    found = float_range.input_range(tree, inputs, {}, TABLE.dtypes["f32"], float_range.DOUBLE)
    # two exps, each 2^-28.3 (about 2^24.7 roundings of 2^-53), 1 + e, the product, the quotient
    assert found is not None and found.roundings >= 2 * float_range.DOUBLE.exp_roundings
    assert found.intervals["a"] == float_range.Interval(149, 128)  # every finite f32
    assert found.intervals["b"] == float_range.Interval(149, 9)  # e^-|b| normal in double
    assert float_range.Interval(149, 128).c_bounds() == ("0x00000001u", "0x7F7FFFFFu")
    assert float_range.Interval(126, 9).c_bounds() == ("0x00800000u", "0x43FFFFFFu")


def test_the_checks_leave_out_what_no_value_of_the_dtype_can_fail():
    f32, f16, bf16 = (TABLE.dtypes[name] for name in ("f32", "f16", "bf16"))
    # f16's smallest nonzero is 2^-24 and its largest finite below 2^16; f32's 2^-149 and 2^128
    assert float_range.Interval(126, 6).c_bounds(f16) == ("0x00000001u", "0x427FFFFFu")
    assert float_range.Interval(23, 6).c_bounds(f16) == ("0x34000000u", "0x427FFFFFu")
    assert float_range.Interval(126, 6).c_bounds(bf16) == ("0x00800000u", "0x427FFFFFu")  # bf16 has 2^-133
    assert float_range.Interval(126, 16).holds_every_finite(f16)
    assert not float_range.Interval(126, 15).holds_every_finite(f16)
    assert float_range.Interval(24, 16).holds_every_finite(f16)
    assert not float_range.Interval(23, 16).holds_smallest(f16)
    assert not float_range.Interval(23, 16).holds_every_finite(f16)
    assert float_range.Interval(149, 128).holds_every_finite(f32)
    assert not float_range.Interval(148, 128).holds_every_finite(f32)
    assert not float_range.Interval(133, 127).holds_every_finite(bf16)


@pytest.mark.parametrize(
    "text,factors",
    [
        ("a * exp(-abs(b)) / (1 + exp(-abs(b)))", "a"),
        ("a * e / ((1 + e) * (1 + e))", "a"),  # through a definition too: e = exp(-abs(b))
        ("c / (a * exp(b))", "ac"),
        ("a * b + c", ""),  # an infinite a * b plus c: NaN or not, by c's sign
        ("a * (1 - b)", "a"),
        ("exp(a) * b", "b"),
    ],
)
def test_an_input_only_multiplying_or_dividing_the_result_is_a_factor(text, factors):
    """plan.float_first leaves such an input unchecked where it spans every finite value and
    the blocks outside compute in the same type (f32 and f16 from src: diff_dst)."""
    definitions = {"e": expr.parse("exp(-abs(b))")}
    tree = expr.parse(text)
    names = sorted(float_range._inputs(tree, definitions))
    assert [n for n in names if float_range.only_a_factor(tree, n, definitions)] == list(factors)


@pytest.mark.parametrize(
    "text,why",
    [
        ("(exp(a) - 1) * b", "a rounded exp in a difference: cancellation magnifies its 2^-28.3"),
        ("exp(a * b * c) * d", "exp of a rounded argument (72 significant bits)"),
        ("b / a", "a division by a value that can be 0"),
    ],
)
def test_in_double_the_analysis_refuses_what_it_cannot_bound(text, why):
    tree = expr.parse(text)
    inputs = {name: TABLE.dtypes["f32"] for name in expr.names(tree)}
    assert float_range.input_range(tree, inputs, {}, TABLE.dtypes["f32"], float_range.DOUBLE) is None, why


def evaluate(
    tree: ast.expr, values: dict[str, np.ndarray], dtype, definitions=None, nudge=None, exp_error=None
) -> np.ndarray:
    """The formula in `dtype` arithmetic, one rounding per operation, in its written order.
    exp is float64's, moved by `exp_error` times `nudge` (-1, 0, 1 per element), relative,
    then rounded to `dtype`: an exp as far off as opgen_exp_short(f) may be."""

    def value(node: ast.expr) -> np.ndarray:
        if isinstance(node, ast.Constant):
            return dtype(node.value)
        if isinstance(node, ast.Name):
            if definitions and node.id in definitions:
                return value(definitions[node.id])
            return values[node.id].astype(dtype)
        if isinstance(node, ast.UnaryOp):
            return -value(node.operand)
        if isinstance(node, ast.Call):
            argument = value(node.args[0])
            if node.func.id == "abs":
                return np.abs(argument)
            result = np.exp(argument.astype(np.float64))
            if exp_error is not None:
                result = result * (1 + nudge * exp_error)
            return result.astype(dtype)
        operations = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.Div: np.divide}
        return operations[type(node.op)](value(node.left), value(node.right))

    return value(tree)


def formula(spec, variant) -> tuple[ast.expr, dict[str, ast.expr]]:
    """A kernel's output expression, and the element temporaries it reads."""
    math = {e.name: expr.fold(e.tree, variant.constants) for e in spec.math["elements"]}
    return math.pop(spec.outputs[0].name), math


def in_float_blocks(spec, variant, first) -> tuple[ast.expr, dict[str, ast.expr]]:
    """formula(), as the kernel's blocks inside the intervals compute it: an input it
    multiplies in last (first.last_factors) is moved to the end, d * G."""
    tree, definitions = formula(spec, variant)
    for name in first.last_factors:
        tree = ast.BinOp(ast.Name(name), ast.Mult(), float_range.last_factor(tree, name, definitions))
    return tree, definitions


# bf16's smallest subnormal is 2^-133 and its largest finite below 2^128
EVERY_BF16 = float_range.Interval(133, 128)


def intervals_of(first) -> dict[str, float_range.Interval]:
    """A bf16 kernel's intervals; an input it multiplies in last takes any bf16 value."""
    return {**first.intervals, **dict.fromkeys(first.last_factors, EVERY_BF16)}


def bf16_values(generator: np.random.Generator, low: int, high: int, count: int) -> np.ndarray:
    """bf16 values for inputs in [2^-low, 2^high): zeros, the edges, values about 1 (where
    1 - s cancels), and random magnitudes spread over the interval, either sign."""
    largest = float(np.nextafter(BF16(2.0**high), BF16(0)))  # the largest bf16 below 2^high
    edges = [0.0, 2.0**-low, 2.0**-low * (1 + 2**-7), largest, 1.0, 1 - 2**-8, 1 + 2**-7, 0.5, 2.0, 0.75]
    exponents = generator.uniform(-low, high, count)
    values = np.clip(BF16(2.0**exponents).astype(np.float64), 2.0**-low, largest)
    values[: count // 4] = generator.choice(edges, count // 4)
    signs = generator.choice([-1.0, 1.0], count)
    return (values * signs).astype(BF16)


FORMULAS = [
    "a * b * c",
    "(1 - a) * b",
    "(a - b) * c",
    "-abs(a) * (b + 0.5) * a",
    "(a * b - c) * c * a",
    "a * ((1 - b) * (1 + b))",
    "a * exp(-abs(b)) / (1 + exp(-abs(b)))",
    "(abs(a) + exp(b)) * exp(-(b * b))",
    "(a - 1) * b / (exp(-abs(b)) + 1)",
]


@pytest.mark.parametrize("text", FORMULAS)
def test_float_stays_in_range_and_within_1_ulp_at_the_corners(text):
    check_corners(expr.parse(text), {}, text)


# the formulas with an input that multiplies the whole result (float_range.last_factors),
# and whether the rest can pass 1 (the largest factor then overflows)
LAST_FACTOR_FORMULAS = [
    ("a * b * c", True),
    ("(1 - a) * b", True),
    ("(a - b) * c", True),
    ("a * ((1 - b) * (1 + b))", True),
    ("a * exp(-abs(b)) / (1 + exp(-abs(b)))", False),
]


@pytest.mark.parametrize("text,overflows", LAST_FACTOR_FORMULAS)
def test_an_input_multiplied_in_last_may_take_any_value(text, overflows):
    check_corners(expr.parse(text), {}, text, last=True, overflows=overflows)


def test_the_inputs_multiplied_in_last():
    """float_range.last_factors: per formula, the input that multiplies its whole result,
    read once, and the rest, G, which must have a float range of its own."""
    definitions = {"e": expr.parse("exp(-abs(b))")}
    inputs = bf16_inputs(["a", "b", "c", "o"])
    found = {
        text: {
            name: ast.unparse(rest)
            for name, rest, _ in float_range.last_factors(
                {"o": expr.parse(text)}, inputs, definitions, float_range.FLOAT
            ).values()
        }
        for text in [*FORMULAS, "a * e / ((1 + e) * (1 + e))", "c / (a * exp(b))", "-a * b", "a * a", "a / 3"]
    }
    assert found == {
        "a * b * c": {"a": "b * c"},  # the first input in name order
        "(1 - a) * b": {"b": "1 - a"},
        "(a - b) * c": {"c": "a - b"},  # a difference of exact values rounds once, G has a range
        "-abs(a) * (b + 0.5) * a": {},  # a is read twice, b in a sum
        "(a * b - c) * c * a": {},
        "a * ((1 - b) * (1 + b))": {"a": "(1 - b) * (1 + b)"},
        "a * exp(-abs(b)) / (1 + exp(-abs(b)))": {"a": "exp(-abs(b)) / (1 + exp(-abs(b)))"},
        "(abs(a) + exp(b)) * exp(-(b * b))": {},
        "(a - 1) * b / (exp(-abs(b)) + 1)": {},  # b is read twice
        "a * e / ((1 + e) * (1 + e))": {"a": "e / ((1 + e) * (1 + e))"},  # e reads b, not a
        "c / (a * exp(b))": {},  # G = 1 / (a * exp(b)) divides by a value that can be 0
        "-a * b": {"a": "-1 * b"},
        "a * a": {},
        "a / 3": {"a": "1 / 3"},
    }
    # the factor must be read by no definition either
    assert float_range.last_factor(expr.parse("b * e"), "b", definitions) is None


def test_only_a_factor_the_arithmetic_holds_exactly_is_multiplied_in_last():
    """A factor dtype wider than float (a user's f64 row, say) would round in float before the
    product: no factor then; the same formula with a bf16 factor has one."""
    bf16 = TABLE.dtypes["bf16"]
    f64 = replace(TABLE.dtypes["f32"], name="f64", mantissa_bits=52, min_exponent=-1022)
    tree = expr.parse("a * exp(-abs(b))")
    assert float_range.last_factors({"o": tree}, {"a": f64, "b": bf16, "o": bf16}, {}, float_range.FLOAT) == {}
    found = float_range.last_factors({"o": tree}, {"a": bf16, "b": bf16, "o": bf16}, {}, float_range.FLOAT)
    assert [(name, ast.unparse(rest)) for name, rest, _ in found.values()] == [("a", "exp(-abs(b))")]


FLOAT_KERNELS = [(spec, variant, first) for spec, variant, first in KERNELS if first.type == "float"]


@pytest.mark.parametrize("spec,variant,first", FLOAT_KERNELS, ids=[v.name for _, v, _ in FLOAT_KERNELS])
def test_the_bundled_formulas_in_float_at_their_corners(spec, variant, first):
    last = bool(first.last_factors)
    # the rest, G: s * (1 - s) up to 2^127 from dst; G < 1 from src
    overflows = last and bool(variant.constants["use_dst"])
    check_corners(*formula(spec, variant), variant.name, variant.row[spec.reference], last, overflows)


def check_corners(
    tree: ast.expr,
    definitions: dict[str, ast.expr],
    context: str,
    dtype: str = "bf16",
    last: bool = False,
    overflows: bool = False,
) -> None:
    """`tree` on `dtype` inputs at the corners of its float intervals, in float, exp off by
    the whole error bound of the short exp the kernels call (the cheapest float arithmetic
    that has intervals, as plan.float_first picks it: opgen_exp_short3f for bf16,
    opgen_exp_shortf for f16) either way: no overflow, underflow or invalid operation, and
    within 1 ulp of `dtype` (bf16 or f16). `last`: as bf16 kernels compute it, an input that
    multiplies the whole result (float_range.last_factors) multiplied in last, at any bf16
    value: the rest stays in range, the last product may underflow or overflow (`overflows`:
    the data have such products)."""
    names = sorted(set().union(expr.names(tree), *map(expr.names, definitions.values())) - set(definitions))
    inputs = {name: TABLE.dtypes[dtype] for name in names}
    floats = tuple(a for a in float_range.ARITHMETICS if a.name == "float")
    cheapest = float_range.cheapest([tree], inputs, definitions, [TABLE.dtypes[dtype]], floats)
    assert cheapest is not None, f"{context}: expected a float range"
    arithmetic, (found,) = cheapest
    computed, factor = tree, None
    if last:
        both = {**inputs, "o": TABLE.dtypes[dtype]}
        ((factor, computed, found),) = float_range.last_factors({"o": tree}, both, definitions, arithmetic).values()
    generator = rng("corners", context, last)
    count = 200_000
    intervals = {**found.intervals, **({factor: EVERY_BF16} if factor else {})}
    values = {
        name: bf16_values(generator, intervals[name].low, intervals[name].high, count)
        if dtype == "bf16"
        else f32_values(generator, intervals[name].low, intervals[name].high, count, np.float16)
        for name in names
    }
    nudge = generator.integers(-1, 2, count)
    with np.errstate(all="raise"):  # any overflow, underflow or invalid operation fails
        try:
            in_float = evaluate(computed, values, np.float32, definitions, nudge, arithmetic.exp_error)
        except FloatingPointError as error:
            inside = ", ".join(f"{name} in {interval}" for name, interval in intervals.items())
            pytest.fail(describe(f"{context}: float left its range with {inside}: {error}"))
    exact = evaluate(tree, values, np.float64, definitions)  # a few roundings of 2^-53
    assert np.all(np.isfinite(in_float)), context
    tiny = (np.abs(in_float) < 2.0**-126) & (in_float != 0)
    if factor:  # G may be an exact subnormal (b * c of bf16 values): d * G then rounds once
        tiny &= in_float != evaluate(computed, values, np.float64, definitions)
    assert not np.any(tiny), describe(f"{context}: a subnormal result in float")
    if factor:
        with np.errstate(over="ignore", under="ignore"):
            in_float = values[factor].astype(np.float32) * in_float
        # the data reach the ends: subnormal products, and products bf16 rounds to infinity
        assert ((np.abs(exact) < 2.0**-126) & (exact != 0)).any(), context
        assert (np.abs(exact) >= (2 - 2.0**-8) * 2.0**127).any() == overflows, context
    assert_ulps(in_float.astype(np.dtype(TABLE.dtypes[dtype].numpy)), exact, dtype, 1, f"{context} in float")


@pytest.mark.parametrize("spec,variant,first", F32_KERNELS, ids=[v.name for _, v, _ in F32_KERNELS])
def test_the_f32_formulas_in_double_with_the_short_exp_at_their_corners(spec, variant, first):
    """f32 inputs at the corners of the double intervals, exp off by the short polynomial's whole
    error bound either way: double stays in its normal range (any overflow, underflow or
    invalid operation fails) and the result is within 1 ulp of f32."""
    tree, definitions = formula(spec, variant)
    found = float_range.input_range(tree, variant.dtypes, definitions, TABLE.dtypes["f32"], float_range.DOUBLE)
    generator = rng("double corners", variant.name)
    count = 200_000
    values = {
        name: f32_values(generator, interval.low, interval.high, count) for name, interval in found.intervals.items()
    }
    nudge = generator.integers(-1, 2, count)
    with np.errstate(all="raise"):
        in_double = evaluate(tree, values, np.float64, definitions, nudge, float_range.DOUBLE.exp_error)
    exact = evaluate(tree, values, np.float64, definitions)
    assert np.all(np.isfinite(in_double)) and np.all((in_double == 0) | (np.abs(in_double) >= 2.0**-1022))
    assert_ulps(in_double.astype(np.float32), exact, "f32", 1, f"{variant.name} in double")


def f32_values(generator: np.random.Generator, low: int, high: int, count: int, dtype=np.float32) -> np.ndarray:
    """f32 (or `dtype`) values for inputs in [2^-low, 2^high): zeros, the edges, values about
    1 and random magnitudes spread over the interval (within `dtype`'s range), either sign."""
    largest = min(2.0**high * (1 - 2.0**-24), float(np.finfo(dtype).max))  # the largest below 2^high
    smallest = 2.0**-low
    edges = [0.0, smallest, float(np.nextafter(np.float32(smallest), np.float32(1))), largest, 1.0, 0.5, 2.0]
    values = np.clip(2.0 ** generator.uniform(-low, high, count), smallest, largest)
    values[: count // 4] = generator.choice(edges, count // 4)
    return (values * generator.choice([-1.0, 1.0], count)).astype(dtype)


FROM_SRC_SCRIPT = textwrap.dedent("""
    import sys, numpy as np, opgen
    with np.load(sys.argv[1]) as archive:
        first, diff_dst = archive["x"], archive["dd"]
    results = {op: getattr(opgen, op)(first, diff_dst, use_dst=False) for op in sys.argv[3:]}
    np.savez(sys.argv[2], target=np.array(opgen.info()["cpu_target"]), **results)
""")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("target", [t["name"] for t in TARGETS])
def test_from_src_kernels_on_blocks_inside_at_and_past_the_edges(target, dtype, tmp_path):
    """f32 (double, opgen_exp_short) and f16 (float, opgen_exp_shortf) from src on every
    target: blocks inside the intervals, blocks with one value past them, where the short exp
    alone would be wrong (|x| of 100 or 600 and more scales by 2^k outside the exponent field:
    garbage, not 0), NaN, infinities, and an odd tail."""
    names = [t["name"] for t in TARGETS]
    if names.index(target) > names.index(opgen.info()["cpu_target"]):
        pytest.skip(f"this CPU cannot run {target}")
    kernels = [(v, first) for _, v, first in KERNELS if v.row["src_or_dst"] == dtype and not v.constants["use_dst"]]
    assert {first.type for _, first in kernels} == {"double" if dtype == "f32" else "float"}
    ops = sorted(v.op.name for v, _ in kernels)
    x_high = min(first.intervals["src_or_dst"].high for _, first in kernels)
    numpy_dtype = np.dtype(TABLE.dtypes[dtype].numpy)
    generator = rng("from src kernels", target, dtype)
    blocks = 96
    count = blocks * BLOCK + TAIL
    x = f32_values(generator, 149, x_high, count, numpy_dtype)
    diff_dst = f32_values(generator, 149, 128, count, numpy_dtype)
    past = [2.0**x_high, 100.0, 600.0, 1e6, np.inf, np.nan, float(np.finfo(numpy_dtype).max)]
    with np.errstate(over="ignore"):  # 1e6 is an infinity in f16
        for block in range(blocks // 2, blocks):
            lane = block * BLOCK + int(generator.integers(BLOCK))
            if generator.random() < 0.75:
                x[lane] = generator.choice(past) * generator.choice([-1.0, 1.0])
            else:
                diff_dst[lane] = generator.choice([np.inf, -np.inf, np.nan])
    x[-TAIL::2] = 600.0
    inputs, outputs = tmp_path / "inputs.npz", tmp_path / "outputs.npz"
    np.savez(inputs, x=x, dd=diff_dst)
    run_on_target(target, FROM_SRC_SCRIPT, str(inputs), str(outputs), *ops)
    with np.load(outputs) as archive:
        assert str(archive["target"]) == target, "OPGEN_CPU_TARGET did not select the target"
        for op in ops:
            expected = getattr(oracle, op)(x.astype(np.float64), diff_dst.astype(np.float64), use_dst=False)
            assert_ulps(archive[op], expected, dtype, 1, f"{op} {dtype} from src, {target} target")


SCRIPT = textwrap.dedent("""
    import sys, ml_dtypes, numpy as np, opgen
    results = {}
    with np.load(sys.argv[1]) as archive:
        for use_dst in (True, False):
            first, diff_dst = (archive[f"{name}_{use_dst}"].astype(ml_dtypes.bfloat16) for name in ("x", "dd"))
            for op in ("sigmoid_backward", "tanh_backward"):
                results[f"{op}_{use_dst}"] = getattr(opgen, op)(first, diff_dst, use_dst=use_dst).astype(np.float64)
    np.savez(sys.argv[2], target=np.array(opgen.info()["cpu_target"]), **results)
""")

# (src_or_dst, diff_dst) for which the blocks' float path is more than 1 ulp off (test
# below), each in the last whole block of the kernels' data: from dst, float overflows on the
# way to a finite result, at s * (1 - s) or at (1 - t) * (1 + t), before the product by a
# tiny dd; from src, exp(-100) is an f32 subnormal of a few bits, which a large diff_dst
# brings back to bf16's normal range
FLOAT_FAILS = {
    ("sigmoid_backward", True): (2.0**64, 2.0**-60),
    ("tanh_backward", True): (2.0**70, 2.0**-60),
    ("sigmoid_backward", False): (100.0, 2.0**120),
    ("tanh_backward", False): (50.0, 2.0**120),
}
TAIL = 13


def kernel_inputs(
    intervals: dict[str, tuple[int, int]], use_dst: bool, generator: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Blocks inside the inputs' intervals (low, high); blocks with one value just outside
    its interval (an edge past it, a subnormal, the largest bf16, an infinity, a NaN), and
    FLOAT_FAILS; an odd tail mixing both."""
    blocks = 96
    arrays = {name: bf16_values(generator, low, high, blocks * BLOCK + TAIL) for name, (low, high) in intervals.items()}

    def past(name: str) -> list[float]:
        low, high = intervals[name]
        info = ml_dtypes.finfo(BF16)
        edges = [2.0**high, float(np.nextafter(BF16(2.0**-low), BF16(0)))]
        return [*edges, float(info.smallest_subnormal), float(info.max), np.inf, np.nan]

    for block in range(blocks // 2, blocks):
        lane = block * BLOCK + int(generator.integers(BLOCK))
        name = "src_or_dst" if generator.random() < 0.5 else "diff_dst"
        arrays[name][lane] = BF16(generator.choice(past(name)) * generator.choice([-1.0, 1.0]))
    src_or_dst, diff_dst = arrays["src_or_dst"], arrays["diff_dst"]
    for lane, ((_, form), (value, diff)) in zip(fail_lanes(), FLOAT_FAILS.items()):
        if form == use_dst:
            src_or_dst[lane], diff_dst[lane] = BF16(value), BF16(diff)
    for lane in range(blocks * BLOCK, blocks * BLOCK + TAIL, 2):
        diff_dst[lane] = BF16(past("diff_dst")[lane % len(past("diff_dst"))])
    return src_or_dst, diff_dst


def fail_lanes() -> list[int]:
    return [-TAIL - 3 - 2 * i for i in range(len(FLOAT_FAILS))]


@pytest.mark.slow
@pytest.mark.parametrize("target", [t["name"] for t in TARGETS])
def test_kernels_on_blocks_inside_at_and_past_the_edges(target, tmp_path):
    names = [t["name"] for t in TARGETS]
    if names.index(target) > names.index(opgen.info()["cpu_target"]):
        pytest.skip(f"this CPU cannot run {target}")
    assert {(v.op.name, v.constants["use_dst"]) for _, v, _ in BF16_KERNELS} == set(FLOAT_FAILS)
    arrays = {}
    for use_dst in (True, False):
        # both ops' intervals hold the data: the narrower of the two, per input
        found = [intervals_of(first) for _, v, first in BF16_KERNELS if v.constants["use_dst"] == use_dst]
        intervals = {
            name: (min(f[name].low for f in found), min(f[name].high for f in found))
            for name in ("src_or_dst", "diff_dst")
        }
        values, diff_dst = kernel_inputs(intervals, use_dst, rng("kernels", target, use_dst))
        arrays[f"x_{use_dst}"], arrays[f"dd_{use_dst}"] = values, diff_dst
    inputs, outputs = tmp_path / "inputs.npz", tmp_path / "outputs.npz"
    np.savez(inputs, **{name: array.astype(np.float64) for name, array in arrays.items()})
    run_on_target(target, SCRIPT, str(inputs), str(outputs))
    with np.load(outputs) as archive:
        assert str(archive["target"]) == target, "OPGEN_CPU_TARGET did not select the target"
        for lane, (op, use_dst) in zip(fail_lanes(), FLOAT_FAILS):
            first, diff_dst = arrays[f"x_{use_dst}"], arrays[f"dd_{use_dst}"]
            expected = getattr(oracle, op)(first, diff_dst, use_dst=use_dst)
            got = archive[f"{op}_{use_dst}"].astype(BF16)
            # every element, FLOAT_FAILS' at `lane` among them
            assert_ulps(got, expected, "bf16", 1, f"{op} bf16 use_dst={use_dst}, {target} target")
            assert first[lane] == BF16(FLOAT_FAILS[op, use_dst][0])


@pytest.mark.parametrize("case", list(FLOAT_FAILS), ids=[f"{op}-use_dst={form}" for op, form in FLOAT_FAILS])
def test_the_data_has_cases_float_alone_gets_wrong(case):
    spec = next(s for s in opgen.bundled.specs if s.name == case[0])
    variant, path = next((v, f) for _, v, f in BF16_KERNELS if v.op is spec and v.constants["use_dst"] == case[1])
    tree, definitions = in_float_blocks(spec, variant, path)
    first, diff_dst = (np.array([value]).astype(BF16) for value in FLOAT_FAILS[case])
    with np.errstate(all="ignore"):
        in_float = evaluate(tree, {"src_or_dst": first, "diff_dst": diff_dst}, np.float32, definitions)
    expected = getattr(oracle, spec.name)(first, diff_dst, use_dst=case[1])
    assert np.isfinite(expected[0]) and expected[0] != 0
    bad = accuracy.ulps_off(in_float.astype(BF16), expected, TABLE.dtypes["bf16"], 1)
    assert bad[0], f"float alone gives {in_float[0]}, within 1 ulp of {expected[0]}"


TWO_OUTPUTS = """
[op]
name = "two_outputs"
summary = "Two outputs of x and y through a temporary, an exp and a division."
source = "a user's own op"
pattern = "elementwise"
compute = "wide"

[[inputs]]
name = "x"
doc = "Input."

[[inputs]]
name = "y"
doc = "Input."

[[outputs]]
name = "first"
doc = "(x * y) * (1 - y)."

[[outputs]]
name = "second"
doc = "y * e / (2 + e), e = exp(-|x|)."

[[dtypes]]
x = "bf16"
y = "bf16"
first = "bf16"
second = "bf16"

[math.elements]
product = "x * y"
decay = "exp(-abs(x))"
first = "product * (1 - y)"
second = "y * decay / (2 + decay)"
"""


@pytest.mark.slow
def test_a_users_spec_with_two_outputs_gets_the_intervals_both_allow(tmp_path):
    """Each input's interval is the narrower of the two outputs' (x: below 2^6 for the exp, y:
    what (x * y) * (1 - y) allows); blocks inside and outside them match float64 math."""
    directory = tmp_path / "specs"
    directory.mkdir()
    shutil.copy(BUNDLED_SPECS / "dtypes.toml", directory)
    (directory / "two_outputs.toml").write_text(TWO_OUTPUTS)
    spec = load_spec(directory / "two_outputs.toml", TABLE)
    (variant,) = plan.variants(spec, TABLE)
    first = plan.kernel(variant, TABLE).float_first
    math = {e.name: e.tree for e in spec.math["elements"]}
    alone = {
        output: float_range.input_range(math[output], variant.dtypes, math, TABLE.dtypes["bf16"]).intervals
        for output in ("first", "second")
    }
    for name in ("x", "y"):
        narrower = float_range.Interval(
            min(a[name].low for a in alone.values() if name in a),
            min(a[name].high for a in alone.values() if name in a),
        )
        assert first.intervals[name] == narrower
    assert first.intervals["x"].high == 6  # exp(-|x|) stays normal below 2^6 only

    library = opgen.load(directory)
    generator = rng("two outputs")
    count = 64 * BLOCK + 7
    x, y = (generator.standard_normal(count) for _ in range(2))
    outside = [2.0**70, 1e-40, np.inf, np.nan, 300.0]
    for block in range(32, 64):
        (x if block % 2 else y)[block * BLOCK + block % BLOCK] = outside[block % len(outside)]
    x, y = x.astype(BF16), y.astype(BF16)
    got_first, got_second = library.two_outputs(x, y)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    with np.errstate(all="ignore"):
        decay = np.exp(-np.abs(x64))
        assert_ulps(got_first, (x64 * y64) * (1 - y64), "bf16", 1, "two_outputs first")
        assert_ulps(got_second, y64 * decay / (2 + decay), "bf16", 1, "two_outputs second")


def build_and_run(tmp_path: Path, test: str, fused: bool) -> str:
    """Compile tests/c/`test`.c against the generated header, with C's fma() or with a
    multiply and an add, and return what it prints."""
    if shutil.which(compiler()[0]) is None:
        pytest.skip("no C compiler")
    if fused and platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("-mfma is an x86-64 flag")
    names = [t["name"] for t in TARGETS]
    if fused and names.index(opgen.info()["cpu_target"]) < names.index("avx2"):
        pytest.skip("this CPU has no FMA")
    for name, text in LIBRARY.files.items():
        (tmp_path / name).write_text(text)
    source = Path(__file__).parent / "c" / f"{test}.c"
    flags = ["-std=c99", "-O2", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", *(["-mfma"] if fused else [])]
    command = [*compiler(), *flags, f"-I{tmp_path}", str(source), "-o", str(tmp_path / test), "-lm"]
    built = subprocess.run(command, capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    result = subprocess.run([str(tmp_path / test)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout
    return result.stdout


@pytest.mark.parametrize("fused", [False, True], ids=["mul-add", "fma"])
def test_the_nonpositive_exps_give_the_full_exps_bits(tmp_path, fused):
    """opgen_exp_nonpositive(f), called where expr.nonpositive shows the argument is never above
    0, clamps from below only: on such arguments (and NaN), the bits of opgen_exp(f), which
    clamps from both sides (tests/c/exp_nonpositive.c)."""
    lines = build_and_run(tmp_path, "exp_nonpositive", fused).splitlines()
    found = {name: (int(count), int(other)) for name, count, other in map(str.split, lines)}
    assert found.keys() == {"opgen_exp_nonpositive", "opgen_exp_nonpositivef"}
    assert found["opgen_exp_nonpositive"][0] > 1 << 24 and found["opgen_exp_nonpositivef"][0] > 35_000_000
    assert found["opgen_exp_nonpositive"][1] == 0 and found["opgen_exp_nonpositivef"][1] == 0


@pytest.mark.parametrize("fused", [False, True], ids=["mul-add", "fma"])
def test_the_line_exp_is_within_1_ulp_on_every_third_negative_float(tmp_path, fused):
    """opgen_exp_linef, the along_axes kernels' exp of an argument never above 0, is not
    opgen_expf's bits but as accurate: within 2^-23 of e^x relatively (the along_axes bounds'
    1 ulp) on every third negative float, fused and not (tests/c/exp_line.c; every one when it
    was written: a full sweep doubled CI's time for this check)."""
    checked, outside, largest = build_and_run(tmp_path, "exp_line", fused).split()
    assert int(checked) == (1 << 31) // 3 + 1
    assert int(outside) == 0, f"{outside} arguments beyond 2^-23 (largest relative error 2^{largest})"
    assert float(largest) < -23


@pytest.mark.parametrize(
    ("text", "maxima", "nonpositive"),
    [
        ("-abs(x)", {}, True),
        ("-2 * abs(x)", {}, True),
        ("abs(x) * -0.5", {}, True),
        ("0 * abs(x)", {}, True),
        ("x - m", {"m": "x"}, True),
        ("(x - y) - m", {"m": "x - y"}, True),
        ("-x", {}, False),
        ("abs(x)", {}, False),
        ("2 * abs(x)", {}, False),
        ("-2 * x", {}, False),
        ("x - m", {}, False),
        ("x - m", {"m": "y"}, False),
        ("m - x", {"m": "x"}, False),
        ("-abs(x) + 1", {}, False),
    ],
)
def test_nonpositive_knows_the_forms_that_never_exceed_0(text, maxima, nonpositive):
    """expr.nonpositive, which picks opgen_exp_nonpositive: -abs(y), c <= 0 times abs(y), and y
    minus the line's largest y; nothing else, whatever its inputs could be."""
    trees = {name: expr.parse(term) for name, term in maxima.items()}
    assert expr.nonpositive(expr.parse(text), trees) is nonpositive
    c = expr.to_c(expr.parse(f"exp({text})"), {n: n for n in ("x", "y", "m")}, "", "", "select", maxima=trees)
    assert c.startswith("opgen_exp_nonpositive(" if nonpositive else "opgen_exp(")
    line = expr.to_c(expr.parse(f"exp({text})"), {n: n for n in "xym"}, "", "", "s", maxima=trees, exp_nonpositive="L")
    assert line.startswith("L(" if nonpositive else "opgen_exp(")


@pytest.mark.parametrize(
    "text,c",
    [
        ("exp(-abs(x))", "E(fabs(x), -1.0)"),
        ("exp(-2 * abs(x))", "E(fabs(x), -2.0)"),
        ("exp(x * -0.25 * 2) + exp(3 * x)", "(E(x, -0.5) + E((3.0 * x), 1.0))"),  # 3: not a power of 2
        ("exp(-(2 * (-x)))", "E(x, 2.0)"),
        ("exp(x * 1024)", "E((x * 1024.0), 1.0)"),  # beyond 2^8: its powers could leave float's range
        ("exp(a * b) * exp(-a)", "(E((a * b), 1.0) * E(a, -1.0))"),
    ],
)
def test_the_blocks_fold_power_of_2_factors_of_exp_arguments_into_the_exp(text, c):
    """expr.scaled_exps: exp(scale * y) becomes opgen_exp_short(y, scale), whose inlined
    constants take the scale (the bits are the same: test below)."""
    tree = expr.scaled_exps(expr.parse(text))
    assert expr.to_c(tree, {n: n for n in "abx"}, "", "", "select", {"exp": "E"}) == c


@pytest.mark.parametrize(
    "text,c",
    [
        ("0.5 + 0.5 * x", "S(0.5, x, 0.5)"),
        ("x * -4 + 1", "S(-4.0, x, 1.0)"),
        ("0.25 * (a + b) - 3", "S(0.25, (a + b), -3.0)"),
        ("1 - 2 * x", "S(-2.0, x, 1.0)"),
        ("3 * x + 1", "((3.0 * x) + 1.0)"),  # 3: not a power of 2, the product rounds
        ("0.5 * x + a", "((0.5 * x) + a)"),  # not a constant: both could be tiny
        ("0.5 * x + 1e-35", "((0.5 * x) + 1e-35)"),  # below 2^-100: an underflowed product could move it
        ("2 * x - 3e38", "((2.0 * x) - 3e+38)"),  # above 2^100: fused, 2 * max - 3e38 would be finite
        ("0.5 * x * a + 1", "(((0.5 * x) * a) + 1.0)"),
    ],
)
def test_a_power_of_2_times_a_value_plus_a_constant_becomes_one_multiply_add(text, c):
    """expr._scale_add: c * x + k as opgen_scale_add(f)(c, x, k), fused where the target has
    FMA (the bits stay those of a multiply and an add: test below); other sums stay as written."""
    tree = expr.parse(text)
    assert expr.to_c(tree, {n: n for n in "abx"}, "", "", "select", {}).replace("opgen_scale_add", "S") == c


@pytest.mark.parametrize(
    "text,vector",
    [
        ("d * exp(-2 * abs(x))", "_mm512_mul_ps(d, E_vector(opgen_abs_vector(x), -2.0f))"),
        ("1 - 0.5 * x", "opgen_scale_add_vector(-0.5f, x, 1.0f)"),
        ("-(x / d) + 3", "_mm512_add_ps(opgen_negate_vector(_mm512_div_ps(x, d)), _mm512_set1_ps(3.0f))"),
        ("x if x > 0 else d", None),  # selects and comparisons: the lane loop
        ("log(x)", None),  # a function without a vector form
    ],
)
def test_the_float_path_in_intrinsics_has_the_operations_of_its_c(text, vector):
    """expr.to_vector: the float path's math as AVX-512 intrinsics, one for each operation of
    to_c's C, in the same order (hence the same bits: test_targets_agree_bit_for_bit compares
    the avx512 copy with the avx2 copy's lane loops); None where it has no such form."""
    tree = expr.scaled_exps(expr.parse(text))
    assert expr.to_vector(tree, {"d": "d", "x": "x"}, "E") == vector


@pytest.mark.parametrize(
    "text,vector",
    [
        (
            "0 if x > 0 else x * d",
            "opgen_doubles_select(x, opgen_doubles_set1(0.0), _CMP_GT_OQ, "
            "opgen_doubles_set1(0.0), opgen_doubles_mul(x, d))",
        ),
        (
            "d if x != 1 else -x",
            "opgen_doubles_select(x, opgen_doubles_set1(1.0), _CMP_NEQ_UQ, d, opgen_doubles_negate(x))",
        ),
        ("(x - d) / 3", "opgen_doubles_div(opgen_doubles_sub(x, d), opgen_doubles_set1(3.0))"),
        ("1 - 0.5 * x", None),  # a scale-add, which the C may fuse
        ("x if 0 < x < 1 else d", None),  # a chained comparison
        ("abs(x) * d", None),  # a function
    ],
)
def test_the_sum_terms_on_double_vectors_have_the_operations_of_their_c(text, vector):
    """expr.to_vector_double: a sum term on double vectors (opgen_doubles: AVX2 or AVX-512), one
    operation for each of to_c's C in double, in the same order, C's comparisons (false on NaN,
    but !=) and both arms of a select computed (hence the same bits: test_targets_agree_bit_for_bit
    compares the avx2 and avx512 copies, which run them for f32 PReLU, with the baseline's lane loops);
    None where it has no such form."""
    assert expr.to_vector_double(expr.parse(text), {"d": "d", "x": "x"}) == vector


@pytest.mark.slow
def test_the_fused_scale_add_keeps_the_bits_of_a_multiply_and_an_add(tmp_path):
    """opgen_scale_add(f) with C's fma(): the same bits as c * x + k rounded twice, on float
    and double patterns that include subnormals, infinities and NaNs (tests/c/scale_add.c)."""
    checked, mismatches = map(int, build_and_run(tmp_path, "scale_add", True).split())
    assert checked > 50_000_000 and mismatches == 0


@pytest.mark.parametrize("degree", range(3, 9))
def test_the_exp_polynomials_are_within_their_stated_bounds(degree):
    """float_range.exp_polynomial's bound holds for e^r on |r| <= 0.35 (the polynomial in
    double, against math.exp: 2^-50 at most of rounding, under 2^-10 of the bounds here), and
    is no more than 10 % above the worst error: the economized polynomial is that good, and
    the bound that tight. Taylor's series of the same degree is 2^(degree - 1) times worse."""
    coefficients, bound = float_range.exp_polynomial(degree)
    values = [float(c) for c in coefficients]
    worst = 0.0
    for r in np.linspace(-0.35, 0.35, 7001):
        polynomial = 0.0
        for c in reversed(values):
            polynomial = polynomial * r + c
        worst = max(worst, abs(polynomial / math.exp(r) - 1))
    assert 0.9 * bound < worst <= bound * (1 - 2.0**-10)
    taylor = sum(0.35**n / math.factorial(n) for n in range(degree + 1))
    assert abs(taylor / math.exp(0.35) - 1) > 2 ** (degree - 1) * bound


@pytest.mark.slow
@pytest.mark.parametrize("fused", [False, True], ids=["mul-add", "fma"])
def test_the_short_exps_are_within_their_stated_errors(tmp_path, fused):
    """Inside the intervals the blocks call opgen_exp_short(f): against opgen_exp (within an
    ulp or two of double) their relative error stays below the bound the analysis counts
    (float_range.Arithmetic.exp_error; tests/c/exp_short.c), with C's fma() and with a
    multiply and an add. Above a quarter of it too: the polynomials really are that short (the
    check could not pass with opgen_exp itself), and the bound is not loose. A power-of-2
    scale (expr.scaled_exps) changes no bit: e^(scale * (x / scale)) is e^x's exactly."""
    lines = build_and_run(tmp_path, "exp_short", fused).splitlines()
    found = {name: (int(count), float.fromhex(worst)) for name, count, worst in map(str.split, lines)}
    functions = [a.exp_function for a in float_range.ARITHMETICS]
    assert found.keys() == {*functions, *(f"scaled_{f}" for f in functions)}
    for arithmetic in float_range.ARITHMETICS:
        checked, worst = found[arithmetic.exp_function]
        count = 16_000_000 if arithmetic.name == "double" else 10_000_000
        assert checked > count and arithmetic.exp_error / 4 < worst <= arithmetic.exp_error, (arithmetic, worst)
        assert found[f"scaled_{arithmetic.exp_function}"] == (4 * checked, 0.0)
