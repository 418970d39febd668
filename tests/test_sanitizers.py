"""Every kernel, and the op and aclnn APIs, under AddressSanitizer and UndefinedBehaviorSanitizer,
on every CPU target.

A C driver (written here from the kernel list) calls each kernel on buffers of exactly the size
its shape needs, for shapes around the block size, tails, thread splits, reduction tiles and
empty tensors; then tests/c/api_cases.c runs the op and aclnn APIs through every broadcast form,
strided views and failing checks. Any out-of-bounds access or undefined behaviour aborts the run.
A second driver (tests/c/threads_race.c) runs under ThreadSanitizer.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from opgen import plan
from opgen.compile import compiler
from opgen.plan import BLOCK, CHANNEL_SPLIT, PARALLEL_THRESHOLD, STREAM_BYTES, TARGETS, compiled_targets, host_targets
from opgen.render import render_library
from tests.builds import compile_each

pytestmark = pytest.mark.slow  # builds every kernel under AddressSanitizer and UndefinedBehaviorSanitizer

LIBRARY = render_library()
API_CASES = Path(__file__).parent / "c" / "api_cases.c"
B = BLOCK
BIG = PARALLEL_THRESHOLD + 7  # enough elements for a thread team
ELEMENTWISE = [0, 1, 3, B - 1, B, B + 1, 2 * B + 3, BIG]
NCX = [(1, 1, 1), (2, 3, B + 1), (3, 5, 2), (1, 1, BIG), (40, 3, 600), (0, 3, 4), (2, 0, 5), (3, 2, 0), (17, 1, 3 * B)]
NXC = [(1, 1), (5, B + 1), (BIG, 1), (2, CHANNEL_SPLIT + 5), (1000, 33), (0, 4), (3, 0), (9, 2 * B)]
NXC += [(1, CHANNEL_SPLIT + 5), (17, 2 * CHANNEL_SPLIT + 21)]  # ranges of channels, float runs of rows
NXC += [(6, 40000)]  # too few rows for its tiles: ranges of channels
NXC += [(STREAM_BYTES // 4 // 67 + 1, 67)]  # past the caches: rows in memory order, a channel tail
NXC_REPEAT = [(5, 3 * 7, 7), (BIG // 20 + 1, 4 * 5, 5)]  # (outer, channels, repeat): a short NCX inner dim


def call(kernel: plan.ChannelKernel, dims: tuple[int, ...], sums_given: bool) -> str:
    """C statements that allocate exact-size buffers, call the kernel and free them. A
    broadcast_reduce kernel gets its channel outputs (rounded sums) or, `sums_given`, double
    sums to add to instead, the other pointer NULL."""
    sums = {name[: -len("_sums")] for _, name in kernel.params if name.endswith("_sums")}
    absent = {f"{name}_sums" for name in sums} if not sums_given else sums
    if kernel.pattern == "elementwise" or kernel.form == "full":
        (count,) = dims
        total, channels = count, 0
        size_args = [str(count)]
    else:
        outer, channels, inner = dims if kernel.form == "ncx" else (*dims[:2], 1)
        total = outer * channels * inner
        size_args = [str(d) for d in dims[: 3 if kernel.form == "ncx" else 2]]
        if any(name == "repeat" for _, name in kernel.params):
            size_args.append(str(dims[2] if len(dims) > 2 else 1))
    lines, names, frees = [], [], []
    for type_, name in kernel.params:
        c_type = type_.replace("const ", "").replace("*", "").strip()
        if name == "workspace":
            ncx_inner = dims[2] if kernel.form == "ncx" else 1
            lines.append(f"int64_t {name}_n = {kernel.name}_workspace_size({dims[0]}, {dims[1]}, {ncx_inner});")
            lines.append(f"double *{name} = (double *)checked_malloc((size_t){name}_n * sizeof(double));")
            frees.append(name)
        elif name in absent:
            pass
        elif "*" in type_:
            is_channel = name.endswith("_sums") or any(
                t.name == name and t.kind == "channel" for t in (*kernel.inputs, *kernel.outputs)
            )
            count = channels if is_channel else total
            lines.append(f"{c_type} *{name} = ({c_type} *)checked_malloc((size_t){count} * sizeof({c_type}));")
            lines.append(f"fill((unsigned char *){name}, (size_t){count} * sizeof({c_type}));")
            frees.append(name)
        names.append(name)
    arguments = []
    for type_, name in kernel.params:
        if name in absent:
            arguments.append("NULL")
        elif "*" in type_:
            arguments.append(name)
        elif type_.startswith("float"):
            arguments.append("0.25f")
    arguments += size_args
    lines.append(f"{kernel.name}({', '.join(arguments)});")
    lines += [f"free({name});" for name in frees]
    return "{\n        " + "\n        ".join(lines) + "\n    }"


# along_axes: (outer, length, inner): contiguous lines (inner 1) and groups of 16 lines (inner > 1),
# short, tailed, empty and many lines, enough elements for a thread team
LINES = [(1, 1, 1), (3, 17, 1), (2, 33, 5), (5, 1, 19), (0, 3, 2), (2, 0, 3), (3, 4, 0), (BIG // 16 + 1, 16, 1)]
LINES += [(4, 7, 40), (2, BIG // 35 + 1, 35)]


# ops over a set of axes (ReduceSum's axes list): (outer, length, inner) and the blocks before
# the line, (size, reduced), whose sizes multiply to outer: reduced blocks apart from the line's,
# combined by the driver, contiguous and in groups of 16 lines, tailed, enough for a thread team
BLOCK_LINES = [
    ((12, 5, 1), ((3, True), (4, False))),
    ((6, 7, 19), ((2, True), (3, False))),
    ((60, 3, 17), ((2, False), (3, True), (2, False), (5, True))),
    ((4 * (BIG // 256 + 1), 64, 1), ((4, True), (BIG // 256 + 1, False))),
]


def call_lines(kernel: plan.KernelPlan, dims: tuple[int, int, int], blocks: tuple[tuple[int, bool], ...] = ()) -> str:
    """C statements calling an along_axes kernel on exact-size buffers: tensors outer * length
    * inner elements, line operands outer * inner (outer without its reduced blocks, with
    `blocks`), along operands length; its workspace."""
    outer, length, inner = dims
    planned = kernel.lines
    kept = outer // math.prod(size for size, reduced in blocks if reduced)
    counts = {
        o.name: {"tensor": outer * length * inner, "line": kept * inner, "along": length}[o.kind]
        for o in (*planned.inputs, *planned.outputs)
    }
    lines, arguments, frees = [], [], []
    for type_, name in kernel.params:
        c_type = type_.replace("const ", "").replace("*", "").strip()
        if name == "blocks":
            values = [len(blocks), *(value for size, reduced in blocks for value in (size, int(reduced)))]
            lines.append(f"const int64_t blocks[] = {{ {', '.join(str(v) for v in values)} }};")
            continue
        if name == "workspace":
            lines.append(f"int64_t workspace_n = {kernel.name}_workspace_size({outer}, {length}, {inner});")
            lines.append("double *workspace = (double *)checked_malloc((size_t)workspace_n * sizeof(double));")
            frees.append(name)
        elif "*" in type_:
            lines.append(f"{c_type} *{name} = ({c_type} *)checked_malloc((size_t){counts[name]} * sizeof({c_type}));")
            lines.append(f"fill((unsigned char *){name}, (size_t){counts[name]} * sizeof({c_type}));")
            frees.append(name)
        arguments.append(name if "*" in type_ else "0.25f" if type_.startswith("float") else None)
    arguments = [a for a in arguments if a is not None] + [str(outer), str(length), str(inner)]
    arguments += ["blocks"] if any(name == "blocks" for _, name in kernel.params) else []
    lines.append(f"{kernel.name}({', '.join(arguments)});")
    lines += [f"free({name});" for name in frees]
    return "{\n        " + "\n        ".join(lines) + "\n    }"


# binary: (src_0 shape, src_1 shape): equal, a scalar either side, both sides broadcast, ranks
# that differ, tails, empty, a long row in pieces, and enough elements for a thread team
BINARY = [((), ()), ((B + 1,), (B + 1,)), ((), (2 * B + 3,)), ((3,), ()), ((3, 1), (1, B + 4)), ((5,), (2, 3, 5))]
BINARY += [((2, 1, 0), (1, 4, 1)), ((1, 31, 1), (7, 1, 29)), ((1,), (BIG,)), ((BIG // 100 + 1, 1), (1, 100))]
BINARY += [((3, 40000), (3, 1))]


def call_binary(kernel: plan.KernelPlan, shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> str:
    """C statements calling a binary kernel on exact-size buffers: each input of its own shape,
    the output of their broadcast shape, with each input's rank and dims."""
    planned = kernel.binary
    first, second = shapes
    counts = {planned.first.name: math.prod(first), planned.second.name: math.prod(second)}
    counts[planned.output.name] = math.prod(np.broadcast_shapes(first, second))
    lines, arguments, frees = [], [], []
    for operand in (planned.first, planned.second, planned.output):
        c_type, name, count = operand.c_type, operand.name, counts[operand.name]
        lines.append(f"{c_type} *{name} = ({c_type} *)checked_malloc((size_t){count} * sizeof({c_type}));")
        lines.append(f"fill((unsigned char *){name}, (size_t){count} * sizeof({c_type}));")
        frees.append(name)
        arguments.append(name)
    for index, shape in enumerate(shapes):
        dims = ", ".join(str(d) for d in shape) or "0"
        lines.append(f"const int64_t dims_{index}[] = {{ {dims} }};")
        arguments += [str(len(shape)), f"dims_{index}"]
    lines.append(f"{kernel.name}({', '.join(arguments)});")
    lines += [f"free({name});" for name in frees]
    return "{\n        " + "\n        ".join(lines) + "\n    }"


def driver() -> str:
    body = []
    for kernel in LIBRARY.kernels:
        if kernel.pattern == "along_axes":
            body += [f"    {call_lines(kernel, dims)}" for dims in LINES]
            if any(name == "blocks" for _, name in kernel.params):
                body += [f"    {call_lines(kernel, dims, blocks)}" for dims, blocks in BLOCK_LINES]
            continue
        if kernel.pattern == "binary":
            body += [f"    {call_binary(kernel, shapes)}" for shapes in BINARY]
            continue
        if kernel.pattern == "elementwise" or kernel.form == "full":
            shapes = [(count,) for count in ELEMENTWISE]
        elif kernel.form == "ncx":
            shapes = NCX
        else:
            repeats = any(name == "repeat" for _, name in kernel.params)
            shapes = NXC + (NXC_REPEAT if repeats else [])
        body += [f"    {call(kernel, dims, index % 2 == 1)}" for index, dims in enumerate(shapes)]
    return "\n".join(
        [
            "#include <stdio.h>",
            "#include <stdlib.h>",
            "#include <string.h>",
            '#include "opgen.h"',
            "static unsigned state = 12345u;",
            "static void fill(unsigned char *p, size_t n) { for (size_t i = 0; i < n; ++i) {"
            " state = state * 1103515245u + 12345u; p[i] = (unsigned char)(state >> 16); } }",
            "static void *checked_malloc(size_t n) { void *p = malloc(n ? n : 1);"
            ' if (!p) { fputs("out of memory\\n", stderr); exit(2); } return p; }',
            "void run_api_cases(void);",
            "int main(void) {",
            *body,
            '    printf("%s ok\\n", opgen_cpu_target());',
            "    run_api_cases();",
            "    return 0;",
            "}",
            "",
        ]
    )


def _build(command: list[str], directory: Path, binary: Path) -> subprocess.CompletedProcess[str]:
    """The C files of `directory` compiled with `command` one process per core, then linked into
    `binary`: the first failed step's result, or the link's."""
    objects, failed = compile_each(command, sorted(directory.glob("*.c")), directory)
    if failed is not None:
        return failed
    link = [*command, *map(str, objects), "-o", str(binary), "-lm"]
    return subprocess.run(link, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def sanitized_binary(tmp_path_factory):
    if shutil.which(compiler()[0]) is None:
        pytest.skip("no C compiler")
    directory = tmp_path_factory.mktemp("asan")
    # The copies of CPU targets this CPU cannot run are left out (as a user's build may): they
    # would only be compiled, and test_generated.py compiles them warning-free already.
    left_out = [t for t in compiled_targets() if t not in host_targets()]
    for name, text in LIBRARY.files.items():
        if not name.endswith(tuple(f"__{t}.c" for t in left_out)):
            (directory / name).write_text(text)
    (directory / "driver.c").write_text(driver())
    shutil.copy(API_CASES, directory)
    flags = [
        "-std=c99",
        "-O0",  # what the sanitizers check does not change with optimization; the build is faster
        "-g",
        "-fopenmp",
        "-fsanitize=address,undefined",
        "-fno-sanitize-recover=all",
        "-fno-omit-frame-pointer",
        "-Wall",
        "-Wextra",
        "-Werror",
        *(f"-DOPGEN_WITHOUT_{t.upper()}" for t in left_out),
    ]
    result = _build([*compiler(), *flags], directory, directory / "driver")
    if result.returncode != 0 and "sanitize" in result.stderr and "cannot" in result.stderr:
        pytest.skip(f"this compiler cannot build sanitizers: {result.stderr[:200]}")
    assert result.returncode == 0, result.stderr
    return directory / "driver"


@pytest.mark.parametrize("target", [t["name"] for t in TARGETS])
def test_kernels_are_sanitizer_clean(sanitized_binary, target):
    env = {
        **os.environ,
        "OPGEN_CPU_TARGET": target,
        "OMP_NUM_THREADS": "2",
        "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
        "UBSAN_OPTIONS": "print_stacktrace=1",
    }
    result = subprocess.run([str(sanitized_binary)], capture_output=True, text=True, env=env, check=False, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    names = [t["name"] for t in TARGETS]
    ran = result.stdout.split()[0]
    assert names.index(ran) <= names.index(target), f"asked for at most {target}, ran {ran}"
    assert "api cases ok" in result.stdout


def test_settings_are_race_free_under_thread_sanitizer(tmp_path):
    """Two threads at once choose the CPU target, set and read the thread count and run bf16
    kernels (tests/c/threads_race.c): ThreadSanitizer reports no data race."""
    if shutil.which(compiler()[0]) is None:
        pytest.skip("no C compiler")
    for name, text in LIBRARY.files.items():
        (tmp_path / name).write_text(text)
    shutil.copy(Path(__file__).parent / "c" / "threads_race.c", tmp_path)
    flags = ["-std=c99", "-O1", "-g", "-fopenmp", "-pthread", "-fsanitize=thread", "-Wall", "-Wextra", "-Werror"]
    # Only the code the two threads run is instrumented: the runtime (settings, the target's
    # choice, dispatch, the bf16 stores) and relu_backward. The other ops' files only have to
    # link: compiled unoptimized and uninstrumented, they cost a few seconds instead of a minute.
    sources = sorted(tmp_path.glob("*.c"))
    run = [s for s in sources if s.name.startswith(("opgen_", "relu_backward", "threads_race"))]
    linked_only = [s for s in sources if s not in run]
    objects, failed = compile_each([*compiler(), *flags], run, tmp_path)
    if failed is not None and "sanitize" in failed.stderr and "cannot" in failed.stderr:
        pytest.skip(f"this compiler cannot build ThreadSanitizer: {failed.stderr[:200]}")
    assert failed is None, failed.stderr
    plain = ["-std=c99", "-O0", "-fopenmp", "-Wall", "-Wextra", "-Werror"]
    other_objects, failed = compile_each([*compiler(), *plain], linked_only, tmp_path)
    assert failed is None, failed.stderr
    link = [*compiler(), *flags, *map(str, objects + other_objects), "-o", str(tmp_path / "race"), "-lm"]
    built = subprocess.run(link, capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    env = {**os.environ, "TSAN_OPTIONS": "halt_on_error=1"}
    result = subprocess.run([str(tmp_path / "race")], capture_output=True, text=True, env=env, check=False, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "threads ok" in result.stdout, result.stdout
