"""`opgen check`, `opgen build` and `opgen.load` on a user's own spec directory: the accuracy
contract and the input domains come from the specs (no op is known by name), one failing op
does not stop the others, and every broken spec of a directory is reported at once."""

from __future__ import annotations

import re
import shutil
import textwrap
from pathlib import Path

import pytest

import opgen
from opgen import expr
from opgen.bundle import PACKAGE
from opgen.render import BUNDLED_SPECS
from opgen.specs import SpecError, load_specs
from tests.test_cli import LEAKY, run_cli

# A broadcast_reduce op whose only tensor input is diff_dst: the gradient of y = scale * x + b
# with respect to x and to b, both from diff_dst alone.
SCALE_BIAS = textwrap.dedent("""
    [op]
    name = "scale_bias_backward"
    summary = "diff_src = scale * diff_dst; diff_bias sums diff_dst per channel."
    source = "a user's own op"
    pattern = "broadcast_reduce"
    reference = "diff_dst"

    [[attributes]]
    name = "data_format"
    type = "string"
    allowed = ["NCX", "NXC"]
    default = "NCX"
    role = "layout"
    doc = "Where the channel is."

    [[inputs]]
    name = "diff_dst"
    doc = "Output gradient."

    [[inputs]]
    name = "scale"
    kind = "channel"
    broadcast = ["per_channel", "per_tensor"]
    doc = "Scale, [C] or [1]."

    [[outputs]]
    name = "diff_src"
    doc = "Input gradient."

    [[outputs]]
    name = "diff_bias"
    kind = "channel"
    like = "scale"
    doc = "Bias gradient, scale's shape."

    [[dtypes]]
    diff_dst = "f32"
    scale = "f32"
    diff_src = "f32"
    diff_bias = "f32"

    [[dtypes]]
    diff_dst = "bf16"
    scale = "bf16"
    diff_src = "bf16"
    diff_bias = "bf16"

    [math.elements]
    diff_src = "scale * diff_dst"

    [math.sums]
    diff_bias = "diff_dst"
""")

SCALE_BIAS_ORACLE = """
import numpy as np


def scale_bias_backward(diff_dst, scale, *, data_format="NCX"):
    dy, w = np.asarray(diff_dst).astype(np.float64), np.asarray(scale).astype(np.float64)
    axis = 1 if data_format == "NCX" else dy.ndim - 1
    view = [1] * dy.ndim
    if w.shape != (1,) or dy.shape[axis] == 1:
        view[axis] = w.size
    axes = tuple(d for d in range(dy.ndim) if view[d] == 1)
    with np.errstate(all="ignore"):
        return dy * w.reshape(view), dy.sum(axis=axes).reshape(w.shape) * FACTOR
"""

# A reduce_then_apply op: per channel, the sum of src and of its squares (terms that round where
# the kernel computes them), and src scaled by sqrt(scale), where scale must be positive (its
# oracle refuses anything else, as the op's definition does).
ROOT_SCALE = textwrap.dedent("""
    [op]
    name = "root_scale"
    summary = "dst = src * sqrt(scale) per channel; total = the sum of src per channel."
    source = "a user's own op"
    pattern = "reduce_then_apply"
    reference = "src"
    layout = "NCX"
    min_rank = 2

    [[inputs]]
    name = "src"
    doc = "Input."

    [[inputs]]
    name = "scale"
    kind = "channel"
    broadcast = ["per_channel"]
    domain = "positive"
    doc = "Scale, [C], positive."

    [[outputs]]
    name = "dst"
    doc = "Scaled input."

    [[outputs]]
    name = "total"
    kind = "channel"
    like = "scale"
    doc = "Sum of src per channel."

    [[outputs]]
    name = "energy"
    kind = "channel"
    like = "scale"
    doc = "Sum of src * src per channel."

    [[dtypes]]
    src = "f32"
    scale = "f32"
    dst = "f32"
    total = "f32"
    energy = "f32"

    [[dtypes]]
    src = "bf16"
    scale = "f32"
    dst = "bf16"
    total = "f32"
    energy = "f32"

    [math.channel]
    root = "sqrt(scale)"

    [math.sums]
    sum_src = "src"
    sum_squares = "src * src"

    [math.after]
    total = "sum_src"
    energy = "sum_squares"

    [math.elements]
    dst = "src * root"

    [accuracy]
    dst = "oracle:root_scale_bounds"
    total = "sum"
""")

ROOT_SCALE_ORACLE = """
import numpy as np


def root_scale(src, scale):
    w = np.asarray(scale).astype(np.float64)
    if not (w > 0).all():
        raise ValueError("scale must be positive")
    view = [1] * np.ndim(src)
    view[1] = w.size
    x = np.asarray(src).astype(np.float64)
    axes = tuple(d for d in range(x.ndim) if d != 1)
    return x * np.sqrt(w).reshape(view), x.sum(axis=axes), (x * x).sum(axis=axes)


def root_scale_bounds(src, scale, *, float_run=0):
    # sqrt rounded to double, then to float; the product rounded in float: 3 roundings of 2^-24
    # relative at most, and 2^-149 absolute where the product lands among f32's subnormals
    w = np.asarray(scale).astype(np.float64)
    view = [1] * np.ndim(src)
    view[1] = w.size
    magnitude = np.abs(np.asarray(src).astype(np.float64)) * np.sqrt(w).reshape(view)
    return 3 * 2.0**-24 * magnitude * FACTOR + 2.0**-149, None, None
"""


def user_dir(tmp_path: Path, specs: dict[str, str], oracle: str | None = None) -> tuple[Path, Path | None]:
    directory = tmp_path / "specs"
    directory.mkdir(exist_ok=True)
    shutil.copy(BUNDLED_SPECS / "dtypes.toml", directory)
    for name, text in specs.items():
        (directory / f"{name}.toml").write_text(text)
    if oracle is None:
        return directory, None
    path = tmp_path / "oracle.py"
    path.write_text(oracle)
    return directory, path


def check_rows(result, op: str) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.startswith(f"{op} ")]


@pytest.mark.parametrize("factor", [1, 1 + 2.0**-6])
def test_check_a_broadcast_reduce_op_with_one_tensor_input(tmp_path, factor):
    """Its sums' bound comes from the spec's sum terms: every variant passes against a true
    oracle, and an oracle whose sums are off by 2^-6 relative (beyond 1 bf16 ulp and the
    float runs' 16 x 2^-24) fails them."""
    oracle = SCALE_BIAS_ORACLE.replace("FACTOR", repr(factor))
    specs, oracle_path = user_dir(tmp_path, {"scale_bias_backward": SCALE_BIAS}, oracle)
    result = run_cli("check", "--specs", str(specs), "--oracle", str(oracle_path))
    assert "Traceback" not in result.stderr, result.stderr
    rows = check_rows(result, "scale_bias_backward")
    assert len(rows) == 4, result.stdout + result.stderr  # 2 dtypes x 2 layouts
    if factor == 1:
        assert result.returncode == 0 and all(row.endswith("pass") for row in rows), result.stdout
    else:
        assert result.returncode == 1 and all("FAIL: " in row and ": diff_bias[" in row for row in rows), result.stdout


@pytest.mark.parametrize("factor", [1, 0])
def test_check_a_users_reduce_then_apply_op(tmp_path, factor):
    """The contract the spec states (a sum, and a bound function of the oracle it names) and the
    input domain it states (scale positive) are what check uses; a bound of 0 beyond 1 ulp
    is too tight for dst's three f32 roundings and fails."""
    oracle = ROOT_SCALE_ORACLE.replace("FACTOR", repr(factor))
    specs, oracle_path = user_dir(tmp_path, {"root_scale": ROOT_SCALE}, oracle)
    result = run_cli("check", "--specs", str(specs), "--oracle", str(oracle_path))
    assert "Traceback" not in result.stderr, result.stderr
    rows = check_rows(result, "root_scale")
    assert len(rows) == 2, result.stdout + result.stderr
    if factor:
        assert result.returncode == 0 and all(row.endswith("pass") for row in rows), result.stdout
    else:
        # f32: dst's roundings exceed 1 ulp; bf16 stores the f32 result, within 1 ulp of bf16
        f32, bf16 = rows
        assert result.returncode == 1 and "FAIL: " in f32 and ": dst[" in f32, result.stdout
        assert bf16.endswith("pass"), result.stdout


def test_an_accuracy_contract_names_an_output_and_a_known_kind(tmp_path):
    bad = ROOT_SCALE.replace('total = "sum"', 'total = "close enough"')
    specs, _ = user_dir(tmp_path, {"root_scale": bad})
    with pytest.raises(SpecError, match=r"root_scale.toml: accuracy.total: "):
        load_specs(specs)
    unknown = ROOT_SCALE.replace('total = "sum"', 'totals = "sum"')
    specs, _ = user_dir(tmp_path, {"root_scale": unknown})
    with pytest.raises(SpecError, match=r"root_scale.toml: accuracy.totals: "):
        load_specs(specs)
    domain = ROOT_SCALE.replace('domain = "positive"', 'domain = "small"')
    specs, _ = user_dir(tmp_path, {"root_scale": domain})
    with pytest.raises(SpecError, match=r"root_scale.toml: inputs.scale.domain: "):
        load_specs(specs)


def test_check_and_accuracy_know_no_op_by_name():
    # an op may share its name with a function of the spec language (tanh): that is not the op
    names = [p.stem for p in BUNDLED_SPECS.glob("*.toml") if p.stem != "dtypes" and p.stem not in expr.FUNCTIONS]
    # ... nor with NumPy's functions and plain words (np.add, "its minimum"): those as strings only
    words = {"add", "subtract", "multiply", "divide", "maximum", "minimum"}
    for module in ("check.py", "accuracy.py"):
        text = (PACKAGE / module).read_text()
        named = [
            name for name in names if (f'"{name}"' in text or f"'{name}'" in text) or name not in words and name in text
        ]
        assert not named, f"opgen/{module} names {named}"
        assert not re.search(r"\bvariance\b|HardSigmoid", text), module


BROKEN_TYPE = LEAKY.replace("leaky_relu_backward", "broken_type").replace('type = "f32"', 'type = "f64"')
BROKEN_MATH = LEAKY.replace("leaky_relu_backward", "broken_math").replace("negative_slope * diff_dst", "slope")


def broken_dir(tmp_path: Path) -> Path:
    specs, _ = user_dir(
        tmp_path, {"leaky_relu_backward": LEAKY, "broken_type": BROKEN_TYPE, "broken_math": BROKEN_MATH}
    )
    return specs


BROKEN_LINES = ("broken_type.toml: attributes.negative_slope.type", "broken_math.toml: math.elements.diff_src")


def test_ops_builds_only_what_it_names(tmp_path):
    """--ops of a good op builds with broken specs beside it; the whole directory reports each
    broken spec, and nothing is written."""
    specs = broken_dir(tmp_path)
    good = run_cli("build", "--specs", str(specs), "--ops", "leaky_relu_backward", "--out", str(tmp_path / "good"))
    assert good.returncode == 0, good.stderr
    assert "built 1 ops" in good.stdout
    whole = run_cli("build", "--specs", str(specs), "--out", str(tmp_path / "whole"))
    assert whole.returncode == 1 and "Traceback" not in whole.stderr
    for line in BROKEN_LINES:
        assert line in whole.stderr, whole.stderr
    assert not (tmp_path / "whole").exists()
    unknown = run_cli("build", "--specs", str(specs), "--ops", "nothing_here", "--out", str(tmp_path / "none"))
    assert unknown.returncode == 1 and "--ops: no op named nothing_here" in unknown.stderr, unknown.stderr


def test_load_reports_every_broken_spec(tmp_path):
    specs = broken_dir(tmp_path)
    with pytest.raises(SpecError) as caught:
        opgen.load(specs)
    message = str(caught.value)
    for line in BROKEN_LINES:
        assert line in message, message
    assert "leaky_relu_backward" not in message


def test_check_checks_the_good_ops_of_a_directory_with_broken_specs(tmp_path):
    specs = broken_dir(tmp_path)
    (specs / "scale_bias_backward.toml").write_text(SCALE_BIAS)
    oracle = tmp_path / "oracle.py"
    # leaky_relu_backward has no oracle function: that op fails, the others are still checked
    oracle.write_text(SCALE_BIAS_ORACLE.replace("FACTOR", "1"))
    result = run_cli("check", "--specs", str(specs), "--oracle", str(oracle))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert all(row.endswith("pass") for row in check_rows(result, "scale_bias_backward")), result.stdout
    assert len(check_rows(result, "scale_bias_backward")) == 4, result.stdout
    assert all("FAIL" in row for row in check_rows(result, "leaky_relu_backward")), result.stdout
    for line in BROKEN_LINES:
        assert line in result.stdout, result.stdout


def test_check_goes_on_after_an_op_whose_oracle_raises(tmp_path):
    specs, oracle = user_dir(
        tmp_path,
        {"leaky_relu_backward": LEAKY, "scale_bias_backward": SCALE_BIAS},
        SCALE_BIAS_ORACLE.replace("FACTOR", "1")
        + "\n\ndef leaky_relu_backward(src, diff_dst, *, negative_slope):\n    raise RuntimeError('no such math')\n",
    )
    result = run_cli("check", "--specs", str(specs), "--oracle", str(oracle))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert all("FAIL" in row and "no such math" in row for row in check_rows(result, "leaky_relu_backward"))
    assert len(check_rows(result, "scale_bias_backward")) == 4, result.stdout
    assert all(row.endswith("pass") for row in check_rows(result, "scale_bias_backward")), result.stdout
