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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from opgen import accuracy, oracle, plan, shapes, specs
from opgen.runtime import OpLibrary
from opgen.specs import DTypeTable, OpSpec

SHAPES = {
    "elementwise": [(0,), (1,), (3,), (17,), (1031,), (2, 3, 5, 7), (4, 64, 33)],
    "broadcast_reduce": [(1, 1, 1), (2, 3, 5, 7), (1, 5, 17), (3, 4), (2, 3, 40, 40), (0, 3, 4)],
    "reduce_then_apply": [(4, 3), (2, 3, 5, 7), (2, 5, 17), (3, 2, 1, 1), (2, 3, 0), (2, 16, 300)],
    # each along every axis its op takes (lines of 1, of tails, of whole blocks; 17 and 33 lines
    # side by side: a full and a partial group of lanes)
    "along_axes": [(1,), (3,), (37,), (2, 3), (3, 0, 2), (2, 3, 5, 7), (4, 33, 17), (2, 1, 40)],
}
# binary: pairs of input shapes, each broadcast against the other: equal shapes, a scalar or one
# element either side, both sides broadcast, ranks that differ, empty, tails and longer runs
BINARY_SHAPES = [
    ((0,), (0,)),
    ((3,), (3,)),
    ((1031,), (1031,)),
    ((), (17,)),
    ((17,), ()),
    ((1,), (37,)),
    ((3, 1), (1, 4)),
    ((5,), (2, 3, 5)),
    ((2, 3, 5), (3, 1)),
    ((4, 0, 3), (1, 3)),
    ((2, 3, 5, 7), (3, 1, 7)),
    ((4, 64, 33), (64, 1)),
    ((1, 19, 1), (3, 1, 23)),
]
_Shapes = dict[str, tuple[int, ...]]  # input name -> shape
_Case = tuple[str, _Shapes, dict[str, Any]]  # label, input shapes, attribute values


@dataclass
class Result:
    op: str
    dtypes: str
    layout: str
    flags: str
    cases: int
    failure: str | None  # None: passed; else the first failure


def load_library(spec_dir: Path, shared_library: Path | None, ops: list[str] | None = None) -> OpLibrary:
    """The ops of `spec_dir` (`ops`: those only), running the cffi module or (given) a shared
    library built from the C."""
    if shared_library is None:
        return OpLibrary(spec_dir, ops=ops)
    import cffi

    from opgen.render import render_library

    ffi = cffi.FFI()
    ffi.cdef(render_library(spec_dir, ops=ops).cdef)
    lib = ffi.dlopen(str(Path(shared_library).resolve()))
    return OpLibrary(spec_dir, module=types.SimpleNamespace(ffi=ffi, lib=lib), ops=ops)


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
    """The value of each attribute that is not a switch (bools run both ways, _switch_rows; the
    layout runs each of its values): its example, else its default, else the first allowed
    string, or for a number just above its minimum, or 1."""
    values = {}
    for attribute in spec.attributes:
        if attribute.type == "bool" or attribute.role == "layout":
            continue
        if attribute.example is not None:
            values[attribute.name] = attribute.example
        elif attribute.default is not None:
            values[attribute.name] = attribute.default
        elif attribute.type == "string":
            values[attribute.name] = attribute.allowed[0]
        elif attribute.minimum_exclusive is not None:
            values[attribute.name] = attribute.minimum_exclusive + 1e-3
        else:
            values[attribute.name] = 1.0
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


def _cases(spec: OpSpec, layout: str) -> Iterator[_Case]:
    """(label, input shapes, attribute values) for the op's pattern: every broadcast form of its
    operands; for along_axes, every value of its axis attribute."""
    if spec.pattern == "along_axes":
        yield from _axes_cases(spec)
        return
    if spec.pattern == "binary":
        first, second = (t.name for t in spec.inputs)
        for a, b in BINARY_SHAPES:
            if max(len(a), len(b)) <= (specs.MAX_RANK if spec.max_rank is None else spec.max_rank):
                yield f"{a} with {b}", {first: a, second: b}, {}
        return
    for label, input_shapes in _form_cases(spec, layout):
        yield label, input_shapes, {}


def axes_sets(rank: int) -> list[tuple[int, ...]]:
    """Sets of axes an op over an int list of axes is checked on, for a reference of `rank`
    dims: none, each one (counted from the last), neighbours, every axis, and sets that are not
    neighbours (BatchNorm's (0, 2) of N, C, HW), the last given from the end."""
    sets: list[tuple[int, ...]] = [(), tuple(range(rank))]
    sets += [(axis - rank,) for axis in range(rank)]
    sets += [(axis, axis + 1) for axis in range(rank - 1)]
    sets += [(0, axis - rank) for axis in range(2, rank)]
    if rank >= 4:
        sets.append((1, 3))
    return list(dict.fromkeys(sets))


def _axes_cases(spec: OpSpec) -> Iterator[_Case]:
    listed = next((a for a in spec.attributes if a.role == specs.AXES_ROLE), None)
    if listed is not None:
        for shape in SHAPES[spec.pattern]:
            if len(shape) < spec.min_rank or (spec.max_rank is not None and len(shape) > spec.max_rank):
                continue
            for axes in axes_sets(len(shape)):
                yield f"{shape} {listed.name}={list(axes)}", {t.name: shape for t in spec.inputs}, {listed.name: axes}
        return
    axis = next(a for a in spec.attributes if a.role in specs.AXIS_ROLES)
    for shape in SHAPES[spec.pattern]:
        if len(shape) < spec.min_rank or (spec.max_rank is not None and len(shape) > spec.max_rank):
            continue
        for value in range(-len(shape), len(shape)):
            first, last = shapes.line_axes(len(shape), value, axis.role or "axis")
            input_shapes = {t.name: shapes.axes_shape(shape, first, last, t.kind) for t in spec.inputs}
            yield f"{shape} {axis.name}={value}", input_shapes, {axis.name: value}


def _form_cases(spec: OpSpec, layout: str) -> Iterator[tuple[str, _Shapes]]:
    channel_inputs = [t for t in spec.inputs if t.kind == "channel" or t.broadcast]
    forms: Sequence[str | None] = sorted({f for t in channel_inputs for f in t.broadcast}) or [None]
    for shape in SHAPES[spec.pattern]:
        if len(shape) < spec.min_rank or (spec.max_rank is not None and len(shape) > spec.max_rank):
            continue
        for form in forms:
            for shaped in accuracy.operand_shapes(form, shape, layout) if form else [shape]:
                input_shapes: dict[str, tuple[int, ...] | None] = {}
                for tensor in spec.inputs:
                    if form in tensor.broadcast:
                        input_shapes[tensor.name] = shaped
                    elif tensor.kind == "channel":
                        options = accuracy.operand_shapes(tensor.broadcast[0], shape, layout)
                        input_shapes[tensor.name] = options[0] if options else None
                    else:
                        input_shapes[tensor.name] = shape
                if all(s is not None for s in input_shapes.values()):
                    yield f"{shape} {form or ''} {shaped}".strip(), cast(_Shapes, input_shapes)


def _compare(
    spec: OpSpec,
    row: dict[str, str],
    table: DTypeTable,
    got: tuple[Any, ...],
    expected: tuple[Any, ...],
    bounds: list[int | np.ndarray],
) -> str | None:
    """The first output element outside its bound (an int: ulps; an array: the error allowed
    beyond 1 ulp), described; None when every output is within."""
    for tensor, value, want, bound in zip(spec.outputs, got, expected, bounds):
        if value is None and want is None:
            continue
        dtype = table.dtypes[row[tensor.name]]
        if isinstance(bound, int):
            bad = accuracy.ulps_off(value, want, dtype, bound)
        else:
            bad, _ = accuracy.outside(value, want, dtype, bound)
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            return f"{tensor.name}{list(where)}: got {float(value[where])!r}, expected {float(want[where])!r}"
    return None


def _bounds(
    spec: OpSpec,
    arrays: dict[str, np.ndarray],
    kwargs: dict[str, Any],
    oracles: Any,
    layout: str,
    expected: tuple[Any, ...],
    runs: dict[str, int],
) -> list[int | np.ndarray]:
    """Per output, from its stated accuracy contract (spec key `accuracy`): a number of ulps, or
    the error allowed beyond 1 ulp. LookupError: a contract that cannot be evaluated."""
    args = [arrays.get(t.name) for t in spec.inputs]
    magnitudes: dict[str, np.ndarray] | None = None
    from_oracle: dict[str, tuple[Any, ...]] = {}
    result: list[int | np.ndarray] = []
    for index, tensor in enumerate(spec.outputs):
        contract = spec.accuracy.get(tensor.name)
        if contract is None:
            raise LookupError(f"no accuracy contract for {tensor.name} (state accuracy.{tensor.name} in the spec)")
        if contract in ("exact", "ulp"):
            result.append(0 if contract == "exact" else 1)
        elif contract == "sum":
            if magnitudes is None:
                magnitudes = accuracy.term_magnitudes(spec, arrays, kwargs, layout)
            name = cast(str, specs.sum_behind(spec, tensor.name))  # a "sum" contract: a sum's output (specs.py)
            count = arrays[spec.reference].size // max(1, np.size(expected[index]))
            result.append(accuracy.stated_sum_bound(spec, name, magnitudes[name], count, runs.get(name, 0)))
        else:
            function = contract.removeprefix("oracle:")
            if function not in from_oracle:
                bound_function = getattr(oracles, function, None)
                if bound_function is None:
                    raise LookupError(f"accuracy.{tensor.name}: the oracle has no function {function}")
                from_oracle[function] = tuple(bound_function(*args, **kwargs, float_run=max(runs.values(), default=0)))
            bound = from_oracle[function][index]
            result.append(1 if bound is None else bound)
    return result


def _input_data(
    spec: OpSpec,
    table: DTypeTable,
    row: dict[str, str],
    generator: np.random.Generator,
    input_shapes: _Shapes,
    specials: str,
) -> dict[str, np.ndarray]:
    """Random data with edge values per input, within each input's stated domain."""
    arrays = {}
    for name, shape in input_shapes.items():
        dtype = table.dtypes[row[name]]
        values = accuracy.random_data(generator, shape, dtype, specials)
        domain = spec.tensor(name).domain
        if domain in ("nonnegative", "nonpositive"):
            values = np.array(np.abs(values))  # an array also for shape (): NumPy's abs gives a scalar
            values = np.array(values if domain == "nonnegative" else -values)
            values[np.isnan(values)] = 0
        elif domain == "positive":
            tiny = accuracy.finfo(dtype).smallest_subnormal
            values = np.where(np.abs(values) > 0, np.abs(values), tiny).astype(values.dtype)
        arrays[name] = values
    return arrays


def check_op(library: OpLibrary, spec: OpSpec, oracles: Any, seed: int) -> list[Result]:
    """One Result per dtype combination, layout and switch row; an exception of the op, the
    oracle or a bound function fails its row, and the other rows still run."""
    results = []
    for row in spec.dtypes:
        tag = "_".join(dict.fromkeys(row.values()))
        for layout in spec.layouts or ("NCX",):
            for flags in _switch_rows(spec):
                label = ",".join(f"{k}={v}" for k, v in flags.items()) or "-"
                result = Result(spec.name, tag, layout if spec.layouts else "-", label, 0, None)
                results.append(result)
                kwargs = dict(_attribute_values(spec), **flags)
                if spec.layout_attribute:
                    kwargs[spec.layout_attribute.name] = layout
                try:
                    runs = plan.float_runs(spec, row, library.table)
                    _check_variant(library, spec, oracles, (seed, len(results)), row, layout, kwargs, runs, result)
                except Exception as error:  # a report, not a crash: the other variants still run
                    result.failure = " ".join(f"{type(error).__name__}: {error}".split())
    return results


def _check_variant(
    library: OpLibrary,
    spec: OpSpec,
    oracles: Any,
    seed: tuple[int, int],
    row: dict[str, str],
    layout: str,
    kwargs: dict[str, Any],
    runs: dict[str, int],
    result: Result,
) -> None:
    """Every case of one variant, until the first failure (set on `result`)."""
    function, reference_function = library.ops[spec.name], getattr(oracles, spec.name, None)
    if reference_function is None:
        result.failure = "no oracle function of this name"
        return
    # an op whose f32 intermediates overflow near the dtypes' limits (reduce_then_apply's elements,
    # computed from per-channel values: README, "Numerical behaviour") states edge_values = "finite"
    specials_list = ("finite",) if spec.edge_values == "finite" else ("finite", "all")
    for case, input_shapes, overrides in _cases(spec, layout):
        kwargs = {**kwargs, **overrides}
        for specials in specials_list:
            generator = np.random.default_rng([*seed, result.cases])
            arrays = _input_data(spec, library.table, row, generator, input_shapes, specials)
            args = [arrays[t.name] for t in spec.inputs]
            got = function(*args, **kwargs)
            want = reference_function(*args, **kwargs)
            got = (got,) if len(spec.outputs) == 1 else tuple(got)
            want = (want,) if len(spec.outputs) == 1 else tuple(want)
            result.cases += 1
            try:
                bounds = _bounds(spec, arrays, kwargs, oracles, layout, want, runs)
            except LookupError as error:
                result.failure = str(error)
                return
            failure = _compare(spec, row, library.table, got, want, bounds)
            if failure:
                result.failure = f"{case} {specials}: {failure}"
                return


def run(spec_dir: Path, shared_library: Path | None, oracle_path: Path | None, seed: int) -> list[Result]:
    """Every variant of every op whose spec loads; each spec that does not is a failed row."""
    _, loaded, problems = specs.scan_specs(spec_dir)
    results = [Result(Path(p.split(": ")[0]).stem, "-", "-", "-", 0, p) for p in problems]
    if loaded:
        library = load_library(spec_dir, shared_library, [spec.name for spec in loaded])
        oracles = load_oracle(oracle_path)
        results += [result for spec in library.specs for result in check_op(library, spec, oracles, seed)]
    return results


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
