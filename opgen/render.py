"""Render specs through the pattern templates into C sources, a header and a manifest."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from opgen import bundle, c_api, float_range, plan
from opgen.specs import MAX_LINE_VALUES, MAX_RANK, DTypeTable, OpSpec, SpecError, load_specs
from opgen.sum_slots import sum_slots

BUNDLED_SPECS = bundle.SPECS
BUNDLED_TEMPLATES = bundle.TEMPLATES
BUNDLED_OUTPUT = bundle.OUTPUT
# Hand-written C in templates/drivers/: the thread team, which opgen's own functions use, copied
# into every build; the others into builds that have ops of their pattern.
CORE_DRIVERS = ("opgen_team.h",)
PATTERN_DRIVERS = {
    "elementwise": ("opgen_map.h", "opgen_map.c"),
    "along_axes": ("opgen_lines.h", "opgen_lines.c"),
    "broadcast_reduce": ("opgen_channels.h", "opgen_channels.c", "opgen_map.h", "opgen_map.c"),
    "reduce_then_apply": ("opgen_channels.h", "opgen_channels.c"),
    "binary": ("opgen_binary.h", "opgen_binary.c"),
}
DRIVERS = CORE_DRIVERS + tuple(dict.fromkeys(name for names in PATTERN_DRIVERS.values() for name in names))


class RenderError(RuntimeError):
    """A template failed; the message names the template and line."""


@dataclass(frozen=True)
class Library:
    """Everything generated from one spec directory."""

    spec_dir: Path
    table: DTypeTable
    specs: list[OpSpec]
    kernels: list[plan.KernelPlan]
    files: dict[str, str]  # file name -> text
    cdef: str

    def variants(self, op: str) -> list[plan.KernelPlan]:
        return [k for k in self.kernels if k.op == op]


def _fail(message: str) -> None:
    raise RenderError(message)


def comment_text(text: str) -> str:
    """`text` (a spec's doc, summary or source: anything a user wrote) made inert inside a C block
    comment: ASCII only (other characters as U+XXXX), one line (line breaks and other control
    characters as spaces), and no comment delimiters, trigraphs or line splices left in it."""
    printable = "".join(
        char if " " <= char <= "~" else " " if char.isspace() or ord(char) < 32 else f"U+{ord(char):04X}"
        for char in str(text)
    )
    for found, inert in (("*/", "* /"), ("/*", "/ *"), ("??", "? ?")):
        while found in printable:  # "*/*" needs two rounds; each round shortens no delimiter-free text
            printable = printable.replace(found, inert)
    return printable.replace("\\", "\\ ")  # a backslash never ends a line of C


def environment(template_dir: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.globals["raise"] = _fail
    env.filters["comment_text"] = comment_text
    env.filters["spliced"] = spliced
    env.globals["zip"] = zip
    env.globals["sum_slots"] = sum_slots
    return env


def spliced(text: str) -> str:
    """A macro's lines, to stand alone on a template line (`{{ macro(...) | spliced }}`): its
    last line break dropped (the template line gives it), and no lines at all made a line of
    one blank, which _render drops."""
    return text.removesuffix("\n") or " "


def _render(env: jinja2.Environment, name: str, **context: Any) -> str:
    try:
        # a line of indentation alone is a macro call that expanded to nothing: dropped
        return re.sub(r"(?m)^[ \t]+\n", "", env.get_template(name).render(**context))
    except jinja2.TemplateSyntaxError as error:
        raise RenderError(f"{error.filename or name}:{error.lineno}: {error.message}") from None
    except (jinja2.TemplateError, RenderError, TypeError, ValueError) as error:
        frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.endswith(".j2")]
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else name
        raise RenderError(f"{where}: {error}") from None


def render_library(
    spec_dir: Path = BUNDLED_SPECS,
    template_dir: Path = BUNDLED_TEMPLATES,
    ops: list[str] | None = None,
    dtypes: list[str] | None = None,
) -> Library:
    """Load and check the specs in `spec_dir`, then render every file in memory.

    `ops` keeps only those ops; `dtypes` keeps only the dtype combinations made of those dtypes."""
    table, specs = load_specs(Path(spec_dir), ops)  # `ops`: those files alone
    specs = select(specs, table, ops, dtypes)
    env = environment(Path(template_dir))
    kernels_by_op = {spec.name: [plan.kernel(v, table) for v in plan.variants(spec, table)] for spec in specs}
    kernels = [k for spec in specs for k in kernels_by_op[spec.name]]
    label = "specs/" if Path(spec_dir).resolve() == BUNDLED_SPECS else comment_text(Path(spec_dir).name) + "/"
    # functions of opgen's own, compiled per target and dispatched like the kernels
    support = {"opgen_bandwidth": ("bandwidth.c.j2", _probes()), "opgen_narrow": ("narrow.c.j2", _narrowers(table))}
    support_kernels = [k for _, described in support.values() for k in described]
    settings = _settings(table, specs, label)
    try:
        apis = [c_api.describe(spec, table, kernels_by_op[spec.name]) for spec in specs]
    except ValueError as error:
        raise RenderError(str(error)) from None
    files = {
        "opgen.h": _render(env, "opgen.h.j2", kernels=kernels + support_kernels, apis=apis, **settings),
        "opgen_internal.h": _render(
            env,
            "opgen_internal.h.j2",
            compute_types=sorted(table.compute_types),
            short_exp=float_range.ARITHMETICS,
            line_exp_coefficients=float_range.line_exp_coefficients(),
            **settings,
        ),
        "opgen_dispatch.c": _render(env, "dispatch.c.j2", kernels=kernels + support_kernels, **settings),
        "opgen_runtime.c": _render(env, "runtime.c.j2", **settings),
    }
    compiled_targets = [t for t in plan.TARGETS[1:] if "copy_of" not in t]
    files |= _source_files(env, Path(template_dir), specs, kernels_by_op, apis, support, compiled_targets, settings)
    aclnn_apis = [api for api in apis if api["aclnn"]]
    if aclnn_apis:
        acl_dtypes = [d for d in settings["dtypes"] if d["acl_name"]]
        aclnn_settings = {**settings, "dtypes": acl_dtypes, "apis": aclnn_apis}
        files["opgen_aclnn.h"] = _render(env, "aclnn.h.j2", **aclnn_settings)
        files["opgen_aclnn.c"] = _render(env, "aclnn.c.j2", **aclnn_settings)
    headers = [name for name in ("opgen.h", "opgen_aclnn.h") if name in files]
    files["CMakeLists.txt"] = _render(
        env,
        "CMakeLists.txt.j2",
        sources=sorted(n for n in files if n.endswith(".c")),
        headers=headers,
        targets=compiled_targets,
    )
    files["manifest.json"] = json.dumps(_manifest(specs, kernels, files), indent=2) + "\n"
    _check_enum_names(specs, files)
    cdef = _render(env, "cdef.h.j2", kernels=kernels + support_kernels, apis=apis, aclnn_apis=aclnn_apis, **settings)
    return Library(Path(spec_dir), table, specs, kernels, files, cdef)


def _settings(table: DTypeTable, specs: list[OpSpec], label: str) -> dict[str, Any]:
    """What every template may read: the tuning constants, the dtypes, the C API's contracts."""
    return {
        "block": plan.BLOCK,
        "tile_elements": plan.TILE_ELEMENTS,
        "max_tiles": plan.MAX_TILES,
        "min_row_tiles": plan.MIN_ROW_TILES,
        "max_partials": plan.MAX_PARTIALS,
        "row_group": plan.ROW_GROUP,
        "lines_max_chunks": plan.LINES_MAX_CHUNKS,
        "lines_chunk_elements": plan.LINES_CHUNK_ELEMENTS,
        "lines_kept_terms": plan.LINES_KEPT_TERMS,
        "lines_column_blocks": plan.LINES_COLUMN_BLOCKS,
        "lines_wide_tiles": plan.LINES_WIDE_TILES,
        "lines_wide_values": plan.LINES_WIDE_VALUES,
        "lines_group": plan.LINES_GROUP,
        "lines_group_elements": plan.LINES_GROUP_ELEMENTS,
        "lines_short_blocks": plan.LINES_SHORT_BLOCKS,
        "binary_piece": plan.BINARY_PIECE,
        "unrolled": plan.UNROLLED,
        "channel_split": plan.CHANNEL_SPLIT,
        "segment_bytes": plan.SEGMENT_BYTES,
        "segment": plan.SEGMENT,
        "in_order_channels": plan.IN_ORDER_CHANNELS,
        "channel_range": plan.CHANNEL_RANGE,
        "float_run_range": plan.FLOAT_RUN_RANGE,
        "stream_channel_range": plan.STREAM_CHANNEL_RANGE,
        "stream_float_run_range": plan.STREAM_FLOAT_RUN_RANGE,
        "reread_bytes": plan.REREAD_BYTES,
        "reread_min": plan.REREAD_MIN,
        "paired_rows": plan.PAIRED_ROWS,
        "tiled_channels": plan.TILED_CHANNELS,
        "repeat_inner": plan.REPEAT_INNER,
        "repeat_max_row": plan.REPEAT_MAX_ROW,
        "repeat_min_rows": plan.REPEAT_MIN_ROWS,
        "float_run": plan.FLOAT_RUN,
        "chains": plan.CHAINS,
        "tail_block_min": plan.TAIL_BLOCK_MIN,
        "parallel_threshold": plan.PARALLEL_THRESHOLD,
        "one_thread_region": plan.ONE_THREAD_REGION,
        "max_threads": plan.MAX_THREADS,
        "stream_bytes": plan.STREAM_BYTES,
        "costly_lines_bytes": plan.COSTLY_LINES_BYTES,
        "prefetch_bytes": plan.PREFETCH_BYTES,
        "max_line_values": MAX_LINE_VALUES,
        "targets": plan.TARGETS,
        "spec_dir": label,
        "dtypes": [
            {
                "name": d.name,
                "c_type": d.c_type,
                "store": d.store,
                "store_block": d.store_block,
                "code": c_api.dtype_code(d.name),
                "acl_name": d.acl_name,
                "acl_value": d.acl_value,
            }
            for d in table.dtypes.values()
        ],
        "statuses": c_api.STATUSES,
        "max_rank": MAX_RANK,
        "max_operands": c_api.MAX_OPERANDS,
        "max_forms": len(c_api.FORM_CODES),
        "form_codes": list(c_api.FORM_CODES.values()),
        "kernel_forms": [form.upper() for form in plan.KERNEL_FORMS],
        "enums": c_api.enums(specs),
    }


def _source_files(
    env: jinja2.Environment,
    template_dir: Path,
    specs: list[OpSpec],
    kernels_by_op: dict[str, list[plan.KernelPlan]],
    apis: list[dict[str, Any]],
    support: dict[str, tuple[str, list[plan.Signature]]],
    compiled_targets: list[plan.Target],
    settings: dict[str, Any],
) -> dict[str, str]:
    """The C sources of opgen's own functions, the drivers, and each op's kernels and API, with
    a file per compiled target for every file of kernels."""
    files = {}
    for name, (template, _) in support.items():
        files[f"{name}.c"] = _render(env, template, **settings)
        for target in compiled_targets:
            files[f"{name}__{target['name']}.c"] = _render(env, "target.c.j2", op=name, target=target)
    for name in CORE_DRIVERS:
        files[name] = (template_dir / "drivers" / name).read_text()
    for pattern, names in PATTERN_DRIVERS.items():
        if any(spec.pattern == pattern for spec in specs):
            # the hand-written driver of the pattern's ops, copied as it is
            for name in names:
                files[name] = (template_dir / "drivers" / name).read_text()
    for spec, api in zip(specs, apis):
        # each pattern's template reads its kernels' own plans
        described: list[Any] = kernels_by_op[spec.name]
        if spec.pattern == "along_axes":
            described = [k.lines for k in described]
        elif spec.pattern == "binary":
            described = [k.binary for k in described]
        files[f"{spec.name}.c"] = _render(env, f"{spec.pattern}.c.j2", op=spec.name, kernels=described, **settings)
        files[f"{spec.name}_api.c"] = _render(env, "api.c.j2", api=api)
        for target in compiled_targets:
            files[f"{spec.name}__{target['name']}.c"] = _render(env, "target.c.j2", op=spec.name, target=target)
    return files


# What C defines at file scope: macros, typedef names, enumerators, functions (a line that
# starts with a type and ends its declarator with a parenthesis).
_DEFINED = re.compile(
    r"#\s*define\s+(\w+)|\}\s*(\w+)\s*;|typedef\s[^;{]*?\b(\w+)\s*;|^\s+(OPGEN_\w+)\s*(?:=|,|$)"
    r"|^[A-Za-z_][\w \t*]*?\b(\w+)\s*\(",
    re.M,
)


def _check_enum_names(specs: list[OpSpec], files: dict[str, str]) -> None:
    """A string attribute becomes a C enum type, opgen_<name>, with members OPGEN_<NAME>_<VALUE>
    (opgen.h): none may be a name opgen's C defines otherwise (opgen_status, opgen_tensor, an
    op's function opgen_<op>, a macro such as OPGEN_MAX_RANK), nor a member of another
    attribute's enum. The loader cannot tell: the names opgen defines are those of the C."""
    enums = c_api.enums(specs)
    header = files["opgen.h"]
    for enum in enums:  # the enums' own definitions are not a collision
        first = re.escape(enum["members"][0][0])
        block = rf"typedef enum {enum['type']} \{{\s*{first} = 0[^}}]*\}} {enum['type']};"
        header = re.sub(block, "", header)
    defined: set[str] = set()
    for name, text in {**files, "opgen.h": header}.items():
        # opgen's own files: an op's files define its kernels (declared in opgen.h) and statics
        if name.endswith(".h") or (name.startswith("opgen") and name.endswith(".c") and "__" not in name):
            text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
            defined |= {n for match in _DEFINED.finditer(text) for n in match.groups() if n}
    members: dict[str, str] = {}
    for spec in specs:
        for index, attribute in enumerate(spec.attributes):
            if attribute.type != "string":
                continue
            where = f"{spec.path}: attributes[{index}]"
            if f"opgen_{attribute.name}" in defined:
                raise SpecError(
                    f"{where}.name: '{attribute.name}' would name the C enum type opgen_{attribute.name},"
                    " a name opgen's C already defines: choose another name"
                )
            for value in attribute.allowed:
                member = c_api.enum_value(attribute.name, value)
                other = members.setdefault(member, attribute.name)
                if member in defined or other != attribute.name:
                    clash = f"attribute {other}'s" if other != attribute.name else "opgen's C"
                    raise SpecError(
                        f"{where}.allowed: '{value}' would make the C enumerator {member}, a name {clash}"
                        " already defines: choose other names"
                    )


def select(specs: list[OpSpec], table: DTypeTable, ops: list[str] | None, dtypes: list[str] | None) -> list[OpSpec]:
    """The subset of `specs` a build asked for; an unknown name or an empty op is an error."""
    if ops is not None:
        known = {spec.name for spec in specs}
        unknown = [name for name in ops if name not in known]
        if unknown:
            raise RenderError(f"--ops: no op named {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        specs = [spec for spec in specs if spec.name in ops]
    if dtypes is not None:
        unknown = [name for name in dtypes if name not in table.dtypes]
        if unknown:
            raise RenderError(f"--dtypes: no dtype named {', '.join(unknown)} (known: {', '.join(table.dtypes)})")
        chosen = []
        for spec in specs:
            rows = tuple(row for row in spec.dtypes if set(row.values()) <= set(dtypes))
            if not rows:
                raise RenderError(f"--dtypes: {spec.name} has no dtype combination within {', '.join(dtypes)}")
            chosen.append(dataclasses.replace(spec, dtypes=rows))
        specs = chosen
    return specs


def _probes() -> list[plan.Signature]:
    """The benchmark's bandwidth probes, described like kernels for the header and dispatcher."""
    floats = [("const float *", "first"), ("const float *", "second")]
    described = [
        (
            "opgen_probe_copy",
            "memory bandwidth probe: out = in",
            [("const float *", "in"), ("float *", "out"), ("int64_t ", "count"), ("int ", "stream")],
        ),
        (
            "opgen_probe_add",
            "memory bandwidth probe: out = first + second (2 reads, 1 write)",
            [*floats, ("float *", "out"), ("int64_t ", "count"), ("int ", "stream")],
        ),
        (
            "opgen_probe_dot",
            "memory bandwidth probe: *result = sum(first * second) (2 reads)",
            [*floats, ("double *", "result"), ("int64_t ", "count")],
        ),
    ]
    return [
        plan.Signature(name, summary, "f32; stream: non-temporal stores", tuple(params), "probe", None)
        for name, summary, params in described
    ]


def _narrowers(table: DTypeTable) -> list[plan.Signature]:
    """The sums-to-dtype conversions (opgen_narrow.c), described like kernels for the header and
    dispatcher."""
    return [
        plan.Signature(
            name=f"opgen_narrow_{d.name}",
            summary=f"sums (double) to {d.name}, rounded as the kernels round (to f32, then to {d.name})",
            detail="for the *_sums of the broadcast_reduce kernels",
            params=(("const double *", "sums"), (f"{d.c_type} *", "out"), ("int64_t ", "count")),
            pattern="narrow",
            form=None,
        )
        for d in table.dtypes.values()
    ]


def _manifest(specs: list[OpSpec], kernels: list[plan.KernelPlan], files: dict[str, str]) -> dict[str, Any]:
    """A build-system-neutral list of the files and functions."""
    return {
        "generator": "opgen",
        "header": "opgen.h",
        "headers": [name for name in ("opgen.h", "opgen_aclnn.h") if name in files],
        "sources": sorted(name for name in files if name.endswith(".c")),
        "ops": [
            {
                "name": spec.name,
                "pattern": spec.pattern,
                "spec": Path(spec.path).name,
                "api": [
                    f"opgen_{spec.name}{suffix}"
                    for suffix in ("", "_workspace_size", "_with_workspace", "_with_data", "_with_arrays")
                ]
                + ([f"aclnn{spec.aclnn}GetWorkspaceSize", f"aclnn{spec.aclnn}"] if spec.aclnn else []),
                "functions": [
                    {
                        "name": k.name,
                        "form": k.form,
                        "detail": k.detail,
                        "workspace_doubles_per_channel": k.workspace_per_channel,
                    }
                    for k in kernels
                    if k.op == spec.name
                ],
            }
            for spec in specs
        ],
    }


def write_files(out_dir: Path, files: dict[str, str]) -> list[str]:
    """Write files that changed (each atomically); return the names written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files.items():
        path = out_dir / name
        if path.exists() and path.read_text() == text:
            continue
        handle, temporary = tempfile.mkstemp(dir=out_dir, prefix=f".{name}.", suffix=".tmp")
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
        os.replace(temporary, path)
        written.append(name)
    return written
