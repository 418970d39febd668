"""A user's spec cannot put text into the generated code: every string of a spec that reaches C
is either refused by the loader (names, allowed values, the dtype table's C) or made inert where
it lands (docs, summaries and sources in C comments); Python docstrings carry it verbatim.

Each hostile string below ends a comment, opens one, starts a preprocessor line, splices lines
(a backslash or the trigraph ??/ before a line break), quotes, or is not ASCII; each carries the
marker `injected_by_spec`, which must never reach the compiler as code."""

from __future__ import annotations

import re
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
from opgen.specs import SpecError, load_specs, reserved

from .helpers import rng
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


# Names the generated C once declared for itself beside a spec's names, and no longer reserves:
# the C op API's locals and parameters, now opgen_-prefixed. Each op below gets its attributes
# renamed to some of them (every occurrence of the word in the spec: the math too).
RENAMED = [
    ("hard_sigmoid_backward", {"alpha": "status", "beta": "flags"}),
    ("add", {"auto_broadcast": "broadcast"}),
    ("reduce_sum", {"axes": "names", "keep_dims": "present"}),
    ("layer_norm", {"begin_norm_axis": "channel_axis", "epsilon": "described"}),
    ("batch_norm_training_backward", {"epsilon": "data", "data_format": "attributes"}),
    ("prelu_backward", {"data_format": "required"}),
]


def _renamed_spec(directory: Path, op: str, renames: dict[str, str]) -> None:
    shutil.copy(BUNDLED_SPECS / "dtypes.toml", directory)
    lines = (BUNDLED_SPECS / f"{op}.toml").read_text().splitlines()
    for old, new in renames.items():  # the names, not the roles (`role = "axes"`)
        lines = [line if line.startswith("role") else re.sub(rf"\b{old}\b", new, line) for line in lines]
    (directory / f"{op}.toml").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("op, renames", RENAMED, ids=[op for op, _ in RENAMED])
def test_attributes_may_take_the_names_of_the_api_own_variables(tmp_path, op, renames):
    """A spec whose attributes are named like the C op API's own variables once were loads and
    its C compiles warning-free (each of the op's files, the per-target copies aside)."""
    _renamed_spec(tmp_path, op, renames)
    library = render_library(tmp_path)
    assert {a.name for a in library.specs[0].attributes} >= set(renames.values())
    out = tmp_path / "out"
    out.mkdir()
    for name, content in library.files.items():
        (out / name).write_text(content)
    for name in (f"{op}.c", f"{op}_api.c"):
        result = subprocess.run(
            [*compiler(), *WARNINGS, "-fsyntax-only", "-I", str(out), str(out / name)],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, f"{name}:\n{result.stderr[-3000:]}"


@pytest.mark.slow  # builds a module
def test_an_op_with_such_attribute_names_computes_as_the_bundled_one(tmp_path):
    op, renames = RENAMED[0]
    _renamed_spec(tmp_path, op, renames)
    ops = opgen.load(tmp_path)
    x = rng("renamed").standard_normal(1000).astype(np.float32) * 4
    dy = rng("renamed dy").standard_normal(1000).astype(np.float32)
    got = ops.hard_sigmoid_backward(x, dy, status=0.2, flags=0.5)
    expected = opgen.hard_sigmoid_backward(x, dy, alpha=0.2, beta=0.5)
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))


# The declarations of a local or a parameter in C: a type, stars and qualifiers, the name.
_DECLARATION = re.compile(
    r"\b(?:int|int64_t|size_t|float|double|char|unsigned|uint16_t|uint32_t|opgen_[a-z0-9_]+|__m\w+)\b"
    r"[\s*]*(?:const\b[\s*]*)?(?:OPGEN_RESTRICT\b\s*)?([A-Za-z_][A-Za-z0-9_]*)\s*(?=[=;,\[)])"
)


def test_the_generated_c_declares_no_name_a_spec_may_take():
    """Every name the generated C of an op declares (its kernels' and its C API's locals and
    parameters, where the spec's own names are in scope too) is opgen_-prefixed, refused as a
    spec name, or made from one of the spec's names: whatever names the loader accepts, the C
    compiles. Found in the C text (comments and strings removed), for every bundled op."""
    library = render_library()
    found: dict[str, set[str]] = {}
    for spec in library.specs:
        own = {spec.name, *(t.name for t in (*spec.inputs, *spec.outputs)), *(a.name for a in spec.attributes)}
        own |= {f.name for f in spec.flags} | {e.name for entries in spec.math.values() for e in entries}
        for file in (f"{spec.name}.c", f"{spec.name}_api.c"):
            code = re.sub(r"/\*.*?\*/", "", library.files[file], flags=re.S)
            code = re.sub(r'"(\\.|[^"\\])*"', '""', code)
            for match in _DECLARATION.finditer(code):
                name = match.group(1)
                if name in own or name.startswith(tuple(f"{n}_" for n in own)):
                    continue
                if not reserved(name, spec.pattern):  # a reserved name no spec (of its pattern) can take
                    found.setdefault(name, set()).add(file)
    assert not found, f"declared by the generated C, yet a spec may take these names: {found}"


@pytest.mark.parametrize("name", ["status", "dtype", "tensor", "int_list", "relu_backward"])
def test_a_string_attribute_may_not_name_a_c_type_opgen_defines(tmp_path, name):
    """A string attribute's enum type is opgen_<name> (opgen.h): opgen_status, opgen_tensor, an
    op's function opgen_relu_backward... are taken, and the loader says so, naming file and key."""
    shutil.copy(BUNDLED_SPECS / "dtypes.toml", tmp_path)
    shutil.copy(BUNDLED_SPECS / "relu_backward.toml", tmp_path)
    text = re.sub(r"\bdata_format\b", name, (BUNDLED_SPECS / "prelu_backward.toml").read_text())
    (tmp_path / "prelu_backward.toml").write_text(text)
    with pytest.raises(
        SpecError, match=rf"prelu_backward.toml: attributes\[0\]\.name: '{name}' would name .* opgen_{name}"
    ):
        render_library(tmp_path)


def test_string_values_may_not_make_an_enumerator_opgen_defines(tmp_path):
    """Members are OPGEN_<NAME>_<VALUE>: add's broadcast rule named `form` would make its value
    "numpy" the enumerator OPGEN_FORM_NUMPY, a form of the C API's."""
    shutil.copy(BUNDLED_SPECS / "dtypes.toml", tmp_path)
    text = re.sub(r"\bauto_broadcast\b", "form", (BUNDLED_SPECS / "add.toml").read_text())
    (tmp_path / "add.toml").write_text(text)
    expected = r"add.toml: attributes\[0\]\.allowed: 'numpy' would make the C enumerator OPGEN_FORM_NUMPY"
    with pytest.raises(SpecError, match=expected):
        render_library(tmp_path)
