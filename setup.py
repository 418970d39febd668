"""A wheel of opgen carries its bundled kernels compiled (the metadata is in pyproject.toml).

build_py copies the repository's specs/ and templates/ into opgen/_bundle/ of the build and
compiles them there with opgen's own build (opgen/bundle.py: build_into), so an installed opgen
needs no compiler. The wheel is therefore tagged for this Python and platform. An editable
install copies and compiles nothing: it runs from the checkout, compiling on first use.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithKernels(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        package = Path(self.build_lib) / "opgen"
        data = package / "_bundle"
        shutil.rmtree(data, ignore_errors=True)  # no file of an earlier build may stay
        for name in ("specs", "templates"):
            shutil.copytree(ROOT / name, data / name, ignore=shutil.ignore_patterns(".*"))
        sys.path.insert(0, str(ROOT))
        from opgen import bundle

        if bundle.PACKAGE != ROOT / "opgen":
            raise RuntimeError(f"building the kernels needs this checkout's opgen, not {bundle.PACKAGE}")
        bundle.build_into(package)


class CompiledDistribution(Distribution):
    def has_ext_modules(self) -> bool:
        return True  # compiled modules inside: a platform wheel, not py3-none-any


setup(cmdclass={"build_py": BuildWithKernels}, distclass=CompiledDistribution)
