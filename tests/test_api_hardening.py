"""Arrays a caller may pass that the kernels cannot see through: an `out=` over an input the call
ignores, an `out=` in the gaps of a strided input, views of more bytes than a size holds, and
masked arrays."""

from __future__ import annotations

import numpy as np
import pytest

import opgen

from .helpers import rng


def _batch_norm_inputs(shape=(2, 3, 4, 5)):
    generator = rng("api-hardening", shape)
    src, diff_dst = (generator.standard_normal(shape).astype(np.float32) for _ in range(2))
    channels = shape[-1]
    return src, diff_dst, np.zeros(channels, np.float32), np.ones(channels, np.float32)


@pytest.mark.parametrize("repeat", [1, 3])  # the third call takes the fast path, if any
def test_out_over_an_ignored_input_is_refused(repeat):
    src, diff_dst, mean, variance = _batch_norm_inputs()
    storage = np.ones(src.size, np.float32)
    gamma = storage[: mean.size]  # gamma lies inside diff_src's buffer
    for _ in range(repeat - 1):  # the same call without out=: a plan the fast path keeps
        opgen.batch_norm_training_backward(
            src, diff_dst, mean, variance, gamma, epsilon=1e-5, with_diff_gamma_beta=False
        )
    with pytest.raises(ValueError, match=r"batch_norm_training_backward\(\): diff_src: shares memory with gamma"):
        opgen.batch_norm_training_backward(
            src,
            diff_dst,
            mean,
            variance,
            gamma,
            epsilon=1e-5,
            with_diff_gamma_beta=False,
            out=(storage.reshape(src.shape), None, None),
        )
    assert (gamma == 1).all()  # not written


def test_out_in_the_gaps_of_a_strided_input_is_taken():
    storage = np.zeros(6, np.float32)
    src = storage[0:6:3].reshape(2, 1)  # elements 0 and 3
    out = storage[1:3].reshape(2, 1)  # elements 1 and 2: in the gap, sharing none
    assert np.may_share_memory(src, out) and not np.shares_memory(src, out)
    src[:] = [[-1.0], [2.0]]
    diff_dst = np.array([[5.0], [7.0]], np.float32)
    got = opgen.relu_backward(src, diff_dst, use_dst=False, out=out)
    assert got is out
    np.testing.assert_array_equal(out, [[0.0], [7.0]])
    np.testing.assert_array_equal(storage[[0, 3]], [-1.0, 2.0])  # the input, untouched


def test_out_sharing_an_element_with_a_strided_input_is_refused():
    storage = np.zeros(6, np.float32)
    src = storage[0:6:3].reshape(2, 1)  # elements 0 and 3
    out = storage[2:4].reshape(2, 1)  # element 3 is src's
    with pytest.raises(ValueError, match=r"relu_backward\(\): diff_src: shares memory with src_or_dst"):
        opgen.relu_backward(src, np.ones((2, 1), np.float32), out=out)


def test_a_view_too_large_to_copy_is_a_value_error_naming_it():
    shape = (2**20, 2**20, 4)  # 16 TiB of f32 behind one element
    view = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=shape, strides=(0, 0, 0))
    with pytest.raises(ValueError, match=r"relu_backward\(\): src_or_dst: this view of shape .* cannot be allocated"):
        opgen.relu_backward(view, view)


@pytest.mark.parametrize("argument", ["src_or_dst", "diff_dst"])
def test_masked_arrays_are_refused(argument):
    arrays = {"src_or_dst": np.ones(4, np.float32), "diff_dst": np.ones(4, np.float32)}
    arrays[argument] = np.ma.array(arrays[argument], mask=[0, 1, 0, 0])
    with pytest.raises(TypeError, match=rf"relu_backward\(\): {argument}: masked arrays are not supported"):
        opgen.relu_backward(arrays["src_or_dst"], arrays["diff_dst"])
