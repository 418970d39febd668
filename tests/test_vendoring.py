"""The generated C builds and runs with no Python and no opgen: copied out of the repository, built
with CMake and with a plain `cc *.c` line (gcc and clang, with and without OpenMP), warning-free,
and every op, called through the op API and the aclnn API, checked against the oracle's outputs;
and the headers used from C++."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import opgen
from opgen import oracle, plan
from opgen.compile import compiler
from opgen.render import BUNDLED_OUTPUT
from tests.builds import WARNINGS
from tests.helpers import check_line_count, rng, stated_bound, ulp
from tests.test_batch_norm import bounds

pytestmark = pytest.mark.slow  # builds the library with several compilers and CMake

PROGRAM = Path(__file__).parent / "c" / "use_kernels.c"
N, C, S = 3, 5, 37
STRICT = ["-std=c99", "-O2", *WARNINGS]  # as test_generated.py's "plain": the objects are shared
CHECKS = "15 passed, 0 failed"  # the checks tests/c/use_kernels.c makes


def f32_bound(op: str, output: str, magnitude: np.ndarray, count: int) -> np.ndarray:
    """The stated bound of sum output `output` of bundled op `op`, f32 row, beyond 1 ulp."""
    spec = next(s for s in opgen.bundled.specs if s.name == op)
    return stated_bound(spec, next(row for row in spec.dtypes if row[output] == "f32"), output, magnitude, count)


def write_golden(directory: Path) -> None:
    generator = rng("vendoring")
    src = generator.standard_normal((N, C, S)).astype(np.float32)
    diff_dst = generator.standard_normal((N, C, S)).astype(np.float32)
    slope = generator.random(C).astype(np.float32)
    mean = generator.standard_normal(S).astype(np.float32)
    variance = (generator.random(S) + 0.1).astype(np.float32)
    gamma = generator.standard_normal(S).astype(np.float32)
    for name, array in [
        ("src", src),
        ("diff_dst", diff_dst),
        ("slope", slope),
        ("mean", mean),
        ("variance", variance),
        ("gamma", gamma),
    ]:
        array.tofile(directory / f"{name}.f32")

    def golden(name: str, expected: np.ndarray, allowed: np.ndarray) -> None:
        expected.astype(np.float64).tofile(directory / name)
        np.broadcast_to(allowed, expected.shape).astype(np.float64).tofile(directory / f"{name}.allowed")

    golden("relu.diff_src", oracle.relu_backward(src, diff_dst), np.zeros(1))
    alpha = float(np.float32(1.0 / 6.0))
    for name, expected in [
        ("hard_sigmoid", oracle.hard_sigmoid_backward(src, diff_dst, alpha=alpha, beta=0.5)),
        ("sigmoid", oracle.sigmoid_backward(src, diff_dst)),
        ("tanh", oracle.tanh_backward(src, diff_dst)),
    ]:
        golden(f"{name}.diff_src", expected, ulp(expected, "f32"))
    grad_row = diff_dst[0, 0].copy()
    grad_row.tofile(directory / "grad_row.f32")
    aclnn = oracle.aclnn_prelu_backward(grad_row, src, slope)
    golden("aclnn.grad_input", aclnn[0], ulp(aclnn[0], "f32"))
    magnitude = oracle.aclnn_prelu_backward(-np.abs(grad_row), -np.abs(src), slope)[1]
    bound = f32_bound("aclnn_prelu_backward", "grad_weight", magnitude, N * S)
    golden("aclnn.grad_weight", aclnn[1], ulp(aclnn[1], "f32") + bound)
    prelu = oracle.prelu_backward(src, slope, diff_dst, data_format="NCX")
    golden("prelu.diff_src", prelu[0], ulp(prelu[0], "f32"))
    magnitude = oracle.prelu_backward(-np.abs(src), slope, -np.abs(diff_dst), data_format="NCX")[1]
    bound = f32_bound("prelu_backward", "diff_slope", magnitude, N * S)
    golden("prelu.diff_slope", prelu[1], ulp(prelu[1], "f32") + bound)
    rows = src.reshape(N * C, S)
    bn = oracle.batch_norm_training_backward(
        rows, diff_dst.reshape(N * C, S), mean, variance, gamma, epsilon=1e-3, data_format="NXC"
    )
    src_bound, gamma_bound, beta_bound = bounds(rows, diff_dst.reshape(N * C, S), mean, variance, gamma, 1e-3, "NXC")
    golden("bn.diff_src", bn[0], ulp(bn[0], "f32") + src_bound)
    golden("bn.diff_gamma", bn[1], ulp(bn[1], "f32") + gamma_bound)
    golden("bn.diff_beta", bn[2], ulp(bn[2], "f32") + beta_bound)


@pytest.fixture(scope="module")
def vendored(tmp_path_factory):
    """generated/ copied outside the repository, without the Python module, plus golden files."""
    root = tmp_path_factory.mktemp("vendor")
    source = root / "opgen"
    source.mkdir()
    for path in BUNDLED_OUTPUT.iterdir():
        if path.suffix in (".c", ".h") or path.name == "CMakeLists.txt":
            shutil.copy(path, source)
    golden = root / "golden"
    golden.mkdir()
    write_golden(golden)
    return root


def run(command: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, cwd=cwd, check=False)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout}\n{result.stderr}"
    return result


def link(command: list[str], source: Path, inputs: list[str], binary: Path) -> None:
    """Compiles and links `inputs` against the vendored headers in `source` into `binary`."""
    run([*command, f"-I{source}", *inputs, "-o", str(binary), "-lm"])


def c_compiler(name: str) -> list[str]:
    if name == "cc":
        return compiler()
    if shutil.which(name) is None:
        pytest.skip(f"{name} is not installed (.ci/run installs it)")
    return [name]


@pytest.mark.parametrize("cxx", ["g++", "clang++"])
def test_called_from_cpp(vendored, object_builds, cxx):
    """The headers compile as C++ (C++11, warning-free) and the C library links into it."""
    source = vendored / "opgen"
    objects = object_builds.objects([*compiler(), *STRICT])
    binary = vendored / f"use_from_cpp_{cxx}"
    cpp_flags = ["-std=c++11", "-O2", "-Wall", "-Wextra", "-Wpedantic", "-Werror"]
    program = Path(__file__).parent / "c" / "use_from_cpp.cpp"
    link([*c_compiler(cxx), *cpp_flags], source, [str(program), *map(str, objects)], binary)
    assert "C++: all passed" in run([str(binary)]).stdout


@pytest.mark.parametrize("cc", ["cc", "clang"])
@pytest.mark.parametrize("openmp", [False, True], ids=["no-openmp", "openmp"])
def test_plain_cc_build(vendored, object_builds, cc, openmp):
    source = vendored / "opgen"
    binary = vendored / f"use_kernels_{cc}_{openmp}"
    # as test_generated.py's "plain" and "openmp" configurations, whose objects these are;
    # every copy with cc and no OpenMP, and with clang and OpenMP; the others build the copies
    # this CPU runs
    flags = ["-std=c99", "-O2", *(["-fopenmp"] if openmp else []), *WARNINGS]
    objects = object_builds.objects([*c_compiler(cc), *flags], host_only=(cc == "clang") != openmp)
    link([*c_compiler(cc), *flags], source, [*map(str, objects), str(PROGRAM)], binary)
    result = run([str(binary), str(vendored / "golden")])
    assert CHECKS in result.stdout


@pytest.mark.parametrize("cc", ["cc", "clang"])
def test_cmake_build_and_install(vendored, cc):
    """Under clang the per-target copies also get their instruction sets as flags (the
    generated CMakeLists.txt): the build stays warning-free and every variant right."""
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed (the test extra installs it)")
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} is not installed")
    build, prefix = vendored / f"build_{cc}", vendored / f"prefix_{cc}"
    # cc builds the baseline copies alone (OPGEN_WITHOUT_TARGETS): test_generated.py compiles
    # every copy warning-free with cc (and those this CPU runs with -fopenmp, as here), and
    # test_plain_cc_build links and runs them; this test is the CMake project's, and the other
    # copies cost it two minutes of CI. clang builds every copy, each with its instruction-set
    # flags. cc also builds at -O2 (Release's -O3 costs a minute more here): opgen's own module,
    # which every other test runs, is cc's -O3 build of the same sources.
    left_out = [t for t in plan.compiled_targets() if t != "baseline"] if cc == "cc" else []
    release = ["-DCMAKE_C_FLAGS_RELEASE=-O2 -DNDEBUG"] if cc == "cc" else []
    run(
        [
            "cmake",
            "-S",
            str(vendored / "opgen"),
            "-B",
            str(build),
            f"-DCMAKE_C_COMPILER={cc}",
            f"-DCMAKE_INSTALL_PREFIX={prefix}",
            "-DCMAKE_BUILD_TYPE=Release",
            "-DCMAKE_C_FLAGS=-Wall -Wextra -Wpedantic -Werror",
            f"-DOPGEN_WITHOUT_TARGETS={';'.join(left_out)}",
            *release,
        ]
    )
    run(["cmake", "--build", str(build), "-j", "2"])
    built = {path.name.split(".")[0] for path in (build / "CMakeFiles" / "opgen_objects.dir").glob("*.o")}
    assert "opgen_dispatch" in built and not {
        name for name in built if name.endswith(tuple(f"__{t}" for t in left_out))
    }
    run(["cmake", "--install", str(build)])
    # `opgen check` runs every variant of the shared library built here against the oracle
    checked = run([sys.executable, "-m", "opgen.cli", "check", "--library", str(build / "libopgen_kernels.so")])
    assert checked.stdout.splitlines()[-1].startswith(f"{check_line_count()} passed, 0 failed"), checked.stdout
    # A consumer project finds the installed package and links the static library.
    consumer = vendored / f"consumer_{cc}"
    consumer.mkdir()
    shutil.copy(PROGRAM, consumer)
    (consumer / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(consumer C)\nfind_package(opgen REQUIRED)\n"
        "add_executable(use_kernels use_kernels.c)\n"
        "target_link_libraries(use_kernels PRIVATE opgen::opgen_kernels_static m)\n"
    )
    run(
        [
            "cmake",
            "-S",
            str(consumer),
            "-B",
            str(consumer / "build"),
            f"-DCMAKE_C_COMPILER={cc}",
            f"-DCMAKE_PREFIX_PATH={prefix}",
        ]
    )
    run(["cmake", "--build", str(consumer / "build")])
    result = run([str(consumer / "build" / "use_kernels"), str(vendored / "golden")])
    assert CHECKS in result.stdout


def test_cmake_refuses_an_unknown_target_to_leave_out(vendored, tmp_path):
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed (the test extra installs it)")
    command = ["cmake", "-S", str(vendored / "opgen"), "-B", str(tmp_path), "-DOPGEN_WITHOUT_TARGETS=avx2;sse9"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert "OPGEN_WITHOUT_TARGETS: 'sse9' is not one of the targets with copies" in result.stderr


def test_cmake_without_build_type_optimizes(vendored):
    """A configure with no build type (CMake's default) still compiles the kernels optimized,
    with the rounding flags of opgen's own builds."""
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed (the test extra installs it)")
    build = vendored / "build_default"
    run(["cmake", "-S", str(vendored / "opgen"), "-B", str(build)])
    flags = (build / "CMakeFiles" / "opgen_objects.dir" / "flags.make").read_text()
    c_flags = next(line for line in flags.splitlines() if line.startswith("C_FLAGS"))
    assert "-O3" in c_flags and "-ffp-contract=off" in c_flags, c_flags


def test_readme_example_compiles_and_runs(vendored, object_builds):
    """The complete program in the README's "Use from C" builds warning-free and runs."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme[readme.index("## Use from C") :]
    example = section[section.index("```c\n") + 5 : section.index("```", section.index("```c\n") + 5)]
    program = vendored / "readme_example.c"
    program.write_text(example)
    source = vendored / "opgen"
    binary = vendored / "readme_example"
    objects = object_builds.objects([*compiler(), *STRICT])
    link([*compiler(), *STRICT], source, [*map(str, objects), str(program)], binary)
    result = run([str(binary)])
    assert result.stdout.startswith("diff_beta[0] = "), result.stdout
