"""The Python API, generated from the specs: one function per op, built from its spec's data.

A call is checked against every rule of the spec (validate.py) before any kernel runs. The
check depends only on the dtypes, shapes, layouts and attribute values, so its outcome (a
Plan: which kernels, which dims, which outputs) is cached per op and reused by calls that
repeat them; such calls only allocate outputs and call the kernels.
"""

from __future__ import annotations

import collections
import math
import threading
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
        self.single = len(spec.outputs) == 1
        camel = "".join(part.title() for part in spec.name.split("_"))
        self.result = None if self.single else collections.namedtuple(f"{camel}Result", [t.name for t in spec.outputs])


def make_function(library: OpLibrary, spec: OpSpec) -> Any:
    """A real Python function with the op's signature (written from the spec), calling _call."""
    params = [t.name if not t.optional else f"{t.name}=None" for t in spec.inputs]
    params.append("*")
    params += [a.name if a.required else f"{a.name}=_default_{a.name}" for a in spec.attributes]
    params += [f"{f.name}=None" for f in spec.flags]
    params.append("out=None")

    def pack(names: list[str]) -> str:
        return "(" + "".join(f"{n}, " for n in names) + ")"

    body = (
        f"def {spec.name}({', '.join(params)}):\n"
        f"    return _call(_op, {pack([t.name for t in spec.inputs])}, {pack([a.name for a in spec.attributes])}, "
        f"{pack([f.name for f in spec.flags])}, out)\n"
    )
    namespace: dict[str, Any] = {"_call": _call, "_op": _Op(library, spec)}
    namespace.update({f"_default_{a.name}": a.default for a in spec.attributes if not a.required})
    exec(compile(body, f"<opgen {spec.name}>", "exec"), namespace)  # names are checked C/Python identifiers
    function = namespace[spec.name]
    function.__doc__ = _docstring(spec)
    function.__module__ = "opgen"
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


def _call(op: _Op, inputs: tuple, attributes: tuple, flags: tuple, out: Any) -> Any:
    # bool and int compare equal: the types keep use_dst=1 from reusing use_dst=True's plan
    key: tuple = (attributes, tuple(map(type, attributes)), flags, tuple(map(type, flags)))
    for array in inputs:
        if type(array) is np.ndarray:
            layout = array.flags
            key += (array.dtype, array.shape, layout.c_contiguous and layout.aligned)
        elif array is None:
            key += (None,)
        else:
            key = ()  # not an array: the full check reports it
            break
    found = op.plans.get(key) if key else None
    if found is None:
        found = _make_plan(op, inputs, attributes, flags)
        if key:
            if len(op.plans) >= PLAN_CACHE_SIZE:
                op.plans.clear()
            op.plans[key] = found
    outputs = found.run(inputs, out)
    if op.single:
        return outputs[0]
    return op.result(*outputs)


def _make_plan(op: _Op, inputs: tuple, attributes: tuple, flags: tuple) -> Plan:
    spec = op.spec
    arguments = dict(zip([t.name for t in spec.inputs], inputs))
    arguments.update(zip([a.name for a in spec.attributes], attributes))
    arguments.update(zip([f.name for f in spec.flags], flags))
    checked = Checked(spec, op.library.dtype_names, arguments)
    return Plan(op, checked)


class Plan:
    """Everything a checked call needs to run: input preparation, outputs, the C call.

    The call goes through the op's public C entry point, opgen_<op>_with_workspace, which
    checks the call again, picks the specialized kernel and runs it."""

    def __init__(self, op: _Op, checked: Checked) -> None:
        library, spec = op.library, op.spec
        self.name = spec.name
        table = library.table
        self.ffi = library.module.ffi
        self.lib = library.module.lib
        self.function = getattr(self.lib, f"opgen_{spec.name}_with_workspace")
        # per input: used? (ignored and absent inputs are not)
        self.used = [checked.inputs[t.name] is not None for t in spec.inputs]
        # per output: (name, shape, dtype, requested?)
        self.outputs = []
        for tensor in spec.outputs:
            requested = not (tensor.requested_by and not checked.flags[tensor.requested_by])
            dtype = numpy_dtype(table.dtypes[checked.row[tensor.name]].numpy)
            self.outputs.append((tensor.name, checked.output_shape(tensor.name), dtype, requested))
        # descriptors: dtype code, shape (data pointers are set per call)
        codes = {name: index for index, name in enumerate(table.dtypes)}
        self.shapes = [
            (codes[checked.row[t.name]], checked.inputs[t.name].shape) if used else None
            for t, used in zip(spec.inputs, self.used)
        ]
        self.shapes += [
            (codes[checked.row[name]], shape) if requested else None for name, shape, _, requested in self.outputs
        ]
        self.attributes = [_c_attribute(library, a, checked.attributes[a.name]) for a in spec.attributes]
        # The plan's key records each input's dtype, shape and layout, so whether any needs
        # a contiguous, aligned copy is known here, once.
        self.copy_needed = any(
            used and not (a.flags.c_contiguous and a.flags.aligned)
            for used, a in zip(self.used, (checked.inputs[t.name] for t in spec.inputs))
        )
        self.allocate = [
            (requested, shape, dtype, math.prod(shape) * dtype.itemsize >= STREAM_ALIGN_BYTES)
            for _, shape, dtype, requested in self.outputs
        ]
        self.local = threading.local()  # per Python thread: the C call runs without the GIL
        self.input_count = len(spec.inputs)
        self.present = [index for index, described in enumerate(self.shapes) if described is not None]
        size = self.ffi.new("size_t *")
        status = getattr(self.lib, f"opgen_{spec.name}_workspace_size")(*self._descriptors(), *self.attributes, size)
        self._raise(status)
        self.workspace_bytes = int(size[0])

    def _descriptors(self) -> list[Any]:
        """This thread's descriptors (pointers, NULL for absent operands)."""
        found = getattr(self.local, "descriptors", None)
        if found is None:
            block = self.ffi.new("opgen_tensor[]", len(self.shapes))
            found = [block]
            for index, described in enumerate(self.shapes):
                if described is None:
                    found.append(self.ffi.NULL)
                    continue
                code, shape = described
                block[index].dtype = code
                block[index].rank = len(shape)
                for d, size in enumerate(shape):
                    block[index].dims[d] = size
                found.append(block + index)
            self.local.descriptors = found
        return found[1:]

    def _raise(self, status: int) -> None:
        if status == 0:
            return
        message = self.ffi.string(self.lib.opgen_last_error()).decode()
        message = message.replace(f"opgen_{self.name}: ", f"{self.name}(): ", 1)  # in Python's words
        kind = {1: TypeError, 2: TypeError, 11: MemoryError}.get(status, ValueError)
        raise kind(message)

    def _workspace(self) -> Any:
        """This thread's workspace, kept for the plan (no page faults per call), as a C pointer."""
        if not self.workspace_bytes:
            return self.ffi.NULL
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
        given = self._check_out(out) if out is not None else None
        arrays: list[np.ndarray | None] = []
        for index, (requested, shape, dtype, big) in enumerate(self.allocate):
            if not requested:
                arrays.append(None)
            elif given is not None and given[index] is not None:
                arrays.append(given[index])
            else:
                arrays.append(aligned_empty(shape, dtype) if big else np.empty(shape, dtype))
        return arrays

    def _check_out(self, out: Any) -> list[Any] | None:
        if out is None:
            return None
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

    def run(self, inputs: tuple, out: Any) -> list[np.ndarray | None]:
        prepared = self._prepare(inputs) if self.copy_needed else inputs
        outputs = self._outputs(out)
        descriptors = self._descriptors()
        from_buffer, views = self.ffi.from_buffer, []  # views: alive until the call returns
        for index in self.present:
            view = from_buffer(prepared[index] if index < self.input_count else outputs[index - self.input_count])
            descriptors[index].data = view
            views.append(view)
        self._raise(self.function(*descriptors, *self.attributes, self._workspace(), self.workspace_bytes))
        return outputs


def _c_attribute(library: OpLibrary, attribute: Any, value: Any) -> Any:
    """An attribute value as the C API takes it: enum value, 0/1, or float."""
    if attribute.type == "string":
        return library.enum_values[f"opgen_{attribute.name}"][value]
    if attribute.type == "bool":
        return int(value)
    return float(value)
