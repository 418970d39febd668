/* The loop driver of the broadcast_reduce and reduce_then_apply ops (hand-written): see opgen_channels.h. */
#include "opgen_channels.h"
#include "opgen_team.h"

/* What a loop's steps share: the call, with the driver's choices. */
typedef struct opgen_channels_loop {
    const opgen_channels_kernel *kernel;             /* opgen_channels_run */
    const opgen_channels_twice_kernel *twice;        /* opgen_channels_run_twice */
    const opgen_channels_call *call;
    int64_t tiles;
    int split_units;      /* ncx: a tile is a range of units (else a range of every unit's blocks) */
    int64_t parts;        /* ncx, fewer tiles than threads: each tile's channels in this many parts */
    int64_t inner_blocks; /* ncx */
    int64_t head;         /* nxc ranges: the channels before the line output's first cache line */
    int64_t ranges;
    int64_t span;
    int threads;
} opgen_channels_loop;

typedef void (*opgen_channels_step)(const opgen_channels_loop *loop, int64_t index);

/* Steps 0..count-1 split among `threads` threads in contiguous ranges (static schedule), each
 * thread fencing its streamed stores at its end. On one thread no parallel region is opened:
 * it costs about half a microsecond, a tenth of a small call. */
static void opgen_channels_team(const opgen_channels_loop *loop, int threads, int64_t count, opgen_channels_step step)
{
#if defined(_OPENMP)
    if (threads > 1) {
        OPGEN_PARALLEL(threads)
        {
            OPGEN_FOR
            for (int64_t index = 0; index < count; ++index) {
                step(loop, index);
            }
            opgen_fence();
        }
        return;
    }
#else
    (void)threads;
#endif
    for (int64_t index = 0; index < count; ++index) {
        step(loop, index);
    }
    opgen_fence();
}

/* Rows of few channels (see opgen_channels.h): how many rows make one tiled row, L / C for
 * L = lcm(C, OPGEN_BLOCK); 0 when the rows run as they are (a whole number of blocks, L over
 * OPGEN_TILED_CHANNELS, runs of repeated channels, or fewer rows than L / C). */
static int64_t opgen_channels_tiled(int64_t outer, int64_t channels, int64_t repeat)
{
    if (repeat != 1 || channels <= 0 || channels > OPGEN_TILED_CHANNELS || channels % OPGEN_BLOCK == 0) {
        return 0;
    }
    int64_t divisor = channels, other = OPGEN_BLOCK;
    while (other != 0) {
        const int64_t rest = divisor % other;
        divisor = other;
        other = rest;
    }
    const int64_t rows = OPGEN_BLOCK / divisor;
    return outer >= rows && channels * rows <= OPGEN_TILED_CHANNELS ? rows : 0;
}

/* Channel `channel`'s sum over its `copies` copies in a tiled row, `period` apart (the sums of
 * one sum's channels from `sums` on), added in copy order. */
static double opgen_channels_copies_total(const double *sums, int64_t period, int64_t copies, int64_t channel)
{
    double total = sums[channel];
    for (int64_t copy = 1; copy < copies; ++copy) {
        total += sums[copy * period + channel];
    }
    return total;
}

/* `call` with `rows` of its rows as one (opgen_channels_tiled): its channel inputs tiled into
 * `room` (as many doubles as the tiled row has channels, an operand), its channel outputs
 * given room there too where `outputs`; `tensors` holds the tiled call's operands. */
static opgen_channels_call opgen_channels_tile(const opgen_channels_operands *operands, const opgen_channels_call *call,
                                               int64_t rows, void **tensors, double *room, int outputs)
{
    opgen_channels_call tiled = *call;
    const int64_t length = call->channels * rows;
    for (int i = 0; i < operands->count; ++i) {
        const size_t size = (size_t)operands->sizes[i];
        const int input = i < operands->input_count;
        tensors[i] = call->tensors[i];
        if (!operands->by_channel[i] || call->tensors[i] == NULL || (!input && !outputs)) {
            continue;
        }
        tensors[i] = room;
        for (int64_t copy = 0; input && copy < rows; ++copy) {
            memcpy((char *)room + (size_t)(copy * call->channels) * size, call->tensors[i],
                   (size_t)call->channels * size);
        }
        room += length;
    }
    tiled.tensors = tensors;
    tiled.outer = call->outer / rows;
    tiled.channels = length;
    tiled.inner = rows;
    tiled.period = call->channels;
    return tiled;
}

/* Tile `tile`'s partial sums, zeroed. */
static double *opgen_channels_partial(const opgen_channels_loop *loop, int64_t tile)
{
    const int64_t slots = loop->kernel->sum_count * loop->call->channels;
    double *partial = loop->call->workspace + tile * slots;
    for (int64_t slot = 0; slot < slots; ++slot) {
        partial[slot] = 0;
    }
    return partial;
}

static void opgen_channels_ncx_tile(const opgen_channels_loop *loop, int64_t tile)
{
    const opgen_channels_call *call = loop->call;
    const int64_t units = call->outer * call->channels;
    const int64_t tiles = loop->tiles;
    double *partial = opgen_channels_partial(loop, tile);
    if (loop->split_units) {
        loop->kernel->units(call, units * tile / tiles, units * (tile + 1) / tiles, 0, call->inner, partial);
    } else {
        /* few units: a block-aligned range of the inner dim of every unit */
        const int64_t inner_first = loop->inner_blocks * tile / tiles * OPGEN_BLOCK;
        const int64_t inner_last = opgen_min(call->inner, loop->inner_blocks * (tile + 1) / tiles * OPGEN_BLOCK);
        loop->kernel->units(call, 0, units, inner_first, inner_last, partial);
    }
}

/* The first channel of part `part` of `parts`: whole blocks where every part gets one (their
 * partial sums then lie on cache lines apart), else an even split. (In whole blocks, 3 or 24
 * channels went to the last of two parts alone: one thread did the tile.) */
static int64_t opgen_channels_part_first(int64_t channels, int64_t parts, int64_t part)
{
    return channels / OPGEN_BLOCK >= parts ? opgen_range_first(channels, parts, part) : channels * part / parts;
}

/* Part `index % parts` of ncx tile `index / parts` (split_units): that part of the channels,
 * in every unit of the tile. A channel's units reach its partial sum in the same order as in
 * the whole tile, so the sums do not change; the parts write apart, each zeroing its own
 * channels. */
static void opgen_channels_ncx_part(const opgen_channels_loop *loop, int64_t index)
{
    const opgen_channels_call *call = loop->call;
    const int64_t channels = call->channels;
    const int64_t tile = index / loop->parts, part = index % loop->parts;
    const int64_t first = opgen_channels_part_first(channels, loop->parts, part);
    const int64_t last = part + 1 == loop->parts ? channels : opgen_channels_part_first(channels, loop->parts, part + 1);
    double *partial = loop->call->workspace + tile * loop->kernel->sum_count * channels;
    for (int s = 0; s < loop->kernel->sum_count; ++s) {
        for (int64_t channel = first; channel < last; ++channel) {
            partial[s * channels + channel] = 0;
        }
    }
    const int64_t units = call->outer * channels;
    const int64_t unit_first = units * tile / loop->tiles;
    const int64_t unit_last = units * (tile + 1) / loop->tiles;
    for (int64_t row = unit_first / channels; row * channels < unit_last; ++row) {
        const int64_t from = opgen_max(unit_first, row * channels + first);
        const int64_t to = opgen_min(unit_last, row * channels + last);
        if (from < to) {
            loop->kernel->units(call, from, to, 0, call->inner, partial);
        }
    }
}

static void opgen_channels_nxc_tile(const opgen_channels_loop *loop, int64_t tile)
{
    const int64_t outer = loop->call->outer;
    loop->kernel->rows(loop->call, outer * tile / loop->tiles, outer * (tile + 1) / loop->tiles,
                       opgen_channels_partial(loop, tile));
}

/* Range `range` of a channel split, in the calling thread's share of the workspace (in its L2
 * while the rows stream past). The ranges start at the line output's first cache line (the
 * channels before it join the first range), so that a range's streamed stores to each row
 * start and end on lines when the rows do. */
static void opgen_channels_nxc_range(const opgen_channels_loop *loop, int64_t range)
{
    const opgen_channels_kernel *kernel = loop->kernel;
    const int64_t split = loop->call->channels - loop->head;
    const int64_t first = range == 0 ? 0 : loop->head + opgen_range_first(split, loop->ranges, range);
    const int64_t last = loop->head + opgen_range_last(split, loop->ranges, range);
    const int64_t share = opgen_split_share(loop->span, kernel->sum_count, kernel->float_sum_count);
    double *const mine = loop->call->workspace + opgen_team_member(loop->threads) * share;
    kernel->range(loop->call, first, last, range == 0 ? loop->head : first, mine, loop->span);
}

/* The tiles' sums of `call` (its `stream` set here), added up into the workspace's first
 * tile's; 0 when a channel split ran instead, whose ranges finished their own sums. */
static int opgen_channels_sum_tiles(const opgen_channels_kernel *kernel, opgen_channels_call *given)
{
    opgen_channels_call call = *given;
    opgen_channels_loop loop = { .kernel = kernel, .call = &call, .parts = 1, .threads = 1 };
    const int64_t elements = call.outer * call.channels * call.inner;
    const int64_t moved = elements * kernel->element_bytes;
    loop.threads = opgen_threads_for(elements * kernel->work_per_element);
    if (kernel->units != NULL) {
        loop.tiles = opgen_tile_count(call.outer, call.channels, call.inner);
        loop.split_units = loop.tiles <= call.outer * call.channels;
        loop.inner_blocks = (call.inner + OPGEN_BLOCK - 1) / OPGEN_BLOCK;
        /* streamed unless (opgen_stream_units) the units end in a tail */
        call.stream = opgen_stream_units(moved, call.inner);
        if (loop.split_units && loop.tiles < loop.threads) {
            loop.parts = opgen_min(call.channels, (loop.threads + loop.tiles - 1) / loop.tiles);
        }
        if (loop.parts > 1) {
            opgen_channels_team(&loop, loop.threads, loop.tiles * loop.parts, opgen_channels_ncx_part);
        } else {
            opgen_channels_team(&loop, (int)opgen_min(loop.threads, loop.tiles), loop.tiles, opgen_channels_ncx_tile);
        }
    } else {
        const void *line_output = call.tensors[kernel->line_output];
        loop.tiles = opgen_tile_count(call.outer, call.channels, 1);
        /* streamed rows are written in memory order (see opgen_stream_rows) */
        call.stream = opgen_stream_rows(moved, call.channels * kernel->operands.sizes[kernel->line_output], line_output);
        if (opgen_split_channels(call.outer, call.channels, loop.tiles, kernel->segment)) {
            /* rows longer than a segment, or few rows: each thread takes ranges of whole blocks
             * of channels, at least one per thread, and sums them over every row. A channel's
             * sum does not depend on the ranges: they are cut for the thread count. Summed in
             * the caller's arrays instead of the shares, bf16 PReLU with 32 rows of 802 816
             * channels ran 10 % slower (one and two threads). */
            const int float_runs = kernel->float_sum_count > 0;
            const int64_t length = moved >= OPGEN_STREAM_BYTES
                                       ? (float_runs ? OPGEN_STREAM_FLOAT_RUN_RANGE : OPGEN_STREAM_CHANNEL_RANGE)
                                       : (float_runs ? OPGEN_FLOAT_RUN_RANGE : OPGEN_CHANNEL_RANGE);
            loop.head = opgen_min(call.channels, opgen_to_line(line_output, (size_t)kernel->operands.sizes[kernel->line_output]));
            loop.ranges = opgen_channel_ranges(call.channels - loop.head, loop.threads, length);
            loop.span = opgen_split_span(call.channels - loop.head, loop.ranges, loop.head);
            opgen_channels_team(&loop, loop.threads, loop.ranges, opgen_channels_nxc_range);
            return 0;
        }
        /* not in parts as ncx tiles are: a rows microkernel over a range of channels costs more
         * where the tiles are enough than the parts gain where they are not
         * (docs/performance-changes.md, 2026-11-27) */
        opgen_channels_team(&loop, (int)opgen_min(loop.threads, loop.tiles), loop.tiles, opgen_channels_nxc_tile);
    }
    /* the tiles' partial sums, in tile order, into the first tile's */
    double *const sums = call.workspace;
    const int64_t slots = kernel->sum_count * call.channels;
    for (int64_t tile = 1; tile < loop.tiles; ++tile) {
        for (int64_t slot = 0; slot < slots; ++slot) {
            sums[slot] += sums[tile * slots + slot];
        }
    }
    return 1;
}

/* Rows of few channels for a broadcast_reduce kernel (opgen_channels_tiled), where the tiled
 * rows are summed in tiles of rows, not split by channel. */
static int64_t opgen_channels_rows_tiled(int64_t segment, int64_t outer, int64_t channels)
{
    const int64_t rows = opgen_channels_tiled(outer, channels, 1);
    const int64_t length = channels * rows;
    if (rows == 0 || opgen_split_channels(outer / rows, length, opgen_tile_count(outer / rows, length, 1), segment)) {
        return 0;
    }
    return rows;
}

/* Doubles of workspace for the sums of `outer` rows of `channels` (form nxc, as they are). */
static int64_t opgen_channels_nxc_doubles(int sum_count, int float_sum_count, int64_t segment, int64_t outer,
                                          int64_t channels)
{
    const int64_t tiles = opgen_tile_count(outer, channels, 1);
    if (opgen_split_channels(outer, channels, tiles, segment)) {
        /* each thread's share of the channels' sums and float runs */
        return opgen_split_share(opgen_split_bound(channels), sum_count, float_sum_count);
    }
    return tiles * sum_count * channels;
}

/* Rows of few channels, `rows` at a time (opgen_channels_rows_tiled): the tiled rows, their
 * sums folded (channel c's copies in copy order), the rows left over added, then finished. The
 * workspace: the tiled call's, the tiled channel inputs, the folded sums, the left-over rows'. */
static void opgen_channels_run_tiled(const opgen_channels_kernel *kernel, const opgen_channels_call *call, int64_t rows)
{
    const int64_t channels = call->channels, length = channels * rows, tiled_rows = call->outer / rows * rows;
    const int64_t slots = kernel->sum_count * channels;
    double *const room = call->workspace + opgen_channels_nxc_doubles(kernel->sum_count, kernel->float_sum_count,
                                                                      kernel->segment, call->outer / rows, length);
    int channel_operands = 0;
    for (int i = 0; i < kernel->operands.count; ++i) {
        channel_operands += kernel->operands.by_channel[i];
    }
    double *const sums = room + channel_operands * length;
    void *tensors[OPGEN_MAX_OPERANDS];
    opgen_channels_call tiled = opgen_channels_tile(&kernel->operands, call, rows, tensors, room, 0);
    opgen_channels_sum_tiles(kernel, &tiled); /* not split (opgen_channels_rows_tiled) */
    for (int s = 0; s < kernel->sum_count; ++s) {
        for (int64_t channel = 0; channel < channels; ++channel) {
            sums[s * channels + channel] = opgen_channels_copies_total(tiled.workspace + s * length, channels, rows, channel);
        }
    }
    if (tiled_rows < call->outer) {
        double *const rest = sums + slots;
        for (int64_t slot = 0; slot < slots; ++slot) {
            rest[slot] = 0;
        }
        kernel->rows(call, tiled_rows, call->outer, rest);
        for (int64_t slot = 0; slot < slots; ++slot) {
            sums[slot] += rest[slot];
        }
    }
    kernel->finish(call, 0, channels, sums, channels);
}

void opgen_channels_run(const opgen_channels_kernel *kernel, const opgen_channels_call *given)
{
    opgen_channels_call call = *given;
    const int64_t rows = kernel->units == NULL ? opgen_channels_rows_tiled(kernel->segment, call.outer, call.channels) : 0;
    if (rows > 0) {
        opgen_channels_run_tiled(kernel, &call, rows);
    } else if (opgen_channels_sum_tiles(kernel, &call)) {
        kernel->finish(&call, 0, call.channels, call.workspace, call.channels);
    }
}

int64_t opgen_channels_workspace(int ncx, int sum_count, int float_sum_count, int64_t segment, int channel_operands,
                                 int64_t outer, int64_t channels, int64_t inner)
{
    if (ncx) {
        return opgen_tile_count(outer, channels, inner) * sum_count * channels;
    }
    const int64_t rows = opgen_channels_rows_tiled(segment, outer, channels);
    if (rows > 0) {
        const int64_t length = channels * rows;
        return opgen_channels_nxc_doubles(sum_count, float_sum_count, segment, outer / rows, length) +
               channel_operands * length + 2 * sum_count * channels;
    }
    return opgen_channels_nxc_doubles(sum_count, float_sum_count, segment, outer, channels);
}

/* reduce_then_apply */

static void opgen_channels_whole(const void *context, int64_t first, int64_t last)
{
    const opgen_channels_loop *loop = (const opgen_channels_loop *)context;
    loop->twice->channels(loop->call, first, last);
}

/* Both passes of range `range` of a channel split: its sums over every row (zeroed first, in
 * the order of opgen_channels_sums_of's), its values, then its part of every row, while its
 * values are in cache. */
static void opgen_channels_both_passes(const opgen_channels_loop *loop, int64_t range)
{
    const opgen_channels_twice_kernel *kernel = loop->twice;
    const opgen_channels_call *call = loop->call;
    const int64_t channels = call->channels;
    const int64_t first = opgen_range_first(channels, loop->ranges, range);
    const int64_t last = opgen_range_last(channels, loop->ranges, range);
    double *sums = call->workspace;
    for (int64_t sum = 0; sum < kernel->sum_count; ++sum) {
        for (int64_t channel = first; channel < last; ++channel) {
            sums[sum * channels + channel] = 0;
        }
    }
    kernel->sums(call, 0, call->outer, first, last, 0, sums);
    kernel->values(call, first, last);
    kernel->apply(call, 0, call->outer, first, last, 0);
}

/* Pass 1 of range `range`: a tile of rows (every channel), or with a split, a range of channels
 * (every row), its partial sums zeroed first. */
static void opgen_channels_sums_of(const opgen_channels_loop *loop, int64_t range)
{
    const opgen_channels_twice_kernel *kernel = loop->twice;
    const opgen_channels_call *call = loop->call;
    const int split = loop->split_units;
    const int64_t channels = call->channels;
    double *partial = call->workspace + (kernel->sum_count + kernel->value_count) * channels +
                      (split ? 0 : range * kernel->sum_count * channels);
    const int64_t first = split ? opgen_range_first(channels, loop->ranges, range) : 0;
    const int64_t last = split ? opgen_range_last(channels, loop->ranges, range) : channels;
    const int64_t row_first = split ? 0 : call->outer * range / loop->tiles;
    const int64_t row_last = split ? call->outer : call->outer * (range + 1) / loop->tiles;
    for (int64_t sum = 0; sum < kernel->sum_count; ++sum) {
        for (int64_t channel = first; channel < last; ++channel) {
            partial[sum * channels + channel] = 0;
        }
    }
    kernel->sums(call, row_first, row_last, first, last, call->stream && !split, partial);
}

/* Steps [first, last) of the element pass: rows, or pairs of rows where rows are long (an odd
 * count's last row alone). */
static void opgen_channels_apply_steps(const void *context, int64_t first, int64_t last)
{
    const opgen_channels_loop *loop = (const opgen_channels_loop *)context;
    const opgen_channels_call *call = loop->call;
    const int paired = call->channels >= OPGEN_PAIRED_ROWS;
    if (paired && 2 * last > call->outer) {
        loop->twice->apply(call, first, last - 1, 0, call->channels, 1);
        loop->twice->apply(call, call->outer - 1, call->outer, 0, call->channels, 0);
        return;
    }
    loop->twice->apply(call, first, last, 0, call->channels, paired);
}

static void opgen_channels_twice(const opgen_channels_twice_kernel *kernel, const opgen_channels_call *given)
{
    opgen_channels_call call = *given;
    opgen_channels_loop loop = { .twice = kernel, .call = &call, .parts = 1, .threads = 1 };
    const int64_t elements = call.outer * call.channels * (kernel->channels != NULL ? call.inner : 1);
    const int64_t moved = elements * kernel->element_bytes;
    loop.threads = opgen_threads_for(elements * kernel->work_per_element);
    if (kernel->channels != NULL) {
        /* each thread a share of whole channels; streamed unless (opgen_stream_units) the units
         * end in a tail */
        call.stream = opgen_stream_units(moved, call.inner);
        opgen_team_shares(loop.threads, 0, call.channels, opgen_channels_whole, &loop);
        return;
    }
    const int64_t channels = call.channels;
    const int64_t repeat = call.inner;
    loop.tiles = opgen_tile_count(call.outer, channels, 1);
    /* tiles of rows take rows shorter than OPGEN_CHANNEL_SPLIT, segment by segment past one */
    loop.split_units = opgen_split_channels(call.outer, channels, loop.tiles, OPGEN_CHANNEL_SPLIT - 1);
    /* rows of many channels or few rows, each channel its own: both passes range by range */
    const int range_by_range = loop.split_units && repeat == 1;
    loop.ranges = loop.split_units ? opgen_channel_ranges(channels, loop.threads,
                                                          range_by_range ? opgen_reread_range(call.outer, kernel->element_bytes)
                                                                         : OPGEN_CHANNEL_RANGE)
                                   : loop.tiles;
    /* outputs bigger than the caches go straight to memory (see opgen_stream_rows) */
    call.stream = opgen_stream_rows(moved, channels * kernel->operands.sizes[kernel->row_output], call.tensors[kernel->row_output]);
    const int threads = (int)opgen_min(loop.threads, loop.ranges);
    if (range_by_range) {
        /* the element pass's per-channel values are then as many as a row's elements, too many
         * to stay in cache while every row reads them all; so each range of channels runs
         * pass 1, its channels' values and pass 2 in turn, and its values stay in cache. The
         * sums are the same as below. */
        opgen_channels_team(&loop, threads, loop.ranges, opgen_channels_both_passes);
        return;
    }
    if (!loop.split_units && loop.tiles == 1 && loop.threads > 1 && !call.stream && channels >= 2 * OPGEN_BLOCK) {
        /* one tile of rows, threads to spare: pass 1 in ranges of whole blocks of channels over
         * every row, one a thread. A channel's sums do not depend on its range: the same bits
         * as one thread's. */
        loop.split_units = 1;
        loop.ranges = opgen_min(loop.threads, channels / OPGEN_BLOCK);
    }
    /* pass 1: partial sums per tile of rows (or, see opgen_split_channels, per range of channels) */
    opgen_channels_team(&loop, (int)opgen_min(loop.threads, loop.ranges), loop.ranges, opgen_channels_sums_of);
    /* the partial sums, in tile order */
    double *const sums = call.workspace;
    const int64_t slots = kernel->sum_count * channels;
    const double *const partials = call.workspace + (kernel->sum_count + kernel->value_count) * channels;
    for (int64_t slot = 0; slot < slots; ++slot) {
        sums[slot] = 0;
    }
    for (int64_t tile = 0; tile < (loop.split_units ? 1 : loop.tiles); ++tile) {
        for (int64_t slot = 0; slot < slots; ++slot) {
            sums[slot] += partials[tile * slots + slot];
        }
    }
    /* tiled rows: channel c's `repeat` copies, a period apart, in copy order; their sum goes to each */
    for (int64_t sum = 0; call.period > 0 && sum < kernel->sum_count; ++sum) {
        double *const copies = sums + sum * channels;
        for (int64_t channel = 0; channel < call.period; ++channel) {
            const double total = opgen_channels_copies_total(copies, call.period, repeat, channel);
            for (int64_t copy = 0; copy < repeat; ++copy) {
                copies[copy * call.period + channel] = total;
            }
        }
    }
    /* runs of `repeat` channels that are one channel: their sums, in turn, go to each */
    for (int64_t first = 0; call.period == 0 && repeat > 1 && first < slots; first += repeat) {
        double total = sums[first];
        for (int64_t step = 1; step < repeat; ++step) {
            total += sums[first + step];
        }
        for (int64_t step = 0; step < repeat; ++step) {
            sums[first + step] = total;
        }
    }
    kernel->values(&call, 0, channels);
    /* pass 2: the elementwise outputs, rows split among the threads. One thread runs it in a
     * parallel region too: timed from C, one thread, 401 408 rows of 64 channels, bf16 7 %
     * faster past the caches and 11 % in them, f16 1 % and 4 %, f32 unchanged. */
    const int64_t steps = channels >= OPGEN_PAIRED_ROWS ? (call.outer + 1) / 2 : call.outer;
    opgen_team_shares(loop.threads, call.outer * channels >= OPGEN_ONE_THREAD_REGION, steps, opgen_channels_apply_steps,
                      &loop);
}

/* Rows of few channels for a reduce_then_apply kernel: a whole number of tiled rows only (the
 * element pass needs every sum first). */
static int64_t opgen_channels_twice_tiled(int64_t outer, int64_t channels, int64_t repeat)
{
    const int64_t rows = opgen_channels_tiled(outer, channels, repeat);
    return rows > 0 && outer % rows == 0 ? rows : 0;
}

static int64_t opgen_channels_twice_doubles(int sum_count, int value_count, int64_t outer, int64_t channels)
{
    return (sum_count + value_count + opgen_tile_count(outer, channels, 1) * sum_count) * channels;
}

void opgen_channels_run_twice(const opgen_channels_twice_kernel *kernel, const opgen_channels_call *given)
{
    const int64_t rows = kernel->channels == NULL ? opgen_channels_twice_tiled(given->outer, given->channels, given->inner) : 0;
    if (rows == 0) {
        opgen_channels_twice(kernel, given);
        return;
    }
    /* the workspace: the tiled call's, then the tiled channel operands (inputs and outputs) */
    const int64_t length = given->channels * rows;
    double *const room = given->workspace + opgen_channels_twice_doubles(kernel->sum_count, kernel->value_count,
                                                                         given->outer / rows, length);
    void *tensors[OPGEN_MAX_OPERANDS];
    const opgen_channels_call tiled = opgen_channels_tile(&kernel->operands, given, rows, tensors, room, 1);
    opgen_channels_twice(kernel, &tiled);
    /* the channel outputs: a channel's copies are equal (their sums were), the first goes out */
    for (int i = kernel->operands.input_count; i < kernel->operands.count; ++i) {
        if (kernel->operands.by_channel[i] && given->tensors[i] != NULL) {
            memcpy(given->tensors[i], tensors[i], (size_t)(given->channels * kernel->operands.sizes[i]));
        }
    }
}

int64_t opgen_channels_twice_workspace(int sum_count, int value_count, int channel_operands, int64_t outer,
                                       int64_t channels, int64_t repeat)
{
    const int64_t rows = opgen_channels_twice_tiled(outer, channels, repeat);
    if (rows > 0) {
        return opgen_channels_twice_doubles(sum_count, value_count, outer / rows, channels * rows) +
               channel_operands * channels * rows;
    }
    return opgen_channels_twice_doubles(sum_count, value_count, outer, channels);
}
