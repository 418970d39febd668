"""Property-based tests: random ops, dtypes, layouts, ranks, odd sizes and attributes against the oracle.

A fixed example budget keeps CI fast; a failure prints the falsifying example and a
`@reproduce_failure` line that replays it.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import opgen
from opgen import oracle
from opgen.shapes import channel_axis
from tests.helpers import assert_ulps, assert_within, data, stated_bound

SPECS = {s.name: s for s in opgen.bundled.specs}
ELEMENTWISE = sorted(name for name, s in SPECS.items() if s.pattern == "elementwise")
BUDGET = settings(
    max_examples=120,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
dims = st.sampled_from([0, 1, 2, 3, 5, 7, 13, 16, 17, 31, 33])
seeds = st.integers(0, 2**31 - 1)
specials = st.sampled_from(["none", "finite", "all"])


def shapes(min_rank: int, max_rank: int = 5):
    return st.integers(min_rank, max_rank).flatmap(lambda rank: st.tuples(*[dims] * rank))


@BUDGET
@given(
    op=st.sampled_from(ELEMENTWISE),
    row=st.integers(0, 2),
    shape=shapes(0),
    seed=seeds,
    kind=specials,
    flag=st.booleans(),
    alpha=st.floats(-4, 4, width=32),
    beta=st.floats(-2, 2, width=32),
)
def test_elementwise_ops(op, row, shape, seed, kind, flag, alpha, beta):
    spec = SPECS[op]
    dtypes = spec.dtypes[row]
    generator = np.random.default_rng(seed)
    inputs = [data(generator, shape, dtypes[t.name], specials=kind) for t in spec.inputs]
    attributes = {
        a.name: (flag if a.type == "bool" else {"alpha": alpha, "beta": beta}[a.name]) for a in spec.attributes
    }
    got = getattr(opgen, op)(*inputs, **attributes)
    expected = getattr(oracle, op)(*inputs, **attributes)
    exact = op == "relu_backward"
    assert_ulps(got, expected, dtypes[spec.outputs[0].name], 0 if exact else 1, f"{op}{shape} {attributes}")


@BUDGET
@given(
    row=st.integers(0, 2),
    shape=shapes(1),
    layout=st.sampled_from(["NCX", "NXC"]),
    seed=seeds,
    kind=specials,
    form=st.sampled_from(["per_channel", "per_tensor", "trailing", "numpy"]),
    keep=st.lists(st.booleans(), min_size=5, max_size=5),
)
def test_prelu_backward(row, shape, layout, seed, kind, form, keep):
    dtype = SPECS["prelu_backward"].dtypes[row]["src"]
    axis = channel_axis(len(shape), layout)
    if form == "per_channel":
        if axis is None:
            return
        slope_shape = (shape[axis],)
    elif form == "per_tensor":
        slope_shape = (1,)
    elif form == "trailing":
        slope_shape = shape[1:]
    else:
        slope_shape = tuple(s if k else 1 for s, k in zip(shape, keep))
    generator = np.random.default_rng(seed)
    src, diff_dst = data(generator, shape, dtype, specials=kind), data(generator, shape, dtype, specials=kind)
    slope = data(generator, slope_shape, dtype, specials=kind)
    got = opgen.prelu_backward(src, slope, diff_dst, data_format=layout)
    expected = oracle.prelu_backward(src, slope, diff_dst, data_format=layout)
    assert_ulps(got.diff_src, expected[0], dtype, 1, f"prelu {shape} {slope_shape} {layout}")
    flipped = oracle.prelu_backward(
        -np.abs(src.astype(np.float64)), slope, -np.abs(diff_dst.astype(np.float64)), data_format=layout
    )[1]
    spec = SPECS["prelu_backward"]
    magnitude = np.where(np.isnan(flipped), np.inf, flipped)
    bound = stated_bound(spec, spec.dtypes[row], "diff_slope", magnitude, math.prod(shape) // max(1, slope.size))
    assert_within(got.diff_slope, expected[1], dtype, bound, f"prelu {shape} {slope_shape} {layout} diff_slope")


@BUDGET
@given(
    row=st.integers(0, 3),
    shape=shapes(2),
    layout=st.sampled_from(["NCX", "NXC"]),
    seed=seeds,
    with_gamma=st.booleans(),
    with_diff=st.sampled_from([None, True, False]),
    epsilon=st.sampled_from([1e-5, 1e-3, 0.5, float(np.finfo(np.float32).tiny)]),
)
def test_batch_norm_backward_finite(row, shape, layout, seed, with_gamma, with_diff, epsilon):
    from tests.test_batch_norm import bounds

    dtypes = SPECS["batch_norm_training_backward"].dtypes[row]
    channels = shape[channel_axis(len(shape), layout)]
    generator = np.random.default_rng(seed)
    src, diff_dst = data(generator, shape, dtypes["src"]), data(generator, shape, dtypes["diff_dst"])
    mean = data(generator, (channels,), dtypes["mean"], specials="none")
    variance = np.abs(data(generator, (channels,), dtypes["variance"])) + np.array(1, dtypes_np(dtypes["variance"]))
    gamma = data(generator, (channels,), dtypes["gamma"]) if with_gamma else None
    kwargs = {"epsilon": epsilon, "data_format": layout, "with_diff_gamma_beta": with_diff}
    got = opgen.batch_norm_training_backward(src, diff_dst, mean, variance, gamma, **kwargs)
    expected = oracle.batch_norm_training_backward(src, diff_dst, mean, variance, gamma, **kwargs)
    requested = with_gamma if with_diff is None else with_diff
    src_bound, gamma_bound, beta_bound = bounds(
        src, diff_dst, mean, variance, gamma if requested else None, epsilon, layout
    )
    assert_within(got.diff_src, expected[0], dtypes["diff_src"], src_bound, f"bn {shape} {layout}")
    if requested:
        assert_within(got.diff_gamma, expected[1], dtypes["diff_gamma"], gamma_bound, f"bn {shape} diff_gamma")
        assert_within(got.diff_beta, expected[2], dtypes["diff_beta"], beta_bound, f"bn {shape} diff_beta")
    else:
        assert got.diff_gamma is None and got.diff_beta is None


def dtypes_np(name):
    from tests.helpers import dtype_of

    return dtype_of(name)
