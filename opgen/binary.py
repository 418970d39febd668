"""binary: the typed plan of one variant's microkernels.

A binary op computes one output element from one element of each of its two inputs, the
inputs broadcast against each other by NumPy's rules. The generated code is three small
microkernels per variant (templates/binary.c.j2), each over one contiguous run of `count`
output elements:
- `both`: both inputs contiguous along the run;
- `first_repeated`: the first input one element, repeated along the run;
- `second_repeated`: the second input one element, repeated.
The hand-written driver (templates/drivers/opgen_binary.c) coalesces the broadcast shape,
picks the microkernel for its innermost dim and walks the other dims, split among threads.

Invariants the template and the driver rely on:
- an element's result depends on its two input elements alone, never on the microkernel, the
  run or the thread that computes it: each microkernel runs the same element math, in the
  compute type, on the same f32 values (a repeated input is converted once, then used in every
  lane), and stores through the dtype's conversions, which round the same in blocks, tails and
  single elements;
- the microkernels read no numbers: bool attributes the math reads are fixed per variant.
"""

from __future__ import annotations

from dataclasses import dataclass

from opgen import expr
from opgen.specs import DType, DTypeTable, OpSpec

MICROKERNELS = ("both", "first_repeated", "second_repeated")
# The kernel API's shape parameters after the operands: each input's rank and dims.
SHAPE_PARAMS = (("int ", "rank_0"), ("const int64_t *", "dims_0"), ("int ", "rank_1"), ("const int64_t *", "dims_1"))


@dataclass(frozen=True)
class Operand:
    """An input or the output, as the microkernels read or write it."""

    name: str
    c_type: str
    load: str  # C: one element (`{}`) converted to float
    load_block: str
    load_part: str
    store_block: str
    store_part: str


@dataclass(frozen=True)
class Element:
    name: str
    c: str  # in the compute type, of `<input>_value` locals and earlier entries' `<name>_value`


@dataclass(frozen=True)
class BinaryKernel:
    name: str  # the variant: <op>_<dtype>[_<flag>...]
    op: str
    summary: str
    detail: str
    compute: str  # the type the element math runs in (float, or double for compute = "wide")
    params: tuple[tuple[str, str], ...]  # (C type, name) of the kernel API function
    first: Operand
    second: Operand
    output: Operand
    elements: tuple[Element, ...]  # in order; the last defines the output
    work_per_element: int


def _operand(name: str, dtype: DType) -> Operand:
    return Operand(
        name=name,
        c_type=dtype.c_type,
        load=dtype.load,
        load_block=dtype.load_block,
        load_part=dtype.load_part,
        store_block=dtype.store_block,
        store_part=dtype.store_part,
    )


def kernel(spec: OpSpec, name: str, row: dict[str, str], constants: dict[str, bool], table: DTypeTable) -> BinaryKernel:
    """The plan of variant `name` of binary op `spec` for dtype row `row`."""
    from opgen import plan  # plan imports this module: its tuning constants, read at call time

    first, second = spec.inputs
    (output,) = spec.outputs
    dtypes = {tensor: table.dtypes[dtype] for tensor, dtype in row.items()}
    reference = dtypes[spec.reference]
    compute = reference.wide_compute if spec.compute == "wide" else reference.compute
    style = table.compute_types[compute]
    trees = [(e.name, expr.fold(e.tree, constants)) for e in spec.math["elements"]]
    live = {output.name}
    for entry, tree in reversed(trees):
        if entry in live:
            live |= expr.names(tree)
    spelled = {first.name: f"{first.name}_value", second.name: f"{second.name}_value"}
    elements = []
    for entry, tree in trees:
        if entry not in live:
            continue
        variables = {n: spelled[n] for n in expr.names(tree)}
        c = expr.to_c(tree, variables, style.literal_suffix, style.math_suffix, f"opgen_select_{compute}")
        elements.append(Element(entry, c))
        spelled[entry] = f"{entry}_value"
    params = [
        (f"const {dtypes[first.name].c_type} *", first.name),
        (f"const {dtypes[second.name].c_type} *", second.name),
        (f"{dtypes[output.name].c_type} *", output.name),
        *SHAPE_PARAMS,
    ]
    exps = sum(expr.calls(tree, "exp") for _, tree in trees)
    detail = "; ".join(
        [
            ", ".join(f"{n} {d}" for n, d in row.items()),
            f"computed in {compute}",
            f"{first.name} and {second.name} broadcast against each other (NumPy's rules)",
            *(f"{n}={'true' if v else 'false'}" for n, v in constants.items()),
        ]
    )
    return BinaryKernel(
        name=name,
        op=spec.name,
        summary=spec.summary,
        detail=detail,
        compute=compute,
        params=tuple(params),
        first=_operand(first.name, dtypes[first.name]),
        second=_operand(second.name, dtypes[second.name]),
        output=_operand(output.name, dtypes[output.name]),
        elements=tuple(elements),
        work_per_element=1 + plan.EXP_WORK * exps,
    )


def broadcast_shape(first: tuple[int, ...], second: tuple[int, ...]) -> tuple[int, ...] | None:
    """The shape two inputs of shapes `first` and `second` broadcast to by NumPy's rules (aligned
    at their last dims, each pair of dims equal or one of them 1), or None when they do not."""
    rank = max(len(first), len(second))
    padded = [(1,) * (rank - len(shape)) + tuple(shape) for shape in (first, second)]
    result = []
    for a, b in zip(*padded):
        if a != b and a != 1 and b != 1:
            return None
        result.append(b if a == 1 else a)
    return tuple(result)


def mismatch(first: tuple[int, ...], second: tuple[int, ...]) -> int | None:
    """The first dim, counted from the last (-1, -2, ...), where the two shapes break NumPy's
    rule; None when they broadcast."""
    for back in range(1, min(len(first), len(second)) + 1):
        a, b = first[-back], second[-back]
        if a != b and a != 1 and b != 1:
            return -back
    return None
