"""Today's kernels against the golden corpus recorded from them (tests/golden_corpus.py): every
case of every op gives the recorded bits again, NaN payloads aside. A new core must keep the
elementwise outputs bit for bit; its reductions are held to their accuracy contracts instead,
and to an error no larger than the corpus's against the oracle."""

from __future__ import annotations

import json

import numpy as np
import pytest

import opgen

from .golden_corpus import FOLDER, outputs

SPECS = {spec.name: spec for spec in opgen.bundled.specs}


def _dtype(name: str) -> np.dtype:
    return np.dtype(opgen.runtime.numpy_dtype(opgen.bundled.table.dtypes[name].numpy))


@pytest.mark.parametrize("name", sorted(SPECS))
def test_kernels_give_the_recorded_bits(name):
    if opgen.info()["cpu_target"] == "baseline":  # recorded from a copy with FMA (the AVX2 one)
        pytest.skip("the corpus holds the bits of the FMA copies; the baseline exp may differ in its last bit")
    spec = SPECS[name]
    stored = np.load(FOLDER / f"{name}.npz")
    index = json.loads(str(stored["index"]))
    assert index, f"{name}: an empty corpus"
    for entry in index:
        number, row = entry["label"].split()[0], entry["row"]
        arrays = {t.name: stored[f"{number}/in/{t.name}"].view(_dtype(row[t.name])) for t in spec.inputs}
        for tensor, got in zip(spec.outputs, outputs(spec, entry["kwargs"], arrays)):
            key = f"{number}/out/{tensor.name}"
            if got is None:
                assert key not in stored.files, f"{name} {entry['label']}: {tensor.name} is no longer computed"
                continue
            want = stored[key].view(_dtype(row[tensor.name]))
            assert got.shape == want.shape, f"{name} {entry['label']}: {tensor.name} shape {got.shape}"
            both_nan = np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64))
            bits = got.view(f"u{got.itemsize}") != want.view(f"u{want.itemsize}")
            differ = bits & ~both_nan
            assert not differ.any(), (
                f"{name} {entry['label']}: {tensor.name} differs from the corpus at {np.argwhere(differ)[:3].tolist()}"
            )
