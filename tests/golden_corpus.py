"""A golden corpus of today's kernels: for every op, dtype row, layout, run of bool attributes
and flags, and broadcast form (the cases `opgen check` makes: odd and empty shapes, edge values),
the inputs and the outputs the bundled library gives, one compressed file per op in
tests/golden/. A rewrite of the core is held to it (tests/test_golden.py): elementwise outputs
bit for bit, NaN payloads aside.

Record it again only on purpose (`python -m tests.golden_corpus`), never to make a test pass.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

import opgen
from opgen import check
from opgen.specs import OpSpec

FOLDER = Path(__file__).parent / "golden"
SEED = 20261126


def cases(spec: OpSpec) -> Iterator[tuple[str, dict[str, Any], dict[str, np.ndarray]]]:
    """(case label, {"kwargs", "row"}, inputs) of every case of `spec`, the same on every run."""
    table = opgen.bundled.table
    number = 0
    for row in spec.dtypes:
        for layout in spec.layouts or ("NCX",):
            for flags in check._switch_rows(spec):
                kwargs = dict(check._attribute_values(spec), **flags)
                if spec.layout_attribute:
                    kwargs[spec.layout_attribute.name] = layout
                for case, shapes, overrides in check._cases(spec, layout):
                    kwargs = {**kwargs, **overrides}  # along_axes: the case's axis
                    for specials in ("finite",) if spec.edge_values == "finite" else ("finite", "all"):
                        generator = np.random.default_rng([SEED, number])
                        arrays = check._input_data(spec, table, row, generator, shapes, specials)
                        label = f"{'_'.join(row.values())}|{layout}|{flags}|{case}|{specials}"
                        yield f"{number:04d} {label}", {"kwargs": kwargs, "row": row}, arrays
                        number += 1


def outputs(spec: OpSpec, kwargs: dict[str, Any], arrays: dict[str, np.ndarray]) -> list[np.ndarray | None]:
    result = getattr(opgen, spec.name)(*(arrays[t.name] for t in spec.inputs), **kwargs)
    return [result] if len(spec.outputs) == 1 else list(result)


def record(spec: OpSpec) -> Path:
    stored: dict[str, np.ndarray] = {}
    index = []
    for label, call, arrays in cases(spec):
        number = label.split()[0]
        kwargs = call["kwargs"]
        for name, value in arrays.items():
            stored[f"{number}/in/{name}"] = value.view(f"u{value.itemsize}")  # bf16 as its bits
        for tensor, value in zip(spec.outputs, outputs(spec, kwargs, arrays)):
            if value is not None:
                stored[f"{number}/out/{tensor.name}"] = value.view(f"u{value.itemsize}")
        index.append({"label": label, **call})
    path = FOLDER / f"{spec.name}.npz"
    FOLDER.mkdir(exist_ok=True)
    np.savez_compressed(path, index=np.array(json.dumps(index)), **stored)
    return path


def main(argv: list[str] | None = None) -> int:
    """Record every bundled op's corpus, or those named on the command line."""
    names = (sys.argv[1:] if argv is None else argv) or [spec.name for spec in opgen.bundled.specs]
    for spec in (s for s in opgen.bundled.specs if s.name in names):
        path = record(spec)
        print(f"{path.name}: {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
