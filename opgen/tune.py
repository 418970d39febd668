"""`opgen tune`: the work from which a call runs on more than one thread (opgen.h,
opgen_parallel_threshold) and the bytes from which its outputs stream past the caches
(opgen_stream_threshold), measured on this machine and kept for the next processes.

The measurement: ReLU backward in f32 (one unit of work an element, the cheapest per element,
so the one whose threads pay last), at sizes doubling from SIZES[0], timed from C with the
threads forced on (threshold 1) and off (a threshold above the size), in turn. The threshold is
the smallest size from which the team always saves a twentieth of one thread's time (GAIN).
Then the same call at sizes doubling from STREAM_SIZES[0] bytes moved, its outputs stored in
cache (a stream threshold above the size) and streamed (threshold 1), each timed in its own run
of calls: the stream threshold is the smallest size from which streamed stores always save a
twentieth of the time or more. The cache the CPU reports, the default's measure, may not be the
process's to fill: a virtual machine reports its host's (docs/performance-changes.md). The
result is kept in the cache directory (tuning.json; OPGEN_TUNING_FILE names another file) for
this CPU and thread count; `import opgen` applies it unless OPGEN_PARALLEL_THRESHOLD
(OPGEN_STREAM_BYTES) is set, which always wins."""

from __future__ import annotations

import json
import os
import platform
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from opgen import plan
from opgen.compile import cache_root

SIZES = tuple(2**k for k in range(11, 21))  # 2 K to 1 M elements
# bytes a call moves, 2 MiB up to 1 GiB (past any cache a process of a few threads fills); the
# sweep stops once streamed stores have won at STREAM_WINS sizes in a row
STREAM_SIZES = tuple(2**k for k in range(21, 31))
STREAM_WINS = 3
# a win, for the team or for streamed stores: a twentieth of the time saved or more. Where both
# ways take about the same time, one thread leaves the other core to other work, and stores in
# cache leave the output there for the next call to read; and a threshold that any gain moved
# fell anywhere in the flat stretch from run to run (docs/performance-changes.md).
GAIN = 0.95
NEVER = 1 << 62  # a threshold no call reaches
FILE = "tuning.json"


@dataclass(frozen=True)
class Tuning:
    cpu: str  # the CPU's model name: a tuning applies on the CPU that measured it only
    threads: int  # and with the same thread count
    parallel_threshold: int  # the work from which calls take threads (opgen.h)
    # size -> (seconds on one thread, seconds with the team): what the threshold came from
    seconds: dict[int, tuple[float, float]]
    stream_threshold: int = 0  # bytes moved from which outputs stream (opgen.h); 0: not measured
    # bytes moved -> (seconds with outputs stored in cache, seconds streamed)
    stream_seconds: dict[int, tuple[float, float]] = field(default_factory=dict)


def cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def threshold_from(seconds: dict[int, tuple[float, float]], gain: float = 1.0) -> int:
    """The smallest measured size from which the second way (the team; streamed stores) never
    takes more than `gain` times the first's time (one thread; stores in cache); past the
    largest size when none is."""
    sizes = sorted(seconds)
    paying = [n for n in sizes if seconds[n][1] <= gain * seconds[n][0]]
    for n in paying:
        if all(n2 in paying for n2 in sizes if n2 >= n):
            return n
    return 2 * sizes[-1] if sizes else plan.PARALLEL_THRESHOLD


def measure(
    min_time: float = 0.2, sizes: tuple[int, ...] = SIZES, rounds: int = 3, largest: int | None = None
) -> Tuning:
    """Times the calls (module docstring) on the bundled library's threads: `rounds` sweeps over
    the sizes, each size's time the median of its sweeps' medians (a burst of other work during
    one sweep moved single sizes by 30 % and more, and a lone slow team at 1 M elements set the
    threshold there). `largest`: the stream sweep's largest size in bytes moved (default 1 GiB)."""
    import opgen
    from opgen.bench import _median_times
    from opgen.runtime import c_entry_call

    lib = opgen.bundled.module.lib
    threads = int(lib.opgen_get_num_threads())
    kept = int(lib.opgen_parallel_threshold())
    streamed = measure_stream(min_time, STREAM_SIZES if largest is None else _up_to(largest), rounds)
    if threads < 2:  # no team to measure: the stream threshold alone (a thread threshold of 0 applies nowhere)
        return Tuning(cpu_name(), threads, 0, {}, threshold_from(streamed, GAIN), streamed)
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
    return Tuning(cpu_name(), threads, threshold_from(seconds, GAIN), seconds, threshold_from(streamed, GAIN), streamed)


def _up_to(largest: int) -> tuple[int, ...]:
    return tuple(n for n in STREAM_SIZES if n <= largest) or STREAM_SIZES[:1]


# Linux's control groups: the memory a container may use (v2, then v1); "max" or a huge number
# where none is set
CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def memory_bytes() -> int:
    """The memory this process may fill: the machine's, or its container's limit if lower (a
    sweep sized from the machine's alone would be killed there); 16 GiB where neither is known."""
    limits = []
    if hasattr(os, "sysconf"):
        try:
            limits.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError):
            pass
    for name in CGROUP_LIMITS:
        try:
            text = Path(name).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            limits.append(int(text))
    return min(limits) if limits else 1 << 34


def measure_stream(min_time: float, sizes: tuple[int, ...], rounds: int) -> dict[int, tuple[float, float]]:
    """bytes moved -> (median seconds with outputs stored in cache, streamed) of the call
    (module docstring), in ascending sizes until streamed stores win at STREAM_WINS in a row,
    or the sizes, or a sixteenth of the memory, run out. Each way runs alone, a call first to
    put its data where its own calls leave them: calls of the two ways in turn each found
    the output where the other had left it."""
    import opgen
    from opgen.bench import _median_time
    from opgen.runtime import c_entry_call

    lib = opgen.bundled.module.lib
    memory = memory_bytes()
    seconds: dict[int, tuple[float, float]] = {}
    wins = 0
    try:
        for moved in (n for n in sizes if 16 * n <= memory):
            count = moved // 12  # two f32 inputs and an f32 output
            src = (np.arange(count, dtype=np.float32) % 7) - 3.0
            call = c_entry_call(opgen.relu_backward, np.ones(count, np.float32), src, out=np.empty(count, np.float32))
            ways: list[list[float]] = [[], []]
            for _ in range(rounds):
                for way, threshold in zip(ways, (NEVER, 1)):
                    lib.opgen_set_stream_threshold(threshold)
                    way.append(_median_time(call, min_time / rounds))
            seconds[moved] = (statistics.median(ways[0]), statistics.median(ways[1]))
            wins = wins + 1 if seconds[moved][1] <= GAIN * seconds[moved][0] else 0
            if wins == STREAM_WINS:
                break
    finally:
        lib.opgen_set_stream_threshold(0)
    return seconds


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
            # absent from a tuning kept before streaming was measured
            stream_threshold=int(data.get("stream_threshold", 0)),
            stream_seconds={int(n): (float(a), float(b)) for n, (a, b) in data.get("stream_seconds", {}).items()},
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def threshold_for(lib: Any, where: Path | None = None) -> int | None:
    """The kept threshold for a library's runtime when it applies: this CPU, the library's thread
    count, no OPGEN_PARALLEL_THRESHOLD in the environment and a positive value; else None."""
    return _kept_for(lib, "OPGEN_PARALLEL_THRESHOLD", where, lambda t: t.parallel_threshold)


def stream_threshold_for(lib: Any, where: Path | None = None) -> int | None:
    """The kept stream threshold, as threshold_for (OPGEN_STREAM_BYTES in the environment wins)."""
    return _kept_for(lib, "OPGEN_STREAM_BYTES", where, lambda t: t.stream_threshold)


def _kept_for(lib: Any, variable: str, where: Path | None, value: Callable[[Tuning], int]) -> int | None:
    if variable in os.environ:
        return None
    tuning = saved(where)
    if tuning is None or value(tuning) <= 0 or tuning.cpu != cpu_name():
        return None
    return value(tuning) if tuning.threads == int(lib.opgen_get_num_threads()) else None
