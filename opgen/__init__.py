"""opgen: a code-generating compiler for deep-learning kernels.

Every op of the bundled specs is a function of this module (opgen.relu_backward, ...),
generated from its spec; `opgen.load(DIR)` gives the ops of another spec directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

__version__ = "0.1.0"

from opgen.bundle import SPECS as BUNDLED_SPECS  # noqa: E402
from opgen.plan import MAX_THREADS  # noqa: E402
from opgen.runtime import OpLibrary  # noqa: E402

_libraries: dict[Path, OpLibrary] = {}

if TYPE_CHECKING:  # the ops, set below from the specs (globals().update), for type checkers
    from collections.abc import Callable
    from typing import Any

    def __getattr__(name: str) -> Callable[..., Any]: ...


def load(spec_dir: str | Path) -> OpLibrary:
    """The ops of the specs in `spec_dir` (compiled on first use, then cached)."""
    key = Path(spec_dir).resolve()
    if key not in _libraries:
        _libraries[key] = OpLibrary(key)
    return _libraries[key]


def set_num_threads(threads: int) -> None:
    """Threads the kernels use on large tensors; 0 restores the default (OMP_NUM_THREADS, else all cores)."""
    if isinstance(threads, (bool, np.bool_)) or not isinstance(threads, (int, np.integer)):
        raise TypeError(f"set_num_threads(): threads must be an int, not {type(threads).__name__}")
    if not 0 <= threads <= MAX_THREADS:
        raise ValueError(f"set_num_threads(): threads must be in 0..{MAX_THREADS} (0: the default), not {threads}")
    threads = int(threads)
    for library in {bundled, *_libraries.values()}:
        library.module.lib.opgen_set_num_threads(threads)


def get_num_threads() -> int:
    """Threads the kernels use on large tensors."""
    return int(bundled.module.lib.opgen_get_num_threads())


def info() -> dict[str, Any]:
    """What runs: the compiled copy (CPU target) chosen on this machine, the threads, the size from
    which outputs stream past the caches, the work from which calls take threads (with those
    of the two that a kept `opgen tune` set), and each op's variants."""
    lib = bundled.module.lib
    return {
        "version": __version__,
        "cpu_target": bundled.module.ffi.string(lib.opgen_cpu_target()).decode(),
        "threads": int(lib.opgen_get_num_threads()),
        # bytes a call moves from which its outputs stream past the caches (opgen.h)
        "stream_from_bytes": int(lib.opgen_stream_threshold()),
        # work from which a call takes more than one thread (opgen.h; `opgen tune` measures it)
        "parallel_threshold": int(lib.opgen_parallel_threshold()),
        "tuned": list(bundled.tuned),
        "ops": {name: sorted(variants) for name, variants in bundled.variants.items()},
    }


bundled = load(BUNDLED_SPECS)
globals().update(bundled.ops)
__all__ = ["load", "bundled", "set_num_threads", "get_num_threads", "info", *bundled.ops]
