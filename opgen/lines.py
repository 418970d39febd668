"""The kernels of the along_axes pattern: a typed plan of one variant's microkernels.

An along_axes op computes lines: the elements along the axes an attribute names, at one
index of the other axes. `math.line` holds the line's values in order, reductions among them
(`line_sum(term)`, `line_max(term)`, `line_min(term)`, `line_prod(term)`); `math.elements`
writes each element from its inputs and the line's values. The reductions go in as few passes over a line as
their order allows: a reduction whose term reads a line value that needs the reductions of
pass k runs in pass k + 1; the line values then follow the pass that makes them computable.

Invariants the template (along_axes.c.j2) and the driver (drivers/opgen_lines.c) rely on:
- every line value has a slot in a double array of at most MAX_LINE_VALUES, written once per
  line, before any microkernel reads it (the group order below);
- a pass's terms read tensor inputs, along inputs, numbers, `count` and line values of
  earlier groups only; its reductions are in the accumulation type (sums) or in the compute
  type (max, min: exact in any type);
- element math runs in the compute type and reads line values narrowed to it; where that is
  the wide type (`compute = "wide"`: double for f32 and bf16 data) and the kernel has tensor
  outputs and no sums across lines, each block of elements runs first in the row's own type
  (float), reading line values narrowed to float (`<name>_line_float`), and a block whose
  outputs are not all finite runs again in the wide type (LinesKernel.float_elements). That
  holds only for math that carries an infinity or NaN through to its results (_carries: sums,
  differences, products, exp, log, sqrt, abs, and quotients by inputs or constants), so that an
  intermediate that left float's range shows in the outputs; other math runs in the wide type;
- a tensor output computed in float whose element is `T * v` or `T / v`, T the term of a
  reduction of the last pass and v per line, keeps T: that pass stores each term, and the
  element pass reads it back instead of computing it again (SoftMax's exp once per element, not
  twice). The bits are the same: T is the same float either way. An f32 output keeps T in
  itself; one narrow output (bf16, f16) keeps it in the thread's float scratch that the driver
  passes for contiguous lines up to plan.LINES_KEPT_TERMS long (`call->kept`), whole blocks,
  and computes it again where there is none (longer lines, the columns path);
- an op over a set of axes (an int list attribute, role axes) has line outputs and one
  reduction only (specs.py): where its axes are not neighbours, the driver runs that reduction
  over the last block of them and combines the partial values of the other blocks, in a fixed
  order, before the line values that follow it (`count`: every element reduced, not the
  line's length);
- groups of short contiguous lines (LinesKernel.short_lines; plan.LINES_SHORT_BLOCKS) run
  in one microkernel that holds them in registers and takes each step for every line of the
  group before the next; it makes the per-line microkernels' operations in their order (sums
  across lines too, line after line), so a line's bits do not depend on its neighbours;
- sums across lines (`math.across`, outputs of kind along) are added during the element pass,
  in double, into one row of partial sums per chunk of lines; the chunks are fixed by the
  shape alone and added up in order, so results never depend on the thread count.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from opgen import expr
from opgen.specs import AXES_ROLE, ComputeType, DType, DTypeTable, OpSpec


@dataclass(frozen=True)
class Operand:
    """A tensor operand as the microkernels read or write it."""

    name: str
    index: int  # in the call's tensors: inputs, then outputs
    kind: str  # tensor, along or line
    c_type: str
    load: str  # C: one element (`{}` the element) converted to the compute type
    load_block: str
    load_part: str
    store: str  # C: a compute-type value (`{}`) converted to this dtype
    store_block: str
    store_part: str
    optional: bool
    default: str  # C literal in the compute type, for an absent optional input ("" if none)


@dataclass(frozen=True)
class LineStep:
    """One line value computed in scalar code (double): C for `values[slot] = c`."""

    name: str
    slot: int
    c: str


@dataclass(frozen=True)
class Reduction:
    """A reduction of a pass. A sum's lanes start at -0.0, the identity of addition (x + -0.0
    is x for every x, +0.0 included), and its line value adds +0.0 to the folded lanes: the
    same bits as lanes starting at +0.0 (the two differ only in the sign of a zero sum, and
    only a start of -0.0 can leave one), while compilers clear an array of +0.0 with a block
    fill that costs more than a short line's sum."""

    name: str
    slot: int
    kind: str  # line_sum, line_max, line_min or line_prod
    lane_type: str  # the type its lanes accumulate in
    start: str  # C: the lanes' starting value
    term: str  # C, in the compute type, of `{name}_value` locals
    term_type: str
    value: str = "(double){}"  # C: the line value (double) from the folded lanes (`{}`)


@dataclass(frozen=True)
class Pass:
    index: int
    reductions: tuple[Reduction, ...]
    reads: tuple[Operand, ...]  # tensor and along inputs the terms read
    line_reads: tuple[tuple[str, int], ...]  # line values the terms read: (name, slot)
    after: tuple[LineStep, ...]
    keeps: tuple[tuple[Operand, str], ...] = ()  # (output, reduction): the term stored there
    vector_terms: tuple[str, ...] = ()  # the reductions' terms on double vectors, else () (_vector_double)
    scratch_keep: str = ""  # the reduction whose term goes to the thread's scratch, where given


@dataclass(frozen=True)
class Element:
    name: str
    c: str  # in the compute type
    output: Operand | None
    # c where every input of the kernel's nonpositive_checks is at most 0 ("" without checks)
    c_nonpositive: str = ""


@dataclass(frozen=True)
class LinesKernel:
    name: str  # the variant: <op>_<dtypes>[_<flag>...]
    op: str
    summary: str
    detail: str
    compute: str
    accumulate: str
    params: tuple[tuple[str, str], ...]  # (C type, name) of the kernel API function
    inputs: tuple[Operand, ...]
    outputs: tuple[Operand, ...]
    numbers: tuple[str, ...]  # f32 attributes, in params order
    value_count: int
    before: tuple[LineStep, ...]
    passes: tuple[Pass, ...]
    element_reads: tuple[Operand, ...]  # tensor and along inputs the element math reads
    kept_reads: tuple[Operand, ...]  # outputs whose kept terms the element pass reads back
    element_line_reads: tuple[tuple[str, int], ...]
    elements: tuple[Element, ...]
    line_outputs: tuple[tuple[Operand, int], ...]  # (output, slot)
    across: tuple[Reduction, ...]  # sums across lines: slot = its row in a chunk's partial sums
    across_outputs: tuple[Operand, ...]  # the same order
    work_per_element: int
    # an op over a set of axes (an int list, role axes): its one reduction, which the driver
    # combines across blocks of axes that are not neighbours (module docstring); else None
    combined: Reduction | None = None
    # the elements' and the across terms' math on double vectors, else () (_vector_double)
    vector_elements: tuple[str, ...] = ()
    vector_across: tuple[str, ...] = ()
    # a narrow output that keeps a term in the thread's scratch (module docstring), else None;
    # then the elements and their reads where the scratch is given (`elements`: where it is not)
    scratch_output: Operand | None = None
    scratch_elements: tuple[Element, ...] = ()
    scratch_reads: tuple[Operand, ...] = ()
    # tensor inputs the element math takes the exp of, whose sign it cannot show: where a
    # block's values of each are all at most 0 (opgen_all_nonpositive), the block computes
    # Element.c_nonpositive, whose exp of them is opgen_exp_nonpositive (the same bits in fewer
    # operations: LogSoftmaxBackward's exp(dst), dst a log-probability, took 0.81-0.86 of the
    # time); other blocks compute Element.c
    nonpositive_checks: tuple[Operand, ...] = ()
    # the element entries in float, each block's first try where compute is the wide type (module
    # docstring); () where the elements run in the compute type alone
    float_elements: tuple[Element, ...] = ()
    # where outputs keep a pass's terms (kept_reads): the element entries that compute those
    # terms afresh, and what they read, for wide tiles (streamed calls: outputs not read back,
    # each block streamed); the same bits, the terms being the same floats; else ()
    fresh_elements: tuple[Element, ...] = ()
    fresh_reads: tuple[Operand, ...] = ()
    fresh_line_reads: tuple[tuple[str, int], ...] = ()

    @property
    def short_lines(self) -> bool:
        """Whether groups of short contiguous lines run in the form that holds them in registers
        (along_axes.c.j2: _short): a kernel with tensor outputs and no reduction combined across
        blocks of axes."""
        has_tensor_outputs = any(o.kind == "tensor" for o in self.outputs)
        return has_tensor_outputs and self.combined is None

    @property
    def line_inputs(self) -> tuple[Operand, ...]:
        """The inputs any pass or either form of the element pass reads, in the inputs' order."""
        read = {o.name for p in self.passes for o in p.reads}
        read |= {o.name for o in self.element_reads + self.scratch_reads}
        return tuple(o for o in self.inputs if o.name in read)


def _load(dtype: DType, compute: str) -> str:
    text = dtype.load
    return text if compute == "float" else f"({compute})({text})"


def _store(dtype: DType, compute: str) -> str:
    return dtype.store.format("{}" if compute == "float" else "(float)({})")


def _literal(value: float, kind: str, table: DTypeTable) -> str:
    return expr.to_c(ast.Constant(float(value)), {}, table.compute_types[kind].literal_suffix, "", "")


def line_groups(spec: OpSpec) -> tuple[dict[str, int], dict[str, int]]:
    """(group of each line name, pass of each reduction). Line inputs and values that need no
    reduction are group 0; a reduction is in pass 1 + the largest group its term reads, and
    is of that group itself; a value is of the largest group it reads."""
    groups = {t.name: 0 for t in spec.inputs if t.kind == "line"}
    passes: dict[str, int] = {}
    for entry in spec.math.get("line", ()):
        name = entry.name
        read = max((groups[n] for n in expr.names(entry.tree) if n in groups), default=0)
        if entry.reduction is not None:
            passes[name] = read + 1
            groups[name] = read + 1
        else:
            groups[name] = read
    return groups, passes


@dataclass
class _Writer:
    """How a kernel's math is written in C: the types' literal and math suffixes, the slots of
    the line values, and how element code spells each name (entries add theirs as they come)."""

    style: dict[str, ComputeType]
    slots: dict[str, int]
    numbers: tuple[str, ...]
    element_spelling: dict[str, str]
    maxima: dict[str, ast.expr]  # line values that are a line_max, by their term (expr.nonpositive)

    def c_text(
        self, tree: ast.expr, kind: str, spelled: dict[str, str] | None = None, checked: frozenset[str] = frozenset()
    ) -> str:
        """`tree` in C in type `kind`, its names as `spelled` (element code by default); the exp
        of a name in `checked`, checked to be at most 0, as opgen_exp_nonpositive."""
        names = self.element_spelling if spelled is None else spelled
        variables = {n: names[n] for n in expr.names(tree)}
        style = self.style[kind]
        return expr.to_c(
            tree,
            variables,
            style.literal_suffix,
            style.math_suffix,
            f"opgen_select_{kind}",
            maxima=self.maxima,
            exp_nonpositive=expr.EXP_LINE,
            checked_nonpositive=checked,
        )

    def line_spelling(self, kind: str) -> dict[str, str]:
        """Names in scalar line code: line values, numbers and count, in type `kind`."""
        spelled = {n: f"values[{s}]" for n, s in self.slots.items()}
        spelled |= {n: f"(({kind})call->numbers[{self.numbers.index(n)}])" for n in self.numbers}
        spelled["count"] = f"(({kind})call->count)"
        return spelled


def _operands(spec: OpSpec, dtypes: dict[str, DType], compute: str, table: DTypeTable) -> dict[str, Operand]:
    """Every operand of `spec`, inputs then outputs, with its loads and stores."""
    operands = {}
    for index, tensor in enumerate([*spec.inputs, *spec.outputs]):
        dtype = dtypes[tensor.name]
        operands[tensor.name] = Operand(
            name=tensor.name,
            index=index,
            kind=tensor.kind,
            c_type=dtype.c_type,
            load=_load(dtype, compute),
            load_block=dtype.load_block,
            load_part=dtype.load_part,
            store=_store(dtype, compute),
            store_block=dtype.store_block,
            store_part=dtype.store_part,
            optional=tensor.optional or bool(tensor.requested_by),
            default="" if tensor.default is None else _literal(tensor.default, compute, table),
        )
    return operands


def kernel(spec: OpSpec, name: str, row: dict[str, str], constants: dict[str, bool], table: DTypeTable) -> LinesKernel:
    """The plan of variant `name` of along_axes op `spec` for dtype row `row`."""
    from opgen import plan  # plan imports this module: its tuning constants, read at call time

    dtypes = {tensor: table.dtypes[dtype] for tensor, dtype in row.items()}
    reference = dtypes[spec.reference]
    compute = reference.wide_compute if spec.compute == "wide" else reference.compute
    accumulate = reference.accumulate
    operands = _operands(spec, dtypes, compute, table)
    numbers = tuple(a.name for a in spec.attributes if a.type == "f32")

    def folded(entry: expr.Entry) -> ast.expr:
        return expr.fold(entry.tree, constants)

    writer = _writer(spec, table, (compute, accumulate, reference.compute), numbers, folded)

    def operand_reads(trees: list[ast.expr]) -> tuple[tuple[Operand, ...], tuple[tuple[str, int], ...]]:
        read = set().union(*(expr.names(t) for t in trees)) if trees else set()
        inputs = tuple(operands[t.name] for t in spec.inputs if t.kind != "line" and t.name in read)
        lines = tuple((n, s) for n, s in writer.slots.items() if n in read)
        return inputs, lines

    before, reductions, after = _line_steps(spec, operands, writer, folded, compute, accumulate)
    pass_count = len(reductions)
    passes = [
        _pass(k, reductions[k], after[k], operand_reads, operands, writer, compute) for k in range(1, pass_count + 1)
    ]

    output_operands = {t.name: operands[t.name] for t in spec.outputs}
    live = _live_elements(spec, folded)
    element_trees, scratch_trees, kept, scratch = _keeping(
        spec, dtypes, operands, compute, live, passes, reductions, writer
    )
    across_trees = [(e.name, folded(e)) for e in spec.math.get("across", ())]
    element_reads, element_line_reads = operand_reads([t for _, t in element_trees + across_trees])
    scratch_reads = operand_reads([t for _, t in scratch_trees + across_trees])[0] if scratch else ()
    fresh_reads, fresh_line_reads = operand_reads([t for _, t in live + across_trees] if kept else [])  # (wide tiles)
    across = _across_sums(across_trees, writer, compute, accumulate)
    float_outputs = all(output_operands[n].c_type == "float" for n, _ in element_trees if n in output_operands)
    vector_math = _vector_double(element_trees + across_trees, operands, writer, compute) if float_outputs else ()
    checks = _nonpositive_checks([t for _, t in element_trees], tuple(operands[t.name] for t in spec.inputs))
    alone = [] if across_trees or scratch else element_trees  # float first: not beside sums across lines, kept terms
    float_elements = _float_elements(spec, reference.compute, compute, alone, writer, output_operands, checks)
    elements = _elements(element_trees, writer, compute, output_operands, checks)
    over_axes = any(a.role == AXES_ROLE for a in spec.attributes)
    return LinesKernel(
        name=name,
        op=spec.name,
        summary=spec.summary,
        detail=_detail(row, constants, compute, accumulate, pass_count, bool(float_elements)),
        compute=compute,
        accumulate=accumulate,
        params=_parameters(spec, operands, numbers, bool(across), over_axes),
        inputs=tuple(operands[t.name] for t in spec.inputs),
        outputs=tuple(output_operands.values()),
        numbers=numbers,
        value_count=len(writer.slots),
        before=tuple(before),
        passes=tuple(passes),
        element_reads=element_reads,
        kept_reads=tuple(operands[o] for o in kept),
        element_line_reads=element_line_reads,
        elements=tuple(elements),
        line_outputs=tuple((output_operands[t.name], writer.slots[t.name]) for t in spec.outputs if t.kind == "line"),
        across=across,
        across_outputs=tuple(output_operands[r.name] for r in across),
        # each pass costs a walk over the line; an exp as plan.EXP_WORK elements of arithmetic
        work_per_element=(1 + pass_count) * (1 + plan.EXP_WORK * _exp_count(spec, element_trees, folded)),
        combined=passes[0].reductions[0] if over_axes else None,
        vector_elements=() if float_elements else vector_math[: len(element_trees)],
        vector_across=vector_math[len(element_trees) :],
        scratch_output=output_operands[scratch] if scratch else None,
        scratch_elements=tuple(_elements(scratch_trees, writer, compute, output_operands, checks)),
        scratch_reads=scratch_reads,
        nonpositive_checks=checks,
        float_elements=float_elements,
        fresh_elements=tuple(_elements(live if kept else [], writer, compute, output_operands, checks)),
        fresh_reads=fresh_reads,
        fresh_line_reads=fresh_line_reads,
    )


def _writer(
    spec: OpSpec,
    table: DTypeTable,
    kinds: tuple[str, ...],
    numbers: tuple[str, ...],
    folded: Callable[[expr.Entry], ast.expr],
) -> _Writer:
    """The kernel's _Writer: a slot per line input and line value, in order, and the element
    code's spelling of every name; `kinds`: the compute, the accumulation and the row's types."""
    slots = {t.name: i for i, t in enumerate(t for t in spec.inputs if t.kind == "line")}
    for line_entry in spec.math.get("line", ()):
        slots[line_entry.name] = len(slots)
    element_spelling = {t.name: f"{t.name}_value" for t in spec.inputs if t.kind != "line"}
    element_spelling |= {n: f"{n}_line" for n in slots}
    element_spelling |= {n: n for n in numbers}
    element_spelling["count"] = "count"
    style = {kind: table.compute_types[kind] for kind in kinds}
    maxima = {e.name: folded(e) for e in spec.math.get("line", ()) if e.reduction == "line_max"}
    return _Writer(style, slots, numbers, element_spelling, maxima)


def _vector_sums(
    reductions: list[tuple[Reduction, ast.expr]], operands: dict[str, Operand], writer: _Writer, compute: str
) -> tuple[str, ...]:
    """A pass's terms on double vectors (_vector_double) where its reductions are all sums in
    double; else ()."""
    if not all(r.kind == "line_sum" and r.lane_type == "double" for r, _ in reductions):
        return ()
    return _vector_double([(r.name, tree) for r, tree in reductions], operands, writer, compute)


def _vector_double(
    entries: list[tuple[str, ast.expr]], operands: dict[str, Operand], writer: _Writer, compute: str
) -> tuple[str, ...]:
    """`entries` (name, tree; each may read the ones before) on double vectors (`opgen_doubles`,
    expr.to_vector_double: the lane loop's operations in double, in the same order, so the same
    bits), for the whole blocks of a contiguous line: f32 tensor and along inputs widened
    straight from memory as `<name>_value`, line values, numbers and `count` broadcast. GCC's
    lane loop moved the halves of every block through shuffles and the stack (SoftMax backward
    f32: 0.81-0.91 of the time in the vector form). () where the compute type is not double, an
    input is not f32, or an entry has no such form."""
    if compute != "double":
        return ()
    vectors: list[str] = []
    defined: set[str] = set()
    for name, tree in entries:
        variables = {}
        for read in expr.names(tree):
            operand = operands.get(read)
            if read in defined or (operand is not None and operand.kind != "line" and operand.c_type == "float"):
                variables[read] = f"{read}_value"
            elif read in writer.slots:
                variables[read] = f"opgen_doubles_set1({read}_line)"
            elif read in writer.numbers or read == "count":
                variables[read] = f"opgen_doubles_set1((double){read})"
            else:
                return ()
        vector = expr.to_vector_double(tree, variables)
        if vector is None:
            return ()
        vectors.append(vector)
        defined.add(name)
    return tuple(vectors)


def _reading_kept(
    element_trees: list[tuple[str, ast.expr]], kept: dict[str, str], element_spelling: dict[str, str]
) -> list[tuple[str, ast.expr]]:
    """The element entries with the terms the last pass keeps (_kept_terms) read from there."""
    result = []
    for entry, tree in element_trees:
        if entry in kept:
            assert isinstance(tree, ast.BinOp)
            tree = ast.BinOp(ast.Name(f"{entry}_kept"), tree.op, tree.right)
            element_spelling[f"{entry}_kept"] = f"{entry}_kept_value"
        result.append((entry, tree))
    return result


def _elements(
    element_trees: list[tuple[str, ast.expr]],
    writer: _Writer,
    compute: str,
    outputs: dict[str, Operand],
    checks: tuple[Operand, ...] = (),
) -> list[Element]:
    """The element entries in C, in order: each later one reads the earlier ones' values;
    with `checks` (nonpositive_checks), also as computed where those are at most 0."""
    elements, checked = [], frozenset(o.name for o in checks)
    for entry, tree in element_trees:
        c_nonpositive = writer.c_text(tree, compute, checked=checked) if checked else ""
        elements.append(Element(entry, writer.c_text(tree, compute), outputs.get(entry), c_nonpositive))
        writer.element_spelling[entry] = f"{entry}_value"
    return elements


def _pass(
    index: int,
    reductions: list[tuple[Reduction, ast.expr]],
    after: list[LineStep],
    operand_reads: Callable[[list[ast.expr]], tuple[tuple[Operand, ...], tuple[tuple[str, int], ...]]],
    operands: dict[str, Operand],
    writer: _Writer,
    compute: str,
) -> Pass:
    """Reduction pass `index`: its reductions, what their terms read, the line values after it."""
    reads, line_reads = operand_reads([tree for _, tree in reductions])
    vector_terms = _vector_sums(reductions, operands, writer, compute)
    return Pass(index, tuple(r for r, _ in reductions), reads, line_reads, tuple(after), (), vector_terms)


def _across_sums(
    across_trees: list[tuple[str, ast.expr]], writer: _Writer, compute: str, accumulate: str
) -> tuple[Reduction, ...]:
    """The sums across lines (`math.across`), each term in the compute type."""
    return tuple(
        Reduction(n, k, "across_sum", accumulate, f"({accumulate})0", writer.c_text(t, compute), compute)
        for k, (n, t) in enumerate(across_trees)
    )


def _exp_count(
    spec: OpSpec, element_trees: list[tuple[str, ast.expr]], folded: Callable[[expr.Entry], ast.expr]
) -> int:
    """The exps the element math and the line values take, per element."""
    trees = [t for _, t in element_trees] + [folded(e) for e in spec.math.get("line", ())]
    return sum(expr.calls(t, "exp") for t in trees)


def _float_elements(
    spec: OpSpec,
    row_compute: str,
    compute: str,
    element_trees: list[tuple[str, ast.expr]],
    writer: _Writer,
    outputs: dict[str, Operand],
    checks: tuple[Operand, ...],
) -> tuple[Element, ...]:
    """The element entries in the row's own compute type (float), line values as
    `<name>_line_float` and `count` narrowed, where the kernel computes in a wider type and has
    tensor outputs (LinesKernel.float_elements); else () (also where `element_trees` is empty)."""
    if compute == row_compute or not element_trees or not any(t.kind == "tensor" for t in spec.outputs):
        return ()
    divisors = {t.name for t in spec.inputs if t.kind != "line"} | {a.name for a in spec.attributes} | {"count"}
    if not all(_carries(tree, divisors) for _, tree in element_trees):
        return ()
    spelling = dict(writer.element_spelling)
    spelling |= {n: f"{n}_line_float" for n in writer.slots}
    spelling["count"] = f"(({row_compute})count)"
    narrowed = dataclasses.replace(writer, element_spelling=spelling)
    return tuple(_elements(element_trees, narrowed, row_compute, outputs, checks))


def _carries(tree: ast.expr, divisors: set[str]) -> bool:
    """Whether an infinity or NaN in any intermediate of `tree` reaches its value: sums,
    differences, products, exp (of -Inf: 0, as of any value past f32's range below), log, sqrt
    and abs carry one; a quotient only where its divisor is a stored input, an attribute, `count`
    or a constant, finite in float where it is in double (x / Inf is 0); a selection, min, max
    or tanh may drop one."""
    if isinstance(tree, (ast.Constant, ast.Name)):
        return True
    if isinstance(tree, ast.UnaryOp) and isinstance(tree.op, (ast.USub, ast.UAdd)):
        return _carries(tree.operand, divisors)
    if isinstance(tree, ast.BinOp) and isinstance(tree.op, (ast.Add, ast.Sub, ast.Mult)):
        return _carries(tree.left, divisors) and _carries(tree.right, divisors)
    if isinstance(tree, ast.BinOp) and isinstance(tree.op, ast.Div):
        divisor = tree.right
        stored = isinstance(divisor, ast.Constant) or (isinstance(divisor, ast.Name) and divisor.id in divisors)
        return stored and _carries(tree.left, divisors)
    if isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and tree.func.id in ("exp", "log", "sqrt", "abs"):
        return all(_carries(argument, divisors) for argument in tree.args)
    return False


def _nonpositive_checks(trees: list[ast.expr], inputs: tuple[Operand, ...]) -> tuple[Operand, ...]:
    """The tensor inputs whose exp `trees` take directly (exp(x), x an input), in input order:
    the math cannot show their sign, a block's check can (LinesKernel.nonpositive_checks)."""
    named = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "exp":
                argument = node.args[0]
                if isinstance(argument, ast.Name):
                    named.add(argument.id)
    return tuple(o for o in inputs if o.name in named and o.kind == "tensor")


def _live_elements(spec: OpSpec, folded: Callable[[expr.Entry], ast.expr]) -> list[tuple[str, ast.expr]]:
    """`math.elements` folded, without the entries no tensor output reads."""
    element_trees = [(e.name, folded(e)) for e in spec.math.get("elements", ())]
    live = {t.name for t in spec.outputs if t.kind == "tensor"}
    for entry, tree in reversed(element_trees):
        if entry in live:
            live |= expr.names(tree)
    return [(n, t) for n, t in element_trees if n in live]


def _detail(
    row: dict[str, str], constants: dict[str, bool], compute: str, accumulate: str, pass_count: int, float_first: bool
) -> str:
    """The kernel's comment line: dtypes, types, passes and specialized attributes."""
    computed = f"computed in {compute}"
    if float_first:
        computed = f"line values in {compute}, elements in float (in {compute} where float leaves its range)"
    return "; ".join(
        [
            ", ".join(f"{n} {d}" for n, d in row.items()),
            f"{computed}, sums in {accumulate}",
            f"{pass_count} reduction pass{'es' if pass_count != 1 else ''} and an element pass per line",
            *(f"{n}={'true' if v else 'false'}" for n, v in constants.items()),
        ]
    )


def _line_steps(
    spec: OpSpec,
    operands: dict[str, Operand],
    writer: _Writer,
    folded: Callable[[expr.Entry], ast.expr],
    compute: str,
    accumulate: str,
) -> tuple[list[LineStep], dict[int, list[tuple[Reduction, ast.expr]]], dict[int, list[LineStep]]]:
    """`math.line` in passes: the line values before the first reduction pass (line inputs,
    values of no reduction), each pass's reductions (with their terms' trees), and the values
    computed after each pass."""
    groups, pass_of = line_groups(spec)
    slots = writer.slots
    before = [
        LineStep(
            t.name,
            slots[t.name],
            operands[t.name].load.format(
                f"(({operands[t.name].c_type} *)call->tensors[{operands[t.name].index}])[line]"
            ),
        )
        for t in spec.inputs
        if t.kind == "line"
    ]
    pass_count = max(pass_of.values(), default=0)
    reductions: dict[int, list[tuple[Reduction, ast.expr]]] = {k: [] for k in range(1, pass_count + 1)}
    after: dict[int, list[LineStep]] = {k: [] for k in range(1, pass_count + 1)}
    for line_entry in spec.math.get("line", ()):
        entry, reduction, tree = line_entry.name, line_entry.reduction, folded(line_entry)
        if reduction is None:
            step = LineStep(entry, slots[entry], writer.c_text(tree, accumulate, writer.line_spelling(accumulate)))
            (before if groups[entry] == 0 else after[groups[entry]]).append(step)
            continue
        lane_type = accumulate if reduction in ("line_sum", "line_prod") else compute
        infinity = "INFINITY" if reduction == "line_min" else "-INFINITY"
        start = {"line_sum": "-0.0", "line_prod": "1"}.get(reduction, infinity)  # the value of no terms
        value = "(double)({} + 0.0)" if reduction == "line_sum" else "(double){}"  # see Reduction
        term = writer.c_text(tree, compute)
        reductions[pass_of[entry]].append(
            (Reduction(entry, slots[entry], reduction, lane_type, f"({lane_type}){start}", term, compute, value), tree)
        )
    return before, reductions, after


def _parameters(
    spec: OpSpec, operands: dict[str, Operand], numbers: tuple[str, ...], across: bool, over_axes: bool
) -> tuple[tuple[str, str], ...]:
    """The kernel's C parameters, (type, name)."""
    params: list[tuple[str, str]] = [(f"const {operands[t.name].c_type} *", t.name) for t in spec.inputs]
    params += [(f"{operands[t.name].c_type} *", t.name) for t in spec.outputs]
    params += [("float ", n) for n in numbers]
    if across:  # the chunks' partial sums across lines
        params.append(("double *", "workspace"))
    params += [("int64_t ", "outer"), ("int64_t ", "length"), ("int64_t ", "inner")]
    if over_axes:  # the blocks of axes before the line's (opgen_lines.h)
        params.append(("const int64_t *", "blocks"))
    return tuple(params)


def _keeping(
    spec: OpSpec,
    dtypes: dict[str, DType],
    operands: dict[str, Operand],
    compute: str,
    element_trees: list[tuple[str, ast.expr]],
    passes: list[Pass],
    reductions: dict[int, list[tuple[Reduction, ast.expr]]],
    writer: _Writer,
) -> tuple[list[tuple[str, ast.expr]], list[tuple[str, ast.expr]], dict[str, str], str]:
    """`element_trees` as the element pass computes them (reading the terms f32 outputs keep),
    the same where the thread's scratch holds a narrow output's term ([] if none), the f32
    outputs that keep a term (output -> reduction) and that narrow output ("" if none); the last
    of `passes` is marked to keep them (module docstring)."""
    kept = _kept_terms(spec, dtypes, compute, element_trees, reductions.get(len(passes), []), writer.slots)
    in_outputs = {o: r for o, r in kept.items() if dtypes[o].c_type == "float"}
    scratch = next((o for o in kept if o not in in_outputs), "")
    if not kept:
        return element_trees, [], {}, ""
    passes[-1] = dataclasses.replace(
        passes[-1],
        keeps=tuple((operands[o], r) for o, r in in_outputs.items()),
        scratch_keep=kept[scratch] if scratch else "",
    )
    scratch_trees = _reading_kept(element_trees, {scratch: kept[scratch]}, writer.element_spelling) if scratch else []
    return _reading_kept(element_trees, in_outputs, writer.element_spelling), scratch_trees, in_outputs, scratch


def _kept_terms(
    spec: OpSpec,
    dtypes: dict[str, DType],
    compute: str,
    element_trees: list[tuple[str, ast.expr]],
    last_pass: list[tuple[Reduction, ast.expr]],
    slots: dict[str, int],
) -> dict[str, str]:
    """The tensor outputs that may keep a reduction's term (module docstring): output ->
    reduction, narrow outputs included."""
    per_line = set(slots) | {a.name for a in spec.attributes} | {"count"}
    outputs = {t.name for t in spec.outputs if t.kind == "tensor"}
    kept: dict[str, str] = {}
    for entry, tree in element_trees:
        if entry not in outputs or entry not in dtypes or compute != "float":
            continue
        if not (isinstance(tree, ast.BinOp) and isinstance(tree.op, (ast.Mult, ast.Div))):
            continue
        if not expr.names(tree.right) <= per_line:
            continue
        for reduction, term in last_pass:
            if ast.dump(term) == ast.dump(tree.left) and reduction.name not in kept.values():
                kept[entry] = reduction.name
                break
    return kept
