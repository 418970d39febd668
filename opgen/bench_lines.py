"""`opgen bench --compare torch`: the ops with axes (SoftMax, LogSoftmax, LayerNorm,
LayerNormBackward, the reductions) and the binary ops against PyTorch's ATen calls, from
Python, on the same input buffers.

Per cell (op, shape, threads) both sides first run once and their outputs must agree (within
1e-4 relative of the larger magnitudes: a check that the two compute the same thing, not the
accuracy contract, which `opgen check` holds); then rounds alternate which side goes first,
each round timing calls for a share of the time budget, and the median of each side's rounds
is reported. Both sides allocate their outputs (the call shapes users make). f32, 2-D shapes
sized in elements, S in L2, M in the last-level cache of most machines, L past it.

An op name says what runs: the along_axes ops and `reduce_<kind>` work along the last axis,
`reduce_<kind>@0` along the first (columns: the kept elements are the inner ones); a binary
op's second input has the first's shape, `<op>@row` one row of it (C,) and `<op>@column` one
column (R, 1), broadcast NumPy's way.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

SHAPES = {"S": (64, 1024), "M": (1024, 1024), "L": (4096, 4096), "T": (8192, 128)}
REDUCTIONS = ("sum", "mean", "max", "min", "prod", "l1", "l2")
BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "squared_difference")
OPS = (
    "soft_max",
    "log_soft_max",
    "layer_norm",
    "layer_norm_backward",
    *(f"reduce_{kind}" for kind in REDUCTIONS),
    "reduce_sum@0",
    "reduce_max@0",
    *BINARY,
    "add@row",
    "add@column",
    "multiply@row",
)


def _torch_reduction(kind: str, torch: Any) -> Callable[[Any, int], Any]:
    norms = {"l1": 1, "l2": 2}
    if kind in norms:
        return lambda t, axis: torch.linalg.vector_norm(t, norms[kind], axis)
    function = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax, "min": torch.amin, "prod": torch.prod}[kind]
    return lambda t, axis: function(t, axis)


def _torch_binary(op: str, torch: Any) -> Callable[[Any, Any], Any]:
    if op == "squared_difference":  # no fused ATen op: PyTorch users write it so
        return lambda a, b: torch.square(torch.sub(a, b))
    function = {
        "add": torch.add,
        "subtract": torch.sub,
        "multiply": torch.mul,
        "divide": torch.div,
        "maximum": torch.maximum,
        "minimum": torch.minimum,
    }[op]
    return lambda a, b: function(a, b)


def _calls(op: str, shape: tuple[int, int], torch: Any) -> tuple[Callable[[], Any], Callable[[], Any]]:
    import opgen

    generator = np.random.default_rng(20261126)
    x = generator.standard_normal(shape).astype(np.float32)
    xt = torch.from_numpy(x)
    name, _, where = op.partition("@")
    if name.startswith("reduce_"):
        kind = name.removeprefix("reduce_")
        if kind == "prod":  # factors near 1, so that a row's product stays a normal float
            x = (1 + generator.standard_normal(shape) / 64).astype(np.float32)
            xt = torch.from_numpy(x)
        axis = 0 if where == "0" else -1
        ours_reduction, theirs_reduction = getattr(opgen, name), _torch_reduction(kind, torch)
        return lambda: ours_reduction(x, axes=[axis]), lambda: theirs_reduction(xt, axis)
    if name in BINARY:
        second_shape = {"": shape, "row": shape[1:], "column": (shape[0], 1)}[where]
        y = generator.standard_normal(second_shape).astype(np.float32)
        if name == "divide":  # divisors away from 0, as a model's would be
            y = np.copysign(np.abs(y) + 0.5, y).astype(np.float32)
        yt = torch.from_numpy(y)
        ours_binary, theirs_binary = getattr(opgen, name), _torch_binary(name, torch)
        return lambda: ours_binary(x, y), lambda: theirs_binary(xt, yt)
    if op == "soft_max":
        return lambda: opgen.soft_max(x, axis=-1), lambda: torch._softmax(xt, -1, False)
    if op == "log_soft_max":
        return lambda: opgen.log_soft_max(x, axis=-1), lambda: torch._log_softmax(xt, -1, False)
    gamma = generator.standard_normal(shape[1]).astype(np.float32)
    beta = generator.standard_normal(shape[1]).astype(np.float32)
    gt, bt = torch.from_numpy(gamma), torch.from_numpy(beta)
    if op == "layer_norm":
        return (
            lambda: opgen.layer_norm(x, gamma, beta, begin_norm_axis=-1),
            lambda: torch.native_layer_norm(xt, [shape[1]], gt, bt, 1e-5),
        )
    _, mean, rstd = torch.native_layer_norm(xt, [shape[1]], gt, bt, 1e-5)
    variance = (1 / rstd.double() ** 2 - 1e-5).float().reshape(-1).numpy()
    mean_np = mean.reshape(-1).numpy()
    dy = generator.standard_normal(shape).astype(np.float32)
    dyt = torch.from_numpy(dy)
    return (
        lambda: opgen.layer_norm_backward(x, dy, mean_np, variance, gamma, begin_norm_axis=-1),
        lambda: torch.ops.aten.native_layer_norm_backward(dyt, xt, [shape[1]], mean, rstd, gt, bt, [True, True, True]),
    )


def _agree(ours: Any, theirs: Any) -> float:
    """The largest difference of the first output, relative to the larger magnitude."""
    first = np.asarray(ours[0] if isinstance(ours, tuple) else ours, np.float64)
    other = theirs[0] if isinstance(theirs, tuple) else theirs
    other = other.double().numpy()
    scale = max(float(np.abs(other).max(initial=0)), 1e-30)
    return float(np.abs(first - other).max(initial=0)) / scale


def _time(call: Callable[[], Any], seconds: float) -> float:
    start, count = time.perf_counter(), 0
    while True:
        call()
        count += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return elapsed / count


def run(sizes: list[str], threads: list[int], ops: list[str], rounds: int, min_time: float) -> list[dict[str, Any]]:
    import torch

    import opgen

    cells = []
    for count in threads:
        torch.set_num_threads(count)
        opgen.set_num_threads(count)
        for size in sizes:
            for op in ops:
                ours, theirs = _calls(op, SHAPES[size], torch)
                difference = _agree(ours(), theirs())
                cell: dict[str, Any] = {"op": op, "size": size, "shape": SHAPES[size], "threads": count}
                if not difference <= 1e-4:
                    cells.append({**cell, "status": "mismatch", "difference": difference})
                    continue
                times: dict[str, list[float]] = {"opgen": [], "torch": []}
                for index in range(rounds):
                    order = [("opgen", ours), ("torch", theirs)]
                    for side, call in order if index % 2 == 0 else reversed(order):
                        times[side].append(_time(call, min_time / rounds))
                medians = {side: statistics.median(values) for side, values in times.items()}
                cells.append(
                    {
                        **cell,
                        "status": "timed",
                        **{f"{s}_us": t * 1e6 for s, t in medians.items()},
                        "ratio": medians["opgen"] / medians["torch"],
                    }
                )
    return cells


def report(cells: list[dict[str, Any]], sizes: list[str], rounds: int) -> dict[str, Any]:
    """The run as `opgen bench --json` writes it: where it ran, the shapes, and the cells."""
    import torch

    from opgen import bench

    return {
        "machine": {**bench.machine(), "numpy": np.__version__, "torch": torch.__version__},
        "sizes": {name: SHAPES[name] for name in sizes},
        "rounds": rounds,
        "cells": cells,
    }


def table(cells: list[dict[str, Any]]) -> str:
    lines = ["op                        size shape         threads  opgen µs  torch µs  opgen ÷ torch"]
    for c in cells:
        shape = "x".join(map(str, c["shape"]))
        if c["status"] != "timed":
            lines.append(
                f"{c['op']:25} {c['size']:4} {shape:13} {c['threads']:7}  outputs differ by {c['difference']:.2e}"
            )
            continue
        times = f"{c['opgen_us']:9.1f} {c['torch_us']:9.1f}  {c['ratio']:13.2f}"
        lines.append(f"{c['op']:25} {c['size']:4} {shape:13} {c['threads']:7} {times}")
    return "\n".join(lines)
