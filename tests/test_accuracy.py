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
    # NaN still has to agree, whatever the bound
    bad, _ = accuracy.outside(np.array([np.nan], np.float32), np.array([1.0]), f32, np.array([np.inf]))
    assert bad.all()
