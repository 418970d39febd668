"""The Python API: names and call shapes, result types, and a clear error for every broken rule."""

from __future__ import annotations

import inspect

import ml_dtypes
import numpy as np
import pytest

import opgen
from opgen import oracle, runtime
from tests.helpers import assert_ulps, data, rng

F32 = np.float32


def arrays(*shapes, dtype=F32, seed="api"):
    generator = rng(seed, shapes, str(dtype))
    return [generator.standard_normal(shape).astype(dtype) for shape in shapes]


def parameters(function):
    return [(p.name, p.kind.name, p.default) for p in inspect.signature(function).parameters.values()]


def test_signatures():
    empty = inspect.Parameter.empty
    assert parameters(opgen.relu_backward) == [
        ("src_or_dst", "POSITIONAL_OR_KEYWORD", empty),
        ("diff_dst", "POSITIONAL_OR_KEYWORD", empty),
        ("use_dst", "KEYWORD_ONLY", True),
        ("out", "KEYWORD_ONLY", None),
    ]
    assert parameters(opgen.hard_sigmoid_backward)[2:-1] == [
        ("alpha", "KEYWORD_ONLY", empty),
        ("beta", "KEYWORD_ONLY", empty),
    ]
    assert parameters(opgen.prelu_backward)[3:] == [
        ("data_format", "KEYWORD_ONLY", "NXC"),
        ("out", "KEYWORD_ONLY", None),
    ]
    assert parameters(opgen.batch_norm_training_backward) == [
        ("src", "POSITIONAL_OR_KEYWORD", empty),
        ("diff_dst", "POSITIONAL_OR_KEYWORD", empty),
        ("mean", "POSITIONAL_OR_KEYWORD", empty),
        ("variance", "POSITIONAL_OR_KEYWORD", empty),
        ("gamma", "POSITIONAL_OR_KEYWORD", None),
        ("epsilon", "KEYWORD_ONLY", empty),
        ("data_format", "KEYWORD_ONLY", "NXC"),
        ("with_diff_gamma_beta", "KEYWORD_ONLY", None),
        ("out", "KEYWORD_ONLY", None),
    ]
    assert [p[0] for p in parameters(opgen.aclnn_prelu_backward)] == ["grad_output", "self", "weight", "out"]
    assert "HardSigmoid" in opgen.hard_sigmoid_backward.__doc__


def test_named_results_and_dtypes():
    src, dd = arrays((2, 3, 4), (2, 3, 4), dtype=ml_dtypes.bfloat16)
    result = opgen.prelu_backward(src, np.ones(4, ml_dtypes.bfloat16), dd)
    assert result._fields == ("diff_src", "diff_slope")
    assert result.diff_src.dtype == ml_dtypes.bfloat16 and result.diff_slope.shape == (4,)
    mean, var, gamma = (np.zeros(4, F32), np.ones(4, F32), np.ones(4, F32))
    bn = opgen.batch_norm_training_backward(src, dd, mean, var, gamma, epsilon=1e-5)
    assert bn._fields == ("diff_src", "diff_gamma", "diff_beta")
    assert bn.diff_src.dtype == ml_dtypes.bfloat16 and bn.diff_gamma.dtype == F32 and bn.diff_beta.dtype == F32
    without = opgen.batch_norm_training_backward(src, dd, mean, var, epsilon=1e-5)
    assert without.diff_gamma is None and without.diff_beta is None
    acl = opgen.aclnn_prelu_backward(dd, src, np.ones((1, 1), ml_dtypes.bfloat16))
    assert acl._fields == ("grad_input", "grad_weight") and acl.grad_weight.shape == (1, 1)


def test_gamma_ignored_without_diff_gamma_beta():
    src, dd, gamma = arrays((3, 5, 4), (3, 5, 4), (4,))
    mean, var = src.mean(axis=(0, 1)), src.var(axis=(0, 1))
    ignored = opgen.batch_norm_training_backward(src, dd, mean, var, gamma, epsilon=1e-5, with_diff_gamma_beta=False)
    absent = opgen.batch_norm_training_backward(src, dd, mean, var, epsilon=1e-5)
    assert np.array_equal(ignored.diff_src, absent.diff_src)
    used = opgen.batch_norm_training_backward(src, dd, mean, var, gamma, epsilon=1e-5)
    assert not np.array_equal(used.diff_src, absent.diff_src)


def test_requested_without_gamma_uses_one():
    src, dd = arrays((3, 5, 4), (3, 5, 4))
    mean, var = src.mean(axis=(0, 1)), src.var(axis=(0, 1))
    got = opgen.batch_norm_training_backward(src, dd, mean, var, epsilon=1e-5, with_diff_gamma_beta=True)
    ones = opgen.batch_norm_training_backward(src, dd, mean, var, np.ones(4, F32), epsilon=1e-5)
    for a, b in zip(got, ones):
        assert np.array_equal(a, b)


def test_non_contiguous_and_read_only_inputs():
    base_src, base_dd = arrays((6, 8, 10), (6, 8, 10))
    src, dd = base_src.transpose(2, 0, 1)[::-1], base_dd[:, ::2].transpose(2, 0, 1)
    src = src[:, :, :4]
    src.flags.writeable = False
    for function, args in [(opgen.relu_backward, (src, dd)), (opgen.tanh_backward, (src, dd))]:
        got = function(*args)
        assert_ulps(got, getattr(oracle, function.__name__)(*args), "f32", 1, function.__name__)
    slope = np.linspace(-1, 1, 4, dtype=F32)[::-1]
    got = opgen.prelu_backward(src, slope, dd)
    expected = oracle.prelu_backward(src, slope, dd)
    assert_ulps(got.diff_src, expected[0], "f32", 1, "strided prelu")


def test_inputs_are_not_modified():
    src, dd, slope = arrays((2, 3, 4), (2, 3, 4), (3,))
    copies = [a.copy() for a in (src, dd, slope)]
    opgen.prelu_backward(src, slope, dd, data_format="NCX")
    assert all(np.array_equal(a, b) for a, b in zip((src, dd, slope), copies))


def test_relu_use_dst_values_agree():
    x, dd = arrays((17,), (17,))
    assert np.array_equal(opgen.relu_backward(x, dd, use_dst=True), opgen.relu_backward(x, dd, use_dst=False))


def test_empty_inputs_give_empty_results():
    empty = np.zeros((0, 3, 4), F32)
    acl = opgen.aclnn_prelu_backward(empty, empty, np.ones(3, F32))
    assert acl.grad_input.shape == (0, 3, 4) and np.array_equal(acl.grad_weight, np.zeros(3, F32))
    pre = opgen.prelu_backward(empty, np.ones(1, F32), empty)
    assert pre.diff_src.shape == (0, 3, 4) and np.array_equal(pre.diff_slope, np.zeros(1, F32))
    assert opgen.relu_backward(np.zeros(0, F32), np.zeros(0, F32)).shape == (0,)


def test_aclnn_shapes_of_grad_weight():
    x, dd = arrays((2, 3, 4), (2, 3, 4))
    assert opgen.aclnn_prelu_backward(dd, x, np.ones((3, 1), F32)).grad_weight.shape == (3,)
    assert opgen.aclnn_prelu_backward(dd, x, np.ones((1, 1, 1), F32)).grad_weight.shape == (1, 1, 1)
    scalar = arrays(())[0]
    assert opgen.aclnn_prelu_backward(scalar, scalar, np.ones((), F32)).grad_weight.shape == ()


BAD_CALLS = [
    # (call, exception, fragments the message must hold)
    (lambda: opgen.relu_backward([1.0], np.ones(1, F32)), TypeError, ["src_or_dst", "NumPy array"]),
    (lambda: opgen.relu_backward(np.ones(1, F32)), TypeError, ["diff_dst"]),
    (lambda: opgen.relu_backward(np.ones(1), np.ones(1)), TypeError, ["src_or_dst", "float64", "not supported"]),
    (
        lambda: opgen.relu_backward(np.ones(1, F32), np.ones(1, np.float16)),
        TypeError,
        ["dtype combination", "src_or_dst f32, diff_dst f16"],
    ),
    (lambda: opgen.relu_backward(np.ones(2, F32), np.ones(3, F32)), ValueError, ["diff_dst", "(3,)", "(2,)"]),
    (lambda: opgen.relu_backward(np.ones(2, F32), np.ones(2, F32), use_dst=1), TypeError, ["use_dst", "True or False"]),
    (lambda: opgen.relu_backward(np.ones(2, F32), np.ones(2, F32), bogus=1), TypeError, ["bogus"]),
    (lambda: opgen.hard_sigmoid_backward(np.ones(2, F32), np.ones(2, F32), alpha=0.2), TypeError, ["beta"]),
    (
        lambda: opgen.hard_sigmoid_backward(np.ones(2, F32), np.ones(2, F32), alpha="a", beta=0.5),
        TypeError,
        ["alpha", "number"],
    ),
    (
        lambda: opgen.hard_sigmoid_backward(np.ones(2, F32), np.ones(2, F32), alpha=1e39, beta=0.5),
        ValueError,
        ["alpha", "f32 range"],
    ),
    (
        lambda: opgen.prelu_backward(np.ones((2, 3), F32), np.ones(3, F32), np.ones((2, 3), F32), data_format="NHWC"),
        ValueError,
        ["data_format", "'NCX', 'NXC'"],
    ),
    (
        lambda: opgen.prelu_backward(np.ones((2, 3, 4), F32), np.ones(5, F32), np.ones((2, 3, 4), F32)),
        ValueError,
        ["slope", "(5,)", "channel length", "1-D of length 1"],
    ),
    (
        lambda: opgen.prelu_backward(np.ones((2, 3, 4), F32), np.ones((2, 2, 1), F32), np.ones((2, 3, 4), F32)),
        ValueError,
        ["slope", "(2, 2, 1)"],
    ),
    (
        lambda: opgen.prelu_backward(np.ones((2, 3, 4), F32), np.ones(4, F32), np.ones((1, 3, 4), F32)),
        ValueError,
        ["diff_dst", "must equal"],
    ),
    (
        lambda: opgen.batch_norm_training_backward(*arrays((4,), (4,), (4,), (4,)), epsilon=1e-5),
        ValueError,
        ["src", "at least 2 dims"],
    ),
    (
        lambda: opgen.batch_norm_training_backward(*arrays((2, 4), (2, 4), (4,), (4,)), epsilon=0.0),
        ValueError,
        ["epsilon", "greater than 0"],
    ),
    (
        lambda: opgen.batch_norm_training_backward(*arrays((2, 4), (2, 4), (4,), (4,)), epsilon=float("nan")),
        ValueError,
        ["epsilon", "finite", "nan"],
    ),
    (
        lambda: opgen.batch_norm_training_backward(*arrays((2, 4), (2, 4), (4,), (4,)), epsilon=float("inf")),
        ValueError,
        ["epsilon", "finite", "inf"],
    ),
    (
        lambda: opgen.hard_sigmoid_backward(np.ones(2, F32), np.ones(2, F32), alpha=0.2, beta=float("-inf")),
        ValueError,
        ["beta", "finite", "-inf"],
    ),
    (lambda: opgen.batch_norm_training_backward(*arrays((2, 4), (2, 4), (4,), (4,))), TypeError, ["epsilon"]),
    (
        lambda: opgen.batch_norm_training_backward(*arrays((2, 4), (2, 4), (3,), (4,)), epsilon=1e-5),
        ValueError,
        ["mean", "(3,)"],
    ),
    (
        lambda: opgen.batch_norm_training_backward(
            *arrays((2, 4), (2, 4), (4,), (4,)), epsilon=1e-5, with_diff_gamma_beta="yes"
        ),
        TypeError,
        ["with_diff_gamma_beta"],
    ),
    (
        lambda: opgen.batch_norm_training_backward(
            *arrays((2, 4), (2, 4), (4,), (4,), (4,), dtype=np.float16), epsilon=1e-5
        ),
        TypeError,
        ["dtype combination"],
    ),
    (
        lambda: opgen.aclnn_prelu_backward(*arrays((2, 3), (2, 3), (2,))),
        ValueError,
        ["weight", "(2,)", "exactly one element", "dim 1"],
    ),
    (
        lambda: opgen.aclnn_prelu_backward(*arrays((2, 4), (2, 3), (3,))),
        ValueError,
        ["grad_output", "does not broadcast"],
    ),
    (lambda: opgen.aclnn_prelu_backward(*arrays((1,) * 9, (1,) * 9, (1,))), ValueError, ["at most 8 dims"]),
    (lambda: opgen.relu_backward(*arrays((1,) * 13, (1,) * 13)), ValueError, ["src_or_dst", "at most 12 dims"]),
    (
        lambda: opgen.hard_sigmoid_backward(np.ones(2, F32), np.ones(2, F32), alpha=10**400, beta=0.5),
        ValueError,
        ["hard_sigmoid_backward(): alpha", "an int of 401 digits", "f32 range"],
    ),
    (
        lambda: opgen.hard_sigmoid_backward(np.ones(2, F32), np.ones(2, F32), alpha=np.bool_(True), beta=0.5),
        TypeError,
        ["alpha", "number"],
    ),
    (
        lambda: opgen.batch_norm_training_backward(*arrays((2, 4), (2, 4), (4,), (4,)), epsilon=1e-46),
        ValueError,
        ["epsilon", "greater than 0.0 as an f32", "1e-46 (0.0 in f32)"],
    ),
    (
        lambda: opgen.prelu_backward(np.ones((2, 3), F32), np.ones(3, np.float16), np.ones((2, 3), F32)),
        TypeError,
        ["prelu_backward(): slope: the dtype combination"],
    ),
    (
        lambda: opgen.prelu_backward(np.ones((2, 3), F32), np.ones(3, F32), np.ones((2, 3), np.float16)),
        TypeError,
        ["prelu_backward(): diff_dst: the dtype combination"],
    ),
    (  # an ignored gamma is still checked
        lambda: opgen.batch_norm_training_backward(
            *arrays((2, 4), (2, 4), (4,), (4,)), np.ones(4), epsilon=1e-5, with_diff_gamma_beta=False
        ),
        TypeError,
        ["gamma", "float64"],
    ),
    (
        lambda: opgen.batch_norm_training_backward(
            *arrays((2, 4), (2, 4), (4,), (4,), (7,)), epsilon=1e-5, with_diff_gamma_beta=False
        ),
        ValueError,
        ["gamma", "(7,)"],
    ),
    (lambda: opgen.aclnn_prelu_backward(*arrays((), (), (3,))), ValueError, ["weight"]),
]


@pytest.mark.parametrize("call,kind,fragments", BAD_CALLS)
def test_bad_input_is_rejected_clearly(call, kind, fragments):
    with pytest.raises(kind) as caught:
        call()
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, message


def test_other_spec_directory(tmp_path):
    """opgen.load builds another spec set; a copy of the bundled specs gives the same results."""
    import shutil

    from opgen.render import BUNDLED_SPECS

    shutil.copytree(BUNDLED_SPECS, tmp_path / "specs")
    library = opgen.load(tmp_path / "specs")
    x, dd = data(rng("load"), (33,), "f16"), data(rng("load2"), (33,), "f16")
    assert np.array_equal(library.relu_backward(x, dd), opgen.relu_backward(x, dd))
    with pytest.raises(AttributeError, match="no op named"):
        library.no_such_op  # noqa: B018


def test_out_is_written_and_returned():
    src, dd, slope = arrays((2, 3, 4), (2, 3, 4), (4,))
    diff_src, diff_slope = np.full((2, 3, 4), 7, F32), np.full(4, 7, F32)
    result = opgen.prelu_backward(src, slope, dd, out=(diff_src, diff_slope))
    assert result.diff_src is diff_src and result.diff_slope is diff_slope
    fresh = opgen.prelu_backward(src, slope, dd)
    assert np.array_equal(diff_src, fresh.diff_src) and np.array_equal(diff_slope, fresh.diff_slope)
    single = np.empty((2, 3, 4), F32)
    assert opgen.relu_backward(src, dd, out=single) is single
    partial = opgen.prelu_backward(src, slope, dd, out=(None, diff_slope))
    assert partial.diff_slope is diff_slope and partial.diff_src is not None
    mean, var = np.zeros(4, F32), np.ones(4, F32)
    bn_out = (np.empty((2, 3, 4), F32), None, None)
    bn = opgen.batch_norm_training_backward(src, dd, mean, var, epsilon=1e-5, out=bn_out)
    assert bn.diff_src is bn_out[0] and bn.diff_gamma is None


BAD_OUT = [
    (lambda s, d: opgen.relu_backward(s, d, out=np.empty((2, 3), F32)), ValueError, ["out (diff_src)", "shape"]),
    (lambda s, d: opgen.relu_backward(s, d, out=np.empty((2, 3, 4), np.float16)), ValueError, ["dtype"]),
    (lambda s, d: opgen.relu_backward(s, d, out=np.empty((2, 3, 8), F32)[:, :, ::2]), ValueError, ["C-contiguous"]),
    (lambda s, d: opgen.relu_backward(s, d, out=[1]), TypeError, ["out"]),
    (lambda s, d: opgen.relu_backward(s, d, out=s), ValueError, ["relu_backward(): diff_src: shares memory"]),
    (  # an input that is copied first (not dense) overlaps `out` all the same
        lambda s, d: opgen.relu_backward(s.reshape(-1)[::2], d.reshape(-1)[:12], out=s.reshape(-1)[12:]),
        ValueError,
        ["relu_backward(): diff_src: shares memory with src_or_dst"],
    ),
    (lambda s, d: opgen.prelu_backward(s, np.ones(4, F32), d, out=np.empty((2, 3, 4), F32)), TypeError, ["tuple"]),
    (
        lambda s, d: opgen.batch_norm_training_backward(
            s, d, np.zeros(4, F32), np.ones(4, F32), epsilon=1e-5, out=(None, np.empty(4, F32), None)
        ),
        ValueError,
        ["not requested"],
    ),
]


@pytest.mark.parametrize("call,kind,fragments", BAD_OUT)
def test_bad_out_is_rejected_and_nothing_is_written(call, kind, fragments):
    src, dd = arrays((2, 3, 4), (2, 3, 4))
    before = src.copy(), dd.copy()
    with pytest.raises(kind) as caught:
        call(src, dd)
    for fragment in fragments:
        assert fragment in str(caught.value), str(caught.value)
    assert np.array_equal(src, before[0]) and np.array_equal(dd, before[1])


def test_read_only_out_is_rejected_before_writing():
    src, dd = arrays((5,), (5,))
    target = np.full(5, 3.0, F32)
    target.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        opgen.relu_backward(src, dd, out=target)
    assert np.all(target == 3.0)


def test_cached_plans_still_check_argument_types():
    """A call that repeats shapes and dtypes reuses its plan; use_dst=1 must not reuse use_dst=True's."""
    src, dd = arrays((7,), (7,))
    opgen.relu_backward(src, dd, use_dst=True)
    with pytest.raises(TypeError, match="use_dst"):
        opgen.relu_backward(src, dd, use_dst=1)


def test_numpy_scalars_are_taken_as_their_python_kind():
    src, dd = arrays((3, 8), (3, 8))
    mean, var = np.zeros(8, F32), np.ones(8, F32)
    for value in (np.float32(0.2), np.float64(0.2), np.int64(1), np.float16(0.5)):
        got = opgen.hard_sigmoid_backward(src, dd, alpha=value, beta=np.float32(0.5))
        assert np.array_equal(got, opgen.hard_sigmoid_backward(src, dd, alpha=float(value), beta=0.5))
    got = opgen.batch_norm_training_backward(src, dd, mean, var, epsilon=np.float32(1e-3))
    assert np.array_equal(got.diff_src, opgen.batch_norm_training_backward(src, dd, mean, var, epsilon=1e-3).diff_src)
    for flag in (np.bool_(False), np.bool_(True)):
        assert np.array_equal(
            opgen.relu_backward(src, dd, use_dst=flag), opgen.relu_backward(src, dd, use_dst=bool(flag))
        )


def test_signed_zero_attributes_keep_their_sign():
    """0.0 == -0.0, so a plan cached for one must not serve the other: alpha's sign is the
    sign of the zero results inside the band."""
    src = np.array([1.0, 2.0, 0.25], F32)
    dd = np.array([3.0, -4.0, 0.0], F32)
    for alpha in (0.0, -0.0, -0.0, 0.0, np.float32(-0.0), np.float32(0.0)):
        for _ in range(2):  # the second call would take a cached plan
            got = opgen.hard_sigmoid_backward(src, dd, alpha=alpha, beta=0.5)
            expected = oracle.hard_sigmoid_backward(src, dd, alpha=alpha, beta=0.5).astype(F32)
            assert np.array_equal(np.signbit(got), np.signbit(expected)), (alpha, got)


def test_tensors_of_up_to_twelve_dims():
    for rank in (9, 12):
        shape = (2, 1, 3) + (1,) * (rank - 4) + (5,)
        src, dd, slope = arrays(shape, shape, (5,))
        for _ in range(2):  # the first call is checked in full, the second takes the fast path
            assert_ulps(opgen.relu_backward(src, dd), oracle.relu_backward(src, dd), "f32", 0, f"relu {rank}-D")
            got = opgen.prelu_backward(src, slope, dd)
            expected = oracle.prelu_backward(src, slope, dd)
            assert_ulps(got.diff_src, expected[0], "f32", 0, f"prelu {rank}-D")


def test_misaligned_and_reversed_inputs_are_computed_correctly():
    """Inputs that start off an element boundary (a byte-offset view) or run backwards."""
    raw = np.random.default_rng(3).standard_normal(64).astype(F32)
    buffer = np.zeros(64 * 4 + 2, np.uint8)
    buffer[2:].view(F32)[:] = raw
    misaligned = buffer[2:].view(F32)
    assert misaligned.ctypes.data % 4 == 2
    reversed_ = raw[::-1]
    for x in (misaligned, reversed_):
        got = opgen.prelu_backward(x.reshape(4, 16), np.full(16, 0.5, F32), raw.reshape(4, 16))
        expected = oracle.prelu_backward(x.reshape(4, 16), np.full(16, 0.5, F32), raw.reshape(4, 16))
        assert_ulps(got.diff_src, expected[0], "f32", 1, "misaligned/reversed")


def test_failed_call_leaves_out_untouched():
    """Validation happens before any write: a bad slope leaves a given out array as it was."""
    src, dd = arrays((2, 3, 4), (2, 3, 4))
    diff_src, diff_slope = np.full((2, 3, 4), 9, F32), np.full(7, 9, F32)
    with pytest.raises(ValueError):
        opgen.prelu_backward(src, np.ones(7, F32), dd, out=(diff_src, diff_slope))
    assert np.all(diff_src == 9) and np.all(diff_slope == 9)


def test_repeated_calls_are_checked_like_the_first():
    """A call that repeats a checked one's types, dtypes, shapes and attributes takes the fast path;
    anything it cannot take (strided, misaligned, a subclass, a bad `out`) is checked in full."""
    src, dd = arrays((4, 16), (4, 16))
    slope = np.full(16, 0.5, F32)
    expected = oracle.prelu_backward(src, slope, dd)
    for _ in range(2):  # the second call repeats the first
        got = opgen.prelu_backward(src, slope, dd)
        assert_ulps(got.diff_src, expected[0], "f32", 1, "repeated")
    wide = np.zeros((4, 32), F32)
    wide[:, ::2] = src
    buffer = np.zeros(src.nbytes + 2, np.uint8)
    misaligned = buffer[2:].view(F32).reshape(src.shape)
    misaligned[...] = src
    subclass = src.view(type("Marked", (np.ndarray,), {}))
    for x in (wide[:, ::2], misaligned, subclass):
        got = opgen.prelu_backward(x, slope, dd)
        assert_ulps(got.diff_src, expected[0], "f32", 1, type(x).__name__)
    for call, kind, fragments in BAD_OUT:
        src23, dd23 = arrays((2, 3, 4), (2, 3, 4))
        opgen.relu_backward(src23, dd23)  # the plans these calls repeat
        opgen.prelu_backward(src23, np.ones(4, F32), dd23)
        with pytest.raises(kind) as caught:
            call(src23, dd23)
        assert all(fragment in str(caught.value) for fragment in fragments), str(caught.value)
    read_only = np.empty((4, 16), F32)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        opgen.relu_backward(src, dd, out=read_only)


def test_calls_cycling_through_many_shapes():
    """More shapes with the same attributes than the fast path keeps plans for, called in turn,
    twice: every call's result is its own; and an array that differs only in byte order from a
    planned one is checked (and rejected) like a first call."""
    shapes = [(n, 3, 2 + n % 4) for n in range(1, runtime.FAST_PLANS + 4)]
    cases = [arrays(shape, (3,), shape, seed=f"cycle{n}") for n, shape in enumerate(shapes)]
    for _ in range(2):
        for src, slope, dd in cases:
            got = opgen.prelu_backward(src, slope, dd, data_format="NCX")
            expected = oracle.prelu_backward(src, slope, dd, data_format="NCX")
            assert_ulps(got.diff_src, expected[0], "f32", 1, f"cycling {src.shape}")
    src, _, dd = cases[0]
    with pytest.raises(TypeError, match=">f4"):
        opgen.relu_backward(src.astype(">f4"), dd)


def test_python_threads_while_plans_are_dropped():
    """Threads calling with more shapes than the fast path keeps: plans leave its list while
    other threads' calls on them run without the GIL; every result is its own."""
    from concurrent.futures import ThreadPoolExecutor

    cases = [arrays((4, 3, 4000 + n), (3,), (4, 3, 4000 + n), seed=f"churn{n}") for n in range(runtime.FAST_PLANS + 3)]
    alone = [opgen.prelu_backward(src, slope, dd, data_format="NCX") for src, slope, dd in cases]

    def run(index: int):
        src, slope, dd = cases[index % len(cases)]
        return index % len(cases), opgen.prelu_backward(src, slope, dd, data_format="NCX")

    with ThreadPoolExecutor(max_workers=4) as pool:
        for index, result in pool.map(run, range(200)):
            assert np.array_equal(result.diff_src, alone[index].diff_src)
            assert np.array_equal(result.diff_slope, alone[index].diff_slope)


def test_python_threads_share_plans():
    """Calls from several Python threads at once (the C call releases the GIL) on one plan:
    each thread's own workspace, each result the one-thread result."""
    from concurrent.futures import ThreadPoolExecutor

    shape = (3, 40, 5)
    inputs = [arrays(shape, (40,), shape, seed=f"thread{i}") for i in range(8)]
    alone = [opgen.prelu_backward(src, slope, dd, data_format="NCX") for src, slope, dd in inputs]

    def run(index: int):
        src, slope, dd = inputs[index % 8]
        return index % 8, opgen.prelu_backward(src, slope, dd, data_format="NCX")

    with ThreadPoolExecutor(max_workers=4) as pool:
        for index, result in pool.map(run, range(64)):
            assert np.array_equal(result.diff_src, alone[index].diff_src)
            assert np.array_equal(result.diff_slope, alone[index].diff_slope)
