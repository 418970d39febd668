/* The loop driver of the along_axes ops: see opgen_lines.h. Hand-written, not generated. */
#include "opgen.h"
#include "opgen_lines.h"

/* One contiguous line, start to end. */
static void opgen_lines_one(const opgen_lines_kernel *kernel, const opgen_lines_call *call, int64_t line)
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
        kernel->apply(call, line, values);
    }
    if (kernel->store != NULL) {
        kernel->store(call, line, values);
    }
}

/* Up to OPGEN_LINES_LANES neighbouring lines from `position`, one per lane. */
static void opgen_lines_columns(const opgen_lines_kernel *kernel, const opgen_lines_call *call, int64_t outer_index,
                                int64_t position, int lanes)
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
        kernel->apply_columns(call, outer_index, position, lanes, values);
    }
    if (kernel->store != NULL) {
        for (int lane = 0; lane < lanes; ++lane) {
            kernel->store(call, first + lane, values + lane * count);
        }
    }
}

void opgen_lines_run(const opgen_lines_kernel *kernel, const opgen_lines_call *call)
{
    const int64_t elements = call->outer * call->length * call->inner;
    const int64_t lines = call->outer * call->inner;
    if (lines == 0) {
        return;
    }
    /* threads by the work, in elements of plain arithmetic: a line is the unit of work */
    int threads = opgen_threads_for(elements * kernel->work_per_element);
    if (threads > lines) {
        threads = (int)lines;
    }
    if (call->inner == 1) {
#if defined(_OPENMP)
        if (threads > 1) {
            OPGEN_PARALLEL(threads)
            {
                OPGEN_FOR
                for (int64_t line = 0; line < lines; ++line) {
                    opgen_lines_one(kernel, call, line);
                }
                opgen_fence();
            }
            return;
        }
#endif
        for (int64_t line = 0; line < lines; ++line) {
            opgen_lines_one(kernel, call, line);
        }
        opgen_fence();
        return;
    }
    {
        /* tiles of OPGEN_LINES_LANES lines along inner, the last one shorter */
        const int64_t per_outer = (call->inner + OPGEN_LINES_LANES - 1) / OPGEN_LINES_LANES;
        const int64_t tiles = call->outer * per_outer;
#if defined(_OPENMP)
        if (threads > 1) {
            OPGEN_PARALLEL(threads)
            {
                OPGEN_FOR
                for (int64_t tile = 0; tile < tiles; ++tile) {
                    const int64_t position = tile % per_outer * OPGEN_LINES_LANES;
                    const int64_t left = call->inner - position;
                    opgen_lines_columns(kernel, call, tile / per_outer, position,
                                        (int)(left < OPGEN_LINES_LANES ? left : OPGEN_LINES_LANES));
                }
                opgen_fence();
            }
            return;
        }
#endif
        for (int64_t tile = 0; tile < tiles; ++tile) {
            const int64_t position = tile % per_outer * OPGEN_LINES_LANES;
            const int64_t left = call->inner - position;
            opgen_lines_columns(kernel, call, tile / per_outer, position,
                                (int)(left < OPGEN_LINES_LANES ? left : OPGEN_LINES_LANES));
        }
        opgen_fence();
    }
}
