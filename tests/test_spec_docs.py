"""docs/spec-language.md is generated from the loader's key tables and is current; every key,
form, type, pattern and section the loader knows is documented with an example that parses."""

from __future__ import annotations

import shutil
import tomllib

import pytest

from opgen import cli, expr, spec_docs, specs
from opgen.render import BUNDLED_SPECS

TABLES = {
    "top": specs._TOP_KEYS,
    "op": specs._OP_KEYS,
    "attributes": specs._ATTRIBUTE_KEYS,
    "inputs": specs._INPUT_KEYS,
    "outputs": specs._OUTPUT_KEYS,
    "flags": specs._FLAG_KEYS,
    "dtype table": specs._DTYPE_KEYS,
    "compute types": specs._COMPUTE_TYPE_KEYS,
    "math sections": specs._SECTION_KEYS,
}


def test_spec_language_reference_is_current():
    assert not spec_docs.stale(), f"{spec_docs.DOC_PATH} is stale: run `opgen docs` and commit it"
    assert cli.main(["docs", "--check"]) == 0


@pytest.mark.parametrize("table", TABLES, ids=list(TABLES))
def test_every_key_has_a_doc_and_an_example_of_itself(table):
    for name, key in TABLES[table].items():
        assert key.doc.strip() and key.example.strip(), f"{table}.{name}"
        parsed = tomllib.loads(key.example)
        assert name in parsed or name in parsed.get("math", {}), f"{table}.{name}: example {key.example!r}"
        assert f"`{name}`" in spec_docs.render(), f"{table}.{name} is missing from the reference"


def test_every_named_choice_is_documented():
    assert set(specs.PATTERN_DOCS) == set(specs.PATTERNS)
    assert set(specs.ATTRIBUTE_TYPE_DOCS) == set(specs.ATTRIBUTE_TYPES)
    assert set(specs.FORM_DOCS) == set(specs.CHANNEL_FORMS) | set(specs.TENSOR_FORMS)
    assert set(specs._SECTION_KEYS) == {s for sections in specs._SECTIONS.values() for s in sections}
    text = spec_docs.render()
    for name in [*expr.FUNCTIONS, *specs._RESERVED, *specs._RESERVED_SUFFIXES, *specs.FORM_DOCS]:
        assert f"`{name}`" in text, name


def test_the_example_spec_loads(tmp_path):
    shutil.copy(BUNDLED_SPECS / "dtypes.toml", tmp_path)
    (tmp_path / "hard_sigmoid_backward.toml").write_text(spec_docs.EXAMPLE_SPEC)
    _, loaded = specs.load_specs(tmp_path)
    assert [spec.name for spec in loaded] == ["hard_sigmoid_backward"]


@pytest.mark.parametrize(
    ("pattern", "op"),
    [
        ("elementwise", "sigmoid_backward"),
        ("broadcast_reduce", "prelu_backward"),
        ("reduce_then_apply", "batch_norm_training_backward"),
    ],
)
def test_each_worked_example_loads_in_place_of_a_bundled_ops_math(tmp_path, pattern, op):
    assert set(specs.PATTERN_EXAMPLES) == set(specs.PATTERNS)
    text = (BUNDLED_SPECS / f"{op}.toml").read_text()
    shutil.copy(BUNDLED_SPECS / "dtypes.toml", tmp_path)
    (tmp_path / f"{op}.toml").write_text(text[: text.index("[math.")] + specs.PATTERN_EXAMPLES[pattern])
    _, loaded = specs.load_specs(tmp_path)
    assert loaded[0].pattern == pattern
    assert set(loaded[0].math) == set(specs._SECTIONS[pattern])


def test_an_undocumented_key_is_refused_as_before(tmp_path):
    """The documented tables are what the loader checks: a key outside them is an error naming it."""
    shutil.copy(BUNDLED_SPECS / "dtypes.toml", tmp_path)
    (tmp_path / "hard_sigmoid_backward.toml").write_text(spec_docs.EXAMPLE_SPEC.replace("[op]\n", "[op]\ncolour = 1\n"))
    with pytest.raises(specs.SpecError, match=r"op\.colour: unknown key \(allowed: name, summary, "):
        specs.load_specs(tmp_path)
