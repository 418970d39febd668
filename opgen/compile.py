"""Compile rendered C into a cffi extension module, cached by the content of what is built.

The cache key covers the generated sources, the cffi declarations, the compiler and its
version, the flags, the Python ABI and opgen's version: a stale module is never loaded.
A build happens in a temporary directory that is renamed into place when complete, so an
interrupted or concurrent build never leaves a half-written module behind.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from opgen import __version__, c_api, plan, specs

if TYPE_CHECKING:  # loading a module needs no templates: render (and jinja2) is imported by builds
    from opgen.render import Library

# IEEE semantics: no -ffast-math, and no contraction into FMA, so every target rounds alike.
# -fno-math-errno only lets sqrt be one instruction; results are unchanged.
C_FLAGS = ["-O3", "-std=c99", "-fPIC", "-ffp-contract=off", "-fno-math-errno", "-fopenmp"]
# The baseline copies of a module that also holds a better copy this CPU runs: they run only
# when OPGEN_CPU_TARGET asks for them (tests, comparisons), so they are optimized for the build
# (-O1 compiles BatchNorm's baseline copy in 40 % of -O3's time). The optimization level
# changes no result: no flag here lets the compiler reorder or contract arithmetic.
FALLBACK_FLAGS = ["-O1", *C_FLAGS[1:]]
GROUP_BYTES = 256 << 10  # C compiled in one run at most, where sources are grouped (compile_units)
WARNING_FLAGS = ["-Wall", "-Wextra", "-Wpedantic"]
# Read once, at import, before any build thread starts: sysconfig fills its variables on first
# use, and another thread asking meanwhile gets them half filled (CPython 3.11). A build's
# module and its fastcall helper compute their cache keys in two threads, and now and then one
# of them missed EXT_SUFFIX: a second cache folder for the same library.
EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX") or ".so"


class BuildError(RuntimeError):
    """The C compiler or the cffi build failed; the message carries the compiler's output."""


def compiler() -> list[str]:
    return shlex.split(os.environ.get("CC", "cc"))


def cache_root() -> Path:
    root = os.environ.get("OPGEN_CACHE_DIR")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "opgen"


def _compiler_identity() -> str:
    return _identity_of(tuple(compiler()))


@functools.cache  # asked per file: one `--version` run per compiler and process
def _identity_of(command: tuple[str, ...]) -> str:
    try:
        result = subprocess.run([*command, "--version"], capture_output=True, text=True, check=False)
    except OSError as error:
        raise BuildError(f"C compiler {command[0]!r} cannot be run: {error.strerror} (set CC)") from None
    return result.stdout


def _digest(*parts: str) -> str:
    """A short hash of what a build depends on: opgen, Python's ABI, the compiler, and `parts`."""
    digest = hashlib.sha256()
    common = (__version__, sys.implementation.cache_tag, EXT_SUFFIX)
    for part in (*common, " ".join(compiler()), _compiler_identity(), *parts):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:24]


@dataclass(frozen=True)
class Unit:
    """One compiler run of a module build: a source of the library, or several included by one
    file (a source that is not the library's, named opgen_unit_<n>.c), and the flags."""

    sources: tuple[str, ...]
    flags: tuple[str, ...]

    def text(self) -> str:
        return "".join(f'#include "{source}"\n' for source in self.sources)


def cache_key(library: Library, units: dict[str, Unit] | None = None) -> str:
    """The key of the module built from `library`'s `units` (compile_units; the portable
    module's when None)."""
    units = compile_units(library) if units is None else units
    files = (f"{name}\0{library.files[name]}" for name in sorted(library.files))
    runs = (f"{name}\0{' '.join(unit.sources)}\0{' '.join(unit.flags)}" for name, unit in sorted(units.items()))
    return _digest(*runs, library.cdef, *files)


def compile_units(library: Library, targets: Sequence[str] | None = None) -> dict[str, Unit]:
    """The compiler runs of a module of `library`, by the name of the file each compiles.

    `targets` None: every CPU target's copies, all with C_FLAGS (a portable module). Else the
    copies of `targets` (plan.TARGETS names) and the baseline's, which the dispatcher falls back
    to: the copies of the targets left out are not compiled and the dispatcher, told by
    OPGEN_WITHOUT_<TARGET>, never chooses them; the baseline copies take FALLBACK_FLAGS when a
    better copy is compiled.

    Each run parses opgen_internal.h and the compiler's intrinsics headers again (0.5-0.8 s on
    x86-64), most of the time a small source takes: the sources that are no kernel copies (the
    C API, the runtime, the dispatcher) are compiled together, GROUP_BYTES of C a run, and so
    are small baseline copies under FALLBACK_FLAGS. A run compiles the same functions (names are
    op-prefixed or opgen_-prefixed, and an op's name cannot start with opgen); the kernels that
    run by default keep a run each, so their code is the same as in the generated sources'
    builds: in a larger unit GCC inlines differently (grouped, sigmoid_backward's bf16 kernel
    took 1.11x its time alone)."""
    compiled = plan.compiled_targets()
    unknown = [name for name in targets or () if name not in compiled]
    if unknown:
        raise ValueError(f"unknown CPU targets {', '.join(unknown)} (known: {', '.join(compiled)})")
    kept = compiled if targets is None else ("baseline", *targets)
    left_out = [name for name in compiled if name not in kept]
    copies = {f"__{name}.c": name for name in compiled[1:]}
    fallback = targets is not None and any(name != "baseline" for name in targets)
    baselines = {
        source[: -len(suffix)] + ".c" for source in library.files for suffix in copies if source.endswith(suffix)
    }
    without = tuple(f"-DOPGEN_WITHOUT_{name.upper()}" for name in left_out)  # read by opgen_dispatch.c alone
    units: dict[str, Unit] = {}
    groups: dict[tuple[str, ...], list[str]] = {}
    for source in sorted(library.files):
        target = next((name for suffix, name in copies.items() if source.endswith(suffix)), "baseline")
        if not source.endswith(".c") or target in left_out:
            continue
        if target != "baseline":
            units[source] = Unit((source,), (*C_FLAGS, *target_flags(source)))
        elif source not in baselines:
            groups.setdefault((*C_FLAGS, *without), []).append(source)
        elif not fallback:
            units[source] = Unit((source,), tuple(C_FLAGS))
        elif len(library.files[source]) < GROUP_BYTES:
            groups.setdefault(tuple(FALLBACK_FLAGS), []).append(source)
        else:
            units[source] = Unit((source,), tuple(FALLBACK_FLAGS))
    for flags, sources in groups.items():
        chunk: list[str] = []
        for index, source in enumerate(sources):
            chunk.append(source)
            size = sum(compiled_bytes(library, name) for name in chunk)
            if size >= GROUP_BYTES or index == len(sources) - 1:
                units[f"opgen_unit_{len(units)}.c" if len(chunk) > 1 else source] = Unit(tuple(chunk), flags)
                chunk = []
    return units


def compiled_bytes(library: Library, source: str) -> int:
    """Bytes of C a run compiles for `source`: a per-target copy `<op>__<target>.c` compiles
    the code of `<op>.c`."""
    for target in plan.compiled_targets()[1:]:
        if source.endswith(f"__{target}.c"):
            return len(library.files[source[: -len(f"__{target}.c")] + ".c"])
    return len(library.files[source])


def module_name(key: str) -> str:
    return f"_opgen_{key}"


def target_flags(source: str) -> list[str]:
    """Flags naming the instruction sets of a per-target copy (`<name>__avx2.c`...) for clang
    on x86-64, none otherwise. clang does not pass a file's target pragma on to the loops
    OpenMP outlines: they ran baseline code calling the copy's helpers (two threads, bf16 ReLU
    7 GB/s instead of 51); GCC does, and its copies build as before."""
    if "clang" not in _compiler_identity().lower() or platform.machine().lower() not in ("x86_64", "amd64"):
        return []
    for target in plan.TARGETS:
        if target.get("isa") and source.endswith(f"__{target['name']}.c"):
            return [f"-m{feature}" for feature in target["isa"].split(",")]
    return []


def _compile_object(source: Path, directory: Path, flags: list[str]) -> Path:
    target = source.with_suffix(".o")
    flags = [*flags, *WARNING_FLAGS]
    command = [*compiler(), *flags, f"-I{directory}", "-c", str(source), "-o", str(target)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(f"compiling {source.name} failed:\n{shlex.join(command)}\n{result.stderr.strip()}")
    return target


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if needed): concurrent builds take turns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            import fcntl
        except ImportError:  # no POSIX locks here: builds still never expose partial files
            yield
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_module(library: Library, portable: bool = False) -> Path:
    """Path of the compiled module for `library`, building it when the cache has none.

    The module holds the copies of the CPU targets this CPU runs (plan.host_targets()), or,
    `portable`, every target's copies at full optimization, for a module to ship (a wheel's).
    The sources of `library` (generated/, the CMake project) hold every target either way."""
    units = compile_units(library, None if portable else plan.host_targets())
    key = cache_key(library, units)
    return _cached(key, module_name(key), lambda work, name: _build(library, units, work, name))


def _cached(key: str, name: str, build: Callable[[Path, str], None]) -> Path:
    """The module `name` in the cache folder `key`; `build(work, name)` makes it in a fresh
    folder that is renamed into place when complete, one build at a time."""
    final = cache_root() / key
    found = _module_file(final, name)
    if found:
        return found
    with locked(cache_root() / f".{key}.lock"):
        found = _module_file(final, name)  # a concurrent build may have finished meanwhile
        if found:
            return found
        work = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{key}."))
        try:
            build(work, name)
            try:
                os.replace(work, final)
            except OSError:
                if not _module_file(final, name):  # not a finished twin from a concurrent build
                    raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
    found = _module_file(final, name)
    if not found:
        raise BuildError(f"the build left no module in {final}")
    return found


def _build(library: Library, units: dict[str, Unit], work: Path, name: str) -> None:
    from opgen.render import write_files

    compiled = {source for unit in units.values() for source in unit.sources}
    write_files(work, {n: text for n, text in library.files.items() if n in compiled or not n.endswith(".c")})
    write_files(work, {n: unit.text() for n, unit in units.items() if n not in library.files})
    wrapper = _emit_wrapper(library, name, work)

    def cost(run: str) -> int:  # -O3 takes about three times -O1's time on the same code
        level = {"-O1": 1, "-O2": 2}.get(units[run].flags[0], 3)
        return level * sum(compiled_bytes(library, source) for source in units[run].sources)

    # the costliest first: a long compile started last would leave the other cores idle at the
    # end; the cffi wrappers (a few seconds) compile alongside the kernels, not after them
    runs = sorted(units, key=lambda run: (-cost(run), run))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        jobs = [pool.submit(_compile_object, work / run, work, list(units[run].flags)) for run in runs[:1]]
        jobs.append(pool.submit(_compile_wrapper, wrapper, work))
        jobs += [pool.submit(_compile_object, work / run, work, list(units[run].flags)) for run in runs[1:]]
        objects = [job.result() for job in jobs]
    _link_module(work / f"{name}{EXT_SUFFIX}", objects)


def _emit_wrapper(library: Library, name: str, work: Path) -> Path:
    """The cffi module's C source (the Python wrappers of the C API's declarations) in `work`."""
    import cffi  # imported here: only builds need it
    from cffi.recompiler import make_c_source

    ffi = cffi.FFI()
    ffi.cdef(library.cdef)
    headers = [header for header in ("opgen.h", "opgen_aclnn.h") if header in library.files]
    source = work / f"{name}.c"
    make_c_source(ffi, name, "".join(f'#include "{header}"\n' for header in headers), str(source))
    return source


def _compile_wrapper(source: Path, work: Path) -> Path:
    """Compile the cffi wrappers. They only convert arguments, and the Python functions call
    the kernels and the C API by address (through fastcall.c), not through them: not optimized
    (-O0 halves the time of this 1 MB of C), no warnings asked for (the code is cffi's)."""
    target = source.with_suffix(".o")
    paths = sysconfig.get_paths()
    include = dict.fromkeys((paths["include"], paths["platinclude"]))
    command = [*compiler(), "-O0", "-g0", "-fPIC", *(f"-I{d}" for d in include), f"-I{work}"]
    command += ["-c", str(source), "-o", str(target)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(f"compiling the cffi module failed:\n{shlex.join(command)}\n{result.stderr.strip()}")
    return target


def _link_module(target: Path, objects: list[Path]) -> None:
    # an extension module leaves Python's symbols to the interpreter that loads it
    lookup = ["-undefined", "dynamic_lookup"] if sys.platform == "darwin" else []
    command = [*compiler(), "-shared", "-fopenmp", *lookup, *(str(o) for o in objects), "-lm", "-o", str(target)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(f"linking the module failed:\n{shlex.join(command)}\n{result.stderr.strip()}")


FASTCALL_SOURCE = Path(__file__).with_name("fastcall.c")
FASTCALL_NAME = "_opgen_fastcall"


def build_fastcall() -> Path:
    """Path of the compiled repeated-call helper (opgen/fastcall.c), built once per cache key."""
    import numpy

    include = [sysconfig.get_paths()["include"], numpy.get_include()]
    limits = [f"-DMAX_OPERANDS={c_api.MAX_OPERANDS}", f"-DMAX_RANK={specs.MAX_RANK}"]
    key = "fastcall-" + _digest(numpy.__version__, *include, *limits, FASTCALL_SOURCE.read_text())

    def build(work: Path, name: str) -> None:
        target = work / f"{name}{EXT_SUFFIX}"
        command = [*compiler(), "-O2", "-shared", "-fPIC", *WARNING_FLAGS[:2], *limits, *(f"-I{d}" for d in include)]
        command += [str(FASTCALL_SOURCE), "-o", str(target)]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise BuildError(f"compiling fastcall.c failed:\n{shlex.join(command)}\n{result.stderr.strip()}")

    return _cached(key, FASTCALL_NAME, build)


def _module_file(directory: Path, name: str) -> Path | None:
    if not directory.is_dir():
        return None
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = directory / f"{name}{suffix}"
        if path.is_file():
            return path
    return None


def load_module(path: Path) -> ModuleType:
    name = path.name.split(".")[0]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise BuildError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module
