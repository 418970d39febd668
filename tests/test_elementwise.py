"""Every elementwise op x dtype combination x attribute value x shape, against the oracle.

The cases come from the specs: a new elementwise spec (plus its oracle) is tested with no
change here.
"""

from __future__ import annotations

import ast
import itertools

import ml_dtypes
import numpy as np
import pytest

import opgen
from opgen import oracle
from opgen.plan import BLOCK
from tests.helpers import assert_ulps, data, rng

SPECS = [s for s in opgen.bundled.specs if s.pattern == "elementwise"]
B = BLOCK
SHAPES = [
    (),
    (0,),
    (1,),
    (3,),
    (B - 1,),
    (B,),
    (B + 1,),
    (2 * B + 1,),
    (97,),
    (1031,),
    (2, 3),
    (3, 5, 7),
    (2, 3, 4, 5),
    (2, 3, 1, 4, 5),
    (2, 0, 3),
]
# f32 attribute values: (1/4, 1/2) and (1/6, 1/2) put HardSigmoid's interval edges on +-2 and +-3.
F32_SAMPLES = [(0.25, 0.5), (1 / 6, 0.5), (-0.2, 0.7), (3.5, -1.25), (0.0, 0.5)]


def attribute_cases(spec):
    """Every bool value combination, and the f32 samples, for the op's attributes."""
    bools = [a.name for a in spec.attributes if a.type == "bool"]
    numbers = [a.name for a in spec.attributes if a.type == "f32"]
    samples = F32_SAMPLES if numbers else [()]
    for flags in itertools.product((True, False), repeat=len(bools)):
        for sample in samples:
            yield {**dict(zip(bools, flags)), **dict(zip(numbers, itertools.cycle(sample or (0,))))}


def exact_outputs(spec) -> set[str]:
    """Outputs whose math only selects an input or a constant: these must match exactly (a
    name the math defines is computed, not selected)."""
    inputs = {t.name for t in spec.inputs}

    def selection(node) -> bool:
        if isinstance(node, ast.IfExp):
            return selection(node.body) and selection(node.orelse)
        return isinstance(node, ast.Constant) or (isinstance(node, ast.Name) and node.id in inputs)

    return {e.name for e in spec.math["elements"] if selection(e.tree)}


CASES = [
    pytest.param(spec, row, attrs, id=f"{spec.name}-{row[spec.reference]}-{i}")
    for spec in SPECS
    for row in spec.dtypes
    for i, attrs in enumerate(attribute_cases(spec))
]


@pytest.mark.parametrize("spec,row,attributes", CASES)
@pytest.mark.parametrize("specials", ["finite", "all"])
def test_matches_oracle(spec, row, attributes, specials):
    function = getattr(opgen, spec.name)
    reference = getattr(oracle, spec.name)
    exact = exact_outputs(spec)
    nonzero = total = 0
    for shape in SHAPES:
        generator = rng(spec.name, row, attributes, specials, shape)
        inputs = [data(generator, shape, row[t.name], specials=specials) for t in spec.inputs]
        got = function(*inputs, **attributes)
        expected = reference(*inputs, **attributes)
        output = spec.outputs[0]
        ulps = 0 if output.name in exact else 1
        assert_ulps(got, expected, row[output.name], ulps, f"{spec.name}{shape} {attributes}")
        nonzero += np.count_nonzero(expected)
        total += expected.size
    # Guard against data on which kernel and oracle agree on little but zeros
    # (an attribute of 0 makes zero outputs legitimate).
    if 0 not in attributes.values():
        assert nonzero > total // 20, f"{spec.name} {attributes}: only {nonzero} of {total} reference values nonzero"


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_wide_dynamic_range(spec):
    """Large inputs spanning the whole dtype range, in every dtype (overflow to Inf, tiny results).
    Inputs stay finite: scaled values past an f16's range are clipped to its largest, since an
    infinite diff_dst times a derivative that underflows is 0 * Inf (docs/numerics.md)."""
    for row in spec.dtypes:
        generator = rng(spec.name, "range", row)
        for attributes in attribute_cases(spec):
            inputs = []
            for t in spec.inputs:
                values = data(
                    generator, (257,), row[t.name], specials="none", scale=10.0 ** int(generator.integers(-6, 6))
                )
                largest = ml_dtypes.finfo(values.dtype).max
                inputs.append(np.clip(values, -largest, largest).astype(values.dtype))
            got = getattr(opgen, spec.name)(*inputs, **attributes)
            expected = getattr(oracle, spec.name)(*inputs, **attributes)
            assert_ulps(got, expected, row[spec.outputs[0].name], 1, f"{spec.name} wide range {attributes}")


UNARY = [
    pytest.param(spec, row, attrs, id=f"{spec.name}-{row[spec.reference]}-{i}")
    for spec in SPECS
    if len(spec.inputs) == 1
    for row in spec.dtypes
    if row[spec.reference] in ("f16", "bf16")
    for i, attrs in enumerate(attribute_cases(spec))
]


@pytest.mark.parametrize("spec,row,attributes", UNARY)
def test_every_16_bit_input(spec, row, attributes):
    """An op of one 16-bit input on every bit pattern (NaNs, infinities, subnormals, zeros of
    both signs): within 1 ulp of the oracle, exactly where the math selects the input."""
    from tests.test_conversions import all_values

    values = all_values(row[spec.reference])
    got = getattr(opgen, spec.name)(values, **attributes)
    with np.errstate(invalid="ignore"):  # signalling NaNs widened to float64
        expected = getattr(oracle, spec.name)(values, **attributes)
    output = spec.outputs[0].name
    ulps = 0 if output in exact_outputs(spec) else 1
    assert_ulps(got, expected, row[output], ulps, f"{spec.name} every {row[spec.reference]} {attributes}")
