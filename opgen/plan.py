"""Plan variants: every (op, dtype combination, loop form, specialized attribute values).

Naming grammar of a variant (and of its C function):
    <op>_<dtypes>[_<form>][_<flag> | _no_<flag> ...]
<dtypes> lists the distinct dtypes of the combination in spec order (f32, bf16_f32);
<form> is the loop nest: ncx (channel outer, spatial inner) or nxc (channel innermost); or,
for broadcast_reduce, full: the operand as big as the tensor, one term per sum, a plain
elementwise pass;
each boolean attribute the math reads is fixed at generation time and named last.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Required, TypedDict, cast

from opgen import binary, expr, float_range, lines
from opgen.binary import BinaryKernel
from opgen.lines import LinesKernel
from opgen.specs import DType, DTypeTable, OpSpec

BLOCK = 16  # elements per unrolled step; also the number of partial sums in a reduction (fixed order)
# Sets of BLOCK lane sums a reduction rotates through block by block (OPGEN_CHAINS), so that the
# additions of consecutive blocks do not wait for each other; the templates write 4 out.
CHAINS = 4
# The ncx loops compute a row's tail (after its last whole block) of at least this many elements
# as one masked block, shorter ones element by element, which costs less for one to three
# (f32 PReLU, one thread, in cache: 3x6 20 % slower as a block, 14x14 35 % faster, 5x5 75 %).
TAIL_BLOCK_MIN = 4
# A kernel's loop form, in the order of an op's kernel table (C: OPGEN_KERNEL_<FORM>, the
# runtime's choice): a channel op's ncx (channels apart) and nxc (interleaved) loops, and
# broadcast_reduce's full form (an operand as big as the reference: one elementwise pass).
KERNEL_FORMS = ("ncx", "nxc", "full")
FORMS = KERNEL_FORMS[:2]
# Reductions run in tiles fixed by the shape alone, so sums never depend on the thread count.
TILE_ELEMENTS = 65536
MAX_TILES = 64
MIN_ROW_TILES = 16  # rows from which a reduction's tiles are ranges of rows (else of the inner dim)
MAX_PARTIALS = 1 << 20  # partial sums (doubles) of one sum across all tiles, at most
ROW_GROUP = 16  # rows of an nxc reduction summed in registers before the partial sums in memory
# along_axes: chunks of lines whose sums across lines are kept apart (a function of the shape
# alone), more than threads so that threads share them out evenly
LINES_MAX_CHUNKS = 64
# ... and at least this many elements a chunk (or one unit), since each chunk zeroes a row of
# partial sums and adds it to the first chunk's: a chunk per line of 64 x 1024 (LayerNorm
# backward's gamma and beta gradients) spent 37 % of the call on that.
LINES_CHUNK_ELEMENTS = 16384
# ... and the floats of each thread's scratch where a bf16 or f16 line keeps a reduction's terms
# for its element pass (lines.py), which would otherwise compute them again (SoftMax's exp):
# lines up to this long (16 KB of the stack, with L1 room for the line's input and output).
LINES_KEPT_TERMS = 4096
# ... and the blocks of neighbouring lines a columns microkernel takes at once: each step reads
# that many neighbouring cache lines, which the hardware prefetches (with one, rows 4 KB apart,
# ReduceSum over axis 0 of 1024 x 1024 f32 took twice the time; docs/performance-changes.md).
LINES_COLUMN_BLOCKS = 4
# ... and the tiles of neighbouring lines one columns call takes at most where the tensors lie
# past the caches (streamed): each step then reads that many tiles' stretch of a row, which
# memory serves faster than many rows' short stretches (over axis 1 of 32 x 64 x 112 x 112 f32,
# one thread: SoftMaxBackward 0.43x the time of single tiles, LogSoftmaxBackward 0.41x). Every
# call in tiles that wide took 1.1-1.5x the time in cache: streamed calls alone take them.
LINES_WIDE_TILES = 4
# ... and the doubles of each thread's copy of a kernel's along inputs (LayerNorm's gamma and
# beta), widened once a call for its math on double vectors where they fit (else each block
# widens what it reads: LayerNorm f32 took 1.12-1.16x the time; docs/performance-changes.md).
# 16 KB: in L1 with the line (a copy of 32 KB, lines of 2048, took 1.07x the time).
# The kept terms share the space on each thread's stack.
LINES_WIDE_VALUES = 2048
# ... and the contiguous lines each pass goes over in turn before the next pass (a group): a
# short line's passes form one chain of latencies (a reduction, its fold, the values after it,
# the next pass), the lines of a group do not depend on each other. At most this many lines a
# group, and as many as make LINES_GROUP_ELEMENTS elements (one line a group past that): 4
# lines of 28 to 56, 2 of 112 (4 of them took 1.1x the time of 2 streamed from memory),
# LayerNorm's lines of 1024 one at a time (4 took 1.1x the time); docs/performance-changes.md.
LINES_GROUP = 4
LINES_GROUP_ELEMENTS = 256
# ... and the blocks of the longest line whose groups run held in registers (_short)
LINES_SHORT_BLOCKS = 4
assert LINES_GROUP * LINES_SHORT_BLOCKS * BLOCK <= LINES_GROUP_ELEMENTS, "a group of short lines is whole"
# a group's lines keep their terms (bf16, f16 SoftMax) in parts of one scratch, whole blocks each
assert LINES_GROUP * (LINES_GROUP_ELEMENTS // 2 + BLOCK) <= LINES_KEPT_TERMS, "a group's kept terms fit"
# binary: elements of the longest run one microkernel call computes; long rows are cut into such
# pieces so that threads share them out even when there are few rows (a multiple of BLOCK)
BINARY_PIECE = 16384
# OPGEN_UNROLLED: how many times GCC writes out a short loop of a constant trip count (the
# lanes' tree sum: 8 writes its 6 halvings out whole)
UNROLLED = 8
assert BINARY_PIECE % BLOCK == 0, "a binary piece is whole blocks"
# An nxc reduction over many rows sums them in tiles of rows, a group of 16 rows
# (OPGEN_ROW_GROUP) at a time into arrays that hold the group's sums for SEGMENT_BYTES of
# channels (2048 channels of double sums, 4096 of float runs): whole rows up to that length.
# Segments of rows ran a third slower than whole rows (timed from C on a Xeon, about 25.7 M
# elements, segments of 256 channels: PReLU f32 at 512 to 8192 channels 12-14 GB/s one
# thread, 21-23 with whole rows). Longer rows (BatchNorm's, below CHANNEL_SPLIT) go in
# segments of SEGMENT channels: at 8192 channels, segments of 4096 ran 3-8 % slower.
SEGMENT_BYTES = 16384
SEGMENT = 256
# The tiled loop of a single-pass reduction (PReLU) walks its rows in memory order, as when it
# streams, also from this many channels where its blocks of BLOCK elements are shorter than a
# cache line (f16, bf16): walking 16 rows block by block, a line's second half was no longer
# in L1 when its turn came. Timed from C on a Xeon, one thread, PReLU NXC bf16 in cache and
# at a few MB: 300 to 4096 channels 0-41 % faster (power-of-two channel counts, whose rows
# share L1 sets, 70-190 %); 64-128 channels up to 17 % slower. f32 blocks are whole lines:
# in order it ran up to 30 % slower in cache.
IN_ORDER_CHANNELS = 256
# Rows of at least this many channels are split by channel instead, and so are the single-pass
# reductions' (PReLU) rows longer than a segment: ranges of channels over all rows stream as
# fast as whole rows, where the two-pass one (BatchNorm) ran up to 25 % slower on two threads
# below this length. Which shapes split decides the order of their sums, so it is part of the
# results' bits (never the thread count).
CHANNEL_SPLIT = 16384
# ... in ranges of at most this many channels: a range's double sums (128 KiB) then stay in a
# core's L2 while the rows stream past (262144, 3 MiB of sums, measured PReLU
# with a [C, H, W] slope 12-16 % slower on a Xeon). Speed only: a channel's sum is the same
# whichever range holds it, as the ranges already change with the thread count.
CHANNEL_RANGE = 16384
# ... or of this many where the split loop's sums go through float runs (f16, bf16 PReLU): its
# runs are loaded and stored for every pair of rows, and at 4096 channels (16 KiB a run) they
# stay in L1. Timed from C on a Xeon, 32 rows of 802 816 channels: bf16 and f16 1-4 % faster
# on one thread, 3-5 % on two, than with 16384; f32 (double sums, no runs) 2-5 % slower.
FLOAT_RUN_RANGE = 4096
# Past the caches (more than STREAM_BYTES moved) the ranges are longer: each row's stretch of a
# range streams from memory, and the longer the stretches, the fewer the jumps from row to row
# that the prefetchers must follow (f32's double sums, 512 KiB, and the 16-bit dtypes' float
# runs and double sums, 384 KiB, still in a core's L2). Timed from C on a Zen 5, PReLU with
# 32 rows of 802 816 channels, one thread: f32 +7-11 % at 65536 channels (131072 no faster);
# bf16, f16 +3-10 % at 16384 and another 2-10 % at 32768. In cache the short ranges stay: f32
# 2-5 % slower with 65536.
STREAM_CHANNEL_RANGE = 65536
STREAM_FLOAT_RUN_RANGE = 32768
# BatchNorm's split (many channels, or few rows) runs both passes range by range; its ranges
# are as long as lets a range's rows (every tensor) fit in REREAD_BYTES, where the second
# pass re-reads them from L2, when that is at least REREAD_MIN channels (shorter stretches
# of rows streamed slower than re-reading them from memory); else CHANNEL_RANGE. Timed from
# C on a Xeon, f32: 32 rows of 802 816 channels 16.0 -> 21.5 GB/s one thread with ranges of
# 1024 instead of 16384; 512 rows of 16384 channels 36 % slower at 1024.
REREAD_BYTES = 393216
REREAD_MIN = 1024
# NCX tensors whose inner (spatial) dim is shorter than REPEAT_INNER, with at least
# REPEAT_MIN_ROWS rows, run through the nxc loop as
# [outer][channels * inner], each channel operand repeated along inner (one sum per (channel,
# position), added up per channel in a fixed order): the ncx loop reads a channel as one short
# unit per row, a row of channels apart, slowly (past the caches, the prefetchers follow them
# poorly). BatchNorm does so only past the caches (more than STREAM_BYTES moved; in cache its
# ncx loop reads a channel again from there) where the repeated rows are shorter than
# REPEAT_MAX_ROW. (Below BLOCK elements every
# tensor does.) Which loop runs decides the order of the sums: part of the bits, with the shape
# and the dtypes. Measured on a Zen 5 core: see docs/performance-changes.md.
REPEAT_INNER = 256
REPEAT_MIN_ROWS = 32
REPEAT_MAX_ROW = 32768
# BatchNorm's element pass over rows (nxc, not split) goes two rows at a time, block by block,
# from this many channels: their per-channel values (16 bytes a channel in f32) no longer stay
# in L1 from row to row, and the second row finds its block's in L1. Timed from C on a Xeon,
# about 25.7 M elements, one thread: f32 4096 channels +6 %, 200 704 +13 %; bf16 +2 % and
# +22 %; below, bf16 lost 2-7 % (64 to 2048 channels) where f32 gained up to 5 %.
PAIRED_ROWS = 4096
# NXC rows of C channels, not a whole number of blocks, are taken BLOCK / gcd(C, BLOCK) rows at
# a time as one row of lcm(C, BLOCK) channels (the channel operands tiled, the sums folded
# back) where that row has at most this many channels: otherwise every row ends in a tail,
# and rows of 3 channels took 30-40 times as long per element as rows of 32. Longer tiled
# rows (129 or 1000 channels, 2064 and 2000 tiled) took BatchNorm 1.2-1.45 times as long
# (docs/performance-changes.md). Part of the sums' order, so of their bits.
TILED_CHANNELS = 1024
# Sum terms exact in float (products of two f16 or bf16 values, say) are added in float, at
# most FLOAT_RUN of them per float partial sum, before the double sums: converting every term
# to double costs more than the rest of a PReLU. Where terms can leave f32's range (bf16), a
# run whose float sums come out infinite or NaN is summed again in double. The error this
# adds is stated in accuracy.py.
FLOAT_RUN = 16
# Elements below which a kernel runs on one thread. Timed from C on the 2-core AMD EPYC, two
# threads, 1 x 64 x 28 x 28 (50,176 elements): with 16384 instead of 65536 the elementwise ops
# took 0.60-0.79 of the time, BatchNorm backward 0.62-0.76, PReLU's full form 0.70; at 1 x 64 x
# 2 x 7 x 1024 unchanged.
PARALLEL_THRESHOLD = 16384
# Elements from which BatchNorm's element pass runs in a parallel region on one thread too (its
# loop then compiles apart from the rest: faster past the caches, see opgen_channels.c); at
# 50,176 elements the region cost it 4 %.
ONE_THREAD_REGION = 65536
# An exp() in an element's math costs about this many elements of plain arithmetic (timed in
# cache: sigmoid from src against from dst), so such kernels start threads that much sooner.
EXP_WORK = 4
MAX_THREADS = 1024  # a thread count above this is refused (Python) or capped (C): OpenMP exhausts memory
STREAM_BYTES = 16 << 20  # bytes moved above which outputs use non-temporal stores
# Outputs opgen allocates from Python start on a 64-byte boundary from this size (fastcall.c's
# allocation handler; NumPy's own allocator puts them 16 or 32 bytes past one). In cache,
# stores that straddle two lines cost: an f32 Add of 64 x 1024 took 8.98 us into an output
# 16 bytes past a line, 6.80 on a line; the handler costs about 0.4 us a call, so smaller
# outputs keep NumPy's.
ALIGNED_OUTPUT_BYTES = 128 << 10
# Bytes moved from which the elementwise pass stores through line writers that are not cheap
# (dtype table: line_writer_cheap): below, the data sit in L2, where a 32-byte store across two
# lines costs little and the writer's permutations more (PReLU full-shape bf16, one thread: 2 MB
# moved 19 % slower through the writer, 4 MB 22 % faster). The pass has a loop for each side.
COSTLY_LINES_BYTES = 4 << 20
PREFETCH_BYTES = 4096  # how far ahead of each block load the next lines are asked for


class Target(TypedDict, total=False):
    """An entry of TARGETS (the templates read it too)."""

    name: Required[str]
    isa: str  # the instruction sets of its own copy (target pragma); "" for the baseline
    gcc_isa: str  # more of GCC's target pragma (options clang does not take)
    copy_of: str  # the target whose code it runs (no code of its own)
    flag: str  # a C int the dispatcher sets when this target is chosen
    cpu: Required[tuple[str, ...]]  # the CPU flags it needs


# Compiled copies of every kernel, best last; chosen at run time by what the CPU supports.
TARGETS: tuple[Target, ...] = (
    {"name": "baseline", "isa": "", "cpu": ()},
    {"name": "avx2", "isa": "avx2,fma,f16c,bmi,bmi2", "cpu": ("avx2", "fma", "f16c")},
    {
        "name": "avx512",
        "isa": "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2",
        "gcc_isa": "prefer-vector-width=512",
        "cpu": ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2", "fma", "f16c"),
    },
    # The avx512 copies, storing bf16 with the AVX512-BF16 conversion instruction (checked at
    # run time, per block) instead of integer rounding: no code of its own.
    {
        "name": "avx512_bf16",
        "copy_of": "avx512",
        "flag": "opgen_bf16_instruction",
        "cpu": ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2", "fma", "f16c", "avx512bf16"),
    },
)


def compiled_targets() -> tuple[str, ...]:
    """The targets with code of their own (a `<op>__<name>.c` copy each, the baseline's being
    `<op>.c`), in TARGETS' order."""
    return tuple(target["name"] for target in TARGETS if "copy_of" not in target)


def host_targets(cpu_flags: frozenset[str] | None = None) -> tuple[str, ...]:
    """The compiled targets this CPU can run (`cpu_flags`: the kernel's CPU flags, read from
    /proc/cpuinfo when None), the baseline first: what a module built for this machine needs.
    Every compiled target when the flags cannot be read (not Linux on x86-64)."""
    flags = _cpu_flags() if cpu_flags is None else cpu_flags
    if flags is None:
        return compiled_targets()
    aliases = {"avx512bf16": "avx512_bf16"}  # CPUID feature name -> Linux's flag name
    runnable = {t["name"] for t in TARGETS if all(aliases.get(f, f) in flags for f in t["cpu"])}
    return tuple(name for name in compiled_targets() if name in runnable)


def _cpu_flags() -> frozenset[str] | None:
    import platform

    if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return None


@dataclass(frozen=True)
class Variant:
    op: OpSpec
    name: str
    dtypes: dict[str, DType]
    row: dict[str, str]
    form: str | None
    constants: dict[str, bool]

    @property
    def tag(self) -> str:
        return dtype_tag(self.row)


@dataclass(frozen=True)
class Signature:
    """A generated C function as the header and the dispatcher declare it: every kernel, and
    opgen's own functions compiled per target (the bandwidth probes, the narrowers)."""

    name: str
    summary: str
    detail: str  # the comment line under the summary: dtypes, types, specialized values
    params: tuple[tuple[str, str], ...]  # (C type, ending in a space or *; name), in order
    pattern: str  # the op's pattern, or "probe" / "narrow"
    form: str | None  # KERNEL_FORMS' name; None: one form


@dataclass(frozen=True, kw_only=True)
class KernelPlan(Signature):
    """What the header, the dispatcher and the op API read of every kernel. The along_axes and
    binary kernels carry their pattern's typed plan; elementwise, broadcast_reduce and
    reduce_then_apply kernels are ChannelKernel."""

    op: str
    workspace_per_channel: int = 0  # doubles of per-channel scratch (channel patterns)
    work_per_element: int = 1  # plain-arithmetic units an element costs (an exp costs more)
    across_count: int = 0  # along_axes: sums across lines (> 0: a <name>_workspace_size)
    lines: LinesKernel | None = None
    binary: BinaryKernel | None = None


@dataclass(frozen=True)
class KernelInput:
    """What the templates read of an input of a channel-pattern kernel: how it loads in each
    type (`load`), and which math sections read it."""

    name: str
    kind: str  # "tensor" or "channel" ("tensor" for every input in form full)
    c_type: str
    optional: bool
    default_compute: str  # the default as a literal of the compute type ("" with none)
    default_acc: str
    default_float: str
    # its element `@` loaded as the compute type, f32, the accumulation type: through `load`
    load_compute: str
    load_float: str
    load_acc: str
    load_block: str
    load_part: str
    in_elements: bool
    in_sums: bool
    in_loop: bool  # read by the elements or the sums: the pass that loops over elements
    in_channel: bool  # read by math.channel or math.after (per-channel values)
    in_sums_only: bool

    def load(self, type_: Literal["compute", "float", "acc"], at: str) -> str:
        """Its element `at` (a C index expression) loaded as `type_`."""
        pattern = {"compute": self.load_compute, "float": self.load_float, "acc": self.load_acc}[type_]
        return pattern.replace("@", at)


@dataclass(frozen=True)
class KernelOutput:
    """What the templates read of an output of a channel-pattern kernel: how it stores."""

    name: str
    kind: str
    c_type: str
    dtype: str
    optional: bool
    store_block: str
    store_part: str
    line_writer: str | None
    line_writer_cheap: bool
    store: str  # its value (in its section's type) stored to `name[@]`
    store_float: str


@dataclass(frozen=True)
class VectorEntry:
    """One named expression of a kernel's math in C: an element of an elementwise kernel's
    float path, or an element or sum term of a VectorMath."""

    name: str
    type: str  # the C type it is computed in: the path's
    c: str


@dataclass(frozen=True)
class VectorMath:
    """Math as intrinsics on a vector of lanes, the same bits as the lane loop it stands for: a
    float path's elements on 16 float lanes (AVX-512, expr.to_vector), or the sums' terms on
    double lanes (opgen_doubles: AVX2 or AVX-512, expr.to_vector_double)."""

    inputs: tuple[str, ...]  # the inputs it loads
    elements: tuple[VectorEntry, ...]  # each element's (or term's) vector expression


@dataclass(frozen=True)
class FloatPath:
    """The cheaper path of an elementwise kernel's blocks (plan._float_first): taken by a block
    whose checked inputs are each 0 or of magnitude inside their interval, where float_range
    shows the path's type stays in its normal range and within 1 ulp of the outputs.

    Invariants: `bounds` has an entry for every input of `intervals` not in `unchecked`;
    `unchecked` inputs only multiply or divide the results; `vector`, when present, computes
    the bits of `elements`."""

    type: str  # "float" or "double": the C type the path computes in
    calls_exp: bool
    exp_function: str  # the C function of its exp (opgen_exp_short...), unclamped
    exp_error_exponent: int  # that exp is within 2^this, relative
    intervals: Mapping[str, float_range.Interval]
    unchecked: tuple[str, ...]  # inputs no block checks: any finite value, a factor of the results
    last_factors: tuple[str, ...]  # inputs multiplied in last, unchecked (float_range.last_factors)
    bounds: Mapping[str, str]  # C: opgen_all_in_range's magnitude bits, per checked input
    elements: tuple[VectorEntry, ...]
    vector: VectorMath | None  # None: no intrinsics form (or not float)


@dataclass(frozen=True)
class MathEntry:
    """One math entry of a channel-pattern kernel, in C."""

    name: str
    c: str  # in the section's type (a float run's term in float)
    c_double: str  # in the accumulation type (scalar tails, runs summed again)
    guarded: bool  # a float term that may leave f32's range: its runs are checked
    output: bool
    type: str  # the C type it is computed in; "float" for a sum in float runs


@dataclass(frozen=True)
class ChannelMath:
    """The live math entries of a channel-pattern kernel, per section (ORDER)."""

    channel: tuple[MathEntry, ...]
    sums: tuple[MathEntry, ...]
    after: tuple[MathEntry, ...]
    elements: tuple[MathEntry, ...]


@dataclass(frozen=True, kw_only=True)
class ChannelKernel(KernelPlan):
    """The plan of an elementwise, broadcast_reduce or reduce_then_apply kernel: what its
    pattern's template writes from."""

    compute: str
    accumulate: str
    element_bytes: str  # C: the bytes an element moves in every tensor operand
    inputs: tuple[KernelInput, ...]
    outputs: tuple[KernelOutput, ...]
    attributes: tuple[str, ...]  # the f32 attributes the math reads, in parameter order
    math: ChannelMath
    sums: tuple[str, ...]
    sum_types: dict[str, str]
    float_sums: tuple[str, ...]
    half_line_blocks: bool  # a block of a tensor input is shorter than a cache line (IN_ORDER_CHANNELS)
    segment: str  # C: channels of a row group's sums in SEGMENT_BYTES (nxc_rows_in_order's arrays)
    guarded_sums: tuple[str, ...]  # float sums whose terms may leave f32's range (bf16 products)
    float_term_reads: tuple[str, ...]  # what the sum terms computed in float read
    double_term_reads: tuple[str, ...]  # ... and those computed in the accumulation type
    element_channel_values: tuple[str, ...]
    float_first: FloatPath | None  # elementwise: the cheaper path of checked blocks, if any
    vector_terms: VectorMath | None  # broadcast_reduce: the sums' terms on double vectors, if they have that form
    vector_elements: VectorMath | None  # elementwise in double: the math on double vectors, if it has that form
    block: int
    tail_block_min: str | None  # C: from how many elements a row's tail is a block; None: never


def dtype_tag(row: dict[str, str]) -> str:
    return "_".join(dict.fromkeys(row.values()))


def forms(spec: OpSpec) -> tuple[str | None, ...]:
    """The loop forms of the op's kernels, in the order the C API indexes them."""
    if spec.pattern in ("elementwise", "along_axes", "binary"):
        return (None,)
    if spec.pattern == "broadcast_reduce" and not any(t.optional for t in (*spec.inputs, *spec.outputs)):
        # a sum of one term is that term rounded once: no sums to keep, no reduction
        return KERNEL_FORMS
    return FORMS


def flag_bit(spec: OpSpec, name: str) -> int:
    """The bit specialized bool attribute `name` sets in a kernel's index when it is false (the
    op API's opgen_flags): the first attribute the highest bit."""
    return 1 << (len(spec.specialized) - 1 - spec.specialized.index(name))


def kernel_index(spec: OpSpec, row: int, form: str | None, constants: Mapping[str, bool]) -> int:
    """Where the kernel of dtype row `row`, loop form `form` and specialized values `constants`
    is in the op's kernel tables: the C runtime's opgen_kernel_index(op, row, form, flags)."""
    flags = sum(flag_bit(spec, name) for name, value in constants.items() if not value)
    form_index = KERNEL_FORMS.index(form) if form else 0
    return (row * len(forms(spec)) + form_index) * (1 << len(spec.specialized)) + flags


def variants(spec: OpSpec, table: DTypeTable) -> list[Variant]:
    """Every kernel of the op, in its kernel table's order (kernel_index)."""
    result: list[Variant] = []
    for row_index, row in enumerate(spec.dtypes):
        for form in forms(spec):
            for values in itertools.product((True, False), repeat=len(spec.specialized)):
                constants = dict(zip(spec.specialized, values))
                assert kernel_index(spec, row_index, form, constants) == len(result)
                parts = [spec.name, dtype_tag(row)]
                if form:
                    parts.append(form)
                parts += [name if value else f"no_{name}" for name, value in constants.items()]
                dtypes = {name: table.dtypes[dtype] for name, dtype in row.items()}
                result.append(Variant(spec, "_".join(parts), dtypes, dict(row), form, constants))
    return result


def _load(dtype: DType, pointer: str, compute: str) -> str:
    text = dtype.load.format(pointer)
    return text if compute == "float" else f"({compute})({text})"


def _store(dtype: DType, value: str, compute: str) -> str:
    return dtype.store.format(value if compute == "float" else f"(float)({value})")


def kernel(variant: Variant, table: DTypeTable) -> KernelPlan:
    """Everything a pattern template needs for one kernel, with the math already in C."""
    spec = variant.op
    if spec.pattern in ("along_axes", "binary"):
        plan_of = lines.kernel if spec.pattern == "along_axes" else binary.kernel
        planned = plan_of(spec, variant.name, variant.row, variant.constants, table)
        return KernelPlan(
            name=planned.name,
            summary=planned.summary,
            detail=planned.detail,
            params=tuple(planned.params),
            pattern=spec.pattern,
            form=None,
            op=spec.name,
            work_per_element=planned.work_per_element,
            across_count=len(planned.across) if isinstance(planned, LinesKernel) else 0,
            lines=planned if isinstance(planned, LinesKernel) else None,
            binary=planned if isinstance(planned, BinaryKernel) else None,
        )
    return _channel_kernel(variant, table)


@dataclass(frozen=True)
class _Speller:
    """How the math of an elementwise, broadcast_reduce or reduce_then_apply kernel is written in
    C: which type each section computes in, and how each name it reads is spelled there."""

    variant: Variant
    table: DTypeTable
    compute: str
    accumulate: str
    numbers: tuple[str, ...]  # the f32 attributes
    tensor_inputs: frozenset[str]  # inputs read as tensors (every one in form full)

    def spell(self, section: str, name: str) -> str:
        in_compute = section == "elements"
        if name in self.numbers:
            target = self.compute if in_compute else self.accumulate
            return name if target == "float" else f"(({target}){name})"
        if name == "count":
            return "count_acc"
        if name in self.tensor_inputs and section == "sums":
            return f"(({self.accumulate}){name}_value)" if self.compute != self.accumulate else f"{name}_value"
        return f"{name}_value" if in_compute else f"{name}_acc"

    def exact_in_float(self, section: str, tree: ast.expr) -> bool:
        return section == "sums" and self.compute == "float" and _exact_in_float(tree, self.variant.dtypes)

    def in_float_runs(self, section: str, tree: ast.expr) -> bool:
        # every term of a float-computed reduction, computed in float and summed in runs of
        # at most FLOAT_RUN terms a lane before the double sums. The term's roundings are in
        # the op's stated accuracy contract (accuracy.stated_sum_bound); a run whose float sums
        # overflow or meet an infinity or NaN is summed again in double; terms below f32's
        # normal range lose at most 2^-150 each. A term in double cost more than the rest of
        # the op: BatchNorm's; f32 PReLU's per-channel NCX took 1.6 times the float runs' time
        # (docs/performance-changes.md). Terms exact in float (bf16, f16) lose nothing.
        if section != "sums" or self.compute != "float":
            return False
        return self.variant.op.pattern in ("reduce_then_apply", "broadcast_reduce")

    def c_text(self, section: str, tree: ast.expr, runs: bool = True) -> str:
        if runs and self.in_float_runs(section, tree):
            return self.c_text("elements", tree)
        if self.exact_in_float(section, tree):
            # the term is exact in float (a product of two short values, a selection):
            # compute it there and widen once, half the work of computing it in double
            return f"(({self.accumulate}){self.c_text('elements', tree)})"
        kind = self.compute if section == "elements" else self.accumulate
        spelled = {name: self.spell(section, name) for name in expr.names(tree)}
        style = self.table.compute_types[kind]
        return expr.to_c(tree, spelled, style.literal_suffix, style.math_suffix, f"opgen_select_{kind}")

    def entry(self, section: str, name: str, tree: ast.expr, outputs: set[str]) -> MathEntry:
        """One math entry: its C in the section's type (float runs' terms in float), and in the
        accumulation type (scalar tails, runs summed again)."""
        in_runs = self.in_float_runs(section, tree)
        return MathEntry(
            name=name,
            c=self.c_text(section, tree),
            c_double=self.c_text(section, tree, runs=False),
            guarded=not _exact_in_float(tree, self.variant.dtypes),
            output=name in outputs,
            # float: summed in runs of at most FLOAT_RUN terms in float before the double sums
            type="float" if in_runs else self.compute if section == "elements" else self.accumulate,
        )

    def full_form_entry(self, entry: MathEntry, tree: ast.expr) -> MathEntry:
        """Form full: a sum of one term as an element. +0 first, as in a sum: a -0 term gives +0.
        A term float rounds once is computed there: narrowed to f32 it equals the term computed
        exactly in double and narrowed."""
        if self.compute == "float" and _rounded_once_in_float(tree, self.variant.dtypes):
            return dataclasses.replace(entry, c=f"0.0f + {self.c_text('elements', tree)}", type=self.compute)
        return dataclasses.replace(entry, c=f"({self.accumulate})0 + {entry.c_double}", type=self.accumulate)


ORDER = ("channel", "sums", "after", "elements")  # the math sections, in the order they run


def _channel_kernel(variant: Variant, table: DTypeTable) -> ChannelKernel:
    """kernel() for elementwise, broadcast_reduce and reduce_then_apply."""
    spec = variant.op
    reference_dtype = variant.dtypes[spec.reference]
    compute = reference_dtype.wide_compute if spec.compute == "wide" else reference_dtype.compute
    accumulate = reference_dtype.accumulate
    # form full: the operand is as big as the tensor, so every operand is read and written
    # like a tensor, and each sum is its one term (added to +0 and rounded as a sum is)
    full = variant.form == "full"
    numbers = tuple(a.name for a in spec.attributes if a.type == "f32")
    speller = _Speller(
        variant,
        table,
        compute,
        accumulate,
        numbers,
        frozenset(t.name for t in spec.inputs if t.kind == "tensor" or full),
    )
    trees = {
        section: [(e.name, expr.fold(e.tree, variant.constants)) for e in entries]
        for section, entries in spec.math.items()
    }
    live = _live_names(spec, trees)
    sections = {s: [(n, t) for n, t in trees.get(s, []) if n in live] for s in ORDER}
    reads = {s: set().union(*(expr.names(t) for _, t in sections[s])) for s in ORDER}
    out_names = {t.name for t in spec.outputs}
    math = {s: [speller.entry(s, n, t, out_names) for n, t in sections[s]] for s in ORDER}
    if full:
        math["elements"] += [speller.full_form_entry(e, t) for e, (_, t) in zip(math["sums"], sections["sums"])]
        math["sums"] = []
        reads["elements"] |= reads["sums"]
    element_channel_values = [n for n, _ in trees.get("channel", []) + trees.get("after", []) if n in reads["elements"]]

    def term_reads(in_float: bool) -> list[str]:
        """The names the sum terms computed in float (or in the accumulation type) read."""
        chosen = [t for _, t in sections["sums"] if speller.in_float_runs("sums", t) == in_float]
        return sorted(set().union(*map(expr.names, chosen)))

    attributes = [name for name in numbers if any(name in reads[s] for s in ORDER)]
    float_first = _float_first(variant, compute, sections["elements"], table) if spec.pattern == "elementwise" else None
    moved = [variant.dtypes[t.name].c_type for t in (*spec.inputs, *spec.outputs) if t.kind == "tensor" or full]
    segment_type = "float" if all(entry.type == "float" for entry in math["sums"]) else accumulate
    sums = tuple(entry.name for entry in math["sums"])
    return ChannelKernel(
        name=variant.name,
        summary=spec.summary,
        detail=_detail(variant, compute, accumulate, any(e.type == "float" for e in math["sums"]), float_first),
        params=tuple(_parameters(variant, attributes)),
        pattern=spec.pattern,
        form=variant.form,
        op=spec.name,
        workspace_per_channel=workspace_per_channel(spec, len(sums), len(element_channel_values)),
        work_per_element=1 + EXP_WORK * sum(expr.calls(t, "exp") for s in ORDER for _, t in sections[s]),
        compute=compute,
        accumulate=accumulate,
        element_bytes=" + ".join(f"sizeof({c_type})" for c_type in moved),
        inputs=tuple(_input_entry(variant, t.name, compute, accumulate, reads, table) for t in spec.inputs),
        outputs=tuple(_output_entry(variant, t.name, compute, accumulate) for t in spec.outputs),
        attributes=tuple(attributes),
        math=ChannelMath(**{section: tuple(math[section]) for section in ORDER}),
        sums=sums,
        sum_types={entry.name: entry.type for entry in math["sums"]},
        float_sums=tuple(entry.name for entry in math["sums"] if entry.type == "float"),
        half_line_blocks=any(variant.dtypes[t.name].size * BLOCK < 64 for t in spec.inputs if t.kind == "tensor"),
        segment=f"(int64_t)(OPGEN_SEGMENT_BYTES / sizeof({segment_type}))",
        guarded_sums=tuple(e.name for e in math["sums"] if e.type == "float" and e.guarded),
        float_term_reads=tuple(term_reads(True)),
        double_term_reads=tuple(term_reads(False)),
        element_channel_values=tuple(element_channel_values),
        float_first=float_first,
        vector_terms=_vector_terms(variant, speller, sections["sums"], reads["elements"]),
        vector_elements=_vector_elements_double(variant, compute, sections["elements"], float_first),
        block=BLOCK,
        tail_block_min=_tail_block_min(spec, variant),
    )


def _vector_terms(
    variant: Variant, speller: _Speller, terms: list[tuple[str, ast.expr]], element_reads: set[str]
) -> VectorMath | None:
    """The sums' terms on double vectors (opgen_doubles, expr.to_vector_double), each f32
    tensor input widened straight from memory, where every term is computed in double from f32
    tensors (a spec computed wide; float-computed reductions take float runs instead, as f32
    PReLU now does): GCC's lane loop widens a 16-float block with shuffles and conversions that
    kept f32 PReLU per-channel NCX at twice oneDNN's time in L2 on AVX2; a conversion from
    memory needs no shuffle. The same operations per lane in the same order:
    the same bits. broadcast_reduce only (reduce_then_apply's sums pass reads far fewer terms
    per byte). None where any term has no such form, or reads a tensor the element math does not
    (the lane loop, left with the elements alone, would load it for nothing)."""
    tensors = {t.name for t in variant.op.inputs if t.kind == "tensor"}
    if variant.op.pattern != "broadcast_reduce" or variant.form == "full" or speller.accumulate != "double":
        return None
    for _, tree in terms:
        reads = expr.names(tree)
        if speller.in_float_runs("sums", tree) or speller.exact_in_float("sums", tree):
            return None
        if not reads <= tensors & element_reads or any(variant.dtypes[n].name != "f32" for n in reads):
            return None
    return _double_vector_math(terms, tensors)


def _vector_elements_double(
    variant: Variant, compute: str, elements: list[tuple[str, ast.expr]], float_first: FloatPath | None
) -> VectorMath | None:
    """An elementwise kernel's math on double vectors (opgen_doubles, expr.to_vector_double)
    where it computes f32 tensors into one f32 output in double (compute = "wide") with no
    float path: each input widened straight from memory, where GCC's lane loop moved the
    halves of every 16-float block through registers with shuffles (sigmoid and tanh backward
    from dst took twice the time of the same loop in intrinsics). The same operations per lane
    in the same order: the same bits. None where any element has no such form."""
    spec = variant.op
    if spec.pattern != "elementwise" or compute != "double" or float_first is not None:
        return None
    tensors = [t.name for t in (*spec.inputs, *spec.outputs) if t.kind == "tensor"]
    if any(variant.dtypes[name].name != "f32" for name in tensors):
        return None
    if sum(t.kind == "tensor" for t in spec.outputs) != 1:
        return None  # <kernel>_double_lanes returns the one output
    inputs = {t.name for t in spec.inputs if t.kind == "tensor"}
    defined = {name for name, _ in elements}
    if any(not expr.names(tree) <= inputs | defined for _, tree in elements):
        return None  # an attribute: not an input the block loads
    return _double_vector_math(elements, inputs)


def _double_vector_math(entries: list[tuple[str, ast.expr]], inputs: set[str]) -> VectorMath | None:
    """`entries` (name, tree; each may read the ones before) as `opgen_doubles` expressions on
    `<name>_value` variables, and the `inputs` they read: None where any has no such form."""
    vectors = []
    for name, tree in entries:
        c = expr.to_vector_double(tree, {n: f"{n}_value" for n in expr.names(tree)})
        if c is None:
            return None
        vectors.append(VectorEntry(name=name, type="opgen_doubles", c=c))
    read = set().union(*(expr.names(tree) for _, tree in entries)) & inputs
    return VectorMath(inputs=tuple(sorted(read)), elements=tuple(vectors)) if vectors else None


def _input_entry(
    variant: Variant, name: str, compute: str, accumulate: str, reads: dict[str, set[str]], table: DTypeTable
) -> KernelInput:
    """What the templates read of input `name`: how it loads in each type, and which sections read it."""
    tensor = next(t for t in variant.op.inputs if t.name == name)
    dtype = variant.dtypes[name]
    return KernelInput(
        name=name,
        kind="tensor" if variant.form == "full" else tensor.kind,
        c_type=dtype.c_type,
        optional=tensor.optional,
        default_compute=_literal(tensor.default, compute, table),
        default_acc=_literal(tensor.default, accumulate, table),
        default_float=_literal(tensor.default, "float", table),
        load_compute=_load(dtype, f"{name}[@]", compute),
        load_float=_load(dtype, f"{name}[@]", "float"),
        load_acc=_load(dtype, f"{name}[@]", accumulate),
        load_block=dtype.load_block,
        load_part=dtype.load_part,
        in_elements=name in reads["elements"],
        in_sums=name in reads["sums"],
        in_loop=name in reads["elements"] | reads["sums"],
        in_channel=name in reads["channel"] | reads["after"],
        in_sums_only=name in reads["sums"] - reads["channel"] - reads["after"],
    )


def _output_entry(variant: Variant, name: str, compute: str, accumulate: str) -> KernelOutput:
    """What the templates read of output `name`: how it stores, from which type."""
    tensor = next(t for t in variant.op.outputs if t.name == name)
    dtype = variant.dtypes[name]
    full = variant.form == "full"
    from_compute = tensor.kind == "tensor"
    return KernelOutput(
        name=name,
        kind="tensor" if full else tensor.kind,
        c_type=dtype.c_type,
        dtype=dtype.name,
        optional=tensor.optional,
        store_block=dtype.store_block,
        store_part=dtype.store_part,
        line_writer=dtype.line_writer,
        line_writer_cheap=dtype.line_writer_cheap,
        store=_store(
            dtype,
            f"{name}_{'value' if from_compute or full else 'acc'}",
            compute if from_compute else accumulate,
        ),
        store_float=_store(dtype, f"{name}_value", "float"),
    )


def _parameters(variant: Variant, attributes: list[str]) -> list[tuple[str, str]]:
    """The kernel's C parameters, (type, name): the operands, the f32 attributes the math reads,
    then the pattern's sizes and scratch."""
    spec = variant.op
    full = variant.form == "full"
    params = [(f"const {variant.dtypes[t.name].c_type} *", t.name) for t in spec.inputs]
    params += [("float ", name) for name in attributes]
    for tensor in spec.outputs:
        params.append((f"{variant.dtypes[tensor.name].c_type} *", tensor.name))
        if tensor.kind == "channel" and spec.pattern == "broadcast_reduce" and not full:
            # NULL, or sums (double) the terms are added to instead of rounding them into the output
            params.append(("double *", f"{tensor.name}_sums"))
    if spec.pattern == "elementwise" or full:
        params.append(("int64_t ", "count"))
        return params
    params += [("double *", "workspace"), ("int64_t ", "outer"), ("int64_t ", "channels")]
    if variant.form == "ncx":
        params.append(("int64_t ", "inner"))
    elif spec.pattern == "reduce_then_apply":
        # channels that are each `repeat` copies of one channel (a short inner dim, run
        # in this loop): the kernel folds their sums
        params.append(("int64_t ", "repeat"))
    return params


def float_runs(spec: OpSpec, row: dict[str, str], table: DTypeTable) -> dict[str, int]:
    """Per sum of the kernels for dtype row `row`: the most terms one of its float partial sums
    holds before the double sums take it over (0: every term goes to double)."""
    result: dict[str, int] = {}
    if spec.pattern in ("along_axes", "binary"):
        return result  # along_axes: every term goes to its sum in the accumulation type; binary: no sums
    for variant in variants(spec, table):
        if variant.row == row:
            planned = kernel(variant, table)
            assert isinstance(planned, ChannelKernel)  # the channel patterns have sums
            for name, kind in planned.sum_types.items():
                result[name] = max(result.get(name, 0), FLOAT_RUN if kind == "float" else 0)
    return result


def _tail_block_min(spec: OpSpec, variant: Variant) -> str | None:
    """From how many elements the ncx loops compute a row's tail as a block (C); None: never, in the
    two passes of reduce_then_apply when every tensor loads and stores with no conversion
    (f32): there the elements one by one cost less (f32 BatchNorm, one thread, in cache, tails
    of 4 to 9 as blocks: 5-15 % slower; bf16 7-57 % faster)."""
    tensors = [variant.dtypes[t.name] for t in (*spec.inputs, *spec.outputs) if t.kind == "tensor"]
    if spec.pattern == "reduce_then_apply" and all(d.load == "{}" and d.store == "{}" for d in tensors):
        return None
    return "OPGEN_TAIL_BLOCK_MIN"


def workspace_per_channel(spec: OpSpec, n_sums: int, n_values: int) -> int:
    """Doubles of scratch per channel besides the tiles' partial sums: reduce_then_apply keeps
    its sums and the per-channel values the element pass reads there."""
    return n_sums + n_values if spec.pattern == "reduce_then_apply" else 0


def _float_first(
    variant: Variant, compute: str, elements: list[tuple[str, ast.expr]], table: DTypeTable
) -> FloatPath | None:
    """For an elementwise kernel: the input magnitudes for which its blocks may take a
    cheaper path (float_range), and the math there; None when there is none (a log,
    attributes...). Computed in double, the path is float when float's precision is enough
    (bf16 outputs); else, if the math calls exp, double. Inside the intervals exp is
    opgen_exp_short(f): unclamped, one scaling, a polynomial as short as the outputs allow. A
    kernel computed in float gains that exp alone, so it gets the path only if it calls exp."""
    calls_exp = any(expr.calls(tree, "exp") for _, tree in elements)
    if compute == "float" and not calls_exp:
        return None
    definitions = dict(elements)
    outputs = [t.name for t in variant.op.outputs]

    tried = tuple(a for a in float_range.ARITHMETICS if a.name == "float" or (compute == "double" and calls_exp))
    found = float_range.cheapest(
        [definitions[o] for o in outputs],
        variant.dtypes,
        definitions,
        [variant.dtypes[o] for o in outputs],
        tried if calls_exp else tried[:1],  # only exp tells the float ones apart
    )
    if found is None:
        return None
    arithmetic, ranges = found
    # In float blocks of a kernel computed in double (bf16 data), an input that multiplies a
    # whole result is multiplied in last, unchecked (float_range.last_factors): one check
    # fewer per block. (Computed in their own type, such inputs go unchecked below as written.)
    last: dict[str, tuple[str, ast.expr, float_range.FloatRange]] = {}
    if arithmetic.name != compute:
        trees = {o: definitions[o] for o in outputs}
        last = float_range.last_factors(trees, variant.dtypes, definitions, arithmetic)
    ranges = [last[o][2] if o in last else r for o, r in zip(outputs, ranges)]
    for o, (name, rest, _) in last.items():
        definitions[o] = ast.BinOp(ast.Name(name), ast.Mult(), rest)
    # every output's intervals hold: their intersection
    intervals = {
        name: float_range.Interval(
            min(r.intervals[name].low for r in ranges if name in r.intervals),
            min(r.intervals[name].high for r in ranges if name in r.intervals),
        )
        for name in sorted(set().union(*(r.intervals for r in ranges)))
    }
    return _float_path(variant, compute, elements, table, arithmetic, definitions, intervals, last, calls_exp)


def _float_path(
    variant: Variant,
    compute: str,
    elements: list[tuple[str, ast.expr]],
    table: DTypeTable,
    arithmetic: float_range.Arithmetic,
    definitions: dict[str, ast.expr],
    intervals: dict[str, float_range.Interval],
    last: dict[str, tuple[str, ast.expr, float_range.FloatRange]],
    calls_exp: bool,
) -> FloatPath:
    """_float_first's result: the path's type, the inputs it checks and its math in C."""
    outputs = [t.name for t in variant.op.outputs]
    kind = arithmetic.name
    style = table.compute_types[kind]
    # Computed in the kernel's own type, the blocks outside differ from those inside by the
    # exp alone: an input that spans every finite value and only multiplies or divides the
    # results needs no check (its infinities and NaNs give the same results either way).
    unchecked = [
        name
        for name, interval in intervals.items()
        if kind == compute
        and interval.holds_every_finite(variant.dtypes[name])
        and all(float_range.only_a_factor(definitions[o], name, definitions) for o in outputs)
    ]
    last_factors = sorted({name for name, _, _ in last.values()})
    ordered = [(name, definitions[name]) for name, _ in elements]
    return FloatPath(
        type=kind,
        calls_exp=calls_exp,
        exp_function=arithmetic.exp_function,
        exp_error_exponent=arithmetic.exp_error_exponent,
        intervals=intervals,
        unchecked=tuple(unchecked),
        last_factors=tuple(last_factors),
        bounds={
            name: ", ".join(interval.c_bounds(variant.dtypes[name]))
            for name, interval in intervals.items()
            if name not in unchecked
        },
        elements=tuple(
            VectorEntry(
                name=name,
                type=kind,
                c=expr.to_c(
                    expr.scaled_exps(tree),
                    {n: f"{n}_value" for n in expr.names(tree)},
                    style.literal_suffix,
                    style.math_suffix,
                    f"opgen_select_{kind}",
                    {"exp": arithmetic.exp_name},  # + the type's suffix; exp(y, scale)
                ),
            )
            for name, tree in ordered
        ),
        vector=_vector_elements(ordered, arithmetic) if kind == "float" else None,
    )


def _vector_elements(ordered: list[tuple[str, ast.expr]], arithmetic: float_range.Arithmetic) -> VectorMath | None:
    """The float path's math as AVX-512 intrinsics (expr.to_vector), the same bits as its lane
    loop: the inputs it reads and each element's expression; None when any element has no
    such form. Timed from C, one thread, sigmoid and tanh from src in bf16 and f16: 5-9 %
    faster past the caches, 3-9 % in L2 (docs/performance-changes.md)."""
    named = set().union(*(expr.names(tree) for _, tree in ordered))
    variables = {n: f"{n}_vector" for n in named}
    entries: list[VectorEntry] = []
    for name, tree in ordered:
        c = expr.to_vector(expr.scaled_exps(tree), variables, arithmetic.exp_function)
        if c is None:
            return None
        entries.append(VectorEntry(name=name, type="__m512", c=c))
    return VectorMath(inputs=tuple(sorted(named - {name for name, _ in ordered})), elements=tuple(entries))


def _literal(value: float | None, kind: str, table: DTypeTable) -> str:
    if value is None:
        return ""
    return expr.to_c(expr.number(value), {}, table.compute_types[kind].literal_suffix, "", "")


def _detail(variant: Variant, compute: str, accumulate: str, float_runs: bool, float_first: FloatPath | None) -> str:
    dtypes = ", ".join(f"{name} {dtype}" for name, dtype in variant.row.items())
    computed = f"computed in {compute}"
    if float_first:
        inside = ", ".join(
            f"{name} in {interval}"
            for name, interval in float_first.intervals.items()
            if name not in float_first.unchecked
        )
        where = f"where each input is 0 or of magnitude {inside}"
        if float_first.unchecked:
            where += f" ({', '.join(float_first.unchecked)}: any, a factor of the result)"
        if float_first.last_factors:
            where += f" ({', '.join(float_first.last_factors)}: any, multiplied in last)"
        exp = f"its exp unclamped and within 2^{float_first.exp_error_exponent}"
        if compute == float_first.type:
            computed = f"computed in {compute}, {exp} {where}"
        else:
            exp = f" ({exp})" if float_first.calls_exp else ""
            computed = f"computed in float{exp} {where}, else in {compute}"
    parts = [dtypes, computed]
    if variant.form == "full":
        parts.append("every operand as big as the tensor: one term per sum")
    elif variant.op.pattern != "elementwise":
        parts.append(f"sums in float runs, then {accumulate}" if float_runs else f"sums in {accumulate}")
        parts.append({"ncx": "channel outer, spatial inner", "nxc": "channel innermost"}[variant.form or ""])
    parts += [f"{name}={'true' if value else 'false'}" for name, value in variant.constants.items()]
    return "; ".join(parts)


def _exact_in_float(tree: ast.expr, dtypes: dict[str, DType], in_range: bool = True) -> bool:
    """True when float arithmetic computes `tree` exactly: stored values, constants, selections,
    negation, and products of two stored values whose significands fit together in 24 bits and
    (if `in_range`) whose exponents, smallest subnormal to largest, stay within f32's normal
    range (f16 yes; bf16 no: it has f32's range, so its products can overflow or underflow)."""
    result = _significand_bits(tree, dtypes, in_range)
    return result is not None and result <= 24


def _rounded_once_in_float(tree: ast.expr, dtypes: dict[str, DType]) -> bool:
    """True when float arithmetic gives `tree` as its exact value rounded once to f32, the
    result of computing it exactly in double and narrowing: selections and negations of
    values exact in float, or of one product of two of them exact in double (53 bits), chosen
    by comparisons of values exact in float."""
    if isinstance(tree, ast.IfExp):
        tested = tree.test
        compared = [tested.left, *tested.comparators] if isinstance(tested, ast.Compare) else [tested]
        return (
            all(_exact_in_float(side, dtypes, in_range=False) for side in compared)
            and _rounded_once_in_float(tree.body, dtypes)
            and _rounded_once_in_float(tree.orelse, dtypes)
        )
    if isinstance(tree, ast.UnaryOp) and isinstance(tree.op, ast.USub):
        return _rounded_once_in_float(tree.operand, dtypes)
    if isinstance(tree, ast.BinOp) and isinstance(tree.op, ast.Mult):
        left, right = (_significand_bits(side, dtypes, False) for side in (tree.left, tree.right))
        return left is not None and right is not None and max(left, right) <= 24 and left + right <= 53
    return _exact_in_float(tree, dtypes, in_range=False)


def _significand_bits(tree: ast.expr, dtypes: dict[str, DType], in_range: bool) -> int | None:
    """Significand bits of `tree`'s exact value, None unless `_exact_in_float` arithmetic
    (short of the final 24-bit limit) computes it exactly."""

    def fits_range(dtype: DType) -> bool:
        return 2 * dtype.smallest_exponent >= -126 and 2 * dtype.end_exponent <= 128

    def bits(node: ast.expr) -> int | None:  # significand bits of an exact value, None if not exact
        if isinstance(node, ast.Constant):
            return (
                1 if not isinstance(node.value, bool) and float(cast(float, node.value)) in (0.0, 1.0, -1.0) else None
            )
        if isinstance(node, ast.Name):
            if node.id not in dtypes or (in_range and not fits_range(dtypes[node.id])):
                return None
            return dtypes[node.id].mantissa_bits + 1
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return bits(node.operand)
        if isinstance(node, ast.IfExp):
            body, orelse = bits(node.body), bits(node.orelse)
            return None if body is None or orelse is None else max(body, orelse)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            left, right = bits(node.left), bits(node.right)
            return None if left is None or right is None or left + right > 24 else left + right
        return None

    return bits(tree)


def _live_names(spec: OpSpec, trees: dict[str, list[tuple[str, ast.expr]]]) -> set[str]:
    """Names whose value reaches an output, after constant folding (dead temporaries are dropped)."""
    live = {t.name for t in spec.outputs}
    for section in ("elements", "after", "sums", "channel"):
        for name, tree in reversed(trees.get(section, [])):
            if name in live or section == "sums":
                live.add(name)
                live |= expr.names(tree)
    return live
