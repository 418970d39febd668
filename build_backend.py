"""The build backend: setuptools', plus, for a wheel, opgen's own dependencies in the build
environment, since a wheel's build compiles the bundled kernels with opgen (setup.py). An
editable install compiles nothing at install time and needs setuptools alone, as a plain
setuptools project does."""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import build_meta
from setuptools.build_meta import *  # noqa: F403  (every hook, unchanged but this one)


def get_requires_for_build_wheel(config_settings: dict | None = None) -> list[str]:
    dependencies = tomllib.loads(Path("pyproject.toml").read_text())["project"]["dependencies"]
    return [*build_meta.get_requires_for_build_wheel(config_settings), *dependencies]
