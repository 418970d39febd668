"""Test data with edge values, and comparisons with stated tolerances.

Tolerances (docs/numerics.md, "Accuracy"):
- elementwise outputs: at most `ulps` units in the last place of the output dtype from the
  float64 oracle rounded to that dtype (ReLU, a pure selection: 0; everything else: 1);
- sums: |got - exact| <= 1 ulp of the output dtype (the final double -> f32 -> dtype rounding)
  + 2 * n * 2^-53 * sum(|terms|) (n - 1 double additions in the kernel, as many in the oracle).
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

import opgen
from opgen import accuracy, plan, specs
from opgen.runtime import numpy_dtype

# Fixed unless OPGEN_TEST_SEED says otherwise ("random" draws one): a run is reproducible from the
# seed that the pytest header and every failure report print (tests/conftest.py).
DEFAULT_SEED = 20240611
_SEED_TEXT = os.environ.get("OPGEN_TEST_SEED", "").strip()
SEED = secrets.randbelow(2**31) if _SEED_TEXT == "random" else int(_SEED_TEXT or DEFAULT_SEED)
TABLE = opgen.bundled.table


def rng(*salt: object) -> np.random.Generator:
    """A generator for one test, reproducible from OPGEN_TEST_SEED (printed on failure)."""
    text = "/".join(str(s) for s in salt)
    return np.random.default_rng([SEED, int.from_bytes(text.encode()[:32].ljust(32, b"\0"), "little") % 2**63])


def dtype_of(name: str) -> np.dtype:
    return numpy_dtype(TABLE.dtypes[name].numpy)


@contextlib.contextmanager
def threads_set_to(count: int) -> Iterator[None]:
    """opgen.set_num_threads(count) inside the block, the previous count after it."""
    before = opgen.get_num_threads()
    opgen.set_num_threads(count)
    try:
        yield
    finally:
        opgen.set_num_threads(before)


def misaligned_empty(shape: tuple[int, ...], dtype: np.dtype, offset: int) -> np.ndarray:
    """An uninitialized C-contiguous array starting `offset` bytes past a 64-byte boundary."""
    size = math.prod(shape) * dtype.itemsize
    raw = np.empty(size + 64 + offset, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    return raw[start : start + size].view(dtype).reshape(shape)


def placed(array: np.ndarray, step: int) -> np.ndarray:
    """A copy of `array` starting `step` elements past a 64-byte boundary (modulo a line)."""
    copy = misaligned_empty(array.shape, array.dtype, step * array.dtype.itemsize % 64)
    copy[...] = array
    return copy


GUARD = 0xA5  # the bytes around an output, which no call may write


def guarded_empty(shape: tuple[int, ...], dtype: np.dtype, step: int) -> tuple[np.ndarray, np.ndarray]:
    """An array `step` elements past a 64-byte line with at least a line of GUARD bytes on each
    side, and the buffer it lies in (for untouched_around)."""
    size = math.prod(shape) * dtype.itemsize
    raw = np.full(size + 4 * 64, GUARD, np.uint8)
    start = (-raw.ctypes.data) % 64 + 64 + step * dtype.itemsize % 64
    return raw[start : start + size].view(dtype).reshape(shape), raw


def untouched_around(output: np.ndarray, raw: np.ndarray) -> bool:
    """Whether every byte of `raw` outside `output` still holds GUARD."""
    start = output.ctypes.data - raw.ctypes.data
    return bool((raw[:start] == GUARD).all() and (raw[start + output.nbytes :] == GUARD).all())


def finfo(name: str):
    return accuracy.finfo(TABLE.dtypes[name])


def special_values(name: str, nonfinite: bool) -> np.ndarray:
    return accuracy.special_values(TABLE.dtypes[name], nonfinite)


def data(
    generator: np.random.Generator, shape: tuple[int, ...], name: str, *, specials: str = "finite", scale: float = 1.0
) -> np.ndarray:
    """Normal random values in dtype `name`; specials 'none', 'finite' or 'all' sets a quarter to edge values."""
    return accuracy.random_data(generator, shape, TABLE.dtypes[name], specials, scale)


def _ordered(array: np.ndarray, name: str) -> np.ndarray:
    return accuracy.ordered(array, TABLE.dtypes[name])


def describe(context: str) -> str:
    return f"{context} [OPGEN_TEST_SEED={SEED}]"


def assert_ulps(got: np.ndarray, expected64: np.ndarray, name: str, ulps: int, context: str) -> None:
    """got (dtype `name`) within `ulps` of the float64 oracle rounded to that dtype; NaN where it is NaN."""
    assert got.shape == expected64.shape, describe(f"{context}: shape {got.shape} != {expected64.shape}")
    assert got.dtype == dtype_of(name), describe(f"{context}: dtype {got.dtype}, expected {name}")
    got64 = got.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = expected64.astype(dtype_of(name))
    bad = accuracy.ulps_off(got, expected64, TABLE.dtypes[name], ulps)
    _report(
        bad,
        got64,
        expected64,
        context,
        f"off by more than {ulps} ulp",
        lambda where: f"rounded {float(rounded[where])!r}",
    )


def _report(bad: np.ndarray, got64: np.ndarray, expected64: np.ndarray, context: str, what: str, detail) -> None:
    """Fail naming how many elements are `bad` and the first of them."""
    if not bad.any():
        return
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    raise AssertionError(
        describe(
            f"{context}: {int(bad.sum())} of {bad.size} elements {what}; first at {where}: "
            f"got {got64[where]!r}, expected {expected64[where]!r}, {detail(where)}"
        )
    )


def ulp(values: np.ndarray, name: str) -> np.ndarray:
    return accuracy.ulp(values, TABLE.dtypes[name])


def assert_within(got: np.ndarray, expected64: np.ndarray, name: str, bound: np.ndarray, context: str) -> None:
    """|got - exact| <= 1 ulp of dtype `name` + bound, elementwise; non-finite values must agree."""
    assert got.shape == expected64.shape, describe(f"{context}: shape {got.shape} != {expected64.shape}")
    assert got.dtype == dtype_of(name), describe(f"{context}: dtype {got.dtype}, expected {name}")
    got64 = got.astype(np.float64)
    bad, allowed = accuracy.outside(got, expected64, TABLE.dtypes[name], bound)
    _report(
        bad,
        got64,
        expected64,
        context,
        "outside the bound",
        lambda where: f"allowed error {float(np.broadcast_to(allowed, expected64.shape)[where])!r}",
    )


sum_bound = accuracy.sum_bound


def stated_bound(spec, row: dict[str, str], output: str, magnitude, count: int):
    """The "sum" contract of channel output `output` beyond 1 ulp, in the kernels of `spec` for
    dtype row `row` (accuracy.stated_sum_bound: the accumulation, the float runs and the
    roundings of the terms computed in float); `magnitude`: sum|terms| per slot, `count`:
    terms per slot."""
    name = specs.sum_behind(spec, output) or output
    return accuracy.stated_sum_bound(spec, name, magnitude, count, float_run(spec, row, output))


def float_run(spec, row: dict[str, str], output: str) -> int:
    """Terms per float partial sum in the kernels of `spec` for dtype row `row` (0: none)."""
    return plan.float_runs(spec, row, TABLE).get(output, 0)


def run_on_target(target: str, script: str, *arguments: str) -> None:
    """Run a Python `script` (with `arguments`) in a fresh process whose kernels run the
    copy for CPU target `target` (OPGEN_CPU_TARGET), from the checkout's root."""
    result = subprocess.run(
        [sys.executable, "-c", script, *arguments],
        env={**os.environ, "OPGEN_CPU_TARGET": target},
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent.parent,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def check_line_count() -> int:
    """The lines `opgen check` prints for the bundled library: one per op, dtype combination,
    layout and run of its bool attributes and flags."""
    from opgen import check

    return sum(len(s.dtypes) * len(s.layouts or ("NCX",)) * len(check._switch_rows(s)) for s in opgen.bundled.specs)
