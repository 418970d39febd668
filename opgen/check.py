"""`opgen check`: run every variant of a built library against the oracle, on this machine.

The library is the module `opgen build` makes, or a shared library a user built from the
generated C with their own compiler and flags (loaded by its path). Each op runs through its
public C entry point, per dtype combination, layout and fixed boolean attribute, on shapes with
odd sizes, tails and empty tensors and on data with edge values; results are judged with the
stated tolerances of opgen.accuracy.
"""

from __future__ import annotations

import importlib.util
import itertools
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from opgen import accuracy, oracle, plan, shapes
from opgen.runtime import OpLibrary
from opgen.specs import OpSpec

SHAPES = {
    "elementwise": [(0,), (1,), (3,), (17,), (1031,), (2, 3, 5, 7), (4, 64, 33)],
    "broadcast_reduce": [(1, 1, 1), (2, 3, 5, 7), (1, 5, 17), (3, 4), (2, 3, 40, 40), (0, 3, 4)],
    "reduce_then_apply": [(4, 3), (2, 3, 5, 7), (2, 5, 17), (3, 2, 1, 1), (2, 3, 0), (2, 16, 300)],
}


@dataclass
class Result:
    op: str
    dtypes: str
    layout: str
    flags: str
    cases: int
    failure: str | None  # None: passed; else the first failure


def load_library(spec_dir: Path, shared_library: Path | None) -> OpLibrary:
    """The ops of `spec_dir`, running the cffi module or (given) a shared library built from the C."""
    if shared_library is None:
        return OpLibrary(spec_dir)
    import cffi

    from opgen.render import render_library

    ffi = cffi.FFI()
    ffi.cdef(render_library(spec_dir).cdef)
    lib = ffi.dlopen(str(Path(shared_library).resolve()))
    return OpLibrary(spec_dir, module=types.SimpleNamespace(ffi=ffi, lib=lib))


def load_oracle(path: Path | None) -> Any:
    if path is None:
        return oracle
    spec = importlib.util.spec_from_file_location("opgen_user_oracle", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"--oracle: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _attribute_values(spec: OpSpec) -> dict[str, Any]:
    values = {}
    for attribute in spec.attributes:  # strings the math cannot read: the default, else the first allowed
        if attribute.type == "string" and attribute.role != "layout":
            values[attribute.name] = attribute.allowed[0] if attribute.default is None else attribute.default
    for position, attribute in enumerate(a for a in spec.attributes if a.type == "f32"):
        if attribute.default is not None:
            values[attribute.name] = attribute.default
        elif attribute.minimum_exclusive is not None:
            values[attribute.name] = attribute.minimum_exclusive + 1e-3
        else:  # HardSigmoid-like slopes and offsets
            values[attribute.name] = float(np.float32(1 / 6)) if position == 0 else 0.5
    return values


def _switch_rows(spec: OpSpec) -> list[dict[str, bool]]:
    """The bool attributes and flags of each run: every combination of the bool attributes the
    math reads (each is a kernel of its own), and every value of each other bool attribute and
    of each flag at least once (the flags request optional outputs; check gives every input, so a
    flag defaults to True)."""
    fixed = list(spec.specialized)
    others = {a.name: (True if a.default is None else a.default) for a in spec.attributes if a.type == "bool"}
    others = {name: value for name, value in others.items() if name not in fixed}
    others |= {flag.name: True for flag in spec.flags}
    rows = [{**dict(zip(fixed, values)), **others} for values in itertools.product((True, False), repeat=len(fixed))]
    rows += [{**rows[0], name: not value} for name, value in others.items()]
    return rows


def _cases(spec: OpSpec, layout: str):
    """(label, input shapes) for the op's pattern: every broadcast form of its operands."""
    channel_inputs = [t for t in spec.inputs if t.kind == "channel" or t.broadcast]
    forms = sorted({f for t in channel_inputs for f in t.broadcast}) or [None]
    for shape in SHAPES[spec.pattern]:
        if len(shape) < spec.min_rank or (spec.max_rank is not None and len(shape) > spec.max_rank):
            continue
        for form in forms:
            for shaped in accuracy.operand_shapes(form, shape, layout) if form else [shape]:
                input_shapes = {}
                for tensor in spec.inputs:
                    if form in tensor.broadcast:
                        input_shapes[tensor.name] = shaped
                    elif tensor.kind == "channel":
                        options = accuracy.operand_shapes(tensor.broadcast[0], shape, layout)
                        input_shapes[tensor.name] = options[0] if options else None
                    else:
                        input_shapes[tensor.name] = shape
                if all(s is not None for s in input_shapes.values()):
                    yield f"{shape} {form or ''} {shaped}".strip(), input_shapes


def _compare(spec, row, table, got, expected, bounds) -> str | None:
    for tensor, value, want, bound in zip(spec.outputs, got, expected, bounds):
        if value is None and want is None:
            continue
        dtype = table.dtypes[row[tensor.name]]
        if bound is None:
            bad = accuracy.ulps_off(value, want, dtype, 1)
        else:
            bad, _ = accuracy.outside(value, want, dtype, bound)
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            return f"{tensor.name}{list(where)}: got {float(value[where])!r}, expected {float(want[where])!r}"
    return None


def _bounds(spec, arrays, kwargs, reference_function, layout, expected, runs) -> list:
    """Per output: None (1 ulp) or the allowed error beyond 1 ulp."""
    if spec.pattern == "elementwise":
        return [None] * len(spec.outputs)
    if spec.pattern == "broadcast_reduce":
        magnitude = accuracy.sum_magnitudes(spec, reference_function, arrays, kwargs)
        result = []
        for index, tensor in enumerate(spec.outputs):
            if tensor.kind == "tensor":
                result.append(None)
                continue
            count = arrays[spec.reference].size // max(1, expected[index].size)
            result.append(accuracy.sum_bound(magnitude[index], count, runs.get(tensor.name, 0)))
        return result
    if spec.name == "batch_norm_training_backward":
        src_bound, gamma_bound, beta_bound = accuracy.batch_norm_bounds(
            arrays["src"],
            arrays["diff_dst"],
            arrays["mean"],
            arrays["variance"],
            arrays["gamma"] if expected[1] is not None else None,
            kwargs["epsilon"],
            shapes.channel_axis(arrays["src"].ndim, layout),
            max(runs.values(), default=0),
        )
        return [src_bound, gamma_bound, beta_bound]
    raise LookupError("no stated accuracy bound for this op")


def check_op(library: OpLibrary, spec: OpSpec, oracles: Any, seed: int) -> list[Result]:
    function, reference_function = library.ops[spec.name], getattr(oracles, spec.name, None)
    results = []
    layouts = spec.layouts or ("NCX",)
    flag_sets = _switch_rows(spec)
    for row in spec.dtypes:
        tag = "_".join(dict.fromkeys(row.values()))
        runs = plan.float_runs(spec, row, library.table)
        for layout in layouts:
            for flags in flag_sets:
                label = ",".join(f"{k}={v}" for k, v in flags.items()) or "-"
                result = Result(spec.name, tag, layout if spec.layouts else "-", label, 0, None)
                results.append(result)
                if reference_function is None:
                    result.failure = "no oracle function of this name"
                    continue
                kwargs = dict(_attribute_values(spec), **flags)
                if spec.layout_attribute:
                    kwargs[spec.layout_attribute.name] = layout
                # BatchNorm computes diff_src in f32: inputs near the f32 limits overflow there
                # (docs/numerics.md), so its data stays finite and away from them
                specials_list = ("finite",) if spec.pattern == "reduce_then_apply" else ("finite", "all")
                for case, input_shapes in _cases(spec, layout):
                    for specials in specials_list:
                        generator = np.random.default_rng([seed, len(results), result.cases])
                        arrays = {
                            name: accuracy.random_data(generator, s, library.table.dtypes[row[name]], specials)
                            for name, s in input_shapes.items()
                        }
                        if "variance" in arrays:
                            arrays["variance"] = np.abs(arrays["variance"])
                        args = [arrays[t.name] for t in spec.inputs]
                        got = function(*args, **kwargs)
                        want = reference_function(*args, **kwargs)
                        got = (got,) if len(spec.outputs) == 1 else tuple(got)
                        want = (want,) if len(spec.outputs) == 1 else tuple(want)
                        result.cases += 1
                        try:
                            bounds = _bounds(spec, arrays, kwargs, reference_function, layout, want, runs)
                        except LookupError as error:
                            result.failure = str(error)
                            break
                        failure = _compare(spec, row, library.table, got, want, bounds)
                        if failure:
                            result.failure = f"{case} {specials}: {failure}"
                            break
                    if result.failure:
                        break
    return results


def run(spec_dir: Path, shared_library: Path | None, oracle_path: Path | None, seed: int) -> list[Result]:
    library = load_library(spec_dir, shared_library)
    oracles = load_oracle(oracle_path)
    return [result for spec in library.specs for result in check_op(library, spec, oracles, seed)]


def report(results: list[Result]) -> str:
    width = max([16, *(len(r.flags) for r in results)])
    lines = [f"{'op':32} {'dtypes':10} {'layout':6} {'flags':{width}} {'cases':>5}  result"]
    for r in results:
        verdict = "pass" if r.failure is None else f"FAIL: {r.failure}"
        lines.append(f"{r.op:32} {r.dtypes:10} {r.layout:6} {r.flags:{width}} {r.cases:5}  {verdict}")
    failed = sum(r.failure is not None for r in results)
    cases = sum(r.cases for r in results)
    lines.append(f"{len(results) - failed} passed, {failed} failed ({len(results)} variants, {cases} cases)")
    return "\n".join(lines)
