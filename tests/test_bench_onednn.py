"""`opgen bench --compare onednn`: the harness runs opgen's C calls and oneDNN's primitives on the
same inputs, and times a cell only when their outputs agree. Skipped without an installed oneDNN
(pip install onednn-cpu-gomp onednn-devel-cpu-gomp), except the message that says so."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from opgen import bench, bench_onednn, cli
from tests.helpers import SEED

DTYPES = ["f32", "bf16", "f16"]
# small, with odd spatial dims: the kernels' vector tails and oneDNN's both run
DIMS = (2, 16, 5, 7)


def _installed() -> bool:
    try:
        bench_onednn.find_onednn()
    except bench_onednn.OneDNNMissing:
        return False
    return True


needs_onednn = pytest.mark.skipif(not _installed(), reason="oneDNN is not installed (opgen's onednn extra)")


@pytest.fixture(scope="module")
def harness() -> bench_onednn.Harness:
    return bench_onednn.Harness()


@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
def test_every_cell_agrees_with_onednn(harness: bench_onednn.Harness, threads: int) -> None:
    """Each case at a small shape, one round: f32 is timed by both (oneDNN implements every op in
    f32 on any x86-64), bf16 and f16 are timed or refused by oneDNN; every timed cell's outputs
    agreed within its tolerance, ReLU's exactly."""
    cases = bench_onednn.cases(list(bench_onednn.OP_CODES), DTYPES)
    timed = 0
    for op, dtype, layout, form in cases:
        cell = bench_onednn.Cell(op, dtype, layout, form, "tiny", threads)
        harness.cell(cell, DIMS, rounds=1, round_seconds=1e-4, seed=SEED)
        label = f"{op} {dtype} {layout} {form}: {cell.status} {cell.message}"
        assert cell.status in (("timed",) if dtype == "f32" else ("timed", "refused")), label
        if cell.status == "refused":
            assert cell.message.startswith("oneDNN has no"), label
            continue
        timed += 1
        assert cell.error is not None and cell.error <= bench_onednn.REDUCTION_TOLERANCE[dtype], label
        if op == "relu_backward":
            assert cell.error == 0.0, label
        assert cell.opgen_seconds and cell.opgen_seconds > 0 and cell.onednn_seconds and cell.onednn_seconds > 0
        assert cell.implementation, label
    assert timed >= len([case for case in cases if case[1] == "f32"])


@needs_onednn
def test_a_different_computation_is_caught(harness: bench_onednn.Harness) -> None:
    """The check before timing can fail: opgen's tanh gradient called for oneDNN's sigmoid one
    (same signature, other math) is reported as a mismatch and not timed."""
    cell = bench_onednn.Cell("sigmoid_backward", "f32", "-", "from_dst", "tiny", 1)
    harness.cell(cell, DIMS, rounds=1, round_seconds=1e-4, seed=SEED, opgen_op="tanh_backward")
    assert cell.status == "mismatch", cell
    assert cell.error is not None and cell.error > bench_onednn.TOLERANCE["f32"]
    assert cell.opgen_seconds is None and cell.onednn_seconds is None


@needs_onednn
def test_cli_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "--compare", "onednn", "--sizes", "S", "--threads", "1", "--ops", "relu_backward,prelu_backward"]
    assert cli.main([*argv, "--dtypes", "f32", "--rounds", "1", "--min-time", "0.002"]) == 0
    out = capsys.readouterr().out
    assert f"oneDNN {bench_onednn.Harness().version} vs opgen" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("relu ", "prelu "))]
    assert len(rows) == 2 + 6, out  # ReLU from dst and from src; PReLU's 3 slopes in 2 layouts
    for row in rows:
        # threads; the opgen / oneDNN ratio, in significant digits (a cell 300 times faster is not 0)
        assert row[5] == "1" and float(row[8]) > 0, row
    behind = sum(float(row[8]) > bench_onednn.BEHIND for row in rows if row[4] == "S")
    assert f"cells above {bench_onednn.BEHIND} of oneDNN's time: S 1 thr {behind}/{len(rows)}" in out


def test_the_summary_counts_the_cells_behind() -> None:
    def cell(size: str, threads: int, ratio: float | None) -> dict[str, object]:
        seconds = None if ratio is None else (ratio, 1.0)
        return dataclasses.asdict(
            bench_onednn.Cell(
                "relu_backward",
                "f32",
                "-",
                "from_dst",
                size,
                threads,
                "timed" if seconds else "mismatch",
                *(seconds or (None, None)),
            )
        )

    cells = [cell("S", 1, 0.5), cell("S", 1, 0.96), cell("S", 1, None), cell("M", 2, 1.2), cell("S", 2, 0.95)]
    line = bench_onednn.behind_line(cells)
    assert line == "cells above 0.95 of oneDNN's time: S 1 thr 1/2, M 2 thr 1/1, S 2 thr 0/1"
    assert bench_onednn.behind_line([]).endswith("none timed")


def test_cli_says_how_to_install_onednn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(bench_onednn.ROOT_VARIABLE, str(tmp_path))
    assert cli.main(["bench", "--compare", "onednn", "--sizes", "S"]) == 1
    error = capsys.readouterr().err
    assert "oneDNN is not installed" in error and "pip install onednn-cpu-gomp onednn-devel-cpu-gomp" in error
    assert str(tmp_path) in error


def test_every_op_opgen_bench_times_has_a_onednn_cell() -> None:
    """`opgen bench --compare onednn` takes every op of `opgen bench`, the ops with axes too."""
    assert set(bench_onednn.OP_CODES) == set(bench.OPS)
