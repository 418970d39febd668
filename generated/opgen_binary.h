/* The loop driver of the binary ops (hand-written; opgen copies it into every build that has them).
 *
 * A binary op's output has the inputs' broadcast shape (NumPy's rules: the shapes aligned at
 * their last dims, each pair of dims equal or one of them 1, the output taking the larger).
 * The driver
 *   1. coalesces that shape: dims of 1 dropped, neighbouring dims merged where each input is
 *      either whole along both or repeated along both (1 in its own shape);
 *   2. gives each input its strides in the coalesced dims, 0 where it is repeated;
 *   3. picks the microkernel of the innermost dim: both inputs contiguous along it, or one of
 *      them one element repeated (both repeated cannot happen: the output would be 1 there);
 *   4. walks the outer index, its rows split into pieces of at most OPGEN_BINARY_PIECE
 *      elements, the pieces shared out among the threads in contiguous ranges.
 * Every output element is computed from its two input elements alone, whichever piece or
 * thread holds it: results never depend on the thread count.
 *
 * The microkernels come from the op's spec, one set per dtype combination and target
 * (templates/binary.c.j2). */
#ifndef OPGEN_BINARY_H
#define OPGEN_BINARY_H

#include <stdint.h>

#include "opgen_internal.h"

/* `count` contiguous output elements from `out`; each input from its pointer, contiguous or
 * one element repeated, as the microkernel's name says. stream: store past the caches. */
typedef void (*opgen_binary_function)(const void *first, const void *second, void *out, int64_t count, int stream);

typedef struct opgen_binary_kernel {
    /* both inputs contiguous; the first repeated; the second repeated */
    opgen_binary_function runs[3];
    int sizes[3];          /* bytes of an element: first input, second input, output */
    int work_per_element;  /* in plain-arithmetic units (an exp costs more) */
} opgen_binary_kernel;

/* The output of the inputs of shapes (rank_0, dims_0) and (rank_1, dims_1), which must
 * broadcast against each other (the op API checks it): rank max(rank_0, rank_1). */
void opgen_binary_run(const opgen_binary_kernel *kernel, const void *first, const void *second, void *out, int rank_0,
                      const int64_t *dims_0, int rank_1, const int64_t *dims_1);

#endif /* OPGEN_BINARY_H */
