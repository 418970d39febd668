"""The public C API, called directly (through the compiled module): every opgen_status and every
aclnn status is reached by a call that breaks one rule, the message names the argument, nothing
is written on failure, and valid calls match the oracle."""

from __future__ import annotations

import math
import subprocess
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest

import opgen
from opgen import c_api, oracle
from tests.helpers import assert_ulps, assert_within, data, rng, stated_bound, sum_bound

MODULE = opgen.bundled.module
ffi, lib = MODULE.ffi, MODULE.lib
CODES = {np.dtype(np.float32): lib.OPGEN_F32, np.dtype(np.float16): lib.OPGEN_F16}
CODES[np.dtype(ml_dtypes.bfloat16)] = lib.OPGEN_BF16
STATUS = {name: index for index, (name, _, _) in enumerate(c_api.STATUSES)}
SUCCESS, NULLPTR, INVALID = 0, 161001, 161002


class Tensor:
    """An opgen_tensor descriptor over a NumPy array (kept alive with it)."""

    def __init__(self, array: np.ndarray, dims=None, dtype=None) -> None:
        self.array = array
        self.pointer = ffi.new("opgen_tensor *")
        self.pointer.data = ffi.from_buffer(array) if array.size else ffi.NULL
        self.pointer.dtype = CODES[array.dtype] if dtype is None else dtype
        shape = array.shape if dims is None else dims
        self.pointer.rank = len(shape)
        for d, size in enumerate(shape):
            self.pointer.dims[d] = size


def last_error() -> str:
    return ffi.string(lib.opgen_last_error()).decode()


PRELU_NAMES = ("src", "slope", "diff_dst", "diff_src", "diff_slope")


def prelu_call(tensors: list[Tensor], layout=None, **changes) -> int:
    """Runs opgen_prelu_backward on descriptors; `changes` replaces a descriptor (None: NULL)."""
    pointers = {name: t.pointer for name, t in zip(PRELU_NAMES, tensors)}
    pointers.update(changes)
    layout = lib.OPGEN_DATA_FORMAT_NCX if layout is None else layout
    return lib.opgen_prelu_backward(*[ffi.NULL if p is None else p for p in pointers.values()], layout)


def prelu_operands(shape=(2, 3, 5), dtype=np.float32, seed="c"):
    generator = rng("c_api", seed, shape)
    name = {np.float32: "f32", np.float16: "f16"}.get(dtype, "bf16")
    src, diff_dst = data(generator, shape, name), data(generator, shape, name)
    slope = data(generator, (shape[1],), name)
    return src, slope, diff_dst, np.full(shape, 7, dtype), np.full(shape[1], 7, dtype)


def test_valid_call_matches_oracle_and_python():
    src, slope, diff_dst, diff_src, diff_slope = prelu_operands((3, 4, 17))
    status = prelu_call([Tensor(a) for a in (src, slope, diff_dst, diff_src, diff_slope)])
    assert status == lib.OPGEN_SUCCESS, last_error()
    expected = oracle.prelu_backward(src, slope, diff_dst, data_format="NCX")
    assert_ulps(diff_src, expected[0], "f32", 1, "C API diff_src")
    python = opgen.prelu_backward(src, slope, diff_dst, data_format="NCX")
    assert np.array_equal(python.diff_slope, diff_slope)  # the same entry point underneath


def test_two_phase_workspace():
    # NXC BatchNorm: the workspace holds per-tile partial sums
    generator = rng("c_api", "two-phase")
    shape = (4, 700, 3)
    src, diff_dst = data(generator, shape, "f32"), data(generator, shape, "f32")
    mean, variance = np.zeros(3, np.float32), np.ones(3, np.float32)
    outputs = [np.empty(shape, np.float32), np.empty(3, np.float32), np.empty(3, np.float32)]
    tensors = [Tensor(a) for a in (src, diff_dst, mean, variance)] + [None] + [Tensor(a) for a in outputs]
    pointers = [ffi.NULL if t is None else t.pointer for t in tensors]
    size = ffi.new("size_t *")
    fmt = lib.OPGEN_DATA_FORMAT_NXC
    assert lib.opgen_batch_norm_training_backward_workspace_size(*pointers, 1e-5, fmt, size) == 0, last_error()
    assert size[0] > 0
    workspace = np.zeros(size[0], np.uint8)
    run = lib.opgen_batch_norm_training_backward_with_workspace
    short = run(*pointers, 1e-5, fmt, ffi.from_buffer(workspace), size[0] - 1)
    assert short == STATUS["OPGEN_WORKSPACE_TOO_SMALL"] and "workspace_size" in last_error()
    missing = run(*pointers, 1e-5, fmt, ffi.NULL, size[0])
    assert missing == STATUS["OPGEN_NULL_POINTER"] and "workspace" in last_error()
    assert run(*pointers, 1e-5, fmt, ffi.from_buffer(workspace), size[0]) == 0, last_error()
    expected = oracle.batch_norm_training_backward(
        src, diff_dst, mean, variance, epsilon=1e-5, data_format="NXC", with_diff_gamma_beta=True
    )
    one_call = [np.empty_like(o) for o in outputs]
    tensors2 = [Tensor(a) for a in (src, diff_dst, mean, variance)] + [None] + [Tensor(a) for a in one_call]
    pointers2 = [ffi.NULL if t is None else t.pointer for t in tensors2]
    assert lib.opgen_batch_norm_training_backward(*pointers2, 1e-5, fmt) == 0
    for got, again in zip(outputs, one_call):
        assert np.array_equal(got, again)  # the same sums, whoever allocated the workspace
    assert_within(outputs[2], expected[2], "f32", sum_bound(np.abs(diff_dst).sum(axis=(0, 1)), 2800), "diff_beta")


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_slope_as_big_as_src_needs_no_sums(dtype):
    # one term per diff_slope element: no workspace, and each element is its term rounded once
    src, _, diff_dst, diff_src, _ = prelu_operands((1, 6, 37), dtype, seed="full")
    slope = prelu_operands((6, 37), dtype, seed="full-slope")[0]
    diff_slope = np.full(slope.shape, 7, dtype)
    tensors = [Tensor(a) for a in (src, slope, diff_dst, diff_src, diff_slope)]
    size = ffi.new("size_t *")
    status = lib.opgen_prelu_backward_workspace_size(*[t.pointer for t in tensors], lib.OPGEN_DATA_FORMAT_NCX, size)
    assert status == SUCCESS and size[0] == 0, last_error()
    assert prelu_call(tensors) == SUCCESS, last_error()
    expected = oracle.prelu_backward(src, slope, diff_dst, data_format="NCX")
    name = {np.float32: "f32", np.float16: "f16"}.get(dtype, "bf16")
    assert_ulps(diff_src, expected[0], name, 0, "diff_src")
    assert_ulps(diff_slope, expected[1], name, 0, "diff_slope")
    shared = [Tensor(a) for a in (np.concatenate([src, src]), slope, np.concatenate([diff_dst, diff_dst]))]
    shared += [Tensor(np.empty((2, 6, 37), dtype)), Tensor(diff_slope)]
    status = lib.opgen_prelu_backward_workspace_size(*[t.pointer for t in shared], lib.OPGEN_DATA_FORMAT_NCX, size)
    assert status == SUCCESS and size[0] > 0, last_error()  # two terms per element: sums kept


def test_with_data_describes_once_and_takes_pointers_per_call():
    """opgen_<op>_with_data: descriptors written once (rank -1: absent), data pointers per call;
    the same results as opgen_<op>, and the same checks."""
    generator = rng("c_api", "with-data")
    shape = (5, 9, 3)
    fmt = lib.OPGEN_DATA_FORMAT_NXC
    mean, variance = np.zeros(3, np.float32), np.ones(3, np.float32)
    operands = ffi.new("opgen_tensor[]", 8)
    described = [np.empty(shape, np.float32)] * 2 + [mean, variance, None, np.empty(shape, np.float32)]
    for index, array in enumerate(described):
        operands[index].rank = -1 if array is None else array.ndim
        if array is not None:
            operands[index].dtype = lib.OPGEN_F32
            operands[index].dims[0 : array.ndim] = array.shape
    operands[6].rank = operands[7].rank = -1  # diff_gamma, diff_beta not requested
    size = ffi.new("size_t *")
    for call in range(2):  # new data each call, the descriptors untouched
        src, diff_dst = data(generator, shape, "f32"), data(generator, shape, "f32")
        diff_src, reference = np.full(shape, 7, np.float32), np.full(shape, 7, np.float32)
        pointers = [ffi.from_buffer(a) for a in (src, diff_dst, mean, variance)] + [ffi.NULL]
        pointers += [ffi.from_buffer(diff_src), ffi.NULL, ffi.NULL]
        inputs = [Tensor(a).pointer for a in (src, diff_dst, mean, variance)]
        assert (
            lib.opgen_batch_norm_training_backward_workspace_size(
                *inputs, ffi.NULL, Tensor(reference).pointer, ffi.NULL, ffi.NULL, 1e-5, fmt, size
            )
            == 0
        ), last_error()
        workspace = np.empty(size[0], np.uint8)
        status = lib.opgen_batch_norm_training_backward_with_data(
            operands, *pointers, 1e-5, fmt, ffi.from_buffer(workspace), size[0]
        )
        assert status == 0, last_error()
        one_call = [*inputs, ffi.NULL, Tensor(reference).pointer, ffi.NULL, ffi.NULL]
        assert lib.opgen_batch_norm_training_backward(*one_call, 1e-5, fmt) == 0, last_error()
        assert np.array_equal(diff_src, reference), call
    pointers[1] = ffi.from_buffer(np.zeros(1, np.float32))  # data too short is the caller's to avoid;
    operands[1].dims[2] = 4  # a shape that breaks a rule is not
    status = lib.opgen_batch_norm_training_backward_with_data(operands, *pointers, 1e-5, fmt, ffi.NULL, 0)
    assert status == STATUS["OPGEN_INVALID_SHAPE"] and "diff_dst" in last_error()
    status = lib.opgen_batch_norm_training_backward_with_data(ffi.NULL, *pointers, 1e-5, fmt, ffi.NULL, 0)
    assert status == STATUS["OPGEN_NULL_POINTER"] and "operands" in last_error()


def test_with_arrays_takes_data_and_attributes_in_arrays():
    """opgen_<op>_with_arrays (for language bindings): _with_data with the data pointers in one
    array and the attributes as doubles; the same results and checks."""
    src, slope, diff_dst, diff_src, diff_slope = prelu_operands((3, 4, 17), seed="arrays")
    operands = ffi.new("opgen_tensor[]", 5)
    for operand, array in zip(operands, (src, slope, diff_dst, diff_src, diff_slope)):
        operand.dtype, operand.rank = lib.OPGEN_F32, array.ndim
        operand.dims[0 : array.ndim] = array.shape
    pointers = ffi.new("void *[]", [ffi.from_buffer(a) for a in (src, slope, diff_dst, diff_src, diff_slope)])
    attributes = ffi.new("double[]", [lib.OPGEN_DATA_FORMAT_NCX])
    size = 4096
    workspace = np.empty(size, np.uint8)
    status = lib.opgen_prelu_backward_with_arrays(operands, pointers, attributes, ffi.from_buffer(workspace), size)
    assert status == SUCCESS, last_error()
    reference = prelu_operands((3, 4, 17), seed="arrays")
    assert prelu_call([Tensor(a) for a in reference]) == SUCCESS, last_error()
    assert np.array_equal(diff_src, reference[3]) and np.array_equal(diff_slope, reference[4])
    attributes[0] = 7
    status = lib.opgen_prelu_backward_with_arrays(operands, pointers, attributes, ffi.from_buffer(workspace), size)
    assert status == STATUS["OPGEN_INVALID_ATTRIBUTE"] and "data_format" in last_error()
    status = lib.opgen_prelu_backward_with_arrays(operands, ffi.NULL, attributes, ffi.NULL, 0)
    assert status == STATUS["OPGEN_NULL_POINTER"] and "data" in last_error()


def _prelu_status_cases():
    """(name, status, argument named, changes to a valid f32 call) for every rule."""
    src, slope, diff_dst, diff_src, diff_slope = prelu_operands()
    misaligned_tensor = Tensor(np.zeros((2, 3, 5), np.float32))
    raw = np.zeros(200, np.uint8)
    misaligned_tensor.raw = raw  # kept alive with the descriptor
    misaligned_tensor.pointer.data = ffi.from_buffer(raw) + 2
    huge = Tensor(np.zeros(1, np.float32), dims=(1 << 40, 1 << 40))
    wrong_rank = Tensor(np.zeros(1, np.float32))
    wrong_rank.pointer.rank = 13
    big_rank = Tensor(np.zeros(1, np.float32), dims=(1,) * 12)
    return [
        ("required NULL", "OPGEN_NULL_POINTER", "slope", {"slope": None}),
        ("data NULL", "OPGEN_NULL_POINTER", "diff_dst", {"diff_dst": Tensor(np.zeros(0, np.float32), dims=(2, 3, 5))}),
        ("dtype code", "OPGEN_UNSUPPORTED_DTYPE", "slope", {"slope": Tensor(slope, dtype=99)}),
        ("dtype mix", "OPGEN_UNSUPPORTED_DTYPE", "dtypes", {"slope": Tensor(slope.astype(np.float16))}),
        ("rank 13", "OPGEN_INVALID_RANK", "src", {"src": wrong_rank}),
        ("rank 12 slope", "OPGEN_INVALID_SHAPE", "slope", {"slope": big_rank}),
        ("negative dim", "OPGEN_INVALID_SHAPE", "diff_dst", {"diff_dst": Tensor(diff_dst, dims=(2, -3, 5))}),
        ("slope shape", "OPGEN_INVALID_SHAPE", "slope", {"slope": Tensor(np.zeros(4, np.float32))}),
        ("diff_dst shape", "OPGEN_INVALID_SHAPE", "diff_dst", {"diff_dst": Tensor(np.zeros((2, 3, 4), np.float32))}),
        ("diff_src shape", "OPGEN_INVALID_SHAPE", "diff_src", {"diff_src": Tensor(np.zeros((2, 15), np.float32))}),
        ("diff_slope shape", "OPGEN_INVALID_SHAPE", "diff_slope", {"diff_slope": Tensor(np.zeros(1, np.float32))}),
        ("layout", "OPGEN_INVALID_ATTRIBUTE", "data_format", {"layout": 7}),
        ("overflow", "OPGEN_SIZE_OVERFLOW", "src", {"src": huge}),
        ("misaligned", "OPGEN_MISALIGNED_DATA", "src", {"src": misaligned_tensor}),
        ("overlap", "OPGEN_OVERLAPPING_TENSORS", "diff_src", {"diff_src": Tensor(src)}),
    ], (src, slope, diff_dst, diff_src, diff_slope)


CASES, OPERANDS = _prelu_status_cases()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_prelu_rule_has_its_status(case):
    _, status_name, argument, changes = case
    src, slope, diff_dst, diff_src, diff_slope = (a.copy() for a in OPERANDS)
    tensors = [Tensor(a) for a in (src, slope, diff_dst, diff_src, diff_slope)]
    changes = dict(changes)
    layout = changes.pop("layout", None)
    pointers = {k: (None if v is None else v.pointer) for k, v in changes.items()}
    if "diff_src" in changes and changes["diff_src"].array is OPERANDS[0]:
        pointers["diff_src"] = tensors[0].pointer  # really the same memory as src
    status = prelu_call(tensors, layout=layout, **pointers)
    assert status == STATUS[status_name], f"{status} {last_error()}"
    message = last_error()
    assert message.startswith(f"opgen_prelu_backward: {argument}: "), message
    assert ffi.string(lib.opgen_status_string(status)).decode() == c_api.STATUSES[status][1]
    assert np.all(diff_src == 7) and np.all(diff_slope == 7), "an output was written by a failed call"


def test_optional_outputs_go_together_and_gamma_is_ignored_without_them():
    generator = rng("c_api", "bn-combination")
    src, diff_dst = data(generator, (2, 3, 4), "f32"), data(generator, (2, 3, 4), "f32")
    mean, variance, gamma = np.zeros(3, np.float32), np.ones(3, np.float32), np.full(3, 2, np.float32)
    diff_src, diff_gamma = np.full((2, 3, 4), 7, np.float32), np.full(3, 7, np.float32)
    tensors = [Tensor(a) for a in (src, diff_dst, mean, variance, gamma, diff_src, diff_gamma)]
    p = [t.pointer for t in tensors]
    status = lib.opgen_batch_norm_training_backward(*p[:6], p[6], ffi.NULL, 1e-5, lib.OPGEN_DATA_FORMAT_NCX)
    assert status == STATUS["OPGEN_INVALID_COMBINATION"] and "diff_beta" in last_error()
    assert np.all(diff_src == 7)
    bad_gamma = Tensor(np.ones(5, np.float16))  # ignored: neither checked nor read
    status = lib.opgen_batch_norm_training_backward(
        *p[:4], bad_gamma.pointer, p[5], ffi.NULL, ffi.NULL, 1e-5, lib.OPGEN_DATA_FORMAT_NCX
    )
    assert status == 0, last_error()
    expected = oracle.batch_norm_training_backward(src, diff_dst, mean, variance, epsilon=1e-5, data_format="NCX")
    assert np.allclose(diff_src, expected[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("epsilon", [0.0, -1.0, float("nan"), float("inf")])
def test_attribute_ranges(epsilon):
    tensors = [Tensor(np.ones(s, np.float32)) for s in ((2, 3), (2, 3), (3,), (3,))]
    out = Tensor(np.empty((2, 3), np.float32))
    status = lib.opgen_batch_norm_training_backward(
        *[t.pointer for t in tensors], ffi.NULL, out.pointer, ffi.NULL, ffi.NULL, epsilon, lib.OPGEN_DATA_FORMAT_NXC
    )
    assert status == STATUS["OPGEN_INVALID_ATTRIBUTE"] and "epsilon" in last_error()
    relu = [Tensor(np.ones(4, np.float32)) for _ in range(3)]
    assert lib.opgen_relu_backward(*[t.pointer for t in relu], 2) == STATUS["OPGEN_INVALID_ATTRIBUTE"]
    assert "use_dst" in last_error()


def test_out_of_memory_in_the_one_call_form():
    # 2^43 channels of 2 elements: the per-channel sums cannot be allocated (data is never read)
    channels = 1 << 43
    tensors = [Tensor(np.zeros(1, np.float32), dims=dims) for dims in ((2, channels), (channels,), (2, channels))]
    outputs = [Tensor(np.zeros(1, np.float32), dims=dims) for dims in ((2, channels), (channels,))]
    for t, other in zip(tensors + outputs, range(5)):
        t.pointer.data = ffi.cast("void *", 4096 * (other + 1) * (1 << 48 >> 12))  # distinct, never dereferenced
    status = lib.opgen_prelu_backward(*[t.pointer for t in tensors + outputs], lib.OPGEN_DATA_FORMAT_NXC)
    assert status == STATUS["OPGEN_OUT_OF_MEMORY"], last_error()
    assert "could not allocate" in last_error()


def test_every_status_is_reached():
    reached = {"OPGEN_SUCCESS", "OPGEN_WORKSPACE_TOO_SMALL", "OPGEN_OUT_OF_MEMORY", "OPGEN_INVALID_COMBINATION"}
    reached |= {"OPGEN_INVALID_ATTRIBUTE"} | {case[1] for case in CASES}
    assert reached == set(STATUS), set(STATUS) - reached


# ---- the aclnn-compatible layer ----


class AclTensor:
    """An aclTensor over `storage` (kept alive): view dims, strides and offset in elements."""

    def __init__(self, storage: np.ndarray, dims, strides=None, offset=0, dtype=None, sized=True) -> None:
        self.storage = storage
        acl = {np.dtype(np.float32): lib.ACL_FLOAT, np.dtype(np.float16): lib.ACL_FLOAT16}
        acl[np.dtype(ml_dtypes.bfloat16)] = lib.ACL_BF16
        self.dims = ffi.new("int64_t[]", list(dims) or [0])
        self.strides = ffi.new("int64_t[]", list(strides) or [0]) if strides is not None else ffi.NULL
        storage_dims = ffi.new("int64_t[]", [storage.size]) if sized else ffi.NULL  # NULL: not checked
        data = ffi.from_buffer(storage) if storage.size else ffi.NULL
        code = acl[storage.dtype] if dtype is None else dtype
        self.pointer = lib.aclCreateTensor(
            self.dims, len(dims), code, self.strides, offset, lib.ACL_FORMAT_ND, storage_dims, int(sized), data
        )
        assert self.pointer != ffi.NULL, last_error()

    def __del__(self) -> None:
        lib.aclDestroyTensor(self.pointer)


def dense(array: np.ndarray) -> AclTensor:
    return AclTensor(array.reshape(-1), array.shape)


def strided_view(array: np.ndarray, generator) -> tuple[AclTensor, np.ndarray]:
    """`array`'s values behind a transposed, offset view of a bigger storage."""
    storage = data(generator, (array.size * 2 + 3,), "f32").astype(array.dtype)
    # the storage holds array's transpose (reversed dims) from element 3 on
    transposed = np.ascontiguousarray(array.T)
    storage[3 : 3 + array.size] = transposed.reshape(-1)
    strides = [int(s) for s in np.cumprod((1, *array.shape[:-1]))]
    return AclTensor(storage, array.shape, strides, offset=3), storage


ACLNN = next(spec for spec in opgen.bundled.specs if spec.name == "aclnn_prelu_backward")


def aclnn_row(dtype: str) -> dict[str, str]:
    return next(row for row in ACLNN.dtypes if row["self"] == dtype)


def aclnn_run(grad_output, self_, weight, grad_input, grad_weight):
    size = ffi.new("uint64_t *")
    executor = ffi.new("aclOpExecutor **")
    status = lib.aclnnPreluBackwardGetWorkspaceSize(
        *[t.pointer if t is not None else ffi.NULL for t in (grad_output, self_, weight, grad_input, grad_weight)],
        size,
        executor,
    )
    if status != SUCCESS:
        return status, size[0], None
    workspace = np.zeros(max(1, size[0]), np.uint8)
    status = lib.aclnnPreluBackward(ffi.from_buffer(workspace), size[0], executor[0], ffi.NULL)
    return status, size[0], executor[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16], ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("strided", [False, True], ids=["dense", "strided"])
def test_aclnn_prelu_backward(dtype, strided):
    name = {np.float32: "f32", np.float16: "f16"}.get(dtype, "bf16")
    generator = rng("aclnn", name, strided)
    shape = (2, 3, 4, 5)
    self_ = data(generator, shape, name)
    grad_output = data(generator, (4, 5), name)  # broadcasts to self
    weight = data(generator, (3,), name)
    grad_input = np.zeros(shape, dtype)
    grad_weight = np.zeros(3, dtype)
    if strided:
        self_tensor, _ = strided_view(self_, generator)
        grad_input_tensor, grad_input_storage = strided_view(grad_input, generator)
    else:
        self_tensor, grad_input_tensor = dense(self_), dense(grad_input)
    status, _, _ = aclnn_run(dense(grad_output), self_tensor, dense(weight), grad_input_tensor, dense(grad_weight))
    assert status == SUCCESS, last_error()
    if strided:  # read the result back through the view
        grad_input = np.lib.stride_tricks.as_strided(
            grad_input_storage[3:], shape, [s * grad_input_storage.itemsize for s in (1, 2, 6, 24)]
        )
    expected = oracle.aclnn_prelu_backward(grad_output, self_, weight)
    assert_ulps(np.ascontiguousarray(grad_input), expected[0], name, 1, "aclnn gradInput")
    terms = np.abs(self_.astype(np.float64) * grad_output.astype(np.float64))
    bound = stated_bound(ACLNN, aclnn_row(name), "grad_weight", terms.sum(axis=(0, 2, 3)), 40)
    assert_within(grad_weight, expected[1], name, bound, "aclnn gradWeight")


def test_aclnn_statuses():
    generator = rng("aclnn", "statuses")
    self_, grad_output = data(generator, (2, 3, 4), "f32"), data(generator, (2, 3, 4), "f32")
    weight, grad_input, grad_weight = np.ones(3, np.float32), np.zeros((2, 3, 4), np.float32), np.zeros(3, np.float32)
    tensors = [dense(a) for a in (grad_output, self_, weight, grad_input, grad_weight)]
    size, executor = ffi.new("uint64_t *"), ffi.new("aclOpExecutor **")
    phase_one = lib.aclnnPreluBackwardGetWorkspaceSize
    assert phase_one(*[t.pointer for t in tensors[:4]], ffi.NULL, size, executor) == NULLPTR
    assert phase_one(*[t.pointer for t in tensors], ffi.NULL, executor) == NULLPTR
    for bad, index in [
        (dense(np.ones(4, np.float32)), 2),  # weight count neither C nor 1
        (dense(np.ones((2, 4), np.float32)), 0),  # gradOutput does not broadcast to self
        (dense(np.ones((2, 3, 5), np.float32)), 3),  # gradInput not self's shape
        (dense(np.ones((1, 3), np.float32)), 4),  # gradWeight [C] for a per-channel weight
        (dense(np.ones(3, np.float16)), 2),  # dtypes differ
        (AclTensor(np.ones(3, np.float32), (3,), dtype=3), 2),  # ACL_INT32
        (AclTensor(np.ones(3, np.float32), (3,), strides=(2,)), 2),  # the view leaves its storage
        (AclTensor(np.ones(1, np.float32), (1,) * 9), 2),  # more than 8 dims
    ]:
        trial = list(tensors)
        trial[index] = bad
        assert phase_one(*[t.pointer for t in trial], size, executor) == INVALID, index
    assert np.all(grad_input == 0)
    # an executor runs once
    assert phase_one(*[t.pointer for t in tensors], size, executor) == SUCCESS, last_error()
    workspace = np.zeros(size[0] + 1, np.uint8)
    assert lib.aclnnPreluBackward(ffi.from_buffer(workspace), 0 if size[0] else 0, ffi.NULL, ffi.NULL) == NULLPTR
    if size[0]:
        assert lib.aclnnPreluBackward(ffi.from_buffer(workspace), size[0] - 1, executor[0], ffi.NULL) == INVALID
    assert lib.aclnnPreluBackward(ffi.from_buffer(workspace), size[0], executor[0], ffi.NULL) == SUCCESS
    assert np.any(grad_input != 0)
    grad_input[...] = 0  # the refused runs below must not write it
    assert lib.aclnnPreluBackward(ffi.from_buffer(workspace), size[0], executor[0], ffi.NULL) == INVALID
    assert "ran already" in last_error()
    # an executor that will not run is destroyed, once; then it cannot run
    assert lib.aclDestroyAclOpExecutor(executor[0]) == INVALID  # it ran (and was freed)
    assert "ran already" in last_error()
    assert lib.aclDestroyAclOpExecutor(ffi.NULL) == NULLPTR
    assert phase_one(*[t.pointer for t in tensors], size, executor) == SUCCESS, last_error()
    assert lib.aclDestroyAclOpExecutor(executor[0]) == SUCCESS, last_error()
    assert lib.aclDestroyAclOpExecutor(executor[0]) == INVALID
    assert "was destroyed" in last_error()
    assert lib.aclnnPreluBackward(ffi.from_buffer(workspace), size[0], executor[0], ffi.NULL) == INVALID
    assert np.all(grad_input == 0)


def test_aclnn_single_weight_and_empty():
    generator = rng("aclnn", "single")
    self_, grad_output = data(generator, (3, 2), "f32"), data(generator, (3, 2), "f32")
    weight = np.full((1, 1), 0.25, np.float32)
    grad_input, grad_weight = np.zeros((3, 2), np.float32), np.zeros((1, 1), np.float32)
    status, _, _ = aclnn_run(*(dense(a) for a in (grad_output, self_, weight, grad_input, grad_weight)))
    assert status == SUCCESS, last_error()
    expected = oracle.aclnn_prelu_backward(grad_output, self_, weight)
    assert_ulps(grad_input, expected[0], "f32", 1, "single weight gradInput")
    # gradWeight takes a single-element weight's own shape: [1] is wrong for [1, 1]
    status, _, _ = aclnn_run(*(dense(a) for a in (grad_output, self_, weight, grad_input, np.zeros(1, np.float32))))
    assert status == INVALID
    # empty self: success with no workspace; gradWeight is zero
    empty = np.zeros((0, 3), np.float32)
    grad_weight = np.full(3, 7, np.float32)
    status, size, _ = aclnn_run(
        dense(empty), dense(empty), dense(np.ones(3, np.float32)), dense(empty.copy()), dense(grad_weight)
    )
    assert (status, size) == (SUCCESS, 0), last_error()
    assert np.all(grad_weight == 0)
    assert math.isfinite(float(grad_weight.sum()))


def test_aclnn_workspace_that_would_overflow_size_t():
    # gradOutput and self repeat one element (strides 0) over [2, m]; gradInput is [2, m] in
    # column order (never written: phase one fails). Staging each densely needs 6.1e18 bytes,
    # the three together more than size_t counts.
    half = 768614336404564651
    repeated = [AclTensor(np.ones(1, np.float32), (2, half), strides=(0, 0)) for _ in range(2)]
    dims, strides = ffi.new("int64_t[]", [2, half]), ffi.new("int64_t[]", [1, 2])
    grad_input = SimpleNamespace(
        pointer=lib.aclCreateTensor(
            dims, 2, lib.ACL_FLOAT, strides, 0, lib.ACL_FORMAT_ND, ffi.NULL, 0, ffi.cast("void *", 3 << 61)
        )
    )
    single = [dense(np.ones(1, np.float32)), dense(np.zeros(1, np.float32))]
    status, size, _ = aclnn_run(*repeated, single[0], grad_input, single[1])
    lib.aclDestroyTensor(grad_input.pointer)
    assert (status, size) == (INVALID, 0)
    assert "workspaceSize" in last_error() and "size_t" in last_error(), last_error()


def test_aclnn_outputs_written_once_in_memory_no_other_output_uses():
    generator = rng("aclnn", "overlap")
    self_, grad_output = data(generator, (2, 3), "f32"), data(generator, (2, 3), "f32")
    weight = np.full(3, 0.25, np.float32)
    inputs = [dense(a) for a in (grad_output, self_, weight)]
    storage = np.full(16, 7, np.float32)
    cases = [
        # gradInput's stride 0 writes its 3 columns to one element
        (AclTensor(storage, (2, 3), strides=(3, 0)), dense(np.zeros(3, np.float32)), "more than once"),
        # gradInput every other element of the storage, gradWeight inside the span it covers
        (AclTensor(storage, (2, 3), strides=(6, 2)), AclTensor(storage, (3,), offset=1), "overlaps gradWeight"),
        # both dense: gradWeight inside gradInput
        (AclTensor(storage, (2, 3)), AclTensor(storage, (3,), offset=2), "overlaps gradWeight"),
        # a dense output over a dense input
        (AclTensor(self_.reshape(-1), (2, 3)), dense(np.zeros(3, np.float32)), "overlaps self"),
    ]
    for grad_input, grad_weight, fragment in cases:
        status, size, _ = aclnn_run(*inputs, grad_input, grad_weight)
        assert (status, size) == (INVALID, 0), fragment
        assert fragment in last_error(), last_error()
    assert np.all(storage == 7)
    # a strided gradInput over a strided self is staged (read before, written after): allowed
    expected = oracle.aclnn_prelu_backward(grad_output, self_, weight)
    shared = np.zeros(8, np.float32)
    shared[1:7] = self_.T.reshape(-1)  # self[i, j] at 1 + i + 2 j
    view = AclTensor(shared, (2, 3), strides=(1, 2), offset=1)
    grad_weight = np.zeros(3, np.float32)
    status, _, _ = aclnn_run(inputs[0], view, inputs[2], view, dense(grad_weight))
    assert status == SUCCESS, last_error()
    assert_ulps(shared[1:7].reshape(3, 2).T, expected[0], "f32", 1, "in-place strided gradInput")
    terms = np.abs(self_.astype(np.float64) * grad_output.astype(np.float64))
    bound = stated_bound(ACLNN, aclnn_row("f32"), "grad_weight", terms.sum(axis=0), 2)
    assert_within(grad_weight, expected[1], "f32", bound, "in-place strided gradWeight")


def test_aclnn_misaligned_and_overflowing_views_fail_in_phase_one():
    raw = np.zeros(64, np.uint8)
    dims = ffi.new("int64_t[]", [2, 3])
    misaligned = SimpleNamespace(
        pointer=lib.aclCreateTensor(
            dims, 2, lib.ACL_FLOAT, ffi.NULL, 0, lib.ACL_FORMAT_ND, ffi.NULL, 0, ffi.from_buffer(raw) + 2
        )
    )
    generator = rng("aclnn", "misaligned")
    tensors = [dense(data(generator, (2, 3), "f32")) for _ in range(2)]
    tensors += [dense(np.ones(3, np.float32)), dense(np.zeros((2, 3), np.float32)), dense(np.zeros(3, np.float32))]
    trial = list(tensors)
    trial[1] = misaligned
    status, size, _ = aclnn_run(*trial)
    assert (status, size) == (INVALID, 0) and "self: tensorData + offset is not aligned" in last_error(), last_error()
    lib.aclDestroyTensor(misaligned.pointer)
    # dims whose product passes int64, without strides: no tensor
    huge = ffi.new("int64_t[]", [1 << 40, 1 << 40])
    tensor = lib.aclCreateTensor(huge, 2, lib.ACL_FLOAT, ffi.NULL, 0, lib.ACL_FORMAT_ND, ffi.NULL, 0, ffi.NULL)
    assert tensor == ffi.NULL and "more elements than 64 bits" in last_error()
    # an offset beyond the reach of a 64-bit index is named as the offset
    far = AclTensor(np.zeros(1, np.float32), (2,), strides=(1,), offset=(1 << 63) - 1, sized=False)
    trial = list(tensors)
    trial[1] = far
    status, _, _ = aclnn_run(*trial)
    assert status == INVALID and "offset 9223372036854775807" in last_error(), last_error()


def test_workspace_sharing_memory_with_a_tensor_is_refused():
    src, slope, diff_dst, diff_src, diff_slope = prelu_operands((2, 3, 40), seed="workspace")
    tensors = [Tensor(a) for a in (src, slope, diff_dst, diff_src, diff_slope)]
    size = ffi.new("size_t *")
    assert lib.opgen_prelu_backward_workspace_size(*[t.pointer for t in tensors], lib.OPGEN_DATA_FORMAT_NCX, size) == 0
    assert 0 < size[0] <= src.nbytes
    status = lib.opgen_prelu_backward_with_workspace(
        *[t.pointer for t in tensors], lib.OPGEN_DATA_FORMAT_NCX, ffi.from_buffer(src), src.nbytes
    )
    assert status == STATUS["OPGEN_OVERLAPPING_TENSORS"] and "workspace: shares memory with src" in last_error()
    assert np.all(diff_src == 7) and np.all(diff_slope == 7)
    # aclnn: the executor stays pending, and runs with a workspace of its own
    generator = rng("aclnn", "workspace")
    self_, grad_output = data(generator, (40, 3), "f32"), data(generator, (40, 3), "f32")
    storage = np.zeros(1024, np.float32)
    grad_input = AclTensor(storage, (40, 3), strides=(1, 40))  # staged: the call needs a workspace
    acl = [dense(grad_output), dense(self_), dense(np.ones(3, np.float32)), grad_input, dense(np.zeros(3, np.float32))]
    needed, executor = ffi.new("uint64_t *"), ffi.new("aclOpExecutor **")
    assert lib.aclnnPreluBackwardGetWorkspaceSize(*[t.pointer for t in acl], needed, executor) == SUCCESS
    assert 0 < needed[0] <= storage.nbytes
    assert lib.aclnnPreluBackward(ffi.from_buffer(storage), needed[0], executor[0], ffi.NULL) == INVALID
    assert "workspace: shares memory with gradInput" in last_error(), last_error()
    workspace = np.zeros(needed[0], np.uint8)
    assert lib.aclnnPreluBackward(ffi.from_buffer(workspace), needed[0], executor[0], ffi.NULL) == SUCCESS
    expected = oracle.aclnn_prelu_backward(grad_output, self_, np.ones(3, np.float32))
    assert_ulps(storage[:120].reshape(3, 40).T, expected[0], "f32", 1, "gradInput after the refused run")


@pytest.mark.parametrize(
    "op, attributes, index, value",
    [
        ("relu_backward", [1.0], 0, 0.5),
        ("relu_backward", [1.0], 0, float("nan")),
        ("relu_backward", [1.0], 0, 2.0**32 + 1),
        ("prelu_backward", [1.0], 0, 1.9),
        ("hard_sigmoid_backward", [0.2, 0.5], 0, 1e300),
        ("hard_sigmoid_backward", [0.2, 0.5], 1, float("inf")),
        ("hard_sigmoid_backward", [0.2, 0.5], 1, float("nan")),
    ],
)
def test_with_arrays_takes_only_attribute_values_the_c_types_hold(op, attributes, index, value):
    """A double that is not a whole number in int's range (bools, enums) or that is not a finite
    number in f32's range is refused, not converted (which C leaves undefined or truncates)."""
    count = {"relu_backward": 3, "prelu_backward": 5, "hard_sigmoid_backward": 3}[op]
    operands = ffi.new("opgen_tensor[]", count)
    pointers = ffi.new("void *[]", count)
    arrays = [np.zeros(3, np.float32) for _ in range(count)]
    for operand, pointer_index in zip(operands, range(count)):
        operand.dtype, operand.rank, operand.dims[0] = lib.OPGEN_F32, 1, 3
        pointers[pointer_index] = ffi.from_buffer(arrays[pointer_index])
    values = ffi.new("double[]", attributes)
    values[index] = value
    status = getattr(lib, f"opgen_{op}_with_arrays")(operands, pointers, values, ffi.NULL, 0)
    assert status == STATUS["OPGEN_INVALID_ATTRIBUTE"], last_error()
    assert f"opgen_{op}_with_arrays: " in last_error()


def test_messages_show_rank_zero_and_absent_operands():
    scalar = Tensor(np.zeros((), np.float32))
    vector = Tensor(np.zeros(3, np.float32))
    status = lib.opgen_relu_backward(vector.pointer, scalar.pointer, vector.pointer, 1)
    assert status == STATUS["OPGEN_INVALID_SHAPE"] and "shape [] must equal" in last_error(), last_error()
    operands = ffi.new("opgen_tensor[]", 3)
    for operand in operands:
        operand.dtype, operand.rank, operand.dims[0] = lib.OPGEN_F32, 1, 3
    operands[1].rank = -1
    status = lib.opgen_relu_backward_with_data(operands, ffi.NULL, ffi.NULL, ffi.NULL, 1, ffi.NULL, 0)
    assert status == STATUS["OPGEN_NULL_POINTER"]
    assert "diff_dst: is required (its rank is -1: absent)" in last_error(), last_error()


FAULT_DRIVER = r"""
#undef calloc /* the library's calls go to opgen_test_calloc; this file's to the real one */
#include <stdio.h>
#include <stdlib.h>
#include "opgen.h"
#include "opgen_aclnn.h"

static int failing; /* calloc fails while set */
void *opgen_test_calloc(size_t count, size_t size) { return failing ? NULL : calloc(count, size); }

int main(void)
{
    int64_t dims[1] = { 4 };
    float data[4] = { 0 }, grad[4] = { 0 }, weight[1] = { 0.25f };
    uint64_t size = 0;
    aclOpExecutor *executor = NULL;
    aclTensor *self = aclCreateTensor(dims, 1, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, dims, 1, data);
    aclTensor *grad_output = aclCreateTensor(dims, 1, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, dims, 1, grad);
    int64_t one[1] = { 1 };
    aclTensor *w = aclCreateTensor(one, 1, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, one, 1, weight);
    aclTensor *grad_input = aclCreateTensor(dims, 1, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, dims, 1, grad);
    float grad_weight_data[1];
    aclTensor *gw = aclCreateTensor(one, 1, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, one, 1, grad_weight_data);
    aclnnStatus status;
    failing = 1;
    printf("tensor %s\n", aclCreateTensor(dims, 1, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, dims, 1, data) ? "made" : "NULL");
    status = aclnnPreluBackwardGetWorkspaceSize(grad_output, self, w, grad_input, gw, &size, &executor);
    printf("status %d\n", (int)status);
    printf("%s\n", opgen_last_error());
    return 0;
}
"""


@pytest.mark.slow  # compiles the aclnn library with a failing calloc
def test_aclnn_inner_error_when_memory_runs_out(tmp_path):
    """ACLNN_ERR_INNER: the executor cannot be allocated (calloc made to fail in a test build)."""
    from opgen.compile import compiler
    from opgen.render import render_library

    library = render_library(ops=["aclnn_prelu_backward"], dtypes=["f32"])
    for name, text in library.files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "driver.c").write_text(FAULT_DRIVER)
    sources = [str(p) for p in sorted(tmp_path.glob("*.c"))]
    binary = tmp_path / "driver"
    command = [
        *compiler(),
        "-std=c99",
        "-O0",
        "-Dcalloc=opgen_test_calloc",
        f"-I{tmp_path}",
        *sources,
        "-o",
        str(binary),
    ]
    built = subprocess.run([*command, "-lm"], capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    result = subprocess.run([str(binary)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "tensor NULL"
    assert lines[1] == "status 561000", result.stdout
    assert "executor: could not allocate" in lines[2]


def _largest_cache_bytes() -> int | None:
    """The largest data or unified cache of CPU 0 in Linux's sysfs, read here apart from the C."""
    from pathlib import Path

    found: dict[int, int] = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and size[:-1].isdigit():
            found[level] = int(size[:-1]) * {"K": 1024, "M": 1 << 20, "G": 1 << 30}[size[-1]]
    return found[max(found)] if found else None


def _is_guest() -> bool:
    """A hypervisor runs this CPU: Linux's flags say so (CPUID leaf 1, ECX bit 31), read here
    apart from the C."""
    from pathlib import Path

    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return "hypervisor" in flags


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("given", [None, "1048576", "1000", "0", "-5", "16M", ""])
def test_outputs_stream_from_the_last_level_cache_or_the_environment(given, threads, tmp_path):
    """opgen_stream_threshold: OPGEN_STREAM_BYTES when it is a positive count of bytes (rounded
    up to KiB); else the largest cache the system reports (plan.STREAM_BYTES if none), at most
    plan.STREAM_BYTES on one thread and plan.STREAM_BYTES a thread under a hypervisor. Read in
    a fresh process: the environment is read once. (No tuning kept: tests/test_tune.py checks
    the one `opgen tune` keeps.)"""
    import os
    import sys

    environment = {k: v for k, v in os.environ.items() if k != "OPGEN_STREAM_BYTES"}
    environment["OMP_NUM_THREADS"] = threads
    environment["OPGEN_TUNING_FILE"] = str(tmp_path / "none.json")
    if given is not None:
        environment["OPGEN_STREAM_BYTES"] = given
    code = "import opgen; print(opgen.info()['stream_from_bytes'])"
    result = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True)
    cache = _largest_cache_bytes() or opgen.plan.STREAM_BYTES
    if threads == "1" or _is_guest():
        cache = min(cache, opgen.plan.STREAM_BYTES * int(threads))
    valid = given is not None and given.isdigit() and int(given) > 0
    assert int(result.stdout) == (-(-int(given) // 1024) * 1024 if valid else cache)
