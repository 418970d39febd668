"""The ReduceX ops (along_axes over a set of axes, an int list): results against the float64
oracle within the bounds the specs state, on sets of one axis, of axes counted from the last, of
neighbours, of axes that are not neighbours, of every axis and of none, with keep_dims both ways,
on odd, tiny and empty shapes with edge values; the same bits on any thread count; clear errors
(Python) and statuses (C) for bad axes; spec mistakes named by key and rule."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import opgen
from opgen import accuracy, check, oracle, plan, shapes
from opgen.render import BUNDLED_SPECS
from opgen.specs import MAX_RANK, SpecError, load_specs
from tests.helpers import dtype_of, rng, threads_set_to

TABLE, SPECS = load_specs(BUNDLED_SPECS)
REDUCTIONS = {spec.name: spec for spec in SPECS if any(a.type == "int list" for a in spec.attributes)}
OPS = ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_l1", "reduce_l2"]
# odd sizes: 1, 3, 17 and other primes, empty dims (reduced and kept), dims of 1 between others
# (6, 5, 37): N, C, HW; rank 4 and 5 for sets of three blocks and more
SHAPES = [
    (1,),
    (3,),
    (17,),
    (2, 3),
    (3, 0, 4),
    (0, 5),
    (6, 5, 37),
    (2, 3, 5, 7),
    (3, 17, 19),
    (4, 1, 35),
    (5, 1, 7, 1, 3),
    (2, 3, 2, 5, 3),
]
ROWS = [(op, row) for op in OPS for row in REDUCTIONS[op].dtypes]


def _row_id(case: tuple) -> str:
    op, row = case
    return f"{op}-{row['src']}"


def test_the_bundled_reductions_are_the_ops_tested_here():
    assert sorted(REDUCTIONS) == sorted(OPS)


def _judge(op: str, row: dict[str, str], value: np.ndarray, expected: np.ndarray, src: np.ndarray, kwargs) -> tuple:
    """(where outside the stated bound, where a result 3 % off would be, where that can be told)."""
    spec = REDUCTIONS[op]
    out = TABLE.dtypes[row["dst"]]
    contract = spec.accuracy["dst"]
    if contract == "exact":

        def outside(got: np.ndarray) -> np.ndarray:
            return accuracy.ulps_off(got, expected, out, 0)

    else:
        bound = getattr(oracle, contract.removeprefix("oracle:"))(src, **kwargs)[0]

        def outside(got: np.ndarray) -> np.ndarray:
            return accuracy.outside(got, expected, out, bound)[0]

    with np.errstate(all="ignore"):
        off = (value.astype(np.float64) * (1 + 3e-2)).astype(value.dtype)
        sizable = np.isfinite(expected) & (np.abs(expected) > 1e-3) & (np.abs(expected) < 1e30)
    return outside(value), outside(off) & sizable, sizable


@pytest.mark.parametrize("case", ROWS, ids=_row_id)
@pytest.mark.parametrize("specials", ["finite", "all"])
def test_every_axes_set_within_the_stated_bound(case, specials):
    """Every set of axes opgen check takes (none, each one from the last, neighbours, every
    axis, sets that are not neighbours), keep_dims both ways, on odd and empty shapes: within the
    stated bound, of the oracle's shape; and results 3 % off fall outside it (the bound can fail)."""
    op, row = case
    spec = REDUCTIONS[op]
    function, reference = getattr(opgen, op), getattr(oracle, op)
    cases = sensed = judged = apart = 0
    for shape in SHAPES:
        for axes in check.axes_sets(len(shape)):
            for keep_dims in (False, True):
                generator = rng(op, shape, row["src"], axes, keep_dims, specials)
                src = check._input_data(spec, TABLE, row, generator, {"src": shape}, specials)["src"]
                kwargs = {"axes": list(axes), "keep_dims": keep_dims}
                got, want = function(src, **kwargs), reference(src, **kwargs)
                assert (
                    got.shape
                    == want.shape
                    == shapes.axes_reduced_shape(shape, shapes.reduced_axes(len(shape), axes), keep_dims)
                )
                assert got.dtype == dtype_of(row["dst"])
                bad, off, sizable = _judge(op, row, got, want, src, kwargs)
                where = np.argwhere(bad)
                assert not bad.any(), (
                    f"{op} {row['src']} {shape} axes={axes} keep_dims={keep_dims} at {list(where[0])}: "
                    f"got {got[tuple(where[0])]!r}, expected {want[tuple(where[0])]!r}"
                )
                if sizable.any():
                    judged += 1
                    sensed += int(off[sizable].all())
                blocks = shapes.axes_blocks(shape, shapes.reduced_axes(len(shape), axes))
                apart += sum(reduced for _, reduced in blocks) > 1 and 0 not in shape
                cases += 1
    assert cases > 150 and apart >= 20
    if specials == "finite":  # with the dtype's largest values in a reduction its bounds are wide
        assert sensed == judged > 0, f"results 3 % off passed {judged - sensed} of {judged} times"


def test_a_bound_sees_a_result_3_percent_off():
    """The judge itself: a sum scaled by 1.03 fails the bound, the sum itself passes."""
    x = rng("off").standard_normal((4, 50, 3)).astype(np.float32)
    row = {"src": "f32", "dst": "f32"}
    kwargs = {"axes": [0, 2], "keep_dims": False}
    got, want = opgen.reduce_sum(x, **kwargs), oracle.reduce_sum(x, **kwargs)
    bad, off, sizable = _judge("reduce_sum", row, got, want, x, kwargs)
    assert not bad.any() and sizable.any() and off[sizable].all()


def test_the_product_oracle_gives_the_exact_products_special_values():
    """An infinity times factors whose float64 product underflows is still an infinity (float64
    alone gave 0 * -inf, NaN: opgen check --seed 3 failed the kernel's right -inf); an infinity
    times 0 and NaN are NaN; the sign is the factors' signs multiplied. Where the partial
    products may leave double's range the bound is infinite, and the kernel's -inf is within."""
    sub = np.float32(1e-42)
    x = np.array(
        [[*[sub] * 60, -np.inf], [np.inf, 0, *[1] * 59], [np.nan, np.inf, *[1] * 59], [-np.inf, -sub, *[2] * 59]],
        np.float32,
    )
    want = oracle.reduce_prod(x, axes=[1])
    assert np.array_equal(want, [-np.inf, np.nan, np.nan, np.inf], equal_nan=True)
    got = opgen.reduce_prod(x, axes=[1])
    (bound,) = oracle.reduce_prod_bounds(x, axes=[1])
    assert bound[0] == np.inf and not accuracy.outside(got, want, TABLE.dtypes["f32"], bound)[0].any()


def test_axes_that_are_not_neighbours_give_what_neighbours_give():
    """(0, 2) of N, C, HW (BatchNorm's statistics) goes through the driver's combination of
    partial reductions; the same reduction over neighbouring axes of the transposed tensor goes
    through one line: max, min and l1 (exact terms, exact max) agree to the last bit for max and
    min, within the bound for the sum."""
    x = rng("apart").standard_normal((6, 5, 37)).astype(np.float32)
    moved = np.ascontiguousarray(x.transpose(1, 0, 2))
    for op in ("reduce_max", "reduce_min"):
        apart = getattr(opgen, op)(x, axes=[0, 2])
        together = getattr(opgen, op)(moved, axes=[1, 2])
        assert np.array_equal(apart, together)
    apart = opgen.reduce_l1(x, axes=[0, -1], keep_dims=True)
    assert apart.shape == (1, 5, 1)
    bound = oracle.reduce_l1_bounds(x, axes=[0, 2], keep_dims=True)[0]
    assert not accuracy.outside(apart, oracle.reduce_l1(x, axes=[0, 2], keep_dims=True), TABLE.dtypes["f32"], bound)[
        0
    ].any()


def test_nan_reaches_its_own_results_only():
    """A NaN makes the sum, max and min of its reduction NaN (as NumPy's), and no other; an
    infinity gives inf to its sums and max."""
    x = np.ones((3, 4, 5), np.float32)
    x[1, 2, 3] = np.nan
    x[2, 0, 0] = np.inf
    for op in ("reduce_sum", "reduce_max", "reduce_min", "reduce_mean", "reduce_l2", "reduce_prod"):
        got = getattr(opgen, op)(x, axes=[0, 2])
        assert np.isnan(got[2]) and not np.isnan(np.delete(got, 2)).any(), (op, got)
    assert np.isinf(opgen.reduce_sum(x, axes=[0, 2])[0]) and opgen.reduce_max(x, axes=[0, 2])[0] == np.inf
    assert opgen.reduce_min(x, axes=[0, 2])[0] == 1


def test_no_axes_is_the_identity_and_empty_reductions_their_start():
    """axes = [] (the default): each element its own reduction (sum and max: itself; l2: its
    magnitude). A reduction of no elements: sum 0, product 1, max -inf, min +inf, mean 0/0."""
    x = rng("identity").standard_normal((3, 7)).astype(np.float32)
    assert np.array_equal(opgen.reduce_sum(x), x) and np.array_equal(opgen.reduce_max(x, axes=[]), x)
    assert np.array_equal(opgen.reduce_l2(x), np.abs(x))
    empty = np.zeros((2, 0, 3), np.float32)
    assert np.array_equal(opgen.reduce_sum(empty, axes=[1]), np.zeros((2, 3)))
    assert np.array_equal(opgen.reduce_prod(empty, axes=[1], keep_dims=True), np.ones((2, 1, 3)))
    assert np.all(opgen.reduce_max(empty, axes=[0, 1]) == -np.inf)
    assert np.all(opgen.reduce_min(empty, axes=[1]) == np.inf)
    assert np.isnan(opgen.reduce_mean(empty, axes=[1])).all()
    assert opgen.reduce_sum(empty, axes=[0, 2]).shape == (0,)


@pytest.mark.parametrize("shape, axes", [((2, 0, 3), [1]), ((3, 5), [1]), ((3, 40, 17), [1]), ((40, 3), [0])])
def test_a_sum_of_zeros_is_positive_zero_as_numpy_gives(shape, axes):
    """A sum's lanes start at -0.0 (lines.Reduction): a line of -0.0 terms, or of none, must
    still give +0.0, NumPy's result, in the contiguous and the column paths."""
    x = np.full(shape, -0.0, np.float32)
    for result in (opgen.reduce_sum(x, axes=axes), opgen.reduce_mean(np.abs(x) * -1, axes=axes)):
        expected = np.sum(x, axis=tuple(axes))
        zeros = result == 0
        assert not np.signbit(result[zeros]).any() and not np.signbit(expected[expected == 0]).any()


@pytest.mark.parametrize(
    "shape, axes",
    [
        ((64, 4099), [1]),
        ((3000, 97), [0]),
        ((16, 24, 600), [0, 2]),
        ((40, 6, 30, 9), [0, 2]),
        ((7, 301, 13), [0, 1, 2]),
    ],
)
def test_the_same_bits_on_any_thread_count(shape, axes):
    """Each result is computed by one thread in a fixed order (the partial reductions of blocks
    of axes too): the bits do not depend on the thread count."""
    x = rng("threads", shape).standard_normal(shape).astype(np.float32)
    for op in ("reduce_sum", "reduce_mean", "reduce_prod", "reduce_l2"):
        function = getattr(opgen, op)
        with threads_set_to(1):
            one = function(x, axes=axes)
        with threads_set_to(2):
            two = function(x, axes=axes)
        assert np.array_equal(one.view(np.uint32), two.view(np.uint32)), op


@pytest.mark.parametrize("op", OPS)
def test_wide_tiles_of_streamed_calls_give_the_bits_of_single_tiles(op):
    """A streamed call's lines across the last axis go in wide tiles (several tiles of
    neighbouring lines a step, plan.LINES_WIDE_TILES), a stored call's one tile at a time: the
    same bits, for whole and partial groups of tiles and a last partial tile."""
    lib = opgen.bundled.module.lib
    lanes = plan.LINES_COLUMN_BLOCKS * plan.BLOCK
    for shape, axes in [((3, 7, 9 * lanes + 5), [1]), ((2, 4 * lanes), [0]), ((3, 5, 6, 2 * lanes), [1, 2])]:
        x = rng("wide tiles", op, shape).standard_normal(shape).astype(np.float32)
        results = []
        try:
            for threshold in (1, 1 << 40):  # every call streamed, then none
                lib.opgen_set_stream_threshold(threshold)
                with threads_set_to(2):
                    results.append(getattr(opgen, op)(x, axes=axes))
        finally:
            lib.opgen_set_stream_threshold(0)
        assert np.array_equal(results[0].view(np.uint32), results[1].view(np.uint32)), f"{op} {shape} {axes}"


def test_bad_axes_are_refused_with_their_rule():
    x = np.ones((2, 3, 4), np.float32)
    with pytest.raises(
        ValueError, match=r"reduce_sum\(\): axes: 3 is not an axis of src \(rank 3\): each must be in -3\.\.2"
    ):
        opgen.reduce_sum(x, axes=[0, 3])
    with pytest.raises(ValueError, match=r"axes: -4 is not an axis of src \(rank 3\)"):
        opgen.reduce_mean(x, axes=[-4])
    with pytest.raises(ValueError, match=r"reduce_max\(\): axes: names axis 1 of src \(rank 3\) twice \(1 and -2\)"):
        opgen.reduce_max(x, axes=[1, -2])
    with pytest.raises(ValueError, match=r"axes: names an axis twice: \[2, 2\]"):
        opgen.reduce_min(x, axes=(2, 2))
    with pytest.raises(TypeError, match=r"axes: must be a list of integers \(axes\), not int"):
        opgen.reduce_sum(x, axes=1)
    with pytest.raises(TypeError, match=r"axes: must be a list of integers \(axes\), not one holding float"):
        opgen.reduce_sum(x, axes=[1.0])
    with pytest.raises(TypeError, match=r"axes: must be a list of integers \(axes\), not one holding bool"):
        opgen.reduce_sum(x, axes=[True])
    with pytest.raises(ValueError, match=rf"axes: must name at most {MAX_RANK} axes"):
        opgen.reduce_sum(x, axes=list(range(MAX_RANK + 1)))
    with pytest.raises(TypeError, match=r"keep_dims: must be True or False"):
        opgen.reduce_sum(x, axes=[0], keep_dims=1)
    assert opgen.reduce_sum(x, axes=[np.int64(-1)], keep_dims=True).shape == (2, 3, 1)
    assert opgen.reduce_sum(x, axes=(0,)).shape == opgen.reduce_sum(x, axes=[0]).shape == (3, 4)


def _c_call(lib, ffi, function, src_shape, dst_shape, axes, keep_dims, count=None):
    src = ffi.new("float[]", max(1, int(np.prod(src_shape))))
    dst = ffi.new("float[]", max(1, int(np.prod(dst_shape))))
    tensors = []
    for pointer, shape in ((src, src_shape), (dst, dst_shape)):
        tensor = ffi.new("opgen_tensor *")
        tensor.data, tensor.dtype, tensor.rank = pointer, lib.OPGEN_F32, len(shape)
        for d, size in enumerate(shape):
            tensor.dims[d] = size
        tensors.append(tensor)
    listed = ffi.new("opgen_int_list *")
    listed.count = len(axes) if count is None else count
    for i, value in enumerate(axes):
        listed.values[i] = value
    return getattr(lib, function)(tensors[0], tensors[1], listed[0], keep_dims)


def test_the_c_api_checks_the_axes_against_the_rank():
    """opgen_reduce_sum refuses axes outside the rank, an axis named twice and a count outside
    0..OPGEN_MAX_RANK with OPGEN_INVALID_ATTRIBUTE, a dst of the wrong shape for keep_dims with
    OPGEN_INVALID_SHAPE; _with_arrays takes the list as a count and OPGEN_MAX_RANK doubles."""
    module = opgen.bundled.module
    ffi, lib = module.ffi, module.lib

    def message() -> str:
        return ffi.string(lib.opgen_last_error()).decode()

    assert _c_call(lib, ffi, "opgen_reduce_sum", (2, 3, 4), (3,), [0, 2], 0) == lib.OPGEN_SUCCESS
    assert _c_call(lib, ffi, "opgen_reduce_sum", (2, 3, 4), (1, 3, 1), [0, -1], 1) == lib.OPGEN_SUCCESS
    assert _c_call(lib, ffi, "opgen_reduce_sum", (2, 3, 4), (3,), [0, 3], 0) == lib.OPGEN_INVALID_ATTRIBUTE
    assert "axes" in message() and "3 is not an axis of src (rank 3)" in message(), message()
    assert _c_call(lib, ffi, "opgen_reduce_max", (2, 3, 4), (3, 4), [0, -3], 0) == lib.OPGEN_INVALID_ATTRIBUTE
    assert "twice" in message(), message()
    assert _c_call(lib, ffi, "opgen_reduce_min", (2, 3, 4), (3, 4), [0], 0, count=-1) == lib.OPGEN_INVALID_ATTRIBUTE
    assert _c_call(lib, ffi, "opgen_reduce_min", (2, 3, 4), (3, 4), [0], 0, count=MAX_RANK + 1) == (
        lib.OPGEN_INVALID_ATTRIBUTE
    )
    assert _c_call(lib, ffi, "opgen_reduce_l2", (2, 3, 4), (3, 4), [0], 1) == lib.OPGEN_INVALID_SHAPE
    assert "keep_dims 1" in message(), message()
    # _with_arrays: count, then MAX_RANK values; a value that is not whole is refused
    src = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    dst = np.empty(3, np.float32)
    operands = ffi.new("opgen_tensor[]", 2)
    for operand, array in zip(operands, (src, dst)):
        operand.dtype, operand.rank = lib.OPGEN_F32, array.ndim
        operand.dims[0 : array.ndim] = array.shape
    data = ffi.new("void *[]", [ffi.from_buffer(src), ffi.from_buffer(dst)])
    doubles = [2.0, 0.0, -1.0, *[0.0] * (MAX_RANK - 2), 0.0]
    assert lib.opgen_reduce_sum_with_arrays(operands, data, ffi.new("double[]", doubles), ffi.NULL, 0) == 0
    assert np.array_equal(dst, src.sum(axis=(0, 2)))
    doubles[2] = -0.5
    status = lib.opgen_reduce_sum_with_arrays(operands, data, ffi.new("double[]", doubles), ffi.NULL, 0)
    assert status == lib.OPGEN_INVALID_ATTRIBUTE and "whole number" in message(), message()


SPEC = """\
[op]
name = "total"
summary = "A user's reduction."
source = "a test"
pattern = "along_axes"
min_rank = 1

[[attributes]]
name = "axes"
type = "int list"
default = []
role = "axes"
doc = "The axes."

[[attributes]]
name = "keep_dims"
type = "bool"
default = false
role = "keep_dims"
doc = "Keep them."

[[inputs]]
name = "src"
doc = "Input."

[[outputs]]
name = "dst"
kind = "line"
doc = "Output."

[[dtypes]]
src = "f32"
dst = "f32"

[math.line]
sum_src = "line_sum(src)"
dst = "sum_src / count"

[accuracy]
dst = "oracle:reduce_mean_bounds"
"""


def _spec_dir(tmp_path: Path, text: str) -> Path:
    directory = tmp_path / "specs"
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(BUNDLED_SPECS / "dtypes.toml", directory)
    (directory / "total.toml").write_text(text)
    return directory


def test_the_spec_loads_as_written(tmp_path):
    _, (spec,) = load_specs(_spec_dir(tmp_path, SPEC))
    assert spec.attributes[0].type == "int list" and spec.attributes[0].default == []


@pytest.mark.parametrize(
    "change, key, rule",
    [
        (('type = "int list"', 'type = "int"'), "attributes.axes.role", "roles are"),
        (('role = "axes"\n', ""), "attributes.axes.role", "an int list attribute names a set of axes"),
        (('role = "axes"', 'role = "axis"'), "attributes.axes.role", "roles are"),
        (("default = []", "default = [0, 0]"), "attributes.axes.default", "names an axis twice"),
        (("default = []", "default = [1.5]"), "attributes.axes.default", "must be a list of integers"),
        (("default = []", "default = 2"), "attributes.axes.default", "must be a list of integers"),
        (("default = []", "default = [12]"), "attributes.axes.default", "12 is not an axis"),
        (('role = "keep_dims"', 'role = "axes"'), "attributes.keep_dims.role", "roles are"),
        (('type = "bool"', 'type = "f32"'), "attributes.keep_dims.role", "roles are"),
        (
            ('type = "int list"\ndefault = []\nrole = "axes"', 'type = "int"\ndefault = 0\nrole = "axis"'),
            "attributes.keep_dims.role",
            "'keep_dims' goes with an int list attribute",
        ),
        (
            ('[[outputs]]\nname = "dst"\nkind = "line"', '[[outputs]]\nname = "dst"'),
            "outputs.dst.kind",
            "line outputs only",
        ),
        (
            ('dst = "sum_src / count"', 'dst = "line_max(src)"'),
            "math.line",
            "one reduction, its first entry",
        ),
        (
            ('sum_src = "line_sum(src)"', 'half = "count / 2"\nsum_src = "line_sum(src)"'),
            "math.line",
            "one reduction, its first entry",
        ),
    ],
)
def test_spec_mistakes_name_their_key_and_rule(tmp_path, change, key, rule):
    old, new = change
    assert old in SPEC
    directory = _spec_dir(tmp_path, SPEC.replace(old, new, 1))
    with pytest.raises(SpecError) as raised:
        load_specs(directory)
    message = str(raised.value)
    assert f"total.toml: {key}" in message and rule in message, message


def test_an_op_over_a_set_of_axes_takes_tensor_inputs_only(tmp_path):
    text = SPEC.replace("[[outputs]]", '[[inputs]]\nname = "scale"\nkind = "line"\ndoc = "x"\n\n[[outputs]]', 1)
    text = text.replace('src = "f32"\ndst = "f32"', 'src = "f32"\nscale = "f32"\ndst = "f32"')
    with pytest.raises(SpecError, match=r"total.toml: inputs.scale.kind: .*tensor inputs only"):
        load_specs(_spec_dir(tmp_path, text))


@pytest.mark.parametrize("op", OPS)
def test_opgen_check_passes_every_variant(op):
    """opgen check's cases of the op (every dtype row, keep_dims both ways, the axes sets of
    check.axes_sets on its shapes, edge values) pass against the oracle, through the C API."""
    spec = next(s for s in opgen.bundled.specs if s.name == op)
    results = check.check_op(opgen.bundled, spec, oracle, seed=0)
    assert len(results) == 2 * len(spec.dtypes)
    assert all(r.failure is None and r.cases > 50 for r in results), check.report(results)


def test_torch_takes_the_axes_as_an_int_list():
    """As a PyTorch custom op the axes are `int[] axes=[]`; results and fake shapes as opgen's."""
    torch = pytest.importorskip("torch")
    import opgen.torch as ops

    assert "int[] axes=[], bool keep_dims=False" in ops.schema(REDUCTIONS["reduce_sum"])
    x = torch.from_numpy(rng("torch").standard_normal((3, 4, 5)).astype(np.float32))
    got = ops.reduce_mean(x, axes=[0, 2], keep_dims=True)
    assert isinstance(got, torch.Tensor) and got.shape == (1, 4, 1)
    assert np.array_equal(got.numpy(), opgen.reduce_mean(x.numpy(), axes=[0, 2], keep_dims=True))
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        assert torch.ops.opgen.reduce_l2(torch.empty(3, 4, 5), axes=[-1]).shape == (3, 4)
