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
import os
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import ml_dtypes
import numpy as np

from opgen import c_api, plan
from opgen.specs import MAX_RANK, OpSpec, load_specs
from opgen.validate import Checked

PLAN_CACHE_SIZE = 512  # plans kept per op
FAST_PLANS = 8  # plans the fast path tries per attribute values, most recent first
ALIGNMENT = 64  # bytes; large outputs opgen allocates start on a cache line, so streaming stores apply
STREAM_ALIGN_BYTES = 1 << 20  # outputs this large get the alignment
SHARED_MEMORY_WORK = 1 << 16  # cases np.shares_memory may try before the answer is "may share"


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

    def __init__(self, spec_dir: Path, module: Any = None, ops: list[str] | None = None) -> None:
        """`module` (with .ffi and .lib): run these instead of building the specs' cffi module;
        `ops`: only these ops of `spec_dir`."""
        self.spec_dir = Path(spec_dir)
        self.op_names = ops
        self.table, self.specs = load_specs(self.spec_dir, ops)
        self.variants = {spec.name: [v.name for v in plan.variants(spec, self.table)] for spec in self.specs}
        self.dtype_names = {numpy_dtype(d.numpy): d.name for d in self.table.dtypes.values()}
        # string attribute values -> their C enum values
        self.enum_values = {e["type"]: {v: i for i, (_, v) in enumerate(e["members"])} for e in c_api.enums(self.specs)}
        self._module: Any = module
        # the info() keys whose values `opgen tune` kept for this machine, once the module loads
        self.tuned: tuple[str, ...] = ()
        if module is not None:
            self.tuned = _apply_tuning(module.lib)
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
            from opgen import bundle
            from opgen.compile import build_module, load_module

            bundled = self.spec_dir.resolve() == bundle.SPECS and self.op_names is None
            found = bundle.prebuilt("module") if bundled else None
            if found is None:
                from opgen.render import render_library

                found = build_module(render_library(self.spec_dir, ops=self.op_names))
            self._module = load_module(found)
            _check_target_setting()
            self.tuned = _apply_tuning(self._module.lib)
        return self._module


def _apply_tuning(lib: Any) -> tuple[str, ...]:
    """`opgen tune`'s thresholds for this machine into a module's runtime, where they apply (when
    the module loads: `import opgen` compiles and loads nothing); the info() keys of those set."""
    from opgen import tune

    applied = []
    threshold = tune.threshold_for(lib)
    if threshold is not None:
        lib.opgen_set_parallel_threshold(threshold)
        applied.append("parallel_threshold")
    stream = tune.stream_threshold_for(lib)
    if stream is not None:
        lib.opgen_set_stream_threshold(stream)
        applied.append("stream_from_bytes")
    return tuple(applied)


def _check_target_setting() -> None:
    """The C dispatcher ignores an OPGEN_CPU_TARGET it does not know: say so, once."""
    value = os.environ.get("OPGEN_CPU_TARGET")
    names = [target["name"] for target in plan.TARGETS]
    if value is not None and value not in names and value not in _warned_targets:
        _warned_targets.add(value)
        warnings.warn(
            f"opgen: OPGEN_CPU_TARGET={value!r} is not one of {', '.join(names)}; it is ignored",
            RuntimeWarning,
            stacklevel=3,
        )


_warned_targets: set[str] = set()


class _Op:
    """What a generated function needs: its spec, library, result type and plan cache."""

    def __init__(self, library: OpLibrary, spec: OpSpec) -> None:
        self.library = library
        self.spec = spec
        self.plans: dict[tuple[Any, ...], Plan] = {}
        # per attribute values: the plans of exact-ndarray calls, most recent first (fastcall.c)
        self.fast: dict[tuple[Any, ...], list[Any]] = {}
        self.namespace: dict[str, Any] = {}  # the generated function's globals
        self.single = len(spec.outputs) == 1
        camel = "".join(part.title() for part in spec.name.split("_"))
        # the named tuple of the results; None for one output
        self.result: Callable[..., tuple[Any, ...]] | None = (
            None if self.single else collections.namedtuple(f"{camel}Result", [t.name for t in spec.outputs])
        )


def make_function(library: OpLibrary, spec: OpSpec) -> Any:
    """A real Python function with the op's signature, written from the spec.

    Its body is the fast path of a call that repeats a checked one (same attribute values and
    flags, then, in fastcall.c, the same array types, dtypes and shapes): the plans made for
    those attributes get the arrays, and the first that fits allocates the outputs (or takes
    `out=`) and calls opgen_<op>_with_arrays. Anything else (a first call, inputs that are not
    C-contiguous arrays, a bad `out`, a status from C) goes to _call, which checks and reports."""
    params = [t.name if not t.optional else f"{t.name}=None" for t in spec.inputs]
    params.append("*")
    params += [a.name if a.required else f"{a.name}=_default_{a.name}" for a in spec.attributes]
    params += [f"{f.name}=None" for f in spec.flags]
    params.append("out=None")

    def pack(names: list[str]) -> str:
        return "(" + "".join(f"{n}, " for n in names) + ")"

    # locals start with "opgen": spec names may not (specs.py)
    settings = [a.name for a in spec.attributes] + [f.name for f in spec.flags]
    key = pack([f"{n}, {n}.__class__" for n in settings])
    inputs = pack([t.name for t in spec.inputs])
    # an int list given as a list is taken as a tuple: hashable, so its plans are kept
    lists = [
        f"    if {a.name}.__class__ is list:\n        {a.name} = tuple({a.name})"
        for a in spec.attributes
        if a.type == "int list"
    ]
    body = [
        f"def {spec.name}({', '.join(params)}):",
        *lists,
        "    try:",
        f"        opgen_plans = _fast[{key}]",
        "    except (KeyError, TypeError):  # a first call, or an unhashable value the checks report",
        "        pass",
        "    else:",
        f"        opgen_result = _fast_call(opgen_plans, {', '.join(t.name for t in spec.inputs)}, out)",
        "        if opgen_result is not None:",
        "            return opgen_result",
        f"    return _call(_op, {inputs}, {pack([a.name for a in spec.attributes])}, "
        f"{pack([f.name for f in spec.flags])}, {key}, out)",
    ]
    op = _Op(library, spec)
    namespace: dict[str, Any] = {"_call": _call, "_op": op, "_fast": op.fast, "_fast_call": _fast_call}
    namespace.update(
        {
            f"_default_{a.name}": tuple(a.default) if isinstance(a.default, list) else a.default
            for a in spec.attributes
            if not a.required
        }
    )
    exec(compile("\n".join(body) + "\n", f"<opgen {spec.name}>", "exec"), namespace)  # names: checked identifiers
    function = namespace[spec.name]
    function.__doc__ = _docstring(spec)
    function.__module__ = "opgen"
    op.namespace = namespace
    return function


def _fast_call(plans: list[Any], *arrays: Any) -> None:
    """Replaced by fastcall.c's call once it is built (the first plan): until then, no plan."""
    return None


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


def _call(
    op: _Op,
    inputs: tuple[Any, ...],
    attributes: tuple[Any, ...],
    flags: tuple[Any, ...],
    settings: tuple[Any, ...],
    out: Any,
) -> Any:
    """A call the fast path did not take; `settings` are its attribute values and flags with
    their types (the fast path's key). Inputs and `out` that are not NumPy arrays but export
    DLPack are read as arrays over their memory; given a torch.Tensor, the results are tensors."""
    if any(x.__class__ is not np.ndarray and x is not None for x in inputs) or _foreign(out):
        torch = _torch_given(inputs, out)
        names = [t.name for t in op.spec.inputs]
        arrays = tuple(as_array(x, op.spec.name, name) for x, name in zip(inputs, names))
        result = _fast_or_checked_call(op, arrays, attributes, flags, settings, _as_arrays(op, out))
        return result if torch is None else _to_torch(op, torch, result, out)
    return _checked_call(op, inputs, attributes, flags, settings, out)


def _fast_or_checked_call(
    op: _Op,
    inputs: tuple[Any, ...],
    attributes: tuple[Any, ...],
    flags: tuple[Any, ...],
    settings: tuple[Any, ...],
    out: Any,
) -> Any:
    """A call on arrays read from other objects: the fast path when it takes them (the arrays
    are plain ndarrays now), else the checked one."""
    try:
        plans = op.fast[settings]
    except (KeyError, TypeError):  # no plan yet, or an unhashable value the checks report
        pass
    else:
        result = op.namespace["_fast_call"](plans, *inputs, out)
        if result is not None:
            return result
    return _checked_call(op, inputs, attributes, flags, settings, out)


def _foreign(out: Any) -> bool:
    """Whether `out` holds something other than NumPy arrays and None."""
    if out is None or out.__class__ is np.ndarray:
        return False
    return not isinstance(out, tuple) or any(x is not None and x.__class__ is not np.ndarray for x in out)


def _torch_given(inputs: tuple[Any, ...], out: Any) -> Any:
    """The torch module when an input or output is a torch.Tensor, else None. A tensor can only
    exist once torch is imported, so torch is never imported here."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    given = [*inputs, *(out if isinstance(out, tuple) else (out,))]
    return torch if any(isinstance(x, torch.Tensor) for x in given) else None


def as_array(value: Any, op_name: str, argument: str) -> Any:
    """`value` as a NumPy array over the same memory when it is a torch.Tensor or exports
    DLPack; anything else as it is (the checks name what is wrong with it)."""
    if value is None or isinstance(value, np.ndarray):
        return value
    torch = sys.modules.get("torch")
    try:
        if torch is not None and isinstance(value, torch.Tensor):
            return _torch_as_array(torch, value)
        if hasattr(value, "__dlpack__"):
            return np.from_dlpack(value)
    except (BufferError, RuntimeError, TypeError, ValueError) as error:
        raise TypeError(f"{op_name}(): {argument}: cannot be read as an array through DLPack: {error}") from None
    return value


def _torch_as_array(torch: Any, tensor: Any) -> np.ndarray:
    """A CPU tensor as an array over its memory: Tensor.numpy(), which shares it as
    np.from_dlpack does, at a tenth of the cost. NumPy has no bfloat16 of its own, so a bf16
    tensor is read as int16 (the same bits, strides and memory) and viewed as bf16."""
    tensor = tensor.detach()  # a tensor that requires grad shares no memory with NumPy
    if tensor.device.type != "cpu":
        raise TypeError(f"must be on the CPU, not {tensor.device}")
    if tensor.dtype == torch.bfloat16:
        array: np.ndarray = tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return array
    array = tensor.numpy()
    return array


def _as_arrays(op: _Op, out: Any) -> Any:
    if not _foreign(out):
        return out
    if not isinstance(out, tuple):
        return as_array(out, op.spec.name, f"out ({op.spec.outputs[0].name})" if op.single else "out")
    return (
        tuple(as_array(x, op.spec.name, f"out ({t.name})") for x, t in zip(out, op.spec.outputs))
        + out[len(op.spec.outputs) :]
    )


def array_to_torch(torch: Any, array: np.ndarray) -> Any:
    """A tensor over the memory of `array` (bf16 through int16, which torch.from_numpy takes)."""
    if array.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def _to_torch(op: _Op, torch: Any, result: Any, given: Any) -> Any:
    """The results as tensors: the caller's own `out` tensors where given, else new ones."""
    if op.single:
        mine = given[0] if isinstance(given, tuple) and given else given
        return mine if isinstance(mine, torch.Tensor) else array_to_torch(torch, result)
    given = given if isinstance(given, tuple) else (None,) * len(result)
    assert op.result is not None  # not op.single
    return op.result(
        *(
            mine if isinstance(mine, torch.Tensor) else None if array is None else array_to_torch(torch, array)
            for array, mine in zip(result, given)
        )
    )


def _checked_call(
    op: _Op,
    inputs: tuple[Any, ...],
    attributes: tuple[Any, ...],
    flags: tuple[Any, ...],
    settings: tuple[Any, ...],
    out: Any,
) -> Any:
    try:
        key = (*((x.__class__, None if x is None else (x.dtype, x.shape)) for x in inputs), *settings)
        found = op.plans.get(key)
    except (AttributeError, TypeError):  # not arrays, or an unhashable value: the checks report
        found = key = None
    if key is not None and any(_is_float_zero(value) for value in settings):
        found = key = None  # 0.0 == -0.0: a cached plan would give the other zero's sign
    if found is None:
        found = _make_plan(op, inputs, attributes, flags)
        if key is not None:
            if len(op.plans) >= PLAN_CACHE_SIZE:
                op.plans.clear()
                op.fast.clear()
            op.plans[key] = found
    if key is not None and found.capsule is not None and all(x.__class__ in (np.ndarray, type(None)) for x in inputs):
        # only exact ndarrays take the fast path: their data are their elements
        plans = op.fast.setdefault(settings, [])
        if not plans or plans[0] is not found.capsule:
            if found.capsule in plans:
                plans.remove(found.capsule)
            plans.insert(0, found.capsule)
            del plans[FAST_PLANS:]
    outputs = found.run(inputs, out)
    if op.single:
        return outputs[0]
    assert op.result is not None  # not op.single
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
    _, arguments, views = found.arguments(inputs, values["out"])
    call = functools.partial(found.function, *arguments)
    vars(call)["views"] = views  # the data stay alive with the call
    return call


def _make_plan(op: _Op, inputs: tuple[Any, ...], attributes: tuple[Any, ...], flags: tuple[Any, ...]) -> Plan:
    spec = op.spec
    arguments = dict(zip([t.name for t in spec.inputs], inputs))
    arguments.update(zip([a.name for a in spec.attributes], attributes))
    arguments.update(zip([f.name for f in spec.flags], flags))
    checked = Checked(spec, op.library.dtype_names, arguments)
    return Plan(op, checked, inputs)


class Plan:
    """Everything a checked call needs to run: input preparation, outputs, the C call.

    The call goes through the op's C entry point opgen_<op>_with_arrays (fastcall.c calls the
    same), which checks the call again, picks the specialized kernel and runs it. The operand
    descriptors (dtype, shape) and attribute values are written once, here; the data pointers
    are passed per call."""

    def __init__(self, op: _Op, checked: Checked, inputs: tuple[Any, ...]) -> None:
        library, spec = op.library, op.spec
        self.name = spec.name
        table = library.table
        self.ffi = ffi = library.module.ffi
        self.lib = library.module.lib
        self.function = getattr(self.lib, f"opgen_{spec.name}_with_arrays")
        # per input: used? (ignored and absent inputs are not)
        self.used = [checked.inputs[t.name] is not None for t in spec.inputs]
        self.input_names = [t.name for t in spec.inputs]
        # per output: (name, shape, dtype, requested?)
        self.outputs = []
        for tensor in spec.outputs:
            requested = not (tensor.requested_by and not checked.flags[tensor.requested_by])
            dtype = numpy_dtype(table.dtypes[checked.row[tensor.name]].numpy)
            self.outputs.append((tensor.name, checked.output_shape(tensor.name), dtype, requested))
        codes = {name: index for index, name in enumerate(table.dtypes)}
        described = [
            (codes[checked.row[t.name]], cast(np.ndarray, checked.inputs[t.name]).shape) if used else None
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
        doubles = [
            d
            for a, c_value in zip(spec.attributes, self.attributes)
            for d in _attribute_doubles(a, checked.attributes[a.name], c_value)
        ]
        self.doubles = tuple(doubles)
        self.numbers = ffi.new("double[]", doubles or [0.0])
        self.allocate: list[Callable[[], np.ndarray | None]] = [
            _allocator(shape, dtype) if requested else type(None)  # calling it gives None
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
        self.capsule = self._fast_plan(op, inputs)

    def _raise(self, status: int) -> None:
        if status == 0:
            return
        message = self.ffi.string(self.lib.opgen_last_error()).decode()
        message = message.replace(f"opgen_{self.name}: ", f"{self.name}(): ", 1)  # in Python's words
        kind = {1: TypeError, 2: TypeError, 11: MemoryError}.get(status, ValueError)
        raise kind(message)

    def _fast_plan(self, op: _Op, inputs: tuple[Any, ...]) -> Any:
        """This plan for fastcall.c (None without it): what a repeated call must match, and
        the C entry point opgen_<op>_with_arrays with the operands described here."""
        fast = _fastcall()
        if fast is None:
            return None
        op.namespace["_fast_call"] = fast.call

        def address(pointer: Any) -> int:
            return int(self.ffi.cast("uintptr_t", pointer))

        described = tuple(
            (0, None, None) if x is None else (1 if used else 2, x.dtype, x.shape) for x, used in zip(inputs, self.used)
        )
        outputs = tuple(
            (dtype, shape, new) if requested else None
            for (_, shape, dtype, requested), new in zip(self.outputs, self.allocate)
        )
        return fast.make_plan(
            address(self.ffi.addressof(self.lib, f"opgen_{self.name}_with_arrays")),
            address(self.operands),
            self.operands,
            described,
            outputs,
            self.doubles,
            self.workspace_bytes,
            op.result,
        )

    def _workspace(self) -> Any:
        """This thread's workspace, kept for the plan (no page faults per call), as a C pointer."""
        found = getattr(self.local, "workspace", None)
        if found is None:
            buffer = np.empty(self.workspace_bytes, dtype=np.uint8)
            found = self.local.workspace = (buffer, self.ffi.from_buffer(buffer))
        return found[1]

    def _prepare(self, inputs: tuple[Any, ...]) -> list[np.ndarray | None]:
        prepared = []
        for array, used, name in zip(inputs, self.used, self.input_names):
            if used and not (array.flags.c_contiguous and array.flags.aligned):
                # a copy (not np.ascontiguousarray: it turns 0-d arrays into 1-d ones); C may only
                # read elements at addresses aligned to their type
                try:
                    array = array.copy(order="C")
                except MemoryError:  # a view with zero strides can stand for far more than memory
                    raise ValueError(
                        f"{self.name}(): {name}: this view of shape {array.shape} needs a dense copy of "
                        f"{array.size * array.itemsize} bytes, which cannot be allocated"
                    ) from None
            prepared.append(array if used else None)
        return prepared

    def _outputs(self, out: Any) -> list[np.ndarray | None]:
        given = self._check_out(out) if out is not None else [None] * len(self.outputs)
        return [new() if array is None else array for array, new in zip(given, self.allocate)]

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
                raise TypeError(
                    f"{where}: must be a NumPy array or an object with __dlpack__, not {type(array).__name__}"
                )
            if array.dtype != dtype or array.shape != shape:
                raise ValueError(
                    f"{where}: must have shape {shape} and dtype {dtype}, not {array.shape} and {array.dtype}"
                )
            if not (array.flags.c_contiguous and array.flags.writeable and array.flags.aligned):
                raise ValueError(f"{where}: must be C-contiguous, writeable and aligned to its dtype")
        return list(out)  # the C API rejects outputs that overlap another operand

    def arguments(
        self, inputs: tuple[Any, ...], out: Any
    ) -> tuple[list[np.ndarray | None], tuple[Any, ...], list[Any]]:
        """The outputs of a call, the arguments of its C entry point, and the buffer views the
        data pointers point into (keep them alive until the call returns)."""
        prepared, outputs = self._prepare(inputs), self._outputs(out)
        if out is not None:
            self._check_unseen_overlap(inputs, prepared, outputs)
        arrays = [*prepared, *outputs]
        from_buffer, null = self.ffi.from_buffer, self.ffi.NULL
        views = [null if array is None else from_buffer(array) for array in arrays]
        pointers = self.ffi.new("void *[]", views)
        arguments = (self.operands, pointers, self.numbers, self.workspace(), self.workspace_bytes)
        return arrays[len(self.used) :], arguments, views

    def _check_unseen_overlap(
        self, inputs: tuple[Any, ...], prepared: list[np.ndarray | None], outputs: list[np.ndarray | None]
    ) -> None:
        """The C API rejects an output that overlaps an input it is given, but it is given copies
        of inputs that were not dense and nothing of inputs the call ignores (and will not
        write): the caller's own arrays are checked here, element by element."""
        for original, array, input_name in zip(inputs, prepared, self.input_names):
            if original is None or array is original:
                continue
            for output, (name, *_) in zip(outputs, self.outputs):
                if output is None or not output.size or not original.size:
                    continue
                try:
                    # numpy's stub takes only -1 and 0 (its two named bounds); any count is allowed
                    shared = np.shares_memory(output, original, max_work=SHARED_MEMORY_WORK)  # type: ignore[arg-type]
                    verdict = "shares memory"
                except np.exceptions.TooHardError:  # too many cases to decide: say what is known
                    shared, verdict = True, "may share memory (too costly to decide)"
                if shared:
                    raise ValueError(f"{self.name}(): {name}: {verdict} with {input_name}")

    def run(self, inputs: tuple[Any, ...], out: Any) -> list[np.ndarray | None]:
        outputs, arguments, _views = self.arguments(inputs, out)
        self._raise(self.function(*arguments))
        return outputs


def _allocator(shape: tuple[int, ...], dtype: np.dtype) -> Callable[[], np.ndarray]:
    """A new output array of `shape` and `dtype` each call: from plan.ALIGNED_OUTPUT_BYTES on a
    64-byte boundary (fastcall.c's allocation handler; without that module, from
    STREAM_ALIGN_BYTES by aligned_empty), else where NumPy puts it."""
    nbytes = math.prod(shape) * dtype.itemsize
    fast = _fastcall() if nbytes >= plan.ALIGNED_OUTPUT_BYTES else None
    if fast is not None:
        return functools.partial(fast.allocated, functools.partial(np.empty, shape, dtype))
    return functools.partial(aligned_empty if nbytes >= STREAM_ALIGN_BYTES else np.empty, shape, dtype)


@functools.cache
def _fastcall() -> Any:
    """fastcall.c's module, prebuilt or built (once per cache key) on first use; None if it cannot be."""
    from opgen import bundle
    from opgen.compile import BuildError, build_fastcall, load_module

    try:
        return load_module(bundle.prebuilt("fastcall") or build_fastcall())
    except (BuildError, OSError, ImportError) as error:
        warnings.warn(f"opgen: repeated calls take the checked path: {error}", RuntimeWarning, stacklevel=3)
        return None


def _is_float_zero(value: Any) -> bool:
    return isinstance(value, (float, np.floating)) and value == 0


def _c_attribute(library: OpLibrary, attribute: Any, value: Any) -> Any:
    """An attribute value as the C API takes it: enum value, 0/1, an int, or float."""
    if attribute.type == "string":
        return library.enum_values[f"opgen_{attribute.name}"][value]
    if attribute.type in ("bool", "int"):
        return int(value)
    if attribute.type == "int list":
        values = [int(v) for v in value]
        return library.module.ffi.new("opgen_int_list *", {"count": len(values), "values": values})[0]
    return float(value)


def _attribute_doubles(attribute: Any, value: Any, c_value: Any) -> list[float]:
    """An attribute as opgen_<op>_with_arrays takes it: its C value as a double, or for an int
    list its count and then MAX_RANK values (the unused ones 0)."""
    if attribute.type == "int list":
        values = [float(int(v)) for v in value]
        return [float(len(values)), *values, *[0.0] * (MAX_RANK - len(values))]
    return [float(c_value)]
