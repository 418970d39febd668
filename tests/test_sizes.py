"""Size as a symptom: the generated code stays in small functions, the generator's Python in
short ones, and the templates read like the C they make (CONTRIBUTING.md, Tests: "Sizes")."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
GENERATED = ROOT / "generated"

# The generated BatchNorm backward (baseline copy) at a third of its 7,197 lines before the
# microkernels and drivers; a generated function at most 200 lines; a Python one at most 80.
BATCH_NORM_LINES = 7197 // 3
GENERATED_FUNCTION_LINES = 200
PYTHON_FUNCTION_LINES = 80


def _c_functions(text: str) -> list[tuple[str, int]]:
    """(first line, length) of each function defined at file scope: from its declarator, the
    lines above its `{` in column 0 back to a blank line or a comment, to its `}` in column 0."""
    lines = text.splitlines()
    result = []
    start = None
    for number, line in enumerate(lines):
        if line.startswith("{") and start is None:
            start = number
            while start > 0 and lines[start - 1].strip() and not lines[start - 1].startswith(("}", "/*", " *", "#")):
                start -= 1
        elif line.startswith("}") and start is not None:
            result.append((lines[start], number - start + 1))
            start = None
    return result


def test_the_function_parser_measures_a_known_function():
    text = "/* a */\nstatic int f(int a,\n          int b)\n{\n    return a + b;\n}\n"
    assert _c_functions(text) == [("static int f(int a,", 5)]


def test_batch_norm_backward_is_a_third_of_its_former_size():
    lines = len((GENERATED / "batch_norm_training_backward.c").read_text().splitlines())
    assert lines <= BATCH_NORM_LINES, f"generated/batch_norm_training_backward.c: {lines} lines"


@pytest.mark.parametrize("path", sorted(GENERATED.glob("*.[ch]")), ids=lambda p: p.name)
def test_no_generated_function_is_over_200_lines(path):
    long = [(first, length) for first, length in _c_functions(path.read_text()) if length > GENERATED_FUNCTION_LINES]
    assert not long, f"{path.name}: {long}"


def test_no_python_function_is_longer_than_80_lines():
    long = []
    for path in sorted((ROOT / "opgen").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > PYTHON_FUNCTION_LINES:
                    long.append(f"{path.name}:{node.name} ({length} lines)")
    assert not long, long


@pytest.mark.parametrize("path", sorted((ROOT / "templates").rglob("*.j2")), ids=lambda p: p.name)
def test_no_template_has_more_template_logic_than_c(path):
    """Lines that hold only `{% ... %}` statements against lines with C (or text) on them; the
    `{# ... #}` comments count as neither."""
    text = re.sub(r"\{#.*?#\}", "", path.read_text(), flags=re.S)
    logic = c = 0
    for line in text.splitlines():
        if line.strip():
            if re.sub(r"\{%.*?%\}", "", line).strip():
                c += 1
            else:
                logic += 1
    assert logic <= c, f"{path.name}: {logic} lines of template logic, {c} of C"
