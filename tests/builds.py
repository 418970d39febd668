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

from opgen import plan
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

    def objects(self, command: list[str], host_only: bool = False) -> list[Path]:
        """Every C file of generated/ compiled with `command` (compiler and flags; -c and -o are
        added), sorted by name; raises AssertionError with the compiler's output on a failure.
        `host_only`: without the copies of the CPU targets this CPU cannot run (left out as a
        user's build may, OPGEN_WITHOUT_<TARGET>), for configurations that other tests already
        compile with every copy."""
        left_out = [t for t in plan.compiled_targets() if t not in plan.host_targets()] if host_only else []
        key = (*command, *(f"-DOPGEN_WITHOUT_{t.upper()}" for t in left_out))
        with self._lock:  # tests run one at a time; the lock only keeps a key from building twice
            if key not in self._done:
                sources = [
                    p
                    for p in sorted(self.sources.glob("*.c"))
                    if not p.stem.endswith(tuple(f"__{t}" for t in left_out))
                ]
                self._done[key] = self._compile(list(key), sources)
            result = self._done[key]
        if isinstance(result, str):
            raise AssertionError(result)
        return result

    def _compile(self, command: list[str], sources: list[Path]) -> list[Path] | str:
        directory = self.root / hashlib.sha256("\0".join(command).encode()).hexdigest()[:16]
        directory.mkdir()
        objects, failed = compile_each(command, sources, directory)
        if failed is not None:
            return f"{' '.join(failed.args)}\n{failed.stderr}"
        return objects


def compile_each(
    command: list[str], sources: list[Path], directory: Path
) -> tuple[list[Path], subprocess.CompletedProcess[str] | None]:
    """Each of `sources` compiled with `command` (compiler and flags; -c and -o are added) into
    `directory`, one process per core: the objects in the sources' order, and the first failed
    compile in that order (None when every one succeeded)."""

    def compile_one(source: Path) -> subprocess.CompletedProcess[str]:
        run = [*command, "-c", str(source), "-o", str(directory / source.with_suffix(".o").name)]
        return subprocess.run(run, capture_output=True, text=True, check=False)

    def size(source: Path) -> int:  # a copy `<op>__<target>.c` compiles the code of `<op>.c`
        for target in plan.compiled_targets()[1:]:
            included = source.with_name(source.stem[: -len(f"__{target}")] + ".c")
            if source.stem.endswith(f"__{target}") and included.exists():
                return included.stat().st_size
        return source.stat().st_size

    # largest first, so the long files do not end up last on one core
    order = sorted(sources, key=lambda p: -size(p))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = dict(zip(order, pool.map(compile_one, order)))
    failed = next((results[source] for source in sources if results[source].returncode != 0), None)
    return [directory / source.with_suffix(".o").name for source in sources], failed
