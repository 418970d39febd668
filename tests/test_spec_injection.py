"""A user's spec cannot put text into the generated code: every string of a spec that reaches C
is either refused by the loader (names, allowed values, the dtype table's C) or made inert where
it lands (docs, summaries and sources in C comments); Python docstrings carry it verbatim.

Each hostile string below ends a comment, opens one, starts a preprocessor line, splices lines
(a backslash or the trigraph ??/ before a line break), quotes, or is not ASCII; each carries the
marker `injected_by_spec`, which must never reach the compiler as code."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import numpy as np
import pytest

import opgen
from opgen import oracle
from opgen.compile import compiler
from opgen.render import BUNDLED_SPECS, render_library
from opgen.specs import SpecError, load_specs

from .spec_fuzz import _toml_value

MARKER = "injected_by_spec"
HOSTILE = [
    f"a */ int {MARKER} = 1; /* b",
    f"*/ #define {MARKER} 1",
    f"line\n#include <{MARKER}.h>\nint {MARKER};",
    f"ends in a splice \\\nint {MARKER};",
    f"trigraph ??/\nint {MARKER};",
    f'quotes " \' ` and {MARKER} */ "',
    f"non-ASCII: \u00e9 \u03c3 \u2211 \U0001f600 {MARKER} */",
    f"controls \r\t\x0b\x0c {MARKER} \u0000 */",
    f"/* nested /* {MARKER} */ */",
    f"*/{MARKER}/*",
]
WARNINGS = ["-std=c99", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-Wno-unknown-pragmas"]


def _hostile_spec(directory: Path, text: str) -> Path:
    """relu_backward with `text` in every free-text field (summary, source, every doc)."""
    shutil.copy(BUNDLED_SPECS / "dtypes.toml", directory)
    lines = (BUNDLED_SPECS / "relu_backward.toml").read_text().splitlines()
    hostile = _toml_value(text)
    edited = []
    for line in lines:
        key = line.split("=", 1)[0].strip()
        edited.append(f"{key} = {hostile}" if key in ("summary", "source", "doc") else line)
    path = directory / "relu_backward.toml"
    path.write_text("\n".join(edited) + "\n")
    assert tomllib.loads(path.read_text())["op"]["summary"] == text  # the spec holds the text as written
    return path


def _code_without_comments(source: Path, include: Path) -> str:
    """The C the compiler sees once comments are removed (no macro expansion)."""
    result = subprocess.run(
        [*compiler(), "-std=c99", "-fpreprocessed", "-dD", "-E", "-P", str(source)],
        capture_output=True,
        text=True,
        cwd=include,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _rendered(tmp_path: Path, text: str) -> tuple[Path, dict[str, str], str]:
    directory = tmp_path / f"specs ??= \\ \u00e9 *{MARKER}"  # a directory name is text too
    directory.mkdir()
    _hostile_spec(directory, text)
    library = render_library(directory)
    out = tmp_path / "out"
    out.mkdir()
    for name, content in library.files.items():
        assert content.isascii(), name
        (out / name).write_text(content)
    return out, library.files, library.cdef


@pytest.mark.parametrize("index", range(len(HOSTILE)))
def test_hostile_text_in_every_spec_field_stays_in_comments(tmp_path, index):
    out, files, cdef = _rendered(tmp_path, HOSTILE[index])
    for name in files:
        if name.endswith((".c", ".h")):
            code = _code_without_comments(out / name, out)
            assert MARKER not in code, f"{name}: spec text reached the C outside a comment"
    assert MARKER not in cdef  # cffi's declarations carry no docs


def test_hostile_text_compiles_warning_free(tmp_path):
    out, files, _ = _rendered(tmp_path, "".join(HOSTILE))
    for name in [n for n in files if n.endswith(".c") and "__" not in n]:
        result = subprocess.run(
            [*compiler(), *WARNINGS, "-fsyntax-only", "-I", str(out), str(out / name)],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, f"{name}:\n{result.stderr[-3000:]}"


def test_hostile_text_builds_runs_and_is_the_docstring(tmp_path):
    """One op with every hostile string in its fields compiles into a module that computes."""
    directory = tmp_path / "specs"
    directory.mkdir()
    _hostile_spec(directory, "".join(HOSTILE))
    ops = opgen.load(directory)
    x = np.array([-1.5, 0.0, 2.0, np.nan], np.float32)
    dy = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    got = ops.relu_backward(x, dy, use_dst=False)
    np.testing.assert_array_equal(got, oracle.relu_backward(x, dy, use_dst=False).astype(np.float32))
    assert "".join(HOSTILE) in ops.relu_backward.__doc__  # docstrings are data: verbatim


ALLOWED_VALUES = ["-1", "a */ int x; /*", "\u00e9", "", "1st", "has space", "x" * 64, "NXC\n#define x"]


@pytest.mark.parametrize("value", ALLOWED_VALUES)
def test_allowed_values_must_be_enumerator_names(tmp_path, value):
    shutil.copy(BUNDLED_SPECS / "dtypes.toml", tmp_path)
    text = (BUNDLED_SPECS / "prelu_backward.toml").read_text()
    assert 'allowed = ["NCX", "NXC"]' in text
    (tmp_path / "prelu_backward.toml").write_text(
        text.replace('allowed = ["NCX", "NXC"]', f'allowed = ["NCX", "NXC", {_toml_value(value)}]')
    )
    with pytest.raises(SpecError, match=r"prelu_backward\.toml: attributes\.data_format\.allowed: .*not a valid value"):
        load_specs(tmp_path)


def test_allowed_values_must_differ_beyond_letter_case(tmp_path):
    shutil.copy(BUNDLED_SPECS / "dtypes.toml", tmp_path)
    text = (BUNDLED_SPECS / "prelu_backward.toml").read_text()
    (tmp_path / "prelu_backward.toml").write_text(text.replace('allowed = ["NCX", "NXC"]', 'allowed = ["NCX", "ncx"]'))
    with pytest.raises(SpecError, match=r"attributes\.data_format\.allowed: values must differ in more than"):
        load_specs(tmp_path)


@pytest.mark.parametrize(
    "old, new, key",
    [
        ('load = "opgen_f16_to_f32({})"', 'load = "opgen_f16_to_f32({}); int injected_by_spec"', "f16.load"),
        ('store = "{}"', 'store = "{} /* x */"', "f32.store"),
        ('numpy = "float16"', 'numpy = "int16"', "f16.numpy"),
        ('numpy = "float16"', 'numpy = "no_such_dtype"', "f16.numpy"),
        ("mantissa_bits = 7", "mantissa_bits = 8", "bf16.mantissa_bits"),
        ('literal_suffix = "f"', 'literal_suffix = "f /* x */"', "compute_types.float.literal_suffix"),
        ("[compute_types.double]", "[compute_types.long_double]", "compute_types.long_double"),
    ],
)
def test_dtype_table_c_is_checked(tmp_path, old, new, key):
    shutil.copy(BUNDLED_SPECS / "relu_backward.toml", tmp_path)
    text = (BUNDLED_SPECS / "dtypes.toml").read_text()
    assert old in text
    (tmp_path / "dtypes.toml").write_text(text.replace(old, new, 1))
    with pytest.raises(SpecError) as caught:
        load_specs(tmp_path)
    assert f"dtypes.toml: {key}:" in str(caught.value)
