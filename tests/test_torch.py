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
    for repeat in range(2):  # the second call takes the fast path
        out = torch.empty(2, 33, dtype=TORCH[dtype])
        got = opgen.tanh(as_tensor(src), out=out)
        assert got is out and np.array_equal(bits(out), bits(expected)), repeat
        got = opgen.tanh(as_tensor(src))
        assert isinstance(got, torch.Tensor) and np.array_equal(bits(got), bits(expected)), repeat
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


# opgen.torch: custom ops ---------------------------------------------------------------

import opgen.torch as opgen_torch  # noqa: E402
from opgen import accuracy, oracle  # noqa: E402
from tests.helpers import TABLE, assert_ulps  # noqa: E402

# PyTorch's own forward and its backward formula (float64 here), per forward op of the specs
HARD_SIGMOID = {"alpha": 1 / 6, "beta": 0.5}  # torch.nn.functional.hardsigmoid's
PYTORCH = {
    "relu": (torch.relu, lambda grad, x, y: torch.ops.aten.threshold_backward(grad, x, 0)),
    "sigmoid": (torch.sigmoid, lambda grad, x, y: torch.ops.aten.sigmoid_backward(grad, y)),
    "tanh": (torch.tanh, lambda grad, x, y: torch.ops.aten.tanh_backward(grad, y)),
    "hard_sigmoid": (torch.nn.functional.hardsigmoid, lambda grad, x, y: torch.ops.aten.hardsigmoid_backward(grad, x)),
    # along their default axes: SoftMax 1, LogSoftmax -1 (oneDNN Graph's)
    "soft_max": (
        lambda x: torch.softmax(x, 1),
        lambda grad, x, y: torch.ops.aten._softmax_backward_data(grad, y, 1, y.dtype),
    ),
    "log_soft_max": (
        lambda x: torch.log_softmax(x, -1),
        lambda grad, x, y: torch.ops.aten._log_softmax_backward_data(grad, y, -1, y.dtype),
    ),
}
FORWARD = [s for s in opgen.bundled.specs if s.backward is not None]


def test_every_forward_op_has_a_pytorch_counterpart_here():
    assert {s.name for s in FORWARD} == set(PYTORCH)


def attributes_of(name: str) -> dict:
    return HARD_SIGMOID if name == "hard_sigmoid" else {}


@pytest.mark.parametrize("dtype", TORCH)
@pytest.mark.parametrize("name", sorted(PYTORCH))
def test_gradients_match_pytorchs(name, dtype):
    """loss.backward() through an opgen op runs its backward op: the gradient is within 1 ulp
    (ReLU: exactly) of PyTorch's backward formula evaluated in float64 on the same saved
    values, and the forward within 1 ulp (ReLU: exactly) of PyTorch's forward in float64; for
    ops over lines (SoftMax, LogSoftmax), within the bounds their specs state instead."""
    generator = rng("torch gradients", name, dtype)
    shape = (3, 129)
    x = as_tensor(data(generator, shape, dtype, specials="all")).requires_grad_()
    grad = as_tensor(data(generator, shape, dtype, specials="finite"))
    forward, backward = PYTORCH[name]
    y = getattr(opgen_torch, name)(x, **attributes_of(name))
    assert y.dtype == x.dtype and y.requires_grad
    (y * grad).sum().backward()
    ulps = 0 if name == "relu" else 1
    exact_forward = forward(x.detach().double()).numpy()
    if name == "hard_sigmoid":  # alpha is an f32 attribute: 1/6 rounded (the oracle's test below)
        exact_forward = oracle.hard_sigmoid(x.detach().double().numpy(), **HARD_SIGMOID)
    got_forward = y.detach().numpy() if dtype != "bf16" else as_array(y)
    exact_gradient = backward(grad.double(), x.detach().double(), y.detach().double()).numpy()
    if name == "relu":
        # at NaN, PyTorch's ReLU passes the gradient (NaN <= 0 is false); oneDNN's, and
        # opgen's, gives 0 (NaN > 0 is false): the one place the two are meant to differ
        exact_gradient[np.isnan(x.detach().double().numpy())] = 0.0
    got = x.grad.numpy() if dtype != "bf16" else as_array(x.grad)
    spec = {s.name: s for s in opgen.bundled.specs}[name]
    if spec.pattern != "along_axes":
        assert_ulps(got_forward, exact_forward, dtype, ulps, f"{name} forward")
        assert_ulps(got, exact_gradient, dtype, ulps, f"{name} gradient")
        return
    # ops over lines: within the bounds their specs state (1 ulp and a bound function's)
    backward_spec = {s.name: s for s in opgen.bundled.specs}[spec.backward.op]
    row = TABLE.dtypes[dtype]
    checks = [
        (got_forward, exact_forward, spec, (as_numpy(x),)),
        (got, exact_gradient, backward_spec, (as_numpy(grad), got_forward)),
    ]
    for value, expected, op, arguments in checks:
        bound = getattr(oracle, op.accuracy[op.outputs[0].name].removeprefix("oracle:"))(*arguments)[0]
        bad, _ = accuracy.outside(value, expected, row, bound)
        assert not bad.any(), f"{op.name} {dtype}: {np.argwhere(bad)[:3]}"


def as_array(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().view(torch.int16).numpy().view(ml_dtypes.bfloat16)


def as_numpy(tensor: torch.Tensor) -> np.ndarray:
    return as_array(tensor) if tensor.dtype == torch.bfloat16 else tensor.detach().numpy()


def test_the_forward_oracles_agree_with_pytorch_in_float64():
    """opgen's float64 references of the forward ops and PyTorch's float64 ops are one function."""
    # two rows (the ops over lines run along one): finite values, then with Inf and NaN
    finite = np.concatenate([np.linspace(-40, 40, 4001), [0.0, -0.0, 3.0, -3.0, 1e-300]])
    x = np.stack([finite, np.concatenate([finite[:-3][::-1], [np.inf, -np.inf, np.nan]])])
    for name, (forward, _) in PYTORCH.items():
        expected = forward(torch.from_numpy(x)).numpy()
        got = getattr(oracle, name)(x, **attributes_of(name))
        # hard_sigmoid's alpha is an f32: 1/6 rounded, off by |x| * |1/6 - f32(1/6)| at most
        slack = np.abs(x) * abs(1 / 6 - float(np.float32(1 / 6))) if name == "hard_sigmoid" else 0.0
        with np.errstate(invalid="ignore"):
            off = np.abs(got - expected) > 4e-16 * np.abs(expected) + slack
        assert np.array_equal(np.isnan(got), np.isnan(expected)) and not off[np.isfinite(got)].any(), name


def sample_arguments(spec, dtype: torch.dtype, requires_grad: bool) -> tuple[tuple, dict]:
    """Arguments of a valid call: the reference (2, 3, 4), channel inputs of the channel
    count, the attributes' defaults (required ones 0.25)."""
    from opgen.shapes import axes_shape, channel_axis, line_axes

    layout = spec.layout or next((a.default for a in spec.attributes if a.role == "layout"), None) or "NCX"
    reference = (2, 3, 4)
    channels = reference[channel_axis(3, layout)]
    generator = torch.Generator().manual_seed(0)
    arguments = []
    axis = next((a for a in spec.attributes if a.role in ("axis", "begin_axis")), None)
    # each input in its dtype of the first dtype row whose reference has `dtype`
    torch_dtypes = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
    wanted = next(name for name, value in torch_dtypes.items() if value == dtype)
    row = next((r for r in spec.dtypes if r[spec.reference] == wanted), spec.dtypes[0])
    row_dtypes = {name: torch_dtypes[row[name]] for name in row}
    for tensor in spec.inputs:
        if tensor.kind == "tensor":
            shape = reference
        elif tensor.kind in ("line", "along") and axis is not None:
            first, last = line_axes(3, axis.default, axis.role)
            shape = axes_shape(reference, first, last, tensor.kind)
        elif "per_channel" in tensor.broadcast:
            shape = (channels,)
        else:
            shape = (reference[1],)  # channel_count
        value = torch.rand(shape, generator=generator, dtype=torch.float32).to(row_dtypes[tensor.name]) - (
            0.5 if tensor.name != "variance" else 0
        )
        arguments.append(value.requires_grad_(requires_grad))
    keywords = {a.name: 0.25 for a in spec.attributes if a.required}
    return tuple(arguments), keywords


@pytest.mark.parametrize("spec", opgen.bundled.specs, ids=lambda s: s.name)
def test_opcheck_passes(spec):
    """torch.library.opcheck: schema, fake kernel, autograd registration, AOT dispatch."""
    op = getattr(torch.ops.opgen, spec.name).default
    for dtype in (torch.float32, torch.bfloat16):
        arguments, keywords = sample_arguments(spec, dtype, spec.backward is not None)
        torch.library.opcheck(op, arguments, keywords)


def test_schemas_come_from_the_specs():
    by_name = {s.name: s for s in opgen.bundled.specs}
    assert (
        opgen_torch.schema(by_name["hard_sigmoid"]) == "hard_sigmoid(Tensor src, *, float alpha, float beta) -> Tensor"
    )
    assert opgen_torch.schema(by_name["batch_norm_training_backward"]) == (
        "batch_norm_training_backward(Tensor src, Tensor diff_dst, Tensor mean, Tensor variance, Tensor? gamma=None, "
        '*, float epsilon, str data_format="NXC", bool? with_diff_gamma_beta=None) -> (Tensor, Tensor, Tensor)'
    )


def test_a_bad_call_is_reported_by_the_op_also_when_traced():
    x = torch.zeros(3, 4)
    with pytest.raises(ValueError, match=r"relu_backward\(\): diff_dst: shape \(3, 5\) must equal"):
        torch.ops.opgen.relu_backward(x, torch.zeros(3, 5))
    with torch._subclasses.fake_tensor.FakeTensorMode():
        fake = torch.zeros(3, 4)
        with pytest.raises(ValueError, match=r"relu_backward\(\): diff_dst: shape \(3, 5\) must equal"):
            torch.ops.opgen.relu_backward(fake, torch.zeros(3, 5))
        with pytest.raises(ValueError, match=r"hard_sigmoid\(\): alpha: must be a finite number"):
            torch.ops.opgen.hard_sigmoid(fake, alpha=float("inf"), beta=0.5)


def test_outputs_not_requested_are_empty():
    spec = next(s for s in opgen.bundled.specs if s.name == "batch_norm_training_backward")
    arguments, keywords = sample_arguments(spec, torch.float32, False)
    diff_src, diff_gamma, diff_beta = torch.ops.opgen.batch_norm_training_backward(
        *arguments[:4], **keywords, with_diff_gamma_beta=False
    )
    assert diff_src.shape == (2, 3, 4) and diff_gamma.shape == (0,) and diff_beta.shape == (0,)


@pytest.mark.slow  # dynamo and AOTAutograd's first compile: over 10 s on 2 busy cores
@pytest.mark.filterwarnings("ignore:Your compiler for AOTAutograd:UserWarning")  # the recording backend's
def test_torch_compile_traces_forward_and_backward():
    """torch.compile (fullgraph: no graph break) puts opgen's forward ops in the forward graph
    and their backward ops in the backward graph; the compiled function gives the eager
    values and gradients."""
    from torch._dynamo.testing import AotEagerAndRecordGraphs

    def model(x):
        return (opgen_torch.tanh(x) * opgen_torch.sigmoid(x)).sum()

    backend = AotEagerAndRecordGraphs()
    compiled = torch.compile(model, backend=backend, fullgraph=True, dynamic=False)
    x = torch.randn(4, 33, requires_grad=True)
    x_eager = x.detach().clone().requires_grad_()
    loss = compiled(x)
    loss.backward()
    model(x_eager).backward()
    assert torch.equal(loss, model(x_eager.detach())) and torch.equal(x.grad, x_eager.grad)
    forward_code = "".join(graph.code for graph in backend.fw_graphs)
    backward_code = "".join(graph.code for graph in backend.bw_graphs)
    assert "opgen.tanh.default" in forward_code and "opgen.sigmoid.default" in forward_code
    assert "opgen.tanh_backward.default" in backward_code and "opgen.sigmoid_backward.default" in backward_code
