/* The loop driver of the along_axes ops (hand-written; opgen copies it into every build): see opgen_lines.h. */
#include "opgen.h"
#include "opgen_lines.h"

/* Chunks of lines (or of tiles of lines) whose sums across lines are kept apart: a function of
 * the shape alone. More chunks than threads, so that threads share them out evenly. */
#define OPGEN_LINES_MAX_CHUNKS 64

/* One contiguous line, start to end. */
static void opgen_lines_one(const opgen_lines_kernel *kernel, const opgen_lines_call *call, int64_t line,
                            double *across)
{
    double values[OPGEN_LINES_MAX_VALUES + 1];
    if (kernel->values_before != NULL) {
        kernel->values_before(call, line, values);
    }
    for (int k = 0; k < kernel->pass_count; ++k) {
        kernel->passes[k].reduce(call, line, values);
        if (kernel->passes[k].after != NULL) {
            kernel->passes[k].after(call, line, values);
        }
    }
    if (kernel->apply != NULL) {
        kernel->apply(call, line, values, across);
    }
    if (kernel->store != NULL) {
        kernel->store(call, line, values);
    }
}

/* Up to OPGEN_LINES_LANES neighbouring lines from `position`, one per lane. */
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
    for (int k = 0; k < kernel->pass_count; ++k) {
        kernel->passes[k].reduce_columns(call, outer_index, position, lanes, values);
        if (kernel->passes[k].after != NULL) {
            for (int lane = 0; lane < lanes; ++lane) {
                kernel->passes[k].after(call, first + lane, values + lane * count);
            }
        }
    }
    if (kernel->apply_columns != NULL) {
        kernel->apply_columns(call, outer_index, position, lanes, values, across);
    }
    if (kernel->store != NULL) {
        for (int lane = 0; lane < lanes; ++lane) {
            kernel->store(call, first + lane, values + lane * count);
        }
    }
}

/* Units of work: lines (contiguous) or tiles of OPGEN_LINES_LANES lines along inner. */
static int64_t opgen_lines_units(int64_t outer, int64_t inner)
{
    return inner == 1 ? outer : outer * ((inner + OPGEN_LINES_LANES - 1) / OPGEN_LINES_LANES);
}

static int64_t opgen_lines_chunks(int64_t units)
{
    return units < OPGEN_LINES_MAX_CHUNKS ? units : OPGEN_LINES_MAX_CHUNKS;
}

int64_t opgen_lines_workspace(int64_t outer, int64_t length, int64_t inner, int across_count)
{
    const int64_t chunks = opgen_lines_chunks(opgen_lines_units(outer, inner));
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
        for (int64_t line = first; line < last; ++line) {
            opgen_lines_one(kernel, call, line, across);
        }
        return;
    }
    {
        const int64_t per_outer = (call->inner + OPGEN_LINES_LANES - 1) / OPGEN_LINES_LANES;
        for (int64_t tile = first; tile < last; ++tile) {
            const int64_t position = tile % per_outer * OPGEN_LINES_LANES;
            const int64_t left = call->inner - position;
            opgen_lines_columns(kernel, call, tile / per_outer, position,
                                (int)(left < OPGEN_LINES_LANES ? left : OPGEN_LINES_LANES), across);
        }
    }
}

void opgen_lines_run(const opgen_lines_kernel *kernel, const opgen_lines_call *call)
{
    const int64_t elements = call->outer * call->length * call->inner;
    const int64_t units = opgen_lines_units(call->outer, call->inner);
    const int across = kernel->across_count > 0;
    /* with sums across lines, a chunk of units is the unit of work: each its own partial sums */
    const int64_t chunks = across ? opgen_lines_chunks(units) : units;
    const int64_t row = kernel->across_count * call->length; /* a chunk's partial sums */
    int threads = opgen_threads_for(elements * kernel->work_per_element);
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
            OPGEN_FOR
            for (int64_t chunk = 0; chunk < chunks; ++chunk) {
                opgen_lines_range(kernel, call, chunk * units / chunks, (chunk + 1) * units / chunks,
                                  across ? call->workspace + chunk * row : NULL);
            }
            opgen_fence();
        }
    } else
#endif
    {
        for (int64_t chunk = 0; chunk < chunks; ++chunk) {
            opgen_lines_range(kernel, call, chunk * units / chunks, (chunk + 1) * units / chunks,
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
