"""Math expressions of a spec: a small, checked subset of Python syntax, translated to C.

Allowed: numbers, names, + - * /, unary -, comparisons (chains too), and/or/not,
`a if cond else b`, and the functions in FUNCTIONS. Everything else is an error,
so a spec can never place arbitrary text in the generated C.

Every subexpression is a number or a condition, and each place takes one of them: a number
never stands where C takes an int condition (the test of `a if c else b`, an and/or/not
operand), and a condition never stands where a number is needed. Number literals must be 0
or within f32's range, as kernels computed in float compile them as float constants.
"""

from __future__ import annotations

import ast
import copy
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import NamedTuple, cast


class Function(NamedTuple):
    """A function the math may call: its arity, its C name without the float/double suffix, and
    what it computes (docs/spec-language.md is generated from these)."""

    arity: int
    c_name: str
    doc: str


FUNCTIONS: dict[str, Function] = {
    # opgen_internal.h: vectorizable, unlike libm's
    "exp": Function(1, "opgen_exp", "e**x, within 1 ulp of f32 (opgen's own, vectorizable)."),
    "log": Function(1, "log", "Natural logarithm (libm)."),
    "sqrt": Function(1, "sqrt", "Square root, one instruction (no errno)."),
    "tanh": Function(1, "tanh", "Hyperbolic tangent (libm)."),
    "abs": Function(1, "fabs", "Absolute value."),
    "min": Function(2, "fmin", "The smaller of two numbers (C's fmin: a NaN operand gives the other)."),
    "max": Function(2, "fmax", "The larger of two numbers (C's fmax: a NaN operand gives the other)."),
}

# Reductions along a line (pattern along_axes): each is a whole entry of `math.line`, its
# argument the term computed per element; the value: the term's sum, largest, smallest or
# product (a NaN term makes the largest and the smallest NaN).
REDUCTIONS: dict[str, str] = {
    "line_sum": "The sum of the term over the line's elements (0 for an empty line).",
    "line_max": "The largest term along the line (NaN if a term is NaN; -inf for an empty line).",
    "line_min": "The smallest term along the line (NaN if a term is NaN; +inf for an empty line).",
    "line_prod": "The product of the term over the line's elements (1 for an empty line).",
    "across_sum": "(math.across) The sum of the term over the lines, per position along a line (0 with no lines).",
}

MAX_LENGTH = 4000  # characters in one expression
_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
# The smallest magnitude that rounds to infinity in f32: max + half an ulp.
F32_OVERFLOW = (2.0 - 2.0**-24) * 2.0**127
# Half the smallest f32 subnormal: magnitudes up to this one round to zero in f32.
F32_UNDERFLOW = 2.0**-150
LITERAL_RULE = (
    "a number literal must be 0 or within f32's range (magnitude about 1.4e-45 to 3.4e38), "
    "as kernels computed in float compile it as a float constant"
)


class ExprError(ValueError):
    """An expression that is not in the allowed subset, or uses an unknown name."""


@dataclass(frozen=True)
class Entry:
    """One entry of a spec's math, parsed once when the spec loads: every emitter (C, vector
    intrinsics, range analysis, accuracy bounds) reads `tree`, and none parses text again.
    Invariant: no one changes `tree` in place (fold and scaled_exps build new trees)."""

    name: str
    text: str  # as written in the spec (error messages, docs)
    reduction: str | None  # the REDUCTIONS function the whole entry is a call of, else None
    tree: ast.expr  # the reduction's term, else the whole expression; numeric, names untyped


def parse(text: str, conditions: Collection[str] | None = None) -> ast.expr:
    """Parse and check one expression; the result is numeric (not a bare condition).

    `conditions`: the names that are conditions (boolean attributes); every other name is a
    number. None leaves names untyped (either kind): check_kinds types them later.
    """
    source = _source(text)
    tree = _syntax(source)
    _check(tree, source, conditions)
    return tree


def parse_entry(name: str, text: str, reduction_allowed: bool) -> Entry:
    """Parse one math entry: an expression or, where `reduction_allowed`, a whole call of a
    REDUCTIONS function whose argument is the term. Names are left untyped (check_kinds)."""
    source = _source(text)
    tree = _syntax(source)
    reduction = None
    if reduction_allowed and isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name):
        if tree.func.id in REDUCTIONS:
            if tree.keywords or len(tree.args) != 1:
                raise ExprError(f"{tree.func.id}() takes 1 positional argument (the term)")
            reduction, tree = tree.func.id, tree.args[0]
    _check(tree, source, None)
    return Entry(name, text, reduction, tree)


def number(value: float) -> ast.expr:
    """The tree of the literal `value` as parse() makes it (a negative number is a negation)."""
    literal = ast.Constant(abs(float(value)))
    return ast.UnaryOp(ast.USub(), literal) if math.copysign(1.0, value) < 0 else literal


def check_kinds(tree: ast.expr, conditions: Collection[str]) -> None:
    """Type the names of a parsed expression (`conditions` are conditions, the rest numbers)
    and check that every place takes its kind and that the whole is a number."""
    try:
        kind = _kind(tree, frozenset(conditions))
    except RecursionError:
        raise ExprError("nested too deeply") from None
    if kind == "condition":
        raise ExprError("the expression is a condition; it must give a number")


def _source(text: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise ExprError("expected a non-empty expression string")
    if len(text) > MAX_LENGTH:
        raise ExprError(f"longer than {MAX_LENGTH} characters")
    return text.strip()


def _syntax(source: str) -> ast.expr:
    """The one place an expression's text becomes a tree."""
    try:
        return ast.parse(source, mode="eval").body
    except SyntaxError as error:
        raise ExprError(f"syntax error at column {error.offset}: {error.msg}") from None
    except (RecursionError, MemoryError):
        raise ExprError("nested too deeply") from None


def _check(tree: ast.expr, source: str, conditions: Collection[str] | None) -> None:
    """The subset's rules on a tree parsed from `source`."""
    try:
        kind = _kind(tree, None if conditions is None else frozenset(conditions))
    except RecursionError:
        raise ExprError("nested too deeply") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, float) and node.value == 0:
            # a literal such as 1e-400 that is 0 already as a Python float
            literal = ast.get_source_segment(source, node) or ""
            if any(digit in "123456789" for digit in literal.lower().partition("e")[0]):
                raise ExprError(f"the literal {literal} rounds to zero in f32; {LITERAL_RULE}")
    if kind == "condition":
        raise ExprError("the expression is a condition; it must give a number")


def literal_problem(value: float) -> str | None:
    """Why the number `value` cannot be a literal of the generated C (see LITERAL_RULE), or None."""
    if not math.isfinite(value):
        return f"{value!r} is not finite; {LITERAL_RULE}"
    if abs(value) >= F32_OVERFLOW:
        return f"{value!r} is outside the f32 range (it would round to infinity); {LITERAL_RULE}"
    if 0 < abs(value) <= F32_UNDERFLOW:
        return f"{value!r} rounds to zero in f32; {LITERAL_RULE}"
    return None


def names(tree: ast.expr) -> set[str]:
    """Every variable name the expression reads (function names excluded)."""
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and id(node) not in called}


def calls(tree: ast.expr, function: str) -> int:
    """How many times the expression calls `function`."""
    return sum(isinstance(n, ast.Call) and getattr(n.func, "id", None) == function for n in ast.walk(tree))


def fold(tree: ast.expr, constants: Mapping[str, bool]) -> ast.expr:
    """Replace compile-time constants and drop the branches they rule out."""

    class Folder(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            if node.id in constants:
                return ast.copy_location(ast.Constant(bool(constants[node.id])), node)
            return node

        def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
            self.generic_visit(node)
            if isinstance(node.test, ast.Constant):
                return node.body if node.test.value else node.orelse
            return node

        def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
            self.generic_visit(node)
            if isinstance(node.op, ast.Not) and isinstance(node.operand, ast.Constant):
                return ast.copy_location(ast.Constant(not node.operand.value), node)
            return node

        def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
            self.generic_visit(node)
            is_and = isinstance(node.op, ast.And)
            kept = []
            for value in node.values:
                if isinstance(value, ast.Constant):
                    if bool(value.value) != is_and:  # False in `and`, True in `or` decides
                        return ast.copy_location(ast.Constant(not is_and), node)
                    continue
                kept.append(value)
            if not kept:
                return ast.copy_location(ast.Constant(is_and), node)
            return kept[0] if len(kept) == 1 else ast.BoolOp(op=node.op, values=kept)

    return cast(ast.expr, Folder().visit(copy.deepcopy(tree)))


def to_c(
    tree: ast.expr,
    variables: Mapping[str, str],
    literal_suffix: str,
    math_suffix: str,
    select: str,
    functions: Mapping[str, str] | None = None,
    maxima: Mapping[str, ast.expr] | None = None,
    exp_nonpositive: str = "opgen_exp_nonpositive",
    checked_nonpositive: frozenset[str] = frozenset(),
) -> str:
    """C text of a checked expression; `variables` maps each spec name to its C spelling,
    `functions` a function to another C name than FUNCTIONS' (before the suffix), `maxima`
    the names that hold the largest value of a term along the line (line_max), by that term.

    An exp whose argument is never above 0 (nonpositive) calls `exp_nonpositive` (before the
    suffix): opgen_exp_nonpositive, the same bits as opgen_exp there in fewer operations, or
    the along_axes kernels' opgen_exp_line (EXP_LINE), as accurate, not the same bits. An exp
    of a name in `checked_nonpositive`, which the caller has checked to be at most 0 where this
    code runs, calls opgen_exp_nonpositive: the same bits as opgen_exp.

    Both arms of `a if c else b` become arguments of the function `select`, so both are
    always computed and the compiler can turn the choice into a vector blend; `and`/`or`
    become the non-short-circuit `&`/`|` on 0/1 values for the same reason.
    """

    def emit(node: ast.expr) -> str:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool):
                return "1" if node.value else "0"
            return _literal(_number(node), literal_suffix)
        if isinstance(node, ast.Name):
            if node.id not in variables:
                raise ExprError(f"unknown name '{node.id}'")
            return variables[node.id]
        if isinstance(node, ast.BinOp):
            scale_add = _scale_add(node)
            if scale_add:
                scale, operand, constant = scale_add
                literals = _literal(scale, literal_suffix), _literal(constant, literal_suffix)
                return f"opgen_scale_add{math_suffix}({literals[0]}, {emit(operand)}, {literals[1]})"
            return f"({emit(node.left)} {_BINARY[type(node.op)]} {emit(node.right)})"
        if isinstance(node, ast.UnaryOp):
            operator = "!" if isinstance(node.op, ast.Not) else ("-" if isinstance(node.op, ast.USub) else "+")
            return f"({operator}{emit(node.operand)})"
        if isinstance(node, ast.BoolOp):
            joiner = " & " if isinstance(node.op, ast.And) else " | "
            return "(" + joiner.join(emit(value) for value in node.values) + ")"
        if isinstance(node, ast.Compare):
            parts, left = [], node.left
            for op, right in zip(node.ops, node.comparators):
                parts.append(f"({emit(left)} {_COMPARE[type(op)]} {emit(right)})")
                left = right
            return parts[0] if len(parts) == 1 else "(" + " & ".join(parts) + ")"
        if isinstance(node, ast.IfExp):
            return f"{select}({emit(node.test)}, {emit(node.body)}, {emit(node.orelse)})"
        if isinstance(node, ast.Call):
            name = cast(ast.Name, node.func).id  # parse() allows calls of names only
            if functions and name in functions:
                c_name = functions[name] + math_suffix
            elif name == "exp" and nonpositive(node.args[0], maxima or {}):
                c_name = exp_nonpositive + math_suffix
            elif name == "exp" and isinstance(node.args[0], ast.Name) and node.args[0].id in checked_nonpositive:
                c_name = "opgen_exp_nonpositive" + math_suffix
            else:
                c_name = FUNCTIONS[name][1] + math_suffix
            return f"{c_name}(" + ", ".join(emit(arg) for arg in node.args) + ")"
        raise ExprError(f"unsupported syntax: {ast.unparse(node)}")

    return emit(tree)


EXP_LINE = "opgen_exp_line"  # opgen_internal.h: the along_axes kernels' exp of an argument <= 0 (or NaN)


def nonpositive(node: ast.expr, maxima: Mapping[str, ast.expr]) -> bool:
    """Whether `node` is <= 0 (or NaN) whatever its inputs, as its form shows: -abs(y); a
    constant c <= 0 times abs(y); y - m, m the largest of y along the line (`maxima`: such
    names by their term; every y along the line is at most m, and its difference rounds to at
    most 0). Rounding keeps each: a product or difference of those signs cannot round above 0."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _is_abs(node.operand)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        for factor, other in ((node.left, node.right), (node.right, node.left)):
            constant = _constant_value(factor)
            if constant is not None and constant <= 0 and _is_abs(other):
                return True
        return False
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and isinstance(node.right, ast.Name):
        term = maxima.get(node.right.id)
        return term is not None and ast.dump(term) == ast.dump(node.left)
    return False


def _is_abs(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and getattr(node.func, "id", None) == "abs"


def _constant_value(node: ast.expr) -> float | None:
    """The value of a numeric constant, negated ones included; else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _constant_value(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    return None


_VECTOR_BINARY = {
    ast.Add: "_mm512_add_ps",
    ast.Sub: "_mm512_sub_ps",
    ast.Mult: "_mm512_mul_ps",
    ast.Div: "_mm512_div_ps",
}


class _NotVectorized(Exception):
    pass


def to_vector(tree: ast.expr, variables: Mapping[str, str], exp_function: str) -> str | None:
    """AVX-512 intrinsics computing a float expression (after scaled_exps) on 16 lanes with the
    operations to_c's C performs, in the same order: +, -, *, /, negation, abs, the short exp
    `exp_function` (its _vector form) and opgen_scale_add, each rounding as the C's does where
    the target fuses multiply-adds, so the bits are the lane loop's. None for anything else
    (selects, comparisons, other functions): the kernel then keeps its lane loop."""

    def emit(node: ast.expr) -> str:
        if isinstance(node, ast.Constant) and not isinstance(node.value, bool):
            return f"_mm512_set1_ps({_literal(_number(node), 'f')})"
        if isinstance(node, ast.Name) and node.id in variables:
            return variables[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _VECTOR_BINARY:
            scale_add = _scale_add(node)
            if scale_add:
                scale, operand, constant = scale_add
                return f"opgen_scale_add_vector({_literal(scale, 'f')}, {emit(operand)}, {_literal(constant, 'f')})"
            return f"{_VECTOR_BINARY[type(node.op)]}({emit(node.left)}, {emit(node.right)})"
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = emit(node.operand)
            return f"opgen_negate_vector({inner})" if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None)
            if name == "abs" and len(node.args) == 1:
                return f"opgen_abs_vector({emit(node.args[0])})"
            scale_arg = node.args[1] if name == "exp" and len(node.args) == 2 else None
            if isinstance(scale_arg, ast.Constant):
                return f"{exp_function}_vector({emit(node.args[0])}, {_literal(_number(scale_arg), 'f')})"
        raise _NotVectorized

    try:
        return emit(tree)
    except _NotVectorized:
        return None


_DOUBLES_BINARY = {
    ast.Add: "opgen_doubles_add",
    ast.Sub: "opgen_doubles_sub",
    ast.Mult: "opgen_doubles_mul",
    ast.Div: "opgen_doubles_div",
}
# C's comparisons: false when an operand is NaN (ordered), but != (unordered)
_DOUBLES_COMPARE = {
    ast.Lt: "_CMP_LT_OQ",
    ast.LtE: "_CMP_LE_OQ",
    ast.Gt: "_CMP_GT_OQ",
    ast.GtE: "_CMP_GE_OQ",
    ast.Eq: "_CMP_EQ_OQ",
    ast.NotEq: "_CMP_NEQ_UQ",
}


def to_vector_double(tree: ast.expr, variables: Mapping[str, str]) -> str | None:
    """A double expression on a vector of double lanes (`opgen_doubles`, opgen_internal.h: 4
    lanes on AVX2, 8 on AVX-512) with the operations to_c's C performs in double, in the same
    order: +, -, *, /, one comparison, and `a if c else b` as a blend of both arms (as to_c's
    select), so the bits are the lane loop's. None for anything else (functions, and/or/not,
    chained comparisons, scale-adds, whose C may fuse): the kernel then keeps its lane loop."""

    def emit(node: ast.expr) -> str:
        if isinstance(node, ast.Constant) and not isinstance(node.value, bool):
            return f"opgen_doubles_set1({_literal(_number(node), '')})"
        if isinstance(node, ast.Name) and node.id in variables:
            return variables[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _DOUBLES_BINARY and _scale_add(node) is None:
            return f"{_DOUBLES_BINARY[type(node.op)]}({emit(node.left)}, {emit(node.right)})"
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd):
            return emit(node.operand)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return f"opgen_doubles_negate({emit(node.operand)})"
        if isinstance(node, ast.IfExp):
            test = node.test
            if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _DOUBLES_COMPARE:
                predicate = _DOUBLES_COMPARE[type(test.ops[0])]
                operands = f"{emit(test.left)}, {emit(test.comparators[0])}, {predicate}"
                return f"opgen_doubles_select({operands}, {emit(node.body)}, {emit(node.orelse)})"
        raise _NotVectorized

    try:
        return emit(tree)
    except _NotVectorized:
        return None


def scaled_exps(tree: ast.expr) -> ast.expr:
    """`tree` with each exp(c * y) as exp(y, c): c the product of the argument's constant
    factors that are powers of 2 and its negations (-abs(x): y = abs(x), c = -1; -2 * abs(x):
    c = -2), 1 when there are none. opgen_exp_short(f) folds such a c into its constants:
    the same bits as for the argument c * y, without the multiplication."""

    class Scaler(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.expr:
            self.generic_visit(node)
            if getattr(node.func, "id", None) != "exp":
                return node
            argument, scale = node.args[0], 1.0
            while True:
                if isinstance(argument, ast.UnaryOp) and isinstance(argument.op, ast.USub):
                    argument, scale = argument.operand, -scale
                elif isinstance(argument, ast.BinOp) and isinstance(argument.op, ast.Mult):
                    factor = _power_of_two(argument.left)
                    if factor is not None:
                        argument, scale = argument.right, scale * factor
                        continue
                    factor = _power_of_two(argument.right)
                    if factor is None:
                        break
                    argument, scale = argument.left, scale * factor
                else:
                    break
            return ast.copy_location(ast.Call(node.func, [argument, ast.Constant(scale)], []), node)

    return cast(ast.expr, Scaler().visit(copy.deepcopy(tree)))


# constants a scaled value may be added to as one multiply-add (_scale_add): far above the
# subnormals, so that a product that underflows cannot move their sum's rounding, and far
# below float's overflow threshold, so that one that overflows cannot be brought back
_SCALE_ADD_SMALLEST = 2.0**-100
_SCALE_ADD_LARGEST = 2.0**100


def _scale_add(node: ast.BinOp) -> tuple[float, ast.expr, float] | None:
    """(c, x, k) when `node` is c * x + k, k + c * x, c * x - k or k - c * x (x * c too) with
    c a power of 2 and k a constant of magnitude 2^-100 to 2^100; else None. c * x is exact
    (or, underflowed, far below half an ulp of k; overflowed, at least 2^128, where adding k
    stays above the threshold), so fused or not the sum rounds once to the same bits:
    opgen_scale_add(f) fuses it where the target has FMA, one operation for two."""
    if not isinstance(node.op, (ast.Add, ast.Sub)):
        return None
    for product, other, product_first in ((node.left, node.right, True), (node.right, node.left, False)):
        if not isinstance(product, ast.BinOp) or not isinstance(product.op, ast.Mult):
            continue
        if not isinstance(other, ast.Constant) or isinstance(other.value, bool):
            continue
        constant = _number(other)
        if not _SCALE_ADD_SMALLEST <= abs(constant) <= _SCALE_ADD_LARGEST:
            continue
        for factor, operand in ((product.left, product.right), (product.right, product.left)):
            scale = _power_of_two(factor)
            if scale is None:
                continue
            if isinstance(node.op, ast.Add):
                return scale, operand, constant
            # c * x - k, or k - c * x
            return (scale, operand, -constant) if product_first else (-scale, operand, constant)
    return None


def _power_of_two(node: ast.expr) -> float | None:
    """The value of a constant (negated or not) that is +-2^n, |n| <= 8 (its powers up to the
    polynomial's degree stay far inside float's range); else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _power_of_two(node.operand)
        return None if value is None else -value
    if not isinstance(node, ast.Constant) or isinstance(node.value, bool) or not node.value:
        return None
    mantissa, exponent = math.frexp(abs(_number(node)))
    return _number(node) if mantissa == 0.5 and abs(exponent - 1) <= 8 else None


def _number(node: ast.Constant) -> float:
    """The value of a number literal (_kind admits no constants but ints, floats and bools)."""
    return float(cast(float, node.value))


def _literal(value: float, suffix: str) -> str:
    text = repr(value)
    if "e" not in text and "." not in text:
        text += ".0"
    return text + suffix


def _kind(node: ast.expr, conditions: frozenset[str] | None) -> str:
    """'number' or 'condition' ('name': an untyped name); raises ExprError for anything outside the subset."""
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool):
            return "condition"
        if isinstance(value, float) and math.isfinite(value):
            problem = literal_problem(value)
            if problem:
                raise ExprError(problem)
            return "number"
        if isinstance(value, int) and abs(value) <= 2**53:
            return "number"
        raise ExprError(f"unsupported constant {value!r} (finite numbers only)")
    if isinstance(node, ast.Name):
        if conditions is None:
            return "name"
        return "condition" if node.id in conditions else "number"
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINARY:
            raise ExprError(f"unsupported operator in '{ast.unparse(node)}' (use + - * /)")
        _expect(node.left, "number", conditions)
        _expect(node.right, "number", conditions)
        return "number"
    if isinstance(node, ast.UnaryOp):
        if isinstance(node.op, ast.Not):
            _expect(node.operand, "condition", conditions)
            return "condition"
        if isinstance(node.op, (ast.USub, ast.UAdd)):
            _expect(node.operand, "number", conditions)
            return "number"
        raise ExprError(f"unsupported operator in '{ast.unparse(node)}'")
    if isinstance(node, ast.BoolOp):
        for operand in node.values:
            _expect(operand, "condition", conditions)
        return "condition"
    if isinstance(node, ast.Compare):
        if any(type(op) not in _COMPARE for op in node.ops):
            raise ExprError(f"unsupported comparison in '{ast.unparse(node)}'")
        for operand in [node.left, *node.comparators]:
            _expect(operand, "number", conditions)
        return "condition"
    if isinstance(node, ast.IfExp):
        _expect(node.test, "condition", conditions)
        _expect(node.body, "number", conditions)
        _expect(node.orelse, "number", conditions)
        return "number"
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id in REDUCTIONS:
            raise ExprError(
                f"{node.func.id}() is a reduction: it must be a whole entry of math.line "
                f'(name = "{node.func.id}(term)"), not part of an expression'
            )
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            allowed = ", ".join(sorted(FUNCTIONS))
            raise ExprError(f"unknown function in '{ast.unparse(node)}' (allowed: {allowed})")
        arity = FUNCTIONS[node.func.id][0]
        if node.keywords or len(node.args) != arity:
            raise ExprError(f"{node.func.id}() takes {arity} positional argument(s)")
        for arg in node.args:
            _expect(arg, "number", conditions)
        return "number"
    raise ExprError(f"unsupported syntax: '{ast.unparse(node)}'")


def _expect(node: ast.expr, wanted: str, conditions: frozenset[str] | None) -> None:
    kind = _kind(node, conditions)
    # An untyped name (conditions is None) may be either kind.
    if kind != "name" and kind != wanted:
        hint = ""
        if wanted == "condition":
            # C would take the number as an int condition, truncating it (0.5 is false)
            hint = " (write a comparison such as 'x > 0', and/or/not of conditions, or a bool attribute)"
        raise ExprError(f"'{ast.unparse(node)}' is a {kind} where a {wanted} is needed{hint}")
