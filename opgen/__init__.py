"""opgen: a code-generating compiler for deep-learning kernels.

Every op of the bundled specs is a function of this module (opgen.relu_backward, ...),
generated from its spec; `opgen.load(DIR)` gives the ops of another spec directory.
"""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"

from opgen.render import BUNDLED_SPECS  # noqa: E402
from opgen.runtime import OpLibrary  # noqa: E402

_libraries: dict[Path, OpLibrary] = {}


def load(spec_dir: str | Path) -> OpLibrary:
    """The ops of the specs in `spec_dir` (compiled on first use, then cached)."""
    key = Path(spec_dir).resolve()
    if key not in _libraries:
        _libraries[key] = OpLibrary(key)
    return _libraries[key]


bundled = load(BUNDLED_SPECS)
globals().update(bundled.ops)
__all__ = ["load", "bundled", *bundled.ops]
