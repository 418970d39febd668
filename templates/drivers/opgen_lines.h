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
 *   apply              one pass over the line writing its elements (tensor outputs) and
 *                      adding its terms of the sums across lines (outputs of kind along);
 *   store              the line outputs (one element per line).
 * Sums across lines go into one row of partial sums per chunk of lines (the workspace); the
 * chunks are fixed by the shape alone, each computed by one thread and added up in order at
 * the end (store_across writes them): the sums never depend on the thread count either.
 * Where inner is 1 a line is contiguous and the microkernels take one line, vectorized along
 * it; the kernel's `lines` runs them over a range of such lines, in groups of
 * opgen_lines_group(length) lines: each pass (and the values after it) over every line of the
 * group before the next, then each line's element pass and line outputs, in line order. Else they take up to OPGEN_LINES_LANES neighbouring lines at once (a tile), one per lane,
 * walking the length (their elements are contiguous across the lines): the *_columns
 * microkernels.
 * Any microkernel but lines may be NULL (nothing to do).
 *
 * An op over a set of axes (ReduceSum's axes list) has one reduction and line outputs. Where its
 * axes are neighbours (after dims of 1 are dropped and neighbours merged), they are the line.
 * Else the line is the last block of them, and each output value combines the line's partial
 * values at every index of the other reduced blocks (`blocks`), one after the other in the
 * order of those indices (combine), then computes the line values that follow: one thread per
 * output value (or tile of them), so the results never depend on the thread count either. */
#ifndef OPGEN_LINES_H
#define OPGEN_LINES_H

#include <stdint.h>

#include "opgen_internal.h"

/* Lines a *_columns microkernel computes at once: one per lane of its blocks. */
#define OPGEN_LINES_LANES (OPGEN_LINES_COLUMN_BLOCKS * OPGEN_BLOCK)
/* ... and at most, in a wide tile: neighbouring whole tiles of one call, taken together where
 * the tensors lie past the caches (call->stream), each step over all of them. */
#define OPGEN_LINES_WIDE_LANES (OPGEN_LINES_WIDE_TILES * OPGEN_LINES_LANES)
/* OPGEN_LINES_MAX_VALUES (opgen_internal.h, from lines.MAX_LINE_VALUES): line values an op may
 * keep, checked when its spec is loaded. */

typedef struct opgen_lines_call {
    void *const *tensors;  /* the operands' data: inputs, then outputs (NULL when absent) */
    const float *numbers;  /* the f32 attributes the math reads */
    int64_t outer;
    int64_t length;        /* elements per line: `count` in the math */
    int64_t inner;
    int stream;            /* outputs bigger than the caches: stored past them */
    double *workspace;     /* opgen_lines_workspace() doubles for sums across lines, else NULL */
    int64_t count;         /* elements each line value reduces: `count` in the math (length, or
                            * more with blocks) */
    const int64_t *blocks; /* an op over a set of axes: NULL or blocks[0] == 0 when they are
                            * neighbours; else blocks[0] = n dims before the line's axes, merged
                            * (product: outer), outermost first, dim b of size blocks[1 + 2 b],
                            * reduced too when blocks[2 + 2 b] is 1 */
    float *kept;           /* a thread's scratch of OPGEN_LINES_KEPT_TERMS + OPGEN_BLOCK floats
                            * for the terms a kernel keeps (keeps_terms), set by the driver for
                            * contiguous lines up to OPGEN_LINES_KEPT_TERMS long; else NULL */
    const double *wide;    /* a thread's copy of the kernel's along inputs (widen), `length`
                            * doubles each, one after the other: set by the driver for
                            * contiguous lines up to OPGEN_LINES_WIDE_VALUES values in all;
                            * else NULL, and each block widens what it reads */
} opgen_lines_call;

/* One contiguous line (inner == 1): `values` holds the line's values. */
typedef void (*opgen_lines_line_function)(const opgen_lines_call *call, int64_t line, double *values);
/* `lanes` (1..OPGEN_LINES_LANES) neighbouring lines from (outer_index, position): lane l's
 * values at values[l * value_count]. The *_wide ones take a wide tile: a multiple of
 * OPGEN_LINES_LANES lines up to OPGEN_LINES_WIDE_LANES, each line's operations those of the
 * others (their per-lane arrays that wide: in the others, GCC keeps a tile's in registers). */
typedef void (*opgen_lines_columns_function)(const opgen_lines_call *call, int64_t outer_index, int64_t position,
                                             int lanes, double *values);
/* The element pass: as above, also adding its terms across lines into `across` (a chunk's
 * partial sums: across_count rows of `length` doubles; NULL when the op has none). */
typedef void (*opgen_lines_apply_columns_function)(const opgen_lines_call *call, int64_t outer_index,
                                                   int64_t position, int lanes, double *values, double *across);
/* Contiguous lines [first, last) (inner 1), as the header comment says; `across` as for
 * apply_columns. */
typedef void (*opgen_lines_range_function)(const opgen_lines_call *call, int64_t first, int64_t last, double *across);
/* The sums across lines, added up (across_count rows of `length`), into their outputs. */
typedef void (*opgen_lines_store_across_function)(const opgen_lines_call *call, const double *sums);

typedef struct opgen_lines_pass {
    opgen_lines_line_function reduce;
    opgen_lines_columns_function reduce_columns;
    opgen_lines_columns_function reduce_wide;
    opgen_lines_line_function after; /* per line, also in the columns path */
} opgen_lines_pass;

typedef struct opgen_lines_kernel {
    int value_count;                          /* 0..OPGEN_LINES_MAX_VALUES */
    opgen_lines_line_function values_before;  /* per line, also in the columns path */
    int pass_count;
    const opgen_lines_pass *passes;
    opgen_lines_apply_columns_function apply_columns; /* NULL: no tensor output, no sum across lines */
    opgen_lines_apply_columns_function apply_wide;    /* ... in a wide tile, streamed */
    opgen_lines_range_function lines;         /* contiguous lines: values_before to store, in groups */
    opgen_lines_line_function store;          /* NULL: no line output */
    int across_count;                         /* sums across lines (outputs of kind along) */
    opgen_lines_store_across_function store_across;
    int work_per_element;                     /* in plain-arithmetic units (an exp costs more) */
    int combine;                              /* an op over a set of axes: how its one reduction's
                                               * partial values combine (opgen_lines_combine) */
    int combine_slot;                         /* that reduction's line value */
    int keeps_terms;                          /* 1: where call->kept is set, the last reduction
                                               * pass stores its kept terms there, whole blocks,
                                               * and the element pass reads them back */
    int wide_count;                           /* along inputs widen writes (0: widen is NULL) */
    void (*widen)(const opgen_lines_call *call, double *wide); /* the along inputs as doubles */
} opgen_lines_kernel;

/* How the partial values of a reduction over blocks of axes combine (each in double, in the
 * order of the blocks' indices). */
enum opgen_lines_combine { OPGEN_LINES_NONE, OPGEN_LINES_SUM, OPGEN_LINES_MAX, OPGEN_LINES_MIN, OPGEN_LINES_PROD };

void opgen_lines_run(const opgen_lines_kernel *kernel, const opgen_lines_call *call);
/* Elements each line value reduces: `length`, times the reduced dims of `blocks` (may be NULL). */
int64_t opgen_lines_count(int64_t length, const int64_t *blocks);
/* Doubles of workspace a call with `across_count` sums across lines needs; -1 when their bytes
 * would not fit in 64 bits. */
int64_t opgen_lines_workspace(int64_t outer, int64_t length, int64_t inner, int across_count);

/* The reductions' steps: the larger (smaller) of a running value and a term, a NaN term
 * making it NaN for good (NumPy's max and min). Two selects of one comparison each: the first
 * is one max (min) instruction, the second a blend on the term alone, and neither a branch;
 * one select on `(term > running) | (term != term)` compiled to data-dependent branches in
 * the lanes' scalar fold, which the processor mispredicted on random data. */
static inline float opgen_lines_max_float(float running, float term)
{
    const float chosen = term > running ? term : running;
    return term != term ? term : chosen;
}
static inline float opgen_lines_min_float(float running, float term)
{
    const float chosen = term < running ? term : running;
    return term != term ? term : chosen;
}
static inline double opgen_lines_max_double(double running, double term)
{
    const double chosen = term > running ? term : running;
    return term != term ? term : chosen;
}
static inline double opgen_lines_min_double(double running, double term)
{
    const double chosen = term < running ? term : running;
    return term != term ? term : chosen;
}

/* Lines of `length` elements in a group: up to OPGEN_LINES_GROUP, as many as make
 * OPGEN_LINES_GROUP_ELEMENTS elements, one at least. */
static inline int opgen_lines_group(int64_t length)
{
    const int64_t group = OPGEN_LINES_GROUP_ELEMENTS / (length > 0 ? length : 1);
    return group < 1 ? 1 : group > OPGEN_LINES_GROUP ? OPGEN_LINES_GROUP : (int)group;
}

/* The blocks of a line of `length` elements where a group of such lines runs in registers (the
 * kernels' _short), else 0. */
static inline int opgen_lines_short(int64_t length)
{
    if (length <= 0 || length > OPGEN_LINES_SHORT_BLOCKS * OPGEN_BLOCK) {
        return 0;
    }
    return (int)((length + OPGEN_BLOCK - 1) / OPGEN_BLOCK);
}

#endif /* OPGEN_LINES_H */
