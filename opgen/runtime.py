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

from opgen import plan, shapes
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

    def __init__(self, spec_dir: Path) -> None:
        self.spec_dir = Path(spec_dir)
        self.table, self.specs = load_specs(self.spec_dir)
        self.variants = {
            spec.name: {v.name: plan.kernel(v, self.table) for v in plan.variants(spec, self.table)}
            for spec in self.specs
        }
        self.dtype_names = {numpy_dtype(d.numpy): d.name for d in self.table.dtypes.values()}
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
    """Everything a checked call needs to run: input preparation, outputs, kernel calls."""

    def __init__(self, op: _Op, checked: Checked) -> None:
        library, spec = op.library, op.spec
        self.op = op
        self.name = spec.name
        table = library.table
        reference = checked.reference.shape
        self.ffi = library.module.ffi
        self.lib = library.module.lib
        # per input: (use it?, shape to broadcast to or None, C type)
        self.inputs = []
        for tensor in spec.inputs:
            array = checked.inputs[tensor.name]
            used = array is not None
            broadcast = reference if used and tensor.kind == "tensor" and array.shape != reference else None
            c_type = table.dtypes[checked.row[tensor.name]].c_type + "[]" if used else None
            self.inputs.append((used, broadcast, c_type))
        # per output: (name, shape, dtype, C type, requested?)
        self.outputs = []
        for tensor in spec.outputs:
            requested = not (tensor.requested_by and not checked.flags[tensor.requested_by])
            dtype = table.dtypes[checked.row[tensor.name]]
            self.outputs.append(
                (
                    tensor.name,
                    checked.output_shape(tensor.name),
                    numpy_dtype(dtype.numpy),
                    dtype.c_type + "[]",
                    requested,
                    tensor.kind,
                )
            )
        numbers = checked.variant_name(plan.dtype_tag(checked.row), None if spec.pattern == "elementwise" else "ncx")
        used_attributes = library.variants[spec.name][numbers]["attributes"]
        self.attributes = [float(np.float32(checked.attributes[a])) for a in used_attributes]
        # The plan's key records each input's dtype, shape and layout, so whether any needs
        # preparing (ignored, broadcast, strided or misaligned) is known here, once.
        self.copy_needed = any(
            not used or broadcast is not None or not (a.flags.c_contiguous and a.flags.aligned)
            for (used, broadcast, _), a in zip(self.inputs, (checked.inputs[t.name] for t in spec.inputs))
        )
        self.allocate = [
            (requested, shape, dtype, math.prod(shape) * dtype.itemsize >= STREAM_ALIGN_BYTES)
            for _, shape, dtype, _, requested, _ in self.outputs
        ]
        self.pattern = spec.pattern
        self.scratch_arrays = threading.local()  # per Python thread: kernels run without the GIL
        tag = plan.dtype_tag(checked.row)
        if spec.pattern == "elementwise":
            self.kernel = getattr(self.lib, checked.variant_name(tag, None))
            self.count = math.prod(reference)
        elif spec.pattern == "broadcast_reduce":
            operand = next(t for t in spec.inputs if t.kind == "channel")
            self.operand_index = spec.inputs.index(operand)
            form, expanded = checked.forms[operand.name]
            self.sums_size = math.prod(expanded)
            self.pieces = shapes.calls(reference, expanded) if math.prod(reference) else []
            self.narrow = {
                i: getattr(self.lib, f"opgen_narrow_{checked.row[t.name]}")
                for i, t in enumerate(spec.outputs)
                if t.kind == "channel"
            }
            # A short inner dim (H*W < one block) leaves the ncx loop little to vectorize: run the
            # nxc loop over [outer][channels * inner] with the operand repeated along inner, and
            # fold the sums back (fixed order: the `inner` partial sums of a channel, in turn).
            self.repeat = 1
            if len(self.pieces) == 1 and self.pieces[0].form == "ncx" and self.pieces[0].inner < plan.BLOCK:
                piece = self.pieces[0]
                self.repeat = piece.inner
                self.pieces = [shapes.Call("nxc", 0, 0, piece.outer, piece.channels * piece.inner, 1)]
            if self.pieces:
                first = self.pieces[0]
                name = checked.variant_name(tag, first.form)
                self.kernel = getattr(self.lib, name)
                inner = first.inner if first.form == "ncx" else 1
                self.workspace = int(getattr(self.lib, f"{name}_workspace_size")(first.outer, first.channels, inner))
        else:
            outer, channels, inner = shapes.channel_dims(reference, checked.layout)
            if inner == 0:  # no elements per channel: the sums are empty, only per-channel outputs remain
                outer, inner = 0, 1
            form = "ncx" if inner > 1 else "nxc"
            name = checked.variant_name(tag, form)
            self.kernel = getattr(self.lib, name)
            self.dims = (outer, channels, inner) if form == "ncx" else (outer, channels)
            self.channels = channels
            self.workspace = int(getattr(self.lib, f"{name}_workspace_size")(outer, channels, inner))

    def scratch(self, name: str, size: int) -> np.ndarray:
        """A float64 buffer of `size` elements, kept for this plan and Python thread (no page faults per call)."""
        found = getattr(self.scratch_arrays, name, None)
        if found is None or found.size < size:
            found = np.empty(max(1, size), dtype=np.float64)
            setattr(self.scratch_arrays, name, found)
        return found[:size]

    def pointer(self, array: np.ndarray | None, c_type: str) -> Any:
        """A C pointer to the array's data (`c_type` is the C array type, such as "float[]")."""
        if array is None or array.size == 0:
            return self.ffi.NULL
        return self.ffi.from_buffer(c_type, array)

    def _prepare(self, inputs: tuple) -> list[np.ndarray | None]:
        prepared = []
        for array, (used, broadcast, _) in zip(inputs, self.inputs):
            if not used:
                prepared.append(None)
                continue
            if broadcast is not None:
                array = np.broadcast_to(array, broadcast)
            if not (array.flags.c_contiguous and array.flags.aligned):
                # a copy (not np.ascontiguousarray: it turns 0-d arrays into 1-d ones); C may only
                # read elements at addresses aligned to their type
                array = array.copy(order="C")
            prepared.append(array)
        return prepared

    def _outputs(self, out: Any, inputs: Any) -> list[np.ndarray | None]:
        given = self._check_out(out, inputs) if out is not None else None
        arrays: list[np.ndarray | None] = []
        for index, (requested, shape, dtype, big) in enumerate(self.allocate):
            if not requested:
                arrays.append(None)
            elif given is not None and given[index] is not None:
                arrays.append(given[index])
            else:
                arrays.append(aligned_empty(shape, dtype) if big else np.empty(shape, dtype))
        return arrays

    def _check_out(self, out: Any, inputs: list[np.ndarray | None]) -> list[Any] | None:
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
        for array, (name, shape, dtype, _, requested, _) in zip(out, self.outputs):
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
            others = [x for x in inputs if x is not None] + [x for x in out if x is not None and x is not array]
            if any(np.may_share_memory(array, other) for other in others):
                raise ValueError(f"{where}: must not overlap an input or another output")
        return list(out)

    def run(self, inputs: tuple, out: Any) -> list[np.ndarray | None]:
        prepared = self._prepare(inputs) if self.copy_needed else inputs
        outputs = self._outputs(out, prepared)
        pointers = [self.pointer(array, c_type) for array, (_, _, c_type) in zip(prepared, self.inputs)]
        if self.pattern == "elementwise":
            if self.count:
                results = [self.pointer(a, o[3]) for a, o in zip(outputs, self.outputs)]
                self.kernel(*pointers, *self.attributes, *results, self.count)
        elif self.pattern == "broadcast_reduce":
            self._run_broadcast_reduce(prepared, pointers, outputs)
        elif self.channels:
            workspace = self.scratch("workspace", self.workspace)
            results = [self.pointer(a, o[3]) for a, o in zip(outputs, self.outputs)]
            self.kernel(*pointers, *self.attributes, *results, self.pointer(workspace, "double[]"), *self.dims)
        return outputs

    def _run_broadcast_reduce(self, prepared: list, pointers: list, outputs: list) -> None:
        if self.repeat > 1:
            operand = prepared[self.operand_index]
            repeated = np.repeat(operand.reshape(-1), self.repeat)
            pointers = list(pointers)
            pointers[self.operand_index] = self.pointer(repeated, self.inputs[self.operand_index][2])
        sums = {}
        for index, o in enumerate(self.outputs):
            if o[5] == "channel":
                sums[index] = self.scratch(f"sums{index}", self.sums_size * self.repeat)
                sums[index].fill(0)
        if self.pieces:
            workspace = self.pointer(self.scratch("workspace", self.workspace), "double[]")
            results = [
                self.pointer(sums[i], "double[]") if i in sums else self.pointer(a, o[3])
                for i, (a, o) in enumerate(zip(outputs, self.outputs))
            ]
            channel = [i in sums for i in range(len(results))]
            for piece in self.pieces:
                if piece.offset == 0 and piece.operand_offset == 0:
                    args = [*pointers, *self.attributes, *results]
                else:  # a leading dim the kernel does not cover: shift every pointer to this piece
                    args = [
                        p + (piece.operand_offset if i == self.operand_index else piece.offset)
                        for i, p in enumerate(pointers)
                    ]
                    args += self.attributes
                    args += [r + (piece.operand_offset if channel[i] else piece.offset) for i, r in enumerate(results)]
                args.append(workspace)
                if piece.form == "ncx":
                    self.kernel(*args, piece.outer, piece.channels, piece.inner)
                else:
                    self.kernel(*args, piece.outer, piece.channels)
        for index, total in sums.items():
            target = outputs[index]
            if self.repeat > 1:
                folded = total[0 :: self.repeat].copy()
                for step in range(1, self.repeat):
                    folded += total[step :: self.repeat]
                total = folded
            if target.size:  # double -> f32 -> dtype, in C: the same roundings as the kernels' stores
                self.narrow[index](
                    self.pointer(total, "double[]"), self.pointer(target, self.outputs[index][3]), target.size
                )
