"""`opgen bench` runs and reports what it promises (speed itself is never asserted here)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from opgen import bench, plan
from tests.helpers import rng

pytestmark = pytest.mark.slow  # runs the benchmark and its command line


def test_run_reports_every_case_with_its_baselines():
    report = bench.run(
        ["S"],
        [1],
        ["relu_backward", "prelu_backward", "batch_norm_training_backward"],
        ["f32", "f16"],
        min_time=0.001,
        progress=lambda line: None,
    )
    assert set(report["probes_gbps"]["S/1"]) == {"copy", "copy_stream", "2r1w", "2r1w_stream", "2r"}
    assert all(value > 0 for value in report["probes_gbps"]["S/1"].values())
    expected = len(bench.cases(["relu_backward", "prelu_backward", "batch_norm_training_backward"], ["f32", "f16"]))
    assert len(report["cases"]) == expected
    for case in report["cases"]:
        assert case["seconds"] > 0 and case["gbps"] > 0 and case["bandwidth_share"] > 0
        assert (case["numpy_seconds"] is not None) == (case["dtype"] == "f32")
        assert case["c_seconds"] > 0  # the C entry point alone, timed at small sizes
    assert "HW7" in bench.SIZES and "L" in bench.SIZES


def test_large_sizes_time_calls_that_allocate_their_outputs_too():
    report = bench.run(["HW14"], [1], ["prelu_backward"], ["bf16"], min_time=0.001, progress=lambda line: None)
    assert len(report["cases"]) == len(bench.cases(["prelu_backward"], ["bf16"]))
    for case in report["cases"]:
        assert case["allocated_seconds"] > 0 and case["c_seconds"] is None
        assert "-" not in bench.format_row(bench.Case(**case)).split()[8]  # the alloc GB/s column


def test_cases_past_the_caches_are_shares_of_the_probe_timed_with_them(monkeypatch):
    """Past PAIRED_PROBE_BYTES a case is timed in turn with the better write probe (and
    PyTorch's call, when installed), and its share is of that probe's bandwidth (BatchNorm:
    and of the 2-read probe scaled alike)."""
    monkeypatch.setattr(bench, "PAIRED_PROBE_BYTES", 0)  # HW14 stands in for L
    ops = ["relu_backward", "batch_norm_training_backward"]
    report = bench.run(["HW14"], [1], ops, ["f32"], min_time=0.001, progress=lambda line: None)
    probes = report["probes_gbps"]["HW14/1"]
    has_torch = importlib.util.find_spec("torch") is not None
    for case in report["cases"]:
        if case["layout"] != "NXC":  # PyTorch's kernels take NCX
            assert (case["torch_seconds"] is not None) == has_torch
        paired, name = case["extra"]["probe_gbps"], case["extra"]["probe"]
        assert paired > 0 and name in ("2r1w", "2r1w_stream")
        if case["extra"]["pattern"] == "2r1w":
            assert case["bandwidth_share"] == pytest.approx(case["gbps"] / paired)
        else:
            per_transfer = case["bytes"] / 5 / 1e9
            floor = 2 * per_transfer / (probes["2r"] * paired / probes[name]) + 3 * per_transfer / paired
            assert case["bandwidth_share"] == pytest.approx(floor / case["seconds"])


def test_cli_writes_json_and_table(tmp_path):
    target = tmp_path / "bench.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "opgen.cli",
            "bench",
            "--sizes",
            "S",
            "--threads",
            "1",
            "--ops",
            "hard_sigmoid_backward",
            "--dtypes",
            "bf16",
            "--min-time",
            "0.001",
            "--json",
            str(target),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "bandwidth probes" in result.stdout and "hard_sigmoid_backward" in result.stdout
    report = json.loads(target.read_text())
    assert report["cases"][0]["dtype"] == "bf16" and report["machine"]["opgen_target"]
    # the policy the cases ran under: the tests' threshold (conftest) and stream size
    assert report["machine"]["parallel_threshold"] == plan.PARALLEL_THRESHOLD
    assert report["machine"]["stream_from_bytes"] == plan.STREAM_BYTES
    assert f"calls take threads from {plan.PARALLEL_THRESHOLD} elements of work" in result.stdout


def test_cli_prints_the_table_once_and_writes_no_file_unasked(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "opgen.cli", "bench", "--sizes", "S", "--threads", "1", "--ops", "relu_backward"]
        + ["--dtypes", "f32", "--min-time", "0.001", "--no-baselines"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert sum(line.startswith("op ") for line in lines) == 1, result.stdout
    assert sum(line.startswith("relu_backward ") for line in lines) == 1, result.stdout
    assert "wrote" not in result.stdout and not any(tmp_path.iterdir()), result.stdout


def test_cli_rejects_unknown_names(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "opgen.cli", "bench", "--sizes", "XL"], capture_output=True, text=True, check=False
    )
    assert result.returncode != 0 and "--sizes: unknown XL" in result.stderr


def test_the_ops_with_axes_are_shares_of_the_probe_their_access_pattern_matches(monkeypatch):
    """SoftMax, LogSoftmax and LayerNorm read one tensor and write one (a copy's pattern); their
    backward ops read two (the add probe's). SoftMax, LogSoftmax and their backward ops run
    along the last axis and along axis 1 (the columns path)."""
    monkeypatch.setattr(bench, "PAIRED_PROBE_BYTES", 0)  # HW14 stands in for L
    ops = list(bench.AXES_OPS)
    report = bench.run(["HW14"], [1], ops, ["f32", "bf16"], min_time=0.001, progress=lambda line: None)
    softmax_family = [op for op in ops if "soft_max" in op]
    assert len(softmax_family) == 4
    assert len(report["cases"]) == 2 * (len(ops) + len(softmax_family))
    forms = {(case["op"], case["form"]) for case in report["cases"]}
    assert forms == {(op, form) for op in softmax_family for form in bench.AXIS_FORMS} | {
        (op, "-") for op in ops if op not in softmax_family
    }
    for form, axis in (("last_axis", -1), ("axis_1", 1)):
        (_, _, kwargs), *_ = bench._make_case("soft_max_backward", "f32", "NCX", form, (2, 8, 3, 3), rng("axis"))
        assert kwargs["axis"] == axis
    for case in report["cases"]:
        forward = not case["op"].endswith("_backward")
        assert case["extra"]["pattern"] == ("1r1w" if forward else "2r1w")
        assert case["extra"]["probe"] in (("copy", "copy_stream") if forward else ("2r1w", "2r1w_stream"))
        assert case["bandwidth_share"] == pytest.approx(case["gbps"] / case["extra"]["probe_gbps"])
