"""Which CPU targets' copies a module compiles: those this CPU runs for a module built here,
every target's for a portable one (a wheel's), and a dispatcher that never chooses a copy
the module lacks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from opgen import bundle, compile, plan
from opgen.render import BUNDLED_SPECS, BUNDLED_TEMPLATES, render_library

AVX2 = frozenset({"sse2", "avx", "avx2", "fma", "f16c"})
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq"}


def test_host_targets_are_those_the_cpu_flags_allow():
    assert plan.host_targets(frozenset()) == ("baseline",)
    assert plan.host_targets(AVX2 - {"f16c"}) == ("baseline",)
    assert plan.host_targets(AVX2) == ("baseline", "avx2")
    assert plan.host_targets(AVX512 - {"avx512dq"}) == ("baseline", "avx2")
    assert plan.host_targets(AVX512) == ("baseline", "avx2", "avx512") == plan.compiled_targets()
    assert plan.host_targets()[0] == "baseline"


def sources_and_flags(units: dict[str, compile.Unit]) -> dict[str, tuple[str, ...]]:
    """Each compiled source with the flags it is compiled with: every source exactly once."""
    compiled = [source for unit in units.values() for source in unit.sources]
    assert len(compiled) == len(set(compiled)), "a source compiled twice"
    return {source: unit.flags for unit in units.values() for source in unit.sources}


def test_compile_units_hold_the_targets_asked_for():
    library = render_library()
    sources = {name for name in library.files if name.endswith(".c")}
    portable = sources_and_flags(compile.compile_units(library))
    assert set(portable) == sources
    assert all(flags[0] == "-O3" and not any("OPGEN_WITHOUT" in f for f in flags) for flags in portable.values())

    host = sources_and_flags(compile.compile_units(library, ("avx2",)))
    assert set(host) == {name for name in sources if not name.endswith("__avx512.c")}
    assert "-DOPGEN_WITHOUT_AVX512" in host["opgen_dispatch.c"]
    # the baseline copies only run when OPGEN_CPU_TARGET asks for them: -O1; the avx2 copies -O3
    assert host["batch_norm_training_backward.c"][0] == host["relu.c"][0] == "-O1"
    assert host["batch_norm_training_backward__avx2.c"][0] == host["relu__avx2.c"][0] == "-O3"

    alone = sources_and_flags(compile.compile_units(library, ()))
    assert set(alone) == {name for name in sources if "__avx" not in name}
    assert {"-DOPGEN_WITHOUT_AVX2", "-DOPGEN_WITHOUT_AVX512"} <= set(alone["opgen_dispatch.c"])
    assert alone["batch_norm_training_backward.c"][0] == "-O3"  # the copy that runs: full optimization

    keys = {compile.cache_key(library, compile.compile_units(library, t)) for t in (None, ("avx2",), ())}
    assert len(keys) == 3, "the target set is part of the cache key"
    assert compile.cache_key(library) == compile.cache_key(library, compile.compile_units(library))
    with pytest.raises(ValueError, match="avx1024"):
        compile.compile_units(library, ("avx1024",))


def test_a_wheel_holds_every_target_unless_asked_for_the_host(tmp_path, monkeypatch):
    package = tmp_path / "opgen"
    for name, folder in (("specs", BUNDLED_SPECS), ("templates", BUNDLED_TEMPLATES)):
        shutil.copytree(folder, package / "_bundle" / name)
    shutil.copy2(bundle.PACKAGE / "fastcall.c", package)  # what the record's digest covers
    built = tmp_path / "built"
    built.mkdir()
    asked: list[bool] = []

    def fake_module(library, portable=False):
        asked.append(portable)
        (built / "_opgen_x.so").write_text("")
        return built / "_opgen_x.so"

    def fake_fastcall() -> Path:
        (built / "_opgen_fastcall.so").write_text("")
        return built / "_opgen_fastcall.so"

    monkeypatch.setattr(compile, "build_module", fake_module)
    monkeypatch.setattr(compile, "build_fastcall", fake_fastcall)
    monkeypatch.delenv("OPGEN_WHEEL_TARGETS", raising=False)
    bundle.build_into(package)
    monkeypatch.setenv("OPGEN_WHEEL_TARGETS", "host")
    bundle.build_into(package)
    assert asked == [True, False]
    monkeypatch.setenv("OPGEN_WHEEL_TARGETS", "avx2")
    with pytest.raises(ValueError, match="OPGEN_WHEEL_TARGETS"):
        bundle.build_into(package)


@pytest.mark.slow  # compiles one op
def test_a_module_without_a_targets_copies_runs_the_baseline(tmp_path, monkeypatch):
    """A CPU that runs the avx2 copies, a module that holds the baseline's alone: the
    dispatcher chooses the baseline (with no avx2 copy to call, the module would not load)."""
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("OPGEN_CPU_TARGET", raising=False)
    monkeypatch.setattr(plan, "host_targets", lambda cpu_flags=None: ("baseline",))
    library = render_library(ops=["relu"], dtypes=["f32"])
    module = compile.load_module(compile.build_module(library))
    assert module.ffi.string(module.lib.opgen_cpu_target()) == b"baseline"
    src = np.array([-2.0, -0.0, 0.5, 3.0] * 8, np.float32)
    dst = np.empty_like(src)
    module.lib.relu_f32(module.ffi.from_buffer("float[]", src), module.ffi.from_buffer("float[]", dst), src.size)
    assert np.array_equal(dst, np.where(src > 0, src, 0))


@pytest.mark.slow  # compiles the dispatcher three times
@pytest.mark.parametrize("left_out", [(), ("avx512",), ("avx2", "avx512")])
def test_the_dispatcher_compiles_warning_free_without_targets(tmp_path, left_out):
    from opgen.render import write_files

    write_files(tmp_path, render_library().files)
    defines = [f"-DOPGEN_WITHOUT_{name.upper()}" for name in left_out]
    command = [*compile.compiler(), *compile.C_FLAGS, *compile.WARNING_FLAGS, "-Werror", *defines]
    result = subprocess.run(
        [*command, f"-I{tmp_path}", "-c", str(tmp_path / "opgen_dispatch.c"), "-o", str(tmp_path / "d.o")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
