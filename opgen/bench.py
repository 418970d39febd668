"""`opgen bench`: every op variant's speed next to the machine's bandwidth, measured in one run.

For each size and thread count the run first measures bandwidth probes (generated kernels
that only move memory: 2 reads + 1 write with ordinary and with streaming stores, and
2 reads summed), then each case: median time of calls with preallocated outputs (`out=`)
and, above the small sizes, of calls that allocate their outputs ("alloc" GB/s),
GB/s over the minimal bytes (each input read once, each output written once; BatchNorm:
two passes over src and diff_dst plus the diff_src write, 5 tensor transfers), and that
speed as a share of the probe the op's access pattern matches (past the caches: timed in
turn with the case, see PAIRED_PROBE_BYTES). NumPy (f32) and PyTorch (when installed) run
the same math for comparison (PyTorch past the caches in the same turn).
"""

from __future__ import annotations

import functools
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np

import opgen
from opgen.runtime import c_entry_call

# name -> (N, C, H, W); the three sizes of the comparison, small spatial sizes, and few
# channels (a 3-channel input; 24 channels, as in mobile networks), which only run when named
SIZES = {
    "S": (1, 64, 28, 28),
    "M": (8, 64, 56, 56),
    "L": (32, 64, 112, 112),
    "HW1": (16384, 64, 1, 1),
    "HW7": (2048, 64, 7, 1),
    "HW14": (1024, 64, 2, 7),
    "C3": (8, 3, 56, 56),
    "C24": (8, 24, 56, 56),
}
C_CALL_MAX_ELEMENTS = 1 << 17  # sizes at which the C entry point is timed alone too
# Cases that move more bytes than this (past any cache) are timed in turn with the write probe,
# and their share of the bandwidth is of the bandwidth at that moment: on a machine whose other
# tenants come and go, probes measured minutes apart differed 2x (two threads on a guest with
# a shared core). Smaller cases are not: a probe between their calls would evict their data.
PAIRED_PROBE_BYTES = 64 << 20
SHORT_CALL_RUNS = 2000  # at most this many runs of each call at those sizes
DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}
# The ops with axes, along the tensor's last axis (112 elements a line at L): SoftMax and
# LogSoftmax over `axis`, LayerNorm and its backward over the last axis (begin_norm_axis -1).
AXES_OPS = (
    "soft_max",
    "soft_max_backward",
    "log_soft_max",
    "log_soft_max_backward",
    "layer_norm",
    "layer_norm_backward",
)
OPS = (
    "relu_backward",
    "hard_sigmoid_backward",
    "sigmoid_backward",
    "tanh_backward",
    "prelu_backward",
    "batch_norm_training_backward",
    *AXES_OPS,
)
PRELU_FORMS = ("per_channel", "per_tensor", "full")
# SoftMax, LogSoftmax and their backward ops along the last axis (contiguous lines) and along
# axis 1 (a line per position of the other axes, its elements a row apart: the columns path,
# channels in NCHW)
AXIS_FORMS = ("last_axis", "axis_1")
# sigmoid and tanh from their output (use_dst, a product) and from their input (exp per element)
FROM_FORMS = ("from_dst", "from_src")


@dataclass
class Case:
    op: str
    dtype: str
    layout: str
    form: str
    size: str
    threads: int
    seconds: float = 0.0
    gbps: float = 0.0
    bandwidth_share: float = 0.0
    numpy_seconds: float | None = None
    torch_seconds: float | None = None
    c_seconds: float | None = None  # the C entry point alone (small sizes): what the Python call adds is the rest
    allocated_seconds: float | None = None  # the call without out= (large sizes): outputs allocated per call
    bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def _median_times(calls: list[Callable[[], Any]], min_time: float, max_runs: int = 200) -> list[float]:
    """Median seconds of each call, timed in turn (call 1, call 2, ..., call 1, ...) so that a
    change in the machine's load meets them alike."""
    for call in calls:
        call()  # warm-up: first touch of outputs, plan cache
    times: list[list[float]] = [[] for _ in calls]
    started = time.perf_counter()
    while len(times[0]) < 3 or (time.perf_counter() - started < min_time and len(times[0]) < max_runs):
        for call, record in zip(calls, times):
            begin = time.perf_counter()
            call()
            record.append(time.perf_counter() - begin)
    return [statistics.median(record) for record in times]


def _median_time(call: Callable[[], Any], min_time: float, max_runs: int = 200) -> float:
    return _median_times([call], min_time, max_runs)[0]


def _probe_calls(count: int) -> dict[str, tuple[Callable[[], Any], int]]:
    """The generated bandwidth probes on `count` f32 elements: name -> (call, bytes it moves)."""
    module = opgen.bundled.module
    lib, ffi = module.lib, module.ffi
    # from_buffer's pointers keep their arrays alive as long as the calls
    first, second, out = (ffi.from_buffer("float[]", np.ones(count, np.float32)) for _ in range(3))
    result = ffi.from_buffer("double[]", np.zeros(1))
    nbytes = count * 4
    return {
        "copy": (lambda: lib.opgen_probe_copy(first, out, count, 0), 2 * nbytes),
        "2r1w": (lambda: lib.opgen_probe_add(first, second, out, count, 0), 3 * nbytes),
        "2r1w_stream": (lambda: lib.opgen_probe_add(first, second, out, count, 1), 3 * nbytes),
        "2r": (lambda: lib.opgen_probe_dot(first, second, result, count), 2 * nbytes),
        "copy_stream": (lambda: lib.opgen_probe_copy(first, out, count, 1), 2 * nbytes),
    }


def _probes(calls: dict[str, tuple[Callable[[], Any], int]], min_time: float) -> dict[str, float]:
    """GB/s of each probe of _probe_calls."""
    return {name: nbytes / _median_time(call, min_time) / 1e9 for name, (call, nbytes) in calls.items()}


def _logical_shape(size: tuple[int, ...], layout: str) -> tuple[int, ...]:
    n, c, h, w = size
    return (n, c, h, w) if layout == "NCX" else (n, h, w, c)


def _make_case(
    op: str, dtype: str, layout: str, form: str, size: tuple[int, ...], rng: np.random.Generator
) -> tuple[Any, ...]:
    """((opgen function, args, kwargs), NumPy call or None, torch call or None, bytes moved, probe mix)."""
    np_dtype = DTYPES[dtype]
    shape = _logical_shape(size, layout)
    x = rng.standard_normal(shape).astype(np_dtype)
    d = rng.standard_normal(shape).astype(np_dtype)
    out = np.empty(shape, np_dtype)
    itemsize = np.dtype(np_dtype).itemsize
    tensor_bytes = x.size * itemsize
    if op in ("relu_backward", "hard_sigmoid_backward", "sigmoid_backward", "tanh_backward"):
        kwargs = {"alpha": 1 / 6, "beta": 0.5} if op == "hard_sigmoid_backward" else {}
        if form == "from_src":
            kwargs["use_dst"] = False
        function = getattr(opgen, op)
        from_src = form == "from_src"
        numpy_call = _numpy_elementwise(op, x, d, out, from_src) if dtype == "f32" else None
        return (
            (function, (x, d), {"out": out, **kwargs}),
            numpy_call,
            None if from_src else _torch_call(op, x, d, None),  # ATen's take the output
            3 * tensor_bytes,
            "2r1w",
        )
    if op in AXES_OPS:
        return _axes_case(op, x, d, out, rng, 1 if form == "axis_1" else -1)
    if op == "prelu_backward":
        return _prelu_case(x, d, out, dtype == "f32", layout, form, rng)
    if op == "batch_norm_training_backward":
        return _batch_norm_case(x, d, out, dtype == "f32", layout, rng)
    raise ValueError(f"no benchmark for {op}")


def _axes_case(
    op: str, x: np.ndarray, d: np.ndarray, out: np.ndarray, rng: np.random.Generator, axis: int = -1
) -> tuple[Any, ...]:
    """_make_case for the ops with axes, along the last axis (SoftMax and LogSoftmax and their
    backward ops: along `axis`). The forward ops read one tensor and write one (the 1r1w probe:
    a copy), the backward ones read two (2r1w); their per-line and per-position operands are a
    line's share of that."""
    tensor_bytes = x.nbytes
    line: int = x.shape[-1]
    if op in ("soft_max", "log_soft_max"):
        call: tuple[Callable[..., Any], tuple[np.ndarray, ...], dict[str, Any]] = (
            getattr(opgen, op),
            (x,),
            {"axis": axis, "out": out},
        )
        return call, None, None, 2 * tensor_bytes, "1r1w"
    if op in ("soft_max_backward", "log_soft_max_backward"):
        dst = getattr(opgen, op.removesuffix("_backward"))(x, axis=axis)
        call = (getattr(opgen, op), (d, dst), {"axis": axis, "out": out})
        return call, None, None, 3 * tensor_bytes, "2r1w"
    gamma, beta = (rng.standard_normal(line).astype(np.float32) for _ in range(2))
    if op == "layer_norm":
        stats = [np.empty(x.shape[:-1], np.float32) for _ in range(2)]
        call = (opgen.layer_norm, (x, gamma, beta), {"out": (out, *stats)})
        return call, None, None, 2 * tensor_bytes + sum(a.nbytes for a in stats), "1r1w"
    mean = x.mean(axis=-1, dtype=np.float32)
    variance = x.var(axis=-1, dtype=np.float32)
    diff_gamma, diff_beta = np.empty(line, np.float32), np.empty(line, np.float32)
    call = (opgen.layer_norm_backward, (x, d, mean, variance, gamma), {"out": (out, diff_gamma, diff_beta)})
    return call, None, None, 3 * tensor_bytes + mean.nbytes + variance.nbytes, "2r1w"


def _prelu_case(
    x: np.ndarray, d: np.ndarray, out: np.ndarray, f32: bool, layout: str, form: str, rng: np.random.Generator
) -> tuple[Any, ...]:
    """_make_case for PReLU backward; `form`: the slope's shape."""
    shape = x.shape
    channels: int = x.shape[1 if layout == "NCX" else -1]
    np_dtype = x.dtype
    tensor_bytes = x.nbytes
    x32, d32, out32 = (x, d, out) if f32 else (None, None, None)
    axis = 1 if layout == "NCX" else len(shape) - 1
    slope_shape = {"per_channel": (channels,), "per_tensor": (1,), "full": shape[1:]}[form]
    slope = (rng.random(slope_shape) * 0.5).astype(np_dtype)
    diff_slope = np.empty(slope_shape, np_dtype)
    numpy_call = None
    if x32 is not None and d32 is not None and out32 is not None:
        view = [1] * len(shape)
        if form == "per_channel":
            view[axis] = channels
        elif form == "full":
            view = [1, *slope_shape]
        axes = tuple(i for i, s in enumerate(view) if s == 1)
        slope_view = slope.reshape(view)

        def numpy_call() -> None:
            positive = x32 > 0
            np.multiply(d32, slope_view, out=out32)
            np.copyto(out32, d32, where=positive)
            np.sum(np.where(positive, 0, x32 * d32), axis=axes).reshape(slope_shape)

    torch_call = _torch_call("prelu_backward", x, d, slope) if form == "per_channel" and layout == "NCX" else None

    call = (opgen.prelu_backward, (x, slope, d), {"data_format": layout, "out": (out, diff_slope)})
    return call, numpy_call, torch_call, 3 * tensor_bytes + 2 * slope.nbytes, "2r1w"


def _batch_norm_case(
    x: np.ndarray, d: np.ndarray, out: np.ndarray, f32: bool, layout: str, rng: np.random.Generator
) -> tuple[Any, ...]:
    """_make_case for BatchNorm training backward."""
    shape = x.shape
    channels: int = x.shape[1 if layout == "NCX" else -1]
    tensor_bytes = x.nbytes
    x32, d32, out32 = (x, d, out) if f32 else (None, None, None)
    axis = 1 if layout == "NCX" else len(shape) - 1
    axes = tuple(i for i in range(len(shape)) if i != axis)
    stats = [rng.standard_normal(channels).astype(np.float32) for _ in range(2)]
    mean, gamma = stats
    variance = (rng.random(channels) + 0.5).astype(np.float32)
    diff_gamma, diff_beta = np.empty(channels, np.float32), np.empty(channels, np.float32)

    call = (
        opgen.batch_norm_training_backward,
        (x, d, mean, variance, gamma),
        {"epsilon": 1e-5, "data_format": layout, "out": (out, diff_gamma, diff_beta)},
    )

    numpy_call = None
    if x32 is not None and d32 is not None and out32 is not None:
        view = [1] * len(shape)
        view[axis] = channels

        def numpy_call() -> None:
            inv_std = (1 / np.sqrt(variance + 1e-5)).reshape(view)
            x_hat = (x32 - mean.reshape(view)) * inv_std
            beta_sum = d32.sum(axis=axes, keepdims=True)
            gamma_sum = (d32 * x_hat).sum(axis=axes, keepdims=True)
            count = x32.size // channels
            np.multiply(gamma.reshape(view) * inv_std, d32 - beta_sum / count - x_hat * gamma_sum / count, out=out32)

    torch_call = _torch_call("batch_norm_training_backward", x, d, (mean, variance, gamma)) if layout == "NCX" else None
    return call, numpy_call, torch_call, 5 * tensor_bytes, "bn"


def _numpy_elementwise(op: str, x: np.ndarray, d: np.ndarray, out: np.ndarray, from_src: bool) -> Callable[[], Any]:
    if from_src and op == "sigmoid_backward":
        return lambda: np.multiply(d, 1 / (1 + np.exp(-x)) * (1 - 1 / (1 + np.exp(-x))), out=out)
    if from_src:
        return lambda: np.multiply(d, 1 - np.tanh(x) ** 2, out=out)
    if op == "relu_backward":
        return lambda: np.multiply(d, x > 0, out=out)
    if op == "hard_sigmoid_backward":
        return lambda: np.multiply(d, np.float32(1 / 6) * ((x > -3) & (x < 3)), out=out)
    if op == "sigmoid_backward":
        return lambda: np.multiply(d, x * (1 - x), out=out)
    return lambda: np.multiply(d, 1 - x * x, out=out)


def _torch_call(op: str, x: np.ndarray, d: np.ndarray, extra: Any) -> Callable[[], Any] | None:
    """The same op through PyTorch's ATen, when PyTorch is installed (NCX layout, f32/bf16/f16)."""
    try:
        import torch
    except ImportError:
        return None
    dtype = {
        np.dtype(np.float32): torch.float32,
        np.dtype(np.float16): torch.float16,
        np.dtype(ml_dtypes.bfloat16): torch.bfloat16,
    }[x.dtype]
    tx = torch.from_numpy(x.astype(np.float32)).to(dtype)
    td = torch.from_numpy(d.astype(np.float32)).to(dtype)
    aten = torch.ops.aten
    if op == "relu_backward":
        result = torch.empty_like(tx)
        return lambda: aten.threshold_backward.grad_input(td, tx, 0, grad_input=result)
    if op == "hard_sigmoid_backward":
        result = torch.empty_like(tx)
        return lambda: aten.hardsigmoid_backward.grad_input(td, tx, grad_input=result)
    if op == "sigmoid_backward":
        result = torch.empty_like(tx)
        return lambda: aten.sigmoid_backward.grad_input(td, tx, grad_input=result)
    if op == "tanh_backward":
        result = torch.empty_like(tx)
        return lambda: aten.tanh_backward.grad_input(td, tx, grad_input=result)
    if op == "prelu_backward":
        weight = torch.from_numpy(extra.astype(np.float32)).to(dtype).reshape(-1, *([1] * (x.ndim - 2)))
        return lambda: aten._prelu_kernel_backward(td, tx, weight)
    if op == "batch_norm_training_backward":
        mean, variance, gamma = (torch.from_numpy(a) for a in extra)
        invstd = 1 / torch.sqrt(variance + 1e-5)
        return lambda: aten.native_batch_norm_backward(
            td, tx, gamma, None, None, mean, invstd, True, 1e-5, [True, True, True]
        )
    return None


def machine() -> dict[str, Any]:
    """Where a run ran, for the reports of `opgen bench` and its comparisons: the platform, the
    processor, its CPUs, the kernels' copy opgen runs, and the thread policy and store kind
    its calls ran under (opgen.h; `tuned`: which of the two a kept `opgen tune` set)."""
    info = opgen.info()
    return {
        "platform": platform.platform(),
        "processor": platform.processor(),
        "cpus": os.cpu_count(),
        "opgen_target": info["cpu_target"],
        "parallel_threshold": info["parallel_threshold"],
        "stream_from_bytes": info["stream_from_bytes"],
        "tuned": info["tuned"],
    }


def policy_line(machine: dict[str, Any]) -> str:
    """The thread threshold and the stream threshold a report's calls ran under, in words."""
    tuned = f" ({' and '.join(machine['tuned'])} kept by `opgen tune`)" if machine.get("tuned") else ""
    return (
        f"calls take threads from {machine.get('parallel_threshold', '?')} elements of work, stream from"
        f" {machine.get('stream_from_bytes', '?')} bytes{tuned}"
    )


def cases(ops: list[str], dtypes: list[str]) -> list[tuple[str, str, str, str]]:
    result = []
    for op in ops:
        layouts = ("NCX", "NXC") if op in ("prelu_backward", "batch_norm_training_backward") else ("NCX",)
        forms = {"prelu_backward": PRELU_FORMS, "sigmoid_backward": FROM_FORMS, "tanh_backward": FROM_FORMS}.get(
            op, AXIS_FORMS if op in AXES_OPS and "soft_max" in op else ("-",)
        )
        for dtype in dtypes:
            for layout in layouts:
                for form in forms:
                    result.append((op, dtype, layout if len(layouts) > 1 else "-", form))
    return result


def run(
    sizes: list[str],
    threads: list[int],
    ops: list[str],
    dtypes: list[str],
    min_time: float,
    baselines: bool = True,
    progress: Callable[[str], None] = print,
) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    rows: list[Case] = []
    probes: dict[str, dict[str, float]] = {}
    torch: ModuleType | None
    try:
        import torch
    except ImportError:
        torch = None
    torch_version: str | None = None if torch is None else torch.__version__
    try:
        for size_name in sizes:
            size = SIZES[size_name]
            count = math.prod(size)
            for thread_count in threads:
                opgen.set_num_threads(thread_count)
                if torch is not None:
                    torch.set_num_threads(thread_count)
                key = f"{size_name}/{thread_count}"
                probe_calls = _probe_calls(count)
                before = _probes(probe_calls, min_time)
                # the better of the write probes, timed in turn with each case past PAIRED_PROBE_BYTES
                for op, dtype, layout, form in cases(ops, dtypes):
                    (function, args, kwargs), numpy_call, torch_call, nbytes, pattern = _make_case(
                        op, dtype, layout if layout != "-" else "NCX", form, size, rng
                    )
                    write_probe = max(_write_probes(pattern), key=lambda name: before[name])
                    case = Case(op, dtype, layout, form, size_name, thread_count, bytes=nbytes)
                    python_call = functools.partial(function, *args, **kwargs)
                    probe = probe_calls[write_probe] + (write_probe,)
                    _time_case(case, python_call, numpy_call, torch_call, probe, count, min_time, baselines)
                    if count > C_CALL_MAX_ELEMENTS:
                        # what a caller without out= sees: fresh outputs, their pages faulted in
                        fresh = {name: value for name, value in kwargs.items() if name != "out"}
                        case.allocated_seconds = _median_time(functools.partial(function, *args, **fresh), min_time / 2)
                    case.extra["pattern"] = pattern
                    rows.append(case)
                    progress(format_row(case))
                after = _probes(probe_calls, min_time)
                probes[key] = {name: max(before[name], after[name]) for name in before}
                for case in rows:
                    if f"{case.size}/{case.threads}" == key:
                        case.bandwidth_share = _share(case, probes[key])
    finally:
        opgen.set_num_threads(0)
    return {
        "machine": {
            **machine(),
            "numpy": np.__version__,
            "torch": torch_version,
        },
        "sizes": {name: SIZES[name] for name in sizes},
        "probes_gbps": probes,
        "cases": [asdict(case) for case in rows],
    }


def _time_case(
    case: Case,
    python_call: functools.partial[Any],
    numpy_call: Callable[[], Any] | None,
    torch_call: Callable[[], Any] | None,
    probe: tuple[Callable[[], Any], int, str],
    count: int,
    min_time: float,
    baselines: bool,
) -> None:
    """Times `case` (its Python call, the C call or the write probe `probe` in turn with it, the
    baselines) into its fields."""
    if count <= C_CALL_MAX_ELEMENTS:
        # short calls: many runs, the C entry point in turn with the Python call
        function, args, kwargs = python_call.func, python_call.args, python_call.keywords
        both: list[Callable[[], Any]] = [python_call, c_entry_call(function, *args, **kwargs)]
        case.seconds, case.c_seconds = _median_times(both, min_time, SHORT_CALL_RUNS)
    elif case.bytes > PAIRED_PROBE_BYTES:
        # PyTorch's call in the same turn too: its ratio is then of the same moment
        probe_call, probe_bytes, write_probe = probe
        turn: list[Callable[[], Any]] = [python_call, probe_call, *([torch_call] if baselines and torch_call else [])]
        case.seconds, probe_seconds, *torch_seconds = _median_times(turn, min_time)
        case.torch_seconds = torch_seconds[0] if torch_seconds else None
        case.extra["probe"] = write_probe
        case.extra["probe_gbps"] = probe_bytes / probe_seconds / 1e9
    else:
        case.seconds = _median_time(python_call, min_time)
    case.gbps = case.bytes / case.seconds / 1e9
    if baselines and numpy_call is not None and case.threads == 1:
        case.numpy_seconds = _median_time(numpy_call, min_time / 4, max_runs=5)
    if baselines and torch_call is not None and case.torch_seconds is None:
        case.torch_seconds = _median_time(torch_call, min_time / 4, max_runs=20)


def _write_probes(pattern: str) -> tuple[str, str]:
    """The probes (ordinary and streamed stores) an access pattern is measured against: a copy
    for one tensor read and one written, else two read and one written."""
    return ("copy", "copy_stream") if pattern == "1r1w" else ("2r1w", "2r1w_stream")


def _share(case: Case, probe: dict[str, float]) -> float:
    """The op's speed as a share of what its access pattern allows at the measured bandwidths:
    the size's probes, scaled by the write probe timed in turn with the case where there is one."""
    paired = case.extra.get("probe_gbps")
    writes = paired or max(probe[name] for name in _write_probes(case.extra["pattern"]))
    reads = probe["2r"] * (paired / probe[case.extra["probe"]] if paired else 1.0)
    if case.extra.get("pattern") == "bn":
        per_transfer = case.bytes / 5
        return (2 * per_transfer / (reads * 1e9) + 3 * per_transfer / (writes * 1e9)) / case.seconds
    return case.gbps / writes


HEADER = (
    f"{'op':30s} {'dtype':5s} {'layout':6s} {'form':11s} {'size':4s} {'thr':>3s} {'median':>10s} "
    f"{'GB/s':>7s} {'alloc':>7s} {'NumPy x':>8s} {'torch x':>8s} {'C':>8s} {'Py +':>6s}"
)


def format_row(case: Case) -> str:
    numpy_ratio = f"{case.numpy_seconds / case.seconds:8.1f}" if case.numpy_seconds else f"{'-':>8s}"
    torch_ratio = f"{case.torch_seconds / case.seconds:8.1f}" if case.torch_seconds else f"{'-':>8s}"
    c_time, python_added = f"{'-':>8s}", f"{'-':>6s}"
    allocated = f"{case.bytes / case.allocated_seconds / 1e9:7.1f}" if case.allocated_seconds else f"{'-':>7s}"
    if case.c_seconds:
        c_time = f"{case.c_seconds * 1e6:6.1f}us"
        python_added = f"{(case.seconds - case.c_seconds) * 1e6:6.1f}"
    return (
        f"{case.op:30s} {case.dtype:5s} {case.layout:6s} {case.form:11s} {case.size:4s} {case.threads:3d} "
        f"{case.seconds * 1e6:8.1f}us {case.gbps:7.1f} {allocated} {numpy_ratio} {torch_ratio} {c_time} {python_added}"
    )


def table(report: dict[str, Any]) -> str:
    machine = report["machine"]
    lines = [
        f"opgen's {machine['opgen_target']} copy; {policy_line(machine)}",
        "bandwidth probes (GB/s): "
        + "; ".join(
            f"{key}: " + ", ".join(f"{name} {value:.1f}" for name, value in figures.items())
            for key, figures in report["probes_gbps"].items()
        ),
    ]
    lines.append(HEADER + f" {'% bw':>6s}")
    for row in report["cases"]:
        case = Case(**row)
        lines.append(format_row(case) + f" {100 * case.bandwidth_share:5.0f}%")
    return "\n".join(lines)


def plot(report: dict[str, Any], path: str) -> bool:
    """Roofline-style chart: per size, each case's speed as a share of the measured bandwidth (1 and
    all threads side by side; 100 % is the probe its access pattern matches). False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    cases = report["cases"]
    sizes = list(dict.fromkeys(row["size"] for row in cases))
    threads = sorted({row["threads"] for row in cases})
    keys = list(dict.fromkeys((row["op"], row["dtype"], row["layout"], row["form"]) for row in cases))
    figure, axes = plt.subplots(
        len(sizes), 1, figsize=(max(8, len(keys) * 0.35), 2.6 * len(sizes) + 1.5), squeeze=False, sharex=True
    )
    width = 0.8 / len(threads)
    for axis, size in zip(axes[:, 0], sizes):
        for offset, count in enumerate(threads):
            shares = {
                (r["op"], r["dtype"], r["layout"], r["form"]): 100 * r["bandwidth_share"]
                for r in cases
                if r["size"] == size and r["threads"] == count
            }
            axis.bar(
                [i + offset * width for i in range(len(keys))],
                [shares.get(k, 0) for k in keys],
                width,
                label=f"{count} thread{'s' if count > 1 else ''}",
            )
        axis.axhline(100, color="gray", linewidth=0.8, linestyle="--")
        axis.set_ylabel(f"{size}: % of bw")
        axis.legend(fontsize=7, loc="upper right")
    labels = [
        f"{op.replace('_backward', '')} {dtype} {layout} {form}".replace(" - -", "").replace(" -", "")
        for op, dtype, layout, form in keys
    ]
    axes[-1, 0].set_xticks([i + 0.4 - width / 2 for i in range(len(keys))])
    axes[-1, 0].set_xticklabels(labels, rotation=90, fontsize=7)
    figure.suptitle("opgen kernels as a share of the memory bandwidth measured in the same run")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return True


def save(report: dict[str, Any], path: str) -> None:
    with open(path, "w") as handle:
        json.dump(report, handle, indent=1)
