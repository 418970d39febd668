/* The loop driver of the binary ops (hand-written; opgen copies it into every build): see opgen_binary.h. */
#include "opgen.h"
#include "opgen_binary.h"

/* The coalesced shape and what a range of pieces needs to walk it. */
typedef struct opgen_binary_plan {
    const opgen_binary_kernel *kernel;
    const char *first;
    const char *second;
    char *out;
    int dims;                                    /* coalesced dims, at least 1 */
    int64_t sizes[OPGEN_MAX_RANK];               /* outer to inner */
    int64_t strides[2][OPGEN_MAX_RANK];          /* each input's, in elements; 0: repeated */
    int64_t length;                              /* the innermost dim: a row */
    int64_t per_row;                             /* pieces of a row */
    opgen_binary_function run;                   /* the microkernel of the innermost dim */
    int stream;
} opgen_binary_plan;

/* Pieces [first, last): runs of whole rows and parts of rows, the outer index unravelled once
 * and then stepped row by row. */
static void opgen_binary_range(const opgen_binary_plan *plan, int64_t first, int64_t last)
{
    const opgen_binary_kernel *kernel = plan->kernel;
    const int outer_dims = plan->dims - 1;
    int64_t index[OPGEN_MAX_RANK] = { 0 };
    int64_t row = first / plan->per_row, offsets[2] = { 0, 0 };
    if (first >= last) {
        return;
    }
    {
        int64_t rest = row;
        for (int d = outer_dims - 1; d >= 0; --d) {
            index[d] = rest % plan->sizes[d];
            rest /= plan->sizes[d];
            offsets[0] += index[d] * plan->strides[0][d];
            offsets[1] += index[d] * plan->strides[1][d];
        }
    }
    for (int64_t piece = first; piece < last;) {
        /* this row's pieces within the range, in one call */
        const int64_t row_end = (row + 1) * plan->per_row < last ? (row + 1) * plan->per_row : last;
        const int64_t start = (piece - row * plan->per_row) * OPGEN_BINARY_PIECE;
        const int64_t stop = (row_end - row * plan->per_row) * OPGEN_BINARY_PIECE;
        const int64_t end = stop < plan->length ? stop : plan->length;
        const int64_t inner_0 = plan->strides[0][outer_dims], inner_1 = plan->strides[1][outer_dims];
        plan->run(plan->first + (size_t)(offsets[0] + start * inner_0) * (size_t)kernel->sizes[0],
                  plan->second + (size_t)(offsets[1] + start * inner_1) * (size_t)kernel->sizes[1],
                  plan->out + (size_t)(row * plan->length + start) * (size_t)kernel->sizes[2], end - start,
                  plan->stream);
        piece = row_end;
        ++row;
        /* the next row's index, as an odometer */
        for (int d = outer_dims - 1; d >= 0; --d) {
            offsets[0] += plan->strides[0][d];
            offsets[1] += plan->strides[1][d];
            if (++index[d] < plan->sizes[d]) {
                break;
            }
            offsets[0] -= index[d] * plan->strides[0][d];
            offsets[1] -= index[d] * plan->strides[1][d];
            index[d] = 0;
        }
    }
}

void opgen_binary_run(const opgen_binary_kernel *kernel, const void *first, const void *second, void *out, int rank_0,
                      const int64_t *dims_0, int rank_1, const int64_t *dims_1)
{
    opgen_binary_plan plan;
    int whole[2][OPGEN_MAX_RANK]; /* per coalesced dim: each input whole along it (else repeated) */
    const int rank = rank_0 > rank_1 ? rank_0 : rank_1;
    int64_t total = 1;
    plan.kernel = kernel;
    plan.first = (const char *)first;
    plan.second = (const char *)second;
    plan.out = (char *)out;
    plan.dims = 0;
    /* 1. the broadcast shape, coalesced (the inputs aligned at their last dims) */
    for (int d = 0; d < rank; ++d) {
        const int64_t size_0 = d >= rank - rank_0 ? dims_0[d - (rank - rank_0)] : 1;
        const int64_t size_1 = d >= rank - rank_1 ? dims_1[d - (rank - rank_1)] : 1;
        const int64_t size = size_0 == 1 ? size_1 : size_0;
        const int whole_0 = size_0 != 1, whole_1 = size_1 != 1;
        if (size == 0) {
            return; /* no elements */
        }
        if (size == 1) {
            continue;
        }
        total *= size;
        if (plan.dims > 0 && whole[0][plan.dims - 1] == whole_0 && whole[1][plan.dims - 1] == whole_1) {
            plan.sizes[plan.dims - 1] *= size;
        } else {
            plan.sizes[plan.dims] = size;
            whole[0][plan.dims] = whole_0;
            whole[1][plan.dims] = whole_1;
            ++plan.dims;
        }
    }
    if (plan.dims == 0) { /* one element: a run of 1, both inputs "contiguous" */
        plan.sizes[0] = 1;
        whole[0][0] = whole[1][0] = 1;
        plan.dims = 1;
    }
    /* 2. the inputs' strides: dense in their own shapes, 0 where repeated */
    for (int input = 0; input < 2; ++input) {
        int64_t stride = 1;
        for (int d = plan.dims - 1; d >= 0; --d) {
            plan.strides[input][d] = whole[input][d] ? stride : 0;
            stride *= whole[input][d] ? plan.sizes[d] : 1;
        }
    }
    /* 3. the microkernel of the innermost dim */
    plan.length = plan.sizes[plan.dims - 1];
    plan.run = kernel->runs[whole[0][plan.dims - 1] ? (whole[1][plan.dims - 1] ? 0 : 2) : 1];
    plan.per_row = (plan.length + OPGEN_BINARY_PIECE - 1) / OPGEN_BINARY_PIECE;
    /* outputs bigger than the caches go straight to memory */
    plan.stream = total * (int64_t)(kernel->sizes[0] + kernel->sizes[1] + kernel->sizes[2]) >= OPGEN_STREAM_BYTES;
    /* 4. the pieces, in contiguous ranges, one per thread */
    {
        const int64_t pieces = total / plan.length * plan.per_row;
        int threads = opgen_threads_for(total * kernel->work_per_element);
        if (threads > pieces) {
            threads = (int)pieces;
        }
#if defined(_OPENMP)
        if (threads > 1) {
            OPGEN_PARALLEL(threads)
            {
                OPGEN_FOR
                for (int part = 0; part < threads; ++part) {
                    opgen_binary_range(&plan, pieces * part / threads, pieces * (part + 1) / threads);
                }
                opgen_fence();
            }
        } else
#endif
        {
            opgen_binary_range(&plan, 0, pieces);
            opgen_fence();
        }
    }
}
