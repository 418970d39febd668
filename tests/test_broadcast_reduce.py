"""PReLU-style ops (pattern broadcast_reduce): every dtype x layout x broadcast form x shape.

Shapes include ranks 1-5, sizes around the unroll block, primes, empty tensors, and a channel
count equal to another dimension (a channel-axis mix-up gives wrong numbers there).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import opgen
from opgen import oracle
from opgen.accuracy import operand_shapes, sum_magnitudes
from opgen.plan import BLOCK, CHAINS, CHANNEL_SPLIT, IN_ORDER_CHANNELS, REPEAT_INNER, SEGMENT_BYTES, STREAM_BYTES
from tests.helpers import (
    assert_ulps,
    assert_within,
    data,
    dtype_of,
    guarded_empty,
    misaligned_empty,
    rng,
    stated_bound,
    threads_set_to,
    untouched_around,
)

SPECS = [s for s in opgen.bundled.specs if s.pattern == "broadcast_reduce"]
SPEC_PRELU = next(s for s in SPECS if s.name == "prelu_backward")


def prelu_row(dtype: str) -> dict[str, str]:
    """prelu_backward's dtype combination whose src is `dtype`."""
    return next(row for row in SPEC_PRELU.dtypes if row["src"] == dtype)


def assert_prelu_near_oracle(got, src, slope, diff_dst, layout, dtype, what):
    """PReLU's outputs `got` against the oracle: diff_src within 1 ulp, diff_slope within the
    stated bound of its sums (src.size // slope.size terms each)."""
    expected = oracle.prelu_backward(src, slope, diff_dst, data_format=layout)
    assert_ulps(got[0], expected[0], dtype, 1, f"{what} diff_src")
    arrays, kwargs = {"src": src, "slope": slope, "diff_dst": diff_dst}, {"data_format": layout}
    abs_sum = sum_magnitudes(SPEC_PRELU, oracle.prelu_backward, arrays, kwargs)[1]
    bound = stated_bound(SPEC_PRELU, prelu_row(dtype), "diff_slope", abs_sum, src.size // slope.size)
    assert_within(got[1], expected[1], dtype, bound, f"{what} diff_slope")


def prelu_on_threads(counts, src, slope, diff_dst, layout):
    """PReLU's outputs on each thread count of `counts`, which must give the same bits: the
    first count's."""
    results = []
    for count in counts:
        with threads_set_to(count):
            results.append(opgen.prelu_backward(src, slope, diff_dst, data_format=layout))
    for count, other in zip(counts[1:], results[1:]):
        for first, again in zip(results[0], other):
            assert np.array_equal(first.view(np.uint8), again.view(np.uint8)), f"{count} threads changed bits"
    return results[0]


B = BLOCK
SHAPES = [
    (5,),
    (1,),
    (3, 4),
    (4, 4),
    (2, 3, 5),
    (2, 3, 3),
    (2, 3, 4, 3),
    (2, 4, 4, 3),
    (2, 3, 4, 5, 3),
    (1, 1, 1, 1),
    (2, 3, B + 1),
    (2, 5, B),
    (1, 2, 2 * B + 1),
    (3, B - 1, 2),
    (2, 7, 97),  # NCX: the ncx loop (rows too few for repeated channels, plan.REPEAT_MIN_ROWS)
    (2, 3, REPEAT_INNER + 1),  # NCX: the ncx loop
    (2, 3, 4133),  # NCX: several float runs per unit (plan.FLOAT_RUN)
    (6, 40000),  # NXC: too few rows for its tiles, so ranges of channels (opgen_split_channels)
    (4, 3, 1, 1),
    (0, 3, 4),
    (2, 3, 0),
    (3, 2, 2, 3, 2),
]


def cases():
    for spec in SPECS:
        operand = next(t for t in spec.inputs if t.kind == "channel")
        for row in spec.dtypes:
            for layout in spec.layouts:
                for form in operand.broadcast:
                    yield pytest.param(spec, row, layout, form, id=f"{spec.name}-{row[spec.reference]}-{layout}-{form}")


def layout_kwargs(spec, layout):
    attribute = spec.layout_attribute
    return {attribute.name: layout} if attribute else {}


@pytest.mark.parametrize("spec,row,layout,form", list(cases()))
@pytest.mark.parametrize("specials", ["finite", "all"])
def test_matches_oracle(spec, row, layout, form, specials):
    tested = 0
    for shape in SHAPES:
        for operand_shape in operand_shapes(form, shape, layout):
            if len(operand_shape) > (spec.max_rank or 8):
                continue
            check_shape(spec, row, layout, form, specials, shape, operand_shape)
            tested += 1
    assert tested >= 3, f"only {tested} shapes exercised form {form}"


def check_shape(spec, row, layout, form, specials, shape, operand_shape):
    """Both outputs against the oracle on fresh data of `shape` (the operand `operand_shape`)."""
    function, reference = getattr(opgen, spec.name), getattr(oracle, spec.name)
    operand = next(t for t in spec.inputs if t.kind == "channel")
    tensor_out, channel_out = spec.outputs
    generator = rng(spec.name, row, layout, form, specials, shape, operand_shape)
    arrays = {}
    for tensor in spec.inputs:
        shape_of = operand_shape if tensor is operand else shape
        arrays[tensor.name] = data(generator, shape_of, row[tensor.name], specials=specials)
    args = [arrays[t.name] for t in spec.inputs]
    kwargs = layout_kwargs(spec, layout)
    got = function(*args, **kwargs)
    expected = reference(*args, **kwargs)
    context = f"{spec.name} {shape} {operand.name}{operand_shape} {layout} {form}"
    assert_ulps(got[0], expected[0], row[tensor_out.name], 1, context + f" {tensor_out.name}")
    abs_sum = sum_magnitudes(spec, reference, arrays, kwargs)[1]
    count = math.prod(shape) // max(1, math.prod(operand_shape))
    bound = stated_bound(spec, row, channel_out.name, abs_sum, count)
    assert_within(got[1], expected[1], row[channel_out.name], bound, context + f" {channel_out.name}")


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("specials", ["finite", "all"])
def test_ncx_tails_of_every_length(dtype, specials):
    """Units of the ncx loop ending in every tail length: element by element below
    plan.TAIL_BLOCK_MIN, one masked block from it; in units summed in one chain of lanes
    (fewer than CHAINS blocks) and in CHAINS chains."""
    for blocks in (1, CHAINS + 1):
        for tail in range(1, B):
            shape = (2, 3, blocks * B + tail)
            check_shape(SPEC_PRELU, prelu_row(dtype), "NCX", "per_channel", specials, shape, (3,))


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_broadcast_other_tensor(spec):
    """A tensor input marked `to_reference` may broadcast to the reference's shape."""
    broadcasting = [t for t in spec.inputs if "to_reference" in t.broadcast]
    if not broadcasting:
        pytest.skip("no broadcasting tensor input")
    operand = next(t for t in spec.inputs if t.kind == "channel")
    row = spec.dtypes[0]
    shape = (2, 3, 4, 5)
    function, reference = getattr(opgen, spec.name), getattr(oracle, spec.name)
    for small in [(5,), (4, 1), (1, 3, 1, 1), (2, 1, 4, 5), ()]:
        generator = rng(spec.name, "broadcast", small)
        arrays = {t.name: data(generator, shape, row[t.name]) for t in spec.inputs}
        arrays[operand.name] = data(generator, (3,), row[operand.name])
        arrays[broadcasting[0].name] = data(generator, small, row[broadcasting[0].name])
        args = [arrays[t.name] for t in spec.inputs]
        got, expected = function(*args), reference(*args)
        assert_ulps(got[0], expected[0], row[spec.outputs[0].name], 1, f"{spec.name} broadcast {small}")
        abs_sum = sum_magnitudes(spec, reference, arrays, {})[1]
        bound = stated_bound(spec, row, spec.outputs[1].name, abs_sum, math.prod(shape) // 3)
        assert_within(got[1], expected[1], row[spec.outputs[1].name], bound, f"{spec.name} broadcast {small}")


def test_channel_axis_mixup_is_caught():
    """With C equal to the last dim, NCX and NXC give different answers, and each matches its oracle."""
    generator = rng("mixup")
    src = data(generator, (2, 3, 4, 3), "f32", specials="none")
    diff_dst = data(generator, (2, 3, 4, 3), "f32", specials="none")
    slope = np.array([0.1, 0.5, 2.0], np.float32)
    ncx = opgen.prelu_backward(src, slope, diff_dst, data_format="NCX")
    nxc = opgen.prelu_backward(src, slope, diff_dst, data_format="NXC")
    assert not np.array_equal(ncx.diff_slope, nxc.diff_slope)
    for layout, got in (("NCX", ncx), ("NXC", nxc)):
        expected = oracle.prelu_backward(src, slope, diff_dst, data_format=layout)
        assert_ulps(got.diff_src, expected[0], "f32", 1, layout)


@pytest.mark.parametrize(
    "layout, shape, places",
    [
        # runs of whole blocks, and tails, in the ncx loop (see plan.REPEAT_INNER): each pair in
        # one float run, a unit's first 1024 elements
        ("NCX", (2, 3, REPEAT_INNER + 44), [(0, 2, 5), (0, 2, 69), (1, 0, 100), (1, 0, 164)]),
        # units of three blocks or fewer, summed in one chain of lanes: each pair in one unit
        ("NCX", (2, 3, 49), [(0, 2, 5), (0, 2, 21), (1, 0, 10), (1, 0, 33)]),
        # a group of 4 rows
        ("NXC", (8, 20), [(0, 2), (1, 2), (4, 5), (6, 5)]),
    ],
    ids=["NCX", "NCX short units", "NXC"],
)
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_float_runs_that_overflow_are_summed_again(dtype, layout, shape, places):
    """bf16 slope-gradient terms (src * diff_dst) are added in f32 runs: products past f32's
    range overflow there, so such a run is summed again in double. Cancelling pairs of huge
    terms must give the double sum, not Inf or NaN (the other dtypes must agree too)."""
    generator = rng("overflowing runs", dtype, layout, shape)
    src = data(generator, shape, dtype, specials="none")
    diff_dst = data(generator, shape, dtype, specials="none")
    slope = data(generator, (shape[1] if layout == "NCX" else shape[-1],), dtype)
    huge = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max) / 2 if dtype == "bf16" else 1.0
    # -huge * 4 and -huge * -4 cancel exactly; -huge * 3 and -huge/2 * -4 leave -huge
    for at, big, gradient in zip(places, (huge, huge, huge, huge / 2), (4.0, -4.0, 3.0, -4.0)):
        src[at], diff_dst[at] = -big, gradient
    got = opgen.prelu_backward(src, slope, diff_dst, data_format=layout)
    expected = oracle.prelu_backward(src, slope, diff_dst, data_format=layout)
    assert np.isfinite(expected[1]).all(), "the test data should give finite sums"
    assert_ulps(got[0], expected[0], dtype, 1, f"{dtype} {layout} diff_src")
    arrays, kwargs = {"src": src, "slope": slope, "diff_dst": diff_dst}, {"data_format": layout}
    abs_sum = sum_magnitudes(SPEC_PRELU, oracle.prelu_backward, arrays, kwargs)[1]
    count = src.size // slope.size
    bound = stated_bound(SPEC_PRELU, prelu_row(dtype), "diff_slope", abs_sum, count)
    assert_within(got[1], expected[1], dtype, bound, f"{dtype} {layout} diff_slope")


@pytest.mark.slow
@pytest.mark.parametrize(
    "shape",
    [
        (19, 2 * CHANNEL_SPLIT + 37),  # more rows than one float run, an odd number; a channel tail
        (70, SEGMENT_BYTES // 4 + 37),  # rows enough for tiles, but longer than a segment of any sum type
        (150, IN_ORDER_CHANNELS + 37),  # one tile, not streamed: f16 and bf16 rows in memory order
    ],
    ids=["few rows", "rows past a segment", "rows in order"],
)
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_rows_of_many_channels(dtype, shape):
    """Few rows of very many channels (a full-size PReLU slope), and rows longer than the tiled
    loop takes whole (plan.SEGMENT_BYTES of sums), take the kernels' channel-range path:
    ranges cut per thread count, float runs of rows; 16-bit rows of plan.IN_ORDER_CHANNELS or
    more go through the tiled loop in memory order (f32 ones block by block down 16 rows).
    Matches the oracle, gives the same bits
    on 1 and 2 threads and for inputs on or past a cache line (single channels up to the line,
    then blocks: which channels share a block moves with the address), and sums an
    overflowing bf16 channel again in double: in a block, in the channels before the line
    (inputs 16 bytes past one) and in the tail."""
    generator = rng("many channels", dtype, shape)
    numpy_dtype = dtype_of(dtype)
    src = data(generator, shape, dtype)
    diff_dst = data(generator, shape, dtype)
    slope = data(generator, shape[-1:], dtype)
    if dtype == "bf16":
        huge = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max) / 2
        for at in (40, 5, shape[-1] - 2):
            src[3, at], diff_dst[3, at], src[9, at], diff_dst[9, at] = -huge, 4.0, -huge, -4.0
            # its neighbour: terms 1, 2^-8, 2^-24, 2^-24, whose sum is 1 in bf16 when summed
            # in float (each 2^-24 ties to even and is lost, then 1 + 2^-8 ties to 1) and
            # 1 + 2^-7 when summed in double: a channel summed the other way shows
            src[:, at + 1] = np.abs(src[:, at + 1]) + 1
            src[2:6, at + 1] = -1.0, -1.0, -(2.0**-12), -(2.0**-12)
            diff_dst[2:6, at + 1] = -1.0, -(2.0**-8), -(2.0**-12), -(2.0**-12)
    with threads_set_to(1):
        one = opgen.prelu_backward(src, slope, diff_dst, data_format="NXC")
    with threads_set_to(2):
        two = opgen.prelu_backward(src, slope, diff_dst, data_format="NXC")
    for got_one, got_two in zip(one, two):
        assert np.array_equal(got_one.view(np.uint8), got_two.view(np.uint8)), "threads changed bits"
    for offset in (0, 16, 2 * numpy_dtype.itemsize):  # inputs on a cache line, or past one
        moved = []
        for array in (src, slope, diff_dst):
            moved.append(misaligned_empty(array.shape, numpy_dtype, offset))
            moved[-1][...] = array
        for got, got_moved in zip(one, opgen.prelu_backward(*moved, data_format="NXC")):
            assert np.array_equal(got.view(np.uint8), got_moved.view(np.uint8)), f"inputs {offset} bytes past a line"
    assert_prelu_near_oracle(one, src, slope, diff_dst, "NXC", dtype, dtype)


@pytest.mark.parametrize("shape", [(3, 5, CHANNEL_SPLIT + 37), (3, 40, 67)])
@pytest.mark.parametrize("layout", ["NXC", "NCX"])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_sums_over_several_kernel_calls(dtype, layout, shape):
    """A slope that keeps a leading dim the kernel does not cover (one kernel call per index
    there, each adding to double sums the call zeroes and rounds after) gives the bits of
    separate calls on each index, where the kernel rounds its sums into the output itself:
    through the channel-range path (few rows of many channels) and the tiled one."""
    generator = rng("several kernel calls", dtype, layout, shape)
    src, diff_dst = data(generator, shape, dtype), data(generator, shape, dtype)
    slope = data(generator, (shape[0], 1, shape[2]), dtype)
    for count in (1, 2):
        with threads_set_to(count):
            whole = opgen.prelu_backward(src, slope, diff_dst, data_format=layout)
            for index in range(shape[0]):
                part = opgen.prelu_backward(src[index], slope[index], diff_dst[index], data_format=layout)
                for name, got, alone in zip(("diff_src", "diff_slope"), whole, part):
                    message = f"{count} threads, index {index}: {name} differs from its own call"
                    assert np.array_equal(got[index].view(np.uint8), alone.view(np.uint8)), message
    assert_prelu_near_oracle(whole, src, slope, diff_dst, layout, dtype, f"{dtype} {layout}")


@pytest.mark.parametrize(
    "shape",
    [(4099, 3), (2, 8, 9, 12), (16 * 1500 + 7, 1), (3001, 24), (50, 63), (40000, 5), (1003, 100), (15, 3)],
    ids=["3", "12", "1", "24", "63", "several tiles", "100", "too few rows"],
)
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_rows_of_few_channels(dtype, shape):
    """NXC rows of C channels, not a whole number of blocks, run BLOCK / gcd(C, BLOCK) rows at
    a time as one row of lcm(C, BLOCK) channels, at most plan.TILED_CHANNELS (the slope tiled,
    each channel's sums folded back), the rows left over as they are (15 rows of 3: all of
    them): the same bits on 1 and 2 threads, diff_src within 1 ulp of the oracle and
    diff_slope within the stated bound of its sums."""
    generator = rng("few channels", dtype, shape)
    src, diff_dst = data(generator, shape, dtype), data(generator, shape, dtype)
    slope = data(generator, shape[-1:], dtype)
    got = prelu_on_threads((1, 2), src, slope, diff_dst, "NXC")
    assert_prelu_near_oracle(got, src, slope, diff_dst, "NXC", dtype, f"{dtype} {shape}")


@pytest.mark.parametrize("shape", [(8, 3, 56 * 56), (4, 24, 1000), (2, 40, 777)], ids=["3", "24", "40"])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_one_tile_of_few_channels_on_threads(dtype, shape):
    """NCX tensors of one tile of units on two threads cut its channels in two parts (whole
    blocks where each part gets one, else evenly): the same bits on 1, 2 and 3 threads,
    within the oracle's bounds."""
    generator = rng("one tile", dtype, shape)
    src, diff_dst = data(generator, shape, dtype), data(generator, shape, dtype)
    slope = data(generator, shape[1:2], dtype)
    got = prelu_on_threads((1, 2, 3), src, slope, diff_dst, "NCX")
    assert_prelu_near_oracle(got, src, slope, diff_dst, "NCX", dtype, f"{dtype} {shape}")


@pytest.mark.slow
@pytest.mark.parametrize("channels", [300, 17, 520, 113])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_nxc_tensors_past_the_caches(dtype, channels):
    """NXC tensors bigger than plan.STREAM_BYTES run rows in memory order with streamed stores
    (whole rows, a tail past the last whole block when there are 300 channels; rows of 17
    tiled, 16 as one of 272 channels; tails of 8 and 1 streamed with the blocks
    (opgen_store_part_*) at 520 and 113, too long to tile, except 16-bit rows of 113, not on
    4-byte boundaries, which are not streamed), f32 ones
    through a line writer where the rows have no tail. Outputs 16 bytes past a
    cache line, and one element, give the bits of freshly allocated ones on 1 and 2 threads,
    write nothing next to themselves, and match the oracle; an overflowing bf16 group is
    summed again in double."""
    generator = rng("past the caches", dtype, channels)
    numpy_dtype = dtype_of(dtype)
    shape = (STREAM_BYTES // (numpy_dtype.itemsize * channels) + 3, channels)
    src = data(generator, shape, dtype)
    diff_dst = data(generator, shape, dtype)
    slope = data(generator, shape[-1:], dtype)
    if dtype == "bf16":
        huge = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max) / 2
        at = 40 if channels > 40 else channels - 2  # in a whole block
        src[3, at], diff_dst[3, at], src[9, at], diff_dst[9, at] = -huge, 4.0, -huge, -4.0
    results = []
    for count, step in ((1, None), (2, None), (1, 16 // numpy_dtype.itemsize), (2, 1)):
        out = None
        if step is not None:
            diff_src, raw = guarded_empty(shape, numpy_dtype, step)
            out = (diff_src, np.empty(shape[-1:], numpy_dtype))
        with threads_set_to(count):
            results.append(opgen.prelu_backward(src, slope, diff_dst, data_format="NXC", out=out))
        if step is not None:
            assert untouched_around(diff_src, raw), f"{count} threads, diff_src {step} past a line: wrote around"
    for other in results[1:]:
        for first, again in zip(results[0], other):
            assert np.array_equal(first.view(np.uint8), again.view(np.uint8)), "threads or alignment changed bits"
    assert_prelu_near_oracle(results[0], src, slope, diff_dst, "NXC", dtype, f"{dtype} {shape}")


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(4, 6, 8 * 16384), (3, 5, 200003), (2048, 29, 7, 7)])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_ncx_tensors_past_the_caches(dtype, shape):
    """NCX tensors bigger than plan.STREAM_BYTES stream their stores through their dtype's line
    writer, which carries a run of blocks across rows and tiles (inner dim a multiple of the
    block) or starts one per row (a tail of single elements between); units shorter than
    plan.REPEAT_INNER (7x7), in rows enough, go through the nxc loop as rows of 29 x 49
    repeated channels (16-bit rows of an odd length: not streamed). Outputs 1, 4, 9, 16 and
    31 elements past a cache line (for halves, 16 is half a line: no rotation, but lines
    still paired) give the bits of line-aligned ones on 1 and 2 threads, write nothing next
    to themselves, and match the oracle."""
    generator = rng("ncx past the caches", dtype, shape)
    numpy_dtype = dtype_of(dtype)
    assert math.prod(shape) * numpy_dtype.itemsize * 3 > STREAM_BYTES
    src, diff_dst = data(generator, shape, dtype), data(generator, shape, dtype)
    slope = data(generator, shape[1:2], dtype)
    results = []
    steps = ((1, 0), (2, 0), (1, 1), (2, 4), (1, 9), (2, 9), (1, 16), (2, 31))
    for count, step in steps:
        diff_src, raw = guarded_empty(shape, numpy_dtype, step)
        with threads_set_to(count):
            out = (diff_src, np.empty(shape[1:2], numpy_dtype))
            got = opgen.prelu_backward(src, slope, diff_dst, data_format="NCX", out=out)
        assert untouched_around(diff_src, raw), f"{count} threads, diff_src {step} elements past a line: wrote around"
        results.append(got)
    for (count, step), other in zip(steps[1:], results[1:]):
        for first, again in zip(results[0], other):
            assert np.array_equal(first.view(np.uint8), again.view(np.uint8)), f"{count} threads, step {step}: new bits"
    assert_prelu_near_oracle(results[0], src, slope, diff_dst, "NCX", dtype, f"{dtype} {shape}")
