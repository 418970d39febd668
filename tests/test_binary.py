"""The binary pattern (two inputs broadcast against each other by NumPy's rules: Add, Subtract,
Multiply, Divide, Maximum, Minimum, SquaredDifference): results against the float64 oracle on
every op, dtype and broadcast case with edge values (+ - * / max min exact, squared_difference
within 1 ulp); grids of f16 and bf16 pairs; the same bits on any thread count; clear errors for
shapes that do not broadcast, from Python and from C; specs the pattern refuses."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import opgen
from opgen import accuracy, binary, check, oracle
from opgen.render import BUNDLED_SPECS
from opgen.specs import SpecError, load_specs
from tests.helpers import dtype_of, guarded_empty, placed, rng, threads_set_to, untouched_around

TABLE, SPECS = load_specs(BUNDLED_SPECS)
BINARY = {spec.name: spec for spec in SPECS if spec.pattern == "binary"}
OPS = sorted(BINARY)
DTYPES = ["f32", "bf16", "f16"]
BIG = opgen.plan.PARALLEL_THRESHOLD + 1000  # elements enough for a thread team
# (src_0 shape, src_1 shape): equal shapes, a scalar either side, both sides broadcast, ranks
# that differ, dims of 1 and of 0, odd and prime lengths (tails, no whole block), a long row
# split into pieces, and shapes big enough for threads
CASES = [
    ((), ()),
    ((1,), (1,)),
    ((3,), (3,)),
    ((17,), (17,)),
    ((1031,), (1031,)),
    ((), (17,)),
    ((17,), ()),
    ((1,), (13,)),
    ((13,), (1,)),
    ((3, 1), (1, 4)),
    ((1, 4), (3, 1)),
    ((5,), (2, 3, 5)),
    ((2, 3, 5), (5,)),
    ((2, 3, 5), (3, 1)),
    ((0,), (1,)),
    ((3, 0), (3, 1)),
    ((2, 1, 0), (1, 4, 1)),
    ((1, 31, 1), (7, 1, 29)),
    ((2, 1, 3, 1), (5, 1, 7)),
    ((4, 1, 1), (1, 1, 37)),
    ((300, 1), (1, 301)),
    ((1,), (BIG,)),
    ((BIG,), (BIG,)),
    ((3, BIG // 3), (3, 1)),
]
CONTRACT = {name: spec.accuracy["dst"] for name, spec in BINARY.items()}


def _case_id(case: tuple) -> str:
    a, b = case
    return f"{a}-{b}".replace(" ", "")


def _inputs(op: str, dtype: str, a: tuple[int, ...], b: tuple[int, ...], specials: str) -> list[np.ndarray]:
    generator = rng(op, dtype, a, b, specials)
    spec = BINARY[op]
    row = next(r for r in spec.dtypes if r["dst"] == dtype)
    arrays = check._input_data(spec, TABLE, row, generator, {"src_0": a, "src_1": b}, specials)
    return [arrays["src_0"], arrays["src_1"]]


def _assert_matches(op: str, dtype: str, got: np.ndarray, want: np.ndarray) -> None:
    """exact: the oracle rounded once to the dtype, bit for bit (zeros' signs too), NaN where it
    is NaN; ulp: within 1 ulp of it."""
    row = TABLE.dtypes[dtype]
    assert got.dtype == dtype_of(dtype)
    assert got.shape == want.shape
    if CONTRACT[op] == "exact":
        with np.errstate(over="ignore", invalid="ignore"):
            rounded = want.astype(dtype_of(dtype))
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got.astype(np.float64)), nan), f"{op} {dtype}: NaN where the oracle has none"
        bits = np.uint32 if dtype == "f32" else np.uint16
        same = got.view(bits) == rounded.view(bits)
        bad = ~nan & ~same
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            raise AssertionError(f"{op} {dtype} at {where}: got {got[where]!r}, expected {rounded[where]!r}")
    else:
        assert CONTRACT[op] == "ulp"
        bad = accuracy.ulps_off(got, want, row, 1)
        assert not bad.any(), f"{op} {dtype}: {int(bad.sum())} elements more than 1 ulp off"


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_every_broadcast_case_against_the_oracle(op, dtype, case):
    """Every binary op, dtype and broadcast case, on data with edge values (0, subnormals, the
    largest values; then also NaN and infinities), against the float64 oracle within the spec's
    contract; the output has the broadcast shape."""
    a, b = case
    for specials in ("finite", "all"):
        x, y = _inputs(op, dtype, a, b, specials)
        got = getattr(opgen, op)(x, y)
        assert got.shape == np.broadcast_shapes(a, b)
        _assert_matches(op, dtype, got, getattr(oracle, op)(x, y))


def _grid(dtype: str, stride: int) -> np.ndarray:
    """Every `stride`-th bit pattern of the 16-bit dtype: normals, subnormals, zeros, infinities
    and NaNs of both signs."""
    return np.arange(0, 1 << 16, stride, dtype=np.uint16).view(dtype_of(dtype))


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("op", ["add", "multiply", "subtract", "divide"])
def test_grids_of_16_bit_pairs_are_exact(op, dtype):
    """Pairs of a grid of bit patterns (every 61st of the 65536, 1075 values: every exponent,
    odd and even mantissas, subnormals, zeros, infinities, NaNs), as a column against a row (both
    inputs broadcast): computed in f32 and rounded once more, the results equal the exact ones
    rounded once, since f32's 24 bits are at least 2p + 2 for bf16 (p = 8) and f16 (p = 11)."""
    values = _grid(dtype, 61)
    got = getattr(opgen, op)(values.reshape(-1, 1), values.reshape(1, -1))
    assert got.shape == (values.size, values.size)
    with np.errstate(invalid="ignore"):  # NaN bit patterns widened to float64
        want = getattr(oracle, op)(values.reshape(-1, 1), values.reshape(1, -1))
    _assert_matches(op, dtype, got, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_maximum_and_minimum_propagate_nan(dtype):
    """NaN on either side gives NaN; infinities and signed zeros as NumPy's maximum and minimum."""
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.0]).astype(dtype_of(dtype))
    a, b = special.reshape(-1, 1), special.reshape(1, -1)
    for op, numpy_op in (("maximum", np.maximum), ("minimum", np.minimum)):
        got = getattr(opgen, op)(a, b)
        want = numpy_op(a.astype(np.float64), b.astype(np.float64))
        assert np.array_equal(np.isnan(got.astype(np.float64)), np.isnan(want))
        assert np.isnan(got[0]).all() and np.isnan(got[:, 0]).all()
        _assert_matches(op, dtype, got, want)


@pytest.mark.parametrize("op", OPS)
def test_results_do_not_depend_on_the_thread_count(op):
    """Shapes split among threads (one long row, many short rows, both inputs broadcast): the
    same bits on 1, 2 and 3 threads."""
    for a, b in [((1,), (5 * BIG,)), ((600, 1), (1, 301)), ((3, 1, BIG // 7), (1, 7, 1))]:
        x, y = _inputs(op, "bf16", a, b, "all")
        results = []
        for threads in (1, 2, 3):
            with threads_set_to(threads):
                results.append(getattr(opgen, op)(x, y).view(np.uint16))
        assert all(np.array_equal(results[0], r) for r in results[1:]), (op, a, b)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_results_do_not_depend_on_where_the_arrays_lie(op, dtype):
    """The microkernels run whole blocks from the output's first block boundary and the
    elements before and after them as partial blocks, so which elements go which way moves
    with the output's address: outputs at every element offset in a line, with inputs at the
    same offset and at another, give the bits of line-aligned arrays, and write nothing
    around them (runs shorter than the head, a few blocks, one input repeated)."""
    numpy_dtype = dtype_of(dtype)
    steps = range(64 // numpy_dtype.itemsize)
    for a, b in [((3,), (3,)), ((2, 53), (2, 53)), ((2, 53), (1,)), ((1,), (2, 53))]:
        x, y = _inputs(op, dtype, a, b, "all")
        expected = getattr(opgen, op)(placed(x, 0), placed(y, 0)).view(f"u{numpy_dtype.itemsize}")
        for step in steps:
            for input_step in (step, (step + 5) % len(steps)):
                out, raw = guarded_empty(expected.shape, numpy_dtype, step)
                getattr(opgen, op)(placed(x, input_step), placed(y, input_step), out=out)
                label = (op, dtype, a, b, step, input_step)
                assert np.array_equal(out.view(expected.dtype), expected), label
                assert untouched_around(out, raw), label


def test_inputs_that_are_views_and_out():
    """Strided views are read as their elements; `out` of the broadcast shape is written."""
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    x, y = base[:, ::2], base[0, 1::2]  # (4, 3) with (3,)
    out = np.empty((4, 3), np.float32)
    assert opgen.subtract(x, y, out=out) is out
    np.testing.assert_array_equal(out, x - y)
    with pytest.raises(ValueError, match=r"must have shape \(4, 3\)"):
        opgen.add(x, y, out=np.empty((3,), np.float32))


def test_shapes_that_do_not_broadcast_are_refused():
    """Python names both arguments, their shapes and the rule, and the dim that breaks it."""
    a, b = np.ones((4, 3), np.float32), np.ones((2, 3), np.float32)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "add(): src_1: shape (2, 3) does not broadcast with src_0's shape (4, 3): aligned at their last dims, "
            "each pair of dims must be equal or one of them 1 (dim -2: 4 and 2)"
        ),
    ):
        opgen.add(a, b)
    with pytest.raises(ValueError, match=r"src_1: shape \(5,\) does not broadcast with src_0's shape \(2, 3\)"):
        opgen.maximum(np.ones((2, 3), np.float32), np.ones(5, np.float32))
    with pytest.raises(TypeError, match="dtype combination"):
        opgen.add(np.ones(3, np.float32), np.ones(3, np.float16))


def test_auto_broadcast_none_requires_equal_shapes():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(opgen.multiply(a, a, auto_broadcast="none"), a * a)
    with pytest.raises(ValueError, match=r"src_1: shape \(1, 3\) must equal src_0's shape \(2, 3\): with "):
        opgen.multiply(a, a[:1], auto_broadcast="none")
    with pytest.raises(ValueError, match="auto_broadcast: must be one of 'none', 'numpy'"):
        opgen.multiply(a, a, auto_broadcast="pdpd")


def _c_tensors(ffi, arrays, dtype_code: int):
    tensors = ffi.new("opgen_tensor[]", len(arrays))
    for tensor, array in zip(tensors, arrays):
        tensor.data = ffi.cast("void *", array.ctypes.data)
        tensor.dtype = dtype_code
        tensor.rank = array.ndim
        tensor.dims[0 : array.ndim] = array.shape
    return tensors


def test_the_c_api_checks_the_shapes():
    """opgen_add from C: the broadcast result; OPGEN_INVALID_SHAPE with a message naming both
    inputs and the rule for shapes that do not broadcast, for an output of another shape, and
    for unequal shapes with auto_broadcast none."""
    module = opgen.bundled.module
    ffi, lib = module.ffi, module.lib

    def call(a, b, out, rule=lib.OPGEN_AUTO_BROADCAST_NUMPY):
        tensors = _c_tensors(ffi, [a, b, out], lib.OPGEN_F32)
        status = lib.opgen_add(tensors + 0, tensors + 1, tensors + 2, rule)
        return status, ffi.string(lib.opgen_last_error()).decode()

    a, b = np.arange(3, dtype=np.float32).reshape(3, 1), np.arange(4, dtype=np.float32).reshape(1, 4)
    out = np.zeros((3, 4), np.float32)
    assert call(a, b, out)[0] == lib.OPGEN_SUCCESS
    np.testing.assert_array_equal(out, a + b)
    status, message = call(np.ones((4, 3), np.float32), np.ones((2, 3), np.float32), out)
    assert status == lib.OPGEN_INVALID_SHAPE
    assert message == (
        "opgen_add: src_1: shape [2, 3] does not broadcast with src_0's shape [4, 3]: aligned at their last dims, "
        "each pair of dims must be equal or one of them 1 (dim -2: 4 and 2)"
    )
    status, message = call(a, b, np.zeros((4, 3), np.float32))
    assert status == lib.OPGEN_INVALID_SHAPE
    wanted = "must be [3, 4], the broadcast shape of src_0 [3, 1] and src_1 [1, 4]"
    assert message == f"opgen_add: dst: shape [4, 3] {wanted}"
    status, message = call(a, b, out, lib.OPGEN_AUTO_BROADCAST_NONE)
    assert status == lib.OPGEN_INVALID_SHAPE
    assert "must equal src_0's shape [3, 1]: with auto_broadcast none" in message
    status, message = call(a, b, out, 7)
    assert status == lib.OPGEN_INVALID_ATTRIBUTE and "auto_broadcast" in message


def test_the_kernel_api_takes_each_inputs_shape():
    """add_f32 called directly with ranks and dims: (5,) against (2, 3, 5)."""
    module = opgen.bundled.module
    ffi, lib = module.ffi, module.lib
    a, b = np.arange(5, dtype=np.float32), np.arange(30, dtype=np.float32).reshape(2, 3, 5)
    out = np.zeros((2, 3, 5), np.float32)
    lib.add_f32(
        ffi.from_buffer("float[]", a),
        ffi.from_buffer("float[]", b),
        ffi.from_buffer("float[]", out),
        1,
        ffi.new("int64_t[]", [5]),
        3,
        ffi.new("int64_t[]", [2, 3, 5]),
    )
    np.testing.assert_array_equal(out, a + b)


def test_broadcast_shape_and_mismatch():
    assert binary.broadcast_shape((3, 1), (1, 4)) == (3, 4)
    assert binary.broadcast_shape((5,), (2, 3, 5)) == (2, 3, 5)
    assert binary.broadcast_shape((0,), (1,)) == (0,)
    assert binary.broadcast_shape((2,), (3,)) is None
    assert binary.mismatch((4, 3), (2, 3)) == -2
    assert binary.mismatch((4, 3), (1, 3)) is None


def test_opgen_check_passes_every_binary_variant():
    results = [r for name in OPS for r in check.check_op(opgen.bundled, BINARY[name], oracle, 0)]
    assert len(results) == len(OPS) * 3
    assert all(r.failure is None for r in results), [r for r in results if r.failure]


def _spec_dir(tmp_path: Path, edit) -> Path:
    """specs/ with add.toml changed by `edit` (the other binary ops left out)."""
    directory = tmp_path / "specs"
    shutil.copytree(BUNDLED_SPECS, directory)
    path = directory / "add.toml"
    path.write_text(edit(path.read_text()))
    return directory


def _third_input(text: str) -> str:
    text = re.sub(r'(?m)^dst = "(\w+)"$', r'src_2 = "\1"\ndst = "\1"', text)
    return text.replace("[[outputs]]", '[[inputs]]\nname = "src_2"\ndoc = "A third."\n\n[[outputs]]')


@pytest.mark.parametrize(
    "edit, message",
    [
        (_third_input, "pattern binary takes exactly two inputs"),
        (lambda t: t.replace('allowed = ["none", "numpy"]', 'allowed = ["none", "pdpd"]'), "broadcast rules must be"),
        (lambda t: t.replace('pattern = "binary"', 'pattern = "elementwise"'), "only binary ops take a broadcast"),
        (lambda t: t.replace('role = "broadcast"\n', ""), "the math cannot read a string attribute"),
    ],
)
def test_specs_the_pattern_refuses(tmp_path, edit, message):
    directory = _spec_dir(tmp_path, edit)
    with pytest.raises(SpecError, match=message):
        load_specs(directory, ["add"])


def test_bf16_results_are_ml_dtypes_bfloat16():
    x = np.array([1.5, -2.25], ml_dtypes.bfloat16)
    assert opgen.divide(x, x[:1]).dtype == ml_dtypes.bfloat16
