"""generated/ compiled once per compiler and flags for the whole test session.

Several tests need the bundled sources compiled the same way (warning-free with -Werror, then
linked into a C or C++ program): each configuration is compiled once, its files in parallel,
and every test that asks for it links the same objects. A configuration that fails to compile
fails every test that asks for it, with the compiler's message.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from opgen.render import BUNDLED_OUTPUT

WARNINGS = ["-Wall", "-Wextra", "-Wpedantic", "-Werror"]


class ObjectBuilds:
    """Objects of generated/'s C files, keyed by the compile command (compiler and flags)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sources = root / "sources"
        self.sources.mkdir()
        for path in BUNDLED_OUTPUT.iterdir():
            if path.suffix in (".c", ".h"):
                shutil.copy(path, self.sources)
        self._lock = threading.Lock()
        self._done: dict[tuple[str, ...], list[Path] | str] = {}

    def objects(self, command: list[str]) -> list[Path]:
        """Every C file of generated/ compiled with `command` (compiler and flags; -c and -o are
        added), sorted by name; raises AssertionError with the compiler's output on a failure."""
        key = tuple(command)
        with self._lock:  # tests run one at a time; the lock only keeps a key from building twice
            if key not in self._done:
                self._done[key] = self._compile(command)
            result = self._done[key]
        if isinstance(result, str):
            raise AssertionError(result)
        return result

    def _compile(self, command: list[str]) -> list[Path] | str:
        directory = self.root / hashlib.sha256("\0".join(command).encode()).hexdigest()[:16]
        directory.mkdir()

        def compile_one(source: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
            target = directory / source.with_suffix(".o").name
            run = [*command, "-c", str(source), "-o", str(target)]
            return target, subprocess.run(run, capture_output=True, text=True, check=False)

        sources = sorted(self.sources.glob("*.c"))
        # largest first, so the long files do not end up last on one core
        order = sorted(sources, key=lambda p: -p.stat().st_size)
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            results = dict(zip(order, pool.map(compile_one, order)))
        for source in sources:
            target, result = results[source]
            if result.returncode != 0:
                return f"{' '.join(command)} -c {source.name}\n{result.stderr}"
        return [results[source][0] for source in sources]
