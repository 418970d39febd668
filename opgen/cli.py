"""Command line: `opgen build` and `opgen list`."""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from opgen.render import BUNDLED_OUTPUT, BUNDLED_SPECS, BUNDLED_TEMPLATES, RenderError, render_library, write_files
from opgen.specs import SpecError


def _build(args: argparse.Namespace) -> int:
    from opgen.compile import BuildError, build_module

    spec_dir = Path(args.specs) if args.specs else BUNDLED_SPECS
    if args.specs and not args.out:
        raise SystemExit("opgen build: --out DIR is required with --specs (the bundled output is generated/)")
    out_dir = Path(args.out) if args.out else BUNDLED_OUTPUT
    started = time.perf_counter()
    library = render_library(spec_dir, BUNDLED_TEMPLATES)
    written = write_files(out_dir, library.files)
    for name in sorted(library.files):
        print(f"{'wrote    ' if name in written else 'unchanged'} {out_dir / name}")
    try:
        module = build_module(library)
    except BuildError as error:
        print(f"opgen build: error: {error}", file=sys.stderr)
        return 1
    target = out_dir / module.name
    if not target.exists():
        for old in out_dir.glob("_opgen_*"):  # modules of earlier builds
            old.unlink()
        shutil.copy2(module, target)
    kernels = len(library.kernels)
    print(f"built {len(library.specs)} ops, {kernels} kernels from {spec_dir} in {time.perf_counter() - started:.1f} s")
    print(f"module {target} (import it by name with {out_dir} on sys.path; or opgen.load({str(spec_dir)!r}))")
    return 0


def _list(args: argparse.Namespace) -> int:
    library = render_library(Path(args.specs) if args.specs else BUNDLED_SPECS, BUNDLED_TEMPLATES)
    for spec in library.specs:
        print(f"{spec.name}  [{spec.pattern}]  {spec.source}")
        for kernel in library.variants(spec.name):
            print(f"    {kernel['name']:48s} {kernel['detail']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="opgen", description="Generate, compile and list deep-learning kernels.")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="render the specs to C, compile the module, and print what was built")
    build.add_argument("--specs", help="directory of op specs and dtypes.toml (default: the bundled specs)")
    build.add_argument("--out", help="output directory (default: the bundled generated/)")
    build.set_defaults(run=_build)
    listing = commands.add_parser("list", help="list the ops and their variants")
    listing.add_argument("--specs", help="directory of op specs (default: the bundled specs)")
    listing.set_defaults(run=_list)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (SpecError, RenderError) as error:
        print(f"opgen {args.command}: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
