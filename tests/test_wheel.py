"""The wheel runs the bundled ops with no compiler and no writable cache.

The package sources are copied out of the checkout and built into a wheel (`pip wheel`, which
compiles the bundled kernels, from opgen's cache when `opgen build` ran before); the wheel is
installed with its dependencies into a fresh virtual environment, and every bundled op runs
there, against the oracle, with CC unset, only the environment's bin/ on PATH, and HOME and
XDG_CACHE_HOME below a regular file, where nothing can be created, not even by root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import opgen
from tests.helpers import SEED

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ["pyproject.toml", "setup.py", "build_backend.py", "MANIFEST.in", "README.md", "opgen", "specs", "templates"]

# run in the installed opgen: argv = site-packages, seed
CALL_EVERY_OP = """
import sys
import opgen
from opgen import bundle, check, oracle, runtime

site = sys.argv[1]
assert opgen.__file__.startswith(site) and bundle.INSTALLED, opgen.__file__
assert opgen.bundled.module.__file__ == str(bundle.prebuilt("module")), opgen.bundled.module.__file__
fast = runtime._fastcall()
assert fast is not None and fast.__file__ == str(bundle.prebuilt("fastcall")), fast
results = [r for spec in opgen.bundled.specs for r in check.check_op(opgen.bundled, spec, oracle, int(sys.argv[2]))]
print(check.report(results))
sys.exit(any(r.failure for r in results))
"""


def run(command: list[str], **options) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600, **options)
    assert result.returncode == 0, f"{' '.join(command)}:\n{result.stdout}\n{result.stderr}"
    return result


def build_wheel(tmp_path: Path) -> Path:
    """A wheel built from a copy of the package sources (the checkout stays untouched)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, source / name)
    # a wheel of the copies this CPU runs, the module `opgen build` made (from the cache): the
    # wheel's default, every target's copies (opgen/bundle.py), is checked in test_compile_units
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OPGEN_WHEEL_TARGETS": "host"}
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    run([*pip_wheel, "-w", str(tmp_path / "dist"), str(source)], env=environment)
    (wheel,) = (tmp_path / "dist").glob("opgen-*.whl")
    return wheel


def check_contents(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in ("specs", "templates"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file():
                assert f"opgen/_bundle/{path.relative_to(ROOT).as_posix()}" in names, path
    assert "opgen/_bundle/prebuilt.json" in names and "opgen/fastcall.c" in names
    assert "opgen/bench_onednn.c" in names  # `opgen bench --compare onednn` compiles it
    assert not wheel.name.endswith("-none-any.whl"), wheel.name  # compiled code inside


@pytest.mark.slow
def test_wheel_runs_every_op_without_compiler(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    check_contents(wheel)
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    # the dependencies come from the configured package index (or pip's cache), as a user's would
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", str(wheel)])
    site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('platlib'))"]).stdout.strip()
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    bare = {"PATH": str(venv / "bin"), "HOME": str(blocker / "home"), "XDG_CACHE_HOME": str(blocker / "cache")}
    for compiler in ("cc", "gcc", "clang", "c99"):
        assert shutil.which(compiler, path=bare["PATH"]) is None, compiler
    result = run([str(python), "-c", CALL_EVERY_OP, site, str(SEED)], env=bare, cwd=tmp_path)
    for name in opgen.bundled.ops:
        assert f"\n{name} " in result.stdout, f"{name} was not run (seed {SEED}):\n{result.stdout}"
    info = run([str(venv / "bin" / "opgen"), "info"], env=bare, cwd=tmp_path)
    assert all(name in info.stdout for name in opgen.bundled.ops), info.stdout
