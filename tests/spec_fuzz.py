"""A spec fuzzer: mutate the bundled specs, and hold every mutant to the loader's promise.

A mutant the loader refuses must be refused with a SpecError of the form `file: key: problem`.
A mutant it accepts must render, compile and run, and its results must be its math: each
output is compared with `interpret`, a NumPy evaluation of the spec's math written from the
spec language's definitions (sections, broadcast forms, layouts), independent of the templates.

The comparison allows the rounding a kernel may do: it computes in the dtype table's compute
type where the interpreter computes in float64, so a result may differ from float64 by as much
as the same math evaluated in the compute type does (`interpret(..., float32)`), plus two ulps of
the output dtype, plus the rounding of a sum's terms. Outputs whose float32 and float64
evaluations disagree on being finite are not judged.

Run a longer campaign with `python -m tests.spec_fuzz --mutants N --seed S`.
"""

from __future__ import annotations

import argparse
import ast
import copy
import math
import random
import shutil
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from opgen import accuracy, expr
from opgen import shapes as opgen_shapes
from opgen.render import BUNDLED_SPECS, render_library
from opgen.specs import LAYOUTS, OpSpec, SpecError, load_specs

SPEC_FILES = sorted(p for p in BUNDLED_SPECS.glob("*.toml") if p.name != "dtypes.toml")
FORMS = ["per_channel", "per_tensor", "trailing", "numpy", "single", "channel_count", "to_reference"]


# --- writing a spec back as TOML ---------------------------------------------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if math.isfinite(value) else ("nan" if value != value else ("inf" if value > 0 else "-inf"))
    if isinstance(value, str):
        escaped = "".join(
            {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c)
            or (f"\\u{ord(c):04x}" if ord(c) < 32 or ord(c) == 127 else c)
            for c in value
        )
        return f'"{escaped}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(type(value))


def _table(name: str, table: dict[str, Any], lines: list[str]) -> None:
    """`[name]` with the scalars of `table`, then its sub-tables as `[name.key]`."""
    lines.append(f"[{name}]")
    lines += [f"{k} = {_toml_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for key, value in table.items():
        if isinstance(value, dict):
            _table(f"{name}.{key}", value, lines)


def to_toml(data: dict[str, Any]) -> str:
    """The spec's TOML text: top-level scalars, tables (nested ones included), arrays of tables."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, (dict, list))]
    lines += [f"{k} = {_toml_value(v)}" for k, v in data.items() if isinstance(v, list) and not v]
    for key, value in data.items():
        if isinstance(value, dict):
            _table(key, value, lines)
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for entry in value:
                lines.append(f"[[{key}]]")
                lines += [f"{k} = {_toml_value(v)}" for k, v in entry.items()]
        elif isinstance(value, list) and value:
            lines.insert(0, f"{key} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def spec_files(path: Path) -> list[Path]:
    """The spec at `path` and the specs it needs (the backward op its [backward] table names)."""
    backward = tomllib.loads(path.read_text()).get("backward", {}).get("op")
    return [path] + ([path.with_name(f"{backward}.toml")] if backward else [])


# --- mutations ----------------------------------------------------------------------


def _names(data: dict[str, Any]) -> list[str]:
    found = [e.get("name") for key in ("inputs", "outputs", "attributes", "flags") for e in data.get(key, [])]
    for entries in data.get("math", {}).values():
        if isinstance(entries, dict):
            found += list(entries)
    return [n for n in found if isinstance(n, str)] or ["x"]


def _mutate_expression(text: str, rng: random.Random, names: list[str]) -> str:
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return text
    nodes = [n for n in ast.walk(tree.body) if isinstance(n, ast.expr)]
    node = rng.choice(nodes)
    name = ast.Name(rng.choice(names), ast.Load())
    constant = ast.Constant(rng.choice([0, 1, 2.5, -0.5, 1e-3, 3e38, 1e-45]))
    choice = rng.randrange(7)
    if choice == 0 and isinstance(node, ast.BinOp):
        node.op = rng.choice([ast.Add(), ast.Sub(), ast.Mult(), ast.Div()])
    elif choice == 1 and isinstance(node, ast.Name):
        node.id = rng.choice(names)
    elif choice == 2 and isinstance(node, ast.Constant):
        node.value = constant.value
    elif choice == 3:
        function = rng.choice(list(expr.FUNCTIONS))
        arguments = [copy.deepcopy(node)] + ([name] if function in ("min", "max") else [])
        replacement: ast.expr = ast.Call(ast.Name(function, ast.Load()), arguments, [])
        return ast.unparse(_replace(tree, node, replacement))
    elif choice == 4:
        operator = rng.choice([ast.Add(), ast.Sub(), ast.Mult(), ast.Div()])
        return ast.unparse(_replace(tree, node, ast.BinOp(copy.deepcopy(node), operator, name)))
    elif choice == 5 and isinstance(node, ast.IfExp):
        node.body, node.orelse = node.orelse, node.body
    elif choice == 6:
        condition = ast.Compare(name, [rng.choice([ast.Gt(), ast.LtE(), ast.Eq()])], [ast.Constant(0)])
        return ast.unparse(_replace(tree, node, ast.IfExp(condition, copy.deepcopy(node), constant)))
    else:
        return ast.unparse(_replace(tree, node, rng.choice([name, constant])))
    return ast.unparse(tree)


def _replace(tree: ast.Expression, old: ast.expr, new: ast.expr) -> ast.Expression:
    if tree.body is old:
        tree.body = new
        return tree
    for parent in ast.walk(tree):
        for key, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, key, new)
            elif isinstance(value, list):
                setattr(parent, key, [new if v is old else v for v in value])
    return tree


def _value_for(key: str, rng: random.Random, names: list[str]) -> Any:
    pools: dict[str, list[Any]] = {
        "kind": ["tensor", "channel", "scalar"],
        "optional": [True, False, 1],
        "default": [1.0, 0.0, -2.5, 1e39, "x"],
        "broadcast": [[f] for f in FORMS] + [["per_channel", "per_tensor"], [], ["per_channel", "per_channel"]],
        "pattern": ["elementwise", "broadcast_reduce", "reduce_then_apply", "along_axes", "binary", "other"],
        "layout": ["NCX", "NXC", "NHWC"],
        "min_rank": [0, 1, 2, 3, 13, -1],
        "max_rank": [0, 1, 2, 3, 5, 12],
        "compute": ["normal", "wide", "exact"],
        "type": ["bool", "f32", "string", "int", "int list"],
        "allowed": [["NCX", "NXC"], ["NXC"], ["A", "B"], ["-1"], []],
        "role": ["layout", "axis", "axes", "keep_dims"],
        "minimum_exclusive": [0.0, -1.0, "0"],
        "default_if_given": names,
        "doc": ["a */ b", "", "x" * 300, "line\nbreak"],
        "summary": ["a */ b", ""],
    }
    if key in ("like", "requested_by", "ignored_unless", "reference", "name"):
        return rng.choice([*names, "nothing", "count"])
    return rng.choice(pools.get(key, [None, "x", 1, True]))


def mutate(data: dict[str, Any], rng: random.Random, edits: int) -> dict[str, Any]:
    """`data` (a parsed spec) with `edits` random structural or math edits."""
    data = copy.deepcopy(data)
    for _ in range(edits):
        names = _names(data)
        arrays = [k for k in ("inputs", "outputs", "attributes", "flags", "dtypes") if data.get(k)]
        choice = rng.randrange(10)
        if choice <= 3 and data.get("math"):  # math is where most of a spec's meaning is
            section = rng.choice(list(data["math"]))
            entries = data["math"][section]
            if not isinstance(entries, dict) or not entries:
                continue
            name = rng.choice(list(entries))
            if choice == 0:
                entries[name] = _mutate_expression(str(entries[name]), rng, names)
            elif choice == 1:
                del entries[name]
            elif choice == 2:
                entries[f"extra{rng.randrange(3)}"] = _mutate_expression(str(entries[name]), rng, names)
            else:
                target = rng.choice(["elements", "sums", "channel", "after", "other"])
                data["math"].setdefault(target, {})[name] = entries.pop(name)
        elif choice <= 7 and arrays:
            key = rng.choice(arrays)
            entry = rng.choice(data[key])
            field_name = rng.choice([*entry, "kind", "optional", "like", "requested_by", "broadcast", "default"])
            if choice == 4 and len(data[key]) > 1:
                data[key].remove(entry)
            elif key == "dtypes":
                entry[rng.choice(list(entry))] = rng.choice(["f32", "f16", "bf16", "f64"])
            elif choice == 5:
                entry.pop(field_name, None)
            elif (value := _value_for(field_name, rng, names)) is None:
                entry.pop(field_name, None)
            else:
                entry[field_name] = value
        else:
            key = rng.choice(["pattern", "layout", "min_rank", "max_rank", "compute", "reference", "summary"])
            value = _value_for(key, rng, names)
            if rng.randrange(4) == 0 or value is None:
                data["op"].pop(key, None)
            else:
                data["op"][key] = value
    return data


# --- the interpreter ----------------------------------------------------------------


def evaluate(tree: ast.expr, env: dict[str, Any], dtype: type) -> Any:
    """The expression over NumPy values, each operation rounded to `dtype` (its operands are of
    `dtype`, and NumPy keeps a Python number's operation in the array's type)."""
    values = {k: v if isinstance(v, (bool, np.bool_)) else np.asarray(v).astype(dtype) for k, v in env.items()}
    with np.errstate(all="ignore"):
        result = accuracy.evaluate(tree, values)
    return np.asarray(result).astype(dtype)


def channel_axis(rank: int, layout: str) -> int:
    axis = LAYOUTS[layout]
    return axis % rank


def expand(value: np.ndarray, form: str, shape: tuple[int, ...], layout: str) -> np.ndarray:
    """A channel operand in `form` as an array of the reference's shape (the forms' definitions)."""
    rank = len(shape)
    if form in ("per_channel", "channel_count"):
        axis = channel_axis(rank, layout) if form == "per_channel" else min(1, rank - 1)
        view = [1] * rank
        view[axis] = -1
        return np.broadcast_to(value.reshape(view), shape)
    if form in ("per_tensor", "single"):
        return np.broadcast_to(value.reshape(()), shape)
    if form == "trailing":
        return np.broadcast_to(value[None], shape)
    return np.broadcast_to(value, shape)  # numpy, to_reference


def reduce_to(terms: np.ndarray, form: str, value_shape: tuple[int, ...], layout: str) -> np.ndarray:
    """Sum `terms` (the reference's shape) over what the operand's form broadcasts."""
    rank = terms.ndim
    if form in ("per_channel", "channel_count"):
        axis = channel_axis(rank, layout) if form == "per_channel" else min(1, rank - 1)
        total = terms.sum(axis=tuple(d for d in range(rank) if d != axis), dtype=np.float64)
        return total if form == "channel_count" else total.reshape(value_shape)
    if form in ("per_tensor", "single"):
        return np.asarray(terms.sum(dtype=np.float64)).reshape(value_shape)
    if form == "trailing":
        return terms.sum(axis=0, dtype=np.float64)
    axes = tuple(d for d in range(rank) if value_shape[d] == 1 and terms.shape[d] != 1)
    return terms.sum(axis=axes, keepdims=True, dtype=np.float64)


@dataclass
class Call:
    """One call of a mutant: arrays, attribute values, the layout and each channel input's form."""

    shape: tuple[int, ...]
    layout: str
    arrays: dict[str, np.ndarray | None]
    attributes: dict[str, Any]
    forms: dict[str, str] = field(default_factory=dict)


def interpret_lines(spec: OpSpec, call: Call, dtype: type) -> dict[str, np.ndarray | None]:
    """along_axes: each line's values (reductions along the line's axes: sums in float64, max
    and min in `dtype`; the other line values in float64), then the elements in `dtype`."""
    rank = len(call.shape)
    axis = next(a for a in spec.attributes if a.type in ("int", "int list"))
    if axis.type == "int list":  # any set of axes (the ReduceX ops)
        axes = opgen_shapes.reduced_axes(rank, call.attributes[axis.name])
        first, last = 0, -1  # no line or along inputs
    else:
        first, last = opgen_shapes.line_axes(rank, int(call.attributes[axis.name]), axis.role or "axis")
        axes = tuple(range(first, last + 1))
    env: dict[str, Any] = {
        a.name: bool(v) if isinstance(v, (bool, np.bool_)) else np.float32(v)
        for a in spec.attributes
        if a.type in ("bool", "f32")
        for v in [call.attributes[a.name]]
    }
    env["count"] = math.prod(call.shape[d] for d in axes)
    for tensor in spec.inputs:
        value = call.arrays.get(tensor.name)
        value = np.asarray(tensor.default if value is None else value).astype(np.float64)
        if tensor.kind == "along":  # the line's axes, broadcast along the others
            value = value.reshape((1,) * first + value.shape + (1,) * (rank - last - 1))
        elif tensor.kind == "line":
            value = np.expand_dims(value, axes)
        env[tensor.name] = value
    for entry in spec.math["line"]:
        name = entry.name
        reduction, tree = _reduction(entry.text)
        if reduction is None:
            env[name] = evaluate(tree, env, np.float64)
            continue
        terms = np.broadcast_to(evaluate(tree, env, dtype), call.shape).astype(np.float64)
        with np.errstate(all="ignore"):
            if reduction == "line_sum":
                env[name] = terms.sum(axis=axes, keepdims=True)
            elif reduction == "line_prod":
                env[name] = terms.prod(axis=axes, keepdims=True)
            else:
                pick, start = (np.max, -np.inf) if reduction == "line_max" else (np.min, np.inf)
                env[name] = pick(terms, axis=axes, keepdims=True, initial=start)
    line_env = dict(env)  # sums across lines read what elements read, not their temporaries
    for entry in spec.math["elements"]:
        env[entry.name] = evaluate(ast.parse(entry.text.strip(), mode="eval").body, env, dtype)
    kept = tuple(d for d in range(rank) if d not in axes)
    for entry in spec.math.get("across", ()):
        name, (_, tree) = entry.name, _reduction(entry.text)
        terms = np.broadcast_to(evaluate(tree, line_env, dtype), call.shape).astype(np.float64)
        env[name] = terms.sum(axis=kept)
    outputs: dict[str, np.ndarray | None] = {}
    for tensor in spec.outputs:
        value = np.asarray(env[tensor.name], np.float64)
        if (
            tensor.requested_by
            and call.arrays.get(next(f.default_if_given for f in spec.flags if f.name == tensor.requested_by)) is None
        ):
            outputs[tensor.name] = None
        elif tensor.kind == "along":
            outputs[tensor.name] = value
        elif tensor.kind == "line":
            kept = np.broadcast_to(value, _kept(call.shape, axes))
            keep = next((bool(call.attributes[a.name]) for a in spec.attributes if a.role == "keep_dims"), False)
            outputs[tensor.name] = kept if keep else np.squeeze(kept, axis=axes)
        else:
            outputs[tensor.name] = np.broadcast_to(value, call.shape)
    return outputs


def _reduction(text: str) -> tuple[str | None, ast.expr]:
    """(reduction, its term) for an entry that is one call of a reduction, else (None, the
    expression): read from the text here, apart from the loader's parse."""
    tree = ast.parse(text.strip(), mode="eval").body
    if isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and tree.func.id in expr.REDUCTIONS:
        return tree.func.id, tree.args[0]
    return None, tree


def _kept(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(1 if d in axes else size for d, size in enumerate(shape))


def interpret(spec: OpSpec, call: Call, dtype: type) -> dict[str, np.ndarray | None]:
    """Every output of `spec` for `call`, from its math evaluated in `dtype` (sums in float64)."""
    if spec.pattern == "along_axes":
        return interpret_lines(spec, call, dtype)
    flags = {f.name: call.arrays.get(f.default_if_given) is not None for f in spec.flags}
    env: dict[str, Any] = {a.name: call.attributes[a.name] for a in spec.attributes if a.type != "string"}
    env = {k: (bool(v) if isinstance(v, (bool, np.bool_)) else np.float32(v)) for k, v in env.items()}
    for tensor in spec.inputs:
        value = call.arrays.get(tensor.name)
        if value is None or (tensor.ignored_unless and not flags[tensor.ignored_unless]):
            value = np.asarray(tensor.default if tensor.default is not None else 0.0)
        value = value.astype(np.float64)
        form = call.forms.get(tensor.name, "numpy")
        env[tensor.name] = expand(value, form, call.shape, call.layout) if tensor.kind == "channel" else value
    results: dict[str, Any] = {}
    count = math.prod(call.shape) // max(1, call.shape[channel_axis(len(call.shape), call.layout)]) if call.shape else 1
    for section in ("channel", "sums", "after", "elements"):
        for entry in spec.math.get(section, ()):
            name = entry.name
            value = evaluate(ast.parse(entry.text.strip(), mode="eval").body, {**env, "count": count}, dtype)
            value = np.broadcast_to(value, call.shape) if section != "elements" else value
            if section == "sums":
                channel = next(t for t in spec.inputs if t.kind == "channel")
                form = call.forms.get(channel.name, "per_channel")
                reduced = reduce_to(np.asarray(value, np.float64), form, call.arrays[channel.name].shape, call.layout)
                results[name] = reduced
                value = expand(reduced, form, call.shape, call.layout)
            env[name] = value
    outputs: dict[str, np.ndarray | None] = {}
    for tensor in spec.outputs:
        if tensor.requested_by and not flags[tensor.requested_by]:
            outputs[tensor.name] = None
        elif tensor.kind == "channel" and spec.pattern == "broadcast_reduce":
            outputs[tensor.name] = results[tensor.name]
        elif tensor.kind == "channel":
            axis = channel_axis(len(call.shape), call.layout)
            index = tuple(slice(None) if d == axis else 0 for d in range(len(call.shape)))
            outputs[tensor.name] = np.asarray(env[tensor.name], np.float64)[index]
        else:
            outputs[tensor.name] = np.broadcast_to(np.asarray(env[tensor.name], np.float64), call.shape)
    return outputs


# --- running a mutant ----------------------------------------------------------------

FORM_ORDER = ["per_channel", "per_tensor", "single", "channel_count", "trailing", "numpy", "to_reference"]
SHAPES = [(2, 3, 5), (3, 4), (1, 3, 2, 2), (5,), (2, 1, 7)]


def _numpy_dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bf16" else np.dtype({"f32": np.float32, "f16": np.float16}[name])


def make_call(spec: OpSpec, row: dict[str, str], layout: str, rng: np.random.Generator, shape: tuple[int, ...]) -> Call:
    arrays: dict[str, np.ndarray | None] = {}
    forms: dict[str, str] = {}
    axis = channel_axis(len(shape), layout)
    axis_attribute = next((a for a in spec.attributes if a.type == "int"), None)
    attributes: dict[str, Any] = {}
    listed = next((a for a in spec.attributes if a.type == "int list"), None)
    if listed is not None:  # a random set of axes, some counted from the last
        chosen = [d for d in range(len(shape)) if rng.integers(2)]
        attributes[listed.name] = [d - len(shape) if rng.integers(2) else d for d in chosen]
    if axis_attribute is not None:
        attributes[axis_attribute.name] = int(rng.integers(-len(shape), len(shape)))
        first, last = opgen_shapes.line_axes(len(shape), attributes[axis_attribute.name], axis_attribute.role or "")
    for index, tensor in enumerate(spec.inputs):
        if spec.pattern == "binary":
            # broadcast against each other, both sides: the first 1 on odd dims, the second 1 on
            # even dims and one dim short; the call's shape is theirs broadcast
            value_shape = tuple(1 if (i + index) % 2 else d for i, d in enumerate(shape))[index:]
        elif tensor.kind in ("line", "along"):
            value_shape = opgen_shapes.axes_shape(shape, first, last, tensor.kind)
        elif tensor.kind == "channel":
            form = next(f for f in FORM_ORDER if f in tensor.broadcast)
            value_shape = {
                "per_channel": (shape[axis],),
                "per_tensor": (1,),
                "single": (1,) * len(shape),
                "channel_count": (shape[min(1, len(shape) - 1)],),
                "trailing": shape[1:],
                "numpy": tuple(d if i % 2 else 1 for i, d in enumerate(shape)),
            }[form]
            forms[tensor.name] = form
        else:
            value_shape = shape
        values = np.array(rng.standard_normal(value_shape) * rng.choice([0.5, 2.0], value_shape))
        values[rng.random(value_shape) < 0.1] = 0.0
        arrays[tensor.name] = values.astype(_numpy_dtype(row[tensor.name]))
    for attribute in spec.attributes:
        if attribute.type in ("int", "int list"):
            continue  # drawn above
        if attribute.role == "layout":
            attributes[attribute.name] = layout
        elif attribute.type == "string":
            attributes[attribute.name] = attribute.default or attribute.allowed[0]
        elif attribute.type == "bool":
            attributes[attribute.name] = bool(rng.integers(2))
        elif attribute.minimum_exclusive is not None:
            attributes[attribute.name] = attribute.minimum_exclusive + 0.5
        else:
            attributes[attribute.name] = 0.75
    return Call(shape, layout, arrays, attributes, forms)


def judge(got: np.ndarray, spec: OpSpec, call: Call, row: dict[str, str], name: str, table: Any) -> str | None:
    """Why output `name` is not the math of `spec`, or None."""
    compute = table.dtypes[row[name]].wide_compute if spec.compute == "wide" else table.dtypes[row[name]].compute
    exact = interpret(spec, call, np.float64)[name]
    rounded = interpret(spec, call, np.float32 if compute == "float" else np.float64)[name]
    assert exact is not None and rounded is not None
    got64 = np.asarray(got).astype(np.float64)
    if got64.shape != exact.shape:
        return f"{name}: shape {got64.shape}, the math gives {exact.shape}"
    out = _numpy_dtype(row[name])
    info = ml_dtypes.finfo(out)
    judged = np.isfinite(exact) & np.isfinite(rounded) & (np.abs(exact) < float(info.max) * 0.99)
    same_kind = (np.isnan(exact) & np.isnan(rounded)) | (np.isinf(exact) & (exact == rounded))
    ulp = np.maximum(np.abs(exact), float(info.smallest_subnormal) * 2**info.nmant) * 2.0**-info.nmant
    bound = 2 * ulp + 8 * np.abs(exact - rounded) + 2.0**-20 * np.abs(exact)
    bad = judged & ~(np.abs(got64 - exact) <= bound)
    bad |= same_kind & ~((np.isnan(got64) & np.isnan(exact)) | (got64 == exact))
    if bad.any():
        where = tuple(int(i[0]) for i in np.nonzero(bad))
        return f"{name}: at {where} got {got64[where]!r}, the math gives {exact[where]!r} (bound {bound[where]!r})"
    return None


def run_mutant(directory: Path, name: str, seed: int) -> list[str]:
    """Build the accepted spec `name` in `directory` and run every dtype row and layout; the failures."""
    import opgen

    table, specs = load_specs(directory)
    spec = next(s for s in specs if s.name == name)
    library = opgen.load(directory)
    function = getattr(library, spec.name)
    rng = np.random.default_rng(seed)
    failures = []
    rank_low = max(spec.min_rank, 1)
    shapes = [s for s in SHAPES if rank_low <= len(s) <= (spec.max_rank or 12)] or [(3,) * max(rank_low, 1)]
    for row in spec.dtypes:
        for layout in spec.layouts or ("NXC",):
            shape = shapes[int(rng.integers(len(shapes)))]
            call = make_call(spec, row, layout, rng, shape)
            arrays = [call.arrays[t.name] for t in spec.inputs]
            result = function(*arrays, **call.attributes)
            results = (result,) if len(spec.outputs) == 1 else tuple(result)
            for tensor, got in zip(spec.outputs, results):
                if got is None:
                    continue
                problem = judge(got, spec, call, row, tensor.name, table)
                if problem:
                    failures.append(f"{spec.name} {row} {layout} {shape}: {problem}")
    return failures


@dataclass
class Outcome:
    refused: int = 0
    accepted: int = 0
    built: int = 0
    failures: list[str] = field(default_factory=list)


def fuzz(work: Path, mutants: int, seed: int, build_limit: int, edits: int = 2) -> Outcome:
    """`mutants` mutants of the bundled specs; build and run the first `build_limit` accepted ones."""
    rng = random.Random(seed)
    outcome = Outcome()
    originals = {p: tomllib.loads(p.read_text()) for p in SPEC_FILES}
    for index in range(mutants):
        path = rng.choice(SPEC_FILES)
        directory = work / f"mutant{index}"
        directory.mkdir(parents=True)
        for needed in [BUNDLED_SPECS / "dtypes.toml", *spec_files(path)[1:]]:
            shutil.copy(needed, directory)
        text = to_toml(mutate(originals[path], rng, rng.randint(1, edits)))
        (directory / path.name).write_text(text)
        try:
            load_specs(directory)
        except SpecError as error:
            outcome.refused += 1
            message = str(error)
            if not message.startswith(str(directory)) or message.count(": ") < 2:
                outcome.failures.append(f"mutant{index}: not a `file: key: problem` message: {message}")
            continue
        outcome.accepted += 1
        try:
            render_library(directory)
            if outcome.built < build_limit:
                outcome.built += 1
                outcome.failures += [f"mutant{index}: {f}" for f in run_mutant(directory, path.stem, seed + index)]
        except Exception as error:  # noqa: BLE001 - anything here is a broken promise, reported whole
            outcome.failures.append(f"mutant{index} ({path.name}): {type(error).__name__}: {error}\n{text}")
    return outcome


def main(argv: list[str] | None = None) -> int:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=200)
    parser.add_argument("--build", type=int, default=20, help="accepted mutants to build and run")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        outcome = fuzz(Path(work), args.mutants, args.seed, args.build)
    for failure in outcome.failures:
        print(failure, file=sys.stderr)
    print(
        f"{args.mutants} mutants: {outcome.refused} refused, {outcome.accepted} accepted, "
        f"{outcome.built} built and run, {len(outcome.failures)} failures"
    )
    return 1 if outcome.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
