"""The spec loader: every malformed spec is rejected with `file: key: what is wrong`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opgen.render import BUNDLED_SPECS, BUNDLED_TEMPLATES, RenderError, render_library
from opgen.specs import SpecError, load_specs

RELU = (BUNDLED_SPECS / "relu_backward.toml").read_text()


def spec_dir(tmp_path: Path, text: str, name: str = "relu_backward") -> Path:
    directory = tmp_path / "specs"
    directory.mkdir(exist_ok=True)
    shutil.copy(BUNDLED_SPECS / "dtypes.toml", directory)
    (directory / f"{name}.toml").write_text(text)
    return directory


def rejected(tmp_path: Path, text: str, *fragments: str, name: str = "relu_backward") -> str:
    directory = spec_dir(tmp_path, text, name)
    with pytest.raises(SpecError) as caught:
        load_specs(directory)
    message = str(caught.value)
    assert f"{name}.toml" in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_bundled_specs_load():
    table, specs = load_specs(BUNDLED_SPECS)
    assert {"f32", "f16", "bf16"} <= set(table.dtypes)
    assert {s.name for s in specs} >= {
        "relu_backward",
        "hard_sigmoid_backward",
        "prelu_backward",
        "batch_norm_training_backward",
        "aclnn_prelu_backward",
        "sigmoid_backward",
        "tanh_backward",
    }


def test_malformed_toml_names_the_line(tmp_path):
    rejected(tmp_path, RELU + "\n[op\n", "not valid TOML", "line")


def test_duplicate_key(tmp_path):
    rejected(
        tmp_path,
        RELU.replace('pattern = "elementwise"', 'pattern = "elementwise"\npattern = "elementwise"'),
        "not valid TOML",
    )


@pytest.mark.parametrize(
    "old,new,fragments",
    [
        ('pattern = "elementwise"', 'pattern = "elementwise"\ncolour = "red"', ["op.colour", "unknown key"]),
        ('summary = "', 'summry = "', ["op.summry", "unknown key"]),
        ('name = "diff_dst"', 'name = "diff dst"', ["inputs[1].name", "not a C identifier"]),
        ('name = "diff_dst"', 'name = "x;system"', ["not a C identifier"]),
        ('name = "diff_dst"', 'name = "int"', ["reserved"]),
        ('name = "diff_dst"', 'name = "lambda"', ["reserved"]),
        ('name = "diff_dst"', 'name = "diff_data"', ["inputs[1].name", "_data"]),
        ('name = "diff_dst"', 'name = "src_or_dst"', ["used twice"]),
        ('pattern = "elementwise"', 'pattern = "scan"', ["op.pattern", "not one of"]),
        ('type = "bool"', 'type = "int"', ["attributes.use_dst.type"]),
        ("default = true", 'default = "yes"', ["attributes.use_dst.default", "True or False"]),
        (
            'diff_src = "f32"\n\n[[dtypes]]\nsrc_or_dst = "f16"',
            'diff_src = "f64"\n\n[[dtypes]]\nsrc_or_dst = "f16"',
            ["dtypes[0].diff_src", "not in the dtype table"],
        ),
        ('diff_dst = "f32"\ndiff_src = "f32"', 'diff_src = "f32"', ["dtypes[0].diff_dst", "missing"]),
        (
            'diff_src = "diff_dst if src_or_dst > 0 else 0"',
            'diff_src = "diff_dst if src_or_dst > 0 else"',
            ["math.elements.diff_src", "syntax error"],
        ),
        (
            'diff_src = "diff_dst if src_or_dst > 0 else 0"',
            'diff_src = "diff_dst * gamma"',
            ["math.elements.diff_src", "unknown name 'gamma'"],
        ),
        (
            'diff_src = "diff_dst if src_or_dst > 0 else 0"',
            'diff_src = "system(diff_dst)"',
            ["math.elements.diff_src", "unknown function"],
        ),
        (
            'diff_src = "diff_dst if src_or_dst > 0 else 0"',
            'diff_src = "diff_dst ** 2"',
            ["math.elements.diff_src", "unsupported operator"],
        ),
        (
            'diff_src = "diff_dst if src_or_dst > 0 else 0"',
            'diff_src = "src_or_dst > 0"',
            ["math.elements.diff_src", "condition"],
        ),
        (
            'diff_src = "diff_dst if src_or_dst > 0 else 0"',
            'diff_src = "diff_dst.real"',
            ["math.elements.diff_src", "unsupported syntax"],
        ),
        (
            'diff_src = "diff_dst if src_or_dst > 0 else 0"',
            'diff_src = "\\"*/ evil(); /*\\""',
            ["math.elements.diff_src", "unsupported constant"],
        ),
        ('diff_src = "diff_dst if src_or_dst > 0 else 0"', 'other = "diff_dst"', ["output 'diff_src' is not defined"]),
        ("[math.elements]", '[math.sums]\nx = "diff_dst"\n[math.elements]', ["math.sums", "unknown key"]),
    ],
)
def test_rule_violations_name_file_and_key(tmp_path, old, new, fragments):
    assert old in RELU, old
    rejected(tmp_path, RELU.replace(old, new, 1), *fragments)


@pytest.mark.parametrize(
    "expression,fragment",
    [
        ("1" + "0" * 400, "unsupported constant"),
        ("-" * 3000 + "diff_dst", "nested too deeply"),
        ("diff_dst" + " + diff_dst" * 1500, "longer than"),
        ("(" * 300 + "diff_dst" + ")" * 300, "nested"),
    ],
)
def test_pathological_expressions(tmp_path, expression, fragment):
    text = RELU.replace('diff_src = "diff_dst if src_or_dst > 0 else 0"', f'diff_src = "{expression}"')
    rejected(tmp_path, text, "math.elements.diff_src", fragment)


def test_file_name_must_match_op_name(tmp_path):
    rejected(tmp_path, RELU, "op.name", "must match the file name", name="other_op")


def test_missing_dtype_table(tmp_path):
    directory = tmp_path / "specs"
    directory.mkdir()
    (directory / "relu_backward.toml").write_text(RELU)
    with pytest.raises(SpecError, match="dtypes.toml: missing"):
        load_specs(directory)


def test_template_error_names_template_and_line(tmp_path):
    templates = tmp_path / "templates"
    shutil.copytree(BUNDLED_TEMPLATES, templates)
    path = templates / "elementwise.c.j2"
    path.write_text(path.read_text().replace("{{ m.comment(k) }}", "{{ k.no_such_key }}"))
    with pytest.raises(RenderError) as caught:
        render_library(BUNDLED_SPECS, templates)
    assert "elementwise.c.j2:" in str(caught.value) and "no_such_key" in str(caught.value)


SPEC_FILES = sorted(p for p in BUNDLED_SPECS.glob("*.toml") if p.name != "dtypes.toml")
TOKENS = [
    '"f32"',
    '"f64"',
    "true",
    "1e400",
    '"x y"',
    '"int"',
    "[]",
    "{}",
    '"NCX"',
    "-1",
    '"a if b"',
    '"exp(x)"',
    "name",
    "kind",
    '"channel"',
    '"tensor"',
    "[[inputs]]",
    "[math.sums]",
    "=",
    '"',
    "\\n[op]\\n",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    which=st.integers(0, len(SPEC_FILES) - 1),
    edits=st.lists(
        st.tuples(st.integers(0, 10_000), st.integers(0, 40), st.sampled_from(TOKENS)), min_size=1, max_size=4
    ),
)
def test_mutated_specs_fail_cleanly(tmp_path_factory, which, edits):
    """Random edits of a valid spec: the loader either accepts it or raises SpecError; a spec it
    accepts renders (or raises RenderError); nothing else escapes."""
    path = SPEC_FILES[which]
    text = path.read_text()
    for position, length, token in edits:
        position %= max(1, len(text))
        text = text[:position] + token.replace("\\\\n", "\\n") + text[position + length :]
    directory = tmp_path_factory.mktemp("fuzz")
    shutil.copy(BUNDLED_SPECS / "dtypes.toml", directory)
    (directory / path.name).write_text(text)
    try:
        render_library(directory)
    except (SpecError, RenderError):
        pass
