"""`opgen bench --compare onednn`: opgen's C op API and oneDNN's primitives, timed in one C harness.

oneDNN is not a dependency: the comparison uses an installed one (`pip install
onednn-cpu-gomp onednn-devel-cpu-gomp`, or the `onednn` extra), found under the Python
prefix or under $OPGEN_ONEDNN_ROOT. The harness (opgen/bench_onednn.c) is compiled with the
project's flags against that oneDNN and the generated opgen.h, cached like the other builds,
and loaded into this process; it is handed the addresses of the loaded opgen module's
functions, so the kernels timed are the ones `import opgen` runs.

Per cell (op, dtype, layout, form, size, threads) the harness fills the inputs once, runs
opgen_<op>_with_workspace and the oneDNN primitive on them (each writing its own outputs),
checks that the outputs agree, then times the two in turn over rounds (median per side).
Both sides run with the cell's thread count (opgen_set_num_threads, omp_set_num_threads:
oneDNN's OpenMP build takes OpenMP's).
"""

from __future__ import annotations

import json
import os
import site
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import opgen
from opgen import bench

SOURCE = Path(__file__).with_name("bench_onednn.c")
PACKAGES = "onednn-cpu-gomp onednn-devel-cpu-gomp"
ROOT_VARIABLE = "OPGEN_ONEDNN_ROOT"

# the harness's op codes, and the opgen function each times
OP_CODES = {
    "relu_backward": 0,
    "hard_sigmoid_backward": 1,
    "sigmoid_backward": 2,
    "tanh_backward": 3,
    "prelu_backward": 4,
    "batch_norm_training_backward": 5,
    # along the last of the four dims (as `opgen bench` times them)
    "soft_max": 6,
    "log_soft_max": 7,
    "soft_max_backward": 8,
    "log_soft_max_backward": 9,
    "layer_norm": 10,
    "layer_norm_backward": 11,
}
FORM_CODES = {"from_dst": 0, "from_src": 1, "per_channel": 0, "per_tensor": 1, "full": 2, "-": 0}
DTYPE_CODES = {"f32": 0, "f16": 1, "bf16": 2}  # opgen_dtype
LAYOUT_CODES = {"NCX": 0, "NXC": 1, "-": 0}  # opgen_data_format
STATUSES = {0: "timed", 1: "refused", 2: "failed", 3: "mismatch"}
# the largest max|opgen - oneDNN| / max|oneDNN| of an output before a cell is timed: ReLU's
# gradient selects, so it is exact; the others round differently (opgen: one rounding from
# double or float; oneDNN: its own exp and sums in f32); the ops with sums (REDUCES) more
TOLERANCE = {"f32": 1e-5, "bf16": 2e-2, "f16": 1e-2}
REDUCTION_TOLERANCE = {"f32": 1e-4, "bf16": 2e-2, "f16": 1e-2}
REDUCES = ("prelu_backward", "batch_norm_training_backward", *bench.AXES_OPS)

CDEF = """
typedef struct bench_cell {
    int op, dtype, layout, form;
    int64_t dims[4];
    int threads, rounds;
    double round_seconds, tolerance;
    float alpha, beta, epsilon;
    uint64_t seed;
    uintptr_t opgen_workspace_size, opgen_run;
    uintptr_t opgen_last_error;
} bench_cell;
typedef struct bench_result {
    int status;
    int opgen_calls, onednn_calls;
    double opgen_seconds, onednn_seconds, error;
    char implementation[64];
    char message[256];
} bench_result;
int bench_onednn_cell(const bench_cell *cell, bench_result *result);
void bench_onednn_version(int *version);
"""


class OneDNNMissing(RuntimeError):
    """No oneDNN headers and library where the comparison looks for them."""


@dataclass
class Cell:
    op: str
    dtype: str
    layout: str
    form: str
    size: str
    threads: int
    status: str = ""
    opgen_seconds: float | None = None
    onednn_seconds: float | None = None
    error: float | None = None  # max |opgen - oneDNN| / max |oneDNN|, the largest over the outputs
    implementation: str = ""  # oneDNN's implementation of the primitive
    message: str = ""

    @property
    def ratio(self) -> float | None:
        """opgen's time over oneDNN's: below 1, opgen is faster."""
        if self.opgen_seconds is None or not self.onednn_seconds:
            return None
        return self.opgen_seconds / self.onednn_seconds


def find_onednn() -> tuple[Path, Path]:
    """(include directory, library directory) of an installed oneDNN: $OPGEN_ONEDNN_ROOT when set,
    else the Python prefixes (where the PyPI packages put include/ and lib/)."""
    explicit = os.environ.get(ROOT_VARIABLE)
    roots = [Path(explicit)] if explicit else [Path(sys.prefix), Path(sys.base_prefix), Path(site.getuserbase())]
    for root in dict.fromkeys(roots):
        include, library = root / "include", root / "lib"
        if (include / "oneapi" / "dnnl" / "dnnl.h").is_file() and (library / "libdnnl.so").exists():
            return include, library
    where = f"{ROOT_VARIABLE}={explicit}" if explicit else ", ".join(str(root) for root in dict.fromkeys(roots))
    raise OneDNNMissing(
        f"oneDNN is not installed (no include/oneapi/dnnl/dnnl.h and lib/libdnnl.so under {where}): "
        f"`pip install {PACKAGES}` (or opgen's `onednn` extra), or set {ROOT_VARIABLE} to the prefix of "
        "a oneDNN built with OpenMP"
    )


def build_harness() -> Path:
    """The compiled harness for the installed oneDNN and the bundled ops' opgen.h (cached)."""
    from opgen import compile as build
    from opgen.render import BUNDLED_SPECS, render_library

    include, library = find_onednn()
    header = render_library(BUNDLED_SPECS).files["opgen.h"]
    version_header = include / "oneapi" / "dnnl" / "dnnl_version.h"
    source = SOURCE.read_text()
    flags = [*build.C_FLAGS, *build.WARNING_FLAGS]
    key = "onednn-" + build._digest(
        " ".join(flags), str(include), str(library), version_header.read_text(), header, source
    )

    def compile_harness(work: Path, name: str) -> None:
        import shlex
        import subprocess

        (work / "opgen.h").write_text(header)
        target = work / f"{name}.so"
        command = [*build.compiler(), *flags, "-shared", f"-I{work}", "-isystem", str(include), str(SOURCE)]
        command += ["-o", str(target), f"-L{library}", "-ldnnl", f"-Wl,-rpath,{library}", "-lm"]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise build.BuildError(f"compiling bench_onednn.c failed:\n{shlex.join(command)}\n{result.stderr.strip()}")

    return build._cached(key, "_opgen_bench_onednn", compile_harness)


class Harness:
    """The loaded harness: `cell(...)` runs one cell."""

    def __init__(self) -> None:
        import cffi

        self.path = build_harness()
        self.ffi = cffi.FFI()
        self.ffi.cdef(CDEF)
        self.lib = self.ffi.dlopen(str(self.path))
        version = self.ffi.new("int[3]")
        self.lib.bench_onednn_version(version)
        self.version = ".".join(str(v) for v in version)

    @staticmethod
    def _address(name: str) -> int:
        module = opgen.bundled.module
        return int(module.ffi.cast("uintptr_t", module.ffi.addressof(module.lib, name)))

    def cell(
        self,
        cell: Cell,
        dims: tuple[int, ...],
        rounds: int,
        round_seconds: float,
        seed: int = 0,
        opgen_op: str | None = None,
    ) -> Cell:
        """Run `cell` (its status, times, error and implementation filled in) and return it.
        `opgen_op`: the opgen op called for it (default: the cell's; another one of the same
        signature makes a cell whose outputs differ)."""
        called = opgen_op or cell.op
        reduces = cell.op in REDUCES
        exact = cell.op == "relu_backward"
        tolerance = 0.0 if exact else (REDUCTION_TOLERANCE if reduces else TOLERANCE)[cell.dtype]
        parameters = self.ffi.new(
            "bench_cell *",
            {
                "op": OP_CODES[cell.op],
                "dtype": DTYPE_CODES[cell.dtype],
                "layout": LAYOUT_CODES[cell.layout],
                "form": FORM_CODES[cell.form],
                "dims": list(dims),
                "threads": cell.threads,
                "rounds": rounds,
                "round_seconds": round_seconds,
                "tolerance": tolerance,
                "alpha": 1 / 6,
                "beta": 0.5,
                "epsilon": 1e-5,
                "seed": seed,
                "opgen_workspace_size": self._address(f"opgen_{called}_workspace_size"),
                "opgen_run": self._address(f"opgen_{called}_with_workspace"),
                "opgen_last_error": self._address("opgen_last_error"),
            },
        )
        result = self.ffi.new("bench_result *")
        opgen.set_num_threads(cell.threads)
        try:
            self.lib.bench_onednn_cell(parameters, result)
        finally:
            opgen.set_num_threads(0)
        cell.status = STATUSES.get(result.status, str(result.status))
        cell.message = self.ffi.string(result.message).decode()
        cell.implementation = self.ffi.string(result.implementation).decode()
        if cell.status in ("timed", "mismatch"):
            cell.error = float(result.error)
        if cell.status == "timed":
            cell.opgen_seconds, cell.onednn_seconds = float(result.opgen_seconds), float(result.onednn_seconds)
        return cell


def cases(ops: list[str], dtypes: list[str]) -> list[tuple[str, str, str, str]]:
    """(op, dtype, layout, form) of each compared case: `opgen bench`'s, with ReLU from its
    output and from its input as oneDNN has both, and the ops with axes along the last axis
    alone (the harness's; its form "-")."""
    result = []
    for op, dtype, layout, form in bench.cases(ops, dtypes):
        if form == "axis_1":
            continue
        form = "-" if form == "last_axis" else form
        if op == "relu_backward":
            result += [(op, dtype, layout, "from_dst"), (op, dtype, layout, "from_src")]
        else:
            result.append((op, dtype, layout, form))
    return result


def run(
    sizes: list[str],
    threads: list[int],
    ops: list[str],
    dtypes: list[str],
    rounds: int = 5,
    round_seconds: float = 0.04,
    progress: Callable[[Cell], None] | None = None,
) -> dict[str, Any]:
    """Every case at every size and thread count; raises OneDNNMissing without oneDNN."""
    harness = Harness()
    rows: list[Cell] = []
    for size in sizes:
        for count in threads:
            for op, dtype, layout, form in cases(ops, dtypes):
                cell = Cell(op, dtype, layout, form, size, count)
                harness.cell(cell, bench.SIZES[size], rounds, round_seconds)
                rows.append(cell)
                if progress is not None:
                    progress(cell)
    return {
        "machine": {**bench.machine(), "onednn": harness.version},
        "sizes": {name: bench.SIZES[name] for name in sizes},
        "rounds": rounds,
        "cells": [asdict(cell) for cell in rows],
    }


def _short(op: str) -> str:
    """The table's name of `op`: the backward ops of the seeds without the suffix they all share."""
    return op if op in bench.AXES_OPS else op.removesuffix("_backward").replace("_training", "")


def table(report: dict[str, Any]) -> str:
    machine = report["machine"]
    lines = [
        f"oneDNN {machine['onednn']} vs opgen ({machine['opgen_target']} copy): median of {report['rounds']} rounds "
        "per side, C calls on the same inputs; ratio = opgen time / oneDNN time (below 1: opgen faster)",
        f"opgen's {bench.policy_line(machine)}",
        f"{'op':21s} {'dtype':5s} {'layout':6s} {'form':11s} {'size':4s} {'thr':>3s} {'opgen':>10s} "
        f"{'oneDNN':>10s} {'ratio':>6s} {'max err':>8s}  oneDNN impl",
    ]
    runs = {(row["size"], row["threads"]): None for row in report["cells"]}
    skipped: dict[tuple[str, ...], list[str]] = {}  # case and reason -> the size/threads it was not timed at
    for row in report["cells"]:
        cell = Cell(**row)
        case = f"{_short(cell.op):21s} {cell.dtype:5s} {cell.layout:6s} {cell.form:11s}"
        if cell.status != "timed":
            label = " ".join(part for part in (_short(cell.op), cell.dtype, cell.layout, cell.form) if part != "-")
            skipped.setdefault((label, cell.status, cell.message), []).append(f"{cell.size}/{cell.threads}")
            continue
        assert cell.opgen_seconds is not None and cell.onednn_seconds is not None and cell.ratio is not None
        lines.append(
            f"{case} {cell.size:4s} {cell.threads:3d} {cell.opgen_seconds * 1e6:8.1f}us "
            f"{cell.onednn_seconds * 1e6:8.1f}us {cell.ratio:6.3g} {cell.error or 0.0:8.1e}  {cell.implementation}"
        )
    lines.append(behind_line(report["cells"]))
    if skipped:
        lines.append("not timed (size/threads):")
    for (label, status, message), where in skipped.items():
        at = "every size and thread count" if len(where) == len(runs) else ", ".join(where)
        lines.append(f"  {label}: {status} at {at}: {message}")
    return "\n".join(lines)


BEHIND = 0.95  # a cell is behind from this ratio on: opgen's time is over 0.95 of oneDNN's


def behind_line(cells: list[dict[str, Any]]) -> str:
    """How many timed cells of each size and thread count take more than BEHIND of oneDNN's time."""
    counts: dict[tuple[str, int], list[int]] = {}
    for row in cells:
        cell = Cell(**row)
        if cell.ratio is not None:
            count = counts.setdefault((cell.size, cell.threads), [0, 0])
            count[0] += cell.ratio > BEHIND
            count[1] += 1
    parts = [f"{size} {threads} thr {behind}/{timed}" for (size, threads), (behind, timed) in counts.items()]
    return f"cells above {BEHIND} of oneDNN's time: " + (", ".join(parts) if parts else "none timed")


def save(report: dict[str, Any], path: str) -> None:
    with open(path, "w") as handle:
        json.dump(report, handle, indent=1)
