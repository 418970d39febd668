"""When a kernel may compute a block in a cheaper arithmetic first.

bf16 data takes several roundings in double (spec `compute = "wide"`) because f32 has bf16's
range: a product of bf16 values can overflow or underflow in f32. But when every input of a
block is 0 or of a magnitude well inside f32's range, f32 arithmetic of a formula made of
products, quotients, exp of exact values, sums of exact values and sums of terms of one sign
stays in f32's normal range, each operation rounds once by at most 2^-24 relative (exp
counts as 76: its short polynomial, below), and no rounding error is magnified by
cancellation: the result is within 1 ulp of a short output dtype (bf16) from the exact value
rounded. `input_range` finds that magnitude interval by interval arithmetic on exponents;
the kernels check it per block and compute the blocks that fail it in double, as before.

Inside the intervals exp's results are normal, so the blocks call opgen_exp_short(f): no
clamp, one scaling, and a polynomial as short as the outputs allow; its error counts as
`exp_roundings`. f32 data computed in double gets the same analysis in double arithmetic
(DOUBLE), where that exp is the gain: its 2^-28.3 counts as 2^24.7 roundings of 2^-53, and an
f32 result allows 2^-25, some 2^28 of them.

An input that multiplies a whole result needs no interval in a kernel computed wider (bf16 in
double): its float blocks compute the rest, G, first and multiply by it last
(`last_factors`), where an underflow or overflow is harmless (`_factor_is_safe`).

Each node is summarised, for nonzero values, by [2^lo, 2^hi) bounding its magnitude, its
significant bits when the arithmetic computes it exactly (None once rounded), the roundings
it took (relative errors of 2^-24 each, 2^-53 in double: they add up through products and
quotients, and through sums of terms of one sign), its sign if known, and whether it can be
zero.
"""

from __future__ import annotations

import ast
import copy
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import cast

from opgen import expr
from opgen.specs import DType

F32_BITS = 24
F32_MIN_EXPONENT = -126  # smallest normal: 2^-126
F32_MAX_EXPONENT = 127  # values below 2^127 cannot round up to infinity
# the widest input intervals: f32's smallest subnormal 2^-149 up to every finite f32 (< 2^128)
INPUT_LOW_LIMIT = 149
INPUT_HIGH_LIMIT = 128


@dataclass(frozen=True)
class Interval:
    """An input that is 0 or of magnitude in [2^-low, 2^high)."""

    low: int
    high: int

    def c_bounds(self, dtype: DType | None = None) -> tuple[str, str]:
        """The f32 bit patterns (sign cleared) of 2^-low and of the largest float below 2^high;
        the low one is f32's smallest subnormal when no nonzero `dtype` value is below 2^-low
        (opgen_all_in_range then tests the high end alone)."""
        if dtype is not None and self.holds_smallest(dtype):
            return "0x00000001u", self.c_bounds()[1]
        low = (127 - self.low) << 23 if self.low <= 126 else 1 << (149 - self.low)
        return f"0x{low:08X}u", f"0x{((127 + self.high) << 23) - 1:08X}u"

    def holds_smallest(self, dtype: DType) -> bool:
        """`dtype`'s smallest nonzero magnitude (a subnormal) is inside."""
        return -self.low <= dtype.smallest_exponent

    def holds_every_finite(self, dtype: DType) -> bool:
        """Every finite nonzero `dtype` value is inside."""
        return self.holds_smallest(dtype) and self.high >= dtype.end_exponent

    def __str__(self) -> str:
        return f"[2^-{self.low}, 2^{self.high})"


@dataclass(frozen=True)
class FloatRange:
    """Inputs inside their intervals let the arithmetic compute the formula, rounding at most
    `roundings` times."""

    intervals: dict[str, Interval]
    roundings: int


@dataclass(frozen=True)
class Arithmetic:
    """The type a block is computed in: `bits` of significand, normal exponents from
    `min_exponent`, magnitudes below 2^`max_exponent` safe from overflow, and the exp its
    blocks call inside the intervals, opgen_exp_short (+ the type's suffix): its polynomial's
    degree, ln 2 in parts (C literals) for the reduction, and the bound on the roundings of its
    reduction, polynomial and scaling."""

    name: str
    bits: int
    min_exponent: int
    max_exponent: int
    exp_name: str  # the C function, before the type's suffix
    exp_degree: int
    exp_ln2_parts: tuple[str, ...]
    exp_rounding_error: float

    @property
    def exp_error(self) -> float:
        """A bound on opgen_exp_short's relative error in this type."""
        return exp_polynomial(self.exp_degree)[1] + self.exp_rounding_error

    @property
    def suffix(self) -> str:
        """C's suffix for this type's literals and math functions."""
        return "f" if self.name == "float" else ""

    @property
    def exp_function(self) -> str:
        """The C function: opgen_exp_short(3)f in float, opgen_exp_short in double."""
        return self.exp_name + self.suffix

    @property
    def exp_coefficients(self) -> list[str]:
        """The polynomial's coefficients as C literals of this type, the highest power first."""
        rounded = [_round_to_bits(float(c), self.bits) for c in exp_polynomial(self.exp_degree)[0]]
        return [f"{c!r}{self.suffix}" for c in reversed(rounded)]

    @property
    def exp_roundings(self) -> int:
        """That error in roundings of 2^-bits, as the analysis counts it."""
        return math.ceil(self.exp_error * 2.0**self.bits)

    @property
    def exp_error_exponent(self) -> int:
        """The power of 2 above the error, for the kernels' comments."""
        return math.ceil(math.log2(self.exp_error))


# |r| after the reduction: ln 2 / 2, plus the slack of a misrounded k
REDUCED_BOUND = Fraction(7, 20)
_TAYLOR_DEGREE = 20


@functools.cache  # the analysis asks hundreds of times per build; the arithmetic is exact and slow
def exp_polynomial(degree: int) -> tuple[tuple[Fraction, ...], float]:
    """e^r for |r| <= 0.35 by a polynomial of `degree` (coefficients lowest power first) and a
    bound on its relative error. Exact rational arithmetic, so the same on every machine:
    e^r's Taylor series to r^20, then its highest powers traded for lower ones (Chebyshev
    economization: subtracting b T_m(r / 0.35) / 2^(m-1), which cancels the term b (r /
    0.35)^m, moves the polynomial by |b| / 2^(m-1) at most, as |T_m| <= 1 there). The bound
    adds those moves and the series' tail (twice its first term), times e^0.35 for relative."""
    terms = [REDUCED_BOUND**m / math.factorial(m) for m in range(_TAYLOR_DEGREE + 1)]  # in r / 0.35
    moved = 2 * REDUCED_BOUND ** (_TAYLOR_DEGREE + 1) / math.factorial(_TAYLOR_DEGREE + 1)
    for power in range(_TAYLOR_DEGREE, degree, -1):
        chebyshev = _chebyshev(power)
        factor = terms[power] / chebyshev[power]
        terms = [t - factor * c for t, c in zip(terms, chebyshev + [0] * len(terms))]
        moved += abs(factor)
    coefficients = tuple(terms[m] / REDUCED_BOUND**m for m in range(degree + 1))
    return coefficients, float(moved) * math.exp(0.35) * (1 + 2.0**-40)


def _chebyshev(degree: int) -> list[int]:
    """T_degree's coefficients, lowest power first: T_(n+1) = 2 t T_n - T_(n-1)."""
    previous, current = [1], [0, 1]
    for _ in range(degree - 1):
        following = [0] + [2 * c for c in current]
        previous, current = current, [f - p for f, p in zip(following, previous + [0, 0])]
    return previous if degree == 0 else current


def _round_to_bits(value: float, bits: int) -> float:
    """`value` rounded to `bits` of significand (nearest, ties to even), as C's literal would be."""
    if bits >= 53 or value == 0:
        return value
    mantissa, exponent = math.frexp(value)
    return math.ldexp(round(math.ldexp(mantissa, bits)), exponent - bits)


# The polynomials are as short as the results allow. In double (f32 outputs, 2^-25 allowed):
# degree 6, 2^-28.4; ln 2 in one part (|k| below 1100 times its error 2^-55, or k * ln 2
# rounded, 2^-43.5 of r, where the target cannot fuse), the coefficients and Horner's rule
# 2^-49: 2^-42 bounds them. In float: degree 4, 2^-17.9, for f16 outputs (2^-12 allowed), and
# degree 3, 2^-13.1, where bf16 outputs (2^-9) allow it; ln 2 in one part (|k| <= 128 times
# its error 2^-29, 2^-22; or k * ln 2 rounded, below 88.7, 2^-18 where the target cannot
# fuse), the coefficients rounded to float and Horner's rule in float, under 2^-23 each (two
# roundings a step without FMA): 2^-21. templates/opgen_internal.h.j2 takes the
# coefficients and the parts of ln 2 from here.
_FLOAT_TYPE = ("float", F32_BITS, F32_MIN_EXPONENT, F32_MAX_EXPONENT)
_FLOAT_LN2 = ("0x1.62e430p-1f",)
_FLOAT_ROUNDING = 2.0**-18 + 2.0**-22 + 2.0**-21
FLOAT3 = Arithmetic(*_FLOAT_TYPE, "opgen_exp_short3", 3, _FLOAT_LN2, _FLOAT_ROUNDING)
FLOAT = Arithmetic(*_FLOAT_TYPE, "opgen_exp_short", 4, _FLOAT_LN2, _FLOAT_ROUNDING)
DOUBLE = Arithmetic("double", 53, -1022, 1023, "opgen_exp_short", 6, ("0x1.62e42fefa39efp-1",), 2.0**-42)
# in the order plan.float_first tries them: the cheapest first
ARITHMETICS = (FLOAT3, FLOAT, DOUBLE)

# The along_axes kernels' exp of an argument never above 0 in float (opgen_exp_linef): e^r by
# the polynomial of this degree (2^-28.4) where opgen_expf sums e^r's series to degree 8, three
# multiply-adds fewer, with opgen_expf's reduction and one rounding of p 2^k. Its error stays
# within 2^-23 of e^x, relatively (the 1 ulp, 2 u, that the along_axes accuracy bounds take for
# exp), fused or not: no bound from the parts proves that, so it was checked on every negative
# float (2^-23.4 fused, 2^-23.06 not), and tests/c/exp_line.c checks every third.
LINE_EXP_DEGREE = 6


def line_exp_coefficients() -> list[str]:
    """opgen_exp_linef's polynomial as float literals, the highest power first."""
    rounded = [_round_to_bits(float(c), F32_BITS) for c in exp_polynomial(LINE_EXP_DEGREE)[0]]
    return [f"{c!r}f" for c in reversed(rounded)]


@dataclass(frozen=True)
class _Node:
    lo: int
    hi: int
    bits: int | None
    roundings: int
    can_be_zero: bool
    sign: int = 0  # 1: never negative, -1: never positive, 0: either


def input_range(
    tree: ast.expr,
    dtypes: Mapping[str, DType],
    definitions: Mapping[str, ast.expr],
    output: DType,
    arithmetic: Arithmetic = FLOAT,
    factor: DType | None = None,
) -> FloatRange | None:
    """An interval per input inside which `arithmetic` computes `tree` within 1 ulp of
    `output`; None when the formula has anything else (module docstring), or `output` is too
    precise for the roundings it takes. The intervals widen together while they can (no input
    favoured), then each alone, in name order: from src, |x| is held by exp while diff_dst
    goes on. `factor`: the result is then multiplied by an unchecked value of that dtype
    (`last_factors`), one rounding more, which must be safe at any magnitude."""
    names = sorted(_inputs(tree, definitions))
    low, high = dict.fromkeys(names, 1), dict.fromkeys(names, 1)
    if factor is not None and not _factor_is_safe(factor, output, arithmetic):
        return None

    def valid() -> bool:
        bounds = {name: (low[name], high[name]) for name in names}
        return _summary(tree, dtypes, definitions, bounds, output, arithmetic, factor) is not None

    if not valid():
        return None
    high_limit = min(INPUT_HIGH_LIMIT, arithmetic.max_exponent)
    low_limit = min(INPUT_LOW_LIMIT, arithmetic.bits - 1 - arithmetic.min_exponent)
    for bounds, limit in ((high, high_limit), (low, low_limit)):
        _widen(bounds, names, limit, valid)
        for name in names:
            _widen(bounds, [name], limit, valid)
    node = _summary(tree, dtypes, definitions, {n: (low[n], high[n]) for n in names}, output, arithmetic, factor)
    assert node is not None
    return FloatRange({name: Interval(low[name], high[name]) for name in names}, node.roundings)


def cheapest(
    trees: list[ast.expr],
    dtypes: Mapping[str, DType],
    definitions: Mapping[str, ast.expr],
    outputs: list[DType],
    arithmetics: tuple[Arithmetic, ...] = ARITHMETICS,
) -> tuple[Arithmetic, list[FloatRange]] | None:
    """The first of `arithmetics` (cheapest first) that has intervals for every one of
    `trees` (computing the output of the same place in `outputs`), with those intervals."""
    for arithmetic in arithmetics:
        found = [input_range(t, dtypes, definitions, o, arithmetic) for t, o in zip(trees, outputs)]
        if all(r is not None for r in found):
            return arithmetic, found  # type: ignore[return-value]
    return None


def only_a_factor(tree: ast.expr, name: str, definitions: Mapping[str, ast.expr]) -> bool:
    """`name` reaches `tree`'s value through products and quotients alone (a factor, a
    divisor). Then an infinity or a NaN there gives the same result whichever exp the other
    factors called: those are finite, and nonzero or zero alike, in both (plan.float_first
    leaves such an input unchecked)."""
    if isinstance(tree, ast.Name) and tree.id in definitions:
        return only_a_factor(definitions[tree.id], name, definitions)
    if isinstance(tree, ast.BinOp) and isinstance(tree.op, (ast.Mult, ast.Div)):
        return only_a_factor(tree.left, name, definitions) and only_a_factor(tree.right, name, definitions)
    return isinstance(tree, ast.Name) or name not in _inputs(tree, definitions)


def last_factor(tree: ast.expr, name: str, definitions: Mapping[str, ast.expr]) -> ast.expr | None:
    """G such that `tree` is `name` * G, when `tree` reads `name` once, itself (no definition
    it reads does), through products, dividends and negations from its root; else None.
    (diff_dst * e) / w gives e / w: computing G first and the product last moves no rounding
    onto a path that may underflow or overflow (`last_factors`)."""
    reads = sum(isinstance(n, ast.Name) and n.id == name for n in ast.walk(tree))
    through = [d for d in expr.names(tree) if d in definitions and name in _inputs(definitions[d], definitions)]
    if reads != 1 or through:
        return None
    one = ast.Constant(1)

    def pull(node: ast.expr) -> ast.expr | None:
        if isinstance(node, ast.Name) and node.id == name:
            return one
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            operand = pull(node.operand)
            return None if operand is None else ast.UnaryOp(ast.USub(), operand)
        if not isinstance(node, ast.BinOp) or not isinstance(node.op, (ast.Mult, ast.Div)):
            return None
        if name in expr.names(node.left):
            left = pull(node.left)
            if left is None:
                return None
            if left is one and isinstance(node.op, ast.Mult):
                return node.right  # name * b: b
            return ast.BinOp(left, node.op, node.right)
        if isinstance(node.op, ast.Div):
            return None  # a divisor
        right = pull(node.right)
        if right is None:
            return None
        return node.left if right is one else ast.BinOp(node.left, node.op, right)

    pulled = pull(tree)
    return None if pulled is None else copy.deepcopy(pulled)


def last_factors(
    trees: Mapping[str, ast.expr],
    dtypes: Mapping[str, DType],
    definitions: Mapping[str, ast.expr],
    arithmetic: Arithmetic,
) -> dict[str, tuple[str, ast.expr, FloatRange]]:
    """Per output (`trees`: name -> formula), an input that multiplies its whole result and no
    other output's (`last_factor`), with G and G's intervals computed in `arithmetic`, the
    product by that input last and unchecked (input_range's `factor`): the first input in
    name order that has them, none where none does. Such an input needs no check at all."""
    found: dict[str, tuple[str, ast.expr, FloatRange]] = {}
    for name in sorted(set().union(*(_inputs(t, definitions) for t in trees.values()))):
        readers = [o for o, t in trees.items() if name in _inputs(t, definitions)]
        if any(o in found for o in readers):
            continue
        pulled = {o: last_factor(trees[o], name, definitions) for o in readers}
        ranges = {
            o: input_range(g, dtypes, definitions, dtypes[o], arithmetic, dtypes[name])
            for o, g in pulled.items()
            if g is not None
        }
        if len(ranges) == len(readers) and all(r is not None for r in ranges.values()):
            found.update({o: (name, pulled[o], ranges[o]) for o in readers})  # type: ignore[misc]
    return found


def _inputs(tree: ast.expr, definitions: Mapping[str, ast.expr]) -> set[str]:
    """The names `tree` reads, through the definitions it reads."""
    result: set[str] = set()
    for name in expr.names(tree):
        result |= _inputs(definitions[name], definitions) if name in definitions else {name}
    return result


def _widen(bounds: dict[str, int], names: list[str], limit: int, valid: Callable[[], bool]) -> None:
    """Raise bounds[name] for every name in `names` together, to the largest value up to
    `limit` that is valid (validity only shrinks as a bound grows: a binary search); none
    for no names (a formula with no inputs, such as the rest of `a / 3` once `a` is pulled)."""
    if not names:
        return
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


def _summary(
    tree: ast.expr,
    dtypes: Mapping[str, DType],
    definitions: Mapping[str, ast.expr],
    bounds: Mapping[str, tuple[int, int]],
    output: DType,
    arithmetic: Arithmetic,
    factor: DType | None = None,
) -> _Node | None:
    node = _node(tree, dtypes, definitions, bounds, arithmetic)
    if node is None:
        return None
    if factor is not None:
        node = replace(node, roundings=node.roundings + 1)  # the product by the factor
    # relative error (1 + 2^-bits)^r - 1 under half an ulp of the output's precision: the
    # result then rounds to the output value the exact one rounds to, or a neighbour
    precision = output.mantissa_bits + 1
    relative = math.expm1(node.roundings * math.log1p(2.0**-arithmetic.bits))
    if relative > 2.0 ** -(precision + 1):
        return None
    if factor is not None and _overflow_threshold(arithmetic.bits, arithmetic.max_exponent) < _overflow_threshold(
        precision, output.end_exponent - 1
    ) * (1 + relative):
        return None
    return node


def _overflow_threshold(bits: int, max_exponent: int) -> float:
    """The smallest magnitude that rounds to infinity with `bits` of significand and normal
    exponents up to `max_exponent`: the largest finite value plus half its ulp."""
    return math.ldexp(2.0 - 2.0**-bits, max_exponent)


def _factor_is_safe(factor: DType, output: DType, arithmetic: Arithmetic) -> bool:
    """A value of dtype `factor` times a result computed in `arithmetic` (relative error r,
    nonzero results normal), rounded once more, is within 1 ulp of `output` at any magnitude
    of the factor: the arithmetic holds every factor value exactly; where the product is
    subnormal, its absolute error, half the arithmetic's smallest subnormal, is at most half
    the output's; where it overflows, the exact product is at least the arithmetic's
    overflow threshold over (1 + r), which `_summary` checks is the output's or more: the
    output overflows too. An infinity or NaN factor gives what the exact product gives."""
    grain = arithmetic.min_exponent - arithmetic.bits + 1  # the smallest subnormal: 2^grain
    return (
        factor.mantissa_bits + 1 <= arithmetic.bits
        and factor.end_exponent <= arithmetic.max_exponent + 1
        and factor.smallest_exponent >= grain
        and output.smallest_exponent >= grain
    )


def _node(
    tree: ast.expr,
    dtypes: Mapping[str, DType],
    definitions: Mapping[str, ast.expr],
    bounds: Mapping[str, tuple[int, int]],
    arithmetic: Arithmetic,
) -> _Node | None:
    # an exact value may be subnormal, if its lowest bit is one the arithmetic has: a tiny
    # input of bf16, or of f32 in double (exp(-|x|) of a subnormal x is 1 all the same)
    lowest_bit = arithmetic.min_exponent - arithmetic.bits + 1

    def visit(node: ast.expr) -> _Node | None:
        result = _visit(node, visit, dtypes, definitions, bounds, arithmetic)
        if result is None or result.hi > arithmetic.max_exponent:
            return None
        if result.lo < arithmetic.min_exponent and (result.bits is None or result.lo - result.bits + 1 < lowest_bit):
            return None
        return result

    return visit(tree)


def _visit(
    node: ast.expr,
    visit: Callable[[ast.expr], _Node | None],
    dtypes: Mapping[str, DType],
    definitions: Mapping[str, ast.expr],
    bounds: Mapping[str, tuple[int, int]],
    arithmetic: Arithmetic,
) -> _Node | None:
    if isinstance(node, ast.Constant) and not isinstance(node.value, bool):
        return _constant(float(cast(float, node.value)), arithmetic.bits)
    if isinstance(node, ast.Name):
        if node.id in definitions:
            return visit(definitions[node.id])
        if node.id not in dtypes:
            return None  # an attribute: its value is not checked per block
        dtype = dtypes[node.id]
        low, high = bounds[node.id]
        return _Node(
            max(-low, dtype.smallest_exponent), min(high, dtype.end_exponent), dtype.mantissa_bits + 1, 0, True
        )
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        operand = visit(node.operand)
        return None if operand is None else replace(operand, sign=-operand.sign)
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("abs", "exp"):
        argument = visit(node.args[0])
        if argument is None:
            return None
        return replace(argument, sign=1) if cast(ast.Name, node.func).id == "abs" else _exp(argument, arithmetic)
    if not isinstance(node, ast.BinOp) or not isinstance(node.op, (ast.Mult, ast.Div, ast.Add, ast.Sub)):
        return None
    left, right = visit(node.left), visit(node.right)
    if left is None or right is None:
        return None
    if isinstance(node.op, ast.Mult):
        bits = None if left.bits is None or right.bits is None else left.bits + right.bits
        exact = bits is not None and bits <= arithmetic.bits
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
        return _same_sign_sum(left, right, arithmetic.bits)
    # terms of either sign may cancel, which would magnify a rounded term's error
    if left.bits is None or right.bits is None:
        return None
    return _sum(left, right, arithmetic.bits)


def _exp(argument: _Node, arithmetic: Arithmetic) -> _Node | None:
    """exp of an exact argument (a rounded one's error would grow by the argument's size),
    |argument| < 2^hi."""
    if argument.bits is None:
        return None
    reach = 2.0**argument.hi * math.log2(math.e)  # |log2 of the result| below this
    # one binade more below: the kernels' exp (opgen_exp_short(f)) scales by 2^k once, which
    # is exact only while its rounded result stays normal
    lo = 0 if argument.sign == 1 else math.floor(-reach) - 1
    hi = 1 if argument.sign == -1 else math.ceil(reach) + 1
    return _Node(lo, hi, None, arithmetic.exp_roundings, False, 1)


def _same_sign_sum(a: _Node, b: _Node, precision: int) -> _Node:
    """a + b of terms of one sign: no cancellation, |a + b| is at least either term's, and
    its relative error is at most the larger of theirs, plus its own rounding."""
    lo = _or_either_alone(max(a.lo, b.lo), a, b)
    if a.bits is not None and b.bits is not None:
        exact_sum = _sum(a, b, precision)
        return replace(exact_sum, lo=max(lo, exact_sum.lo), sign=a.sign, can_be_zero=a.can_be_zero and b.can_be_zero)
    hi = max(a.hi, b.hi) + 1
    return _Node(lo, hi, None, max(a.roundings, b.roundings) + 1, a.can_be_zero and b.can_be_zero, a.sign)


def _sum(a: _Node, b: _Node, precision: int) -> _Node:
    """a + b or a - b of values the arithmetic (`precision` bits) holds exactly. If the
    smaller magnitude is under half the larger, |a +- b| > half the larger; otherwise both are
    at least 2^(lo - 1), lo the larger lower bound, so both are multiples of 2^(lo - bits) and
    so is a nonzero result."""
    assert a.bits is not None and b.bits is not None  # the callers check
    lo = _or_either_alone(max(a.lo, b.lo) - max(a.bits, b.bits), a, b)
    hi = max(a.hi, b.hi) + 1
    grain = min(a.lo - a.bits + 1, b.lo - b.bits + 1)  # the lowest bit either can have
    bits = hi - grain
    exact = bits <= precision
    return _Node(lo, hi, bits if exact else None, 0 if exact else 1, True)


def _or_either_alone(lo: int, a: _Node, b: _Node) -> int:
    """The lower bound `lo` of a nonzero a +- b, lowered to b's where a can be 0 (0 +- b is b)
    and to a's where b can."""
    if a.can_be_zero:
        lo = min(lo, b.lo)
    if b.can_be_zero:
        lo = min(lo, a.lo)
    return lo


def _constant(value: float, precision: int) -> _Node | None:
    if value == 0.0:
        return _Node(0, 0, 1, 0, True, 1)
    if not math.isfinite(value):
        return None
    numerator = abs(Fraction(value)).numerator
    bits = numerator.bit_length() - ((numerator & -numerator).bit_length() - 1)
    if bits > precision:
        return None  # not a constant of the arithmetic (its range is checked like any node's)
    _, exponent = math.frexp(abs(value))  # |value| in [2^(exponent - 1), 2^exponent)
    return _Node(exponent - 1, exponent, bits, 0, False, 1 if value > 0 else -1)
