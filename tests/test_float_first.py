"""Kernels computed in double that compute a block in float first (opgen/float_range.py,
plan.kernel's float_first): the intervals the analysis derives, f32 arithmetic at their
corners, and the kernels, on every target, on blocks inside an interval, on its edges and
just outside it."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import opgen
from opgen import expr, float_range, oracle, plan
from opgen.plan import BLOCK, TARGETS
from tests.helpers import TABLE, assert_ulps, describe, rng

BF16 = ml_dtypes.bfloat16
KERNELS = [
    (spec, variant, plan.kernel(variant, TABLE)["float_first"])
    for spec in opgen.bundled.specs
    for variant in plan.variants(spec, TABLE)
    if plan.kernel(variant, TABLE)["float_first"]
]


def test_the_bundled_kernels_that_compute_in_float_first():
    # Only bf16 from-dst sigmoid and tanh: f32 outputs need more than f32's precision, f16 is
    # computed in float anyway, the seeds' ops are, and from src calls exp.
    # Inputs in [2^-L, 2^H), (dd * s) * (1 - s): dd * s < 2^2H, 1 - s < 2^(H + 1), so the
    # product < 2^(3H + 1) <= 2^127: H = 42. dd * s >= 2^-2L and a nonzero 1 - s >= 2^-8
    # (s >= 1/2 is a multiple of 2^-8, else 1 - s > 1/2), so the product >= 2^(-2L - 8)
    # >= 2^-126: L = 59.
    # dd * ((1 - t) * (1 + t)): each factor < 2^(H + 1), all < 2^(3H + 2) <= 2^127: H = 41;
    # each factor >= 2^-8, dd * both >= 2^(-L - 16) >= 2^-126: L = 110.
    found = {variant.name: (first["low"], first["high"]) for _, variant, first in KERNELS}
    assert found == {"sigmoid_backward_bf16_use_dst": (59, 42), "tanh_backward_bf16_use_dst": (110, 41)}


def bf16_inputs(names: list[str]) -> dict:
    return {name: TABLE.dtypes["bf16"] for name in names}


def analyse(text: str, output: str = "bf16"):
    tree = expr.parse(text)
    names = sorted(expr.names(tree))
    return float_range.input_range(tree, bf16_inputs(names), {}, TABLE.dtypes[output])


@pytest.mark.parametrize(
    "text,why",
    [
        ("exp(a) * b", "a function other than abs"),
        ("a / b", "a division"),
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


def evaluate(tree: ast.expr, values: dict[str, np.ndarray], dtype) -> np.ndarray:
    """The formula in `dtype` arithmetic, one rounding per operation, in its written order."""
    if isinstance(tree, ast.Constant):
        return dtype(tree.value)
    if isinstance(tree, ast.Name):
        return values[tree.id].astype(dtype)
    if isinstance(tree, ast.UnaryOp):
        return -evaluate(tree.operand, values, dtype)
    if isinstance(tree, ast.Call):
        return np.abs(evaluate(tree.args[0], values, dtype))
    left, right = evaluate(tree.left, values, dtype), evaluate(tree.right, values, dtype)
    return {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply}[type(tree.op)](left, right)


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
]


@pytest.mark.parametrize("text", FORMULAS)
def test_float_stays_in_range_and_within_1_ulp_at_the_corners(text):
    check_corners(expr.parse(text), text)


@pytest.mark.parametrize("spec,variant,first", KERNELS, ids=[v.name for _, v, _ in KERNELS])
def test_the_bundled_formulas_in_float_at_their_corners(spec, variant, first):
    math = {name: expr.fold(expr.parse(text), variant.constants) for name, text in spec.math["elements"]}
    check_corners(math[spec.outputs[0].name], variant.name)


def check_corners(tree: ast.expr, context: str) -> None:
    names = sorted(expr.names(tree))
    found = float_range.input_range(tree, bf16_inputs(names), {}, TABLE.dtypes["bf16"])
    assert found is not None, f"{context}: expected a float range"
    generator = rng("corners", context)
    values = {name: bf16_values(generator, found.low, found.high, 200_000) for name in names}
    with np.errstate(all="raise"):  # any overflow, underflow or invalid operation fails
        try:
            in_float = evaluate(tree, values, np.float32)
        except FloatingPointError as error:
            pytest.fail(describe(f"{context}: float left its range inside [2^-{found.low}, 2^{found.high}): {error}"))
    exact = evaluate(tree, values, np.float64)  # at most 4 roundings of 2^-53
    assert np.all(np.isfinite(in_float)), context
    tiny = np.abs(in_float) < 2.0**-126
    assert not np.any(tiny & (in_float != 0)), describe(f"{context}: a subnormal result in float")
    assert_ulps(in_float.astype(BF16), exact, "bf16", 1, f"{context} in float")


SCRIPT = textwrap.dedent("""
    import sys, ml_dtypes, numpy as np, opgen
    with np.load(sys.argv[1]) as archive:
        dst, diff_dst = (archive[name].astype(ml_dtypes.bfloat16) for name in ("dst", "diff_dst"))
    results = {op: getattr(opgen, op)(dst, diff_dst).astype(np.float64) for op in ("sigmoid_backward", "tanh_backward")}
    np.savez(sys.argv[2], target=np.array(opgen.info()["cpu_target"]), **results)
""")


# (dst, diff_dst) whose exact result is finite while float overflows on the way to it:
# (dd * s) * (1 - s) at dd * s, dd * ((1 - t) * (1 + t)) at (1 - t) * (1 + t)
OVERFLOWS = {"sigmoid_backward": (1.5, 3e38), "tanh_backward": (2.0**70, 2.0**-60)}
OVERFLOW_LANES = (-3 - 13, -5 - 13)  # in the last whole block (the tail has 13 elements)


def kernel_inputs(first: dict, generator: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Blocks inside [2^-low, 2^high); blocks with one value just outside it (an edge past
    it, a subnormal, the largest bf16, an infinity, a NaN, or a diff_dst that overflows float
    or a dst that overflows float on the way to a finite result: OVERFLOWS); an odd tail
    mixing both."""
    low, high = first["low"], first["high"]
    blocks = 96
    dst, diff_dst = (bf16_values(generator, low, high, blocks * BLOCK + 13) for _ in range(2))
    past = [
        2.0**high,
        float(np.nextafter(BF16(2.0**-low), BF16(0))),
        float(ml_dtypes.finfo(BF16).smallest_subnormal),
        float(ml_dtypes.finfo(BF16).max),
        np.inf,
        np.nan,
    ]
    for block in range(blocks // 2, blocks):
        lane = block * BLOCK + int(generator.integers(BLOCK))
        target = dst if generator.random() < 0.5 else diff_dst
        target[lane] = BF16(generator.choice(past) * generator.choice([-1.0, 1.0]))
    for lane, (dst_value, diff_dst_value) in zip(OVERFLOW_LANES, OVERFLOWS.values()):
        dst[lane], diff_dst[lane] = BF16(dst_value), BF16(diff_dst_value)
    for lane in range(blocks * BLOCK, blocks * BLOCK + 13, 2):
        diff_dst[lane] = BF16(past[lane % len(past)])
    return dst, diff_dst


@pytest.mark.parametrize("target", [t["name"] for t in TARGETS])
def test_kernels_on_blocks_inside_at_and_past_the_edges(target, tmp_path):
    names = [t["name"] for t in TARGETS]
    if names.index(target) > names.index(opgen.info()["cpu_target"]):
        pytest.skip(f"this CPU cannot run {target}")
    firsts = {variant.op.name: first for _, variant, first in KERNELS}
    assert set(firsts) == {"sigmoid_backward", "tanh_backward"}
    # both ops' intervals hold the data: the narrower of the two
    first = {"low": min(f["low"] for f in firsts.values()), "high": min(f["high"] for f in firsts.values())}
    dst, diff_dst = kernel_inputs(first, rng("kernels", target))
    inputs, outputs = tmp_path / "inputs.npz", tmp_path / "outputs.npz"
    np.savez(inputs, dst=dst.astype(np.float64), diff_dst=diff_dst.astype(np.float64))
    environment = {**os.environ, "OPGEN_CPU_TARGET": target}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(inputs), str(outputs)],
        env=environment,
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent.parent,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    with np.load(outputs) as archive:
        assert str(archive["target"]) == target, "OPGEN_CPU_TARGET did not select the target"
        for op in ("sigmoid_backward", "tanh_backward"):
            expected = getattr(oracle, op)(dst, diff_dst)
            got = archive[op].astype(BF16)
            assert_ulps(got, expected, "bf16", 1, f"{op} bf16 from dst, {target} target")
            lane = OVERFLOW_LANES[list(OVERFLOWS).index(op)]
            assert np.isfinite(got[lane]), f"{op}: {got[lane]} where float overflows and the result does not"


@pytest.mark.parametrize("spec,variant,first", KERNELS, ids=[v.name for _, v, _ in KERNELS])
def test_the_overflow_cases_overflow_in_float(spec, variant, first):
    """The kernels' test data holds a case where float alone would give an infinity."""
    math = {name: expr.fold(expr.parse(text), variant.constants) for name, text in spec.math["elements"]}
    dst, diff_dst = (np.array([value]) for value in OVERFLOWS[spec.name])
    with np.errstate(over="ignore", invalid="ignore"):
        in_float = evaluate(math[spec.outputs[0].name], {"src_or_dst": dst, "diff_dst": diff_dst}, np.float32)
    assert not np.isfinite(in_float[0])
    assert np.isfinite(getattr(oracle, spec.name)(dst.astype(BF16), diff_dst.astype(BF16))[0])
