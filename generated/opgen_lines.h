/* The loop driver of the along_axes ops (hand-written; opgen copies it into every build).
 *
 * A call is the reference viewed as [outer][length][inner]: the axes an attribute names are
 * the middle dim, merged. A line is the `length` elements at one (outer, inner) position,
 * `inner` elements apart; lines are numbered outer_index * inner + position. Each line is
 * computed by one thread, start to end, in a fixed order: results never depend on the thread
 * count.
 *
 * The op's math comes as microkernels generated from its spec, one set per dtype combination
 * and target. Per line, in order:
 *   values_before      the line values that need no reduction (scalar, in double);
 *   passes[k].reduce   one pass over the line, adding its terms into that pass's reductions;
 *   passes[k].after    the line values the pass's reductions make computable;
 *   apply              one pass over the line writing its elements (tensor outputs);
 *   store              the line outputs (one element per line).
 * Where inner is 1 a line is contiguous and the microkernels take one line, vectorized along
 * it. Else they take OPGEN_LINES_LANES neighbouring lines at once, one per lane, walking the
 * length (their elements are contiguous across the lines): the *_columns microkernels.
 * Any microkernel but apply may be NULL (nothing to do). */
#ifndef OPGEN_LINES_H
#define OPGEN_LINES_H

#include <stdint.h>

#include "opgen_internal.h"

/* Lines a *_columns microkernel computes at once: one per lane of a block. */
#define OPGEN_LINES_LANES OPGEN_BLOCK
/* OPGEN_LINES_MAX_VALUES (opgen_internal.h, from lines.MAX_LINE_VALUES): line values an op may
 * keep, checked when its spec is loaded. */

typedef struct opgen_lines_call {
    void *const *tensors;  /* the operands' data: inputs, then outputs (NULL when absent) */
    const float *numbers;  /* the f32 attributes the math reads */
    int64_t outer;
    int64_t length;        /* elements per line: `count` in the math */
    int64_t inner;
    int stream;            /* outputs bigger than the caches: stored past them */
} opgen_lines_call;

/* One contiguous line (inner == 1): `values` holds the line's values. */
typedef void (*opgen_lines_line_function)(const opgen_lines_call *call, int64_t line, double *values);
/* `lanes` (1..OPGEN_LINES_LANES) neighbouring lines from (outer_index, position): lane l's
 * values at values[l * value_count]. */
typedef void (*opgen_lines_columns_function)(const opgen_lines_call *call, int64_t outer_index, int64_t position,
                                             int lanes, double *values);

typedef struct opgen_lines_pass {
    opgen_lines_line_function reduce;
    opgen_lines_columns_function reduce_columns;
    opgen_lines_line_function after; /* per line, also in the columns path */
} opgen_lines_pass;

typedef struct opgen_lines_kernel {
    int value_count;                          /* 0..OPGEN_LINES_MAX_VALUES */
    opgen_lines_line_function values_before;  /* per line, also in the columns path */
    int pass_count;
    const opgen_lines_pass *passes;
    opgen_lines_line_function apply;          /* NULL: no tensor output */
    opgen_lines_columns_function apply_columns;
    opgen_lines_line_function store;          /* NULL: no line output */
    int work_per_element;                     /* in plain-arithmetic units (an exp costs more) */
} opgen_lines_kernel;

void opgen_lines_run(const opgen_lines_kernel *kernel, const opgen_lines_call *call);

/* The reductions' steps: the larger (smaller) of a running value and a term, a NaN term
 * making it NaN for good (NumPy's max and min). `|` rather than `||`: a select the compiler
 * can vectorize. */
static inline float opgen_lines_max_float(float running, float term)
{
    return ((term > running) | (term != term)) ? term : running;
}
static inline float opgen_lines_min_float(float running, float term)
{
    return ((term < running) | (term != term)) ? term : running;
}
static inline double opgen_lines_max_double(double running, double term)
{
    return ((term > running) | (term != term)) ? term : running;
}
static inline double opgen_lines_min_double(double running, double term)
{
    return ((term < running) | (term != term)) ? term : running;
}

#endif /* OPGEN_LINES_H */
