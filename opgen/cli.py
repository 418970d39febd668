"""Command line: `opgen build`, `list`, `info`, `bench`, `check` and `docs`."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from opgen import bundle
from opgen.render import BUNDLED_OUTPUT, BUNDLED_SPECS, BUNDLED_TEMPLATES, RenderError, render_library, write_files
from opgen.specs import SpecError


def _build(args: argparse.Namespace) -> int:
    from opgen.compile import BuildError, build_fastcall, build_module, locked

    spec_dir = Path(args.specs) if args.specs else BUNDLED_SPECS
    if args.specs and not args.out:
        raise SystemExit("opgen build: --out DIR is required with --specs (the bundled output is generated/)")
    out_dir = Path(args.out) if args.out else BUNDLED_OUTPUT
    started = time.perf_counter()
    if (args.ops or args.dtypes) and not args.out:
        raise SystemExit("opgen build: --out DIR is required with --ops or --dtypes (generated/ holds every op)")
    if bundle.INSTALLED and not args.out:  # generated/ belongs to a checkout, not to site-packages
        raise SystemExit("opgen build: --out DIR is required in an installed opgen (it has no generated/ folder)")

    def names(text: str | None) -> list[str] | None:
        return [name for name in text.split(",") if name] if text else None

    library = render_library(spec_dir, BUNDLED_TEMPLATES, names(args.ops), names(args.dtypes))
    try:
        # the Python functions' repeated-call path, so no first call compiles: built meanwhile
        with ThreadPoolExecutor(max_workers=1) as pool:
            fastcall = pool.submit(build_fastcall)
            # compile before touching the output: a failure leaves it as it was
            module = build_module(library, args.portable)
            fastcall.result()
    except BuildError as error:
        print(f"opgen build: error: {error}", file=sys.stderr)
        return 1
    target = out_dir / module.name
    with locked(out_dir / ".opgen-build.lock"):
        written = write_files(out_dir, library.files)
        if not target.exists():
            for old in out_dir.glob("_opgen_*"):  # modules of earlier builds
                old.unlink()
            temporary = out_dir / f".{module.name}.{os.getpid()}.tmp"
            shutil.copy2(module, temporary)
            os.replace(temporary, target)
    for name in sorted(library.files):
        print(f"{'wrote    ' if name in written else 'unchanged'} {out_dir / name}")
    kernels = len(library.kernels)
    print(f"built {len(library.specs)} ops, {kernels} kernels from {spec_dir} in {time.perf_counter() - started:.1f} s")
    importable = f"import it by name with {out_dir} on sys.path"
    if args.ops or args.dtypes:
        # opgen.load builds every op and dtype of a spec directory: it cannot give this subset
        print(
            f"module {target} holds this subset's kernels and C API ({importable}); "
            f"opgen.load({str(spec_dir)!r}) gives Python functions for every op and dtype of "
            f"{spec_dir}, built separately"
        )
    else:
        print(f"module {target} ({importable}; or opgen.load({str(spec_dir)!r}) for its Python functions)")
    return 0


def _list(args: argparse.Namespace) -> int:
    library = render_library(Path(args.specs) if args.specs else BUNDLED_SPECS, BUNDLED_TEMPLATES)
    for spec in library.specs:
        print(f"{spec.name}  [{spec.pattern}]  {spec.source}")
        for kernel in library.variants(spec.name):
            print(f"    {kernel.name:48s} {kernel.detail}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from opgen import bench, bench_lines

    def names(text: str, allowed: Any, what: str) -> list[str]:
        chosen = [name for name in text.split(",") if name]
        unknown = [name for name in chosen if name not in allowed]
        if unknown:
            raise SystemExit(f"opgen bench: --{what}: unknown {', '.join(unknown)} (choose from {', '.join(allowed)})")
        return chosen

    if args.compare == "torch":  # the ops with axes and the binary ops: sizes and ops of their own
        args.sizes_torch = names(args.sizes or "S,M,L,T", bench_lines.SHAPES, "sizes")
        args.ops_torch = names(args.ops or ",".join(bench_lines.OPS), bench_lines.OPS, "ops")
        args.sizes, args.ops = "S", None
    sizes = names(args.sizes or ("S,M,L" if args.compare else "S,M,L,HW1,HW7,HW14"), bench.SIZES, "sizes")
    ops = names(args.ops or ",".join(bench.OPS), bench.OPS, "ops")
    dtypes = names(args.dtypes, bench.DTYPES, "dtypes")
    try:
        threads = [int(t) for t in args.threads.split(",")] if args.threads else sorted({1, os.cpu_count() or 1})
    except ValueError:
        raise SystemExit("opgen bench: --threads: a comma-separated list of thread counts") from None
    if args.compare == "torch":
        return _compare_torch(args, threads)
    if args.compare:
        return _compare(args, sizes, threads, ops, dtypes)
    total, done = len(bench.cases(ops, dtypes)) * len(sizes) * len(threads), 0
    live = sys.stderr.isatty()

    def progress(line: str) -> None:  # the table comes once, at the end; a terminal sees a count
        nonlocal done
        done += 1
        if live:
            print(f"\r\033[Kmeasured {done}/{total} cases", end="", file=sys.stderr, flush=True)

    try:
        report = bench.run(
            sizes, threads, ops, dtypes, args.min_time, baselines=not args.no_baselines, progress=progress
        )
    finally:
        if live:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
    print(bench.table(report))
    if args.json:
        bench.save(report, args.json)
        print(f"wrote {args.json}")
    if args.plot:
        print(f"wrote {args.plot}" if bench.plot(report, args.plot) else "no plot: matplotlib is not installed")
    return 0


def _compare(args: argparse.Namespace, sizes: list[str], threads: list[int], ops: list[str], dtypes: list[str]) -> int:
    """`opgen bench --compare onednn`: opgen's C calls and oneDNN's primitives, cell by cell."""
    from opgen import bench_onednn
    from opgen.compile import BuildError

    if args.plot:
        raise SystemExit("opgen bench: --plot is not available with --compare")
    if args.rounds < 1:
        raise SystemExit("opgen bench: --rounds: 1 or more")
    if any(count < 1 for count in threads):
        raise SystemExit("opgen bench: --threads: with --compare, thread counts are 1 or more")
    try:
        bench_onednn.find_onednn()
    except bench_onednn.OneDNNMissing as error:
        print(f"opgen bench: error: {error}", file=sys.stderr)
        return 1
    total, done = len(bench_onednn.cases(ops, dtypes)) * len(sizes) * len(threads), 0
    live = sys.stderr.isatty()

    def progress(cell: bench_onednn.Cell) -> None:
        nonlocal done
        done += 1
        if live:
            print(f"\r\033[Kcompared {done}/{total} cells", end="", file=sys.stderr, flush=True)

    try:
        report = bench_onednn.run(sizes, threads, ops, dtypes, args.rounds, args.min_time / args.rounds, progress)
    except BuildError as error:
        print(f"opgen bench: error: {error}", file=sys.stderr)
        return 1
    finally:
        if live:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
    print(bench_onednn.table(report))
    if args.json:
        bench_onednn.save(report, args.json)
        print(f"wrote {args.json}")
    failed = [cell for cell in report["cells"] if cell["status"] in ("failed", "mismatch")]
    return 1 if failed else 0


def _compare_torch(args: argparse.Namespace, threads: list[int]) -> int:
    """`opgen bench --compare torch`: the ops with axes and the binary ops against PyTorch's, from Python."""
    from opgen import bench, bench_lines

    try:
        import torch  # noqa: F401
    except ImportError:
        print('opgen bench: error: --compare torch needs PyTorch (pip install ".[torch]")', file=sys.stderr)
        return 1
    if args.plot:
        raise SystemExit("opgen bench: --plot is not available with --compare")
    if args.rounds < 1 or any(count < 1 for count in threads):
        raise SystemExit("opgen bench: --rounds and --threads: 1 or more")
    cells = bench_lines.run(args.sizes_torch, threads, args.ops_torch, args.rounds, args.min_time)
    print(bench_lines.table(cells))
    if args.json:
        bench.save(bench_lines.report(cells, args.sizes_torch, args.rounds), args.json)
        print(f"wrote {args.json}")
    return 1 if any(cell["status"] != "timed" for cell in cells) else 0


def _info(args: argparse.Namespace) -> int:
    import opgen
    from opgen.plan import TARGETS

    details = opgen.info()
    names = [target["name"] for target in TARGETS]
    lower = names[: names.index(details["cpu_target"])] if details["cpu_target"] in names else []
    choices = " or ".join([", ".join(lower[:-1]), lower[-1]] if len(lower) > 1 else lower)
    hint = f" (set OPGEN_CPU_TARGET to {choices} to force a lower one)" if lower else ""
    print(
        f"opgen {details['version']}: kernels run the {details['cpu_target']} copy{hint}, {details['threads']} threads"
    )
    stream = details["stream_from_bytes"]

    def source(key: str) -> str:
        return "kept by `opgen tune`" if key in details["tuned"] else "`opgen tune` measures it"

    print(
        f"  outputs stream past the caches from {stream / 2**20:g} MiB moved a call"
        f" ({source('stream_from_bytes')}; OPGEN_STREAM_BYTES sets it)"
    )
    print(
        f"  calls take threads from {details['parallel_threshold']} elements of work"
        f" ({source('parallel_threshold')}; OPGEN_PARALLEL_THRESHOLD sets it)"
    )
    for op, variants in details["ops"].items():
        print(f"  {op}: {len(variants)} variants, {details['cpu_target']}")
    return 0


def _tune(args: argparse.Namespace) -> int:
    from opgen import tune

    result = tune.measure(min_time=args.min_time, largest=args.largest << 20)
    if result.seconds:
        print(f"ReLU backward f32 from C, {result.threads} threads against one (median seconds):")
        for n, (one, many) in sorted(result.seconds.items()):
            print(f"  {n:>8} elements: one thread {one * 1e6:9.1f} us, {result.threads} threads {many * 1e6:9.1f} us")
        print(f"calls take threads from {result.parallel_threshold} elements of work")
    else:
        print("one thread (OMP_NUM_THREADS, or a single core): no thread threshold to measure")
    on = f"{result.threads} threads" if result.threads > 1 else "one thread"
    print(f"the same on {on}, outputs stored in cache against streamed (median seconds):")
    for n, (stored, streamed) in sorted(result.stream_seconds.items()):
        print(f"  {n / 2**20:>6g} MiB moved: stored {stored * 1e6:9.1f} us, streamed {streamed * 1e6:9.1f} us")
    print(f"outputs stream from {result.stream_threshold / 2**20:g} MiB moved a call")
    if args.dry_run:
        return 0
    where = tune.save(result)
    print(
        f"kept in {where} (for {result.cpu}, {result.threads} threads;"
        " OPGEN_PARALLEL_THRESHOLD and OPGEN_STREAM_BYTES override it)"
    )
    for variable in ("OPGEN_PARALLEL_THRESHOLD", "OPGEN_STREAM_BYTES"):
        if variable in os.environ:
            given = os.environ[variable]
            print(f"note: {variable}={given} is set here: calls in this environment keep it", file=sys.stderr)
    return 0


def _check(args: argparse.Namespace) -> int:
    from opgen import check
    from opgen.compile import BuildError

    spec_dir = Path(args.specs) if args.specs else BUNDLED_SPECS
    library = Path(args.library) if args.library else None
    if library is not None and not library.is_file():
        raise RenderError(f"--library: no such file: {library}")
    try:
        results = check.run(spec_dir, library, Path(args.oracle) if args.oracle else None, args.seed)
    except BuildError as error:  # the specs that load do not compile: nothing to check
        print(f"opgen check: error: {error}", file=sys.stderr)
        return 1
    print(check.report(results))
    return 1 if any(r.failure for r in results) else 0


def _docs(args: argparse.Namespace) -> int:
    from opgen import spec_docs

    if args.check:
        if spec_docs.stale():
            print(f"{spec_docs.DOC_PATH} is stale: run `opgen docs`", file=sys.stderr)
            return 1
        print(f"{spec_docs.DOC_PATH} is current")
        return 0
    spec_docs.DOC_PATH.parent.mkdir(exist_ok=True)
    spec_docs.DOC_PATH.write_text(spec_docs.render())
    print(f"wrote {spec_docs.DOC_PATH}")
    return 0


def _positive_int(text: str) -> int:
    """argparse's type for a count that must be positive."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, not {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, not {value}")
    return value


def _add_tune(commands: Any) -> None:
    """The `opgen tune` command's arguments."""
    tuning = commands.add_parser(
        "tune", help="measure from which sizes calls take threads and stream their outputs on this machine, and keep it"
    )
    tuning.add_argument("--min-time", type=float, default=0.2, help="seconds each size is timed at least")
    tuning.add_argument(
        "--largest",
        type=_positive_int,
        default=1024,
        help="the largest call the stream measurement makes, in MiB moved (default 1024)",
    )
    tuning.add_argument("--dry-run", action="store_true", help="measure and print, keep nothing")
    tuning.set_defaults(run=_tune)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="opgen", description="Generate, compile and list deep-learning kernels.")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="render the specs to C, compile the module, and print what was built")
    build.add_argument("--specs", help="directory of op specs and dtypes.toml (default: the bundled specs)")
    build.add_argument("--out", help="output directory (default: the bundled generated/)")
    build.add_argument("--ops", help="comma-separated ops to build (default: all)")
    build.add_argument("--dtypes", help="comma-separated dtypes: keep the dtype combinations made of these")
    build.add_argument(
        "--portable",
        action="store_true",
        help="compile every CPU target's copy into the module, for other CPUs too (default: the copies this CPU "
        "runs; the C sources hold every target either way)",
    )
    build.set_defaults(run=_build)
    listing = commands.add_parser("list", help="list the ops and their variants")
    listing.add_argument("--specs", help="directory of op specs (default: the bundled specs)")
    listing.set_defaults(run=_list)
    info = commands.add_parser("info", help="which compiled copy (CPU target) and how many threads the kernels use")
    info.set_defaults(run=_info)
    _add_tune(commands)
    bench = commands.add_parser("bench", help="measure every op variant against the machine's bandwidth")
    bench.add_argument(
        "--sizes",
        help="S, M, L, HW1, HW7, HW14, C3, C24 (default: S to HW14; with --compare, S, M and L)",
    )
    bench.add_argument("--threads", help="comma-separated thread counts (default: 1 and all cores)")
    bench.add_argument("--ops", help="comma-separated ops (default: every bundled op)")
    bench.add_argument("--dtypes", default="f32,bf16,f16")
    bench.add_argument(
        "--min-time",
        type=float,
        default=0.2,
        help="seconds of calls per case (default 0.2; with --compare, per side, over its rounds)",
    )
    bench.add_argument("--no-baselines", action="store_true", help="skip NumPy and PyTorch")
    bench.add_argument("--json", help="write the results as JSON here (default: not written)")
    bench.add_argument("--plot", help="write a PNG chart here (needs matplotlib)")
    bench.add_argument(
        "--compare",
        choices=["onednn", "torch"],
        help="onednn: time opgen's C op API against an installed oneDNN's primitives, on the same buffers "
        "(pip install onednn-cpu-gomp onednn-devel-cpu-gomp); torch: the ops with axes (SoftMax, LogSoftmax, "
        "LayerNorm, LayerNormBackward, reductions) and the binary ops against PyTorch's, sizes S, M, L, T "
        "of opgen/bench_lines.py",
    )
    bench.add_argument("--rounds", type=int, default=5, help="with --compare: rounds per cell (default 5)")
    bench.set_defaults(run=_bench)
    checking = commands.add_parser(
        "check", help="run every variant of a built library against the oracle and print pass/fail per variant"
    )
    checking.add_argument("--specs", help="directory of op specs (default: the bundled specs)")
    checking.add_argument("--library", help="a shared library built from the generated C (default: the cffi module)")
    checking.add_argument("--oracle", help="a Python file with one oracle function per op (default: opgen.oracle)")
    checking.add_argument("--seed", type=int, default=0, help="seed of the random data (default 0)")
    checking.set_defaults(run=_check)
    docs = commands.add_parser("docs", help="write docs/spec-language.md from the spec loader's key tables")
    docs.add_argument("--check", action="store_true", help="only say whether the file is current (exit 1 if not)")
    docs.set_defaults(run=_docs)
    args = parser.parse_args(argv)
    try:
        status: int = args.run(args)
        sys.stdout.flush()  # here, so a closed pipe shows up below rather than at exit
        return status
    except (SpecError, RenderError) as error:
        print(f"opgen {args.command}: error: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # the reader went away (`opgen check | head`): stop quietly, as a tool killed by
        # SIGPIPE would; stdout goes to devnull so the flush at exit cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for such a tool


if __name__ == "__main__":
    sys.exit(main())
