"""The Python API, generated from the specs: one function per op, built from its spec's data.

A call checks every rule of the spec (argument types, dtype combination, attribute values,
ranks, shapes and broadcast forms) before any kernel runs, then picks the variant and calls it.
"""

from __future__ import annotations

import collections
import inspect
import math
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from opgen import plan, shapes
from opgen.specs import OpSpec, check_attribute_value, load_specs

_UNSET = object()


def numpy_dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


class OpLibrary:
    """The ops of one spec directory; kernels are compiled (or taken from the cache) on first use."""

    def __init__(self, spec_dir: Path) -> None:
        self.spec_dir = Path(spec_dir)
        self.table, self.specs = load_specs(self.spec_dir)
        self.variants = {
            spec.name: {v.name: plan.kernel(v, self.table) for v in plan.variants(spec, self.table)}
            for spec in self.specs
        }
        self._module: Any = None
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


def make_function(library: OpLibrary, spec: OpSpec) -> Any:
    """A Python function with the op's signature and documentation, calling `_run`."""
    parameters = []
    for tensor in spec.inputs:
        default = None if tensor.optional else inspect.Parameter.empty
        parameters.append(inspect.Parameter(tensor.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default))
    for attribute in spec.attributes:
        default = inspect.Parameter.empty if attribute.required else attribute.default
        parameters.append(inspect.Parameter(attribute.name, inspect.Parameter.KEYWORD_ONLY, default=default))
    for flag in spec.flags:
        parameters.append(inspect.Parameter(flag.name, inspect.Parameter.KEYWORD_ONLY, default=None))
    signature = inspect.Signature(parameters)
    result_type = None
    if len(spec.outputs) > 1:
        camel = "".join(part.title() for part in spec.name.split("_"))
        result_type = collections.namedtuple(f"{camel}Result", [t.name for t in spec.outputs])

    def op_function(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as error:
            raise TypeError(f"{spec.name}(): {error}") from None
        bound.apply_defaults()
        outputs = _run(library, spec, dict(bound.arguments))
        if result_type is None:
            return outputs[spec.outputs[0].name]
        return result_type(*(outputs[t.name] for t in spec.outputs))

    op_function.__name__ = op_function.__qualname__ = spec.name
    op_function.__signature__ = signature  # type: ignore[attr-defined]
    op_function.__doc__ = _docstring(spec)
    return op_function


def _docstring(spec: OpSpec) -> str:
    lines = [spec.summary, "", f"Source: {spec.source}.", "", "Arguments:"]
    for tensor in spec.inputs:
        lines.append(f"    {tensor.name}{' (optional)' if tensor.optional else ''}: {tensor.doc}")
    for attribute in spec.attributes:
        default = "required" if attribute.required else f"default {attribute.default!r}"
        lines.append(f"    {attribute.name} ({attribute.type}, {default}): {attribute.doc}")
    for flag in spec.flags:
        lines.append(f"    {flag.name} (bool, default: {flag.default_if_given} is given): {flag.doc}")
    lines += ["", "Returns:" if len(spec.outputs) > 1 else "Returns:"]
    for tensor in spec.outputs:
        lines.append(f"    {tensor.name}: {tensor.doc}")
    lines += [
        "",
        "dtype combinations: " + "; ".join(", ".join(f"{k} {v}" for k, v in row.items()) for row in spec.dtypes),
    ]
    return "\n".join(lines)


class _Call:
    """One checked call of an op: validated arguments and the arrays to pass."""

    def __init__(self, library: OpLibrary, spec: OpSpec, arguments: dict[str, Any]) -> None:
        self.library = library
        self.spec = spec
        self.name = spec.name
        self.attributes = self._attributes(arguments)
        self.flags = self._flags(arguments)
        self.inputs = self._inputs(arguments)
        self.row = self._dtype_row()
        self.layout = self.attributes.get(spec.layout_attribute.name) if spec.layout_attribute else spec.layout
        self.reference = self.inputs[spec.reference]
        self._check_ranks()
        self.forms = self._shapes()

    def fail(self, kind: type[Exception], argument: str, message: str) -> None:
        raise kind(f"{self.name}(): {argument}: {message}")

    def _attributes(self, arguments: dict[str, Any]) -> dict[str, Any]:
        values = {}
        for attribute in self.spec.attributes:
            value = arguments[attribute.name]
            problem = check_attribute_value(attribute, value)
            if problem:
                wrong_type = (
                    not isinstance(value, (bool, int, float, str))
                    or (attribute.type == "bool") != isinstance(value, bool)
                    or (attribute.type == "string") != isinstance(value, str)
                )
                self.fail(TypeError if wrong_type else ValueError, attribute.name, problem)
            values[attribute.name] = value
        return values

    def _flags(self, arguments: dict[str, Any]) -> dict[str, bool]:
        values = {}
        for flag in self.spec.flags:
            value = arguments[flag.name]
            if value is None:
                value = arguments[flag.default_if_given] is not None
            elif not isinstance(value, bool):
                self.fail(TypeError, flag.name, f"must be True or False, not {value!r}")
            values[flag.name] = value
        return values

    def _inputs(self, arguments: dict[str, Any]) -> dict[str, np.ndarray | None]:
        arrays: dict[str, np.ndarray | None] = {}
        for tensor in self.spec.inputs:
            value = arguments[tensor.name]
            if value is None:
                if not tensor.optional:
                    self.fail(TypeError, tensor.name, "is required (got None)")
                arrays[tensor.name] = None
                continue
            if not isinstance(value, np.ndarray):
                self.fail(TypeError, tensor.name, f"must be a NumPy array, not {type(value).__name__}")
            if tensor.ignored_unless and not self.flags[tensor.ignored_unless]:
                value = None  # the spec says: ignored (taken as its default) without that flag
            arrays[tensor.name] = value
        return arrays

    def _dtype_row(self) -> dict[str, str]:
        by_numpy = {numpy_dtype(d.numpy): d.name for d in self.library.table.dtypes.values()}
        names: dict[str, str] = {}
        for name, array in self.inputs.items():
            if array is None:
                continue
            if array.dtype not in by_numpy:
                supported = ", ".join(str(d) for d in by_numpy)
                self.fail(TypeError, name, f"dtype {array.dtype} is not supported (supported: {supported})")
            names[name] = by_numpy[array.dtype]
        for row in self.spec.dtypes:
            if all(row[name] == dtype for name, dtype in names.items()):
                return row
        given = ", ".join(f"{name} {dtype}" for name, dtype in names.items())
        allowed = "; ".join(", ".join(f"{n} {row[n]}" for n in names) for row in self.spec.dtypes)
        first = next(iter(names))
        self.fail(TypeError, first, f"the dtype combination ({given}) is not supported; supported: {allowed}")
        raise AssertionError  # unreachable: fail raises

    def _check_ranks(self) -> None:
        spec = self.spec
        rank = self.reference.ndim
        if rank < spec.min_rank:
            self.fail(
                ValueError, spec.reference, f"must have at least {spec.min_rank} dims, got shape {self.reference.shape}"
            )
        if spec.max_rank is not None:
            for name, array in self.inputs.items():
                if array is not None and array.ndim > spec.max_rank:
                    self.fail(ValueError, name, f"must have at most {spec.max_rank} dims, got {array.ndim}")

    def _shapes(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        """Check every input's shape; return (form, expanded shape) of each channel input."""
        spec, reference = self.spec, self.reference.shape
        forms = {}
        for tensor in spec.inputs:
            array = self.inputs[tensor.name]
            if array is None or tensor.name == spec.reference:
                continue
            if tensor.kind == "tensor":
                if tensor.broadcast:
                    try:
                        fits = np.broadcast_shapes(array.shape, reference) == reference
                    except ValueError:
                        fits = False
                    if not fits:
                        self.fail(
                            ValueError,
                            tensor.name,
                            f"shape {array.shape} does not broadcast to {spec.reference}'s shape {reference}",
                        )
                elif array.shape != reference:
                    self.fail(
                        ValueError, tensor.name, f"shape {array.shape} must equal {spec.reference}'s shape {reference}"
                    )
                continue
            for form in tensor.broadcast:
                expanded = shapes.expand(form, array.shape, reference, self.layout or "NCX")
                if expanded is not None:
                    forms[tensor.name] = (form, expanded)
                    break
            else:
                rules = "; or ".join(shapes.FORM_RULES[f].format(reference=spec.reference) for f in tensor.broadcast)
                where = f" in {self.layout}" if spec.layout_attribute else ""
                self.fail(
                    ValueError,
                    tensor.name,
                    f"shape {array.shape} does not fit {spec.reference}'s shape {reference}{where}: it must be {rules}",
                )
        return forms

    # --- running ---------------------------------------------------------------------

    def output_array(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        dtype = self.library.table.dtypes[self.row[name]]
        return np.empty(shape, dtype=numpy_dtype(dtype.numpy))

    def variant(self, form: str | None) -> dict[str, Any]:
        parts = [self.name, plan.dtype_tag(self.row)]
        if form:
            parts.append(form)
        for name in self.spec.specialized:
            parts.append(name if self.attributes[name] else f"no_{name}")
        return self.library.variants[self.name]["_".join(parts)]

    def pointer(self, array: np.ndarray | None, name: str, offset: int = 0) -> Any:
        ffi = self.library.module.ffi
        if array is None or array.size == 0:
            return ffi.NULL
        c_type = self.library.table.dtypes[self.row[name]].c_type if name in self.row else "double"
        return ffi.cast(f"{c_type} *", array.ctypes.data) + offset


def _contiguous(array: np.ndarray | None, shape: tuple[int, ...] | None = None) -> np.ndarray | None:
    if array is None:
        return None
    if shape is not None and array.shape != shape:
        array = np.broadcast_to(array, shape)
    # not np.ascontiguousarray: it turns 0-d arrays into 1-d ones
    return array if array.flags.c_contiguous else array.copy(order="C")


def _run(library: OpLibrary, spec: OpSpec, arguments: dict[str, Any]) -> dict[str, np.ndarray | None]:
    call = _Call(library, spec, arguments)
    reference = call.reference.shape
    inputs = {
        name: _contiguous(array, reference if t.kind == "tensor" else None)
        for t in spec.inputs
        for name, array in [(t.name, call.inputs[t.name])]
    }
    outputs: dict[str, np.ndarray | None] = {}
    for tensor in spec.outputs:
        if tensor.requested_by and not call.flags[tensor.requested_by]:
            outputs[tensor.name] = None
        elif tensor.kind == "tensor":
            outputs[tensor.name] = call.output_array(tensor.name, reference)
    attributes = [np.float32(call.attributes[a]).item() for a in call.variant(_first_form(spec)).get("attributes", [])]
    if spec.pattern == "elementwise":
        _run_elementwise(call, inputs, outputs, attributes)
    elif spec.pattern == "broadcast_reduce":
        _run_broadcast_reduce(call, inputs, outputs, attributes)
    else:
        _run_reduce_then_apply(call, inputs, outputs, attributes)
    return outputs


def _first_form(spec: OpSpec) -> str | None:
    return None if spec.pattern == "elementwise" else plan.FORMS[0]


def _kernel(call: _Call, form: str | None) -> Any:
    return getattr(call.library.module.lib, call.variant(form)["name"])


def _run_elementwise(call: _Call, inputs: dict, outputs: dict, attributes: list) -> None:
    count = call.reference.size
    if count == 0:
        return
    pointers = [call.pointer(inputs[t.name], t.name) for t in call.spec.inputs]
    pointers += attributes
    pointers += [call.pointer(outputs[t.name], t.name) for t in call.spec.outputs]
    _kernel(call, None)(*pointers, count)


def _workspace(call: _Call, kernel_name: str, outer: int, channels: int, inner: int) -> np.ndarray:
    lib = call.library.module.lib
    size = getattr(lib, f"{kernel_name}_workspace_size")(outer, channels, inner)
    return np.empty(max(1, size), dtype=np.float64)


def _run_broadcast_reduce(call: _Call, inputs: dict, outputs: dict, attributes: list) -> None:
    spec = call.spec
    operand = next(t for t in spec.inputs if t.kind == "channel")
    form, expanded = call.forms[operand.name]
    operand_array = inputs[operand.name]
    sums = {}
    for tensor in spec.outputs:
        if tensor.kind == "channel":
            sums[tensor.name] = np.zeros(math.prod(expanded), dtype=np.float64)
    if call.reference.size:
        pieces = shapes.calls(call.reference.shape, expanded)
        first = pieces[0]
        name = call.variant(first.form)["name"]
        workspace = _workspace(call, name, first.outer, first.channels, first.inner if first.form == "ncx" else 1)
        for piece in pieces:
            args = []
            for tensor in spec.inputs:
                offset = piece.operand_offset if tensor.kind == "channel" else piece.offset
                args.append(call.pointer(inputs[tensor.name], tensor.name, offset))
            args += attributes
            for tensor in spec.outputs:
                if tensor.kind == "channel":
                    args.append(call.pointer(sums[tensor.name], "", piece.operand_offset))
                else:
                    args.append(call.pointer(outputs[tensor.name], tensor.name, piece.offset))
            args.append(call.pointer(workspace, ""))
            dims = (piece.outer, piece.channels, piece.inner) if piece.form == "ncx" else (piece.outer, piece.channels)
            _kernel(call, piece.form)(*args, *dims)
    for name, total in sums.items():
        shape = shapes.reduced_shape(form, operand_array.shape, expanded)
        dtype = numpy_dtype(call.library.table.dtypes[call.row[name]].numpy)
        # double -> f32 -> target: the same two roundings as the C kernels' stores
        with np.errstate(over="ignore"):  # sums beyond the dtype's range are Inf, as in C
            outputs[name] = total.astype(np.float32).astype(dtype).reshape(shape)


def _run_reduce_then_apply(call: _Call, inputs: dict, outputs: dict, attributes: list) -> None:
    spec = call.spec
    outer, channels, inner = shapes.channel_dims(call.reference.shape, call.layout)
    if inner == 0:  # no elements per channel: the sums are empty, only per-channel outputs remain
        outer, inner = 0, 1
    form = "ncx" if inner > 1 else "nxc"
    kernel_info = call.variant(form)
    for tensor in spec.outputs:
        if tensor.kind == "channel" and not (tensor.requested_by and not call.flags[tensor.requested_by]):
            outputs[tensor.name] = call.output_array(tensor.name, (channels,))
    if channels == 0:
        return
    workspace = _workspace(call, kernel_info["name"], outer, channels, inner)
    args = [call.pointer(inputs[t.name], t.name) for t in spec.inputs]
    args += attributes
    args += [call.pointer(outputs[t.name], t.name) for t in spec.outputs]
    args.append(call.pointer(workspace, ""))
    dims = (outer, channels, inner) if form == "ncx" else (outer, channels)
    getattr(call.library.module.lib, kernel_info["name"])(*args, *dims)
