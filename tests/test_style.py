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
