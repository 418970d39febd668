"""Load and validate op specs (one TOML file per op) and the dtype table.

Every problem is reported as `file: key: what is wrong`, and loading a spec stops at its
first one, so no half-checked spec ever reaches the templates; a directory reports each of
its broken specs (load_specs), and a subset of its ops loads those ops' files alone.
"""

from __future__ import annotations

import ast
import keyword
import math
import numbers
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, cast, overload

import numpy as np

from opgen import expr

PATTERNS = ("elementwise", "broadcast_reduce", "reduce_then_apply", "along_axes", "binary")
LAYOUTS = {"NCX": 1, "NXC": -1}  # layout -> channel axis of the reference tensor
CHANNEL_FORMS = ("per_channel", "per_tensor", "trailing", "numpy", "single", "channel_count")
TENSOR_FORMS = ("to_reference",)
ATTRIBUTE_TYPES = ("bool", "f32", "string", "int", "int list")
# Roles of an int attribute: the axes an along_axes op reduces along (negative: from the last).
AXIS_ROLES = {
    "axis": "the one axis the attribute names",
    "begin_axis": "every axis from the one the attribute names to the last",
}
# The role of an int list attribute: every axis it names (any set of them), and of the bool
# attribute that keeps those axes in the line outputs' shape (as 1) rather than dropping them.
AXES_ROLE = "axes"
KEEP_DIMS_ROLE = "keep_dims"
# The broadcast rules a binary op's string attribute with role "broadcast" names (oneDNN Graph's
# auto_broadcast): "numpy", NumPy broadcasting of the two inputs; "none", equal shapes only.
BROADCAST_RULES = ("none", "numpy")
# Tensor kinds each pattern takes (inputs and outputs).
TENSOR_KINDS = {
    "elementwise": ("tensor",),
    "broadcast_reduce": ("tensor", "channel"),
    "reduce_then_apply": ("tensor", "channel"),
    "along_axes": ("tensor", "line", "along"),
    "binary": ("tensor",),
}
ATTRIBUTE_TYPE_DOCS = {
    "bool": "True or False; in the math a condition. One kernel variant per value when the math reads it.",
    "f32": "A finite number that the kernels receive as an f32 (checked: it must not round to infinity).",
    "string": 'One of the attribute\'s `allowed` strings (a C enum); with `role = "layout"` it picks the layout, '
    'with `role = "broadcast"` (binary ops) the broadcast rule.',
    "int": 'An axis of the reference (negative: counted from the last); with `role = "axis"` or `"begin_axis"` it '
    "names the axes of an along_axes op's lines. Checked against the reference's rank.",
    "int list": 'A list of axes of the reference (negative: counted from the last), with `role = "axes"`: an '
    "along_axes op's lines run along every axis it names, in any set (an empty list: lines of one element). Each "
    "value in -rank..rank-1, none named twice; in C an `opgen_int_list` (count, values).",
}
MAX_RANK = 12  # dims of the C API's tensor descriptor (opgen_tensor)
# Input domains (inputs.<name>.domain): the values an op is defined for; `opgen check` and the
# tests draw that input's data from it.
DOMAINS = ("positive", "nonnegative", "nonpositive")
# Accuracy contracts (accuracy.<output>): how far an output may be from the float64 oracle.
# "exact": the oracle rounded to the output dtype; "ulp": within 1 ulp of it; "sum": 1 ulp plus
# the accumulation bound of one sum (accuracy.sum_bound: its terms and their magnitudes);
# "oracle:<function>": 1 ulp plus the bound the oracle module's <function> computes.
ACCURACY = ("exact", "ulp", "sum", "oracle:")

# Names the generated C or Python uses for itself; a spec may not take them.
_RESERVED = {
    "auto",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "_Bool",
    "_Complex",
    "_Imaginary",
    "bool",
    "true",
    "false",
    "NULL",
    "outer",
    "inner",
    "channels",
    "count",
    "workspace",
    "sums",
    "channel_values",
    "row",
    "lane",
    "index",
    "element",
    "channel",
    "block",
    "tail",
    "out",
    "size_t",
    "int64_t",
    "uint16_t",
    "uint32_t",
    # the along_axes microkernels' own (templates/along_axes.c.j2)
    "length",
    "line",
    "values",
    "lanes",
    "position",
    "outer_index",
    "start",
    "at",
    "filled",
    "call",
    "tensors",
    "numbers",
    "kernel",
    "passes",
    "moved",
    "r",
    # the binary kernel API's own (templates/binary.c.j2; its microkernels' are opgen_-prefixed)
    "rank_0",
    "rank_1",
    "dims_0",
    "dims_1",
    # the C op API's parameters, beside the attributes in its prototypes (templates/opgen.h.j2)
    "operands",
    "workspace_size",
}
# The kernels' own locals, by pattern, in the templates that do not prefix them yet: refused
# as names of that pattern's specs. tests/test_spec_injection.py finds every name the generated
# C declares beside a spec's and fails on one that is neither opgen_-prefixed, made from a spec
# name, nor refused here or in _RESERVED.
_RESERVED_BY_PATTERN: dict[str, frozenset[str]] = {
    "elementwise": frozenset(
        (
            "decay_vector",
            "stream",
        )
    ),
    "along_axes": frozenset(("blocks",)),
    "broadcast_reduce": frozenset(
        (
            "again",
            "base",
            "blocks_first",
            "chain",
            "first",
            "group",
            "group_end",
            "inner_first",
            "inner_last",
            "last",
            "one",
            "pair",
            "partial",
            "row_first",
            "row_last",
            "rows",
            "rows_last",
            "run_first",
            "run_last",
            "segment",
            "segment_end",
            "segment_length",
            "share",
            "slot",
            "span",
            "stream",
            "tail_first",
            "unit",
            "unit_first",
            "unit_last",
            "whole_channels",
        )
    ),
    "reduce_then_apply": frozenset(
        (
            "again",
            "base",
            "chain",
            "chain_blocks",
            "first",
            "group",
            "group_end",
            "last",
            "paired",
            "partial",
            "repeat",
            "row_first",
            "row_last",
            "run_first",
            "run_last",
            "run_rows",
            "segment",
            "segment_end",
            "segment_length",
            "slot",
            "step",
            "stream",
            "sum",
            "tail_first",
            "whole_channels",
        )
    ),
}
# Suffixes the generated C adds to a spec's names for its own variables, and the prefix of its own names.
_RESERVED_SUFFIXES = ("_value", "_acc", "_sums", "_data", "_line", "_lanes", "_block", "_term", "_all", "_kept", "_one")
_RESERVED_PREFIX = "opgen"
RESERVED_DOC = (
    "Names (of ops, attributes, inputs, outputs, flags, math entries and dtypes) are C identifiers of at most 63 "
    "characters. Refused: C and Python keywords, C type names, the names below (used by the generated C or "
    "Python), any name starting with `opgen`, and any name ending in `_value`, `_acc`, `_sums`, `_data`, `_line`, "
    "`_lanes`, `_block`, `_term`, `_all`, `_kept` or `_one` "
    "(the generated C's own variables for a name)."
)
# The smallest magnitude that rounds to infinity in f32: max + half an ulp.
_F32_OVERFLOW = expr.F32_OVERFLOW
# Line values (line inputs and math.line entries) an along_axes op may keep per line: the
# driver holds them in a stack array per lane (templates/drivers/opgen_lines.c).
MAX_LINE_VALUES = 32
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
# A string attribute's value becomes part of a C enumerator (OPGEN_<ATTRIBUTE>_<VALUE>).
_ENUM_VALUE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,62}")
# The dtype table's per-element conversions are C: the operand alone, or one function of it.
_CONVERSION = re.compile(r"\{\}|[A-Za-z_][A-Za-z0-9_]{0,62}\(\{\}\)")
# Compute types are C's floating types, spelled in C by their names and these suffixes.
_COMPUTE_TYPES = {"float": ("f",), "double": ("",)}


class SpecError(ValueError):
    """A spec or dtype table that breaks a rule; the message names file and key."""


@dataclass(frozen=True)
class DType:
    name: str
    c_type: str
    numpy: str
    load: str
    store: str
    load_block: str
    store_block: str
    load_part: str
    store_part: str
    compute: str
    wide_compute: str
    accumulate: str
    mantissa_bits: int
    min_exponent: int
    line_writer: str | None = None  # C type (and function prefix) storing blocks as whole lines
    line_writer_cheap: bool = False  # the writer also pays in loops short of issue slots
    acl_name: str | None = None  # aclDataType enumerator of the aclnn-compatible API, if any
    acl_value: int | None = None

    @property
    def size(self) -> int:
        """Bytes of one stored element: sign, exponent (as wide as emax = 1 - emin needs) and
        mantissa bits."""
        return (1 + (1 - self.min_exponent).bit_length() + 1 + self.mantissa_bits) // 8

    @property
    def smallest_exponent(self) -> int:
        """The smallest nonzero magnitude (a subnormal) is 2^this."""
        return self.min_exponent - self.mantissa_bits

    @property
    def end_exponent(self) -> int:
        """Every finite magnitude is below 2^this (IEEE formats: emax = 1 - emin)."""
        return 2 - self.min_exponent


@dataclass(frozen=True)
class ComputeType:
    name: str
    literal_suffix: str
    math_suffix: str


@dataclass(frozen=True)
class DTypeTable:
    dtypes: dict[str, DType]
    compute_types: dict[str, ComputeType]


@dataclass(frozen=True)
class Attribute:
    name: str
    type: str
    doc: str
    default: Any = None
    required: bool = True
    allowed: tuple[str, ...] = ()
    minimum_exclusive: float | None = None
    role: str | None = None
    example: Any = None  # the value `opgen check` calls the op with when there is no default


@dataclass(frozen=True)
class Tensor:
    """An input or output. kind 'tensor' has the reference's shape; 'channel' is broadcast/reduced."""

    name: str
    doc: str
    kind: str = "tensor"
    optional: bool = False
    default: float | None = None
    ignored_unless: str | None = None
    broadcast: tuple[str, ...] = ()
    like: str | None = None
    requested_by: str | None = None
    domain: str | None = None  # an input's values the op is defined for (DOMAINS); None: every value


@dataclass(frozen=True)
class Flag:
    """A keyword that requests optional outputs."""

    name: str
    doc: str
    default_if_given: str


@dataclass(frozen=True)
class Backward:
    """How a forward op's gradients come from its backward op (spec table [backward]).

    inputs: (backward input, source kind, name), kind 'input' or 'output' (a forward tensor)
    or 'gradient' (the gradient with respect to the forward output `name`); attributes:
    (backward attribute, kind, value), kind 'attribute' (a forward attribute's name) or
    'constant'; gradients: (forward input, the backward output that is its gradient)."""

    op: str
    inputs: tuple[tuple[str, str, str], ...]
    attributes: tuple[tuple[str, str, Any], ...]
    gradients: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class OpSpec:
    name: str
    summary: str
    source: str
    pattern: str
    compute: str
    reference: str
    layout: str | None
    min_rank: int
    max_rank: int | None
    attributes: tuple[Attribute, ...]
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    flags: tuple[Flag, ...]
    dtypes: tuple[dict[str, str], ...]
    # section -> its entries in the spec's order, each parsed once (expr.Entry)
    math: dict[str, tuple[expr.Entry, ...]]
    path: str = ""
    specialized: tuple[str, ...] = field(default=())
    aclnn: str | None = None  # name of an aclnn-compatible API to generate (aclnn<Name>)
    # output -> its accuracy contract against the float64 oracle (ACCURACY), None: not stated
    accuracy: dict[str, str | None] = field(default_factory=dict)
    backward: Backward | None = None  # the op giving this one's gradients, if any
    edge_values: str = "all"  # the edge values checks feed it: "all" or "finite" (op.edge_values)

    @property
    def layout_attribute(self) -> Attribute | None:
        return next((a for a in self.attributes if a.role == "layout"), None)

    @property
    def layouts(self) -> tuple[str, ...]:
        if self.layout is not None:
            return (self.layout,)
        attribute = self.layout_attribute
        return attribute.allowed if attribute else ()

    def tensor(self, name: str) -> Tensor:
        return next(t for t in (*self.inputs, *self.outputs) if t.name == name)

    def tensor_kind(self, name: str) -> str | None:
        """The kind of the input or output `name`; None when no tensor has that name."""
        return next((t.kind for t in (*self.inputs, *self.outputs) if t.name == name), None)


@dataclass(frozen=True)
class Key:
    """One key of a spec or dtype-table table: whether it must be given, what it means, and a
    TOML example of it. docs/spec-language.md is generated from these (`opgen docs`)."""

    required: bool
    doc: str
    example: str


# Keys each table may hold.
_OP_KEYS = {
    "name": Key(
        True,
        "The op's name: the Python function, the C entry points (`opgen_<name>`) and the file name (`<name>.toml`) "
        "all take it.",
        'name = "prelu_backward"',
    ),
    "summary": Key(
        True,
        "One sentence saying what the op computes; it heads the Python function's docstring.",
        'summary = "Gradient of ReLU: diff_src = diff_dst where src > 0, else 0."',
    ),
    "source": Key(
        True,
        "The document the op follows (its call shape, dtype table and edge cases).",
        'source = "oneDNN Graph API, ReLUBackward"',
    ),
    "pattern": Key(
        True,
        "The loop structure, one of `elementwise`, `broadcast_reduce`, `reduce_then_apply`, `along_axes`, `binary` "
        "(see Patterns and math sections).",
        'pattern = "broadcast_reduce"',
    ),
    "compute": Key(
        False,
        '`"normal"` (default): the math runs in the dtype row\'s `compute` type; `"wide"`: in its `wide_compute` type'
        " (double for f32 and bf16 data), for math with several roundings per element that must stay within 1 ulp."
        " In an `along_axes` op, the reductions and line values run in the wide type and each block of elements in"
        " the row's type first, again in the wide type where a result is not finite (an intermediate left the"
        " range), where the element math carries an infinity to its results (sums, products, `exp`, `log`,"
        " `sqrt`, `abs`, quotients by inputs, attributes or constants): its accuracy bound counts the elements'"
        " roundings in the row's type.",
        'compute = "wide"',
    ),
    "reference": Key(
        False,
        "The tensor input whose shape every tensor operand has and that broadcast forms and layouts refer to; "
        "default: the first input of kind `tensor`. It cannot itself broadcast.",
        'reference = "src"',
    ),
    "layout": Key(
        False,
        "A fixed layout, `NCX` (channel is dim 1) or `NXC` (channel is the last dim), for an op with channel operands"
        " and no layout attribute. Elementwise ops take none.",
        'layout = "NCX"',
    ),
    "min_rank": Key(False, f"The smallest rank the reference may have (0..{MAX_RANK}; default 0).", "min_rank = 2"),
    "max_rank": Key(
        False,
        f"The largest rank the reference may have (0..{MAX_RANK}; default {MAX_RANK}, the dims an `opgen_tensor` "
        f"holds).",
        "max_rank = 8",
    ),
    "edge_values": Key(
        False,
        "The edge values `opgen check` and the tests feed the op besides ordinary ones, zeros and subnormals: `all` "
        "(also NaN, infinities and the dtype's largest values) or `finite`, for an op whose f32 intermediates "
        "overflow near the dtype's limits where the float64 oracle's do not. Default: `finite` for "
        "reduce_then_apply, else `all`.",
        'edge_values = "finite"',
    ),
    "aclnn": Key(
        False,
        "Also generate an Ascend CANN-compatible API `aclnn<aclnn>GetWorkspaceSize` / `aclnn<aclnn>` "
        "(`opgen_aclnn.h`). CamelCase; the op takes tensors only, and every dtype of its table needs an `acl_name`.",
        'aclnn = "PreluBackward"',
    ),
}
_TOP_KEYS = {
    "op": Key(True, "The op itself: the table of `op` keys below.", '[op]\nname = "relu_backward"'),
    "attributes": Key(
        False,
        "Non-tensor arguments, keyword-only in Python, in the C call after the tensors; an array of tables.",
        '[[attributes]]\nname = "epsilon"\ntype = "f32"\ndoc = "Added to the variance."',
    ),
    "inputs": Key(
        True,
        "The tensor inputs in the document's order (the positional arguments); an array of tables.",
        '[[inputs]]\nname = "src"\ndoc = "The forward input."',
    ),
    "outputs": Key(
        True,
        "The outputs in the document's order (a multi-output op returns a named tuple); an array of tables.",
        '[[outputs]]\nname = "diff_src"\ndoc = "Gradient with respect to src."',
    ),
    "flags": Key(
        False,
        "Keywords that request optional outputs (Python: `None` means requested when their input is given); an array "
        "of tables.",
        '[[flags]]\nname = "with_diff_gamma_beta"\ndefault_if_given = "gamma"\ndoc = "Compute diff_gamma and '
        'diff_beta."',
    ),
    "dtypes": Key(
        True,
        "The dtype combinations the op accepts, one table per row of the document's table, naming the dtype of every "
        "input and output.",
        '[[dtypes]]\nsrc = "bf16"\ndiff_dst = "bf16"\ndiff_src = "bf16"',
    ),
    "math": Key(
        True,
        'The computation: one table per section of the pattern, each `name = "expression"` (see Patterns and math '
        "sections).",
        '[math.elements]\ndiff_src = "diff_dst if src > 0 else 0"',
    ),
    "accuracy": Key(
        False,
        'Each output\'s accuracy contract against the float64 oracle, `<output> = "<contract>"`: `exact` (the '
        "oracle rounded to the output dtype), `ulp` (within 1 ulp of it), `sum` (1 ulp plus the bound of the sum's "
        "accumulation, from its terms' magnitudes and count; only for an output that is one sum) or "
        "`oracle:<function>` (1 ulp plus the bound that function of the oracle module computes). Defaults: `sum` for "
        "an output that is one sum, `ulp` for elementwise and broadcast_reduce tensor outputs; `opgen check` asks for "
        "the rest.",
        '[accuracy]\ndiff_src = "ulp"\ndiff_slope = "sum"',
    ),
    "backward": Key(
        False,
        "The op of this spec directory that gives this op's gradients (keys in `[backward]` below): used for "
        "autograd (`opgen.torch`); the loader checks the pairing against that op's spec.",
        '[backward]\nop = "relu_backward"\ngradients = { src = "diff_src" }\n[backward.inputs]\n'
        'src_or_dst = "dst"\ndiff_dst = "grad(dst)"\n[backward.attributes]\nuse_dst = true',
    ),
}
_BACKWARD_KEYS = {
    "op": Key(True, "The backward op's name (a spec of the same directory).", 'op = "relu_backward"'),
    "inputs": Key(
        True,
        "Each backward input: a forward input's or output's name, or `grad(<output>)`, the gradient flowing into "
        "that forward output.",
        '[backward.inputs]\nsrc_or_dst = "dst"\ndiff_dst = "grad(dst)"',
    ),
    "attributes": Key(
        False,
        "Each backward attribute: a forward attribute's name, or a constant (bool or number).",
        "[backward.attributes]\nuse_dst = true",
    ),
    "gradients": Key(
        True,
        "Each forward input that has a gradient: the backward output that gives it (of that input's dtype).",
        '[backward.gradients]\nsrc = "diff_src"',
    ),
}
_GRADIENT_SOURCE = re.compile(r"grad\(([A-Za-z_][A-Za-z0-9_]*)\)")
_ATTRIBUTE_KEYS = {
    "name": Key(True, "The attribute's name: a C identifier, not reserved.", 'name = "alpha"'),
    "type": Key(
        True,
        "`bool`, `f32`, `string`, `int` or `int list`. A bool the math reads is fixed when the kernels are generated "
        "(one variant per value); a string is one of `allowed`; an int names axes (with `role`), negative values "
        'counting from the last; an int list names a set of axes (with `role = "axes"`).',
        'type = "f32"',
    ),
    "doc": Key(
        True, "What the attribute means; shown by `help()` and in `opgen.h`.", 'doc = "Slope of the linear part."'
    ),
    "default": Key(
        False,
        "The value when the caller gives none; without it the attribute is required. Checked as a call's value would "
        "be.",
        "default = true",
    ),
    "allowed": Key(
        False,
        "The values of a string attribute (required for one, refused for the others).",
        'allowed = ["NCX", "NXC"]',
    ),
    "minimum_exclusive": Key(
        False,
        "For an f32 attribute: values must exceed this, compared after rounding to f32.",
        "minimum_exclusive = 0.0",
    ),
    "role": Key(
        False,
        "`layout`: this string attribute picks the layout; its `allowed` values are among NCX and NXC. For an int "
        "attribute of an along_axes op: `axis` (the lines run along the one axis it names) or `begin_axis` (along "
        "every axis from it to the last). For an int list attribute: `axes` (along every axis it names; the op's "
        "outputs are then line outputs, its `math.line` one reduction and values computed from it). For a bool "
        "attribute of an op with `axes`: `keep_dims` (true: the line outputs keep the reduced axes as 1; false: "
        "they drop them). For a string attribute of a binary op: `broadcast` (its `allowed` values among `none` "
        "and `numpy`: equal shapes only, or NumPy broadcasting of the two inputs). At most one of each per op.",
        'role = "layout"',
    ),
    "example": Key(
        False,
        "A valid value (checked as a default is) that `opgen check` and the tests call the op with, ahead of the "
        "default.",
        "example = 0.5",
    ),
}
_INPUT_KEYS = {
    "name": Key(
        True, "The input's name: a C identifier, not reserved, not ending in a reserved suffix.", 'name = "diff_dst"'
    ),
    "doc": Key(
        True, "What the input is; shown by `help()` and in `opgen.h`.", 'doc = "Gradient with respect to the output."'
    ),
    "kind": Key(
        False,
        "`tensor` (default): the reference's shape (or broadcast to it with `to_reference`); `channel`: a per-channel"
        " operand, broadcast along the reference by one of its `broadcast` forms. along_axes: `line`, one value per "
        "line (the reference's shape without the line's axes); `along`, one value per position along a line (the "
        "shape of the line's axes), the same for every line.",
        'kind = "channel"',
    ),
    "optional": Key(
        False, "A channel input the caller may leave out (`None`); it then takes `default`.", "optional = true"
    ),
    "default": Key(
        False,
        "The value of an optional input when it is absent (a number the kernels' C holds as a literal).",
        "default = 1.0",
    ),
    "ignored_unless": Key(
        False,
        "A flag: when that flag is off, the input is taken as its `default` even if given (a given one must still be "
        "valid).",
        'ignored_unless = "with_diff_gamma_beta"',
    ),
    "broadcast": Key(
        False,
        "The shapes the input may take, tried in order; the first that fits is used (see Broadcast forms). Required "
        "for a channel input.",
        'broadcast = ["per_channel", "per_tensor"]',
    ),
    "domain": Key(
        False,
        "The values the op is defined for: `positive`, `nonnegative` or `nonpositive`; `opgen check` and the tests "
        "draw this input's data from it. Left out: any value.",
        'domain = "nonnegative"',
    ),
}
_OUTPUT_KEYS = {
    "name": Key(True, "The output's name: a C identifier, not reserved; the math defines it.", 'name = "diff_slope"'),
    "doc": Key(
        True, "What the output is; shown by `help()` and in `opgen.h`.", 'doc = "Gradient with respect to slope."'
    ),
    "kind": Key(
        False,
        "`tensor` (default): the reference's shape, defined in `math.elements`; `channel`: a reduction, defined in "
        "`math.sums` (broadcast_reduce) or `math.after` (reduce_then_apply); `line` (along_axes): one value per line, "
        "defined in `math.line`.",
        'kind = "channel"',
    ),
    "like": Key(
        False, "For a channel output: the channel input whose shape (and broadcast form) it takes.", 'like = "slope"'
    ),
    "requested_by": Key(
        False,
        "A flag: the output is computed only when the flag is on (else `None`, and NULL from C).",
        'requested_by = "with_diff_gamma_beta"',
    ),
}
_FLAG_KEYS = {
    "name": Key(
        True,
        "The flag's name (a keyword argument in Python; true or false, or `None`).",
        'name = "with_diff_gamma_beta"',
    ),
    "doc": Key(True, "What the flag requests.", 'doc = "Compute diff_gamma and diff_beta (both or neither)."'),
    "default_if_given": Key(
        True,
        "An optional input: when the caller leaves the flag `None`, it is on exactly when that input is given.",
        'default_if_given = "gamma"',
    ),
}
_DTYPE_KEYS = {
    "c_type": Key(
        True, "C type of one stored element (`opgen_f16`/`opgen_bf16` hold the raw bits).", 'c_type = "opgen_bf16"'
    ),
    "numpy": Key(True, "NumPy dtype name (`bfloat16` is `ml_dtypes.bfloat16`).", 'numpy = "bfloat16"'),
    "load": Key(
        True,
        "C expression converting one element to `float`; `{}` is the operand, exactly once.",
        'load = "opgen_bf16_to_f32({})"',
    ),
    "store": Key(
        True,
        "C expression converting one `float` to the dtype; `{}` is the operand, exactly once.",
        'store = "opgen_f32_to_bf16({})"',
    ),
    "load_block": Key(
        True,
        "C function converting a block of `OPGEN_BLOCK` elements to `float`, `(out, in, ahead)`; it also prefetches "
        "the line `ahead` bytes past `in`.",
        'load_block = "opgen_load_block_bf16"',
    ),
    "store_block": Key(
        True,
        "C function storing a `float` block in the dtype, `(out, in, stream)`.",
        'store_block = "opgen_store_block_bf16"',
    ),
    "load_part": Key(
        True,
        "C function loading the first `count` (< `OPGEN_BLOCK`) elements into a `float` block, the other lanes 0: a "
        "row's tail.",
        'load_part = "opgen_load_part_bf16"',
    ),
    "store_part": Key(
        True,
        "C function storing the first `count` elements of a `float` block, `(out, in, count, stream)`.",
        'store_part = "opgen_store_part_bf16"',
    ),
    "compute": Key(True, "The compute type (a `compute_types` entry) of the per-element math.", 'compute = "float"'),
    "wide_compute": Key(
        True,
        'The compute type of ops with `compute = "wide"`, wider than the storage type in precision and range.',
        'wide_compute = "double"',
    ),
    "accumulate": Key(True, "The compute type of every sum and of the per-channel math.", 'accumulate = "double"'),
    "mantissa_bits": Key(True, "Stored mantissa bits, for the tolerance arithmetic.", "mantissa_bits = 7"),
    "min_exponent": Key(True, "Smallest normal exponent, for the tolerance arithmetic.", "min_exponent = -126"),
    "line_writer": Key(
        False,
        "C type of a writer that stores an output's consecutive blocks as whole cache lines wherever the output "
        "starts (functions `<line_writer>_start`, `_put`, `_finish`).",
        'line_writer = "opgen_lines_bf16"',
    ),
    "line_writer_cheap": Key(
        False,
        "With `line_writer`: true when the writer costs about the instructions of the stores it replaces, so loops "
        "already short of issue slots use it too.",
        "line_writer_cheap = true",
    ),
    "acl_name": Key(
        False,
        "The dtype's `aclDataType` enumerator, for aclnn-compatible APIs (with `acl_value`).",
        'acl_name = "ACL_BF16"',
    ),
    "acl_value": Key(False, "That enumerator's value, 0..1023 (with `acl_name`).", "acl_value = 27"),
}
_COMPUTE_TYPE_KEYS = {
    "literal_suffix": Key(True, "Suffix of a number literal in this type (`f` for float).", 'literal_suffix = "f"'),
    "math_suffix": Key(True, "Suffix of libm functions in this type (`expf`, `sqrtf`).", 'math_suffix = "f"'),
}
# Sections of `math` each pattern takes.
_SECTIONS = {
    "along_axes": ("line", "elements", "across"),
    "elementwise": ("elements",),
    "binary": ("elements",),
    "broadcast_reduce": ("elements", "sums"),
    "reduce_then_apply": ("channel", "sums", "after", "elements"),
}
_SECTION_KEYS = {
    "across": Key(
        False,
        "along_axes: sums across the lines, one per position along a line (LayerNorm's diff_gamma): each entry "
        "`across_sum(term)`, the term reading what an element reads; each defines an output of kind `along`. "
        "Summed in the accumulation type, in an order fixed by the shape alone.",
        '[math.across]\ndiff_beta = "across_sum(diff_dst)"',
    ),
    "line": Key(
        False,
        "along_axes: the values of one line, in order, in the accumulation type: a reduction over the line's "
        "elements (`line_sum(term)`, `line_max(term)`, `line_min(term)`, `line_prod(term)`, a whole entry; the term "
        "reads tensor and along inputs, attributes, `count` and earlier line values) or an expression of line inputs, "
        "earlier line values, attributes and `count` (the elements per line; over a set of axes, every element "
        "reduced). Line outputs are defined here.",
        '[math.line]\nmax_src = "line_max(src)"\nsum_exp = "line_sum(exp(src - max_src))"',
    ),
    "channel": Key(
        False,
        "Per channel, before the sums, in the accumulation type; reads channel inputs and f32 attributes.",
        '[math.channel]\ninv_std = "1 / sqrt(variance + epsilon)"',
    ),
    "sums": Key(
        False,
        "Each entry is a sum over the elements of a channel (broadcast_reduce: over the elements that share an "
        "element of the channel input), in the accumulation type; reads tensor inputs, channel inputs and f32 "
        "attributes, not other sums. In broadcast_reduce every sum is a channel output.",
        '[math.sums]\ndiff_slope = "0 if src > 0 else src * diff_dst"',
    ),
    "after": Key(
        False,
        "Per channel, after the sums; reads channel inputs, attributes, `channel` and `sums` names and `count` (the "
        "elements summed per channel). Channel outputs of reduce_then_apply are defined here.",
        '[math.after]\nmean_diff_dst = "sum_diff_dst / count"',
    ),
    "elements": Key(
        False,
        "Per element, in the compute type; reads tensor and channel inputs, attributes and the `channel` and `after` "
        "names. Every tensor output is defined here.",
        '[math.elements]\ndiff_src = "diff_dst * alpha if 0 < alpha * src + beta < 1 else 0"',
    ),
}
_GIVEN = Key(True, "", "")  # a key every row must give (a dtype row names every tensor)
PATTERN_DOCS = {
    "along_axes": 'Lines along the axes an int attribute names (`role = "axis"`: one axis; `"begin_axis"`: '
    "from it to the last): `line` computes each line's values, reductions over the line among them (as few passes "
    "over the line as their order allows), then `elements` writes each element from its inputs and its line's "
    'values (SoftMax, LayerNorm). Or along any set of axes an int list names (`role = "axes"`, with a bool of '
    '`role = "keep_dims"`): then one reduction and the values computed from it, into line outputs (ReduceSum); '
    "axes that are not neighbours are reduced block by block and combined in a fixed order.",
    "elementwise": "Every output element computed from the same element of each input: tensor inputs and outputs only.",
    "binary": "Two inputs broadcast against each other by NumPy's rules (aligned at their last dims, each pair of "
    "dims equal or one of them 1: `(3, 1)` with `(1, 4)` gives `(3, 4)`, `(5,)` with `(2, 3, 5)` gives `(2, 3, 5)`), "
    "one output of the broadcast shape; `elements` computes an output element from the two input elements it meets. "
    "Exactly two inputs and one output, all of kind `tensor`; no f32 attributes. A string attribute with "
    '`role = "broadcast"` (`allowed` among `none` and `numpy`, oneDNN Graph\'s `auto_broadcast`) lets a call ask for '
    "equal shapes instead. Each variant's code is three small microkernels over one contiguous run of the output "
    "(both inputs contiguous; the first one element, repeated; the second repeated), and a hand-written driver "
    "(`opgen_binary.c`) coalesces the broadcast shape, picks the microkernel of its innermost dim and walks the other "
    "dims, split among threads; an element's result never depends on the thread count. The kernel API takes each "
    "input's rank and dims (`rank_0, dims_0, rank_1, dims_1`). (oneDNN Graph's Add, Subtract, Multiply, Divide, "
    "Maximum, Minimum, SquaredDifference.)",
    "broadcast_reduce": "One channel input broadcast along the reference (its `broadcast` forms); tensor outputs per "
    "element, and the channel outputs as sums over the elements each channel value met. Each variant's code is "
    "microkernels of one tile (NCX: a range of (row, channel) units; NXC: a range of rows, or of channels over every "
    "row) and the sums' rounding; a hand-written driver (`opgen_channels.c`) picks the threads and tiles and adds the "
    "tiles' sums in a fixed order, so they never depend on the thread count.",
    "reduce_then_apply": "Per-channel sums over the reference, then a per-element pass that reads them (BatchNorm "
    "backward): `channel`, then `sums`, then `after`, then `elements`. The same driver (`opgen_channels.c`) runs "
    "each variant's microkernels: NCX, both passes over a range of channels; NXC, a tile's sums, the channels' "
    "values, the element pass over a range of rows, or all three over a range of channels.",
}
# One worked `math` per pattern (docs/spec-language.md; tests/test_spec_docs.py loads each in
# place of the math of a bundled op of the pattern).
PATTERN_EXAMPLES = {
    "along_axes": """\
# soft_max: axis is an int attribute with role = "axis"
[math.line]
max_src = "line_max(src)"
sum_exp = "line_sum(exp(src - max_src))"

[math.elements]
dst = "exp(src - max_src) / sum_exp"
""",
    "binary": """\
# squared_difference: src_0 and src_1 broadcast against each other
[math.elements]
difference = "src_0 - src_1"
dst = "difference * difference"
""",
    "elementwise": """\
# sigmoid_backward: use_dst is a bool attribute, read as a condition
[math.elements]
decay = "exp(-abs(src_or_dst))"
diff_src = "diff_dst * src_or_dst * (1 - src_or_dst) if use_dst else diff_dst * decay / ((1 + decay) * (1 + decay))"
""",
    "broadcast_reduce": """\
# prelu_backward: slope is the channel input; diff_slope, a channel output like slope, is a sum
[math.elements]
diff_src = "diff_dst if src > 0 else slope * diff_dst"

[math.sums]
diff_slope = "0 if src > 0 else src * diff_dst"
""",
    "reduce_then_apply": """\
# batch_norm_training_backward: mean, variance, gamma are per-channel inputs
[math.channel]
inv_std = "1 / sqrt(variance + epsilon)"

[math.sums]
sum_diff_dst = "diff_dst"
sum_diff_dst_centered = "diff_dst * (src - mean)"

[math.after]
diff_beta = "sum_diff_dst"
diff_gamma = "sum_diff_dst_centered * inv_std"
scale = "gamma * inv_std"
mean_diff_dst = "sum_diff_dst / count"
centered_coefficient = "inv_std * inv_std * sum_diff_dst_centered / count"

[math.elements]
diff_src = "scale * (diff_dst - mean_diff_dst - (src - mean) * centered_coefficient)"
""",
}
FORM_DOCS = {
    "per_channel": "1-D of the channel length, along the layout's channel axis.",
    "per_tensor": "1-D of length 1.",
    "trailing": "The reference's shape without its first dim (TensorFlow's form).",
    "numpy": "The reference's rank, each dim 1 or equal to the reference's.",
    "single": "Exactly one element, in any shape.",
    "channel_count": "As many elements as the reference's dim 1, in any shape (1 when it has one dim or none); the "
    "gradient is 1-D `[C]`.",
    "to_reference": "(tensor inputs) Any shape that broadcasts to the reference by NumPy's rules.",
}


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as error:
        raise SpecError(f"{path}: not valid TOML: {error}") from None
    except OSError as error:
        raise SpecError(f"{path}: cannot read: {error.strerror}") from None


def load_dtype_table(path: Path) -> DTypeTable:
    data = read_toml(path)
    where = _Where(path)
    raw_compute = data.pop("compute_types", None)
    if not isinstance(raw_compute, dict) or not raw_compute:
        raise SpecError(f"{path}: compute_types: missing (a table per compute type)")
    compute_types = {}
    for name, row in raw_compute.items():
        key = f"compute_types.{name}"
        _check_keys(where, key, row, _COMPUTE_TYPE_KEYS)
        if name not in _COMPUTE_TYPES:
            where.fail(key, f"'{name}' is not a compute type the kernels support ({', '.join(_COMPUTE_TYPES)})")
        for suffix_key in ("literal_suffix", "math_suffix"):
            if row[suffix_key] not in _COMPUTE_TYPES[name]:
                where.fail(f"{key}.{suffix_key}", f"{name} spells it {_COMPUTE_TYPES[name][0]!r} in C")
        compute_types[name] = ComputeType(
            name,
            _string(where, f"{key}.literal_suffix", row["literal_suffix"]),
            _string(where, f"{key}.math_suffix", row["math_suffix"]),
        )
    dtypes = {}
    for name, row in data.items():
        _identifier(where, name, name)
        _check_keys(where, name, row, _DTYPE_KEYS)
        for key in ("compute", "wide_compute", "accumulate"):
            if row[key] not in compute_types:
                where.fail(f"{name}.{key}", f"'{row[key]}' is not in compute_types")
        for key in ("c_type", "load_block", "store_block", "load_part", "store_part", "line_writer"):
            if key in row and not _IDENTIFIER.fullmatch(_string(where, f"{name}.{key}", row[key])):
                where.fail(f"{name}.{key}", "must be a C identifier")
        for key in ("load", "store"):
            if not _CONVERSION.fullmatch(_string(where, f"{name}.{key}", row[key])):
                where.fail(f"{name}.{key}", "must be '{}' (the operand) or a C function of it, such as 'f({})'")
        _check_format(where, name, row)
        if "line_writer_cheap" in row:
            if not isinstance(row["line_writer_cheap"], bool):
                where.fail(f"{name}.line_writer_cheap", "must be true or false")
            if "line_writer" not in row:
                where.fail(f"{name}.line_writer_cheap", "goes with line_writer")
        if ("acl_name" in row) != ("acl_value" in row):
            where.fail(f"{name}.acl_name", "acl_name and acl_value go together")
        if "acl_name" in row:
            if not re.fullmatch(r"ACL_[A-Z0-9_]{1,40}", _string(where, f"{name}.acl_name", row["acl_name"])):
                where.fail(f"{name}.acl_name", "must be an aclDataType enumerator such as ACL_FLOAT")
            value = row["acl_value"]
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1024:
                where.fail(f"{name}.acl_value", "must be an integer in 0..1023")
        dtypes[name] = DType(name=name, **row)
    if not dtypes:
        raise SpecError(f"{path}: no dtypes")
    return DTypeTable(dtypes, compute_types)


def _check_format(where: _Where, name: str, row: dict[str, Any]) -> None:
    """`numpy` names a floating dtype whose format is the row's mantissa_bits and min_exponent."""
    import ml_dtypes

    dtype = _numpy_dtype(_string(where, f"{name}.numpy", row["numpy"]))
    if dtype is None:
        where.fail(f"{name}.numpy", f"'{row['numpy']}' is not a NumPy or ml_dtypes dtype name")
    try:
        info = ml_dtypes.finfo(dtype)
    except (TypeError, ValueError):
        where.fail(f"{name}.numpy", f"'{row['numpy']}' is not a floating-point dtype")
    for key, value in (("mantissa_bits", info.nmant), ("min_exponent", info.minexp)):
        if row[key] != value or isinstance(row[key], bool):
            where.fail(f"{name}.{key}", f"must be {value}, as in {row['numpy']}")


def _numpy_dtype(name: str) -> np.dtype | None:
    """The NumPy dtype of a dtype table's `numpy` name (ml_dtypes' names included), or None."""
    import ml_dtypes

    found = getattr(ml_dtypes, name, None) if re.fullmatch(r"[a-z][a-z0-9_]{0,30}", name) else None
    try:
        return np.dtype(found if found is not None else name)
    except TypeError:
        return None


def load_spec(path: Path, table: DTypeTable) -> OpSpec:
    return _SpecReader(path, table).read()


def spec_paths(directory: Path) -> dict[str, Path]:
    """Op name -> its spec file: every *.toml of `directory` but the dtype table (a spec's file
    is named after its op)."""
    return {path.stem: path for path in sorted(Path(directory).glob("*.toml")) if path.name != "dtypes.toml"}


def load_specs(directory: Path, ops: list[str] | None = None) -> tuple[DTypeTable, list[OpSpec]]:
    """The dtype table (dtypes.toml) and every other *.toml in `directory` (with `ops`, only
    those ops' files), sorted by op name. One SpecError names every broken spec, a line each."""
    table, specs, problems = scan_specs(directory, ops)
    if len(problems) == 1:
        raise SpecError(problems[0])
    if problems:
        raise SpecError(f"{len(problems)} specs in {directory} are broken:\n" + "\n".join(problems))
    return table, specs


def scan_specs(directory: Path, ops: list[str] | None = None) -> tuple[DTypeTable, list[OpSpec], list[str]]:
    """The dtype table, the specs of `directory` that load (with `ops`, of those ops only) and
    the problem of each that does not (`file: key: what is wrong`). A directory or dtype table
    that cannot be read is a SpecError: no spec loads without it."""
    directory = Path(directory)
    if not directory.is_dir():
        raise SpecError(f"{directory}: not a directory of specs")
    table_path = directory / "dtypes.toml"
    if not table_path.is_file():
        raise SpecError(f"{table_path}: missing (the dtype table)")
    table = load_dtype_table(table_path)
    paths = spec_paths(directory)
    if not paths:
        raise SpecError(f"{directory}: no op specs (*.toml besides dtypes.toml)")
    if ops is not None:
        unknown = [name for name in ops if name not in paths]
        if unknown:
            raise SpecError(f"--ops: no op named {', '.join(unknown)} (known: {', '.join(paths)})")
    wanted = list(paths) if ops is None else list(ops)
    specs: dict[str, OpSpec] = {}
    problems: list[str] = []
    tried: set[str] = set()
    while wanted:  # the asked-for ops, then the backward ops they name (their dependencies)
        name = wanted.pop(0)
        if name in tried or name not in paths:
            continue
        tried.add(name)
        try:
            spec = specs[name] = load_spec(paths[name], table)
        except SpecError as error:
            problems.append(str(error))
            continue
        if spec.backward is not None:
            wanted.append(spec.backward.op)
    for spec in specs.values():
        if spec.backward is not None:
            try:
                _check_backward(spec, specs)
            except SpecError as error:
                problems.append(str(error))
    return table, sorted(specs.values(), key=lambda s: s.name), problems


class _Where:
    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, message: str) -> NoReturn:
        raise SpecError(f"{self.path}: {key}: {message}")


def _check_keys(where: _Where, key: str, table: Any, allowed: Mapping[str, Key]) -> None:
    if not isinstance(table, dict):
        where.fail(key, "must be a table")
    for name in table:
        if name not in allowed:
            where.fail(f"{key}.{name}" if key else name, f"unknown key (allowed: {', '.join(allowed)})")
    for name, entry in allowed.items():
        if entry.required and name not in table:
            where.fail(f"{key}.{name}" if key else name, "missing")


def _string(where: _Where, key: str, value: Any) -> str:
    if not isinstance(value, str):
        where.fail(key, f"must be a string, not {type(value).__name__}")
    return value


def reserved(name: str, pattern: str | None = None) -> bool:
    """Whether a spec (of `pattern`, when given) may not take `name` (RESERVED_DOC): the
    generated C or Python uses it."""
    return (
        name in _RESERVED
        or name in _RESERVED_BY_PATTERN.get(pattern or "", ())
        or keyword.iskeyword(name)
        or name.startswith(_RESERVED_PREFIX)
        or name.endswith(_RESERVED_SUFFIXES)
    )


def _identifier(where: _Where, key: str, value: Any, pattern: str | None = None) -> str:
    name = _string(where, key, value)
    if not _IDENTIFIER.fullmatch(name):
        where.fail(key, f"'{name}' is not a C identifier (letters, digits, _; at most 63)")
    if name in _RESERVED or keyword.iskeyword(name) or name.startswith(_RESERVED_PREFIX):
        where.fail(key, f"'{name}' is reserved")
    if name in _RESERVED_BY_PATTERN.get(pattern or "", ()):
        where.fail(key, f"'{name}' is reserved in {pattern} ops (a variable of their generated C)")
    if name.endswith(_RESERVED_SUFFIXES):
        where.fail(key, f"'{name}' may not end in _value, _acc, _sums or _data (used by the generated C)")
    return name


class _SpecReader:
    def __init__(self, path: Path, table: DTypeTable) -> None:
        self.path = path
        self.table = table
        self.where = _Where(path)
        self.fail = self.where.fail

    def read(self) -> OpSpec:
        data = read_toml(self.path)
        _check_keys(self.where, "", data, _TOP_KEYS)
        op = data["op"]
        _check_keys(self.where, "op", op, _OP_KEYS)
        name = _identifier(self.where, "op.name", op["name"])
        if self.path.stem != name:
            self.fail("op.name", f"'{name}' must match the file name '{self.path.stem}'")
        pattern = _string(self.where, "op.pattern", op["pattern"])
        if pattern not in PATTERNS:
            self.fail("op.pattern", f"'{pattern}' is not one of {', '.join(PATTERNS)}")
        self.pattern = pattern  # the tensor kinds it takes
        compute = op.get("compute", "normal")
        if compute not in ("normal", "wide"):
            self.fail("op.compute", f"'{compute}' is not 'normal' or 'wide'")

        attributes = self._attributes(data.get("attributes", []))
        flags = self._flags(data.get("flags", []))
        inputs = self._tensors(data["inputs"], "inputs", _INPUT_KEYS)
        outputs = self._tensors(data["outputs"], "outputs", _OUTPUT_KEYS)
        self._unique([*attributes, *flags, *inputs, *outputs])
        spec = OpSpec(
            name=name,
            summary=_string(self.where, "op.summary", op["summary"]),
            source=_string(self.where, "op.source", op["source"]),
            pattern=pattern,
            compute=compute,
            reference=self._reference(op, inputs),
            layout=self._layout(op, pattern, attributes),
            min_rank=self._rank(op, "min_rank", 0),
            max_rank=self._rank(op, "max_rank", None),
            edge_values=self._edge_values(op, pattern),
            attributes=attributes,
            inputs=inputs,
            outputs=outputs,
            flags=flags,
            dtypes=self._dtype_rows(data["dtypes"], inputs, outputs),
            math=self._math_sections(data["math"], pattern),
            path=str(self.path),
        )
        self._check_roles(spec)
        specialized = self._check_math(spec)
        self._check_attributes_read(spec)
        self._check_examples_and_domains(spec)
        return OpSpec(
            **{
                **spec.__dict__,
                "specialized": specialized,
                "aclnn": self._aclnn(op, spec),
                "accuracy": self._accuracy(data.get("accuracy", {}), spec),
                "backward": self._backward(data.get("backward"), spec),
            }
        )

    def _backward(self, raw: Any, spec: OpSpec) -> Backward | None:
        """The [backward] table's own rules; the backward op it names is checked in load_specs."""
        if raw is None:
            return None
        _check_keys(self.where, "backward", raw, _BACKWARD_KEYS)
        op = _string(self.where, "backward.op", raw["op"])
        if op == spec.name:
            self.fail("backward.op", "an op cannot be its own backward op")
        tensors = {t.name: "input" for t in spec.inputs} | {t.name: "output" for t in spec.outputs}
        inputs = []
        for name, source in self._table(raw["inputs"], "backward.inputs").items():
            source = _string(self.where, f"backward.inputs.{name}", source)
            gradient = _GRADIENT_SOURCE.fullmatch(source)
            if gradient and gradient[1] in {t.name for t in spec.outputs}:
                inputs.append((name, "gradient", gradient[1]))
            elif source in tensors:
                inputs.append((name, tensors[source], source))
            else:
                self.fail(
                    f"backward.inputs.{name}",
                    f"'{source}' is not an input or output of {spec.name}, nor grad(<output>)",
                )
        attributes: list[tuple[str, str, Any]] = []
        own = {a.name for a in spec.attributes}
        for name, value in self._table(raw.get("attributes", {}), "backward.attributes").items():
            if isinstance(value, str):
                if value not in own:
                    self.fail(f"backward.attributes.{name}", f"'{value}' is not an attribute of {spec.name}")
                attributes.append((name, "attribute", value))
            elif isinstance(value, (bool, int, float)):
                attributes.append((name, "constant", value))
            else:
                self.fail(f"backward.attributes.{name}", "must be an attribute's name, a bool or a number")
        gradients = []
        for name, output in self._table(raw["gradients"], "backward.gradients").items():
            if name not in {t.name for t in spec.inputs}:
                self.fail(f"backward.gradients.{name}", f"'{name}' is not an input of {spec.name}")
            gradients.append((name, _string(self.where, f"backward.gradients.{name}", output)))
        if not gradients:
            self.fail("backward.gradients", "at least one input's gradient is needed")
        return Backward(op, tuple(inputs), tuple(attributes), tuple(gradients))

    def _table(self, value: Any, key: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(key, "must be a table")
        return value

    def _aclnn(self, op: dict[str, Any], spec: OpSpec) -> str | None:
        name = op.get("aclnn")
        if name is None:
            return None
        if not isinstance(name, str) or not re.fullmatch(r"[A-Z][A-Za-z0-9]{0,62}", name):
            self.fail("op.aclnn", "must be a CamelCase name such as PreluBackward (the API is aclnn<name>)")
        if spec.attributes or spec.flags or spec.layout_attribute:
            self.fail("op.aclnn", "an aclnn-compatible op takes tensors only (no attributes or flags)")
        for row in spec.dtypes:
            for tensor, dtype in row.items():
                if self.table.dtypes[dtype].acl_name is None:
                    self.fail("op.aclnn", f"dtype {dtype} (of {tensor}) has no acl_name in the dtype table")
        return name

    # --- tables -----------------------------------------------------------------

    def _list_of_tables(self, value: Any, key: str) -> list[dict[str, Any]]:
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            self.fail(key, "must be an array of tables ([[...]])")
        return value

    def _attributes(self, raw: Any) -> tuple[Attribute, ...]:
        result = []
        for index, table in enumerate(self._list_of_tables(raw, "attributes")):
            key = f"attributes[{index}]"
            _check_keys(self.where, key, table, _ATTRIBUTE_KEYS)
            name = _identifier(self.where, f"{key}.name", table["name"], self.pattern)
            key = f"attributes.{name}"
            kind = table["type"]
            if kind not in ATTRIBUTE_TYPES:
                self.fail(f"{key}.type", f"'{kind}' is not one of {', '.join(ATTRIBUTE_TYPES)}")
            allowed = table.get("allowed", [])
            if allowed and (kind != "string" or not all(isinstance(v, str) for v in allowed)):
                self.fail(f"{key}.allowed", "only string attributes take a list of allowed strings")
            if kind == "string" and not allowed:
                self.fail(f"{key}.allowed", "a string attribute needs its list of allowed values")
            for value in allowed:
                if not _ENUM_VALUE.fullmatch(value):
                    self.fail(
                        f"{key}.allowed",
                        f"{value!r} is not a valid value: a letter, then letters, digits or _, at most 63 "
                        "(values become C enumerators)",
                    )
            upper = [value.upper() for value in allowed]
            if len(set(upper)) != len(upper):
                self.fail(f"{key}.allowed", "values must differ in more than letter case (they become C enumerators)")
            minimum = table.get("minimum_exclusive")
            if minimum is not None and (kind != "f32" or not isinstance(minimum, (int, float))):
                self.fail(f"{key}.minimum_exclusive", "only f32 attributes take a numeric minimum")
            role = table.get("role")
            if role is not None and not (
                (role in ("layout", "broadcast") and kind == "string")
                or (role in AXIS_ROLES and kind == "int")
                or (role == AXES_ROLE and kind == "int list")
                or (role == KEEP_DIMS_ROLE and kind == "bool")
            ):
                self.fail(
                    f"{key}.role",
                    "roles are 'layout' and 'broadcast' (a string attribute), 'axis' or 'begin_axis' (an int "
                    "attribute), 'axes' (an int list attribute) and 'keep_dims' (a bool attribute)",
                )
            if kind == "int" and role not in AXIS_ROLES:
                self.fail(f"{key}.role", "an int attribute names axes: its role is 'axis' or 'begin_axis'")
            if kind == "int list" and role != AXES_ROLE:
                self.fail(f"{key}.role", "an int list attribute names a set of axes: its role is 'axes'")
            if role == "layout" and not set(allowed) <= set(LAYOUTS):
                self.fail(f"{key}.allowed", f"layouts must be among {', '.join(LAYOUTS)}")
            if role == "broadcast" and not set(allowed) <= set(BROADCAST_RULES):
                self.fail(f"{key}.allowed", f"broadcast rules must be among {', '.join(BROADCAST_RULES)}")
            attribute = Attribute(
                name=name,
                type=kind,
                doc=_string(self.where, f"{key}.doc", table["doc"]),
                default=table.get("default"),
                required="default" not in table,
                allowed=tuple(allowed),
                minimum_exclusive=minimum,
                role=role,
                example=table.get("example"),
            )
            if "default" in table:
                problem = check_attribute_value(attribute, attribute.default)
                if problem:
                    self.fail(f"{key}.default", problem)
            result.append(attribute)
        return tuple(result)

    def _flags(self, raw: Any) -> tuple[Flag, ...]:
        result = []
        for index, table in enumerate(self._list_of_tables(raw, "flags")):
            _check_keys(self.where, f"flags[{index}]", table, _FLAG_KEYS)
            name = _identifier(self.where, f"flags[{index}].name", table["name"], self.pattern)
            result.append(
                Flag(
                    name,
                    _string(self.where, f"flags.{name}.doc", table["doc"]),
                    _string(self.where, f"flags.{name}.default_if_given", table["default_if_given"]),
                )
            )
        return tuple(result)

    def _tensors(self, raw: Any, section: str, allowed: Mapping[str, Key]) -> tuple[Tensor, ...]:
        result = []
        tables = self._list_of_tables(raw, section)
        if not tables:
            self.fail(section, "at least one is needed")
        for index, table in enumerate(tables):
            _check_keys(self.where, f"{section}[{index}]", table, allowed)
            name = _identifier(self.where, f"{section}[{index}].name", table["name"], self.pattern)
            key = f"{section}.{name}"
            kind = table.get("kind", "tensor")
            kinds = TENSOR_KINDS[self.pattern]
            if kind not in kinds:
                self.fail(f"{key}.kind", f"'{kind}' is not one of {', '.join(kinds)} (pattern {self.pattern})")
            broadcast = table.get("broadcast", [])
            forms = CHANNEL_FORMS if kind == "channel" else TENSOR_FORMS
            if not isinstance(broadcast, list) or any(form not in forms for form in broadcast):
                self.fail(f"{key}.broadcast", f"must be a list of forms among {', '.join(forms)}")
            if len(set(broadcast)) != len(broadcast):
                self.fail(f"{key}.broadcast", "a form is listed twice")
            if kind == "channel" and section == "inputs" and not broadcast:
                self.fail(f"{key}.broadcast", "a channel input needs at least one broadcast form")
            optional = table.get("optional", False)
            if not isinstance(optional, bool):
                self.fail(f"{key}.optional", "must be true or false")
            default = table.get("default")
            if optional and (kind not in ("channel", "along") or not isinstance(default, (int, float))):
                self.fail(
                    f"{key}.default", "an optional input must be a channel (or along) input with a numeric default"
                )
            if default is not None and not optional:
                self.fail(f"{key}.default", "only optional inputs take a default")
            if default is not None:
                problem = expr.literal_problem(float(default))  # the kernels' C holds it as a literal
                if problem:
                    self.fail(f"{key}.default", problem)
            requested_by = table.get("requested_by")
            result.append(
                Tensor(
                    name=name,
                    doc=_string(self.where, f"{key}.doc", table["doc"]),
                    kind=kind,
                    optional=optional or requested_by is not None,
                    default=None if default is None else float(default),
                    ignored_unless=table.get("ignored_unless"),
                    broadcast=tuple(broadcast),
                    like=table.get("like"),
                    requested_by=requested_by,
                    domain=table.get("domain"),
                )
            )
        return tuple(result)

    def _unique(self, items: list[Any]) -> None:
        seen: set[str] = set()
        for item in items:
            if item.name in seen:
                self.fail(
                    item.name, "the name is used twice (inputs, outputs, attributes and flags share one namespace)"
                )
            seen.add(item.name)

    def _reference(self, op: dict[str, Any], inputs: tuple[Tensor, ...]) -> str:
        tensors = [t.name for t in inputs if t.kind == "tensor"]
        if not tensors:
            self.fail("inputs", "at least one input of kind 'tensor' is needed")
        reference = op.get("reference", tensors[0])
        if reference not in tensors:
            self.fail("op.reference", f"'{reference}' is not a tensor input")
        if next(t for t in inputs if t.name == reference).broadcast:
            self.fail("op.reference", f"the reference '{reference}' cannot itself broadcast")
        return cast(str, reference)  # one of `tensors`

    def _layout(self, op: dict[str, Any], pattern: str, attributes: tuple[Attribute, ...]) -> str | None:
        from_attribute = [a for a in attributes if a.role == "layout"]
        fixed = op.get("layout")
        if fixed is not None and fixed not in LAYOUTS:
            self.fail("op.layout", f"'{fixed}' is not one of {', '.join(LAYOUTS)}")
        if fixed is not None and from_attribute:
            self.fail("op.layout", "give a fixed layout or a layout attribute, not both")
        if len(from_attribute) > 1:
            self.fail("attributes", "at most one attribute has role 'layout'")
        if pattern in ("elementwise", "along_axes", "binary") and (fixed or from_attribute):
            self.fail("op.layout", f"a {pattern} op does not depend on the layout")
        if pattern not in ("elementwise", "along_axes", "binary") and not (fixed or from_attribute):
            self.fail("op.layout", f"pattern {pattern} needs a layout (op.layout or an attribute with role 'layout')")
        return fixed

    def _edge_values(self, op: dict[str, Any], pattern: str) -> str:
        value = op.get("edge_values", "finite" if pattern == "reduce_then_apply" else "all")
        if value not in ("all", "finite"):
            self.fail("op.edge_values", f"{value!r} is not 'all' or 'finite'")
        return str(value)

    @overload
    def _rank(self, op: dict[str, Any], key: str, default: int) -> int: ...
    @overload
    def _rank(self, op: dict[str, Any], key: str, default: None) -> int | None: ...
    def _rank(self, op: dict[str, Any], key: str, default: int | None) -> int | None:
        value = op.get(key, default)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_RANK):
            self.fail(f"op.{key}", f"must be an integer in 0..{MAX_RANK} (the dims a C descriptor holds)")
        return value

    def _dtype_rows(
        self, raw: Any, inputs: tuple[Tensor, ...], outputs: tuple[Tensor, ...]
    ) -> tuple[dict[str, str], ...]:
        names = [t.name for t in (*inputs, *outputs)]
        rows = []
        for index, row in enumerate(self._list_of_tables(raw, "dtypes")):
            key = f"dtypes[{index}]"
            _check_keys(self.where, key, row, dict.fromkeys(names, _GIVEN))
            for name, dtype in row.items():
                if dtype not in self.table.dtypes:
                    self.fail(f"{key}.{name}", f"'{dtype}' is not in the dtype table ({', '.join(self.table.dtypes)})")
            ordered = {name: row[name] for name in names}
            if ordered in rows:
                self.fail(key, "the same combination is listed twice")
            rows.append(ordered)
        if not rows:
            self.fail("dtypes", "at least one dtype combination is needed")
        return tuple(rows)

    def _math_sections(self, raw: Any, pattern: str) -> dict[str, tuple[expr.Entry, ...]]:
        """Every entry parsed, the only time its text is: a reduction may be a whole entry of
        math.line or math.across only (their checks say which)."""
        _check_keys(self.where, "math", raw, {name: _SECTION_KEYS[name] for name in _SECTIONS[pattern]})
        sections = {}
        for section in _SECTIONS[pattern]:
            table = raw.get(section, {})
            if not isinstance(table, dict):
                self.fail(f"math.{section}", 'must be a table of name = "expression"')
            entries = []
            for name, text in table.items():
                key = f"math.{section}.{name}"
                _identifier(self.where, key, name, self.pattern)
                _string(self.where, key, text)
                try:
                    entries.append(expr.parse_entry(name, text, reduction_allowed=section in ("line", "across")))
                except expr.ExprError as error:
                    self.fail(key, str(error))
            sections[section] = tuple(entries)
        return sections

    # --- cross-field rules ---------------------------------------------------------

    def _check_roles(self, spec: OpSpec) -> None:
        flags = {f.name for f in spec.flags}
        inputs = {t.name: t for t in spec.inputs}
        channel_inputs = [t for t in spec.inputs if t.kind == "channel"]
        for flag in spec.flags:
            if flag.default_if_given not in inputs or not inputs[flag.default_if_given].optional:
                self.fail(f"flags.{flag.name}.default_if_given", f"'{flag.default_if_given}' is not an optional input")
        for tensor in spec.inputs:
            if tensor.ignored_unless is not None and tensor.ignored_unless not in flags:
                self.fail(f"inputs.{tensor.name}.ignored_unless", f"'{tensor.ignored_unless}' is not a flag")
        for tensor in spec.outputs:
            key = f"outputs.{tensor.name}"
            if tensor.requested_by is not None and tensor.requested_by not in flags:
                self.fail(f"{key}.requested_by", f"'{tensor.requested_by}' is not a flag")
            if tensor.kind == "channel":
                if tensor.like not in {t.name for t in channel_inputs}:
                    self.fail(f"{key}.like", "a channel output names the channel input whose shape it takes")
                assert tensor.like is not None  # checked just above
                if inputs[tensor.like].optional:
                    self.fail(
                        f"{key}.like",
                        f"'{tensor.like}' is optional: an output takes its shape from a required channel input",
                    )
            elif tensor.like is not None:
                self.fail(f"{key}.like", "only channel outputs take 'like'")
        if spec.pattern == "elementwise" and (channel_inputs or any(t.kind == "channel" for t in spec.outputs)):
            self.fail("inputs", "an elementwise op has only tensor inputs and outputs")
        if spec.pattern == "broadcast_reduce" and len(channel_inputs) != 1:
            self.fail("inputs", "pattern broadcast_reduce needs exactly one channel (broadcast) input")
        if spec.pattern == "reduce_then_apply":
            if not any(t.kind == "tensor" for t in spec.outputs):
                self.fail("outputs", "pattern reduce_then_apply needs a tensor output (its element pass writes it)")
            for tensor in channel_inputs:
                if tensor.broadcast != ("per_channel",):
                    self.fail(
                        f"inputs.{tensor.name}.broadcast", "pattern reduce_then_apply takes per_channel inputs only"
                    )
        for tensor in spec.inputs:
            if tensor.kind in ("tensor", "line") and tensor.optional:
                self.fail(f"inputs.{tensor.name}.optional", f"a {tensor.kind} input cannot be optional")
        axes = [a for a in spec.attributes if a.role in AXIS_ROLES or a.role == AXES_ROLE]
        if spec.pattern == "along_axes" and len(axes) != 1:
            self.fail(
                "attributes",
                "pattern along_axes needs one attribute naming its axes: an int with role 'axis' or 'begin_axis', "
                "or an int list with role 'axes'",
            )
        if spec.pattern != "along_axes" and axes:
            self.fail(f"attributes.{axes[0].name}.role", "only along_axes ops take an axis attribute")
        keep = [a for a in spec.attributes if a.role == KEEP_DIMS_ROLE]
        if len(keep) > 1:
            self.fail(f"attributes.{keep[1].name}.role", "at most one attribute has role 'keep_dims'")
        if keep and not (axes and axes[0].role == AXES_ROLE):
            self.fail(f"attributes.{keep[0].name}.role", "'keep_dims' goes with an int list attribute of role 'axes'")
        if axes and axes[0].role == AXES_ROLE:
            self._check_axes_op(spec)
        broadcast = [a for a in spec.attributes if a.role == "broadcast"]
        if spec.pattern != "binary" and broadcast:
            self.fail(f"attributes.{broadcast[0].name}.role", "only binary ops take a broadcast attribute")
        if len(broadcast) > 1:
            self.fail("attributes", "at most one attribute has role 'broadcast'")
        if spec.pattern == "binary":
            self._check_binary(spec)
        if spec.pattern == "along_axes" and spec.min_rank < 1:
            self.fail("op.min_rank", "an along_axes op needs at least 1 dim (an axis to run along)")

    def _check_axes_op(self, spec: OpSpec) -> None:
        """An op over any set of axes (an int list of role 'axes') is a reduction: the driver
        combines the partial reductions of axes that are not neighbours, so its outputs are line
        outputs and its math.line is one reduction (first), then values computed from it."""
        for tensor in spec.inputs:
            if tensor.kind != "tensor":
                self.fail(f"inputs.{tensor.name}.kind", "an op whose axes are an int list takes tensor inputs only")
        for tensor in spec.outputs:
            if tensor.kind != "line":
                self.fail(f"outputs.{tensor.name}.kind", "an op whose axes are an int list has line outputs only")
        entries = spec.math.get("line", ())
        reductions = [e.name for e in entries if e.reduction is not None]
        if len(reductions) != 1 or entries[0].reduction is None:
            self.fail(
                "math.line",
                "an op whose axes are an int list has one reduction, its first entry (the driver combines the "
                f"reductions of blocks of axes); found {len(reductions)}",
            )

    def _check_binary(self, spec: OpSpec) -> None:
        """binary: two tensor inputs broadcast against each other, one output of their broadcast
        shape; the microkernels read no numbers (bool attributes are fixed per variant)."""
        if len(spec.inputs) != 2:
            self.fail("inputs", "pattern binary takes exactly two inputs (broadcast against each other)")
        if len(spec.outputs) != 1:
            self.fail("outputs", "pattern binary has exactly one output (of the inputs' broadcast shape)")
        for attribute in spec.attributes:
            if attribute.type == "f32":
                self.fail(f"attributes.{attribute.name}.type", "a binary op takes no f32 attribute")

    def _check_math(self, spec: OpSpec) -> tuple[str, ...]:
        """Check every expression against the names its section may read; return specialized attributes."""
        if spec.pattern == "along_axes":
            return self._check_line_math(spec)
        tensors = [t.name for t in spec.inputs if t.kind == "tensor"]
        channels = [t.name for t in spec.inputs if t.kind == "channel"]
        numbers = [a.name for a in spec.attributes if a.type == "f32"]
        booleans = [a.name for a in spec.attributes if a.type == "bool"]
        defined: dict[str, list[str]] = {section: [e.name for e in spec.math[section]] for section in spec.math}
        readable = {
            "channel": channels + numbers,
            "sums": tensors + channels + numbers,
            "after": channels + numbers + defined.get("channel", []) + defined.get("sums", []) + ["count"],
            "elements": tensors + channels + numbers + defined.get("channel", []) + defined.get("after", []),
        }
        used_booleans: set[str] = set()
        seen: set[str] = set()
        for section, entries in spec.math.items():
            local: list[str] = []
            for entry in entries:
                name, tree = entry.name, entry.tree
                key = f"math.{section}.{name}"
                if name in seen:
                    self.fail(key, "defined twice in math")
                seen.add(name)
                if name in {t.name for t in spec.inputs} or name in numbers + booleans:
                    self.fail(key, f"'{name}' is an input or attribute; math defines new names only")
                allowed = set(readable[section]) | set(booleans) | (set() if section == "sums" else set(local))
                for used in expr.names(tree):
                    if used not in allowed:
                        self.fail(key, f"unknown name '{used}' (this section may read: {', '.join(sorted(allowed))})")
                # the names known, check their kinds: bool attributes are conditions, the rest numbers
                self._kinds(key, tree, booleans)
                used_booleans |= expr.names(tree) & set(booleans)
                local.append(name)
        self._check_outputs_defined(spec, defined)
        return tuple(a for a in booleans if a in used_booleans)

    def _check_line_math(self, spec: OpSpec) -> tuple[str, ...]:
        """along_axes: `math.line` in order (reductions whole entries), then `math.elements`."""
        per_element = [t.name for t in spec.inputs if t.kind in ("tensor", "along")]
        lines = [t.name for t in spec.inputs if t.kind == "line"]
        numbers = [a.name for a in spec.attributes if a.type == "f32"] + ["count"]
        booleans = [a.name for a in spec.attributes if a.type == "bool"]
        inputs = {t.name for t in spec.inputs}
        used_booleans: set[str] = set()
        seen: set[str] = set()
        line_names: set[str] = set()
        for section in ("line", "elements", "across"):
            for entry in spec.math[section]:
                name, reduction, tree = entry.name, entry.reduction, entry.tree
                key = f"math.{section}.{name}"
                if name in seen:
                    self.fail(key, "defined twice in math")
                if name in inputs or name in numbers + booleans:
                    self.fail(key, f"'{name}' is an input, an attribute or count; math defines new names only")
                if section == "across" and reduction != "across_sum":
                    self.fail(key, "each entry of math.across is across_sum(term), a sum across the lines")
                if section == "line" and reduction == "across_sum":
                    self.fail(key, "across_sum(...) goes in math.across (a sum across lines, per position)")
                if section == "across":  # the terms of the element pass: not its temporaries
                    allowed = set(per_element) | set(lines) | line_names
                elif section == "elements" or reduction is not None:
                    allowed = set(per_element) | set(lines) | seen
                else:  # a line value: per line, no element read outside a reduction
                    allowed = set(lines) | seen
                allowed |= set(numbers) | set(booleans)
                for used in expr.names(tree):
                    if used not in allowed:
                        hint = ""
                        if used in per_element:
                            hint = (
                                " (an element is read inside a reduction: line_sum(...), line_max(...), "
                                "line_min(...), line_prod(...))"
                            )
                        self.fail(
                            key, f"unknown name '{used}'{hint} (this entry may read: {', '.join(sorted(allowed))})"
                        )
                self._kinds(key, tree, booleans)
                used_booleans |= expr.names(tree) & set(booleans)
                seen.add(name)
                if section == "line":
                    line_names.add(name)
        values = len(lines) + len(spec.math["line"])
        if values > MAX_LINE_VALUES:
            self.fail("math.line", f"{values} line values (line inputs and entries); at most {MAX_LINE_VALUES}")
        defined = {section: [e.name for e in spec.math[section]] for section in spec.math}
        self._check_outputs_defined(spec, defined)
        return tuple(a for a in booleans if a in used_booleans)

    def _check_examples_and_domains(self, spec: OpSpec) -> None:
        for attribute in spec.attributes:
            if attribute.example is not None:
                problem = check_attribute_value(attribute, attribute.example)
                if problem:
                    self.fail(f"attributes.{attribute.name}.example", problem)
        for tensor in spec.inputs:
            if tensor.domain is not None and tensor.domain not in DOMAINS:
                self.fail(f"inputs.{tensor.name}.domain", f"{tensor.domain!r} is not one of {', '.join(DOMAINS)}")

    def _accuracy(self, raw: Any, spec: OpSpec) -> dict[str, str | None]:
        """Each output's contract: the one stated in [accuracy], else the pattern's default."""
        if not isinstance(raw, dict):
            self.fail("accuracy", 'must be a table of output = "contract"')
        outputs = [t.name for t in spec.outputs]
        for name, contract in raw.items():
            key = f"accuracy.{name}"
            if name not in outputs:
                self.fail(key, f"'{name}' is not an output (outputs: {', '.join(outputs)})")
            if not isinstance(contract, str):
                self.fail(key, f"must be a string, not {type(contract).__name__}")
            function = contract.removeprefix("oracle:")
            if contract.startswith("oracle:"):
                if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", function) or keyword.iskeyword(function):
                    self.fail(key, f"'{function}' is not a Python function name (oracle:<function>)")
            elif contract not in ACCURACY:
                self.fail(key, f"{contract!r} is not one of exact, ulp, sum, oracle:<function>")
            if contract == "sum" and sum_behind(spec, name) is None:
                self.fail(
                    key,
                    "'sum' is the contract of an output that is one sum (a channel output of "
                    "broadcast_reduce; in reduce_then_apply, one whose math.after is a sum's name)",
                )
        return {name: raw.get(name, default_accuracy(spec, name)) for name in outputs}

    def _check_attributes_read(self, spec: OpSpec) -> None:
        """A string attribute changes what the op computes only as the layout (role = 'layout'):
        the math cannot read strings, so any other would be taken from callers and ignored."""
        for attribute in spec.attributes:
            if attribute.type == "string" and attribute.role not in ("layout", "broadcast"):
                self.fail(
                    f"attributes.{attribute.name}",
                    "the math cannot read a string attribute, so it would change nothing "
                    "(a string attribute is the layout, with role = 'layout', or a binary op's broadcast rule, "
                    "with role = 'broadcast')",
                )

    def _kinds(self, key: str, tree: ast.expr, conditions: list[str]) -> None:
        try:
            expr.check_kinds(tree, conditions)
        except expr.ExprError as error:
            self.fail(key, str(error))

    def _check_outputs_defined(self, spec: OpSpec, defined: dict[str, list[str]]) -> None:
        channel_section = {"broadcast_reduce": "sums", "reduce_then_apply": "after", "along_axes": "line"}.get(
            spec.pattern
        )
        for tensor in spec.outputs:
            section = "elements" if tensor.kind == "tensor" else "across" if tensor.kind == "along" else channel_section
            if section is None or tensor.name not in defined.get(section, []):
                self.fail(f"math.{section or 'elements'}", f"output '{tensor.name}' is not defined here")
        for name in defined.get("across", []):
            if spec.tensor_kind(name) != "along":
                self.fail(f"math.across.{name}", "each sum across lines is an output of kind 'along'")
        if spec.pattern == "broadcast_reduce":
            outputs = {t.name for t in spec.outputs}
            for name in defined["sums"]:
                if name not in outputs:
                    self.fail(f"math.sums.{name}", "in broadcast_reduce every sum is a channel output")


def sum_behind(spec: OpSpec, output: str) -> str | None:
    """The sum an output is, or None: a broadcast_reduce channel output is its own sum; a
    reduce_then_apply channel output is the sum its `after` expression names alone."""
    tensor = spec.tensor(output)
    if tensor.kind != "channel":
        return None
    if spec.pattern == "broadcast_reduce":
        return output
    after = {e.name: e.text for e in spec.math.get("after", ())}
    sums = {e.name for e in spec.math.get("sums", ())}
    text = after.get(output, "").strip()
    return text if text in sums else None


def default_accuracy(spec: OpSpec, output: str) -> str | None:
    """The contract an output has when its spec states none: the sum bound for an output that
    is a sum; 1 ulp for an output no sum precedes (elementwise ops, the elements of
    broadcast_reduce: README, "Accuracy"); else None (reduce_then_apply's outputs computed
    from its sums: not stated, so `opgen check` asks for it)."""
    if sum_behind(spec, output) is not None:
        return "sum"
    if spec.pattern in ("elementwise", "broadcast_reduce", "binary") and spec.tensor(output).kind == "tensor":
        return "ulp"
    return None


def _check_backward(spec: OpSpec, specs: dict[str, OpSpec]) -> None:
    """The [backward] table of `spec` against the op it names: every name exists, every
    required input and attribute is given, and each dtype row of `spec` maps to a row of the
    backward op whose gradients have the dtypes of the inputs they belong to."""
    where = _Where(Path(spec.path))
    pairing = spec.backward
    assert pairing is not None
    backward = specs.get(pairing.op)
    if backward is None:
        where.fail("backward.op", f"'{pairing.op}' is not an op of this spec directory")
    inputs = {t.name: t for t in backward.inputs}
    for name, _, _ in pairing.inputs:
        if name not in inputs:
            where.fail(f"backward.inputs.{name}", f"'{name}' is not an input of {backward.name}")
    given = {name for name, _, _ in pairing.inputs}
    for tensor in backward.inputs:
        if not tensor.optional and tensor.name not in given:
            where.fail("backward.inputs", f"{backward.name}'s input '{tensor.name}' is not given")
    _check_backward_attributes(where, spec, backward)
    outputs = {t.name for t in backward.outputs}
    for name, output in pairing.gradients:
        if output not in outputs:
            where.fail(f"backward.gradients.{name}", f"'{output}' is not an output of {backward.name}")
    for index, row in enumerate(spec.dtypes):
        wanted = {name: row[source] for name, _, source in pairing.inputs}
        found = [r for r in backward.dtypes if all(r[n] == d for n, d in wanted.items())]
        if not found:
            where.fail(f"dtypes[{index}]", f"{backward.name} has no dtype row with {wanted}")
        for name, output in pairing.gradients:
            if all(r[output] != row[name] for r in found):
                where.fail(
                    f"backward.gradients.{name}", f"{backward.name} gives {output} in another dtype than {name}'s"
                )


def _check_backward_attributes(where: _Where, spec: OpSpec, backward: OpSpec) -> None:
    assert spec.backward is not None
    attributes = {a.name: a for a in backward.attributes}
    own = {a.name: a for a in spec.attributes}
    for name, kind, value in spec.backward.attributes:
        key = f"backward.attributes.{name}"
        if name not in attributes:
            where.fail(key, f"'{name}' is not an attribute of {backward.name}")
        target = attributes[name]
        if kind == "constant":
            problem = check_attribute_value(target, value)
            if problem:
                where.fail(key, problem)
        elif (own[value].type, own[value].allowed) != (target.type, target.allowed) and not (
            target.type == "string" and set(own[value].allowed) <= set(target.allowed)
        ):
            where.fail(key, f"'{value}' ({own[value].type}) does not fit {backward.name}'s {name} ({target.type})")
    given = {name for name, _, _ in spec.backward.attributes}
    for attribute in backward.attributes:
        if attribute.required and attribute.name not in given:
            where.fail("backward.attributes", f"{backward.name}'s attribute '{attribute.name}' is not given")


def check_attribute_value(attribute: Attribute, value: Any) -> str | None:
    """Why `value` is not valid for `attribute`, or None. NumPy scalars count as their kind."""
    if attribute.type == "bool":
        return None if isinstance(value, (bool, np.bool_)) else f"must be True or False, not {value!r}"
    if attribute.type == "string":
        if not isinstance(value, str) or value not in attribute.allowed:
            return f"must be one of {', '.join(repr(v) for v in attribute.allowed)}, not {value!r}"
        return None
    if attribute.type == "int list":
        return int_list_problem(value)
    if attribute.type == "int":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
            return f"must be an integer (an axis), not {type(value).__name__}"
        if not -MAX_RANK <= int(value) < MAX_RANK:
            return f"must be an axis in -{MAX_RANK}..{MAX_RANK - 1} (negative: from the last), not {value!r}"
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return f"must be a number (f32), not {type(value).__name__}"
    try:
        number = float(value)
    except OverflowError:  # an int beyond double's range
        number = None
    if number is not None and not math.isfinite(number):
        return f"must be a finite number, not {value!r}"
    if number is None or abs(number) >= _F32_OVERFLOW:
        shown = repr(value) if len(repr(value)) <= 40 else f"an int of {len(str(abs(int(cast(int, value)))))} digits"
        return f"{shown} is outside the f32 range (it would round to infinity)"
    if attribute.minimum_exclusive is not None:
        as_f32 = float(np.float32(number))  # what the kernels get
        if not as_f32 > attribute.minimum_exclusive:
            rounded = f" ({as_f32!r} in f32)" if as_f32 != number else ""
            return f"must be greater than {attribute.minimum_exclusive} as an f32, not {value!r}{rounded}"
    return None


def int_list_problem(value: Any) -> str | None:
    """Why `value` is not a list of axes (a list or tuple of distinct ints, each in
    -MAX_RANK..MAX_RANK-1), or None; a reference's rank narrows the range (shapes.reduced_axes)."""
    if not isinstance(value, (list, tuple)):
        return f"must be a list of integers (axes), not {type(value).__name__}"
    if len(value) > MAX_RANK:
        return f"must name at most {MAX_RANK} axes, not {len(value)}"
    for item in value:
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, numbers.Integral):
            return f"must be a list of integers (axes), not one holding {type(item).__name__} {item!r}"
        if not -MAX_RANK <= int(item) < MAX_RANK:
            return f"{int(item)} is not an axis: each must be in -{MAX_RANK}..{MAX_RANK - 1} (negative: from the last)"
    if len({int(item) for item in value}) != len(value):
        return f"names an axis twice: {[int(item) for item in value]}"
    return None
