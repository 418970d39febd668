"""Results do not depend on where the arrays lie.

Kernels with one output element per input element (the elementwise ops, and PReLU-style ops
whose operand is as big as the tensor) run whole blocks from the first output's next cache
line, and the elements before and after them one by one: which elements go which way changes
with the output's address. For every such op, dtype combination and flag value, outputs at
each element offset in a line, and inputs at other offsets than the outputs, give the bits of
the call on line-aligned arrays; those match the oracle. Outputs at different offsets from
each other exercise the line writers (outputs whose blocks do not start at a line).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import opgen
from opgen import oracle, plan
from opgen.plan import BLOCK, COSTLY_LINES_BYTES, STREAM_BYTES
from tests.helpers import (
    assert_ulps,
    data,
    dtype_of,
    guarded_empty,
    placed,
    rng,
    threads_set_to,
    untouched_around,
)

LINE = 64
# fewer elements than a line holds; a line and a tail; several blocks and a tail
COUNTS = (1, 5, 2 * BLOCK + 3, 7 * BLOCK + 6)


def cases():
    for spec in opgen.bundled.specs:
        if spec.pattern != "elementwise" and "full" not in plan.forms(spec):
            continue
        flags = [a.name for a in spec.attributes if a.type == "bool"]
        # numbers: 1/6 and 1/2 (HardSigmoid's alpha and beta: interval edges on -3 and 3)
        numbers = dict(zip((a.name for a in spec.attributes if a.type == "f32"), itertools.cycle((1 / 6, 0.5))))
        for row in spec.dtypes:
            for values in itertools.product((True, False), repeat=len(flags)):
                attributes = {**dict(zip(flags, values)), **numbers}
                name = "-".join([spec.name, row[spec.reference], *(f"{k}={v}" for k, v in zip(flags, values))])
                yield pytest.param(spec, row, attributes, id=name)


class Operands:
    """One op, dtype row and flag values on `count` elements, with fresh random inputs:
    tensors [1, count] and channel operands [count] (channels along dim 1, NCX), so that an
    operand is as big as the tensor (form full)."""

    def __init__(self, spec, row: dict[str, str], attributes: dict, count: int, salt: str) -> None:
        layout = spec.layout_attribute
        self.spec, self.row, self.count = spec, row, count
        self.kwargs = {**attributes, **({layout.name: "NCX"} if layout else {})}
        self.shapes = {t.name: (count,) if t.kind == "channel" else (1, count) for t in (*spec.inputs, *spec.outputs)}
        generator = rng(salt, spec.name, row, attributes, count)
        self.inputs = [data(generator, self.shapes[t.name], row[t.name], specials="all") for t in spec.inputs]

    def call(self, input_step: int, output_step: int, spread: int = 0) -> list[np.ndarray]:
        """The op on copies of the inputs and on outputs placed `input_step` elements past a
        line and `output_step` + k * `spread` (output k)."""
        placed_outputs = [
            guarded_empty(self.shapes[o.name], dtype_of(self.row[o.name]), output_step + k * spread)
            for k, o in enumerate(self.spec.outputs)
        ]
        outputs = [output for output, _ in placed_outputs]
        out = outputs[0] if len(outputs) == 1 else tuple(outputs)
        got = getattr(opgen, self.spec.name)(*(placed(a, input_step) for a in self.inputs), out=out, **self.kwargs)
        for o, (output, raw) in zip(self.spec.outputs, placed_outputs):
            assert untouched_around(output, raw), f"{self.spec.name} {self.count} {self.kwargs}: wrote next to {o.name}"
        return [got] if len(outputs) == 1 else list(got)

    def aligned_call(self) -> list[np.ndarray]:
        """The op on line-aligned arrays, checked against the oracle (within 1 ulp: the ulps
        each output must meet are tested in test_elementwise and test_broadcast_reduce)."""
        aligned = self.call(0, 0)
        expected = getattr(oracle, self.spec.name)(*self.inputs, **self.kwargs)
        expected = [expected] if len(self.spec.outputs) == 1 else list(expected)
        context = f"{self.spec.name} {self.count} {self.kwargs}"
        for output, got, want in zip(self.spec.outputs, aligned, expected):
            assert_ulps(got, want, self.row[output.name], 1, f"{context} {output.name}")
        return aligned

    def assert_same_bits(self, first: list[np.ndarray], moved: list[np.ndarray], how: str) -> None:
        """Every bit the same, but a NaN's payload and sign (README: which NaN operand an
        instruction passes on depends on the operand order the compiler chose for that loop)."""
        for output, one, other in zip(self.spec.outputs, first, moved):
            both_nan = np.isnan(one.astype(np.float64)) & np.isnan(other.astype(np.float64))
            bits = np.dtype(f"u{one.dtype.itemsize}")
            differ = (one.view(bits) != other.view(bits)) & ~both_nan
            assert not differ.any(), (
                f"{self.spec.name} {self.count} {self.kwargs}: {output.name} changed {how} "
                f"at {np.argwhere(differ)[:3].tolist()}"
            )


@pytest.mark.parametrize("spec,row,attributes", list(cases()))
def test_same_bits_at_any_offset(spec, row, attributes):
    for count in COUNTS:
        operands = Operands(spec, row, attributes, count, "alignment")
        aligned = operands.aligned_call()
        for step in range(1, LINE // min(dtype_of(row[t.name]).itemsize for t in spec.outputs)):
            # second: outputs at different offsets (a line writer's rotated lanes)
            for input_step, spread in ((step, 0), (step + 5, 3)):
                moved = operands.call(input_step, step, spread)
                operands.assert_same_bits(
                    aligned,
                    moved,
                    f"with outputs {step} (+ {spread} per output) and inputs {input_step} elements past a line",
                )


@pytest.mark.slow
@pytest.mark.parametrize("spec,row,attributes", list(cases()))
def test_same_bits_past_the_caches_on_two_threads(spec, row, attributes):
    """Calls moving more than plan.STREAM_BYTES stream their stores, and split their blocks
    between two threads: outputs and inputs 1 and 4 elements past a line give the bits of the
    line-aligned call on one thread."""
    moved_bytes = sum(dtype_of(row[t.name]).itemsize for t in (*spec.inputs, *spec.outputs))
    operands = Operands(spec, row, attributes, STREAM_BYTES // moved_bytes + 3 * BLOCK + 5, "alignment, streamed")
    with threads_set_to(1):
        aligned = operands.aligned_call()
    # (4, 13): the second output's first line starts before its first element (and before
    # the array), where a writer may store only the lanes that are its own
    for step, spread in ((1, 0), (4, 13)):
        with threads_set_to(2):
            moved = operands.call(step + 1, step, spread)
        operands.assert_same_bits(
            aligned,
            moved,
            f"on two threads with outputs {step} (+ {spread} per output) and inputs {step + 1} elements past a line",
        )


def costly_writer_cases():
    """The cases whose later outputs have a line writer that is not cheap (bf16, f16)."""
    table = opgen.bundled.table.dtypes
    for case in cases():
        spec, row, _ = case.values
        if len(spec.outputs) > 1 and not all(table[row[o.name]].line_writer_cheap for o in spec.outputs[1:]):
            yield case


@pytest.mark.slow
@pytest.mark.parametrize("spec,row,attributes", list(costly_writer_cases()))
def test_same_bits_past_l2_at_any_offset(spec, row, attributes):
    """From plan.COSTLY_LINES_BYTES moved on (below STREAM_BYTES: ordinary stores), the later
    outputs' writers for halves write whole lines: with the first output on a line and the
    second at every element offset in a line (and inputs elsewhere), the bits of the aligned
    call on one thread; and the first output past a line on two threads."""
    moved_bytes = sum(dtype_of(row[t.name]).itemsize for t in (*spec.inputs, *spec.outputs))
    count = COSTLY_LINES_BYTES // moved_bytes + 3 * BLOCK + 5
    assert count * moved_bytes < STREAM_BYTES
    operands = Operands(spec, row, attributes, count, "alignment, past L2")
    with threads_set_to(1):
        aligned = operands.aligned_call()
        for spread in range(1, LINE // dtype_of(row[spec.outputs[1].name]).itemsize):
            moved = operands.call(spread % 7, 0, spread)
            operands.assert_same_bits(aligned, moved, f"with the second output {spread} elements past a line")
    with threads_set_to(2):
        moved = operands.call(3, 5, 11)
    operands.assert_same_bits(aligned, moved, "on two threads, outputs 5 and 16 elements past a line")


def test_outputs_opgen_allocates_start_on_a_line_from_the_stated_size():
    """Outputs opgen allocates from plan.ALIGNED_OUTPUT_BYTES start on a cache line, on the first
    (checked) call and the repeated (fast) ones, for one output and several; they own their
    memory as any NumPy array does (NumPy frees it and can resize it); smaller ones lie where
    NumPy puts them. The results are the oracle's either way."""
    elements = plan.ALIGNED_OUTPUT_BYTES // 4
    a, b = (rng("allocated", name).standard_normal(elements).astype(np.float32) for name in "ab")
    for _ in range(3):  # the first call takes the checked path, the others the fast one
        got = opgen.add(a, b)
        assert got.ctypes.data % LINE == 0 and got.flags.owndata
        np.testing.assert_array_equal(got, a + b)
        stats = opgen.layer_norm(a.reshape(elements // 64, 64))
        assert all(t.ctypes.data % LINE == 0 for t in stats[:1]), [t.ctypes.data % LINE for t in stats]
    got.resize(elements // 2, refcheck=False)
    np.testing.assert_array_equal(got, (a + b)[: elements // 2])
    small = [opgen.add(a[:16], b[:16]) for _ in range(64)]
    assert any(s.ctypes.data % LINE for s in small), "small outputs are NumPy's (it aligns to 16 bytes)"
    assert all(np.array_equal(s, a[:16] + b[:16]) for s in small)
