"""The thread policy (opgen.h, opgen_parallel_threshold) and `opgen tune`: the threshold read from
the environment, set and restored; the same bits whether a call runs on one thread or a team,
from tiny to medium shapes of every pattern; the threshold a measurement gives; a kept tuning
applied on the CPU and thread count that measured it only, the environment winning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import opgen
from opgen import plan, tune
from tests.helpers import rng, threads_set_to

LIB = opgen.bundled.module.lib
NEVER = 1 << 60  # a threshold no call reaches: one thread


# conftest sets both for every test; the processes these tests start read a kept tuning instead
TUNED_BY_THE_ENVIRONMENT = ("OPGEN_PARALLEL_THRESHOLD", "OPGEN_STREAM_BYTES")


def _python(code: str, env: dict[str, str]) -> str:
    """`code`'s output in a new process with `env` added (and the tests' thresholds removed)."""
    environment = {k: v for k, v in os.environ.items() if k not in TUNED_BY_THE_ENVIRONMENT} | env
    result = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True)
    return result.stdout.strip()


def test_the_threshold_comes_from_the_environment_and_the_setter():
    assert LIB.opgen_parallel_threshold() == plan.PARALLEL_THRESHOLD  # conftest's
    try:
        LIB.opgen_set_parallel_threshold(12345)
        assert LIB.opgen_parallel_threshold() == 12345 and opgen.info()["parallel_threshold"] == 12345
    finally:
        LIB.opgen_set_parallel_threshold(0)  # back to the environment's
    assert LIB.opgen_parallel_threshold() == plan.PARALLEL_THRESHOLD
    read = "import opgen; print(opgen.bundled.module.lib.opgen_parallel_threshold())"
    assert _python(read, {"OPGEN_PARALLEL_THRESHOLD": "5000"}) == "5000"
    for invalid in ("0", "-3", "12k", "", "1e9"):
        assert _python(read, {"OPGEN_PARALLEL_THRESHOLD": invalid}) == str(plan.PARALLEL_THRESHOLD), invalid


def _calls(shape: tuple[int, ...]) -> list[tuple[str, object]]:
    """One call of each pattern on `shape` (rank 4 for the channel ops), f32 and bf16."""
    generator = rng(f"tune {shape}")
    x, d = (generator.standard_normal(shape).astype(np.float32) for _ in range(2))
    channels = shape[1]
    slope, slope_last = (generator.standard_normal(n).astype(np.float32) for n in (channels, shape[-1]))
    mean, variance = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3)) + 0.5
    gamma = generator.standard_normal(channels).astype(np.float32)
    return [
        ("relu_backward", lambda: opgen.relu_backward(d, x)),
        ("sigmoid_backward from src", lambda: opgen.sigmoid_backward(d, x, use_dst=False)),
        ("prelu_backward per channel", lambda: opgen.prelu_backward(x, slope, d, data_format="NCX")),
        ("prelu_backward nxc", lambda: opgen.prelu_backward(x, slope_last, d)),
        (
            "batch_norm_training_backward",
            lambda: opgen.batch_norm_training_backward(x, d, mean, variance, gamma, epsilon=1e-5, data_format="NCX"),
        ),
        ("soft_max", lambda: opgen.soft_max(x, axis=1)),
        ("layer_norm_backward", lambda: opgen.layer_norm_backward(x, d, x.mean(axis=-1), x.var(axis=-1) + 1)),
        ("reduce_sum", lambda: opgen.reduce_sum(x, axes=[0, 2])),
        ("add, two-sided", lambda: opgen.add(x[:, :, :1], d[:, :1])),
    ]


def _arrays(result: object) -> list[np.ndarray]:
    """A call's outputs: one array, or the fields of a result of several (None: not requested)."""
    if isinstance(result, np.ndarray):
        return [result]
    return [np.ascontiguousarray(a) for a in result if a is not None]  # type: ignore[attr-defined]


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (1, 3, 1, 17), (2, 5, 3, 7), (3, 17, 19, 23), (4, 64, 28, 28)])
def test_a_team_gives_the_bits_of_one_thread(shape):
    """Threshold 1 puts every call, however small, on the team; NEVER on one thread."""
    with threads_set_to(2):
        try:
            for name, call in _calls(shape):
                LIB.opgen_set_parallel_threshold(NEVER)
                alone = call()
                LIB.opgen_set_parallel_threshold(1)
                team = call()
                for a, b in zip(_arrays(alone), _arrays(team), strict=True):
                    assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), name
        finally:
            LIB.opgen_set_parallel_threshold(0)


def test_the_threshold_is_where_the_team_stops_losing():
    seconds = {1024: (1.0, 2.0), 2048: (2.0, 1.5), 4096: (4.0, 5.0), 8192: (8.0, 6.0), 16384: (16.0, 9.0)}
    assert tune.threshold_from(seconds) == 8192  # 2048 paid, then 4096 did not
    assert tune.threshold_from({n: (1.0, 0.5) for n in (10, 20)}) == 10
    assert tune.threshold_from({n: (1.0, 2.0) for n in (10, 20)}) == 40  # never: past the sizes measured
    # streamed stores must save a twentieth: 2 MiB's 0.97 is no win, 4 MiB's 0.95 is
    streamed = {1 << 21: (1.0, 0.97), 1 << 22: (1.0, 0.95), 1 << 23: (1.0, 0.7)}
    assert tune.threshold_from(streamed, tune.GAIN) == 1 << 22


def test_the_sweep_fits_the_memory_a_container_allows(tmp_path, monkeypatch):
    """A container's memory limit (cgroups) below the machine's bounds the stream sweep."""
    limit = tmp_path / "memory.max"
    limit.write_text("1073741824\n")
    monkeypatch.setattr(tune, "CGROUP_LIMITS", (str(tmp_path / "absent"), str(limit)))
    assert tune.memory_bytes() == min(1 << 30, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    limit.write_text("max\n")  # no limit set
    assert tune.memory_bytes() == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_the_stream_threshold_comes_from_the_setter_and_back():
    """opgen_set_stream_threshold replaces the threshold in use (here conftest's
    OPGEN_STREAM_BYTES); 0 or less gives the default back. Results never depend on it: a call
    streamed and the same call stored give the same bits."""
    assert LIB.opgen_stream_threshold() == plan.STREAM_BYTES
    generator = rng("stream setter")
    x, d = (generator.standard_normal(40_000).astype(np.float32) for _ in range(2))
    calls = [
        lambda: opgen.relu_backward(d, x),
        lambda: opgen.soft_max(x.reshape(400, 100), axis=1),
        lambda: opgen.prelu_backward(
            x.reshape(1, 100, 20, 20), x[:100].copy(), d.reshape(1, 100, 20, 20), data_format="NCX"
        ),
    ]
    try:
        for setting in (1, -7, 1 << 40, 0):
            LIB.opgen_set_stream_threshold(setting)
            expected = setting if setting > 0 else plan.STREAM_BYTES
            assert LIB.opgen_stream_threshold() == expected and opgen.info()["stream_from_bytes"] == expected
        LIB.opgen_set_stream_threshold(1)
        streamed = [call() for call in calls]
        LIB.opgen_set_stream_threshold(1 << 40)
        stored = [call() for call in calls]
    finally:
        LIB.opgen_set_stream_threshold(0)
    assert LIB.opgen_stream_threshold() == plan.STREAM_BYTES
    outputs = [
        (a, b) for s, t in zip(streamed, stored, strict=True) for a, b in zip(_arrays(s), _arrays(t), strict=True)
    ]
    for a, b in outputs:
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _kept(where: Path, **change: object) -> Path:
    fields = {
        "cpu": tune.cpu_name(),
        "threads": 2,
        "parallel_threshold": 77777,
        "seconds": {"1024": [1e-6, 2e-6]},
    } | change
    where.write_text(json.dumps(fields))
    return where


@pytest.mark.parametrize(
    "change, environment, expected",
    [
        ({}, {}, 77777),
        ({}, {"OPGEN_PARALLEL_THRESHOLD": "4242"}, 4242),  # the environment wins
        ({"cpu": "another CPU"}, {}, plan.PARALLEL_THRESHOLD),
        ({"threads": 3}, {}, plan.PARALLEL_THRESHOLD),
        ({"parallel_threshold": -5}, {}, plan.PARALLEL_THRESHOLD),
        ({"seconds": "not a table"}, {}, plan.PARALLEL_THRESHOLD),
    ],
)
def test_a_kept_tuning_applies_on_its_machine_only(tmp_path, change, environment, expected):
    kept = _kept(tmp_path / "tuning.json", **change)
    read = "import opgen; print(opgen.info()['parallel_threshold'])"
    env = {"OPGEN_TUNING_FILE": str(kept), "OMP_NUM_THREADS": "2", **environment}
    assert _python(read, env) == str(expected)


@pytest.mark.parametrize(
    "change, environment, expected",
    [
        ({}, {}, 88 << 20),
        ({}, {"OPGEN_STREAM_BYTES": "4194304"}, 4 << 20),  # the environment wins
        ({"cpu": "another CPU"}, {}, None),
        ({"threads": 3}, {}, None),
        ({"stream_threshold": 0}, {}, None),  # measured nothing: the default
        ({"stream_threshold": "many"}, {}, None),
    ],
)
def test_a_kept_stream_threshold_applies_on_its_machine_only(tmp_path, change, environment, expected):
    kept = _kept(tmp_path / "tuning.json", **({"stream_threshold": 88 << 20} | change))
    read = "import opgen; i = opgen.info(); print(i['stream_from_bytes'], 'stream_from_bytes' in i['tuned'])"
    result = _python(read, {"OPGEN_TUNING_FILE": str(kept), "OMP_NUM_THREADS": "2", **environment})
    applied = expected is not None and not environment
    if expected is None:  # the default: what a process with no tuning kept reads
        none = {"OPGEN_TUNING_FILE": str(tmp_path / "none.json"), "OMP_NUM_THREADS": "2"}
        expected = int(_python(read, none).split()[0])
    assert result == f"{expected} {applied}"


def test_a_tuning_is_written_whole_and_read_back(tmp_path):
    measured = tune.Tuning("a CPU", 2, 65536, {2048: (1e-6, 2e-6), 4096: (2e-6, 1e-6)}, 1 << 27, {1 << 27: (2.0, 1.0)})
    where = tune.save(measured, tmp_path / "tuning.json")
    assert tune.saved(where) == measured and [p.name for p in tmp_path.iterdir()] == ["tuning.json"]
    # one kept before streaming was measured: read, with no stream threshold
    where.write_text(json.dumps({"cpu": "a CPU", "threads": 2, "parallel_threshold": 5, "seconds": {}}))
    assert tune.saved(where) == tune.Tuning("a CPU", 2, 5, {})
    where.write_text("{ not json")
    assert tune.saved(where) is None


def test_opgen_tune_measures_and_keeps_nothing_on_a_dry_run(tmp_path):
    env = {"OPGEN_TUNING_FILE": str(tmp_path / "kept.json"), "OMP_NUM_THREADS": "2"}
    environment = {k: v for k, v in os.environ.items() if k not in TUNED_BY_THE_ENVIRONMENT} | env
    run = subprocess.run(
        [sys.executable, "-m", "opgen.cli", "tune", "--dry-run", "--min-time", "0.01", "--largest", "8"],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "2 threads" in run.stdout and "calls take threads from" in run.stdout
    assert "8 MiB moved:" in run.stdout and "16 MiB moved:" not in run.stdout and "outputs stream from" in run.stdout
    assert not (tmp_path / "kept.json").exists()
    command = [sys.executable, "-m", "opgen.cli", "tune", "--min-time", "0.01", "--largest", "8"]
    kept = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
    assert kept.returncode == 0, kept.stderr
    assert tune.saved(tmp_path / "kept.json") is not None and "note:" not in kept.stderr
    overridden = subprocess.run(
        command, env=environment | {"OPGEN_PARALLEL_THRESHOLD": "999"}, capture_output=True, text=True, check=False
    )
    assert overridden.returncode == 0 and "OPGEN_PARALLEL_THRESHOLD=999 is set here" in overridden.stderr


def test_opgen_tune_on_one_thread_measures_the_stream_threshold_alone(tmp_path):
    env = {"OPGEN_TUNING_FILE": str(tmp_path / "kept.json"), "OMP_NUM_THREADS": "1"}
    environment = {k: v for k, v in os.environ.items() if k not in TUNED_BY_THE_ENVIRONMENT} | env
    command = [sys.executable, "-m", "opgen.cli", "tune", "--min-time", "0.01", "--largest", "4"]
    run = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert "no thread threshold to measure" in run.stdout and "outputs stream from" in run.stdout
    kept = tune.saved(tmp_path / "kept.json")
    assert kept is not None and kept.threads == 1 and kept.parallel_threshold == 0 and kept.stream_threshold > 0
    read = "import opgen; i = opgen.info(); print(i['parallel_threshold'], i['tuned'])"
    assert _python(read, env) == f"{plan.PARALLEL_THRESHOLD} ['stream_from_bytes']"


def test_import_loads_no_module_for_the_tuning(tmp_path):
    """`import opgen` compiles and loads nothing (README): a kept tuning is applied when a
    module loads, not at import."""
    kept = _kept(tmp_path / "tuning.json")
    read = "import opgen; print(opgen.bundled._module is None)"
    assert _python(read, {"OPGEN_TUNING_FILE": str(kept), "OMP_NUM_THREADS": "2"}) == "True"
