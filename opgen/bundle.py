"""Where the bundled specs and templates are, and the bundled kernels prebuilt in a wheel.

From a checkout (and its editable install) the bundled specs and templates are the
repository's specs/ and templates/, compiled on first use like any spec directory. A wheel
(setup.py) carries copies of both in opgen/_bundle/, with the cffi module compiled from them
(portable: every CPU target's copies, where a checkout's module holds those its CPU runs)
and the repeated-call helper (fastcall.c) compiled at wheel-build time, so an installed
opgen runs the bundled ops with no compiler, no cache and no rendering.

Invariant: a prebuilt module is loaded only while its record's digest equals the digest of
the installed sources it was made from (`digest`); otherwise the bundled specs are built as
in a checkout, so an edited installation never runs stale kernels.

This module is imported by `import opgen`: it imports nothing heavy.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import json
import os
import shutil
import warnings
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
DATA = PACKAGE / "_bundle"  # only in a built package
INSTALLED = (DATA / "specs").is_dir()
SPECS = (DATA if INSTALLED else PACKAGE.parent) / "specs"
TEMPLATES = (DATA if INSTALLED else PACKAGE.parent) / "templates"
OUTPUT = PACKAGE.parent / "generated"  # `opgen build`'s default output, in a checkout only
RECORD = "prebuilt.json"


def digest(package: Path) -> str:
    """sha256 of what the prebuilt files are made from: opgen's Python sources, fastcall.c, and
    the bundled specs and templates under `package`/_bundle (names and bytes)."""
    data = package / "_bundle"
    files = [*sorted(package.glob("*.py")), package / "fastcall.c"]
    for folder in (data / "specs", data / "templates"):
        files += sorted(path for path in folder.rglob("*") if path.is_file())
    hashed = hashlib.sha256()
    for path in files:
        hashed.update(path.relative_to(package).as_posix().encode() + b"\0")
        hashed.update(path.read_bytes() + b"\0")
    return hashed.hexdigest()


def prebuilt(kind: str) -> Path | None:
    """The prebuilt file of `kind` ("module": the bundled specs' cffi module, or "fastcall"),
    None from a checkout or when the record does not match the installed sources."""
    record = _record()
    return None if record is None else DATA / record[kind]


@functools.cache  # read and checked once per process
def _record() -> dict[str, str] | None:
    path = DATA / RECORD
    if not INSTALLED or not path.is_file():
        return None
    record: dict[str, str] = json.loads(path.read_text())
    names = (record["module"], record["fastcall"])
    loadable = all(any(name.endswith(s) for s in importlib.machinery.EXTENSION_SUFFIXES) for name in names)
    if record["digest"] != digest(PACKAGE) or not loadable or not all((DATA / name).is_file() for name in names):
        warnings.warn(
            f"opgen: the prebuilt kernels in {DATA} do not match this installation (edited, or "
            "another Python): the bundled specs are compiled instead",
            RuntimeWarning,
            stacklevel=4,
        )
        return None
    return record


def build_into(package: Path) -> None:
    """Compile the specs and templates copied to `package`/_bundle and the repeated-call helper
    there, and write the record `prebuilt` checks (at wheel-build time, from a checkout)."""
    from opgen.compile import build_fastcall, build_module
    from opgen.render import render_library

    data = package / "_bundle"
    targets = os.environ.get("OPGEN_WHEEL_TARGETS", "all")
    if targets not in ("all", "host"):
        raise ValueError(f"OPGEN_WHEEL_TARGETS={targets!r}: 'all' (the default) or 'host'")
    library = render_library(data / "specs", data / "templates")
    # "host": the copies this CPU runs alone, as a checkout's module (from its cache when `opgen
    # build` ran): a wheel for this machine, quicker to build
    built = {"module": build_module(library, portable=targets == "all"), "fastcall": build_fastcall()}
    for path in built.values():
        shutil.copy2(path, data / path.name)
    record = {"digest": digest(package), **{kind: path.name for kind, path in built.items()}}
    (data / RECORD).write_text(json.dumps(record, indent=2) + "\n")
