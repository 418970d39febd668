"""`opgen tune`: the work from which a call runs on more than one thread (opgen.h,
opgen_parallel_threshold), measured on this machine and kept for the next processes.

The measurement: ReLU backward in f32 (one unit of work an element, the cheapest per element, so
the one whose threads pay last), at sizes doubling from SIZES[0], timed from C with the threads
forced on (threshold 1) and off (a threshold above the size), in turn. The threshold is the
smallest size from which the team is never slower than one thread. The result is kept in the
cache directory (tuning.json; OPGEN_TUNING_FILE names another file) for this CPU and thread
count; `import opgen` applies it unless OPGEN_PARALLEL_THRESHOLD is set, which always wins."""

from __future__ import annotations

import json
import os
import platform
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from opgen import plan
from opgen.compile import cache_root

SIZES = tuple(2**k for k in range(11, 21))  # 2 K to 1 M elements
FILE = "tuning.json"


@dataclass(frozen=True)
class Tuning:
    cpu: str  # the CPU's model name: a tuning applies on the CPU that measured it only
    threads: int  # and with the same thread count
    parallel_threshold: int  # the work from which calls take threads (opgen.h)
    # size -> (seconds on one thread, seconds with the team): what the threshold came from
    seconds: dict[int, tuple[float, float]]


def cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def threshold_from(seconds: dict[int, tuple[float, float]]) -> int:
    """The smallest measured size from which the team is never slower than one thread; past
    the largest size when it always is."""
    sizes = sorted(seconds)
    paying = [n for n in sizes if seconds[n][1] <= seconds[n][0]]
    for n in paying:
        if all(n2 in paying for n2 in sizes if n2 >= n):
            return n
    return 2 * sizes[-1] if sizes else plan.PARALLEL_THRESHOLD


def measure(min_time: float = 0.2, sizes: tuple[int, ...] = SIZES, rounds: int = 3) -> Tuning:
    """Times the calls (module docstring) on the bundled library's threads: `rounds` sweeps over
    the sizes, each size's time the median of its sweeps' medians (a burst of other work during
    one sweep moved single sizes by 30 % and more, and a lone slow team at 1 M elements set the
    threshold there)."""
    import opgen
    from opgen.bench import _median_times
    from opgen.runtime import c_entry_call

    lib = opgen.bundled.module.lib
    threads = int(lib.opgen_get_num_threads())
    kept = int(lib.opgen_parallel_threshold())
    sweeps: dict[int, list[tuple[float, float]]] = {n: [] for n in sizes}
    rng = np.random.default_rng(0)
    try:
        calls = {}
        for n in sizes:
            diff_dst, src = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
            calls[n] = c_entry_call(opgen.relu_backward, diff_dst, src, out=np.empty(n, np.float32))
        for _ in range(rounds):
            for n, call in calls.items():
                one, many = _median_times([_timed(lib, call, n + 1), _timed(lib, call, 1)], min_time / rounds)
                sweeps[n].append((one, many))
    finally:
        lib.opgen_set_parallel_threshold(kept)
    seconds = {n: (statistics.median(a for a, _ in s), statistics.median(b for _, b in s)) for n, s in sweeps.items()}
    found = threshold_from(seconds) if threads > 1 else plan.PARALLEL_THRESHOLD
    return Tuning(cpu_name(), threads, found, seconds)


def _timed(lib: Any, call: Callable[[], Any], threshold: int) -> Callable[[], None]:
    """`call` with the library's threshold set to `threshold` first (1: the team; above the
    call's work: one thread)."""

    def timed() -> None:
        lib.opgen_set_parallel_threshold(threshold)
        call()

    return timed


def path() -> Path:
    """Where the tuning is kept: OPGEN_TUNING_FILE, else tuning.json in the cache directory."""
    given = os.environ.get("OPGEN_TUNING_FILE")
    return Path(given) if given else cache_root() / FILE


def save(tuning: Tuning, where: Path | None = None) -> Path:
    """Writes `tuning` (whole, or not at all: a temporary file renamed into place)."""
    target = where or path()
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(asdict(tuning), indent=1) + "\n")
    temporary.replace(target)
    return target


def saved(where: Path | None = None) -> Tuning | None:
    """The tuning kept in the cache directory, None if there is none or it cannot be read."""
    try:
        data: Any = json.loads((where or path()).read_text())
        return Tuning(
            cpu=str(data["cpu"]),
            threads=int(data["threads"]),
            parallel_threshold=int(data["parallel_threshold"]),
            seconds={int(n): (float(a), float(b)) for n, (a, b) in data["seconds"].items()},
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def threshold_for(lib: Any, where: Path | None = None) -> int | None:
    """The kept threshold for a library's runtime when it applies: this CPU, the library's thread
    count, no OPGEN_PARALLEL_THRESHOLD in the environment and a positive value; else None."""
    if "OPGEN_PARALLEL_THRESHOLD" in os.environ:
        return None
    tuning = saved(where)
    if tuning is None or tuning.parallel_threshold <= 0 or tuning.cpu != cpu_name():
        return None
    return tuning.parallel_threshold if tuning.threads == int(lib.opgen_get_num_threads()) else None
