"""The Python code is ruff-clean and mypy-strict-clean (both come with the test extras)."""

import shutil
import subprocess
from pathlib import Path

import pytest


def test_ruff_clean():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    result = subprocess.run(
        [ruff, "check", "."], cwd=Path(__file__).parent.parent, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_clean():
    """`mypy` with pyproject.toml's settings: --strict on opgen/."""
    mypy = shutil.which("mypy")
    if mypy is None:
        pytest.skip("mypy is not installed (pip install -e '.[test]')")
    result = subprocess.run([mypy], cwd=Path(__file__).parent.parent, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def _macro_arguments(text: str, open_paren: int) -> list[str]:
    """The top-level arguments of the call whose "(" is at `open_paren` (strings and nested
    brackets skipped)."""
    arguments, depth, start, quote = [], 0, open_paren + 1, ""
    for at in range(open_paren, len(text)):
        char = text[at]
        if quote:
            quote = "" if char == quote and text[at - 1] != "\\" else quote
        elif char in "\"'":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                arguments.append(text[start:at].strip())
                return arguments
        elif char == "," and depth == 1:
            arguments.append(text[start:at].strip())
            start = at + 1
    raise AssertionError(f"unclosed call at {open_paren}")


def test_templates_pass_switches_and_counts_by_name():
    """A macro call reads like its meaning: a True, False, None or number passed to a template
    macro names its parameter (elements=True, lines=0), never by position."""
    import re

    from opgen.render import BUNDLED_TEMPLATES

    sources = {path.name: path.read_text() for path in BUNDLED_TEMPLATES.glob("*.j2")}
    macros = {name for text in sources.values() for name in re.findall(r"{%-? macro (\w+)\(", text)}
    assert {"block", "row_tail", "nxc_rows", "line_writers"} <= macros
    positional = []
    for file, text in sources.items():
        for call in re.finditer(r"\b(\w+)\(", text):
            if call[1] not in macros or re.match(r"{%-? macro ", text[max(0, call.start() - 12) : call.start()]):
                continue
            for argument in _macro_arguments(text, call.end() - 1):
                if re.fullmatch(r"True|False|None|-?\d+", argument):
                    line = text.count("\n", 0, call.start()) + 1
                    positional.append(f"{file}:{line}: {call[1]}(... {argument} ...)")
    assert not positional, "\n".join(positional)


def test_tuning_constants_come_from_the_model():
    """Every number the C is tuned by is a constant of opgen/plan.py emitted into
    opgen_internal.h ({{ ... }}), not a literal in a template or a driver; 0 and 1 (feature
    switches) aside."""
    import re

    from opgen.render import BUNDLED_TEMPLATES

    found = []
    for path in [*BUNDLED_TEMPLATES.glob("*.j2"), *(BUNDLED_TEMPLATES / "drivers").glob("*.[ch]")]:
        for name, value in re.findall(r"^\s*#define (OPGEN_\w+) (.+)$", path.read_text(), re.M):
            value = value.split("/*")[0].strip()
            if "{{" not in value and value not in ("0", "1") and re.search(r"\b\d", value):
                found.append(f"{path.name}: {name} {value}")
    assert not found, "literal tuning constants:\n" + "\n".join(found)
