"""BatchNorm training backward (pattern reduce_then_apply) against the oracle, within the bounds
derived in opgen.oracle.batch_norm_training_backward_bounds (the spec's accuracy contract)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import opgen
from opgen import oracle, plan
from opgen.plan import BLOCK
from opgen.shapes import channel_axis
from tests.helpers import assert_within, data, dtype_of, rng, threads_set_to

SPEC = next(s for s in opgen.bundled.specs if s.name == "batch_norm_training_backward")
B = BLOCK
# An NCX unit (spatial size) with more blocks than one float run takes per chain: the ncx loop
# cuts it into runs, one unit per run (shorter units share a run with the next rows' units);
# here a whole run, one block more and a tail.
LONG_UNIT = plan.FLOAT_RUN * plan.CHAINS * B + B + 3
SHAPES = [
    (3, 4),
    (1, 1),
    (4, 4),
    (2, 3, 5),
    (2, 3, 3),
    (2, 3, 4, 3),
    (2, 4, 4, 3),
    (2, 3, 2, 2, 3),
    (2, 3, B + 1),
    (1, 5, B),
    (2, 3, 2 * B + 1),
    (B - 1, 2),
    (2, 5, 7, 11),
    (3, 2, 1, 1),
    (0, 3, 4),
    (2, 3, 0),
    (2, 0, 3),
    (64, 3),
    (4096, 4, 9),  # NCX: a short inner dim in the nxc loop, several tiles of rows
    (2, 3, plan.REPEAT_INNER + 1),  # NCX: the ncx loop (whole channels per thread), a tail
    (2, 3, 17, 19),  # NCX: the ncx loop over a 2-D inner dim
    (2, 701, 50),  # NCX: the ncx loop (few rows, in cache), many channels
    (6, 40000),  # NXC: too few rows for its tiles, so ranges of channels (opgen_split_channels)
]


def bounds(src, diff_dst, mean, variance, gamma, epsilon, layout):
    names = opgen.bundled.dtype_names
    row = next(r for r in SPEC.dtypes if r["src"] == names[src.dtype] and r["mean"] == names[mean.dtype])
    run = max(plan.float_runs(SPEC, row, opgen.bundled.table).values(), default=0)
    return oracle.batch_norm_training_backward_bounds(
        src,
        diff_dst,
        mean,
        variance,
        gamma,
        epsilon=epsilon,
        data_format=layout,
        with_diff_gamma_beta=True,
        float_run=run,
    )


def cases():
    for row in SPEC.dtypes:
        for layout in SPEC.layouts:
            for gamma in (True, False):
                for with_diff in (True, False, None):
                    yield pytest.param(
                        row,
                        layout,
                        gamma,
                        with_diff,
                        id=f"{row['src']}-{row['mean']}-{layout}-gamma{gamma}-diff{with_diff}",
                    )


@pytest.mark.parametrize("row,layout,with_gamma,with_diff", list(cases()))
@pytest.mark.parametrize("epsilon", [1e-5, 0.5])
def test_matches_oracle(row, layout, with_gamma, with_diff, epsilon):
    for shape in SHAPES:
        check_shape(row, layout, with_gamma, with_diff, epsilon, shape)


@pytest.mark.parametrize("row", SPEC.dtypes, ids=lambda r: f"{r['src']}-{r['mean']}")
def test_ncx_tails_of_every_length(row):
    """Units of the ncx loop ending in every tail length (16-bit data: element by element below
    plan.TAIL_BLOCK_MIN, one masked block from it), in both passes, with finite data and with
    NaN and Inf; units sharing float runs across rows (one block) and units of several chains."""
    for blocks in (1, plan.CHAINS + 1):
        for tail in range(1, B):
            shape = (2, 3, 1, blocks * B + tail)
            check_shape(row, "NCX", True, True, 1e-5, shape)
            check_nonfinite(rng("bn-tails", row, shape), row, "NCX", shape)


def check_shape(row, layout, with_gamma, with_diff, epsilon, shape):
    """The outputs against the oracle on fresh data of `shape`, within the bounds of bounds()."""
    generator = rng("bn", row, layout, with_gamma, with_diff, epsilon, shape)
    channels = shape[channel_axis(len(shape), layout)]
    src = data(generator, shape, row["src"])
    diff_dst = data(generator, shape, row["diff_dst"])
    mean = data(generator, (channels,), row["mean"], specials="none")
    variance = np.abs(data(generator, (channels,), row["variance"]))
    if channels:
        variance[0] = 0  # legal: epsilon keeps inv_std finite
    gamma = data(generator, (channels,), row["gamma"]) if with_gamma else None
    kwargs = {"epsilon": epsilon, "data_format": layout}
    if with_diff is not None:
        kwargs["with_diff_gamma_beta"] = with_diff
    got = opgen.batch_norm_training_backward(src, diff_dst, mean, variance, gamma, **kwargs)
    expected = oracle.batch_norm_training_backward(src, diff_dst, mean, variance, gamma, **kwargs)
    requested = with_gamma if with_diff is None else with_diff
    used_gamma = gamma if requested else None
    src_bound, gamma_bound, beta_bound = bounds(src, diff_dst, mean, variance, used_gamma, epsilon, layout)
    context = f"bn {shape} {layout} {row} gamma={with_gamma} diff={with_diff} eps={epsilon}"
    assert_within(got.diff_src, expected[0], row["diff_src"], src_bound, context + " diff_src")
    if requested:
        assert_within(got.diff_gamma, expected[1], row["diff_gamma"], gamma_bound, context + " diff_gamma")
        assert_within(got.diff_beta, expected[2], row["diff_beta"], beta_bound, context + " diff_beta")
    else:
        assert got.diff_gamma is None and got.diff_beta is None, context


@pytest.mark.parametrize("row", SPEC.dtypes, ids=lambda r: f"{r['src']}-{r['mean']}")
@pytest.mark.parametrize("layout", SPEC.layouts)
def test_nonfinite_inputs_propagate(row, layout):
    """NaN and Inf in src/diff_dst reach the sums of their channel, as in the oracle."""
    # NCX: units shorter than a block (the nxc loop over repeated channels), then the ncx loop
    # with units whose float runs take several rows, and units cut into runs (LONG_UNIT)
    for shape in ((3, 4, 5, 3), (2, 3, 2, plan.REPEAT_INNER // 2 + 3), (2, 3, 1, LONG_UNIT)):
        check_nonfinite(rng("bn-nonfinite", row, layout, shape), row, layout, shape)


def check_nonfinite(generator, row, layout, shape):
    channels = shape[channel_axis(4, layout)]
    src = data(generator, shape, row["src"], specials="all")
    diff_dst = data(generator, shape, row["diff_dst"], specials="all")
    mean = data(generator, (channels,), row["mean"], specials="none")
    variance = np.abs(data(generator, (channels,), row["variance"], specials="none"))
    got = opgen.batch_norm_training_backward(
        src, diff_dst, mean, variance, epsilon=1e-3, data_format=layout, with_diff_gamma_beta=True
    )
    expected = oracle.batch_norm_training_backward(
        src, diff_dst, mean, variance, epsilon=1e-3, data_format=layout, with_diff_gamma_beta=True
    )
    # diff_src is computed in f32 from f32 per-channel values (docs/numerics.md): where the oracle's value
    # lies beyond the output dtype's range, or a channel's values (mean of diff_dst, centered
    # coefficient) lie beyond f32's, steps overflow and may meet (Inf - Inf, 0 * Inf: NaN)
    axis = channel_axis(4, layout)
    per_channel = tuple(d for d in range(4) if d != axis)
    src64, diff64 = src.astype(np.float64), diff_dst.astype(np.float64)
    view = [1, 1, 1, 1]
    view[axis] = channels
    with np.errstate(invalid="ignore", over="ignore"):
        count = src.size // channels
        centered = (diff64 * (src64 - mean.astype(np.float64).reshape(view))).sum(axis=per_channel)
        inv_std = 1 / np.sqrt(variance.astype(np.float64) + np.float64(np.float32(1e-3)))
        values = np.stack([diff64.sum(axis=per_channel) / count, inv_std**2 * centered / count])
        overflowing = (np.abs(values) > float(np.finfo(np.float32).max)).any(axis=0).reshape(view)
        beyond = (np.abs(expected[0]) > float(ml_dtypes.finfo(got[0].dtype).max)) | overflowing
    for index, name in enumerate(("diff_src", "diff_gamma", "diff_beta")):
        got_nan, want_nan = np.isnan(got[index].astype(np.float64)), np.isnan(expected[index])
        allowed = beyond if index == 0 else False
        assert np.array_equal(got_nan & ~allowed, want_nan & ~allowed) and not (want_nan & ~got_nan).any(), name


@pytest.mark.parametrize("layout", SPEC.layouts)
def test_zero_variance_and_tiny_epsilon(layout):
    """Variance 0 with epsilon at the smallest normal f32: a constant channel (src == mean) stays finite."""
    shape = (4, 3, 5) if layout == "NCX" else (4, 5, 3)
    generator = rng("bn-tiny", layout)
    mean = np.array([1.5, -2.0, 0.0], np.float32)
    view = (1, 3, 1) if layout == "NCX" else (1, 1, 3)
    src = np.broadcast_to(mean.reshape(view), shape).astype(np.float32)
    diff_dst = data(generator, shape, "f32", specials="none")
    epsilon = float(np.finfo(np.float32).tiny)
    got = opgen.batch_norm_training_backward(
        src, diff_dst, mean, np.zeros(3, np.float32), epsilon=epsilon, data_format=layout, with_diff_gamma_beta=True
    )
    expected = oracle.batch_norm_training_backward(
        src, diff_dst, mean, np.zeros(3, np.float32), epsilon=epsilon, data_format=layout, with_diff_gamma_beta=True
    )
    assert np.isfinite(got.diff_src).all()
    src_bound, gamma_bound, beta_bound = bounds(src, diff_dst, mean, np.zeros(3), None, epsilon, layout)
    assert_within(got.diff_src, expected[0], "f32", src_bound, "tiny epsilon diff_src")
    assert np.array_equal(got.diff_gamma, np.zeros(3, np.float32))
    assert got.diff_src.dtype == dtype_of("f32")


@pytest.mark.parametrize(
    "layout, shape",
    [
        ("NXC", (2, 3, B + 3)),
        # the ncx loop (see plan.REPEAT_INNER): units whose float runs take several rows, and
        # units cut into runs (LONG_UNIT)
        ("NCX", (2, 3, plan.REPEAT_INNER + 3)),
        ("NCX", (3, 2, LONG_UNIT)),
    ],
)
@pytest.mark.parametrize("row", [r for r in SPEC.dtypes if r["src"] != "f16"], ids=lambda r: f"{r['src']}-{r['mean']}")
def test_float_runs_that_overflow_are_summed_again(row, layout, shape):
    """Both forms sum their terms in float runs; terms past f32's range (1e30 * 1e30) that
    cancel must give the double sum, not Inf - Inf = NaN: such a run is summed again in double."""
    # blocks and the scalar tail in either layout
    generator = rng("bn-overflow", row, layout, shape)
    channels = shape[-1] if layout == "NXC" else shape[1]
    src = data(generator, shape, row["src"], specials="none")
    diff_dst = data(generator, shape, row["diff_dst"], specials="none")
    # two cancelling terms of every channel, in one block: rows 0 and 1 (NXC) or elements 0 and 1;
    # NCX also elements -5 and -4 of the last row, in the last whole block (LONG_UNIT: its own run)
    pairs = [((0, 0), (0, 1))] if layout == "NXC" else [((0, slice(None), 0), (0, slice(None), 1))]
    if layout == "NCX":
        pairs.append(((-1, slice(None), -5), (-1, slice(None), -4)))
    for first, second in pairs:
        src[first], src[second], diff_dst[first], diff_dst[second] = 1e30, -1e30, 1e30, 1e30
    mean = np.zeros(channels, dtype_of(row["mean"]))
    variance = np.ones(channels, dtype_of(row["variance"]))
    kwargs = {"epsilon": 1e-5, "data_format": layout, "with_diff_gamma_beta": True}
    got = opgen.batch_norm_training_backward(src, diff_dst, mean, variance, **kwargs)
    expected = oracle.batch_norm_training_backward(src, diff_dst, mean, variance, **kwargs)
    assert np.isfinite(got.diff_gamma.astype(np.float64)).all() and np.isfinite(expected[1]).all()
    src_bound, gamma_bound, beta_bound = bounds(src, diff_dst, mean, variance, None, 1e-5, layout)
    assert_within(got.diff_gamma, expected[1], row["diff_gamma"], gamma_bound, "overflowing run diff_gamma")
    assert_within(got.diff_src, expected[0], row["diff_src"], src_bound, "overflowing run diff_src")


@pytest.mark.slow
@pytest.mark.parametrize("row", SPEC.dtypes, ids=lambda r: f"{r['src']}-{r['mean']}")
@pytest.mark.parametrize("channels", [300, 17, 3, 520, 113, plan.SEGMENT_BYTES // 4 + 300])
def test_nxc_tensors_past_the_caches(row, channels):
    """NXC tensors bigger than plan.STREAM_BYTES sum their rows in memory order: whole rows
    (with a tail past the last whole block at 300 channels; fewer than a block at 17, whose
    rows are too many an odd number to tile; rows of 3 tiled, 16 as one of 48 channels; the
    element pass streams its tails with the blocks at 520 and 113, too long to tile, 16-bit
    rows of 113 not streamed), or
    rows longer than plan.SEGMENT_BYTES of float sums segment by segment (plan.SEGMENT
    channels), the last one partly, and a tail; the same bits on 1 and 2 threads, within the
    oracle's bounds."""
    itemsize = dtype_of(row["src"]).itemsize
    # and rows enough for 16 (OPGEN_ROW_GROUP) in each of the most tiles: not split by channels
    rows = max(plan.STREAM_BYTES // (itemsize * channels) + 3, 16 * plan.MAX_TILES + 1)
    # rows of 3 in a whole number of groups of 16 (tiled); the others an odd number (17 not tiled)
    rows += 16 - rows % 16 if channels == 3 else 1 - rows % 2
    shape = (rows, channels)
    check_threads_and_oracle(rng("bn past the caches", row, channels), row, shape, "NXC", (1, 2))


@pytest.mark.parametrize("row", SPEC.dtypes, ids=lambda r: f"{r['src']}-{r['mean']}")
@pytest.mark.parametrize(
    "shape",
    [(4096, 3), (2, 8, 8, 12), (16 * 1500, 1), (3000, 24), (48, 63), (40000, 5), (1000, 100), (4001, 5)],
    ids=["3", "12", "1", "24", "63", "several tiles", "100", "rows left over"],
)
def test_rows_of_few_channels(row, shape):
    """NXC rows of C channels, not a whole number of blocks, in a whole number of groups of
    BLOCK / gcd(C, BLOCK) rows, run each group as one row of lcm(C, BLOCK) channels, at most
    plan.TILED_CHANNELS (the channel inputs tiled, each channel's sums folded back before its
    values; 4001 rows of 5 are not such a number and run as they are): the same bits on 1 and
    2 threads, within the oracle's bounds."""
    check_threads_and_oracle(rng("bn few channels", row, shape), row, shape, "NXC", (1, 2))


@pytest.mark.slow
@pytest.mark.parametrize("row", SPEC.dtypes, ids=lambda r: f"{r['src']}-{r['mean']}")
def test_ncx_short_units_past_the_caches(row):
    """NCX tensors bigger than plan.STREAM_BYTES whose spatial units are shorter than
    plan.REPEAT_INNER (7x7, a tail of 1 per unit; 29 channels, so rows of repeated channels
    with a tail, which 16-bit data does not stream), rows enough: the nxc loop over repeated
    channels; the same bits on 1 and 2 threads, within the oracle's bounds."""
    shape = (2048, 29, 7, 7)
    assert math.prod(shape) * dtype_of(row["src"]).itemsize * 3 > plan.STREAM_BYTES
    assert shape[0] >= plan.REPEAT_MIN_ROWS and shape[1] * 49 < plan.REPEAT_MAX_ROW
    check_threads_and_oracle(rng("bn short units", row), row, shape, "NCX", (1, 2))


@pytest.mark.parametrize("row", SPEC.dtypes, ids=lambda r: f"{r['src']}-{r['mean']}")
@pytest.mark.parametrize(
    "shape,layout",
    [
        # few rows of many channels: both passes range by range, ranges short enough for a
        # range's rows to be read again from cache (opgen_reread_range), a channel tail
        ((3, 2 * plan.CHANNEL_SPLIT + 21), "NXC"),
        # one tile of rows (over 2^19 channels) and more bytes than plan.STREAM_BYTES: streamed
        ((6, (1 << 19) + 37), "NXC"),
        # rows too many for a range's rows to stay in cache: ranges of OPGEN_CHANNEL_RANGE, in
        # groups of rows (as rows of many channels, 2^24 elements and more, however many rows)
        ((70, plan.CHANNEL_SPLIT + 37), "NXC"),
        # NCX with a short inner dim: channels of `repeat` copies keep the two separate passes
        ((2, 20000, 3), "NCX"),
        # rows enough for tiles of rows (no split), channels enough for the element pass to
        # take two rows at a time (OPGEN_PAIRED_ROWS): an odd row left, a channel tail
        ((33, plan.PAIRED_ROWS + 3), "NXC"),
        # one tile of rows on several threads: pass 1 in ranges of whole blocks of channels,
        # one a thread (64 channels; 37, the last range with a tail; 40, tiled rows of 80)
        ((784, 64), "NXC"),
        ((1000, 37), "NXC"),
        ((300, 40), "NXC"),
    ],
    ids=["reread", "streamed", "long ranges", "repeat", "paired", "one tile", "one tile, a tail", "one tile, tiled"],
)
def test_few_rows_of_many_channels(row, shape, layout):
    """Shapes with many channels, most of which split by channels (opgen_split_channels), or
    whose one tile of rows sums by channel ranges on several threads: within the oracle's
    bounds, and the same bits on 1, 2 and 3 threads."""
    check_threads_and_oracle(rng("bn few rows", row, shape, layout), row, shape, layout, (1, 2, 3))


def check_threads_and_oracle(generator, row, shape, layout, thread_counts):
    """The same bits on every thread count, within the oracle's bounds (gamma and both
    per-channel outputs given)."""
    channels = shape[channel_axis(len(shape), layout)]
    src = data(generator, shape, row["src"])
    diff_dst = data(generator, shape, row["diff_dst"])
    mean = data(generator, (channels,), row["mean"], specials="none")
    variance = np.abs(data(generator, (channels,), row["variance"]))
    gamma = data(generator, (channels,), row["gamma"])
    kwargs = {"epsilon": 1e-5, "data_format": layout, "with_diff_gamma_beta": True}
    results = []
    for threads in thread_counts:
        with threads_set_to(threads):
            results.append(opgen.batch_norm_training_backward(src, diff_dst, mean, variance, gamma, **kwargs))
    for other in results[1:]:
        for got_one, got_other in zip(results[0], other):
            assert np.array_equal(got_one.view(np.uint8), got_other.view(np.uint8)), "threads changed bits"
    one = results[0]
    expected = oracle.batch_norm_training_backward(src, diff_dst, mean, variance, gamma, **kwargs)
    src_bound, gamma_bound, beta_bound = bounds(src, diff_dst, mean, variance, gamma, 1e-5, layout)
    context = f"bn {shape} {layout} {row}"
    assert_within(one.diff_src, expected[0], row["diff_src"], src_bound, context + " diff_src")
    assert_within(one.diff_gamma, expected[1], row["diff_gamma"], gamma_bound, context + " diff_gamma")
    assert_within(one.diff_beta, expected[2], row["diff_beta"], beta_bound, context + " diff_beta")
