"""A user's own specs: whatever the loader accepts builds and computes its math; the rest is
refused as `file: key: problem`. The fuzzer (tests/spec_fuzz.py) mutates the bundled specs and
holds every mutant to that."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from opgen.render import BUNDLED_SPECS
from opgen.specs import SpecError, load_specs

from . import spec_fuzz

# Mutants per CI run (fixed seed): every one loaded, the first BUILT accepted ones compiled and run.
MUTANTS = int(os.environ.get("OPGEN_FUZZ_MUTANTS", "300"))
BUILT = int(os.environ.get("OPGEN_FUZZ_BUILT", "3"))
SEED = int(os.environ.get("OPGEN_FUZZ_SEED", "20261126"))


def _edited(tmp_path: Path, spec: str, old: str, new: str) -> Path:
    shutil.copy(BUNDLED_SPECS / "dtypes.toml", tmp_path)
    text = (BUNDLED_SPECS / f"{spec}.toml").read_text()
    assert old in text
    (tmp_path / f"{spec}.toml").write_text(text.replace(old, new, 1))
    return tmp_path


def test_a_channel_output_takes_its_shape_from_a_required_input(tmp_path):
    """An output shaped like an optional input had no shape when that input was absent (the C
    API crashed, Python raised KeyError): refused."""
    directory = _edited(
        tmp_path,
        "batch_norm_training_backward",
        'name = "diff_gamma"\nkind = "channel"\nlike = "mean"',
        'name = "diff_gamma"\nkind = "channel"\nlike = "gamma"',
    )
    with pytest.raises(
        SpecError, match=r"batch_norm_training_backward\.toml: outputs\.diff_gamma\.like: 'gamma' is optional"
    ):
        load_specs(directory)


def test_reduce_then_apply_needs_a_tensor_output(tmp_path):
    """Its element pass writes the tensor outputs; without one a template failed to render."""
    directory = _edited(
        tmp_path,
        "batch_norm_training_backward",
        '[[outputs]]\nname = "diff_src"\ndoc = "Gradient with respect to src."\n',
        "",
    )
    text = (directory / "batch_norm_training_backward.toml").read_text()
    lines = [line for line in text.splitlines() if not line.startswith("diff_src")]
    (directory / "batch_norm_training_backward.toml").write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError, match=r"batch_norm_training_backward\.toml: outputs: .*tensor output"):
        load_specs(directory)


def test_unmutated_specs_are_their_math():
    """The fuzzer's interpreter agrees with every bundled op: the judge of mutants is sound."""
    for path in spec_fuzz.SPEC_FILES:
        assert spec_fuzz.run_mutant(BUNDLED_SPECS, path.stem, SEED) == []


def test_the_judge_sees_a_wrong_result(monkeypatch):
    """Results off by 1 % are caught: the mutant check can fail."""
    original = spec_fuzz.interpret

    def wrong(spec, call, dtype):
        outputs = original(spec, call, dtype)
        return {name: None if value is None else value * 1.01 for name, value in outputs.items()}

    monkeypatch.setattr(spec_fuzz, "interpret", wrong)
    for name in ("prelu_backward", "batch_norm_training_backward", "sigmoid", "soft_max"):
        assert spec_fuzz.run_mutant(BUNDLED_SPECS, name, SEED) != []


@pytest.mark.slow
def test_mutated_specs_are_refused_cleanly_or_build_and_compute_their_math(tmp_path):
    outcome = spec_fuzz.fuzz(tmp_path, MUTANTS, SEED, BUILT)
    print(f"{MUTANTS} mutants: {outcome.refused} refused, {outcome.accepted} accepted, {outcome.built} built and run")
    assert outcome.failures == []
    assert outcome.built == min(BUILT, outcome.accepted) and outcome.built > 0


def test_a_string_attribute_the_math_cannot_read_is_refused(tmp_path):
    """An attribute the math cannot read (a string other than the layout, such as an axis
    written as a name) loaded, built and was silently ignored: refused."""
    directory = _edited(
        tmp_path,
        "hard_sigmoid_backward",
        "[[attributes]]",
        '[[attributes]]\nname = "axis"\ntype = "string"\nallowed = ["last", "first"]\ndefault = "last"\n'
        'doc = "An axis the math cannot see."\n\n[[attributes]]',
    )
    with pytest.raises(SpecError, match=r"hard_sigmoid_backward\.toml: attributes\.axis: the math cannot read"):
        load_specs(directory)
