"""PyTorch: tensors in, tensors out (bf16 too, `out=` tensors, the checks naming the argument),
and opgen.torch's custom ops: gradients against PyTorch's own, opcheck, torch.compile."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import opgen
from tests.helpers import data, rng

torch = pytest.importorskip("torch")
TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
NUMPY = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}


def as_tensor(array: np.ndarray) -> torch.Tensor:
    if array.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def bits(value) -> np.ndarray:
    """The bytes of an array or a CPU tensor, for exact comparison (NaNs included)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().contiguous().view(torch.uint8).numpy()
    return np.ascontiguousarray(value).view(np.uint8)


@pytest.mark.parametrize("dtype", TORCH)
def test_torch_tensors_give_torch_tensors_with_the_numpy_results(dtype):
    generator = rng("torch in", dtype)
    src = data(generator, (3, 7), dtype, specials="all")
    diff_dst = data(generator, (3, 7), dtype)
    for use_dst in (True, False):
        expected = opgen.sigmoid_backward(src, diff_dst, use_dst=use_dst)
        got = opgen.sigmoid_backward(as_tensor(src), as_tensor(diff_dst), use_dst=use_dst)
        assert isinstance(got, torch.Tensor) and got.dtype == TORCH[dtype] and got.shape == expected.shape
        assert np.array_equal(bits(got), bits(expected))
    # a tensor and an array together: tensors out
    assert isinstance(opgen.relu_backward(src, as_tensor(diff_dst)), torch.Tensor)


def test_inputs_are_read_in_place_and_outputs_are_not_copied():
    """A bf16 tensor's storage is read as it is (no copy: writing through the array the op
    reads would show), and a result tensor shares its memory with a result array."""
    src = torch.tensor([-1.0, 2.0, 0.5], dtype=torch.bfloat16)
    from opgen.runtime import array_to_torch, as_array

    array = as_array(src, "relu", "src")
    assert array.dtype == ml_dtypes.bfloat16 and array.ctypes.data == src.data_ptr()
    result = np.zeros(3, ml_dtypes.bfloat16)
    assert array_to_torch(torch, result).data_ptr() == result.ctypes.data
    got = opgen.relu(src)
    assert got.dtype == torch.bfloat16 and got.tolist() == [0.0, 2.0, 0.5]


@pytest.mark.parametrize("dtype", TORCH)
def test_out_may_be_a_tensor(dtype):
    generator = rng("torch out", dtype)
    src = data(generator, (2, 33), dtype, specials="all")
    expected = opgen.tanh(src)
    out = torch.empty(2, 33, dtype=TORCH[dtype])
    got = opgen.tanh(as_tensor(src), out=out)
    assert got is out and np.array_equal(bits(out), bits(expected))
    # a tuple for an op of several outputs, with None for the one opgen allocates
    src, slope, diff_dst = (data(generator, shape, dtype) for shape in [(4, 6), (6,), (4, 6)])
    expected = opgen.prelu_backward(src, slope, diff_dst)
    diff_slope = torch.empty(6, dtype=TORCH[dtype])
    got = opgen.prelu_backward(as_tensor(src), as_tensor(slope), as_tensor(diff_dst), out=(None, diff_slope))
    assert got.diff_slope is diff_slope and isinstance(got.diff_src, torch.Tensor)
    assert np.array_equal(bits(got.diff_src), bits(expected.diff_src))
    assert np.array_equal(bits(got.diff_slope), bits(expected.diff_slope))


def test_tensors_that_are_not_dense_or_require_grad_are_read():
    generator = rng("torch layouts")
    src = data(generator, (5, 8), "bf16", specials="all")
    transposed = as_tensor(src).t()  # strides (1, 8)
    assert np.array_equal(bits(opgen.relu(transposed)), bits(opgen.relu(src.T.copy())))
    sliced = as_tensor(src)[:, ::2]
    assert np.array_equal(bits(opgen.relu(sliced)), bits(opgen.relu(src[:, ::2].copy())))
    wanting = torch.randn(4, requires_grad=True)
    got = opgen.sigmoid(wanting)
    assert not got.requires_grad  # the plain op is outside autograd; opgen.torch's ops are in it
    assert np.array_equal(bits(got), bits(opgen.sigmoid(wanting.detach().numpy())))


def test_the_checks_name_the_argument_for_tensors():
    x = torch.zeros(3, 4)
    with pytest.raises(TypeError, match=r"relu_backward\(\): diff_dst: .*dtype"):
        opgen.relu_backward(x, torch.zeros(3, 4, dtype=torch.float64))
    with pytest.raises(
        TypeError, match=r"relu_backward\(\): src_or_dst: the dtype combination \(src_or_dst f32, diff_dst bf16\)"
    ):
        opgen.relu_backward(x, torch.zeros(3, 4, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"relu_backward\(\): diff_dst: shape \(3, 5\) must equal"):
        opgen.relu_backward(x, torch.zeros(3, 5))
    with pytest.raises(ValueError, match=r"relu\(\): out \(dst\): must have shape \(3, 4\)"):
        opgen.relu(x, out=torch.zeros(4, 3))
    with pytest.raises(ValueError, match=r"relu\(\): out \(dst\): must be C-contiguous"):
        opgen.relu(x, out=torch.zeros(4, 3).t())
    with pytest.raises(ValueError, match=r"relu\(\): dst: .*src"):  # the C API's overlap rule
        opgen.relu(x, out=x)
    base = torch.zeros(12)
    with pytest.raises(ValueError, match=r"relu\(\): dst: shares memory with src"):  # a copied input
        opgen.relu(base.view(4, 3).t(), out=base.view(3, 4))
    meta = torch.zeros(3, device="meta")
    with pytest.raises(TypeError, match=r"relu\(\): src: cannot be read .*must be on the CPU"):
        opgen.relu(meta)
