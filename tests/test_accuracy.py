"""The checker the tests judge results with (opgen.accuracy.outside)."""

from __future__ import annotations

import numpy as np

from opgen import accuracy
from tests.helpers import TABLE


def test_overflow_need_not_agree_where_the_bound_allows_either_side():
    """An exact sum of -3.77e38 (beyond f32's range) from terms of 1e77 that cancel: within a
    bound that large, a finite result is as right as -inf; within a small bound it is not.
    Likewise a result of inf for an exact 3.3e38."""
    f32 = TABLE.dtypes["f32"]
    exact = np.array([-3.77e38, 3.3e38])
    got = np.array([0.0, np.inf], np.float32)
    bad, _ = accuracy.outside(got, exact, f32, np.full(2, 1e63))
    assert not bad.any()
    bad, _ = accuracy.outside(got, exact, f32, np.zeros(2))
    assert bad.all()


def test_nan_agrees_within_any_finite_bound_and_an_infinite_bound_states_no_guarantee():
    """NaN has to agree within a finite bound, however large. An infinite bound states no
    guarantee (a product whose partial values may leave double's range; the sign of x - mean
    within the mean's error, times an infinite gamma): an infinity of either sign, NaN and any
    finite value pass it. A NaN bound (NaN data) is strict."""
    f32 = TABLE.dtypes["f32"]
    bad, _ = accuracy.outside(np.array([np.nan], np.float32), np.array([1.0]), f32, np.array([1e300]))
    assert bad.all()
    got = np.array([np.nan, np.inf, -np.inf, 0.0, 5.0], np.float32)
    bad, _ = accuracy.outside(got, np.full(5, np.inf), f32, np.full(5, np.inf))
    assert not bad.any()
    bad, _ = accuracy.outside(got[1:], np.array([np.nan, np.nan, -np.inf, 1.0]), f32, np.full(4, np.nan))
    assert bad.all()
