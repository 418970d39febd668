"""`opgen bench --compare torch`: the along_axes ops (SoftMax, LogSoftmax, LayerNorm and
LayerNormBackward) against PyTorch's ATen calls, from Python, on the same input buffers.

Per cell (op, shape, threads) both sides first run once and their outputs must agree (within
1e-4 relative of the larger magnitudes: a check that the two compute the same thing, not the
accuracy contract, which `opgen check` holds); then rounds alternate which side goes first,
each round timing calls for a share of the time budget, and the median of each side's rounds
is reported. Both sides allocate their outputs (the call shapes users make). f32, rows along
the last axis: shapes sized in elements, S in L2, M in the last-level cache of most machines,
L past it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

SHAPES = {"S": (64, 1024), "M": (1024, 1024), "L": (4096, 4096), "T": (8192, 128)}
OPS = ("soft_max", "log_soft_max", "layer_norm", "layer_norm_backward")


def _calls(op: str, shape: tuple[int, int], torch: Any) -> tuple[Callable[[], Any], Callable[[], Any]]:
    import opgen

    generator = np.random.default_rng(20261126)
    x = generator.standard_normal(shape).astype(np.float32)
    xt = torch.from_numpy(x)
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


def table(cells: list[dict[str, Any]]) -> str:
    lines = ["op                   size shape         threads  opgen µs  torch µs  opgen ÷ torch"]
    for c in cells:
        shape = "x".join(map(str, c["shape"]))
        if c["status"] != "timed":
            lines.append(
                f"{c['op']:20} {c['size']:4} {shape:13} {c['threads']:7}  outputs differ by {c['difference']:.2e}"
            )
            continue
        times = f"{c['opgen_us']:9.1f} {c['torch_us']:9.1f}  {c['ratio']:13.2f}"
        lines.append(f"{c['op']:20} {c['size']:4} {shape:13} {c['threads']:7} {times}")
    return "\n".join(lines)
