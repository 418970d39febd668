"""The along_axes pattern (ops over lines along the axes an attribute names: SoftMax, ...):
results against the float64 oracle within the bounds the specs state, on every axis, dtype and
odd or empty shape with edge values; the same bits on any thread count; clear errors for bad
axes, shapes and specs."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import opgen
from opgen import accuracy, check, lines, oracle, plan, shapes
from opgen.render import BUNDLED_SPECS
from opgen.specs import SpecError, load_specs
from tests.helpers import dtype_of, rng, threads_set_to

SHAPES = [(1,), (5,), (16,), (33,), (2, 3), (3, 0, 4), (0, 5), (2, 3, 5, 7), (3, 17, 19), (4, 1, 35)]
TABLE, SPECS = load_specs(BUNDLED_SPECS)
# the ops whose lines run along the axes an int attribute names (ops over an int list of axes,
# the ReduceX family: tests/test_reductions.py)
ALONG = {
    spec.name: spec for spec in SPECS if spec.pattern == "along_axes" and any(a.type == "int" for a in spec.attributes)
}


# every along_axes op of specs/ with each of its dtype rows
ROWS = [(op, row) for op in sorted(ALONG) for row in ALONG[op].dtypes]


def _row_id(case: tuple) -> str:
    op, row = case
    return f"{op}-{'_'.join(dict.fromkeys(row.values()))}"


def _inputs(op: str, shape: tuple[int, ...], row: dict[str, str], axis: int, salt: object) -> dict[str, np.ndarray]:
    """Random data with edge values for each input, in its dtype of `row`, its kind's shape and
    its stated domain (as opgen check draws it)."""
    spec = ALONG[op]
    role = next(a.role for a in spec.attributes if a.type == "int")
    first, last = shapes.line_axes(len(shape), axis, role or "axis")
    generator = rng(op, shape, tuple(row.values()), axis, salt)
    input_shapes = {t.name: shapes.axes_shape(shape, first, last, t.kind) for t in spec.inputs}
    return check._input_data(spec, TABLE, row, generator, input_shapes, "all" if salt == "all" else "finite")


def _without_optional(spec, arrays: dict[str, np.ndarray], row: dict[str, str]) -> dict[str, np.ndarray] | None:
    """The arrays without the optional inputs, when the call still selects `row` (the first row
    that fits the given dtypes); else None."""
    given = {name: array for name, array in arrays.items() if not spec.tensor(name).optional}
    if len(given) == len(arrays):
        return None
    first = next(r for r in spec.dtypes if all(r[name] == row[name] for name in given))
    return given if first == row else None


@pytest.mark.parametrize("case", ROWS, ids=_row_id)
@pytest.mark.parametrize("specials", ["finite", "all"])
def test_every_axis_within_the_stated_bound(case, specials):
    """Every output of every along_axes op, on every axis of odd, tiny and empty shapes, within
    the bound its spec states; optional inputs given and (every other case) left out; and
    results 3 % off fall outside it (the bound can fail)."""
    op, row = case
    spec = ALONG[op]
    if specials == "all" and spec.edge_values == "finite":
        pytest.skip(f"{op} states edge_values = 'finite'")
    function, reference = getattr(opgen, op), getattr(oracle, op)
    contracts = [spec.accuracy[t.name] for t in spec.outputs]
    assert all(c and c.startswith("oracle:") for c in contracts)
    axis_name = next(a.name for a in spec.attributes if a.type == "int")
    cases = omitted = sensed = judged = 0
    for shape in SHAPES:
        for axis in range(-len(shape), len(shape)):
            arrays = _inputs(op, shape, row, axis, specials)
            fewer = _without_optional(spec, arrays, row)
            if fewer is not None and cases % 2:
                arrays, omitted = fewer, omitted + 1
            kwargs = {axis_name: axis}
            got = function(**arrays, **kwargs)
            want = reference(**arrays, **kwargs)
            got, want = ((got,), (want,)) if len(spec.outputs) == 1 else (tuple(got), tuple(want))
            bounds = {c: getattr(oracle, c.removeprefix("oracle:"))(**arrays, **kwargs) for c in set(contracts)}
            for index, (tensor, value, expected) in enumerate(zip(spec.outputs, got, want)):
                if value is None and expected is None:  # an output not requested
                    continue
                out = TABLE.dtypes[row[tensor.name]]
                assert value.shape == expected.shape
                assert value.dtype == dtype_of(row[tensor.name])
                bound = bounds[contracts[index]][index]
                bad, _ = accuracy.outside(value, expected, out, bound)
                with np.errstate(all="ignore"):
                    off = (value.astype(np.float64) * (1 + 2**-5)).astype(value.dtype)
                    sizable = np.isfinite(expected) & (np.abs(expected) > 1e-3)
                sensed += int(sizable.any() and accuracy.outside(off, expected, out, bound)[0][sizable].any())
                judged += int(sizable.any())
                where = np.argwhere(bad)
                assert not bad.any(), (
                    f"{op} {row} {shape} axis={axis} {tensor.name}{list(where[0])} {sorted(arrays)}: "
                    f"got {value[tuple(where[0])]!r}, expected {expected[tuple(where[0])]!r}, "
                    f"bound {np.broadcast_to(bound, expected.shape)[tuple(where[0])]!r}"
                )
            cases += 1
    assert cases > 40
    assert omitted > 10 or _without_optional(spec, _inputs(op, (2, 3), row, 1, 0), row) is None
    if specials == "finite":  # with the dtype's largest values in a line its bounds are wide
        assert sensed == judged > 0, f"results 3 % off passed {judged - sensed} of {judged} times"


def test_soft_max_lines_sum_to_one_and_follow_their_max():
    """Properties of the math itself, not of a reference: each line sums to 1 (within its n
    roundings), and a shift of a whole line changes nothing (up to the rounding of x - max)."""
    x = rng("sum to one").standard_normal((6, 50, 7)).astype(np.float32) * 20
    for axis in range(3):
        y = opgen.soft_max(x, axis=axis).astype(np.float64)
        assert np.allclose(y.sum(axis=axis), 1.0, rtol=0, atol=x.shape[axis] * 2e-7)
        shifted = opgen.soft_max(x + np.float32(64), axis=axis).astype(np.float64)
        assert np.allclose(shifted, y, rtol=1e-5, atol=1e-30)


def test_nan_and_infinity_poison_their_line_only():
    x = np.zeros((4, 9), np.float32)
    x[1, 3] = np.nan
    x[2, 5] = np.inf
    x[3, :] = -np.inf
    y = opgen.soft_max(x, axis=1)
    assert np.all(y[0] == np.float32(1 / 9))
    assert np.isnan(y[1]).all() and np.isnan(y[2]).all() and np.isnan(y[3]).all()
    x[3, :] = 0
    x[3, 4] = -np.inf  # one -inf in a line: its element is 0, the others share the rest
    y = opgen.soft_max(x, axis=1)
    assert y[3, 4] == 0 and np.all(y[3, np.arange(9) != 4] == np.float32(1 / 8))


def test_the_layer_norm_bound_holds_where_the_variance_error_passes_the_variance():
    """A line of one bf16 element of about -3.4e38: the variance's error bound (from the sum's
    2^-52 of 3.4e38) is larger than the variance, 0. The kernel's variance, a sum of squares,
    is still never below 0, so 1 / sqrt(variance + epsilon) is at most 1 / sqrt(epsilon): the
    stated bound is finite (it was NaN, 0 times an unbounded factor, and the right result
    failed it)."""
    src = np.array([-3.38953e38], dtype=dtype_of("bf16"))
    gamma, beta = np.array([-1.0], np.float32), np.array([3.0], np.float32)
    bound = oracle.layer_norm_bounds(src, gamma, beta, begin_norm_axis=0)[0]
    assert np.isfinite(bound).all()
    got = opgen.layer_norm(src, gamma, beta, begin_norm_axis=0)[0]
    want = oracle.layer_norm(src, gamma, beta, begin_norm_axis=0)[0]
    assert not accuracy.outside(got, want, TABLE.dtypes["bf16"], bound)[0].any()
    infinite = np.full_like(got, np.inf)
    assert accuracy.outside(infinite, want, TABLE.dtypes["bf16"], bound)[0].all()  # the bound can fail


def test_the_layer_norm_bound_is_infinite_where_an_infinite_gamma_meets_an_uncertain_sign():
    """A line holding FLT_MAX and -FLT_MAX, which cancel in the sum: the mean's error (2^-52 of
    their magnitudes) dwarfs x - mean, whose sign is then unknown, and gamma is -inf. The stated
    bound there is infinite (it was NaN: half double's smallest subnormal is 0 as a float64, and
    0 * inf; opgen check --seed 7 failed the kernel's right -inf); elsewhere it stays finite."""
    line = [0.278476834, -3.40282347e38, -1.91182065, 0.396536499, 3.40282347e38, 2.0]
    src = np.array([line], np.float32)
    gamma = np.array([-np.inf, *[1.0] * 5], np.float32)
    beta = np.full(6, -0.5, np.float32)
    bound = oracle.layer_norm_bounds(src, gamma, beta, begin_norm_axis=-1)[0]
    assert bound[0, 0] == np.inf and np.isfinite(bound[0, 1:]).all()
    got = opgen.layer_norm(src, gamma, beta, begin_norm_axis=-1)[0]
    want = oracle.layer_norm(src, gamma, beta, begin_norm_axis=-1)[0]
    assert not accuracy.outside(got, want, TABLE.dtypes["f32"], bound)[0].any()


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_layer_norm_reads_gamma_and_beta_widened_once_or_block_by_block_alike(dtype):
    """Lines whose gamma and beta fit the threads' copies widened to double (plan.LINES_WIDE_VALUES
    in all) and lines one longer, whose blocks widen what they read: each within the stated
    bound, with and without gamma and beta, forward and backward, on one and two threads."""
    for length in (plan.LINES_WIDE_VALUES // 2, plan.LINES_WIDE_VALUES // 2 + 1):
        generator = rng("widened", length, dtype)
        src = generator.standard_normal((5, length)).astype(dtype_of(dtype))
        diff_dst = generator.standard_normal((5, length)).astype(dtype_of(dtype))
        gamma, beta = (generator.standard_normal(length).astype(np.float32) for _ in range(2))
        for threads in (1, 2):
            for g, b in ((gamma, beta), (None, None)):
                with threads_set_to(threads):
                    got = opgen.layer_norm(src, g, b, begin_norm_axis=-1)
                    mean, variance = got[1], got[2]
                    back = opgen.layer_norm_backward(src, diff_dst, mean, variance, g, begin_norm_axis=-1)
                want = oracle.layer_norm(src, g, b, begin_norm_axis=-1)[0]
                bound = oracle.layer_norm_bounds(src, g, b, begin_norm_axis=-1)[0]
                assert not accuracy.outside(got[0], want, TABLE.dtypes[dtype], bound)[0].any(), (length, threads)
                arrays = {"src": src, "diff_dst": diff_dst, "mean": mean, "variance": variance, "gamma": g}
                want = oracle.layer_norm_backward(**arrays, begin_norm_axis=-1)[0]
                bound = oracle.layer_norm_backward_bounds(**arrays, begin_norm_axis=-1)[0]
                assert not accuracy.outside(back[0], want, TABLE.dtypes[dtype], bound)[0].any(), (length, threads)


def test_the_layer_norm_backward_bound_counts_subnormal_terms_of_its_sums():
    """gamma of 2^-149 makes the line sums' terms subnormal in f32: dy g (x - mean) = 3.13
    2^-149 rounds to 3 2^-149, and inv_std^3 (x - mean) (3e7) carries that 2^-149 into
    diff_src, 4 % of it. The stated bound counts it (it did not: opgen check --seed 5 failed
    the kernel's right result); at 2^-149 a rounding, it allows 1.7 times the value itself,
    and a result three times as large still fails."""
    src, diff_dst = np.array([-3.0], dtype_of("bf16")), np.array([1.0], dtype_of("bf16"))
    mean, variance = np.array(0.12975521, np.float32), np.array(0.0, np.float32)
    gamma = np.array([-(2.0**-149)], np.float32)
    arrays = {"src": src, "diff_dst": diff_dst, "mean": mean, "variance": variance, "gamma": gamma}
    got = opgen.layer_norm_backward(**arrays, begin_norm_axis=-1)[0]
    want = oracle.layer_norm_backward(**arrays, begin_norm_axis=-1)[0]
    bound = oracle.layer_norm_backward_bounds(**arrays, begin_norm_axis=-1)[0]
    assert not accuracy.outside(got, want, TABLE.dtypes["bf16"], bound)[0].any()
    off = (got.astype(np.float64) * 3).astype(got.dtype)
    assert accuracy.outside(off, want, TABLE.dtypes["bf16"], bound)[0].all()


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_narrow_soft_max_keeps_its_terms_where_a_line_fits_and_computes_them_again_beyond(dtype):
    """bf16 and f16 SoftMax keep each exp term for the element pass in a scratch of
    plan.LINES_KEPT_TERMS floats per thread, and compute it again in longer lines: the same
    float either way. A line one -inf longer has the same max, terms and sum (exp(-inf) adds +0
    to a lane of nonzero terms), so its first elements, computed again, have the same bits as
    the shorter line's, kept; and both are within the stated bound."""
    from opgen import plan

    n = plan.LINES_KEPT_TERMS
    x = (rng("kept terms", dtype).standard_normal((3, n)) * 4).astype(dtype_of(dtype))
    longer = np.concatenate([x, np.full((3, 1), -np.inf, x.dtype)], axis=1)
    kept, again = opgen.soft_max(x, axis=1), opgen.soft_max(longer, axis=1)
    assert np.array_equal(kept.view(np.uint16), again[:, :n].view(np.uint16))
    assert np.all(again[:, n] == 0)
    for src, dst in ((x, kept), (longer, again)):
        (bound,) = oracle.soft_max_bounds(src, axis=1)
        bad, _ = accuracy.outside(dst, oracle.soft_max(src, axis=1), TABLE.dtypes[dtype], bound)
        assert not bad.any()


def _nonpositive_edges(count: int, dtype: str, salt: object) -> np.ndarray:
    """`count` values at most 0 in `dtype`: log-probabilities, -0, the smallest subnormals,
    values past exp's lower clamp (-746) and -inf among them."""
    edges = [-0.0, 0.0, -(2.0**-149), -(2.0**-126), -1e-30, -745.5, -746.0, -800.0, -np.inf, -88.7, -103.0]
    values = -rng("nonpositive", dtype, salt).exponential(4.0, count)
    values[: len(edges)] = edges
    return values.astype(dtype_of(dtype))


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_log_soft_max_backward_takes_the_same_exp_in_checked_and_unchecked_blocks(dtype, axis):
    """LogSoftmaxBackward takes exp(dst): its blocks whose dst values are all at most 0 call the
    cheaper exp of such arguments (LinesKernel.nonpositive_checks), the others the full one.
    Two lines with the same diff_dst, and the same dst except one positive value in each block
    of the second (its blocks fail the check), give the same bits at every other element:
    lines along the last axis (blocks along a line) and along the first (blocks across 16
    neighbouring lines, here lines j and j + 16)."""
    blocks, lanes = 7, 16
    values = _nonpositive_edges(blocks * lanes, dtype, axis).reshape(blocks, lanes)
    diff_dst = rng("diff_dst", dtype, axis).standard_normal((blocks, lanes)).astype(dtype_of(dtype))
    failing = values.copy()
    failing[:, 0] = 0.5  # one lane above 0 in each block
    if axis == -1:  # line 0 passes every check, line 1 fails them
        dst, dd = np.stack([values.ravel(), failing.ravel()]), np.stack([diff_dst.ravel()] * 2)
        got = opgen.log_soft_max_backward(dd, dst, axis=-1)
        checked, unchecked = got[0].reshape(blocks, lanes), got[1].reshape(blocks, lanes)
    else:  # step r: lines 0-15 read values[r], lines 16-31 failing[r]
        dst, dd = np.concatenate([values, failing], axis=1), np.concatenate([diff_dst] * 2, axis=1)
        got = opgen.log_soft_max_backward(dd, dst, axis=0)
        checked, unchecked = got[:, :lanes], got[:, lanes:]
    bits = f"u{checked.itemsize}"
    assert np.array_equal(checked[:, 1:].view(bits), unchecked[:, 1:].view(bits))
    assert np.isfinite(checked[:, 1:].astype(np.float64)).all()


def _overflowing_line(op: str, length: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """One line (float64) of `op`'s inputs whose math takes an intermediate past f32's largest
    value at one element while the result there is finite, and that intermediate in float64."""
    big = 3e38
    if op == "log_soft_max_backward":  # the line's sum of diff_dst, 6e38, times exp(dst)
        diff_dst, dst = np.full(length, 1.0), np.full(length, -10.0)
        diff_dst[:2] = big
        return {"diff_dst": diff_dst, "dst": dst}, np.array(diff_dst.sum())
    if op == "soft_max_backward":  # diff_dst - dot: -3e38 - 3e38 at element 2
        diff_dst, dst = np.zeros(length), np.full(length, 0.25)
        diff_dst[:3] = [big, big, -big]
        dst[:3] = [0.5, 0.5, 0.25]
        return {"diff_dst": diff_dst, "dst": dst}, diff_dst[2] - np.dot(diff_dst, dst)
    big = 3.3e38  # layer_norm: src - mean, with mean at least length / 10 * 3.3e38 / length
    src = np.zeros(length)
    count = 1 + -(-length // 10)
    src[: count + 1] = [big] * count + [-big]
    return {"src": src}, src[count] - src.mean()


@pytest.mark.parametrize("op", ["log_soft_max_backward", "soft_max_backward", "layer_norm"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("length", [3, 40])
@pytest.mark.parametrize("axis", [-1, 0])
def test_elements_whose_float_math_overflows_are_computed_again_in_double(op, dtype, length, axis):
    """f32 and bf16 data of compute = "wide" ops: each block of elements runs in float first, and
    a block whose results are not all finite runs again in double (LinesKernel.float_elements).
    A line whose math takes an intermediate past f32's range, where the result is finite, among
    ordinary lines: every result finite and within the stated bound, on contiguous lines (short
    ones held in registers, long ones block by block) and across neighbouring lines (axis 0)."""
    spec = ALONG[op]
    line, intermediate = _overflowing_line(op, length)
    with np.errstate(over="ignore"):
        assert np.isinf(np.float32(intermediate)), "the line must overflow in float"
    lines = 20
    generator = rng("overflow", op, dtype, length, axis)
    arrays = {}
    for name, values in line.items():
        data = (
            generator.uniform(-1.0, 0.0, (lines, length))
            if name == "dst"
            else generator.standard_normal((lines, length))
        )
        data[7] = values
        arrays[name] = (data if axis == -1 else data.T).astype(dtype_of(dtype))
    kwargs = {next(a.name for a in spec.attributes if a.type == "int"): axis}
    got = getattr(opgen, op)(**arrays, **kwargs)
    want = getattr(oracle, op)(**arrays, **kwargs)
    bound = getattr(oracle, spec.accuracy[spec.outputs[0].name].removeprefix("oracle:"))(**arrays, **kwargs)
    got, want = (got[0], want[0]) if isinstance(got, tuple) else (got, want)
    assert np.isfinite(got.astype(np.float64)).all() and np.isfinite(want).all()
    bad, _ = accuracy.outside(got, want, TABLE.dtypes[dtype], bound[0])
    assert not bad.any(), f"{np.argwhere(bad)[:3].tolist()}: got {got[bad][:3]}, expected {want[bad][:3]}"


SHORT_LENGTHS = (1, 3, 7, 16, 17, 28, 31, 32, 33, 47, 48, 56, 63, 64, 65)


@pytest.mark.parametrize("case", ROWS, ids=_row_id)
def test_groups_of_short_lines_give_the_bits_of_lines_alone(case):
    """Contiguous lines of up to plan.LINES_SHORT_BLOCKS blocks run LINES_GROUP at a time held in
    registers (along_axes.c.j2: _short, with AVX-512), a line alone through the per-line
    microkernels: each line of 9 (two groups and one left over), edge values among them, has
    the bits it has alone (NaN where it is NaN), at lengths around each count of blocks."""
    op, row = case
    spec = ALONG[op]
    axis_name = next(a.name for a in spec.attributes if a.type == "int")
    function = getattr(opgen, op)
    lines = 2 * plan.LINES_GROUP + 1
    assert max(SHORT_LENGTHS) > plan.LINES_SHORT_BLOCKS * plan.BLOCK
    with threads_set_to(1):  # one thread: whole groups
        for length in SHORT_LENGTHS:
            arrays = _inputs(op, (lines, length), row, -1, "all")
            together = function(**arrays, **{axis_name: -1})
            together = together if isinstance(together, tuple) else (together,)
            for line in range(lines):
                # a line's elements and its per-line inputs (kind line); along inputs whole
                alone = function(
                    **{n: a if spec.tensor(n).kind == "along" else a[line : line + 1] for n, a in arrays.items()},
                    **{axis_name: -1},
                )
                alone = alone if isinstance(alone, tuple) else (alone,)
                for tensor, group_values, line_values in zip(spec.outputs, together, alone):
                    if tensor.kind == "along":  # sums across lines: of every line, not one
                        continue
                    # the same bits, or NaN in both (x86 gives a NaN of either sign as the
                    # operands of an addition come)
                    got, want = group_values[line : line + 1], line_values
                    bits = f"u{got.itemsize}"
                    nan = np.isnan(want.astype(np.float32))
                    assert np.array_equal(np.isnan(got.astype(np.float32)), nan), f"{op} {row} {length}: {line}"
                    assert np.array_equal(got[~nan].view(bits), want[~nan].view(bits)), (
                        f"{op} {row} length {length}: line {line} of {tensor.name}"
                    )


@pytest.mark.parametrize("case", ROWS, ids=_row_id)
def test_wide_tiles_of_streamed_calls_give_the_bits_of_single_tiles(case):
    """Lines across the last axis (the columns path) of a streamed call go in wide tiles, several
    tiles of neighbouring lines a step (plan.LINES_WIDE_TILES); stored calls take one tile at a
    time. Every output gives the same bits either way, on threads that share out the tiles:
    inner sizes of whole and partial groups of tiles, and a last partial tile."""
    op, row = case
    spec = ALONG[op]
    lib = opgen.bundled.module.lib
    lanes = plan.LINES_COLUMN_BLOCKS * plan.BLOCK
    for shape, axis in [((3, 7, 9 * lanes + 5), 1), ((2, 4 * lanes), 0), ((5, 6, 2 * lanes), 1)]:
        arrays = _inputs(op, shape, row, axis, "finite")
        kwargs = {next(a.name for a in spec.attributes if a.type == "int"): axis}
        results = []
        try:
            for threshold in (1, 1 << 40):  # every call streamed, then none
                lib.opgen_set_stream_threshold(threshold)
                with threads_set_to(2):
                    got = getattr(opgen, op)(**arrays, **kwargs)
                results.append(got if isinstance(got, tuple) else (got,))
        finally:
            lib.opgen_set_stream_threshold(0)
        for tensor, wide, single in zip(spec.outputs, *results, strict=True):
            if wide is None:
                continue
            bits = f"u{wide.itemsize}"
            assert np.array_equal(wide.view(bits), single.view(bits)), f"{op} {row} {shape} axis {axis}: {tensor.name}"


@pytest.mark.parametrize("shape, axis", [((64, 4099), 1), ((97, 3001), 0), ((8, 300, 257), 1)])
def test_the_same_bits_on_any_thread_count(shape, axis):
    """Each line is computed by one thread in a fixed order: sums do not depend on the threads."""
    x = rng("threads", shape).standard_normal(shape).astype(np.float32)
    with threads_set_to(1):
        one = opgen.soft_max(x, axis=axis)
    with threads_set_to(2):
        two = opgen.soft_max(x, axis=axis)
    assert np.array_equal(one.view(np.uint32), two.view(np.uint32))


def test_bad_axes_and_types_are_refused_with_their_rule():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"soft_max\(\): axis: 2 is not an axis of src \(rank 2\).*-2\.\.1"):
        opgen.soft_max(x, axis=2)
    with pytest.raises(ValueError, match=r"axis: -3 is not an axis"):
        opgen.soft_max(x, axis=-3)
    with pytest.raises(TypeError, match=r"axis: must be an integer"):
        opgen.soft_max(x, axis=1.0)
    with pytest.raises(TypeError, match=r"axis: must be an integer"):
        opgen.soft_max(x, axis=True)
    with pytest.raises(ValueError, match=r"src: must have at least 1 dims"):
        opgen.soft_max(np.array(1.0, np.float32), axis=0)
    assert opgen.soft_max(x, axis=np.int64(-1)).shape == (2, 3)


def test_the_c_api_checks_the_axis_against_the_rank():
    """The C op API (through the module's cffi bindings) refuses an axis outside the rank with
    OPGEN_INVALID_ATTRIBUTE and a message naming the attribute."""
    library = opgen.default_library() if hasattr(opgen, "default_library") else None
    module = getattr(library, "module", None) if library is not None else None
    if module is None:
        from opgen import runtime

        module = runtime.OpLibrary(BUNDLED_SPECS, ops=["soft_max"]).module
    ffi, lib = module.ffi, module.lib
    data = ffi.new("float[]", 6)
    out = ffi.new("float[]", 6)
    tensors = []
    for pointer in (data, out):
        tensor = ffi.new("opgen_tensor *")
        tensor.data, tensor.dtype, tensor.rank = pointer, lib.OPGEN_F32, 2
        tensor.dims[0], tensor.dims[1] = 2, 3
        tensors.append(tensor)
    assert lib.opgen_soft_max(tensors[0], tensors[1], 1) == lib.OPGEN_SUCCESS
    assert lib.opgen_soft_max(tensors[0], tensors[1], 2) == lib.OPGEN_INVALID_ATTRIBUTE
    message = ffi.string(lib.opgen_last_error()).decode()
    assert "axis" in message and "rank 2" in message, message
    assert lib.opgen_soft_max(tensors[0], tensors[1], -3) == lib.OPGEN_INVALID_ATTRIBUTE


SPEC = """\
[op]
name = "line_op"
summary = "A user's along_axes op."
source = "a test"
pattern = "along_axes"
min_rank = 1

[[attributes]]
name = "axis"
type = "int"
default = -1
role = "axis"
doc = "The axis."

[[inputs]]
name = "src"
doc = "Input."

[[outputs]]
name = "dst"
doc = "Output."

[[dtypes]]
src = "f32"
dst = "f32"

[math.line]
max_src = "line_max(src)"
sum_exp = "line_sum(exp(src - max_src))"

[math.elements]
dst = "exp(src - max_src) / sum_exp"

[accuracy]
dst = "oracle:soft_max_bounds"
"""


def _spec_dir(tmp_path: Path, text: str) -> Path:
    directory = tmp_path / "specs"
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(BUNDLED_SPECS / "dtypes.toml", directory)
    (directory / "line_op.toml").write_text(text)
    return directory


@pytest.mark.parametrize(
    "change, key, rule",
    [
        (('role = "axis"', 'role = "layout"'), "attributes.axis.role", "roles are"),
        (('role = "axis"\n', ""), "attributes.axis.role", "an int attribute names axes"),
        (('type = "int"', 'type = "f32"'), "attributes.axis.role", "roles are"),
        (
            ('sum_exp = "line_sum(exp(src - max_src))"', 'sum_exp = "1 + line_sum(exp(src - max_src))"'),
            "math.line.sum_exp",
            "whole entry of math.line",
        ),
        (
            ('sum_exp = "line_sum(exp(src - max_src))"', 'sum_exp = "exp(src - max_src)"'),
            "math.line.sum_exp",
            "an element is read inside a reduction",
        ),
        (
            ('dst = "exp(src - max_src) / sum_exp"', 'dst = "exp(src - line_max(src))"'),
            "math.elements.dst",
            "whole entry of math.line",
        ),
        (('max_src = "line_max(src)"', 'max_src = "line_max(src, src)"'), "math.line.max_src", "1 positional"),
        (('max_src = "line_max(src)"', 'max_src = "line_max(sum_exp)"'), "math.line.max_src", "unknown name 'sum_exp'"),
        (("min_rank = 1", "min_rank = 0"), "op.min_rank", "at least 1 dim"),
        (
            ('[[outputs]]\nname = "dst"', '[[outputs]]\nname = "dst"\nkind = "along"'),
            "math.across",
            "'dst' is not defined here",
        ),
        (
            ('[[outputs]]\nname = "dst"', '[[outputs]]\nname = "dst"\nkind = "channel"'),
            "outputs.dst.kind",
            "not one of",
        ),
        (
            ('sum_exp = "line_sum(exp(src - max_src))"', 'sum_exp = "across_sum(exp(src - max_src))"'),
            "math.line.sum_exp",
            "goes in math.across",
        ),
        (('pattern = "along_axes"', 'pattern = "elementwise"'), "math.line", "unknown key"),
    ],
)
def test_spec_mistakes_name_their_key_and_rule(tmp_path, change, key, rule):
    old, new = change
    assert old in SPEC
    directory = _spec_dir(tmp_path, SPEC.replace(old, new, 1))
    with pytest.raises(SpecError) as raised:
        load_specs(directory)
    message = str(raised.value)
    assert f"line_op.toml: {key}" in message and rule in message, message


def test_a_users_along_axes_op_builds_and_checks(tmp_path):
    """A user's spec of the pattern builds and passes opgen check; the same op with its result
    scaled by 1.0001 fails it (the bound can fail)."""

    for text, passes in ((SPEC, True), (SPEC.replace("/ sum_exp", "/ sum_exp * 1.0001"), False)):
        directory = _spec_dir(tmp_path / ("good" if passes else "bad"), text)
        (directory.parent / "oracle.py").write_text(
            "from opgen.oracle import soft_max, soft_max_bounds\n\n"
            "def line_op(src, *, axis=-1):\n    return soft_max(src, axis=axis)\n"
        )
        results = check.run(directory, None, directory.parent / "oracle.py", seed=5)
        report = check.report(results)
        assert all(r.failure is None for r in results) == passes, report
        assert re.search(r"\d+ passed", report)


@pytest.mark.parametrize(
    "elements, float_first",
    [
        ("exp(src - max_src) / sum_exp", False),  # a quotient by a line value: Inf there gives 0
        ("exp(src - max_src) * sum_exp - abs(src) / 3", True),
        ("src if src > max_src else sum_exp", False),  # a selection may drop an Inf
        ("min(src, sum_exp) * 2", False),
    ],
)
def test_elements_run_in_float_first_only_where_math_carries_an_infinity(tmp_path, elements, float_first):
    """A user's op with compute = "wide" computes its f32 elements in float first only where an
    intermediate that leaves float's range reaches the results (lines._carries), which the
    kernel checks block by block; other math runs in double."""
    text = SPEC.replace("min_rank = 1", 'min_rank = 1\ncompute = "wide"').replace(
        'dst = "exp(src - max_src) / sum_exp"', f'dst = "{elements}"'
    )
    table, specs = load_specs(_spec_dir(tmp_path, text))
    spec = next(s for s in specs if s.name == "line_op")
    kernel = lines.kernel(spec, "line_op_f32", spec.dtypes[0], {}, table)
    assert kernel.compute == "double"
    assert bool(kernel.float_elements) == float_first
    for spec in (s for s in SPECS if s.compute == "wide" and s.pattern == "along_axes"):
        bundled = lines.kernel(spec, spec.name, spec.dtypes[0], {}, TABLE)
        assert bundled.float_elements or not any(t.kind == "tensor" for t in spec.outputs), spec.name


TOTALS = """\
[op]
name = "line_totals"
summary = "A user's op with a line output, an along input and a sum across lines."
source = "a test"
pattern = "along_axes"
min_rank = 1

[[attributes]]
name = "axis"
type = "int"
default = -1
role = "axis"
doc = "The axis."

[[attributes]]
name = "scale"
type = "f32"
default = 1.0
doc = "A factor."

[[inputs]]
name = "src"
doc = "Input."

[[inputs]]
name = "weight"
kind = "along"
optional = true
default = 1.0
doc = "One weight per position along a line."

[[outputs]]
name = "dst"
doc = "src * scale less its line's weighted sum."

[[outputs]]
name = "total"
kind = "line"
doc = "Each line's weighted sum."

[[outputs]]
name = "column"
kind = "along"
doc = "The weighted sums across lines, per position."

[[dtypes]]
src = "f32"
weight = "f32"
dst = "f32"
total = "f32"
column = "f32"

[[dtypes]]
src = "bf16"
weight = "f32"
dst = "bf16"
total = "f32"
column = "f32"

[math.line]
total = "line_sum(src * weight)"

[math.elements]
dst = "src * scale - total"

[math.across]
column = "across_sum(src * weight)"
"""


@pytest.fixture(scope="module")
def totals(tmp_path_factory):
    directory = tmp_path_factory.mktemp("totals") / "specs"
    directory.mkdir()
    shutil.copy(BUNDLED_SPECS / "dtypes.toml", directory)
    (directory / "line_totals.toml").write_text(TOTALS)
    return opgen.load(directory).line_totals


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_line_outputs_along_inputs_and_sums_across_lines(totals, dtype):
    """Each sum against float64 (its terms rounded once to f32, summed in double: within
    2^-23 of the sum of their magnitudes), on every axis, with and without the optional weight."""
    # the last two: several chunks of partial sums (opgen_lines_chunks: 16384 elements or more each)
    for shape in [(5,), (5, 7), (4, 3, 5), (3, 0, 2), (0, 3, 2), (40, 33, 17), (70, 3, 40), (41, 1003), (5, 17000)]:
        for axis in range(-len(shape), len(shape)):
            generator = rng("totals", shape, axis, dtype)
            x = generator.standard_normal(shape).astype(dtype_of(dtype))
            for weight in (generator.standard_normal(shape[axis]).astype(np.float32), None):
                dst, total, column = totals(x, weight, axis=axis, scale=2.0)
                view = [1] * len(shape)
                view[axis] = -1
                terms = x.astype(np.float64) * (1.0 if weight is None else weight.astype(np.float64).reshape(view))
                kept = tuple(d for d in range(len(shape)) if d != axis % len(shape))
                for got, want, magnitude in (
                    (total, terms.sum(axis=axis), np.abs(terms).sum(axis=axis)),
                    (column, terms.sum(axis=kept), np.abs(terms).sum(axis=kept)),
                ):
                    assert got.shape == want.shape and got.dtype == np.float32
                    bad, _ = accuracy.outside(got, want, TABLE.dtypes["f32"], magnitude * 2.0**-23)
                    assert not bad.any(), (shape, axis)
                # dst = x * 2 - total: total rounded to f32, then 2 roundings in float
                want = 2 * x.astype(np.float64) - np.expand_dims(terms.sum(axis=axis), axis)
                allowed = np.expand_dims(np.abs(terms).sum(axis=axis), axis) * 2.0**-22 + np.abs(want) * 2.0**-23
                bad, _ = accuracy.outside(dst, want, TABLE.dtypes[dtype], allowed)
                assert not bad.any(), (shape, axis)


@pytest.mark.parametrize(
    "shape, axis", [((512, 300), 1), ((64, 300, 40), 1), ((3000, 7), 0), ((300, 200), 0), ((64, 1024), 1)]
)
def test_sums_across_lines_are_the_same_on_any_thread_count(totals, shape, axis):
    x = rng("across threads", shape).standard_normal(shape).astype(np.float32)
    weight = rng("weights", shape).standard_normal(shape[axis]).astype(np.float32)
    with threads_set_to(1):
        one = totals(x, weight, axis=axis)
    with threads_set_to(2):
        two = totals(x, weight, axis=axis)
    for a, b in zip(one, two):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_the_comparison_with_pytorch_checks_and_times_each_op():
    """`opgen bench --compare torch`: each op agrees with PyTorch's before it is timed, and a
    wrong op is reported as a mismatch, not timed."""
    pytest.importorskip("torch")
    from opgen import bench_lines

    cells = bench_lines.run(["S"], [1], list(bench_lines.OPS), rounds=1, min_time=0.01)
    assert [c["status"] for c in cells] == ["timed"] * len(bench_lines.OPS), cells
    assert all(c["opgen_us"] > 0 and c["torch_us"] > 0 for c in cells)
    assert "opgen ÷ torch" in bench_lines.table(cells)
    original = opgen.soft_max
    try:
        opgen.soft_max = lambda src, axis: original(src, axis=axis) * 1.01  # type: ignore[assignment]
        (cell,) = bench_lines.run(["S"], [1], ["soft_max"], rounds=1, min_time=0.01)
    finally:
        opgen.soft_max = original
    assert cell["status"] == "mismatch"


def test_the_comparison_with_pytorch_writes_json_when_asked(tmp_path, capsys):
    """`opgen bench --compare torch --json F` writes the cells it printed, with where they ran;
    --plot, which it cannot draw, is refused rather than ignored."""
    pytest.importorskip("torch")
    import json

    from opgen import cli

    path = tmp_path / "torch.json"
    argv = ["bench", "--compare", "torch", "--sizes", "S", "--threads", "1", "--ops", "soft_max,add@row"]
    assert cli.main([*argv, "--rounds", "1", "--min-time", "0.01", "--json", str(path)]) == 0
    report = json.loads(path.read_text())
    assert [(c["op"], c["size"], c["threads"], c["status"]) for c in report["cells"]] == [
        ("soft_max", "S", 1, "timed"),
        ("add@row", "S", 1, "timed"),
    ]
    assert all(c["ratio"] == pytest.approx(c["opgen_us"] / c["torch_us"]) for c in report["cells"])
    assert report["sizes"] == {"S": [64, 1024]} and report["rounds"] == 1
    assert report["machine"]["torch"] and report["machine"]["cpus"]
    assert f"wrote {path}" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--plot is not available"):
        cli.main([*argv, "--plot", str(tmp_path / "torch.png")])
