"""Check one call of an op against every rule of its spec, before any kernel runs.

The result depends only on the dtypes, shapes, attribute values and flags of the call, so the
run-time caches it (see runtime.py) and checks each new combination once.
"""

from __future__ import annotations

import numbers
from typing import Any, NoReturn, cast

import numpy as np

from opgen import binary, shapes
from opgen.specs import AXES_ROLE, AXIS_ROLES, KEEP_DIMS_ROLE, MAX_RANK, OpSpec, check_attribute_value


class Checked:
    """A call whose arguments obey the spec: attributes, flags, dtype row, layout and shape forms."""

    def __init__(self, spec: OpSpec, dtype_names: dict[np.dtype, str], arguments: dict[str, Any]) -> None:
        self.spec = spec
        self.name = spec.name
        self.attributes = self._attributes(arguments)
        self.flags = self._flags(arguments)
        self.inputs = self._inputs(arguments)
        self.row = self._dtype_row(dtype_names)
        self.layout = self.attributes.get(spec.layout_attribute.name) if spec.layout_attribute else spec.layout
        self.reference = cast(np.ndarray, self.inputs[spec.reference])  # a tensor input: required (specs.py)
        self._check_ranks()
        self.line_axes = self._line_axes()
        self.reduced_axes = self._reduced_axes()
        self.forms = self._shapes()

    def fail(self, kind: type[Exception], argument: str, message: str) -> NoReturn:
        raise kind(f"{self.name}(): {argument}: {message}")

    def _attributes(self, arguments: dict[str, Any]) -> dict[str, Any]:
        values = {}
        for attribute in self.spec.attributes:
            value = arguments[attribute.name]
            problem = check_attribute_value(attribute, value)
            if problem:
                is_bool = isinstance(value, (bool, np.bool_))
                wrong_type = (
                    (attribute.type == "int list") != isinstance(value, (list, tuple))
                    or (attribute.type == "int list" and "must be a list of integers" in problem)
                    or not isinstance(value, (numbers.Real, np.bool_, str, list, tuple))
                    or (attribute.type == "bool") != is_bool
                    or (attribute.type == "string") != isinstance(value, str)
                    or (attribute.type == "int" and not isinstance(value, numbers.Integral))
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
            elif not isinstance(value, (bool, np.bool_)):
                self.fail(TypeError, flag.name, f"must be True or False, not {value!r}")
            values[flag.name] = bool(value)
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
                self.fail(
                    TypeError,
                    tensor.name,
                    f"must be a NumPy array or an object with __dlpack__, not {type(value).__name__}",
                )
            self._check_array(tensor.name, value)
            arrays[tensor.name] = value
        # every given array obeys the rules (self.given); an input the spec ignores without its
        # flag is then left out (taken as its default)
        self.given = dict(arrays)
        for tensor in self.spec.inputs:
            if tensor.ignored_unless and not self.flags[tensor.ignored_unless]:
                arrays[tensor.name] = None
        return arrays

    def _check_array(self, name: str, value: np.ndarray) -> None:
        """An array of the right type a kernel still cannot take: a mask it would ignore."""
        if isinstance(value, np.ma.MaskedArray):
            self.fail(
                TypeError,
                name,
                "masked arrays are not supported (a kernel would ignore the mask): pass .filled(value) or .data",
            )

    def _dtype_row(self, dtype_names: dict[np.dtype, str]) -> dict[str, str]:
        names: dict[str, str] = {}
        for name, array in self.given.items():
            if array is None:
                continue
            if array.dtype not in dtype_names:
                supported = ", ".join(str(d) for d in dtype_names)
                self.fail(TypeError, name, f"dtype {array.dtype} is not supported (supported: {supported})")
            names[name] = dtype_names[array.dtype]
        for row in self.spec.dtypes:
            if all(row[name] == dtype for name, dtype in names.items()):
                return row
        given = ", ".join(f"{name} {dtype}" for name, dtype in names.items())
        allowed = "; ".join(", ".join(f"{n} {row[n]}" for n in names) for row in self.spec.dtypes)

        # blame the one input whose dtype alone breaks every row, if there is one
        def fits_without(name: str) -> bool:
            return any(all(row[o] == d for o, d in names.items() if o != name) for row in self.spec.dtypes)

        culprits = [name for name in names if fits_without(name)]
        blamed = culprits[0] if len(culprits) == 1 else next(iter(names))
        self.fail(TypeError, blamed, f"the dtype combination ({given}) is not supported; supported: {allowed}")
        raise AssertionError  # unreachable: fail raises

    def _check_ranks(self) -> None:
        spec = self.spec
        rank = self.reference.ndim
        if rank < spec.min_rank:
            self.fail(
                ValueError, spec.reference, f"must have at least {spec.min_rank} dims, got shape {self.reference.shape}"
            )
        max_rank = MAX_RANK if spec.max_rank is None else spec.max_rank  # the C descriptors hold MAX_RANK dims
        for name, array in self.given.items():
            if array is not None and array.ndim > max_rank:
                self.fail(ValueError, name, f"must have at most {max_rank} dims, got {array.ndim}")

    def _line_axes(self) -> tuple[int, int] | None:
        """along_axes: (first, last), the axes the lines run along; None for other patterns."""
        axis = next((a for a in self.spec.attributes if a.role in AXIS_ROLES), None)
        if axis is None or axis.role is None:
            return None
        try:
            return shapes.line_axes(self.reference.ndim, int(self.attributes[axis.name]), axis.role)
        except ValueError as error:
            message = str(error).replace("a tensor of rank", f"{self.spec.reference} (rank")
            self.fail(ValueError, axis.name, message.replace(": it must", "): it must"))
            raise AssertionError from None  # unreachable: fail raises

    def _reduced_axes(self) -> tuple[int, ...] | None:
        """along_axes over a set of axes (an int list of role 'axes'): those axes, normalized and
        sorted; None for other ops."""
        attribute = next((a for a in self.spec.attributes if a.role == AXES_ROLE), None)
        if attribute is None:
            return None
        assert self.reference is not None  # the reference is a required input
        try:
            return shapes.reduced_axes(self.reference.ndim, self.attributes[attribute.name])
        except ValueError as error:
            message = str(error).replace("a tensor of rank", f"{self.spec.reference} (rank")
            message = message.replace(": each must", "): each must").replace(" twice", ") twice")
            self.fail(ValueError, attribute.name, message)
            raise AssertionError from None  # unreachable: fail raises

    def _shapes(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        """Check every input's shape; return (form, expanded shape) of each channel input."""
        spec, reference = self.spec, self.reference.shape
        forms: dict[str, tuple[str, tuple[int, ...]]] = {}
        if spec.pattern == "binary":
            self.broadcast_shape = self._binary_shape()
            return forms
        for tensor in spec.inputs:
            array = self.given[tensor.name]
            if array is None or tensor.name == spec.reference:
                continue
            if tensor.kind in ("line", "along") and self.line_axes is not None:
                first, last = self.line_axes
                wanted = shapes.axes_shape(reference, first, last, tensor.kind)
                if array.shape != wanted:
                    where = "without" if tensor.kind == "line" else "along"
                    self.fail(
                        ValueError,
                        tensor.name,
                        f"shape {array.shape} must be {wanted}: {spec.reference}'s shape {reference} {where} "
                        f"axes {first}..{last}",
                    )
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
                    if self.inputs[tensor.name] is not None:
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

    def _binary_shape(self) -> tuple[int, ...]:
        """binary: the shape the two inputs broadcast to (NumPy's rules), or their one shape where
        the op's broadcast attribute is 'none'."""
        (first, second), spec = self.spec.inputs, self.spec
        a, b = self.given[first.name], self.given[second.name]
        assert a is not None and b is not None
        rule = next((r for r in spec.attributes if r.role == "broadcast"), None)
        if rule is not None and self.attributes[rule.name] == "none":
            if a.shape != b.shape:
                self.fail(
                    ValueError,
                    second.name,
                    f"shape {b.shape} must equal {first.name}'s shape {a.shape}: with {rule.name}='none' the "
                    "inputs do not broadcast",
                )
            return a.shape
        found = binary.broadcast_shape(a.shape, b.shape)
        if found is None:
            dim = binary.mismatch(a.shape, b.shape)
            assert dim is not None
            self.fail(
                ValueError,
                second.name,
                f"shape {b.shape} does not broadcast with {first.name}'s shape {a.shape}: aligned at their last "
                f"dims, each pair of dims must be equal or one of them 1 (dim {dim}: {a.shape[dim]} and "
                f"{b.shape[dim]})",
            )
            raise AssertionError  # unreachable: fail raises
        return found

    def output_shape(self, name: str) -> tuple[int, ...]:
        tensor = self.spec.tensor(name)
        if self.spec.pattern == "binary":
            return self.broadcast_shape
        if tensor.kind == "tensor":
            return self.reference.shape
        if self.reduced_axes is not None:
            keep = next((a.name for a in self.spec.attributes if a.role == KEEP_DIMS_ROLE), None)
            keep_dims = bool(self.attributes[keep]) if keep else False
            assert self.reference is not None  # the reference is a required input
            return shapes.axes_reduced_shape(self.reference.shape, self.reduced_axes, keep_dims)
        if self.line_axes is not None:
            return shapes.axes_shape(self.reference.shape, *self.line_axes, tensor.kind)
        if self.spec.pattern == "reduce_then_apply":
            return (shapes.channel_dims(self.reference.shape, cast(str, self.layout))[1],)  # these ops have a layout
        like = cast(str, tensor.like)  # a channel output: the required channel input it is like
        form, expanded = self.forms[like]
        return shapes.reduced_shape(form, cast(np.ndarray, self.inputs[like]).shape, expanded)
