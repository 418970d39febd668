/* The loop driver of the along_axes ops (hand-written; opgen copies it into every build): see opgen_lines.h. */
#include "opgen.h"
#include "opgen_lines.h"

/* Up to OPGEN_LINES_WIDE_LANES neighbouring lines from `position`, one per lane (more than
 * OPGEN_LINES_LANES: a multiple of it, with at most OPGEN_LINES_MAX_VALUES values a tile's line). */
static void opgen_lines_columns(const opgen_lines_kernel *kernel, const opgen_lines_call *call, int64_t outer_index,
                                int64_t position, int lanes, double *across)
{
    double values[OPGEN_LINES_LANES * OPGEN_LINES_MAX_VALUES + 1];
    const int64_t first = outer_index * call->inner + position;
    const int count = kernel->value_count;
    if (kernel->values_before != NULL) {
        for (int lane = 0; lane < lanes; ++lane) {
            kernel->values_before(call, first + lane, values + lane * count);
        }
    }
    const int wide = lanes > OPGEN_LINES_LANES;
    for (int k = 0; k < kernel->pass_count; ++k) {
        (wide ? kernel->passes[k].reduce_wide : kernel->passes[k].reduce_columns)(call, outer_index, position, lanes, values);
        if (kernel->passes[k].after != NULL) {
            for (int lane = 0; lane < lanes; ++lane) {
                kernel->passes[k].after(call, first + lane, values + lane * count);
            }
        }
    }
    if (kernel->apply_columns != NULL) {
        (wide ? kernel->apply_wide : kernel->apply_columns)(call, outer_index, position, lanes, values, across);
    }
    if (kernel->store != NULL) {
        for (int lane = 0; lane < lanes; ++lane) {
            kernel->store(call, first + lane, values + lane * count);
        }
    }
}

/* The lines a tile of the columns path takes: OPGEN_LINES_LANES where inner has as many, else a
 * block of them, which the microkernels take one at a time anyway: threads then share out
 * several tiles of a narrow inner (ReduceSum over axis 0 of 1000 x 47 took 1.3x the time on two
 * threads in one tile). */
static int64_t opgen_lines_tile(int64_t inner)
{
    return inner >= OPGEN_LINES_LANES ? OPGEN_LINES_LANES : OPGEN_BLOCK;
}

/* Tiles of `width` lines a columns call takes together: up to OPGEN_LINES_WIDE_TILES where the
 * tensors lie past the caches and the tiles are whole ones, as the values of its lines fit in
 * opgen_lines_columns' array; else 1. */
static int64_t opgen_lines_wide_tiles(const opgen_lines_kernel *kernel, const opgen_lines_call *call, int64_t width)
{
    const int64_t fitting = kernel->value_count > 0 ? OPGEN_LINES_MAX_VALUES / kernel->value_count : OPGEN_LINES_WIDE_TILES;
    const int64_t wide = fitting < OPGEN_LINES_WIDE_TILES ? fitting : OPGEN_LINES_WIDE_TILES;
    return call->stream && width == OPGEN_LINES_LANES && wide > 1 ? wide : 1;
}

/* Units of work: lines (contiguous) or tiles of opgen_lines_tile(inner) lines along inner. */
static int64_t opgen_lines_units(int64_t outer, int64_t inner)
{
    return inner == 1 ? outer : outer * ((inner + opgen_lines_tile(inner) - 1) / opgen_lines_tile(inner));
}

/* Chunks of `units` units of `elements` elements in all: a function of the shape alone, at
 * most OPGEN_LINES_MAX_CHUNKS and one a unit, each of OPGEN_LINES_CHUNK_ELEMENTS elements or
 * more; one at least where there are units (their per-line outputs are written even when the
 * lines are empty). */
static int64_t opgen_lines_chunks(int64_t units, int64_t elements)
{
    int64_t chunks = elements / OPGEN_LINES_CHUNK_ELEMENTS;
    chunks = chunks < units ? chunks : units;
    chunks = chunks < OPGEN_LINES_MAX_CHUNKS ? chunks : OPGEN_LINES_MAX_CHUNKS;
    return chunks > 0 || units == 0 ? chunks : 1;
}

int64_t opgen_lines_workspace(int64_t outer, int64_t length, int64_t inner, int across_count)
{
    const int64_t units = opgen_lines_units(outer, inner);
    const int64_t chunks = opgen_lines_chunks(units, units == 0 ? 0 : outer * length * inner);
    if (across_count <= 0 || chunks <= 0) {
        return 0;
    }
    return length > INT64_MAX / 8 / (chunks * across_count) ? -1 : chunks * across_count * length; /* -1: too many */
}

/* Units [first, last): one line or one tile each. */
static void opgen_lines_range(const opgen_lines_kernel *kernel, const opgen_lines_call *call, int64_t first,
                              int64_t last, double *across)
{
    if (call->inner == 1) {
        kernel->lines(call, first, last, across);
        return;
    }
    {
        const int64_t width = opgen_lines_tile(call->inner);
        const int64_t per_outer = (call->inner + width - 1) / width;
        const int64_t wide = opgen_lines_wide_tiles(kernel, call, width);
        for (int64_t tile = first; tile < last;) {
            const int64_t position = tile % per_outer * width;
            const int64_t left = call->inner - position;
            /* the whole tiles that follow in this range and at this outer index, up to `wide`:
             * the units (and the chunks of sums across lines) stay those of single tiles, and
             * each line's operations are the same in either */
            int64_t tiles = 1;
            while (tiles < wide && tile + tiles < last && (tile + tiles) % per_outer != 0 && left >= (tiles + 1) * width) {
                ++tiles;
            }
            const int64_t lanes = tiles > 1 ? tiles * width : (left < width ? left : width);
            opgen_lines_columns(kernel, call, tile / per_outer, position, (int)lanes, across);
            tile += tiles;
        }
    }
}

int64_t opgen_lines_count(int64_t length, const int64_t *blocks)
{
    int64_t count = length;
    for (int64_t b = 0; blocks != NULL && b < blocks[0]; ++b) {
        count *= blocks[2 + 2 * b] ? blocks[1 + 2 * b] : 1;
    }
    return count;
}

static double opgen_lines_combined_value(int how, double running, double part)
{
    switch (how) {
    case OPGEN_LINES_SUM:
        return running + part;
    case OPGEN_LINES_PROD:
        return running * part;
    case OPGEN_LINES_MAX:
        return opgen_lines_max_double(running, part);
    default:
        return opgen_lines_min_double(running, part);
    }
}

/* Output values kept_index * inner + position, `lanes` of them (a tile along inner, or one when
 * inner is 1): the reduction over the line at each index of the reduced blocks, combined in the
 * row-major order of those indices; then the line values after it, and the line outputs. */
static void opgen_lines_combined(const opgen_lines_kernel *kernel, const opgen_lines_call *call, int64_t kept_index,
                                 int64_t position, int lanes)
{
    double values[OPGEN_LINES_LANES * OPGEN_LINES_MAX_VALUES + 1];
    double part[OPGEN_LINES_LANES * OPGEN_LINES_MAX_VALUES + 1];
    int64_t kept[OPGEN_MAX_RANK] = { 0 };
    const int64_t n = call->blocks[0];
    const int count = kernel->value_count, slot = kernel->combine_slot;
    const int64_t first = kept_index * call->inner + position;
    int64_t rest = kept_index, reduced = 1;
    for (int64_t b = n - 1; b >= 0; --b) { /* the kept blocks' indices, from the last */
        const int64_t size = call->blocks[1 + 2 * b];
        if (call->blocks[2 + 2 * b]) {
            reduced *= size;
        } else {
            kept[b] = rest % size;
            rest /= size;
        }
    }
    if (kernel->values_before != NULL) {
        for (int lane = 0; lane < lanes; ++lane) {
            kernel->values_before(call, first + lane, values + lane * count);
        }
    }
    for (int64_t r = 0; r < reduced; ++r) {
        int64_t left = r, outer_index = 0, stride = 1;
        for (int64_t b = n - 1; b >= 0; --b) {
            const int64_t size = call->blocks[1 + 2 * b];
            int64_t at = kept[b];
            if (call->blocks[2 + 2 * b]) {
                at = left % size;
                left /= size;
            }
            outer_index += at * stride;
            stride *= size;
        }
        if (call->inner == 1) {
            kernel->passes[0].reduce(call, outer_index, part);
        } else {
            kernel->passes[0].reduce_columns(call, outer_index, position, lanes, part);
        }
        for (int lane = 0; lane < lanes; ++lane) {
            double *to = values + lane * count + slot;
            const double from = part[lane * count + slot];
            *to = r == 0 ? from : opgen_lines_combined_value(kernel->combine, *to, from);
        }
    }
    for (int lane = 0; lane < lanes; ++lane) {
        if (kernel->passes[0].after != NULL) {
            kernel->passes[0].after(call, first + lane, values + lane * count);
        }
        kernel->store(call, first + lane, values + lane * count);
    }
}

/* An op over a set of axes that are not neighbours: one unit per output value (inner 1) or per
 * tile of opgen_lines_tile(inner) of them along inner. */
static void opgen_lines_run_blocks(const opgen_lines_kernel *kernel, const opgen_lines_call *call)
{
    const int64_t elements = call->outer * call->length * call->inner;
    const int64_t width = opgen_lines_tile(call->inner);
    const int64_t tiles = (call->inner + width - 1) / width;
    int64_t kept = 1;
    for (int64_t b = 0; b < call->blocks[0]; ++b) {
        kept *= call->blocks[2 + 2 * b] ? 1 : call->blocks[1 + 2 * b];
    }
    const int64_t units = kept * tiles;
    int threads = opgen_threads_for(elements * kernel->work_per_element);
    if (threads > units) {
        threads = (int)(units > 0 ? units : 1);
    }
#if defined(_OPENMP)
    if (threads > 1) {
        OPGEN_PARALLEL(threads)
        {
            OPGEN_FOR
            for (int64_t unit = 0; unit < units; ++unit) {
                const int64_t position = unit % tiles * width, left = call->inner - position;
                opgen_lines_combined(kernel, call, unit / tiles, position, (int)(left < width ? left : width));
            }
            opgen_fence();
        }
    } else
#endif
    {
        for (int64_t unit = 0; unit < units; ++unit) {
            const int64_t position = unit % tiles * width, left = call->inner - position;
            opgen_lines_combined(kernel, call, unit / tiles, position, (int)(left < width ? left : width));
        }
        opgen_fence();
    }
}

/* A thread's scratch: the kept terms of a kernel that keeps some, or the along inputs widened
 * to double of one that widens them (no kernel does both: the first compute in float, the
 * second in double: lines._kept_terms). */
typedef union opgen_lines_scratch {
    float kept[OPGEN_LINES_KEPT_TERMS + OPGEN_BLOCK + 64 / sizeof(float)];
    double wide[OPGEN_LINES_WIDE_VALUES + 64 / sizeof(double)];
} opgen_lines_scratch;

/* The scratch from its first 64-byte boundary (the room for it is there): the microkernels'
 * 64-byte loads of kept terms and widened along inputs then split no cache line (on the
 * stack at 16 bytes, LayerNorm f32 on lines of 1024 took 1.07x the time). */
static void *opgen_lines_scratch_start(opgen_lines_scratch *scratch)
{
    return (void *)(((uintptr_t)scratch + 63u) & ~(uintptr_t)63u);
}

/* `call` as one thread runs it: with the kept terms in `scratch` where the kernel keeps some
 * and its lines are contiguous and short enough; or with the along inputs widened there
 * where they fit. Each thread widens its own copy: one copy written by the calling thread and
 * read by the others took LayerNorm 64 x 1024 on two threads 1.16x the time (every call moved
 * its lines from one core's cache to the other's). */
static opgen_lines_call opgen_lines_with_scratch(const opgen_lines_kernel *kernel, const opgen_lines_call *call,
                                                 opgen_lines_scratch *scratch)
{
    opgen_lines_call local = *call;
    const int contiguous = call->inner == 1;
    float *const kept = (float *)opgen_lines_scratch_start(scratch);
    double *const wide = (double *)opgen_lines_scratch_start(scratch);
    local.kept = kernel->keeps_terms && contiguous && call->length <= OPGEN_LINES_KEPT_TERMS ? kept : NULL;
    local.wide = NULL;
    if (kernel->widen != NULL && contiguous && call->length <= OPGEN_LINES_WIDE_VALUES / kernel->wide_count) {
        kernel->widen(call, wide);
        local.wide = wide;
    }
    return local;
}

void opgen_lines_run(const opgen_lines_kernel *kernel, const opgen_lines_call *call)
{
    if (call->blocks != NULL && call->blocks[0] > 0 && kernel->combine != OPGEN_LINES_NONE) {
        opgen_lines_run_blocks(kernel, call);
        return;
    }
    const int64_t elements = call->outer * call->length * call->inner;
    const int64_t units = opgen_lines_units(call->outer, call->inner);
    const int across = kernel->across_count > 0;
    int threads = opgen_threads_for(elements * kernel->work_per_element);
    /* with sums across lines, a chunk of units is the unit of work: each its own partial sums;
     * without, one chunk a thread (a range of units, which `lines` takes in groups) */
    const int64_t chunks = across ? opgen_lines_chunks(units, elements) : opgen_min(units, threads);
    const int64_t row = kernel->across_count * call->length; /* a chunk's partial sums */
    if (threads > chunks) {
        threads = (int)(chunks > 0 ? chunks : 1);
    }
    if (across) {
        for (int64_t i = 0; i < chunks * row; ++i) {
            call->workspace[i] = 0.0;
        }
    }
#if defined(_OPENMP)
    if (threads > 1) {
        OPGEN_PARALLEL(threads)
        {
            opgen_lines_scratch scratch;
            const opgen_lines_call local = opgen_lines_with_scratch(kernel, call, &scratch);
            OPGEN_FOR
            for (int64_t chunk = 0; chunk < chunks; ++chunk) {
                opgen_lines_range(kernel, &local, chunk * units / chunks, (chunk + 1) * units / chunks,
                                  across ? call->workspace + chunk * row : NULL);
            }
            opgen_fence();
        }
    } else
#endif
    {
        opgen_lines_scratch scratch;
        const opgen_lines_call local = opgen_lines_with_scratch(kernel, call, &scratch);
        for (int64_t chunk = 0; chunk < chunks; ++chunk) {
            opgen_lines_range(kernel, &local, chunk * units / chunks, (chunk + 1) * units / chunks,
                              across ? call->workspace + chunk * row : NULL);
        }
        opgen_fence();
    }
    if (across && chunks == 0) {
        kernel->store_across(call, NULL); /* no lines: sums of nothing */
    } else if (across) {
        /* the chunks' partial sums added up in chunk order, into the first chunk's */
        for (int64_t chunk = 1; chunk < chunks; ++chunk) {
            for (int64_t i = 0; i < row; ++i) {
                call->workspace[i] += call->workspace[chunk * row + i];
            }
        }
        kernel->store_across(call, call->workspace);
    }
}
