"""Describe each op's public C API (opgen_<op>) for the templates: descriptors, rules, variants.

The C side checks every rule of the spec with one generic checker (templates/runtime.c.j2);
this module turns a spec into the tables that checker reads, and into the adapters that call
each specialized kernel through one uniform signature.
"""

from __future__ import annotations

from typing import Any

from opgen import plan, shapes
from opgen.specs import KEEP_DIMS_ROLE, MAX_RANK, DTypeTable, OpSpec

MAX_OPERANDS = 16  # inputs + outputs of one op
PATTERN_CODES = {
    "elementwise": "OPGEN_PATTERN_ELEMENTWISE",
    "broadcast_reduce": "OPGEN_PATTERN_BROADCAST_REDUCE",
    "reduce_then_apply": "OPGEN_PATTERN_REDUCE_THEN_APPLY",
    "along_axes": "OPGEN_PATTERN_ALONG_AXES",
    "binary": "OPGEN_PATTERN_BINARY",
}
AXES_KINDS = {"line": "OPGEN_AXES_LINE", "along": "OPGEN_AXES_ALONG"}  # else OPGEN_AXES_TENSOR
AXES_MODES = {"axis": "OPGEN_AXES_ONE", "begin_axis": "OPGEN_AXES_FROM", "axes": "OPGEN_AXES_LIST"}
FORM_CODES = {form: f"OPGEN_FORM_{form.upper()}" for form in ("to_reference", *shapes.FORM_RULES)}
DIMS = {"count": 0, "outer": 0, "channels": 1, "length": 1, "inner": 2, "repeat": 2}
# binary: the inputs' shapes, packed as the runner passes them (opgen_call.shapes: the two
# ranks, then each input's OPGEN_MAX_RANK dims)
SHAPES = {
    "rank_0": "(int)opgen_dims[0]",
    "rank_1": "(int)opgen_dims[1]",
    "dims_0": "opgen_dims + 2",
    "dims_1": "opgen_dims + 2 + OPGEN_MAX_RANK",
}
# opgen_status: (name, opgen_status_string, when), in the order of their values
STATUSES = (
    ("OPGEN_SUCCESS", "success", "the call ran"),
    ("OPGEN_NULL_POINTER", "null pointer", "a required descriptor, data pointer or out-pointer is NULL"),
    ("OPGEN_UNSUPPORTED_DTYPE", "unsupported dtype", "a dtype, or a combination of dtypes, the op does not take"),
    ("OPGEN_INVALID_RANK", "invalid rank", "too few or too many dims"),
    ("OPGEN_INVALID_SHAPE", "invalid shape", "a negative dim, or shapes that break the op's rules"),
    ("OPGEN_INVALID_ATTRIBUTE", "invalid attribute", "an attribute value outside its allowed set or range"),
    ("OPGEN_INVALID_COMBINATION", "invalid combination", "optional outputs that go together given apart"),
    ("OPGEN_SIZE_OVERFLOW", "size overflow", "an element or byte count beyond 64-bit arithmetic"),
    ("OPGEN_MISALIGNED_DATA", "misaligned data", "a data pointer not aligned to its element type"),
    ("OPGEN_OVERLAPPING_TENSORS", "overlapping tensors", "an output shares memory with another tensor"),
    ("OPGEN_WORKSPACE_TOO_SMALL", "workspace too small", "fewer workspace bytes than _workspace_size reported"),
    ("OPGEN_OUT_OF_MEMORY", "out of memory", "the one-call form could not allocate its workspace"),
)


def dtype_code(name: str) -> str:
    return f"OPGEN_{name.upper()}"


def enum_value(attribute: str, value: str) -> str:
    return f"OPGEN_{attribute.upper()}_{value.upper()}"


def enums(specs: list[OpSpec]) -> list[dict[str, Any]]:
    """One C enum per string attribute name, its values in order of first appearance."""
    found: dict[str, list[str]] = {}
    for spec in specs:
        for attribute in spec.attributes:
            if attribute.type == "string":
                values = found.setdefault(attribute.name, [])
                values += [v for v in attribute.allowed if v not in values]
    return [
        {"type": f"opgen_{name}", "members": [(enum_value(name, v), v) for v in values]}
        for name, values in found.items()
    ]


def _c_type(attribute_type: str, name: str) -> str:
    return {"f32": "float", "bool": "int", "int": "int64_t", "int list": "opgen_int_list"}.get(
        attribute_type, f"opgen_{name}"
    )


def _camel(name: str) -> str:
    """grad_output -> gradOutput (CANN's spelling of argument names)."""
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


def _default_text(name: str, attribute_type: str, default: Any) -> str:
    if default is None:
        return ""
    if attribute_type == "string":
        return enum_value(name, default)
    if attribute_type == "bool":
        return "1" if default else "0"
    if attribute_type == "int":
        return str(int(default))
    if attribute_type == "int list":
        return "{ " + ", ".join([str(len(default)), *(str(int(v)) for v in default)]) + " }"
    return repr(float(default))


def describe(spec: OpSpec, table: DTypeTable, kernels: list[plan.KernelPlan]) -> dict[str, Any]:
    """Everything api.c.j2 and opgen.h.j2 need to write opgen_<op> and its tables."""
    tensors = [*spec.inputs, *spec.outputs]
    if len(tensors) > MAX_OPERANDS:
        raise ValueError(f"{spec.name}: more than {MAX_OPERANDS} inputs and outputs")
    index = {t.name: i for i, t in enumerate(tensors)}
    numbers = [a.name for a in spec.attributes if a.type == "f32"]
    operands = [_operand(spec, tensor, position, index) for position, tensor in enumerate(tensors)]
    axis = next((a for a in spec.attributes if a.type in ("int", "int list")), None)
    attributes = _attributes(spec)
    rows = [[dtype_code(row[t.name]) for t in tensors] for row in spec.dtypes]
    rows_text = "; ".join(", ".join(f"{t.name} {row[t.name]}" for t in tensors) for row in spec.dtypes)
    adapters = [_adapter(kernel, index, numbers) for kernel in kernels]
    aclnn_parameters = [f"{'const ' if o['input'] else ''}aclTensor *{o['camel']}" for o in operands]
    parameters = [f"const opgen_tensor *{t.name}" for t in tensors]
    parameters += [f"{a['c_type']} {a['name']}" for a in attributes]
    data_parameters = ["const opgen_tensor *operands", *(f"void *{t.name}_data" for t in tensors)]
    data_parameters += [f"{a['c_type']} {a['name']}" for a in attributes]
    return {
        "op": spec.name,
        "parameters": ", ".join(parameters),
        "data_parameters": ", ".join(data_parameters),
        "aclnn": spec.aclnn,
        "aclnn_parameters": ", ".join(aclnn_parameters),
        "arguments": ", ".join([t.name for t in tensors] + [a["name"] for a in attributes]),
        "function": f"opgen_{spec.name}",
        "summary": spec.summary,
        "source": spec.source,
        "pattern": PATTERN_CODES[spec.pattern],
        "operands": operands,
        "input_count": len(spec.inputs),
        "output_count": len(spec.outputs),
        "reference": index[spec.reference],
        "reference_name": spec.reference,
        "min_rank": spec.min_rank,
        "max_rank": MAX_RANK if spec.max_rank is None else spec.max_rank,
        "fixed_layout": {"NCX": 1, "NXC": -1}.get(spec.layout or "", 0),
        "attributes": attributes,
        "numbers": numbers,
        "specialized": list(spec.specialized),
        "rows": rows,
        "rows_text": rows_text,
        "forms": len(plan.forms(spec)),
        # per-kernel workspace functions: reductions over channels, sums across lines
        "workspaces": len(plan.forms(spec)) > 1 or any(k.across_count for k in kernels),
        "adapters": adapters,
        "axes_mode": AXES_MODES[axis.role] if axis and axis.role else "OPGEN_AXES_ONE",
        # the attribute messages name: along_axes' axis, binary's broadcast rule
        "axis_name": axis.name if axis else next((a.name for a in spec.attributes if a.role == "broadcast"), ""),
    }


def _operand(spec: OpSpec, tensor: Any, position: int, index: dict[str, int]) -> dict[str, Any]:
    """What the op API's tables say of operand `tensor` (number `position`)."""
    forms = list(tensor.broadcast)
    rules = "; or ".join(shapes.FORM_RULES[f].format(reference=spec.reference) for f in forms if f in shapes.FORM_RULES)
    return {
        "name": tensor.name,
        "doc": tensor.doc,
        "input": position < len(spec.inputs),
        "channel": tensor.kind == "channel",
        "optional": tensor.optional or bool(tensor.requested_by),
        "ignored": bool(tensor.ignored_unless),
        "requested": bool(tensor.requested_by),
        "like": index[tensor.like] if tensor.like else -1,
        "axes_kind": AXES_KINDS.get(tensor.kind, "OPGEN_AXES_TENSOR"),
        "forms": [FORM_CODES[f] for f in forms],
        "rules": rules,
        "camel": _camel(tensor.name),
    }


def _attributes(spec: OpSpec) -> list[dict[str, Any]]:
    """What the op API's tables say of each attribute; `slot`: its first double in _with_arrays'
    array (one per attribute, 1 + MAX_RANK for an int list)."""
    layout = spec.layout_attribute
    attributes = []
    slot = 0
    for attribute in spec.attributes:
        entry = {
            "name": attribute.name,
            "type": attribute.type,
            "c_type": _c_type(attribute.type, attribute.name),
            "doc": attribute.doc,
            "default": attribute.default,
            "minimum_exclusive": attribute.minimum_exclusive,
            "members": [(enum_value(attribute.name, v), v) for v in attribute.allowed],
            "layout": attribute is layout,
            "keep_dims": attribute.role == KEEP_DIMS_ROLE,
            "broadcast": attribute.role == "broadcast",
            "default_text": _default_text(attribute.name, attribute.type, attribute.default),
            "slot": slot,
            # set in the kernel index when false (plan.flag_bit); 0: not specialized
            "flag_bit": plan.flag_bit(spec, attribute.name) if attribute.name in spec.specialized else 0,
        }
        slot += 1 + MAX_RANK if attribute.type == "int list" else 1
        attributes.append(entry)
    return attributes


def _adapter(kernel: plan.KernelPlan, index: dict[str, int], numbers: list[str]) -> dict[str, Any]:
    """How the op API calls `kernel`: each of its C parameters from the call's operands, sizes
    and numbers."""
    arguments = []
    for c_type, name in kernel.params:
        if name == "workspace":
            arguments.append("workspace")
        elif kernel.pattern == "binary" and name in SHAPES:
            arguments.append(SHAPES[name])
        elif name in DIMS:
            arguments.append(f"opgen_dims[{DIMS[name]}]")
        elif name == "blocks":  # along_axes over a set of axes: after outer, length, inner
            arguments.append("opgen_dims + 3")
        elif "*" not in c_type:
            arguments.append(f"numbers[{numbers.index(name)}]")
        else:
            if name.endswith("_sums") and name not in index:  # an operand's sums: after the operands
                at = f"OPGEN_MAX_OPERANDS + {index[name[: -len('_sums')]]}"
            else:
                at = str(index[name])
            arguments.append(f"({c_type.strip()})tensors[{at}]")
    return {"kernel": kernel.name, "arguments": arguments, "pattern": kernel.pattern}
