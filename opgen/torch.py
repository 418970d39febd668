"""opgen's ops as PyTorch custom ops: torch.ops.opgen.<op>, also opgen.torch.<op>.

Each op's schema comes from its spec: tensor inputs (optional ones as `Tensor?`), then,
keyword-only, attributes as float, bool, str, int or int[] and flags as `bool?`; an op of several outputs
returns a tuple, where an output not requested is an empty tensor. The CPU kernel is the op's
Python function on the tensors themselves (read over their memory, no copy); the fake kernel
runs the same checks on stand-in arrays of the tensors' shapes and dtypes, so torch.compile
traces the op and reports a bad call as the op does. An op whose spec has a [backward] table
gets an autograd formula that calls that backward op.

Importing this module registers the bundled ops; register(opgen.load(DIR), "namespace")
registers the ops of other specs.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import ml_dtypes
import numpy as np
import torch

import opgen
from opgen.runtime import OpLibrary, numpy_dtype
from opgen.specs import OpSpec
from opgen.validate import Checked

NAMESPACE = "opgen"
_SCHEMA_TYPES = {"f32": "float", "bool": "bool", "string": "str", "int": "int", "int list": "int[]"}
_TORCH_DTYPES: dict[np.dtype, torch.dtype] = {
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float16): torch.float16,
    np.dtype(ml_dtypes.bfloat16): torch.bfloat16,
    np.dtype(np.float64): torch.float64,
}
_libraries: dict[str, torch.library.Library] = {}  # kept alive: dropping one removes its ops


def schema(spec: OpSpec) -> str:
    """The op's torch.library schema, such as `hard_sigmoid(Tensor src, *, float alpha, float beta) -> Tensor`."""
    arguments = [f"Tensor? {t.name}=None" if t.optional else f"Tensor {t.name}" for t in spec.inputs]
    keywords = []
    for attribute in spec.attributes:
        kind = _SCHEMA_TYPES[attribute.type]
        keywords.append(f"{kind} {attribute.name}" + ("" if attribute.required else f"={_default(attribute.default)}"))
    keywords += [f"bool? {flag.name}=None" for flag in spec.flags]
    if keywords:
        arguments += ["*", *keywords]
    outputs = ", ".join("Tensor" for _ in spec.outputs)
    returns = outputs if len(spec.outputs) == 1 else f"({outputs})"
    return f"{spec.name}({', '.join(arguments)}) -> {returns}"


def _default(value: Any) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, str):
        if not re.fullmatch(r"[A-Za-z0-9_]*", value):
            raise ValueError(f"a string default {value!r} cannot be written in a torch schema")
        return f'"{value}"'
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(int(v)) for v in value) + "]"
    return repr(float(value))


def register(library: OpLibrary, namespace: str = NAMESPACE) -> dict[str, Any]:
    """Register every op of `library` as torch.ops.<namespace>.<op>; returns them by name."""
    if namespace in _libraries:
        raise ValueError(f"register(): namespace {namespace!r} is already registered")
    definitions = torch.library.Library(namespace, "DEF")
    _libraries[namespace] = definitions
    for spec in library.specs:
        qualified = f"{namespace}::{spec.name}"
        definitions.define(schema(spec))
        function = library.ops[spec.name]
        definitions.impl(spec.name, _kernel(spec, library, function), "CPU")
        torch.library.register_fake(qualified, _fake(spec, library, function), lib=definitions)
    namespace_ops = getattr(torch.ops, namespace)
    for spec in library.specs:
        if spec.backward is not None:
            backward_spec = next(s for s in library.specs if s.name == spec.backward.op)
            backward, setup = _autograd(spec, backward_spec, getattr(namespace_ops, spec.backward.op))
            torch.library.register_autograd(f"{namespace}::{spec.name}", backward, setup_context=setup, lib=definitions)
    return {spec.name: getattr(namespace_ops, spec.name) for spec in library.specs}


def _kernel(spec: OpSpec, library: OpLibrary, function: Any) -> Any:
    """The CPU kernel: the op's function on the tensors; outputs not requested as the fake
    kernel gives them (empty)."""
    fake = _fake(spec, library, function)

    def kernel(*args: Any, **kwargs: Any) -> Any:
        result = function(*args, **kwargs)
        if len(spec.outputs) == 1:
            return result
        if any(value is None for value in result):
            return tuple(empty if value is None else value for value, empty in zip(result, fake(*args, **kwargs)))
        return tuple(result)

    return kernel


def _fake(spec: OpSpec, library: OpLibrary, function: Any) -> Any:
    """Output shapes and dtypes of a call, from the op's own checks on stand-in arrays (no
    data). Outputs of the reference's shape keep its (possibly symbolic) sizes."""
    signature = inspect.signature(function)

    def fake(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        arguments.pop("out", None)
        tensors = {t.name: arguments[t.name] for t in spec.inputs}
        for name, tensor in tensors.items():
            if tensor is not None:
                stand_in = np.empty((), _numpy_dtype(tensor.dtype))
                arguments[name] = np.broadcast_to(stand_in, [int(d) for d in tensor.shape])
        checked = Checked(spec, library.dtype_names, arguments)
        reference = tensors[spec.reference]
        outputs = []
        for tensor in spec.outputs:
            dtype = _torch_dtype(numpy_dtype(library.table.dtypes[checked.row[tensor.name]].numpy))
            if tensor.requested_by and not checked.flags[tensor.requested_by]:
                outputs.append(reference.new_empty((0,), dtype=dtype))
            elif tensor.kind == "tensor" and spec.pattern != "binary":
                outputs.append(reference.new_empty(reference.shape, dtype=dtype))
            else:
                outputs.append(reference.new_empty(checked.output_shape(tensor.name), dtype=dtype))
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    return fake


def _autograd(spec: OpSpec, backward_spec: OpSpec, backward_op: Any) -> tuple[Any, Any]:
    """The backward and setup_context functions that run spec.backward.op for the gradients."""
    pairing = spec.backward
    assert pairing is not None
    input_names = [t.name for t in spec.inputs]
    output_names = [t.name for t in spec.outputs]
    saved = [(kind, name) for _, kind, name in pairing.inputs if kind in ("input", "output")]

    def setup_context(
        ctx: Any, inputs: tuple[Any, ...], output: Any, keyword_only_inputs: dict[str, Any] | None = None
    ) -> None:
        outputs = output if isinstance(output, tuple) else (output,)
        values = {"input": dict(zip(input_names, inputs)), "output": dict(zip(output_names, outputs))}
        ctx.save_for_backward(*(values[kind][name] for kind, name in saved))
        attributes = keyword_only_inputs or {}
        ctx.opgen_attributes = {
            name: attributes[value] if kind == "attribute" else value for name, kind, value in pairing.attributes
        }

    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        tensors = dict(zip(saved, ctx.saved_tensors))
        gradients = dict(zip(output_names, grads))
        arguments = {
            name: gradients[source] if kind == "gradient" else tensors[(kind, source)]
            for name, kind, source in pairing.inputs
        }
        result = backward_op(*(arguments.get(t.name) for t in backward_spec.inputs), **ctx.opgen_attributes)
        results = result if isinstance(result, tuple) else (result,)
        by_name = dict(zip([t.name for t in backward_spec.outputs], results))
        wanted = dict(pairing.gradients)
        return tuple(
            by_name[wanted[name]] if name in wanted and needed else None
            for name, needed in zip(input_names, ctx.needs_input_grad)
        )

    return backward, setup_context


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """The NumPy dtype of a torch dtype (by name beyond the float ones), for the checks to
    accept or name; a dtype NumPy lacks (such as float8 ones) becomes a void dtype of its
    size, which no spec supports."""
    for numpy_type, torch_type in _TORCH_DTYPES.items():
        if torch_type == dtype:
            return numpy_type
    try:
        return np.dtype(str(dtype).removeprefix("torch."))
    except TypeError:
        return np.dtype(f"V{dtype.itemsize}")


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return _TORCH_DTYPES[np.dtype(dtype)]


ops = register(opgen.bundled)
globals().update(ops)
__all__ = ["register", "schema", "ops", "NAMESPACE", *ops]
