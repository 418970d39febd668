"""Every compiled target and every thread count give bit-identical results.

(NaN counts as equal to NaN: which NaN payload an operation returns depends on operand order.)

The kernels are compiled for several CPU targets (plan.TARGETS) and run on as many threads as
asked; sums use tiles fixed by the shape, the compiler contracts nothing into FMA and f16/bf16
conversions are exact in every target, so nothing may differ by even one bit. One exception,
by design: the math's exp() fuses its series' multiply-adds (fma(), exact by definition) on
targets that have the instruction, so the x86-64 baseline copy's exp may differ in its last
bit. Results that go through exp are identical across the other targets and within 1 ulp of
the oracle on every one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import opgen
from opgen import oracle, plan
from opgen.plan import TARGETS
from opgen.render import BUNDLED_SPECS
from opgen.specs import load_specs
from tests.helpers import assert_ulps, data, dtype_of, rng, run_on_target

SCRIPT = textwrap.dedent("""
    import sys, numpy as np, opgen
    from tests.helpers import data
    generator = np.random.default_rng(7)
    results, inputs = {}, {}
    for dtype in ("f32", "f16", "bf16"):
        x = data(generator, (3, 37, 41), dtype, specials="all")
        d = data(generator, (3, 37, 41), dtype, specials="all")
        slope = data(generator, (41,), dtype)
        results[f"exp_sigmoid_{dtype}"] = opgen.sigmoid_backward(x, d, use_dst=False)
        results[f"exp_tanh_{dtype}"] = opgen.tanh_backward(x, d, use_dst=False)
        # from dst: edge values, and plain values (bf16 blocks then take float_first's path)
        plain = [data(generator, (3, 37, 41), dtype, specials="none") for _ in range(2)]
        for kind, (a, b) in (("edges", (x, d)), ("plain", plain)):
            results[f"sigmoid_{kind}_{dtype}"] = opgen.sigmoid_backward(a, b)
            results[f"tanh_{kind}_{dtype}"] = opgen.tanh_backward(a, b)
        # from src on plain values: blocks in float_first's intervals, which the avx512 copy
        # computes with intrinsics (expr.to_vector) and the avx2 copy with lane loops
        results[f"exp_plain_sigmoid_{dtype}"] = opgen.sigmoid_backward(*plain, use_dst=False)
        results[f"exp_plain_tanh_{dtype}"] = opgen.tanh_backward(*plain, use_dst=False)
        inputs[f"x_{dtype}"], inputs[f"d_{dtype}"] = x, d
        results[f"hsig_{dtype}"] = opgen.hard_sigmoid_backward(x, d, alpha=0.2, beta=0.5)
        for layout in ("NCX", "NXC"):
            s = data(generator, (37,) if layout == "NCX" else (41,), dtype)
            out = opgen.prelu_backward(x, s, d, data_format=layout)
            results[f"prelu_{dtype}_{layout}"] = np.concatenate([out[0].ravel(), out[1].ravel()])
            # rows of 300: the NCX units' chains of four blocks (the avx2 copy's f32 sum terms
            # in intrinsics, plan._vector_terms), 2 x 5 x 300 either way
            long_x, long_d = (data(generator, (2, 5, 300), dtype, specials="all") for _ in range(2))
            long_s = data(generator, (5,) if layout == "NCX" else (300,), dtype)
            out = opgen.prelu_backward(long_x, long_s, long_d, data_format=layout)
            results[f"prelu_long_{dtype}_{layout}"] = np.concatenate([out[0].ravel(), out[1].ravel()])
            stats = "f32" if dtype != "bf16" else "bf16"
            c = 37 if layout == "NCX" else 41
            bn = opgen.batch_norm_training_backward(
                x, d, data(generator, (c,), stats, specials="none"), np.abs(data(generator, (c,), stats)),
                data(generator, (c,), stats), epsilon=1e-3, data_format=layout)
            results[f"bn_{dtype}_{layout}"] = np.concatenate([bn[0].astype(np.float64).ravel(),
                                                               bn[1].astype(np.float64).ravel()])
    from tests.test_conversions import all_values, edge_sums, narrow_sums
    for dtype in ("f32", "f16", "bf16"):
        results[f"narrow_{dtype}"] = narrow_sums(dtype, np.tile(edge_sums(dtype), 3))
    for dtype in ("f16", "bf16"):
        # every 16-bit value widened and narrowed again, and times slopes whose products round
        # (ties, subnormals, overflow): each target's conversions, the portable ones included
        values = all_values(dtype)
        results[f"every_{dtype}"] = opgen.relu_backward(np.ones_like(values), values)
        for slope in (0.75, 2.0**-13, 1.0 + 2.0**-7, 6.0e4):
            weight = np.array([slope], dtype=values.dtype)
            results[f"every_{dtype}_{slope}"] = opgen.prelu_backward(-np.ones_like(values), weight, values).diff_src
    arrays = {k: np.asarray(v).astype(np.float64) for k, v in results.items()}  # exact for every dtype
    arrays.update({f"input_{k}": np.asarray(v).astype(np.float64) for k, v in inputs.items()})
    np.savez(sys.argv[1], target=np.array(opgen.info()["cpu_target"]), **arrays)
""")


def identical(a: np.ndarray, b: np.ndarray) -> bool:
    """Same values bit for bit (the sign of zero included), any NaN equal to any NaN."""
    a, b = np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64)
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.uint64), b[~nan].view(np.uint64)))


def run_target(target: str, path: Path) -> dict[str, np.ndarray]:
    run_on_target(target, SCRIPT, str(path))
    with np.load(path) as archive:
        return {name: archive[name] for name in archive.files}


@pytest.mark.slow
def test_targets_agree_bit_for_bit(tmp_path):
    best = opgen.info()["cpu_target"]
    names = [t["name"] for t in TARGETS]
    reached = names[: names.index(best) + 1]
    outputs = {target: run_target(target, tmp_path / f"{target}.npz") for target in reached}
    for target, result in outputs.items():
        assert str(result.pop("target")) == target, "OPGEN_CPU_TARGET did not select the target"
    for target in reached:
        check_exp_results(outputs[target], target)
    reference = outputs[reached[0]]
    for target in reached[1:]:
        for name, values in reference.items():
            if name.startswith("exp_") and reached[0] == "baseline":
                continue  # the baseline's exp does not fuse (module docstring)
            assert identical(values, outputs[target][name]), f"{name}: {target} differs from {reached[0]}"
    fused = [target for target in reached if target != "baseline"]
    for target in fused[1:]:
        for name in (name for name in reference if name.startswith("exp_")):
            same = identical(outputs[fused[0]][name], outputs[target][name])
            assert same, f"{name}: {target} differs from {fused[0]}"
    if len(reached) < 2:
        pytest.skip("this CPU has only the baseline target")


def check_exp_results(result: dict[str, np.ndarray], target: str) -> None:
    """The results that go through exp (from-src sigmoid and tanh): within 1 ulp of the oracle."""
    for dtype in ("f32", "f16", "bf16"):
        x, d = (result[f"input_{name}_{dtype}"].astype(dtype_of(dtype)) for name in ("x", "d"))
        for op in ("sigmoid", "tanh"):
            expected = getattr(oracle, f"{op}_backward")(x, d, use_dst=False)
            got = result[f"exp_{op}_{dtype}"].astype(dtype_of(dtype))  # saved as float64, exactly
            assert_ulps(got, expected, dtype, 1, f"{op} from src, {dtype}, {target} target")


def test_forcing_an_unknown_target_keeps_the_best_and_says_so():
    env = {**os.environ, "OPGEN_CPU_TARGET": "no-such-target"}
    result = subprocess.run(
        [sys.executable, "-c", "import opgen; print(opgen.info()['cpu_target'])"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == opgen.info()["cpu_target"]
    assert "RuntimeWarning" in result.stderr and "OPGEN_CPU_TARGET='no-such-target'" in result.stderr


@pytest.mark.parametrize("target", [t["name"] for t in TARGETS])
def test_info_names_the_target_and_every_lower_one(target):
    names = [t["name"] for t in TARGETS]
    if names.index(target) > names.index(opgen.info()["cpu_target"]):
        pytest.skip(f"this CPU cannot run {target}")
    env = {**os.environ, "OPGEN_CPU_TARGET": target}
    first = subprocess.run(
        [sys.executable, "-m", "opgen.cli", "info"], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()[0]
    assert f"kernels run the {target} copy" in first, first
    lower = names[: names.index(target)]
    assert all(name in first.split("copy", 1)[1] for name in lower), first
    assert ("to force a lower one" in first) == bool(lower), first


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
def test_thread_count_does_not_change_results(dtype):
    """Large enough for several threads and many reduction tiles, in every broadcast form."""
    generator = rng("threads", dtype)
    shape = (8, 24, 40, 33)
    x, d = data(generator, shape, dtype), data(generator, shape, dtype)
    short = (4096, 24, 7)  # NCX with a short inner dim runs the nxc loop over channels x inner
    xs, ds = data(generator, short, dtype), data(generator, short, dtype)
    wide = (6, 40000)  # NXC with too few rows for its tiles: ranges of channels
    xw, dw = data(generator, wide, dtype), data(generator, wide, dtype)
    stats = "f32" if dtype != "bf16" else "bf16"
    # NCX with fewer tiles than threads: each tile's channels in parts, one a thread (one tile
    # of 120 units; two tiles of 105 units, the second starting inside a row)
    one_tile, two_tiles = (3, 40, 7, 61), (3, 35, 31, 23)
    x1, d1 = data(generator, one_tile, dtype), data(generator, one_tile, dtype)
    x2, d2 = data(generator, two_tiles, dtype), data(generator, two_tiles, dtype)

    def batch_norm(src, diff_dst, channels, layout, with_gamma=False):
        mean, variance = data(rng("m"), (channels,), stats), np.abs(data(rng("v"), (channels,), stats))
        gamma = data(rng("g"), (channels,), stats) if with_gamma else None
        return opgen.batch_norm_training_backward(
            src, diff_dst, mean, variance, gamma, epsilon=1e-5, data_format=layout, with_diff_gamma_beta=True
        )

    calls = {
        "per-channel NCX": lambda: opgen.prelu_backward(x, data(rng("s1"), (24,), dtype), d, data_format="NCX"),
        "per-channel NXC": lambda: opgen.prelu_backward(x, data(rng("s2"), (33,), dtype), d, data_format="NXC"),
        "per-channel NCX one tile": lambda: opgen.prelu_backward(
            x1, data(rng("s7"), (40,), dtype), d1, data_format="NCX"
        ),
        "per-channel NCX two tiles": lambda: opgen.prelu_backward(
            x2, data(rng("s8"), (35,), dtype), d2, data_format="NCX"
        ),
        "per-tensor": lambda: opgen.prelu_backward(x, data(rng("s3"), (1,), dtype), d),
        "trailing": lambda: opgen.prelu_backward(x, data(rng("s4"), shape[1:], dtype), d),
        "numpy": lambda: opgen.prelu_backward(x, data(rng("s5"), (8, 1, 40, 1), dtype), d),
        "bn NCX": lambda: batch_norm(x, d, 24, "NCX"),
        "bn NXC": lambda: batch_norm(x, d, 33, "NXC"),
        "bn NCX short inner": lambda: batch_norm(xs, ds, 24, "NCX", with_gamma=True),
        "bn NXC few rows": lambda: batch_norm(xw, dw, 40000, "NXC"),
        "per-channel NXC few rows": lambda: opgen.prelu_backward(
            xw, data(rng("s6"), (40000,), dtype), dw, data_format="NXC"
        ),
        "relu": lambda: (opgen.relu_backward(x, d),),
        "sigmoid from src": lambda: (opgen.sigmoid_backward(x, d, use_dst=False),),
    }
    try:
        results = {}
        for threads in (1, 2, 3):
            opgen.set_num_threads(threads)
            results[threads] = {name: [np.asarray(a).copy() for a in call()] for name, call in calls.items()}
    finally:
        opgen.set_num_threads(0)
    for threads in (2, 3):
        for name in calls:
            for one, many in zip(results[1][name], results[threads][name]):
                assert identical(one, many), f"{name}: {threads} threads differ"


ORDER_CASES = {
    # layout, shape, where a picked channel's three terms are: (n, h, w) of each
    "NCX one tile": ("NCX", (3, 40, 7, 61), [(0, 0, 3), (1, 1, 4), (2, 2, 5)]),
    "NCX two tiles": ("NCX", (3, 35, 41, 31), [(0, 0, 3), (1, 1, 4), (2, 2, 5)]),
    # rows 0, 16 and 400: three groups of rows (OPGEN_ROW_GROUP), the last past the middle
    "NXC one tile": ("NXC", (1, 7, 61, 40), [(0, 0, 0), (0, 0, 16), (0, 6, 34)]),
    "NXC two tiles": ("NXC", (1, 41, 83, 40), [(0, 0, 0), (0, 20, 40), (0, 40, 82)]),
}


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("case", sorted(ORDER_CASES))
def test_threads_keep_the_order_in_which_rows_add_to_a_channel(dtype, case):
    """A per-channel sum whose value depends on the order its rows' sums are added in: 1, then
    2^53, then -2^53 is 0 from the left, 1 in another order. One tile, or two, cut into parts of
    channels on 2 and 3 threads: the bits of one thread, which are 0 for one tile."""
    layout, shape, places = ORDER_CASES[case]
    channels = shape[1] if layout == "NCX" else shape[-1]
    src = np.ones(shape, np.float32)  # src > 0: no term
    diff_dst = rng("order").standard_normal(shape).astype(np.float32)
    picked = [0, 17, channels - 1]
    for (n, h, w), (value, grad) in zip(places, [(-1.0, -1.0), (-(2.0**27), -(2.0**26)), (-(2.0**27), 2.0**26)]):
        for channel in picked:
            at = (n, channel, h, w) if layout == "NCX" else (n, h, w, channel)
            src[at], diff_dst[at] = value, grad
    slope = np.full(channels, 0.25, np.float32)
    x, d, w = (a.astype(dtype_of(dtype)) for a in (src, diff_dst, slope))
    sums = {}
    try:
        for threads in (1, 2, 3):
            opgen.set_num_threads(threads)
            sums[threads] = np.asarray(opgen.prelu_backward(x, w, d, data_format=layout)[1], np.float64)[picked]
    finally:
        opgen.set_num_threads(0)
    if "one tile" in case:
        assert (sums[1] == 0).all(), sums[1]
    for threads in (2, 3):
        assert (sums[threads] == sums[1]).all(), f"{threads} threads: {sums[threads]}, one: {sums[1]}"


def test_kernels_whose_math_calls_exp_start_threads_sooner():
    """A kernel's element count is weighed by its math's cost: each exp() counts EXP_WORK
    elements more, so sigmoid from src reaches the thread threshold with fewer elements."""
    table, specs = load_specs(BUNDLED_SPECS)
    work = {}
    for spec in specs:
        if spec.pattern == "along_axes":
            continue  # their drivers weigh lines (opgen/lines.py): test_along_axes
        for variant in plan.variants(spec, table):
            kernel = plan.kernel(variant, table)
            work[variant.name] = kernel.work_per_element
            assert kernel.work_per_element >= 1
    # exp() in the math: sigmoid's forward, and sigmoid's and tanh's backward from src (tanh's
    # forward calls tanh(), which counts as an element's ordinary work)
    from_src = ("sigmoid_backward", "tanh_backward")
    exp_kernels = {
        name
        for name in work
        if (name.startswith(from_src) and "no_use_dst" in name)
        or name in ("sigmoid_f32", "sigmoid_f16", "sigmoid_bf16")
    }
    assert exp_kernels and all(work[name] == 1 + plan.EXP_WORK for name in exp_kernels)
    assert all(value == 1 for name, value in work.items() if name not in exp_kernels)
    # the kernel tells the driver its weight, and the driver weighs the count with it
    source = (Path(__file__).parent.parent / "generated" / "sigmoid_backward.c").read_text()
    assert f".work_per_element = {1 + plan.EXP_WORK}," in source
    driver = (Path(__file__).parent.parent / "templates" / "drivers" / "opgen_map.c").read_text()
    assert "opgen_threads_for(count * kernel->work_per_element)" in driver


def test_set_num_threads_checks_its_argument():
    with pytest.raises(TypeError, match="threads must be an int"):
        opgen.set_num_threads(1.5)
    for wrong in (-1, 1025, 2**31 - 1, 2**31, 2**70):
        with pytest.raises(ValueError, match=r"threads must be in 0\.\.1024"):
            opgen.set_num_threads(wrong)
    opgen.set_num_threads(np.int64(1))
    assert opgen.get_num_threads() == 1
    opgen.set_num_threads(0)
    assert opgen.get_num_threads() >= 1


def test_c_caps_the_thread_count():
    """From C there is no error to return: a count beyond OPGEN_MAX_THREADS is taken as that
    (an OpenMP team of millions exhausts memory before a kernel runs)."""
    lib = opgen.bundled.module.lib
    default = opgen.get_num_threads()
    try:
        lib.opgen_set_num_threads(2**31 - 1)
        assert opgen.get_num_threads() == 1024
        lib.opgen_set_num_threads(-5)  # as 0: the default
        assert opgen.get_num_threads() == default
    finally:
        opgen.set_num_threads(0)
