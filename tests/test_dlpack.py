"""Arrays of other libraries in, the same kind out: any object exporting DLPack is read over
its memory; torch tensors give torch tensors (bf16 too), and `out=` may be tensors. The
checks of NumPy calls (dtype, shape, overlap, layout) name the argument here too."""

from __future__ import annotations

import numpy as np
import pytest

import opgen
from tests.helpers import data, rng


class Exported:
    """An array seen only through the DLPack protocol (as JAX or CuPy arrays are)."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_an_object_exporting_dlpack_is_read_in_place():
    generator = rng("dlpack object")
    src = data(generator, (4, 5), "f32", specials="all")
    diff_dst = data(generator, (4, 5), "f32")
    expected = opgen.relu_backward(src, diff_dst)
    got = opgen.relu_backward(Exported(src), Exported(diff_dst))
    assert type(got) is np.ndarray and np.array_equal(got, expected, equal_nan=True)
    out = np.empty_like(src)
    assert opgen.relu_backward(Exported(src), diff_dst, out=Exported(out)) is not None
    assert np.array_equal(out, expected, equal_nan=True), "out= through DLPack is written in place"


def test_objects_that_are_not_arrays_are_named():
    with pytest.raises(TypeError, match=r"relu\(\): src: must be a NumPy array or an object with __dlpack__, not list"):
        opgen.relu([1.0])


def test_a_jax_array_is_read():
    jnp = pytest.importorskip("jax.numpy")
    values = np.linspace(-3, 3, 11, dtype=np.float32)
    got = opgen.tanh(jnp.asarray(values))
    assert type(got) is np.ndarray and np.array_equal(got, opgen.tanh(values))
