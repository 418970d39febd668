"""The Python API, generated from the specs: one function per op, built from its spec's data.

A call is checked against every rule of the spec (validate.py) before any kernel runs. The
check depends only on the dtypes, shapes, layouts and attribute values, so its outcome (a
Plan: which kernels, which dims, which outputs) is cached per op and reused by calls that
repeat them; such calls only allocate outputs and call the kernels.
"""

from __future__ import annotations

import collections
import functools
import inspect
import itertools
import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from opgen import c_api, plan
from opgen.specs import OpSpec, load_specs
from opgen.validate import Checked

PLAN_CACHE_SIZE = 512  # plans kept per op
ALIGNMENT = 64  # bytes; large outputs opgen allocates start on a cache line, so streaming stores apply
STREAM_ALIGN_BYTES = 1 << 20  # outputs this large get the alignment


def numpy_dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialized C-contiguous array; large ones start on a 64-byte boundary."""
    count = math.prod(shape)
    if count * dtype.itemsize < STREAM_ALIGN_BYTES:
        return np.empty(shape, dtype)
    raw = np.empty(count * dtype.itemsize + ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start : start + count * dtype.itemsize].view(dtype).reshape(shape)


class OpLibrary:
    """The ops of one spec directory; kernels are compiled (or taken from the cache) on first use."""

    def __init__(self, spec_dir: Path, module: Any = None) -> None:
        """`module` (with .ffi and .lib): run these instead of building the specs' cffi module."""
        self.spec_dir = Path(spec_dir)
        self.table, self.specs = load_specs(self.spec_dir)
        self.variants = {spec.name: [v.name for v in plan.variants(spec, self.table)] for spec in self.specs}
        self.dtype_names = {numpy_dtype(d.numpy): d.name for d in self.table.dtypes.values()}
        # string attribute values -> their C enum values
        self.enum_values = {e["type"]: {v: i for i, (_, v) in enumerate(e["members"])} for e in c_api.enums(self.specs)}
        self._module: Any = module
        self.ops = {spec.name: make_function(self, spec) for spec in self.specs}

    def __getattr__(self, name: str) -> Any:
        ops = self.__dict__.get("ops", {})
        if name in ops:
            return ops[name]
        raise AttributeError(f"no op named {name!r} in {self.__dict__.get('spec_dir')}")

    def __dir__(self) -> list[str]:
        return [*super().__dir__(), *self.ops]

    @property
    def module(self) -> Any:
        if self._module is None:
            from opgen.compile import build_module, load_module
            from opgen.render import render_library

            self._module = load_module(build_module(render_library(self.spec_dir)))
        return self._module


class _Op:
    """What a generated function needs: its spec, library, result type and plan cache."""

    def __init__(self, library: OpLibrary, spec: OpSpec) -> None:
        self.library = library
        self.spec = spec
        self.plans: dict[tuple, Plan] = {}
        self.fast: dict[tuple, tuple] = {}  # the same plans' Plan.fast, for the generated function
        self.namespace: dict[str, Any] = {}  # the generated function's globals
        self.single = len(spec.outputs) == 1
        camel = "".join(part.title() for part in spec.name.split("_"))
        self.result = None if self.single else collections.namedtuple(f"{camel}Result", [t.name for t in spec.outputs])


def make_function(library: OpLibrary, spec: OpSpec) -> Any:
    """A real Python function with the op's signature, written from the spec.

    Its body is the fast path of a call that repeats a checked one (same array types, dtypes,
    shapes, attributes and flags): look up the plan, allocate the outputs and pass the data
    pointers to opgen_<op>_with_data. Anything else (a first call, `out=`, inputs that are not
    C-contiguous arrays, a status from C) goes to _call, which checks and reports."""
    params = [t.name if not t.optional else f"{t.name}=None" for t in spec.inputs]
    params.append("*")
    params += [a.name if a.required else f"{a.name}=_default_{a.name}" for a in spec.attributes]
    params += [f"{f.name}=None" for f in spec.flags]
    params.append("out=None")

    def pack(names: list[str]) -> str:
        return "(" + "".join(f"{n}, " for n in names) + ")"

    # locals start with "opgen": spec names may not (specs.py)
    key = []
    for t in spec.inputs:
        if t.optional:
            key.append(f"{t.name}.__class__, {t.name} is None or ({t.name}.dtype, {t.name}.shape)")
        else:
            key.append(f"{t.name}.__class__, {t.name}.dtype, {t.name}.shape")
    key += [f"{n}, {n}.__class__" for n in [a.name for a in spec.attributes] + [f.name for f in spec.flags]]
    data = []
    for t in spec.inputs:
        pointer = f"_from_buffer({t.name})"
        data.append(f"_NULL if {t.name} is None else {pointer}" if t.optional else pointer)
    outputs = [f"opgen_{t.name}" for t in spec.outputs]
    data_out = [
        f"_NULL if {o} is None else _from_buffer({o})" if t.requested_by else f"_from_buffer({o})"
        for o, t in zip(outputs, spec.outputs)
    ]
    slow = (
        f"_call(_op, opgen_key, {pack([t.name for t in spec.inputs])}, {pack([a.name for a in spec.attributes])}, "
        f"{pack([f.name for f in spec.flags])}, out)"
    )
    body = [
        f"def {spec.name}({', '.join(params)}):",
        "    opgen_key = None",
        "    try:",
        f"        opgen_key = ({', '.join(key)})",
        f"        opgen_run, opgen_operands, opgen_attributes, opgen_workspace, opgen_bytes, opgen_fit, "
        f"{', '.join(f'opgen_new_{t.name}' for t in spec.outputs)}, = _fast[opgen_key]",
        f"        opgen_data = ({''.join(d + ', ' for d in data)})",
        "    except (AttributeError, TypeError, KeyError, ValueError, BufferError):  # the checks say why",
        f"        return {slow}",
        "    if out is None:",
        *(f"        {o} = opgen_new_{t.name}()" for o, t in zip(outputs, spec.outputs)),
        "    else:",
        "        try:",
        f"            {', '.join(outputs)}, = opgen_fit(out)",
        "        except (TypeError, ValueError):",
        f"            return {slow}",
        f"    if opgen_run(opgen_operands, *opgen_data, {''.join(d + ', ' for d in data_out)}"
        "*opgen_attributes, opgen_workspace(), opgen_bytes):",
        f"        return {slow}",
        f"    return {outputs[0] if len(outputs) == 1 else '_result(' + ', '.join(outputs) + ')'}",
    ]
    op = _Op(library, spec)
    namespace: dict[str, Any] = {"_call": _call, "_op": op, "_fast": op.fast, "_result": op.result}
    namespace.update({f"_default_{a.name}": a.default for a in spec.attributes if not a.required})
    exec(compile("\n".join(body) + "\n", f"<opgen {spec.name}>", "exec"), namespace)  # names: checked identifiers
    function = namespace[spec.name]
    function.__doc__ = _docstring(spec)
    function.__module__ = "opgen"
    op.namespace = namespace
    return function


def _docstring(spec: OpSpec) -> str:
    lines = [spec.summary, "", f"Source: {spec.source}.", "", "Arguments:"]
    for tensor in spec.inputs:
        lines.append(f"    {tensor.name}{' (optional)' if tensor.optional else ''}: {tensor.doc}")
    for attribute in spec.attributes:
        default = "required" if attribute.required else f"default {attribute.default!r}"
        lines.append(f"    {attribute.name} ({attribute.type}, {default}): {attribute.doc}")
    for flag in spec.flags:
        lines.append(f"    {flag.name} (bool, default: {flag.default_if_given} is given): {flag.doc}")
    shape = "an array" if len(spec.outputs) == 1 else "a tuple of arrays (None for outputs not requested)"
    lines.append(f"    out: {shape} to write the results into, of their exact shape and dtype, C-contiguous.")
    lines += ["", "Returns:"]
    for tensor in spec.outputs:
        lines.append(f"    {tensor.name}: {tensor.doc}")
    combinations = "; ".join(", ".join(f"{k} {v}" for k, v in row.items()) for row in spec.dtypes)
    lines += ["", f"dtype combinations: {combinations}"]
    return "\n".join(lines)


def _call(op: _Op, key: tuple | None, inputs: tuple, attributes: tuple, flags: tuple, out: Any) -> Any:
    """A call the generated fast path did not take; `key` is its plan key (None if not hashable)."""
    try:
        found = op.plans.get(key) if key is not None else None
    except TypeError:  # an unhashable attribute value: the check reports it
        found = key = None
    if found is None:
        found = _make_plan(op, inputs, attributes, flags)
        if key is not None:
            if len(op.plans) >= PLAN_CACHE_SIZE:
                op.plans.clear()
                op.fast.clear()
            op.plans[key] = found
            # only exact ndarrays take the fast path: their buffers are their elements
            if all(type(array) in (np.ndarray, type(None)) for array in inputs):
                op.fast[key] = found.fast
    outputs = found.run(inputs, out)
    if op.single:
        return outputs[0]
    return op.result(*outputs)


def c_entry_call(function: Any, *args: Any, **kwargs: Any) -> Callable[[], int]:
    """The C entry point of `function(*args, **kwargs)` with its operands described and its data
    pointers bound: calling it costs what the same call costs from C, plus cffi's call. For
    measuring what the Python call adds (`opgen bench`); returns the C status."""
    op: _Op = function.__globals__["_op"]
    spec = op.spec
    bound = inspect.signature(function).bind(*args, **kwargs)
    bound.apply_defaults()
    values = bound.arguments
    inputs = tuple(values[t.name] for t in spec.inputs)
    found = _make_plan(
        op,
        inputs,
        tuple(values[a.name] for a in spec.attributes),
        tuple(values[f.name] for f in spec.flags),
    )
    _, arguments = found.arguments(inputs, values["out"])  # its from_buffer views keep the arrays alive
    return functools.partial(found.function, *arguments)


def _make_plan(op: _Op, inputs: tuple, attributes: tuple, flags: tuple) -> Plan:
    spec = op.spec
    arguments = dict(zip([t.name for t in spec.inputs], inputs))
    arguments.update(zip([a.name for a in spec.attributes], attributes))
    arguments.update(zip([f.name for f in spec.flags], flags))
    checked = Checked(spec, op.library.dtype_names, arguments)
    return Plan(op, checked)


class Plan:
    """Everything a checked call needs to run: input preparation, outputs, the C call.

    The call goes through the op's C entry point opgen_<op>_with_data, which checks the call
    again, picks the specialized kernel and runs it. The operand descriptors (dtype, shape) are
    written once, here; the data pointers are passed per call."""

    def __init__(self, op: _Op, checked: Checked) -> None:
        library, spec = op.library, op.spec
        self.name = spec.name
        table = library.table
        self.ffi = ffi = library.module.ffi
        self.lib = library.module.lib
        op.namespace.update(_from_buffer=ffi.from_buffer, _NULL=ffi.NULL)
        self.function = getattr(self.lib, f"opgen_{spec.name}_with_data")
        # per input: used? (ignored and absent inputs are not)
        self.used = [checked.inputs[t.name] is not None for t in spec.inputs]
        # per output: (name, shape, dtype, requested?)
        self.outputs = []
        for tensor in spec.outputs:
            requested = not (tensor.requested_by and not checked.flags[tensor.requested_by])
            dtype = numpy_dtype(table.dtypes[checked.row[tensor.name]].numpy)
            self.outputs.append((tensor.name, checked.output_shape(tensor.name), dtype, requested))
        codes = {name: index for index, name in enumerate(table.dtypes)}
        described = [
            (codes[checked.row[t.name]], checked.inputs[t.name].shape) if used else None
            for t, used in zip(spec.inputs, self.used)
        ]
        described += [
            (codes[checked.row[name]], shape) if requested else None for name, shape, _, requested in self.outputs
        ]
        self.operands = ffi.new("opgen_tensor[]", len(described))
        for operand, entry in zip(self.operands, described):
            operand.rank = -1  # absent
            if entry is not None:
                operand.dtype, shape = entry
                operand.rank = len(shape)
                operand.dims[0 : len(shape)] = shape
        self.attributes = tuple(_c_attribute(library, a, checked.attributes[a.name]) for a in spec.attributes)
        self.allocate = [
            functools.partial(
                aligned_empty if math.prod(shape) * dtype.itemsize >= STREAM_ALIGN_BYTES else np.empty, shape, dtype
            )
            if requested
            else type(None)  # calling it gives None
            for _, shape, dtype, requested in self.outputs
        ]
        self.local = threading.local()  # per Python thread: the C call runs without the GIL
        size = ffi.new("size_t *")
        status = getattr(self.lib, f"opgen_{spec.name}_workspace_size")(
            *[self.operands + i if entry is not None else ffi.NULL for i, entry in enumerate(described)],
            *self.attributes,
            size,
        )
        self._raise(status)
        self.workspace_bytes = int(size[0])
        # this thread's workspace as a C pointer, NULL when the call needs none
        self.workspace = self._workspace if self.workspace_bytes else itertools.repeat(ffi.NULL).__next__
        # what the generated function unpacks (make_function)
        self.fast = (
            self.function,
            self.operands,
            self.attributes,
            self.workspace,
            self.workspace_bytes,
            self._fit_out,
            *self.allocate,
        )

    def _raise(self, status: int) -> None:
        if status == 0:
            return
        message = self.ffi.string(self.lib.opgen_last_error()).decode()
        message = message.replace(f"opgen_{self.name}: ", f"{self.name}(): ", 1)  # in Python's words
        kind = {1: TypeError, 2: TypeError, 11: MemoryError}.get(status, ValueError)
        raise kind(message)

    def _workspace(self) -> Any:
        """This thread's workspace, kept for the plan (no page faults per call), as a C pointer."""
        found = getattr(self.local, "workspace", None)
        if found is None:
            buffer = np.empty(self.workspace_bytes, dtype=np.uint8)
            found = self.local.workspace = (buffer, self.ffi.from_buffer(buffer))
        return found[1]

    def _prepare(self, inputs: tuple) -> list[np.ndarray | None]:
        prepared = []
        for array, used in zip(inputs, self.used):
            if used and not (array.flags.c_contiguous and array.flags.aligned):
                # a copy (not np.ascontiguousarray: it turns 0-d arrays into 1-d ones); C may only
                # read elements at addresses aligned to their type
                array = array.copy(order="C")
            prepared.append(array if used else None)
        return prepared

    def _outputs(self, out: Any) -> list[np.ndarray | None]:
        given = self._check_out(out) if out is not None else [None] * len(self.outputs)
        return [new() if array is None else array for array, new in zip(given, self.allocate)]

    def _fit_out(self, out: Any) -> list[np.ndarray | None]:
        """The outputs of a call given `out`, if every array given fits (else ValueError; _check_out says why)."""
        if len(self.outputs) == 1 and out.__class__ is not tuple:
            out = (out,)
        if len(out) != len(self.outputs):
            raise ValueError
        arrays = []
        for array, (_, shape, dtype, requested), new in zip(out, self.outputs, self.allocate):
            if array is None:
                array = new()
            elif not (
                requested
                and array.__class__ is np.ndarray
                and array.dtype == dtype
                and array.shape == shape
                and array.flags.writeable  # C-contiguity: from_buffer; alignment, overlaps: C
            ):
                raise ValueError
            arrays.append(array)
        return arrays

    def _check_out(self, out: Any) -> list[Any]:
        single = len(self.outputs) == 1
        if single and not isinstance(out, tuple):
            out = (out,)
        if not isinstance(out, tuple) or len(out) != len(self.outputs):
            raise TypeError(
                f"{self.name}(): out: must be {'an array' if single else 'a tuple'} of "
                f"{len(self.outputs)} output(s) ({', '.join(o[0] for o in self.outputs)})"
            )
        for array, (name, shape, dtype, requested) in zip(out, self.outputs):
            if array is None:
                continue
            where = f"{self.name}(): out ({name})"
            if not requested:
                raise ValueError(f"{where}: this output is not requested; pass None for it")
            if not isinstance(array, np.ndarray):
                raise TypeError(f"{where}: must be a NumPy array, not {type(array).__name__}")
            if array.dtype != dtype or array.shape != shape:
                raise ValueError(
                    f"{where}: must have shape {shape} and dtype {dtype}, not {array.shape} and {array.dtype}"
                )
            if not (array.flags.c_contiguous and array.flags.writeable and array.flags.aligned):
                raise ValueError(f"{where}: must be C-contiguous, writeable and aligned to its dtype")
        return list(out)  # the C API rejects outputs that overlap another operand

    def arguments(self, inputs: tuple, out: Any) -> tuple[list[np.ndarray | None], tuple]:
        """The outputs of a call and the arguments of its C entry point."""
        arrays = [*self._prepare(inputs), *self._outputs(out)]
        from_buffer, null = self.ffi.from_buffer, self.ffi.NULL
        data = [null if array is None else from_buffer(array) for array in arrays]
        arguments = (self.operands, *data, *self.attributes, self.workspace(), self.workspace_bytes)
        return arrays[len(self.used) :], arguments

    def run(self, inputs: tuple, out: Any) -> list[np.ndarray | None]:
        outputs, arguments = self.arguments(inputs, out)
        self._raise(self.function(*arguments))
        return outputs


def _c_attribute(library: OpLibrary, attribute: Any, value: Any) -> Any:
    """An attribute value as the C API takes it: enum value, 0/1, or float."""
    if attribute.type == "string":
        return library.enum_values[f"opgen_{attribute.name}"][value]
    if attribute.type == "bool":
        return int(value)
    return float(value)
