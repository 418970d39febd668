"""Math expressions of a spec: a small, checked subset of Python syntax, translated to C.

Allowed: numbers, names, + - * /, unary -, comparisons (chains too), and/or/not,
`a if cond else b`, and the functions in FUNCTIONS. Everything else is an error,
so a spec can never place arbitrary text in the generated C.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping

# name -> (arity, C name without the float/double suffix)
FUNCTIONS: dict[str, tuple[int, str]] = {
    "exp": (1, "exp"),
    "log": (1, "log"),
    "sqrt": (1, "sqrt"),
    "tanh": (1, "tanh"),
    "abs": (1, "fabs"),
    "min": (2, "fmin"),
    "max": (2, "fmax"),
}

MAX_LENGTH = 4000  # characters in one expression
_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


class ExprError(ValueError):
    """An expression that is not in the allowed subset, or uses an unknown name."""


def parse(text: str) -> ast.expr:
    """Parse and check one expression; the result is numeric (not a bare condition)."""
    if not isinstance(text, str) or not text.strip():
        raise ExprError("expected a non-empty expression string")
    if len(text) > MAX_LENGTH:
        raise ExprError(f"longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
        kind = _kind(tree)
    except SyntaxError as error:
        raise ExprError(f"syntax error at column {error.offset}: {error.msg}") from None
    except RecursionError:
        raise ExprError("nested too deeply") from None
    if kind == "condition":
        raise ExprError("the expression is a condition; it must give a number")
    return tree


def names(tree: ast.expr) -> set[str]:
    """Every variable name the expression reads (function names excluded)."""
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and id(node) not in called}


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

    copy = ast.parse(ast.unparse(tree), mode="eval").body
    return Folder().visit(copy)


def to_c(tree: ast.expr, variables: Mapping[str, str], literal_suffix: str, math_suffix: str, select: str) -> str:
    """C text of a checked expression; `variables` maps each spec name to its C spelling.

    Both arms of `a if c else b` become arguments of the function `select`, so both are
    always computed and the compiler can turn the choice into a vector blend; `and`/`or`
    become the non-short-circuit `&`/`|` on 0/1 values for the same reason.
    """

    def emit(node: ast.expr) -> str:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool):
                return "1" if node.value else "0"
            return _literal(float(node.value), literal_suffix)
        if isinstance(node, ast.Name):
            if node.id not in variables:
                raise ExprError(f"unknown name '{node.id}'")
            return variables[node.id]
        if isinstance(node, ast.BinOp):
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
            c_name = FUNCTIONS[node.func.id][1] + math_suffix  # type: ignore[union-attr]
            return f"{c_name}(" + ", ".join(emit(arg) for arg in node.args) + ")"
        raise ExprError(f"unsupported syntax: {ast.unparse(node)}")

    return emit(tree)


def _literal(value: float, suffix: str) -> str:
    text = repr(value)
    if "e" not in text and "." not in text:
        text += ".0"
    return text + suffix


def _kind(node: ast.expr) -> str:
    """'number' or 'condition'; raises ExprError for anything outside the subset."""
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool):
            return "condition"
        if isinstance(value, float) and math.isfinite(value):
            return "number"
        if isinstance(value, int) and abs(value) <= 2**53:
            return "number"
        raise ExprError(f"unsupported constant {value!r} (finite numbers only)")
    if isinstance(node, ast.Name):
        return "name"
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINARY:
            raise ExprError(f"unsupported operator in '{ast.unparse(node)}' (use + - * /)")
        _expect(node.left, "number")
        _expect(node.right, "number")
        return "number"
    if isinstance(node, ast.UnaryOp):
        if isinstance(node.op, ast.Not):
            _expect(node.operand, "condition")
            return "condition"
        if isinstance(node.op, (ast.USub, ast.UAdd)):
            _expect(node.operand, "number")
            return "number"
        raise ExprError(f"unsupported operator in '{ast.unparse(node)}'")
    if isinstance(node, ast.BoolOp):
        for value in node.values:
            _expect(value, "condition")
        return "condition"
    if isinstance(node, ast.Compare):
        if any(type(op) not in _COMPARE for op in node.ops):
            raise ExprError(f"unsupported comparison in '{ast.unparse(node)}'")
        for operand in [node.left, *node.comparators]:
            _expect(operand, "number")
        return "condition"
    if isinstance(node, ast.IfExp):
        _expect(node.test, "condition")
        _expect(node.body, "number")
        _expect(node.orelse, "number")
        return "number"
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            allowed = ", ".join(sorted(FUNCTIONS))
            raise ExprError(f"unknown function in '{ast.unparse(node)}' (allowed: {allowed})")
        arity = FUNCTIONS[node.func.id][0]
        if node.keywords or len(node.args) != arity:
            raise ExprError(f"{node.func.id}() takes {arity} positional argument(s)")
        for arg in node.args:
            _expect(arg, "number")
        return "number"
    raise ExprError(f"unsupported syntax: '{ast.unparse(node)}'")


def _expect(node: ast.expr, wanted: str) -> None:
    kind = _kind(node)
    # A bare name may be a number or a (specialized boolean) condition; the name check decides.
    if kind != "name" and kind != wanted:
        raise ExprError(f"'{ast.unparse(node)}' is a {kind} where a {wanted} is needed")
