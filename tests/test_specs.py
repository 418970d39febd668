"""The spec loader: every malformed spec is rejected with `file: key: what is wrong`."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

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
        ('type = "bool"', 'type = "int"', ["attributes.use_dst.role", "an int attribute names axes"]),
        (
            'type = "bool"',
            'type = "int list"',
            ["attributes.use_dst.role", "an int list attribute names a set of axes"],
        ),
        ("default = true", 'default = true\nrole = "keep_dims"', ["attributes.use_dst.role", "'keep_dims' goes with"]),
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


RELU_MATH = 'diff_src = "diff_dst if src_or_dst > 0 else 0"'
HARD_SIGMOID = (BUNDLED_SPECS / "hard_sigmoid_backward.toml").read_text()
HARD_SIGMOID_MATH = 'diff_src = "diff_dst * alpha if 0 < linear and linear < 1 else 0"'
NUMBER_AS_CONDITION = "is a number where a condition is needed"


@pytest.mark.parametrize(
    "expression,fragment",
    [
        # a number where C takes an int condition (opgen_select_*'s first argument, & | !)
        ("diff_dst if src_or_dst else 0", f"'src_or_dst' {NUMBER_AS_CONDITION}"),
        ("diff_dst if not diff_dst else 0", f"'diff_dst' {NUMBER_AS_CONDITION}"),
        ("diff_dst if src_or_dst > 0 and diff_dst else 0", f"'diff_dst' {NUMBER_AS_CONDITION}"),
        ("diff_dst if use_dst or src_or_dst else 0", f"'src_or_dst' {NUMBER_AS_CONDITION}"),
        ("diff_dst if 0.5 else 0", f"'0.5' {NUMBER_AS_CONDITION}"),
        # and a bool attribute (a condition) where a number is needed
        ("diff_dst * use_dst", "'use_dst' is a condition where a number is needed"),
        ("use_dst", "is a condition; it must give a number"),
        ("diff_dst if src_or_dst > use_dst else 0", "'use_dst' is a condition where a number is needed"),
    ],
)
def test_conditions_and_numbers_do_not_mix(tmp_path, expression, fragment):
    rejected(tmp_path, RELU.replace(RELU_MATH, f'diff_src = "{expression}"'), "math.elements.diff_src", fragment)


@pytest.mark.parametrize("condition", ["alpha", "src", "linear", "alpha * src"])
def test_a_number_attribute_or_input_is_not_a_condition(tmp_path, condition):
    text = HARD_SIGMOID.replace(HARD_SIGMOID_MATH, f'diff_src = "diff_dst if {condition} else alpha * diff_dst"')
    rejected(tmp_path, text, "math.elements.diff_src", NUMBER_AS_CONDITION, name="hard_sigmoid_backward")


@pytest.mark.parametrize(
    "expression,fragment",
    [
        ("1e300 * diff_dst", "outside the f32 range"),
        ("diff_dst if src_or_dst > 0 else -3.5e38", "outside the f32 range"),
        ("1e-50 * diff_dst", "rounds to zero in f32"),
        ("diff_dst if src_or_dst > 7e-46 else 0", "rounds to zero in f32"),
        ("1e-400 * diff_dst", "rounds to zero in f32"),  # already 0 as a double
    ],
)
def test_literals_outside_f32_are_rejected(tmp_path, expression, fragment):
    message = rejected(
        tmp_path, RELU.replace(RELU_MATH, f'diff_src = "{expression}"'), "math.elements.diff_src", fragment
    )
    assert "within f32's range" in message, message


def test_literals_that_only_lose_precision_in_f32_are_accepted(tmp_path):
    expression = "0.1 * diff_dst if src_or_dst > 1e-45 else 3.4e38 * diff_dst + 0.0"
    directory = spec_dir(tmp_path, RELU.replace(RELU_MATH, f'diff_src = "{expression}"'))
    c_text = render_library(directory).files["relu_backward.c"]
    assert "0.1f" in c_text and "1e-45f" in c_text and "3.4e+38f" in c_text


def test_an_optional_input_default_outside_f32_is_rejected(tmp_path):
    text = (BUNDLED_SPECS / "batch_norm_training_backward.toml").read_text()
    assert "default = 1.0" in text
    for value, fragment in [("1e300", "outside the f32 range"), ("1e-50", "rounds to zero"), ("inf", "not finite")]:
        rejected(
            tmp_path,
            text.replace("default = 1.0", f"default = {value}"),
            "inputs.gamma.default",
            fragment,
            name="batch_norm_training_backward",
        )


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
    text = path.read_text()
    assert "{{ m.map_kernel(k) }}" in text
    path.write_text(text.replace("{{ m.map_kernel(k) }}", "{{ k.no_such_key }}"))
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


@pytest.mark.slow
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


def test_dtype_table_line_writer_must_be_a_c_identifier(tmp_path):
    directory = spec_dir(tmp_path, RELU)
    table = directory / "dtypes.toml"
    text = table.read_text()
    assert 'line_writer = "opgen_lines_f32"' in text
    table.write_text(text.replace('line_writer = "opgen_lines_f32"', 'line_writer = "opgen lines"'))
    with pytest.raises(SpecError) as caught:
        load_specs(directory)
    assert "dtypes.toml" in str(caught.value) and "f32.line_writer" in str(caught.value)
    assert "must be a C identifier" in str(caught.value)


@pytest.mark.parametrize(
    "row, rule",
    [
        ('line_writer = "opgen_lines_f32"\nline_writer_cheap = "yes"\n', "must be true or false"),
        ("line_writer_cheap = true\n", "goes with line_writer"),
    ],
)
def test_dtype_table_line_writer_cheap_is_a_flag_of_a_writer(tmp_path, row, rule):
    directory = spec_dir(tmp_path, RELU)
    table = directory / "dtypes.toml"
    text = table.read_text()
    old = 'line_writer = "opgen_lines_f32"\nline_writer_cheap = true\n'
    assert old in text
    table.write_text(text.replace(old, row))
    with pytest.raises(SpecError) as caught:
        load_specs(directory)
    assert "f32.line_writer_cheap" in str(caught.value) and rule in str(caught.value)


def test_nxc_rows_use_only_cheap_line_writers():
    """broadcast_reduce's NXC rows in memory order store f32 outputs through their writer
    (cheap), bf16 and f16 ones block by block; NCX runs use both writers."""
    source = render_library(BUNDLED_SPECS).files["prelu_backward.c"]
    for dtype in ("f32", "bf16", "f16"):
        # the microkernels of the variant's rows (nxc) and units (ncx)
        start = source.index(f"void prelu_backward_{dtype}_nxc_rows_of(")
        nxc = source[start : source.index(f"void prelu_backward_{dtype}_nxc_rows(", start)]
        start = source.index(f"void prelu_backward_{dtype}_ncx_units_of(")
        ncx = source[start : source.index(f"void prelu_backward_{dtype}_ncx_units(", start)]
        assert f"opgen_lines_{dtype}_put(&diff_src_lines" in ncx
        assert (f"opgen_lines_{dtype}_put(&diff_src_lines" in nxc) == (dtype == "f32"), dtype


def test_dtype_table_without_line_writers_stores_blocks_directly(tmp_path):
    """PReLU's full form has two outputs; the second goes through the f32 line writer, unless
    the dtype table names none."""
    prelu = (BUNDLED_SPECS / "prelu_backward.toml").read_text()
    directory = spec_dir(tmp_path, prelu, "prelu_backward")
    table = directory / "dtypes.toml"
    table.write_text(table.read_text().replace('line_writer = "opgen_lines_f32"\nline_writer_cheap = true\n', ""))
    source = render_library(directory).files["prelu_backward.c"]
    assert "opgen_lines_f32" not in source and "opgen_store_block_f32(diff_slope + index" in source
    bundled = render_library(BUNDLED_SPECS).files["prelu_backward.c"]
    assert "opgen_lines_f32_put(&diff_slope_lines, diff_slope + index" in bundled
    assert "opgen_store_block_f32(diff_src + index" in bundled


HARD_SIGMOID_FORWARD = (BUNDLED_SPECS / "hard_sigmoid.toml").read_text()


def test_the_bundled_forward_ops_name_their_backward_ops():
    _, specs = load_specs(BUNDLED_SPECS)
    pairs = {s.name: s.backward.op for s in specs if s.backward is not None}
    names = ("relu", "sigmoid", "tanh", "hard_sigmoid", "soft_max", "log_soft_max")
    assert pairs == {name: f"{name}_backward" for name in names}


@pytest.mark.parametrize(
    "old,new,fragments",
    [
        ('op = "hard_sigmoid_backward"', 'op = "hard_sigmoid_backwards"', ["backward.op", "not an op of this"]),
        ('op = "hard_sigmoid_backward"', 'op = "hard_sigmoid"', ["backward.op", "its own backward"]),
        ('src = "src"\n', 'src = "source"\n', ["backward.inputs.src", "'source' is not an input or output"]),
        ('diff_dst = "grad(dst)"', 'diff_dst = "grad(src)"', ["backward.inputs.diff_dst", "grad(<output>)"]),
        ('diff_dst = "grad(dst)"', 'diff_dist = "grad(dst)"', ["backward.inputs.diff_dist", "not an input of"]),
        ('src = "src"\n', "", ["backward.inputs", "input 'src' is not given"]),
        ('alpha = "alpha"', 'alpha = "gamma"', ["backward.attributes.alpha", "not an attribute of hard_sigmoid"]),
        ('alpha = "alpha"', 'alpha = "inf"', ["backward.attributes.alpha", "not an attribute"]),
        ('alpha = "alpha"', "alpha = 1e39", ["backward.attributes.alpha", "outside the f32 range"]),
        ('alpha = "alpha"', "alpha = true", ["backward.attributes.alpha", "must be a number"]),
        ('alpha = "alpha"', "alpha = [1]", ["backward.attributes.alpha", "an attribute's name, a bool or a number"]),
        ('alpha = "alpha"', 'gamma = "alpha"', ["backward.attributes.gamma", "not an attribute of hard_sigmoid_b"]),
        ('beta = "beta"\n', "", ["backward.attributes", "attribute 'beta' is not given"]),
        ('{ src = "diff_src" }', '{ dst = "diff_src" }', ["backward.gradients.dst", "not an input of"]),
        ('{ src = "diff_src" }', '{ src = "diff_dst" }', ["backward.gradients.src", "not an output of"]),
        ('{ src = "diff_src" }', "{}", ["backward.gradients", "at least one"]),
        ("gradients =", "gradient =", ["backward.gradient", "unknown key"]),
        (
            '[[dtypes]]\nsrc = "bf16"\ndst = "bf16"',
            '[[dtypes]]\nsrc = "bf16"\ndst = "f16"',
            ["dtypes[2]", "no dtype row"],
        ),
    ],
)
def test_backward_table_violations_name_file_and_key(tmp_path, old, new, fragments):
    assert old in HARD_SIGMOID_FORWARD
    spec_dir(tmp_path, HARD_SIGMOID, "hard_sigmoid_backward")
    rejected(tmp_path, HARD_SIGMOID_FORWARD.replace(old, new, 1), "hard_sigmoid.toml", *fragments, name="hard_sigmoid")


def test_backward_gradients_in_another_dtype_are_rejected(tmp_path):
    """A gradient must have its input's dtype (a bf16 input gets a bf16 gradient)."""
    mixed = HARD_SIGMOID + '\n[[dtypes]]\nsrc = "f16"\ndiff_dst = "bf16"\ndiff_src = "f32"\n'
    spec_dir(tmp_path, mixed, "hard_sigmoid_backward")
    forward = HARD_SIGMOID_FORWARD.replace('src = "f16"\ndst = "f16"', 'src = "f16"\ndst = "bf16"')
    rejected(tmp_path, forward, "backward.gradients.src", "another dtype", name="hard_sigmoid")


def test_each_expression_is_parsed_once(monkeypatch):
    """The loader parses every math entry once (expr.Entry); planning and rendering every
    kernel read the trees and never parse text again."""
    from opgen import expr, render

    parsed: list[str] = []
    original = expr._syntax

    def counting(source: str):
        parsed.append(source)
        return original(source)

    monkeypatch.setattr(expr, "_syntax", counting)
    table, loaded = load_specs(BUNDLED_SPECS)
    entries = [e.text.strip() for spec in loaded for section in spec.math.values() for e in section]
    assert sorted(parsed) == sorted(entries)
    assert all(isinstance(e, expr.Entry) for spec in loaded for section in spec.math.values() for e in section)

    real_parse = expr.ast.parse

    def refuse(*args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller.startswith("opgen"):  # Jinja and pytest parse their own text with it
            raise AssertionError(f"{caller} parses again after loading: {args[:1]!r}")
        return real_parse(*args, **kwargs)

    # render the specs loaded above; ast.parse restored at once
    monkeypatch.setattr(render, "load_specs", lambda directory, ops=None: (table, loaded))
    monkeypatch.setattr(expr, "_syntax", refuse)
    expr.ast.parse = refuse
    try:
        library = render_library()
    finally:
        expr.ast.parse = real_parse
    assert len(library.specs) == len(loaded)
