"""When a kernel computed in double may compute a block in float first.

bf16 data takes several roundings in double (spec `compute = "wide"`) because f32 has bf16's
range: a product of bf16 values can overflow or underflow in f32. But when every input of a
block is 0 or of a magnitude well inside f32's range, f32 arithmetic of a formula made of
products, quotients, exp of exact values, sums of exact values and sums of terms of one sign
stays in f32's normal range, each operation rounds once by at most 2^-24 relative (exp
twice), and no rounding error is magnified by cancellation: the result is
within 1 ulp of a short output dtype (bf16) from the exact value rounded. `input_range` finds
that magnitude interval by interval arithmetic on exponents; the kernels check it per block
and compute the blocks that fail it in double, as before.

Each node is summarised, for nonzero values, by [2^lo, 2^hi) bounding its magnitude, its
significant bits when f32 computes it exactly (None once rounded), the roundings it took
(relative errors of 2^-24 each: they add up through products and quotients, and through
sums of terms of one sign), its sign if known, and whether it can be zero.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from fractions import Fraction

from opgen import expr
from opgen.specs import DType

F32_BITS = 24
F32_MIN_EXPONENT = -126  # smallest normal: 2^-126
F32_MAX_EXPONENT = 127  # values below 2^127 cannot round up to infinity


@dataclass(frozen=True)
class Interval:
    """An input that is 0 or of magnitude in [2^-low, 2^high)."""

    low: int
    high: int

    def c_bounds(self) -> tuple[str, str]:
        """The f32 bit patterns (sign cleared) of 2^-low and of the largest float below 2^high."""
        return f"0x{(127 - self.low) << 23:08X}u", f"0x{((127 + self.high) << 23) - 1:08X}u"

    def __str__(self) -> str:
        return f"[2^-{self.low}, 2^{self.high})"


@dataclass(frozen=True)
class FloatRange:
    """Inputs inside their intervals let float compute the formula, rounding at most
    `roundings` times."""

    intervals: dict[str, Interval]
    roundings: int


# opgen_expf is within 1 ulp of f32 (README, "Numerical behaviour"): 2^-23 relative, two roundings
EXP_ROUNDINGS = 2


@dataclass(frozen=True)
class _Node:
    lo: int
    hi: int
    bits: int | None
    roundings: int
    can_be_zero: bool
    sign: int = 0  # 1: never negative, -1: never positive, 0: either


def input_range(
    tree: ast.expr, dtypes: Mapping[str, DType], definitions: Mapping[str, ast.expr], output: DType
) -> FloatRange | None:
    """An interval per input inside which f32 computes `tree` within 1 ulp of `output`; None
    when the formula has anything else (module docstring), or `output` is too precise for the
    roundings it takes. The intervals widen together while they can (no input favoured),
    then each alone, in name order: from src, |x| is held by exp while diff_dst goes on."""
    names = sorted(_inputs(tree, definitions))
    low, high = dict.fromkeys(names, 1), dict.fromkeys(names, 1)

    def valid() -> bool:
        bounds = {name: (low[name], high[name]) for name in names}
        return _summary(tree, dtypes, definitions, bounds, output) is not None

    if not valid():
        return None
    for bounds, limit in ((high, F32_MAX_EXPONENT), (low, -F32_MIN_EXPONENT)):
        _widen(bounds, names, limit, valid)
        for name in names:
            _widen(bounds, [name], limit, valid)
    node = _summary(tree, dtypes, definitions, {n: (low[n], high[n]) for n in names}, output)
    assert node is not None
    return FloatRange({name: Interval(low[name], high[name]) for name in names}, node.roundings)


def _inputs(tree: ast.expr, definitions: Mapping[str, ast.expr]) -> set[str]:
    """The names `tree` reads, through the definitions it reads."""
    result: set[str] = set()
    for name in expr.names(tree):
        result |= _inputs(definitions[name], definitions) if name in definitions else {name}
    return result


def _widen(bounds: dict[str, int], names: list[str], limit: int, valid) -> None:
    """Raise bounds[name] for every name in `names` together, to the largest value up to
    `limit` that is valid (validity only shrinks as a bound grows: a binary search)."""
    start = max(bounds[name] for name in names)
    good, bad = start, limit + 1
    while bad - good > 1:
        middle = (good + bad) // 2
        saved = {name: bounds[name] for name in names}
        for name in names:
            bounds[name] = max(bounds[name], middle)
        if valid():
            good = middle
        else:
            bad = middle
        bounds.update(saved)
    for name in names:
        bounds[name] = max(bounds[name], good)


def _summary(tree, dtypes, definitions, bounds: dict[str, tuple[int, int]], output: DType) -> _Node | None:
    node = _node(tree, dtypes, definitions, bounds)
    if node is None:
        return None
    # relative error (1 + 2^-24)^r - 1 under half an ulp of the output's precision: the
    # result then rounds to the output value the exact one rounds to, or a neighbour
    precision = output.mantissa_bits + 1
    if (1 + 2.0**-F32_BITS) ** node.roundings - 1 > 2.0 ** -(precision + 1):
        return None
    return node


def _node(tree: ast.expr, dtypes, definitions, bounds: dict[str, tuple[int, int]]) -> _Node | None:
    def visit(node: ast.expr) -> _Node | None:
        result = _visit(node, visit, dtypes, definitions, bounds)
        if result is None or result.lo < F32_MIN_EXPONENT or result.hi > F32_MAX_EXPONENT:
            return None
        return result

    return visit(tree)


def _visit(node, visit, dtypes, definitions, bounds: dict[str, tuple[int, int]]) -> _Node | None:
    if isinstance(node, ast.Constant) and not isinstance(node.value, bool):
        return _constant(float(node.value))
    if isinstance(node, ast.Name):
        if node.id in definitions:
            return visit(definitions[node.id])
        if node.id not in dtypes:
            return None  # an attribute: its value is not checked per block
        dtype = dtypes[node.id]
        low, high = bounds[node.id]
        smallest = dtype.min_exponent - dtype.mantissa_bits  # the smallest subnormal is 2^smallest
        largest = 2 - dtype.min_exponent  # below 2^(emax + 1), emax = 1 - emin
        return _Node(max(-low, smallest), min(high, largest), dtype.mantissa_bits + 1, 0, True)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        operand = visit(node.operand)
        return None if operand is None else replace(operand, sign=-operand.sign)
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("abs", "exp"):
        argument = visit(node.args[0])
        if argument is None:
            return None
        return replace(argument, sign=1) if node.func.id == "abs" else _exp(argument)
    if not isinstance(node, ast.BinOp) or not isinstance(node.op, (ast.Mult, ast.Div, ast.Add, ast.Sub)):
        return None
    left, right = visit(node.left), visit(node.right)
    if left is None or right is None:
        return None
    if isinstance(node.op, ast.Mult):
        bits = None if left.bits is None or right.bits is None else left.bits + right.bits
        exact = bits is not None and bits <= F32_BITS
        return _Node(
            left.lo + right.lo,
            left.hi + right.hi,
            bits if exact else None,
            left.roundings + right.roundings + (0 if exact else 1),
            left.can_be_zero or right.can_be_zero,
            left.sign * right.sign,
        )
    if isinstance(node.op, ast.Div):
        if right.can_be_zero:
            return None
        return _Node(
            left.lo - right.hi,
            left.hi - right.lo,
            None,
            left.roundings + right.roundings + 1,
            left.can_be_zero,
            left.sign * right.sign,
        )
    right_sign = right.sign if isinstance(node.op, ast.Add) else -right.sign
    if left.sign != 0 and left.sign == right_sign:
        return _same_sign_sum(left, right)
    # terms of either sign may cancel, which would magnify a rounded term's error
    if left.bits is None or right.bits is None:
        return None
    return _sum(left, right)


def _exp(argument: _Node) -> _Node | None:
    """exp of an exact argument (a rounded one's error would grow by the argument's size),
    |argument| < 2^hi."""
    if argument.bits is None:
        return None
    reach = 2.0**argument.hi * math.log2(math.e)  # |log2 of the result| below this
    # one binade more below: the kernels' exp (opgen_exp_normalf) scales by 2^k once, which is
    # exact only while its rounded result stays normal
    lo = 0 if argument.sign == 1 else math.floor(-reach) - 1
    hi = 1 if argument.sign == -1 else math.ceil(reach) + 1
    return _Node(lo, hi, None, EXP_ROUNDINGS, False, 1)


def _same_sign_sum(a: _Node, b: _Node) -> _Node:
    """a + b of terms of one sign: no cancellation, |a + b| is at least either term's, and
    its relative error is at most the larger of theirs, plus its own rounding."""
    lo = _or_either_alone(max(a.lo, b.lo), a, b)
    if a.bits is not None and b.bits is not None:
        exact_sum = _sum(a, b)
        return replace(exact_sum, lo=max(lo, exact_sum.lo), sign=a.sign, can_be_zero=a.can_be_zero and b.can_be_zero)
    hi = max(a.hi, b.hi) + 1
    return _Node(lo, hi, None, max(a.roundings, b.roundings) + 1, a.can_be_zero and b.can_be_zero, a.sign)


def _sum(a: _Node, b: _Node) -> _Node:
    """a + b or a - b of values f32 holds exactly. If the smaller magnitude is under half the
    larger, |a +- b| > half the larger; otherwise both are at least 2^(lo - 1), lo the larger
    lower bound, so both are multiples of 2^(lo - bits) and so is a nonzero result."""
    lo = _or_either_alone(max(a.lo, b.lo) - max(a.bits, b.bits), a, b)
    hi = max(a.hi, b.hi) + 1
    grain = min(a.lo - a.bits + 1, b.lo - b.bits + 1)  # the lowest bit either can have
    bits = hi - grain
    exact = bits <= F32_BITS
    return _Node(lo, hi, bits if exact else None, 0 if exact else 1, True)


def _or_either_alone(lo: int, a: _Node, b: _Node) -> int:
    """The lower bound `lo` of a nonzero a +- b, lowered to b's where a can be 0 (0 +- b is b)
    and to a's where b can."""
    if a.can_be_zero:
        lo = min(lo, b.lo)
    if b.can_be_zero:
        lo = min(lo, a.lo)
    return lo


def _constant(value: float) -> _Node | None:
    if value == 0.0:
        return _Node(0, 0, 1, 0, True, 1)
    if not math.isfinite(value):
        return None
    numerator = abs(Fraction(value)).numerator
    bits = numerator.bit_length() - ((numerator & -numerator).bit_length() - 1)
    if bits > F32_BITS:
        return None  # not a float constant (its range is checked like any node's)
    _, exponent = math.frexp(abs(value))  # |value| in [2^(exponent - 1), 2^exponent)
    return _Node(exponent - 1, exponent, bits, 0, False, 1 if value > 0 else -1)
