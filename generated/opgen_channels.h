/* The loop driver of the broadcast_reduce ops (hand-written; opgen copies it into every build
 * that has one).
 *
 * A call is a tensor seen as [outer][channels][inner] (form ncx) or [outer][channels] (form
 * nxc, inner 1), with one operand indexed by the channel: elementwise outputs, and sums of
 * per-element terms into the channel's shape. The driver picks the threads, the tiles and
 * whether stores stream; the op's math comes as microkernels generated from its spec (one set
 * per dtype combination and target), each of which computes one tile:
 *   units   (ncx) (row, channel) units [unit_first, unit_last), inner elements [inner_first,
 *           inner_last) of each, their terms added to `partial` (sum s of channel c at
 *           partial[s * channels + c]);
 *   rows    (nxc) rows [row_first, row_last), every channel, added to `partial` likewise;
 *   range   (nxc, few rows of many channels) every row, channels [first, last), summed in
 *           `share` (the calling thread's, `span` doubles a sum) and finished there;
 *   finish  the sums of channels [first, last) (sum s of channel c at sums[s * stride + c -
 *           first]) rounded into the channel outputs, or added to the caller's *_sums arrays.
 * Tiles are fixed by the shape alone and their partial sums added up in tile order; a range's
 * channels are summed by one thread: the sums never depend on the thread count. */
#ifndef OPGEN_CHANNELS_H
#define OPGEN_CHANNELS_H

#include <stdint.h>

#include "opgen_internal.h"

typedef struct opgen_channels_call {
    void *const *tensors;    /* the kernel's arrays in its parameter order: inputs, then outputs */
    double *const *sums_into; /* per sum: the caller's array its channels are added to, or NULL */
    int64_t outer;
    int64_t channels;
    int64_t inner;           /* 1 in form nxc */
    double *workspace;       /* the kernel's <name>_workspace_size() doubles */
    int stream;              /* set by the driver: outputs bigger than the caches go past them */
} opgen_channels_call;

typedef void (*opgen_channels_units_function)(const opgen_channels_call *call, int64_t unit_first, int64_t unit_last,
                                              int64_t inner_first, int64_t inner_last, double *partial);
typedef void (*opgen_channels_rows_function)(const opgen_channels_call *call, int64_t row_first, int64_t row_last,
                                             double *partial);
typedef void (*opgen_channels_range_function)(const opgen_channels_call *call, int64_t first, int64_t last,
                                              int64_t blocks_first, double *share, int64_t span);
typedef void (*opgen_channels_finish_function)(const opgen_channels_call *call, int64_t first, int64_t last,
                                               const double *sums, int64_t stride);

typedef struct opgen_channels_kernel {
    int sum_count;
    int float_sum_count;       /* sums that go through float runs first (their share in a range) */
    int64_t element_bytes;     /* bytes an element of the tensor operands moves, all of them */
    int work_per_element;      /* in plain-arithmetic units (an exp costs more) */
    int64_t segment;           /* nxc: channels of the longest row the tiles of rows take */
    int line_output;           /* nxc: the index in `tensors` of the array the ranges align to */
    int64_t line_output_size;  /* its element's bytes */
    opgen_channels_units_function units; /* form ncx; NULL in form nxc */
    opgen_channels_rows_function rows;   /* form nxc */
    opgen_channels_range_function range; /* form nxc */
    opgen_channels_finish_function finish;
} opgen_channels_kernel;

void opgen_channels_run(const opgen_channels_kernel *kernel, const opgen_channels_call *call);
/* Doubles of workspace a call of a kernel with these fields needs (its <name>_workspace_size);
 * `inner` is 1 in form nxc. */
int64_t opgen_channels_workspace(int ncx, int sum_count, int float_sum_count, int64_t segment, int64_t outer,
                                 int64_t channels, int64_t inner);

#endif /* OPGEN_CHANNELS_H */
