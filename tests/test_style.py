"""The Python code is ruff-clean (ruff comes with the test extras)."""

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
