/* The loop driver of the broadcast_reduce and reduce_then_apply ops (hand-written; opgen copies
 * it into every build that has one).
 *
 * broadcast_reduce (opgen_channels_run):
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
 * channels are summed by one thread: the sums never depend on the thread count. With fewer ncx
 * tiles than threads, each tile's channels are cut into parts (whole blocks), one a thread: a
 * channel's units still add to its partial sum in their order.
 *
 * reduce_then_apply (opgen_channels_run_twice): the same view; per-channel sums, then values of
 * each channel from them (and the channel outputs), then an element pass that reads those
 * values. Microkernels:
 *   channels (ncx) both passes over each channel of [first, last), back to back, so the second
 *           finds the channel in cache when it fits;
 *   sums    (nxc) rows [row_first, row_last), channels [first, last), their terms added to
 *           `partial` (in memory order across all channels where `in_order`);
 *   values  (nxc) channels [first, last): their outputs and values, from the workspace's sums;
 *   apply   (nxc) the element pass over channels [first, last) of steps [step_first,
 *           step_last) (a step is a row, or two rows where `paired`: see OPGEN_PAIRED_ROWS).
 * With few rows of many channels, each range of channels runs sums, values and apply in turn,
 * its values still in cache for its rows.
 * The workspace holds the sums and the values (sum_count + value_count doubles a channel), then
 * the partial sums of each tile of rows.
 *
 * Rows of few channels (nxc, both patterns; opgen_channels_tiled): C channels, not a whole
 * number of blocks, where L = lcm(C, OPGEN_BLOCK) is at most OPGEN_TILED_CHANNELS. Every row
 * would end in a tail, so the driver runs the microkernels on rows of L channels instead, L / C
 * rows at a time: channel v of such a row is channel v % C (`period`), the channel inputs tiled to
 * L values in the workspace, the sums of a channel's L / C copies folded in copy order. A
 * broadcast_reduce call's rows left over (fewer than L / C) run after, as they are;
 * reduce_then_apply tiles only a whole number of such rows. Which rows tile is fixed by the
 * shape: the sums' order never depends on the thread count. */
#ifndef OPGEN_CHANNELS_H
#define OPGEN_CHANNELS_H

#include <stdint.h>

#include "opgen_internal.h"

typedef struct opgen_channels_call {
    void *const *tensors;    /* the kernel's arrays in its parameter order: inputs, then outputs */
    double *const *sums_into; /* per sum: the caller's array its channels are added to, or NULL */
    int64_t outer;
    int64_t channels;
    int64_t inner;           /* 1 in form nxc; reduce_then_apply nxc: `repeat`, runs of as many
                              * channels that are one (an NCX tensor with short rows) */
    double *workspace;       /* the kernel's <name>_workspace_size() doubles */
    const float *numbers;    /* the f32 attributes the math reads, in the kernel's order */
    int stream;              /* set by the driver: outputs bigger than the caches go past them */
    int64_t period;          /* set by the driver: > 0, channel v is channel v % period, and
                              * `inner` counts its copies in a row (rows of few channels) */
} opgen_channels_call;

/* The kernel's operands, as in `tensors`: inputs, then outputs. */
typedef struct opgen_channels_operands {
    int count;
    int input_count;
    int64_t sizes[OPGEN_MAX_OPERANDS];  /* their elements' bytes */
    int by_channel[OPGEN_MAX_OPERANDS]; /* 1: indexed by channel (tiled rows copy such inputs) */
} opgen_channels_operands;

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
    opgen_channels_units_function units; /* form ncx; NULL in form nxc */
    opgen_channels_rows_function rows;   /* form nxc */
    opgen_channels_range_function range; /* form nxc */
    opgen_channels_finish_function finish;
    opgen_channels_operands operands;
} opgen_channels_kernel;

typedef void (*opgen_channels_sums_function)(const opgen_channels_call *call, int64_t row_first, int64_t row_last,
                                             int64_t first, int64_t last, int in_order, double *partial);
typedef void (*opgen_channels_span_function)(const opgen_channels_call *call, int64_t first, int64_t last);
/* channels [first, last) of the rows of steps [step_first, step_last); a step is two rows where `paired` */
typedef void (*opgen_channels_apply_function)(const opgen_channels_call *call, int64_t step_first, int64_t step_last,
                                              int64_t first, int64_t last, int paired);

typedef struct opgen_channels_twice_kernel {
    int sum_count;
    int value_count;           /* per-channel values the element pass reads */
    int64_t element_bytes;
    int work_per_element;
    int row_output;            /* nxc: the index in `tensors` of the tensor output */
    opgen_channels_span_function channels;   /* form ncx; NULL in form nxc */
    opgen_channels_sums_function sums;       /* form nxc */
    opgen_channels_span_function values;     /* form nxc */
    opgen_channels_apply_function apply;     /* form nxc */
    opgen_channels_operands operands;
} opgen_channels_twice_kernel;

void opgen_channels_run(const opgen_channels_kernel *kernel, const opgen_channels_call *call);
void opgen_channels_run_twice(const opgen_channels_twice_kernel *kernel, const opgen_channels_call *call);
/* Doubles of workspace a call of a kernel with these fields needs (its <name>_workspace_size);
 * form nxc reads no `inner`. `channel_operands`: how many operands are indexed by channel. */
int64_t opgen_channels_workspace(int ncx, int sum_count, int float_sum_count, int64_t segment, int channel_operands,
                                 int64_t outer, int64_t channels, int64_t inner);
/* The same for opgen_channels_run_twice (form nxc, `repeat` its `inner`; ncx needs none). */
int64_t opgen_channels_twice_workspace(int sum_count, int value_count, int channel_operands, int64_t outer,
                                       int64_t channels, int64_t repeat);

#endif /* OPGEN_CHANNELS_H */
