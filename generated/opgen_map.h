/* The loop driver of the elementwise ops, and of broadcast_reduce's full form (hand-written;
 * opgen copies it into every build that has one).
 *
 * A call is `count` elements, each output element computed from the input elements at its
 * index. The op's math comes as two microkernels generated from its spec (one set per dtype
 * combination and target):
 *   blocks    whole blocks of OPGEN_BLOCK elements from index `first` up to `last` (a whole
 *             number of blocks apart), through the outputs' line writers where the dtype
 *             table names them;
 *   elements  elements [first, last) one by one.
 * The blocks start at the first output's next cache line (NumPy's large arrays start 16
 * bytes past one, and a block across two lines costs up to three times as much in cache),
 * except where a block's inputs choose its path (`from_zero`: float_first kernels), whose
 * last bits must not depend on where the arrays lie. The driver splits the blocks among the
 * threads in contiguous shares; an element's result never depends on the thread count. */
#ifndef OPGEN_MAP_H
#define OPGEN_MAP_H

#include <stdint.h>

#include "opgen_internal.h"

typedef struct opgen_map_call {
    void *const *tensors;  /* the kernel's arrays in its parameter order: inputs, then outputs */
    const float *numbers;  /* the f32 attributes the math reads, in the kernel's order */
    int64_t count;
    int stream;            /* set by the driver: outputs bigger than the caches go past them */
} opgen_map_call;

typedef void (*opgen_map_function)(const opgen_map_call *call, int64_t first, int64_t last);

typedef struct opgen_map_kernel {
    int64_t element_bytes;    /* bytes an element moves, all operands */
    int work_per_element;     /* in plain-arithmetic units (an exp costs more) */
    int from_zero;            /* blocks from element 0, not from the lead output's line */
    int lead;                 /* the index in `tensors` of the first output */
    int64_t lead_size;        /* its element's bytes */
    opgen_map_function blocks;
    opgen_map_function elements;
} opgen_map_kernel;

void opgen_map_run(const opgen_map_kernel *kernel, const opgen_map_call *call);

#endif /* OPGEN_MAP_H */
