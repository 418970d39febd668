"""The command line: building a user's own spec set, listing, and clean failures."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import opgen
from opgen.compile import BuildError, build_module
from opgen.render import BUNDLED_SPECS, render_library
from tests.helpers import assert_ulps, check_line_count


def elementwise_spec(name: str, summary: str, attribute: str, math: str) -> str:
    """A user's own elementwise op of src and diff_dst (f32), with one attribute."""
    body = textwrap.dedent("""
        [op]
        name = "{name}"
        summary = "{summary}"
        source = "a user's own op"
        pattern = "elementwise"

        [[attributes]]
        {attribute}

        [[inputs]]
        name = "src"
        doc = "Input."

        [[inputs]]
        name = "diff_dst"
        doc = "Output gradient."

        [[outputs]]
        name = "diff_src"
        doc = "Input gradient."

        [[dtypes]]
        src = "f32"
        diff_dst = "f32"
        diff_src = "f32"

        [math.elements]
        diff_src = "{math}"
    """)
    return body.format(name=name, summary=summary, attribute=attribute, math=math)


LEAKY = elementwise_spec(
    "leaky_relu_backward",
    "Gradient of leaky ReLU: diff_dst where src > 0, else negative_slope * diff_dst.",
    'name = "negative_slope"\ntype = "f32"\ndefault = 0.01\ndoc = "Slope for src <= 0."',
    "diff_dst if src > 0 else negative_slope * diff_dst",
)


def run_cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "opgen.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ},
        check=False,
    )


@pytest.fixture
def user_specs(tmp_path):
    directory = tmp_path / "my_specs"
    directory.mkdir()
    shutil.copy(BUNDLED_SPECS / "dtypes.toml", directory)
    (directory / "leaky_relu_backward.toml").write_text(LEAKY)
    return directory


@pytest.mark.slow
def test_build_user_specs(tmp_path, user_specs):
    out = tmp_path / "out"
    result = run_cli("build", "--specs", str(user_specs), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "built 1 ops, 1 kernels" in result.stdout
    names = {p.name for p in out.iterdir()}
    assert {"opgen.h", "opgen_internal.h", "leaky_relu_backward.c", "manifest.json"} <= names
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["ops"][0]["functions"][0]["name"] == "leaky_relu_backward_f32"
    module = next(p.name.split(".")[0] for p in out.iterdir() if p.name.startswith("_opgen_"))
    # The module imports by name from the output directory, in a fresh process.
    script = (
        f"import sys; sys.path.insert(0, {str(out)!r}); import {module} as m\n"
        "import numpy as np\n"
        "x = np.array([-2, 3], np.float32); d = np.array([1, 1], np.float32); o = np.empty(2, np.float32)\n"
        "m.lib.leaky_relu_backward_f32(m.ffi.from_buffer('float[]', x), m.ffi.from_buffer('float[]', d), "
        "0.5, m.ffi.from_buffer('float[]', o), 2)\n"
        "print(o.tolist())"
    )
    imported = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert imported.stdout.strip() == "[0.5, 1.0]", imported.stderr
    # A second build with nothing changed writes nothing.
    again = run_cli("build", "--specs", str(user_specs), "--out", str(out))
    assert again.returncode == 0 and "wrote" not in again.stdout


@pytest.mark.slow
def test_new_op_through_the_python_api(user_specs):
    library = opgen.load(user_specs)
    src = np.array([-2.0, 0.0, 3.0, np.nan], np.float32)
    diff_dst = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    got = library.leaky_relu_backward(src, diff_dst, negative_slope=0.25)
    assert got.tolist()[:3] == [0.25, 0.5, 3.0] and np.isclose(got[3], 1.0)
    default = library.leaky_relu_backward(src, diff_dst)
    assert default[0] == np.float32(0.01)


def test_bad_spec_fails_cleanly(tmp_path, user_specs):
    (user_specs / "leaky_relu_backward.toml").write_text(LEAKY.replace('type = "f32"', 'type = "f64"'))
    out = tmp_path / "out"
    result = run_cli("build", "--specs", str(user_specs), "--out", str(out))
    assert result.returncode == 1
    assert "leaky_relu_backward.toml: attributes.negative_slope.type" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists(), "nothing is written when a spec is rejected"


def test_specs_need_out(user_specs):
    result = run_cli("build", "--specs", str(user_specs))
    assert result.returncode != 0 and "--out" in result.stderr


def test_list_shows_every_variant():
    result = run_cli("list")
    assert result.returncode == 0, result.stderr
    for kernel in render_library().kernels:
        assert kernel.name in result.stdout


@pytest.mark.slow  # compiles a library (one op and dtype: the error is in relu_backward.c either way)
def test_compiler_error_shows_file_and_line(tmp_path, monkeypatch):
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(tmp_path / "cache"))
    library = render_library(ops=["relu_backward"], dtypes=["f32"])
    files = dict(library.files)
    assert "opgen_map_run(&kernel, &call);" in files["relu_backward.c"]
    files["relu_backward.c"] = files["relu_backward.c"].replace(
        "opgen_map_run(&kernel, &call);", "opgen_map_run(&kernel, &call) +;", 1
    )
    with pytest.raises(BuildError) as caught:
        build_module(dataclasses.replace(library, files=files))
    assert "relu_backward.c:" in str(caught.value) and "error" in str(caught.value)
    assert not any((tmp_path / "cache").glob("[!.]*")), "a failed build leaves no module in the cache"


@pytest.mark.slow
def test_concurrent_builds_and_a_killed_build_leave_a_consistent_library(tmp_path, user_specs, monkeypatch):
    """Two builds of one spec set into one output directory and one cache at the same time both
    succeed with the same result; a build killed half-way leaves nothing that a later build loads."""
    import signal
    import time

    cache = tmp_path / "cache"
    env = {**os.environ, "OPGEN_CACHE_DIR": str(cache)}
    out = tmp_path / "out"
    command = [sys.executable, "-m", "opgen.cli", "build", "--specs", str(user_specs), "--out", str(out)]
    killed = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.6)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    builds = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    results = [b.communicate(timeout=300) for b in builds]
    assert all(b.returncode == 0 for b in builds), results
    modules = sorted(p.name for p in out.glob("_opgen_*"))
    assert len(modules) == 1, modules
    finished = [p for p in cache.iterdir() if not p.name.startswith((".", "fastcall-"))]
    assert len(finished) == 1 and any(finished[0].glob("_opgen_*")), finished
    helpers = [p for p in cache.iterdir() if p.name.startswith("fastcall-")]  # the repeated-call path
    assert len(helpers) == 1 and any(helpers[0].glob("_opgen_fastcall*")), helpers
    header = (out / "opgen.h").read_text()
    assert header == render_library(user_specs).files["opgen.h"]
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(cache))
    library = opgen.load(user_specs)
    assert library.leaky_relu_backward(np.array([-1.0], np.float32), np.array([2.0], np.float32)).tolist() == [
        np.float32(0.02)
    ]


@pytest.mark.slow
def test_subset_build(tmp_path):
    out = tmp_path / "subset"
    result = run_cli(
        "build", "--ops", "relu_backward,batch_norm_training_backward", "--dtypes", "f32,bf16", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    functions = {f["name"] for op in manifest["ops"] for f in op["functions"]}
    assert {op["name"] for op in manifest["ops"]} == {"relu_backward", "batch_norm_training_backward"}
    assert "relu_backward_bf16" in functions and "relu_backward_f16" not in functions
    assert "batch_norm_training_backward_bf16_f32_nxc" in functions
    assert not any("f16" in name.replace("bf16", "") for name in functions)
    assert (out / "CMakeLists.txt").exists() and not (out / "prelu_backward.c").exists()
    # opgen.load cannot give the subset: the hint says so instead of offering it as this module
    hint = result.stdout.splitlines()[-1]
    assert "holds this subset's kernels" in hint and "every op and dtype of" in hint, hint
    bad = run_cli("build", "--ops", "relu_backward", "--dtypes", "f64", "--out", str(tmp_path / "bad"))
    assert bad.returncode == 1 and "--dtypes: no dtype named f64" in bad.stderr


@pytest.mark.slow
def test_check_passes_on_the_bundled_library():
    result = run_cli("check")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1].startswith(f"{check_line_count()} passed, 0 failed"), lines[-1]
    # one line per op, dtype combination, layout and fixed attribute; each value of every bool
    assert sum(line.startswith("prelu_backward ") for line in lines) == 6
    assert sum(line.startswith("relu_backward ") and "use_dst=True" in line for line in lines) == 3
    assert sum(line.startswith("relu_backward ") and "use_dst=False" in line for line in lines) == 3
    flagged = [s for s in opgen.bundled.specs if any(f.name == "with_diff_gamma_beta" for f in s.flags)]
    assert sum("with_diff_gamma_beta=False" in line for line in lines) == sum(
        len(s.dtypes) * max(1, len(s.layouts)) for s in flagged
    )


@pytest.mark.slow
def test_closed_stdout_ends_quietly():
    """`opgen check | head`: the reader is gone; the command stops without a traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "opgen.cli", "check"], stdout=write_end, stderr=subprocess.PIPE, text=True
        )
    finally:
        os.close(write_end)
    assert result.returncode == 141, result.stderr  # 128 + SIGPIPE
    assert result.stderr == "", result.stderr


@pytest.mark.slow
def test_check_reports_a_wrong_result(tmp_path):
    """A check that can fail: an oracle off by a factor of 2 for one op fails that op only."""
    oracle = tmp_path / "oracle.py"
    oracle.write_text(
        "from opgen.oracle import *  # noqa: F403\n"
        "from opgen import oracle as _base\n\n\n"
        "def relu_backward(src_or_dst, diff_dst, *, use_dst=True):\n"
        "    return 2 * _base.relu_backward(src_or_dst, diff_dst, use_dst=use_dst)\n"
    )
    result = run_cli("check", "--oracle", str(oracle))
    assert result.returncode == 1
    failing = [line.split()[0] for line in result.stdout.splitlines() if "FAIL" in line]
    assert failing == ["relu_backward"] * 6, result.stdout


NEGATE = elementwise_spec(
    "negated_relu_backward",
    "ReLU's gradient, negated on request.",
    'name = "negate"\ntype = "bool"\ndefault = false\ndoc = "Negate the gradient."',
    "-diff_dst if negate else (diff_dst if src > 0 else 0)",
)


@pytest.mark.slow
def test_check_runs_the_true_value_of_a_bool_whose_default_is_false(tmp_path):
    """A bool attribute defaulting to False: its True kernel runs too, so an oracle wrong on
    the True path only fails there."""
    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(BUNDLED_SPECS / "dtypes.toml", specs)
    (specs / "negated_relu_backward.toml").write_text(NEGATE)
    oracle = tmp_path / "oracle.py"
    oracle.write_text(
        "import numpy as np\n\n\n"
        "def negated_relu_backward(src, diff_dst, *, negate=False):  # ignores negate: wrong when True\n"
        "    return np.where(np.asarray(src, np.float64) > 0, np.asarray(diff_dst, np.float64), 0.0)\n"
    )
    result = run_cli("check", "--specs", str(specs), "--oracle", str(oracle))
    assert result.returncode == 1, result.stdout + result.stderr
    rows = {line.split()[3]: line for line in result.stdout.splitlines() if line.startswith("negated_relu_backward")}
    assert set(rows) == {"negate=True", "negate=False"}, result.stdout
    assert "FAIL" in rows["negate=True"] and rows["negate=False"].endswith("pass"), result.stdout


EXP_IN_BASELINE = """
import sys, numpy as np, opgen
library = opgen.load(sys.argv[1])
assert library.module.ffi.string(library.module.lib.opgen_cpu_target()) == b"baseline"
src = np.load(sys.argv[2])
np.save(sys.argv[3], library.exp_scaled(src, np.ones_like(src)))
"""


@pytest.mark.slow
@pytest.mark.parametrize("target", ["best", "baseline"])
@pytest.mark.parametrize("compute", ["normal", "wide"])
def test_exp_in_a_users_spec_matches_numpy(tmp_path, compute, target):
    """The math's exp() is opgen's own vectorizable one (f32: opgen_expf; "wide": opgen_exp in
    double): within 1 ulp of f32 everywhere, through overflow, underflow and subnormal results,
    with fused multiply-adds (the best target here) and without (the x86-64 baseline)."""
    directory = tmp_path / "specs"
    directory.mkdir()
    shutil.copy(BUNDLED_SPECS / "dtypes.toml", directory)
    spec = elementwise_spec(
        "exp_scaled",
        "diff_dst * exp(src)",
        'name = "unused"\ntype = "f32"\ndefault = 0.0\ndoc = "Unused."',
        "diff_dst * exp(src)",
    )
    if compute == "wide":
        spec = spec.replace('pattern = "elementwise"', 'pattern = "elementwise"\ncompute = "wide"')
    (directory / "exp_scaled.toml").write_text(spec)
    library = opgen.load(directory)
    generator = np.random.default_rng(11)
    src = np.concatenate(
        [
            np.linspace(-110.0, 95.0, 400_003),
            generator.standard_normal(100_000) * 30,
            [0.0, -0.0, np.inf, -np.inf, np.nan, 88.72, 88.73, -87.33, -103.97, -103.28, -104.0, 1e-30, -1e-30],
        ]
    ).astype(np.float32)
    if target == "best":
        got = library.exp_scaled(src, np.ones_like(src))
    else:
        np.save(tmp_path / "src.npy", src)
        env = {**os.environ, "OPGEN_CPU_TARGET": "baseline"}
        paths = [str(directory), str(tmp_path / "src.npy"), str(tmp_path / "got.npy")]
        root = Path(__file__).parent.parent
        subprocess.run([sys.executable, "-c", EXP_IN_BASELINE, *paths], env=env, check=True, cwd=root)
        got = np.load(tmp_path / "got.npy")
    with np.errstate(over="ignore", under="ignore"):
        expected = np.exp(src.astype(np.float64))
    assert_ulps(got, expected, "f32", 1, f"exp ({compute}, {target} target)")
