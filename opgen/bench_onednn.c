/* `opgen bench --compare onednn`: one cell of the comparison, timed in C.
 *
 * A cell is one op, dtype, layout, form, shape and thread count (the ops with axes run along
 * the last of the shape's four dims: SoftMax and LogSoftmax forward and backward, LayerNorm
 * forward and backward over it). Its input buffers are allocated and filled once; opgen's op
 * API (opgen_<op>_with_workspace, its workspace allocated once) and the equivalent oneDNN
 * primitive (user scratchpad, allocated once) read the same inputs and write outputs of
 * their own. Both run once and their outputs are
 * compared (largest |opgen - oneDNN| over the largest |oneDNN|, per output); only a cell
 * within the caller's tolerance is timed: rounds of calls, each side in turn (the first side
 * alternating), a round's batch of calls lasting at least round_seconds; per side, the median
 * over rounds of a batch's mean time per call.
 *
 * Built by opgen/bench_onednn.py as a shared library against the generated opgen.h and an
 * installed oneDNN (libdnnl, its OpenMP build). opgen's functions come as addresses from the
 * loaded opgen module, so the kernels timed are the ones `import opgen` runs.
 */
#define _POSIX_C_SOURCE 200112L

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "oneapi/dnnl/dnnl.h"
#include "opgen.h"

enum {
    OP_RELU,
    OP_HARD_SIGMOID,
    OP_SIGMOID,
    OP_TANH,
    OP_PRELU,
    OP_BATCH_NORM,
    OP_SOFT_MAX,
    OP_LOG_SOFT_MAX,
    OP_SOFT_MAX_BACKWARD,
    OP_LOG_SOFT_MAX_BACKWARD,
    OP_LAYER_NORM,
    OP_LAYER_NORM_BACKWARD
};
enum { FROM_DST = 0, FROM_SRC = 1 };                           /* relu, sigmoid, tanh */
enum { PER_CHANNEL = 0, PER_TENSOR = 1, FULL = 2 };            /* prelu's slope */
enum { TIMED = 0, REFUSED = 1, FAILED = 2, MISMATCH = 3 };     /* result status */

typedef struct bench_cell {
    int op, dtype, layout, form; /* dtype: opgen_dtype; layout: opgen_data_format */
    int64_t dims[4];             /* N, C, H, W */
    int threads, rounds;
    double round_seconds, tolerance;
    float alpha, beta, epsilon; /* hard_sigmoid's alpha and beta; batch and layer norm's epsilon */
    uint64_t seed;
    uintptr_t opgen_workspace_size, opgen_run; /* opgen_<op>_workspace_size, opgen_<op>_with_workspace */
    uintptr_t opgen_last_error;
} bench_cell;

typedef struct bench_result {
    int status;
    int opgen_calls, onednn_calls; /* calls per round */
    double opgen_seconds, onednn_seconds, error;
    char implementation[64]; /* oneDNN's implementation of the primitive */
    char message[256];
} bench_result;

int bench_onednn_cell(const bench_cell *cell, bench_result *result);
void bench_onednn_version(int *version);

/* opgen's op API, by signature (the casts below turn the addresses into these) */
typedef const char *(*last_error)(void);
typedef opgen_status (*use_dst_size)(const opgen_tensor *, const opgen_tensor *, const opgen_tensor *, int, size_t *);
typedef opgen_status (*use_dst_run)(const opgen_tensor *, const opgen_tensor *, const opgen_tensor *, int, void *,
                                    size_t);
typedef opgen_status (*alpha_beta_size)(const opgen_tensor *, const opgen_tensor *, const opgen_tensor *, float, float,
                                        size_t *);
typedef opgen_status (*alpha_beta_run)(const opgen_tensor *, const opgen_tensor *, const opgen_tensor *, float, float,
                                       void *, size_t);
typedef opgen_status (*prelu_size)(const opgen_tensor *, const opgen_tensor *, const opgen_tensor *,
                                   const opgen_tensor *, const opgen_tensor *, opgen_data_format, size_t *);
typedef opgen_status (*prelu_run)(const opgen_tensor *, const opgen_tensor *, const opgen_tensor *,
                                  const opgen_tensor *, const opgen_tensor *, opgen_data_format, void *, size_t);
typedef opgen_status (*norm_size)(const opgen_tensor *, const opgen_tensor *, const opgen_tensor *,
                                  const opgen_tensor *, const opgen_tensor *, const opgen_tensor *,
                                  const opgen_tensor *, const opgen_tensor *, float, opgen_data_format, size_t *);
typedef opgen_status (*norm_run)(const opgen_tensor *, const opgen_tensor *, const opgen_tensor *,
                                 const opgen_tensor *, const opgen_tensor *, const opgen_tensor *,
                                 const opgen_tensor *, const opgen_tensor *, float, opgen_data_format, void *, size_t);
typedef opgen_status (*axis_size)(const opgen_tensor *, const opgen_tensor *, int64_t, size_t *);
typedef opgen_status (*axis_run)(const opgen_tensor *, const opgen_tensor *, int64_t, void *, size_t);
typedef opgen_status (*axis_backward_size)(const opgen_tensor *, const opgen_tensor *, const opgen_tensor *, int64_t,
                                           size_t *);
typedef opgen_status (*axis_backward_run)(const opgen_tensor *, const opgen_tensor *, const opgen_tensor *, int64_t,
                                          void *, size_t);
typedef opgen_status (*layer_norm_size)(const opgen_tensor *, const opgen_tensor *, const opgen_tensor *,
                                        const opgen_tensor *, const opgen_tensor *, const opgen_tensor *, int64_t,
                                        float, size_t *);
typedef opgen_status (*layer_norm_run)(const opgen_tensor *, const opgen_tensor *, const opgen_tensor *,
                                       const opgen_tensor *, const opgen_tensor *, const opgen_tensor *, int64_t, float,
                                       void *, size_t);
typedef opgen_status (*layer_norm_backward_size)(const opgen_tensor *, const opgen_tensor *, const opgen_tensor *,
                                                 const opgen_tensor *, const opgen_tensor *, const opgen_tensor *,
                                                 const opgen_tensor *, const opgen_tensor *, int64_t, float, size_t *);
typedef opgen_status (*layer_norm_backward_run)(const opgen_tensor *, const opgen_tensor *, const opgen_tensor *,
                                                const opgen_tensor *, const opgen_tensor *, const opgen_tensor *,
                                                const opgen_tensor *, const opgen_tensor *, int64_t, float, void *,
                                                size_t);

/* opgen.h's declarations against those types: a mismatch is a compiler diagnostic (unevaluated) */
enum {
    SIGNATURES_CHECKED = sizeof(&opgen_last_error == (last_error)0)
        + sizeof(&opgen_relu_backward_with_workspace == (use_dst_run)0)
        + sizeof(&opgen_relu_backward_workspace_size == (use_dst_size)0)
        + sizeof(&opgen_sigmoid_backward_with_workspace == (use_dst_run)0)
        + sizeof(&opgen_tanh_backward_with_workspace == (use_dst_run)0)
        + sizeof(&opgen_hard_sigmoid_backward_with_workspace == (alpha_beta_run)0)
        + sizeof(&opgen_hard_sigmoid_backward_workspace_size == (alpha_beta_size)0)
        + sizeof(&opgen_prelu_backward_with_workspace == (prelu_run)0)
        + sizeof(&opgen_prelu_backward_workspace_size == (prelu_size)0)
        + sizeof(&opgen_batch_norm_training_backward_with_workspace == (norm_run)0)
        + sizeof(&opgen_batch_norm_training_backward_workspace_size == (norm_size)0)
        + sizeof(&opgen_soft_max_with_workspace == (axis_run)0)
        + sizeof(&opgen_soft_max_workspace_size == (axis_size)0)
        + sizeof(&opgen_log_soft_max_with_workspace == (axis_run)0)
        + sizeof(&opgen_soft_max_backward_with_workspace == (axis_backward_run)0)
        + sizeof(&opgen_soft_max_backward_workspace_size == (axis_backward_size)0)
        + sizeof(&opgen_log_soft_max_backward_with_workspace == (axis_backward_run)0)
        + sizeof(&opgen_layer_norm_with_workspace == (layer_norm_run)0)
        + sizeof(&opgen_layer_norm_workspace_size == (layer_norm_size)0)
        + sizeof(&opgen_layer_norm_backward_with_workspace == (layer_norm_backward_run)0)
        + sizeof(&opgen_layer_norm_backward_workspace_size == (layer_norm_backward_size)0)
};

/* ---- data ---- */

static uint64_t next_random(uint64_t *state) /* splitmix64 */
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float uniform(uint64_t *state, float low, float high) /* in [low, high) */
{
    return low + (high - low) * (float)((double)(next_random(state) >> 40) / (double)(1ull << 24));
}

static uint32_t float_bits(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

static float bits_float(uint32_t bits)
{
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

static uint16_t to_bf16(float value) /* round to nearest even; the values here are finite */
{
    const uint32_t bits = float_bits(value);
    return (uint16_t)((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

static uint16_t to_f16(float value) /* round to nearest even; |value| < 65504; below 2^-14 to zero */
{
    const uint32_t bits = float_bits(value);
    const uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    const int exponent = (int)((bits >> 23) & 0xFFu) - 127 + 15;
    if (exponent <= 0) {
        return sign;
    }
    const uint32_t mantissa = bits & 0x7FFFFFu;
    uint32_t half = ((uint32_t)exponent << 10) | (mantissa >> 13);
    const uint32_t rest = mantissa & 0x1FFFu;
    half += rest > 0x1000u || (rest == 0x1000u && (half & 1u)); /* a carry into the exponent is right */
    return (uint16_t)(sign | half);
}

static float from_f16(uint16_t half) /* exact, every f16 value */
{
    const uint32_t sign = (uint32_t)(half & 0x8000u) << 16;
    const uint32_t exponent = (half >> 10) & 0x1Fu, mantissa = half & 0x3FFu;
    if (exponent == 0) {
        const float magnitude = (float)mantissa * 0x1p-24f;
        return sign ? -magnitude : magnitude;
    }
    if (exponent == 31) {
        return bits_float(sign | 0x7F800000u | (mantissa << 13));
    }
    return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

static size_t dtype_size(int dtype)
{
    return dtype == OPGEN_F32 ? 4 : 2;
}

static float load(const void *data, int dtype, int64_t i)
{
    if (dtype == OPGEN_F32) {
        return ((const float *)data)[i];
    }
    const uint16_t bits = ((const uint16_t *)data)[i];
    return dtype == OPGEN_BF16 ? bits_float((uint32_t)bits << 16) : from_f16(bits);
}

static void fill(void *data, int dtype, int64_t count, uint64_t *state, float low, float high)
{
    for (int64_t i = 0; i < count; i++) {
        const float value = uniform(state, low, high);
        if (dtype == OPGEN_F32) {
            ((float *)data)[i] = value;
        } else {
            ((uint16_t *)data)[i] = dtype == OPGEN_BF16 ? to_bf16(value) : to_f16(value);
        }
    }
}

/* max |a - b| / max |b| over `count` elements (infinite where either holds a NaN) */
static double difference(const void *a, const void *b, int dtype, int64_t count)
{
    double largest_difference = 0.0, largest = 0.0;
    for (int64_t i = 0; i < count; i++) {
        const double x = load(a, dtype, i), y = load(b, dtype, i);
        if (x != x || y != y) {
            return INFINITY;
        }
        largest_difference = fmax(largest_difference, fabs(x - y));
        largest = fmax(largest, fabs(y));
    }
    return largest_difference == 0.0 ? 0.0 : largest_difference / fmax(largest, DBL_MIN);
}

static double now(void)
{
    struct timespec time;
    clock_gettime(CLOCK_MONOTONIC, &time);
    return (double)time.tv_sec + 1e-9 * (double)time.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- one cell ---- */

#define MAX_BUFFERS 16
#define MAX_ARGS 12

typedef struct cell_state {
    const bench_cell *cell;
    bench_result *result;
    int64_t n, c, h, w, count;
    size_t bytes;      /* of one tensor */
    int64_t dims[4];   /* opgen's dims of a tensor: N, C, H, W (NCX) or N, H, W, C (NXC) */
    uint64_t random;   /* the data's random state */
    /* opgen's call */
    opgen_tensor tensors[8];
    int use_dst;
    void *workspace;
    size_t workspace_size;
    /* oneDNN's */
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_primitive_attr_t attr;
    dnnl_memory_desc_t descs[3]; /* a tensor's; the weights', a channel vector's or the lines' statistics'; the
                                  * along vectors' (layer norm's gamma and beta) */
    dnnl_primitive_desc_t forward, timed; /* timed: the primitive compared (forward is its hint) */
    dnnl_primitive_t primitive;
    dnnl_memory_t memories[MAX_ARGS];
    dnnl_exec_arg_t args[MAX_ARGS];
    int nargs;
    /* the outputs compared: opgen's at i, oneDNN's at i + output_count */
    void *outputs[6];
    int64_t output_counts[3];
    int output_dtypes[3], output_count;
    void *owned[MAX_BUFFERS];
    int owned_count;
} cell_state;

#define TRY(step)                          \
    do {                                   \
        const int step_status_ = (step);   \
        if (step_status_ != TIMED) {       \
            return step_status_;           \
        }                                  \
    } while (0)

static int fail(cell_state *st, int status, const char *format, ...)
{
    va_list arguments;
    va_start(arguments, format);
    st->result->status = status;
    vsnprintf(st->result->message, sizeof st->result->message, format, arguments);
    va_end(arguments);
    return status;
}

static int onednn(cell_state *st, dnnl_status_t status, const char *call)
{
    return status == dnnl_success ? TIMED : fail(st, FAILED, "oneDNN: %s: status %d", call, (int)status);
}

static const char *dtype_name(int dtype)
{
    return dtype == OPGEN_F32 ? "f32" : dtype == OPGEN_BF16 ? "bf16" : "f16";
}

/* a primitive descriptor oneDNN may not implement for this dtype, layout or CPU */
static int onednn_descriptor(cell_state *st, dnnl_status_t status, const char *what)
{
    if (status == dnnl_unimplemented) {
        return fail(st, REFUSED, "oneDNN has no %s %s on this CPU", dtype_name(st->cell->dtype), what);
    }
    return onednn(st, status, what);
}

static void *buffer(cell_state *st, size_t bytes) /* 64-byte aligned, zeroed (its pages touched); NULL: none left */
{
    void *data = NULL;
    if (st->owned_count == MAX_BUFFERS || posix_memalign(&data, 64, bytes ? bytes : 64) != 0) {
        return NULL;
    }
    memset(data, 0, bytes);
    st->owned[st->owned_count++] = data;
    return data;
}

static int buffers(cell_state *st, int count, void **data, const size_t *bytes)
{
    for (int i = 0; i < count; i++) {
        if (!(data[i] = buffer(st, bytes[i]))) {
            return fail(st, FAILED, "out of memory");
        }
    }
    return TIMED;
}

static int argument(cell_state *st, int number, const_dnnl_memory_desc_t desc, void *data)
{
    TRY(onednn(st, dnnl_memory_create(&st->memories[st->nargs], desc, st->engine, data), "dnnl_memory_create"));
    st->args[st->nargs] = (dnnl_exec_arg_t){number, st->memories[st->nargs]};
    st->nargs++;
    return TIMED;
}

static dnnl_data_type_t onednn_dtype(int dtype)
{
    return dtype == OPGEN_F32 ? dnnl_f32 : dtype == OPGEN_BF16 ? dnnl_bf16 : dnnl_f16;
}

static void set_tensor(opgen_tensor *tensor, void *data, int dtype, int rank, const int64_t *dims)
{
    memset(tensor, 0, sizeof *tensor);
    tensor->data = data;
    tensor->dtype = (opgen_dtype)dtype;
    tensor->rank = rank;
    for (int i = 0; i < rank; i++) {
        tensor->dims[i] = dims[i];
    }
}

/* ReLU, HardSigmoid, sigmoid, tanh: oneDNN's eltwise backward */
static int setup_eltwise(cell_state *st)
{
    const bench_cell *cell = st->cell;
    const int from_dst = cell->op != OP_HARD_SIGMOID && cell->form == FROM_DST;
    static const dnnl_alg_kind_t kinds[3][2] = {
        {dnnl_eltwise_relu_use_dst_for_bwd, dnnl_eltwise_relu},
        {dnnl_eltwise_logistic_use_dst_for_bwd, dnnl_eltwise_logistic},
        {dnnl_eltwise_tanh_use_dst_for_bwd, dnnl_eltwise_tanh},
    };
    const int hard = cell->op == OP_HARD_SIGMOID;
    const dnnl_alg_kind_t algorithm =
        hard ? dnnl_eltwise_hardsigmoid : kinds[cell->op == OP_RELU ? 0 : cell->op == OP_SIGMOID ? 1 : 2][!from_dst];
    const float alpha = hard ? cell->alpha : 0.0f, beta = hard ? cell->beta : 0.0f;
    const dnnl_memory_desc_t data = st->descs[0];
    TRY(onednn_descriptor(st,
                          dnnl_eltwise_forward_primitive_desc_create(&st->forward, st->engine, dnnl_forward_training,
                                                                     algorithm, data, data, alpha, beta, NULL),
                          "eltwise (forward)"));
    TRY(onednn_descriptor(st,
                          dnnl_eltwise_backward_primitive_desc_create(&st->timed, st->engine, algorithm, data, data,
                                                                      data, alpha, beta, st->forward, st->attr),
                          "eltwise (backward)"));

    void *b[4]; /* src or dst, diff_dst, opgen's diff_src, oneDNN's */
    const size_t bytes[4] = {st->bytes, st->bytes, st->bytes, st->bytes};
    TRY(buffers(st, 4, b, bytes));
    float low = -1.0f, high = 1.0f; /* ReLU; tanh's dst */
    if (hard) {
        low = -4.0f, high = 4.0f; /* both sides of 0 < alpha * x + beta < 1 */
    } else if (cell->op == OP_SIGMOID) {
        low = from_dst ? 0.0f : -6.0f, high = from_dst ? 1.0f : 6.0f;
    } else if (cell->op == OP_TANH && !from_dst) {
        low = -4.0f, high = 4.0f;
    }
    fill(b[0], cell->dtype, st->count, &st->random, low, high);
    fill(b[1], cell->dtype, st->count, &st->random, -1.0f, 1.0f);
    const int64_t logical[4] = {st->n, st->c, st->h, st->w}; /* elementwise: any layout */
    for (int i = 0; i < 3; i++) {
        set_tensor(&st->tensors[i], b[i], cell->dtype, 4, logical);
    }
    st->use_dst = from_dst;
    TRY(argument(st, from_dst ? DNNL_ARG_DST : DNNL_ARG_SRC, data, b[0]));
    TRY(argument(st, DNNL_ARG_DIFF_DST, data, b[1]));
    TRY(argument(st, DNNL_ARG_DIFF_SRC, data, b[3]));
    st->outputs[0] = b[2], st->outputs[1] = b[3];
    st->output_counts[0] = st->count, st->output_dtypes[0] = cell->dtype, st->output_count = 1;
    return TIMED;
}

/* PReLU: oneDNN's prelu backward, its weights of src's rank (dims of size 1 broadcast) */
static int setup_prelu(cell_state *st)
{
    const bench_cell *cell = st->cell;
    const int64_t c = st->c, h = st->h, w = st->w;
    const int64_t slope_count = cell->form == PER_CHANNEL ? c : cell->form == PER_TENSOR ? 1 : c * h * w;
    const dnnl_dims_t weight_dims = {1, cell->form == PER_TENSOR ? 1 : c, cell->form == FULL ? h : 1,
                                     cell->form == FULL ? w : 1};
    const dnnl_format_tag_t tag = cell->layout == OPGEN_DATA_FORMAT_NCX ? dnnl_nchw : dnnl_nhwc;
    TRY(onednn(st, dnnl_memory_desc_create_with_tag(&st->descs[1], 4, weight_dims, onednn_dtype(cell->dtype), tag),
               "dnnl_memory_desc_create_with_tag"));
    const dnnl_memory_desc_t data = st->descs[0], weights = st->descs[1];
    TRY(onednn_descriptor(st,
                          dnnl_prelu_forward_primitive_desc_create(&st->forward, st->engine, dnnl_forward_training,
                                                                   data, weights, data, NULL),
                          "prelu (forward)"));
    TRY(onednn_descriptor(st,
                          dnnl_prelu_backward_primitive_desc_create(&st->timed, st->engine, data, weights, data,
                                                                    weights, data, st->forward, st->attr),
                          "prelu (backward)"));

    void *b[7]; /* src, slope, diff_dst, opgen's diff_src and diff_slope, oneDNN's */
    const size_t slope_bytes = (size_t)slope_count * dtype_size(cell->dtype);
    const size_t bytes[7] = {st->bytes, slope_bytes, st->bytes, st->bytes, slope_bytes, st->bytes, slope_bytes};
    TRY(buffers(st, 7, b, bytes));
    fill(b[0], cell->dtype, st->count, &st->random, -1.0f, 1.0f);
    fill(b[1], cell->dtype, slope_count, &st->random, 0.0f, 0.5f);
    fill(b[2], cell->dtype, st->count, &st->random, -1.0f, 1.0f);
    /* opgen's slope: [C] per channel, [1] per tensor, src's dims without N (full) */
    const int64_t one = 1;
    const int slope_rank = cell->form == FULL ? 3 : 1;
    const int64_t *slope_dims = cell->form == PER_CHANNEL ? &st->c : cell->form == PER_TENSOR ? &one : st->dims + 1;
    for (int i = 0; i < 5; i++) {
        const int slope = i == 1 || i == 4;
        set_tensor(&st->tensors[i], b[i], cell->dtype, slope ? slope_rank : 4, slope ? slope_dims : st->dims);
    }
    TRY(argument(st, DNNL_ARG_SRC, data, b[0]));
    TRY(argument(st, DNNL_ARG_WEIGHTS, weights, b[1]));
    TRY(argument(st, DNNL_ARG_DIFF_DST, data, b[2]));
    TRY(argument(st, DNNL_ARG_DIFF_SRC, data, b[5]));
    TRY(argument(st, DNNL_ARG_DIFF_WEIGHTS, weights, b[6]));
    st->outputs[0] = b[3], st->outputs[1] = b[4], st->outputs[2] = b[5], st->outputs[3] = b[6];
    st->output_counts[0] = st->count, st->output_counts[1] = slope_count;
    st->output_dtypes[0] = st->output_dtypes[1] = cell->dtype;
    st->output_count = 2;
    return TIMED;
}

/* BatchNorm: oneDNN's batch normalization backward with scale and shift (diff_gamma, diff_beta) */
static int setup_norm(cell_state *st)
{
    const bench_cell *cell = st->cell;
    const dnnl_dims_t channel_dims = {st->c};
    TRY(onednn(st, dnnl_memory_desc_create_with_tag(&st->descs[1], 1, channel_dims, dnnl_f32, dnnl_a),
               "dnnl_memory_desc_create_with_tag"));
    const dnnl_memory_desc_t data = st->descs[0], channel = st->descs[1];
    const unsigned flags = dnnl_use_scale | dnnl_use_shift;
    TRY(onednn_descriptor(st,
                          dnnl_batch_normalization_forward_primitive_desc_create(
                              &st->forward, st->engine, dnnl_forward_training, data, data, cell->epsilon, flags, NULL),
                          "batch normalization (forward)"));
    TRY(onednn_descriptor(st,
                          dnnl_batch_normalization_backward_primitive_desc_create(
                              &st->timed, st->engine, dnnl_backward, data, data, data, cell->epsilon, flags,
                              st->forward, st->attr),
                          "batch normalization (backward)"));

    /* src, diff_dst, mean, variance, gamma; opgen's diff_src, diff_gamma, diff_beta; oneDNN's */
    void *b[11];
    const size_t t = st->bytes, v = (size_t)st->c * sizeof(float);
    const size_t bytes[11] = {t, t, v, v, v, t, v, v, t, v, v};
    TRY(buffers(st, 11, b, bytes));
    fill(b[0], cell->dtype, st->count, &st->random, -2.0f, 2.0f);
    fill(b[1], cell->dtype, st->count, &st->random, -1.0f, 1.0f);
    fill(b[2], OPGEN_F32, st->c, &st->random, -0.5f, 0.5f);
    fill(b[3], OPGEN_F32, st->c, &st->random, 0.5f, 1.5f);
    fill(b[4], OPGEN_F32, st->c, &st->random, -1.0f, 1.0f);
    for (int i = 0; i < 8; i++) {
        const int tensor = i == 0 || i == 1 || i == 5;
        set_tensor(&st->tensors[i], b[i], tensor ? cell->dtype : OPGEN_F32, tensor ? 4 : 1, tensor ? st->dims : &st->c);
    }
    /* no DNNL_ARG_SHIFT: the gradient does not read it, and oneDNN refuses an argument it does not read */
    TRY(argument(st, DNNL_ARG_SRC, data, b[0]));
    TRY(argument(st, DNNL_ARG_DIFF_DST, data, b[1]));
    TRY(argument(st, DNNL_ARG_MEAN, channel, b[2]));
    TRY(argument(st, DNNL_ARG_VARIANCE, channel, b[3]));
    TRY(argument(st, DNNL_ARG_SCALE, channel, b[4]));
    TRY(argument(st, DNNL_ARG_DIFF_SRC, data, b[8]));
    TRY(argument(st, DNNL_ARG_DIFF_SCALE, channel, b[9]));
    TRY(argument(st, DNNL_ARG_DIFF_SHIFT, channel, b[10]));
    for (int i = 0; i < 6; i++) {
        st->outputs[i] = b[5 + i];
    }
    st->output_counts[0] = st->count, st->output_counts[1] = st->output_counts[2] = st->c;
    st->output_dtypes[0] = cell->dtype, st->output_dtypes[1] = st->output_dtypes[2] = OPGEN_F32;
    st->output_count = 3;
    return TIMED;
}

/* SoftMax and LogSoftmax, forward (oneDNN's inference kind: no workspace) or backward, along
 * the last dim */
static int setup_softmax(cell_state *st)
{
    const bench_cell *cell = st->cell;
    const int log = cell->op == OP_LOG_SOFT_MAX || cell->op == OP_LOG_SOFT_MAX_BACKWARD;
    const int backward = cell->op == OP_SOFT_MAX_BACKWARD || cell->op == OP_LOG_SOFT_MAX_BACKWARD;
    const dnnl_alg_kind_t algorithm = log ? dnnl_softmax_log : dnnl_softmax_accurate;
    const dnnl_memory_desc_t data = st->descs[0];
    TRY(onednn_descriptor(st,
                          dnnl_softmax_forward_primitive_desc_create(
                              backward ? &st->forward : &st->timed, st->engine,
                              backward ? dnnl_forward_training : dnnl_forward_inference, algorithm, data, data, 3,
                              backward ? NULL : st->attr),
                          "softmax (forward)"));
    if (backward) {
        TRY(onednn_descriptor(st,
                              dnnl_softmax_backward_primitive_desc_create(&st->timed, st->engine, algorithm, data,
                                                                          data, data, 3, st->forward, st->attr),
                              "softmax (backward)"));
    }
    void *b[4]; /* forward: src, opgen's dst, oneDNN's; backward: diff_dst, dst, opgen's diff_src, oneDNN's */
    const size_t bytes[4] = {st->bytes, st->bytes, st->bytes, st->bytes};
    TRY(buffers(st, 4, b, bytes));
    fill(b[0], cell->dtype, st->count, &st->random, -4.0f, 4.0f);
    if (backward) { /* dst as the forward op leaves it: probabilities, or their logs */
        fill(b[1], cell->dtype, st->count, &st->random, log ? -8.0f : 0.0f, log ? 0.0f : 2.0f / (float)st->w);
    }
    const int inputs = backward ? 2 : 1;
    for (int i = 0; i < inputs + 1; i++) {
        set_tensor(&st->tensors[i], b[i], cell->dtype, 4, st->dims);
    }
    if (backward) {
        TRY(argument(st, DNNL_ARG_DIFF_DST, data, b[0]));
        TRY(argument(st, DNNL_ARG_DST, data, b[1]));
        TRY(argument(st, DNNL_ARG_DIFF_SRC, data, b[3]));
    } else {
        TRY(argument(st, DNNL_ARG_SRC, data, b[0]));
        TRY(argument(st, DNNL_ARG_DST, data, b[3]));
    }
    st->outputs[0] = b[inputs], st->outputs[1] = b[3];
    st->output_counts[0] = st->count, st->output_dtypes[0] = cell->dtype, st->output_count = 1;
    return TIMED;
}

/* LayerNorm over the last dim, with gamma and beta (oneDNN's scale and shift): forward (dst,
 * mean, variance) or backward (diff_src, diff_gamma, diff_beta) */
static int setup_layer_norm(cell_state *st)
{
    const bench_cell *cell = st->cell;
    const int backward = cell->op == OP_LAYER_NORM_BACKWARD;
    const int64_t lines = st->n * st->c * st->h;
    const dnnl_dims_t line_dims = {st->n, st->c, st->h}, along_dims = {st->w};
    TRY(onednn(st, dnnl_memory_desc_create_with_tag(&st->descs[1], 3, line_dims, dnnl_f32, dnnl_abc),
               "dnnl_memory_desc_create_with_tag"));
    TRY(onednn(st, dnnl_memory_desc_create_with_tag(&st->descs[2], 1, along_dims, dnnl_f32, dnnl_a),
               "dnnl_memory_desc_create_with_tag"));
    const dnnl_memory_desc_t data = st->descs[0], stats = st->descs[1], along = st->descs[2];
    const unsigned flags = dnnl_use_scale | dnnl_use_shift;
    TRY(onednn_descriptor(st,
                          dnnl_layer_normalization_forward_primitive_desc_create(
                              backward ? &st->forward : &st->timed, st->engine, dnnl_forward_training, data, data,
                              stats, cell->epsilon, flags, backward ? NULL : st->attr),
                          "layer normalization (forward)"));
    if (backward) {
        TRY(onednn_descriptor(st,
                              dnnl_layer_normalization_backward_primitive_desc_create(
                                  &st->timed, st->engine, dnnl_backward, data, data, data, stats, cell->epsilon, flags,
                                  st->forward, st->attr),
                              "layer normalization (backward)"));
    }
    /* src, diff_dst, mean, variance, gamma, beta; opgen's three outputs; oneDNN's */
    void *b[12];
    const size_t t = st->bytes, l = (size_t)lines * sizeof(float), a = (size_t)st->w * sizeof(float);
    const size_t forward_bytes[12] = {t, t, l, l, a, a, t, l, l, t, l, l};
    const size_t backward_bytes[12] = {t, t, l, l, a, a, t, a, a, t, a, a};
    TRY(buffers(st, 12, b, backward ? backward_bytes : forward_bytes));
    fill(b[0], cell->dtype, st->count, &st->random, -2.0f, 2.0f);
    fill(b[1], cell->dtype, st->count, &st->random, -1.0f, 1.0f);
    fill(b[2], OPGEN_F32, lines, &st->random, -0.5f, 0.5f);
    fill(b[3], OPGEN_F32, lines, &st->random, 0.5f, 1.5f);
    fill(b[4], OPGEN_F32, st->w, &st->random, -1.0f, 1.0f);
    fill(b[5], OPGEN_F32, st->w, &st->random, -1.0f, 1.0f);
    const int64_t *line_shape = st->dims, *along_shape = st->dims + 3;
    /* opgen's operands in its call's order */
    static const int forward_order[6] = {0, 4, 5, 6, 7, 8}, backward_order[8] = {0, 1, 2, 3, 4, 6, 7, 8};
    const int *order = backward ? backward_order : forward_order;
    for (int i = 0; i < (backward ? 8 : 6); i++) {
        const int k = order[i];
        const int tensor = k == 0 || k == 1 || k == 6;
        const int per_line = k == 2 || k == 3 || (!backward && (k == 7 || k == 8));
        set_tensor(&st->tensors[i], b[k], tensor ? cell->dtype : OPGEN_F32, tensor ? 4 : per_line ? 3 : 1,
                   tensor || per_line ? line_shape : along_shape);
    }
    TRY(argument(st, DNNL_ARG_SRC, data, b[0]));
    TRY(argument(st, DNNL_ARG_SCALE, along, b[4]));
    TRY(argument(st, DNNL_ARG_SHIFT, along, b[5])); /* its backward refuses a call without (BatchNorm's with) */
    if (backward) {
        TRY(argument(st, DNNL_ARG_DIFF_DST, data, b[1]));
        TRY(argument(st, DNNL_ARG_MEAN, stats, b[2]));
        TRY(argument(st, DNNL_ARG_VARIANCE, stats, b[3]));
        TRY(argument(st, DNNL_ARG_DIFF_SRC, data, b[9]));
        TRY(argument(st, DNNL_ARG_DIFF_SCALE, along, b[10]));
        TRY(argument(st, DNNL_ARG_DIFF_SHIFT, along, b[11]));
    } else {
        TRY(argument(st, DNNL_ARG_DST, data, b[9]));
        TRY(argument(st, DNNL_ARG_MEAN, stats, b[10]));
        TRY(argument(st, DNNL_ARG_VARIANCE, stats, b[11]));
    }
    for (int i = 0; i < 6; i++) {
        st->outputs[i] = b[6 + i];
    }
    st->output_counts[0] = st->count, st->output_counts[1] = st->output_counts[2] = backward ? st->w : lines;
    st->output_dtypes[0] = cell->dtype, st->output_dtypes[1] = st->output_dtypes[2] = OPGEN_F32;
    st->output_count = 3;
    return TIMED;
}

static opgen_status run_opgen(const cell_state *st)
{
    const bench_cell *cell = st->cell;
    const opgen_tensor *t = st->tensors;
    const opgen_data_format format = (opgen_data_format)cell->layout;
    void *workspace = st->workspace;
    const size_t size = st->workspace_size;
    switch (cell->op) {
    case OP_RELU:
    case OP_SIGMOID:
    case OP_TANH:
        return ((use_dst_run)cell->opgen_run)(&t[0], &t[1], &t[2], st->use_dst, workspace, size);
    case OP_HARD_SIGMOID:
        return ((alpha_beta_run)cell->opgen_run)(&t[0], &t[1], &t[2], cell->alpha, cell->beta, workspace, size);
    case OP_PRELU:
        return ((prelu_run)cell->opgen_run)(&t[0], &t[1], &t[2], &t[3], &t[4], format, workspace, size);
    case OP_SOFT_MAX:
    case OP_LOG_SOFT_MAX:
        return ((axis_run)cell->opgen_run)(&t[0], &t[1], -1, workspace, size);
    case OP_SOFT_MAX_BACKWARD:
    case OP_LOG_SOFT_MAX_BACKWARD:
        return ((axis_backward_run)cell->opgen_run)(&t[0], &t[1], &t[2], -1, workspace, size);
    case OP_LAYER_NORM:
        return ((layer_norm_run)cell->opgen_run)(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], -1, cell->epsilon,
                                                 workspace, size);
    case OP_LAYER_NORM_BACKWARD:
        return ((layer_norm_backward_run)cell->opgen_run)(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], &t[7], -1,
                                                          cell->epsilon, workspace, size);
    default:
        return ((norm_run)cell->opgen_run)(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], &t[7], cell->epsilon,
                                           format, workspace, size);
    }
}

static opgen_status opgen_workspace(const cell_state *st, size_t *bytes)
{
    const bench_cell *cell = st->cell;
    const opgen_tensor *t = st->tensors;
    const opgen_data_format format = (opgen_data_format)cell->layout;
    const uintptr_t function = cell->opgen_workspace_size;
    switch (cell->op) {
    case OP_RELU:
    case OP_SIGMOID:
    case OP_TANH:
        return ((use_dst_size)function)(&t[0], &t[1], &t[2], st->use_dst, bytes);
    case OP_HARD_SIGMOID:
        return ((alpha_beta_size)function)(&t[0], &t[1], &t[2], cell->alpha, cell->beta, bytes);
    case OP_PRELU:
        return ((prelu_size)function)(&t[0], &t[1], &t[2], &t[3], &t[4], format, bytes);
    case OP_SOFT_MAX:
    case OP_LOG_SOFT_MAX:
        return ((axis_size)function)(&t[0], &t[1], -1, bytes);
    case OP_SOFT_MAX_BACKWARD:
    case OP_LOG_SOFT_MAX_BACKWARD:
        return ((axis_backward_size)function)(&t[0], &t[1], &t[2], -1, bytes);
    case OP_LAYER_NORM:
        return ((layer_norm_size)function)(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], -1, cell->epsilon, bytes);
    case OP_LAYER_NORM_BACKWARD:
        return ((layer_norm_backward_size)function)(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], &t[7], -1,
                                                    cell->epsilon, bytes);
    default:
        return ((norm_size)function)(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], &t[7], cell->epsilon, format,
                                     bytes);
    }
}

static dnnl_status_t run_onednn(const cell_state *st)
{
    const dnnl_status_t status = dnnl_primitive_execute(st->primitive, st->stream, st->nargs, st->args);
    return status == dnnl_success ? dnnl_stream_wait(st->stream) : status;
}

/* oneDNN's primitive and scratchpad, opgen's workspace: made once, before any call */
static int prepare(cell_state *st)
{
    const char *implementation = NULL;
    TRY(onednn(st, dnnl_primitive_desc_query(st->timed, dnnl_query_impl_info_str, 0, &implementation),
               "dnnl_primitive_desc_query"));
    snprintf(st->result->implementation, sizeof st->result->implementation, "%s",
             implementation ? implementation : "?");
    const_dnnl_memory_desc_t scratchpad = dnnl_primitive_desc_query_md(st->timed, dnnl_query_scratchpad_md, 0);
    const size_t scratchpad_bytes = scratchpad ? dnnl_memory_desc_get_size(scratchpad) : 0;
    if (scratchpad_bytes > 0) {
        void *scratch = NULL;
        TRY(buffers(st, 1, &scratch, &scratchpad_bytes));
        TRY(argument(st, DNNL_ARG_SCRATCHPAD, scratchpad, scratch));
    }
    TRY(onednn(st, dnnl_primitive_create(&st->primitive, st->timed), "dnnl_primitive_create"));
    const last_error error = (last_error)st->cell->opgen_last_error;
    if (opgen_workspace(st, &st->workspace_size) != OPGEN_SUCCESS) {
        return fail(st, FAILED, "opgen: %s", error());
    }
    if (st->workspace_size > 0) {
        TRY(buffers(st, 1, &st->workspace, &st->workspace_size));
    }
    return TIMED;
}

/* one call of each; the outputs within the cell's tolerance of each other */
static int compare(cell_state *st)
{
    if (run_opgen(st) != OPGEN_SUCCESS) {
        return fail(st, FAILED, "opgen: %s", ((last_error)st->cell->opgen_last_error)());
    }
    TRY(onednn(st, run_onednn(st), "dnnl_primitive_execute"));
    double error = 0.0;
    for (int i = 0; i < st->output_count; i++) {
        const void *mine = st->outputs[i], *theirs = st->outputs[i + st->output_count];
        error = fmax(error, difference(mine, theirs, st->output_dtypes[i], st->output_counts[i]));
    }
    st->result->error = error;
    if (!(error <= st->cell->tolerance)) {
        return fail(st, MISMATCH, "outputs differ: max |opgen - oneDNN| / max |oneDNN| = %.3g (tolerance %.3g)",
                    error, st->cell->tolerance);
    }
    return TIMED;
}

/* mean seconds per call of `calls` calls of one side (0: opgen, 1: oneDNN); negative on a failure */
static double batch(const cell_state *st, int which, int calls)
{
    const double start = now();
    for (int i = 0; i < calls; i++) {
        if (which == 0 ? run_opgen(st) != OPGEN_SUCCESS : run_onednn(st) != dnnl_success) {
            return -1.0;
        }
    }
    return (now() - start) / calls;
}

/* calls in a batch of at least `seconds`; negative on a failure */
static int calibrate(const cell_state *st, int which, double seconds)
{
    for (int calls = 1;; calls *= 2) {
        const double each = batch(st, which, calls);
        if (each < 0.0) {
            return -1;
        }
        if (each * calls >= seconds / 4 || calls >= (1 << 20)) {
            const double wanted = ceil(seconds / fmax(each, 1e-9));
            return wanted < 1.0 ? 1 : wanted > (double)(1 << 22) ? (1 << 22) : (int)wanted;
        }
    }
}

static double median(double *values, int count)
{
    qsort(values, (size_t)count, sizeof *values, by_value);
    return count % 2 ? values[count / 2] : 0.5 * (values[count / 2 - 1] + values[count / 2]);
}

/* rounds of a batch of each side in turn, the first side alternating; a side's median */
static int time_rounds(cell_state *st)
{
    bench_result *result = st->result;
    const int rounds = st->cell->rounds > 0 ? st->cell->rounds : 1;
    int calls[2] = {calibrate(st, 0, st->cell->round_seconds), calibrate(st, 1, st->cell->round_seconds)};
    if (calls[0] < 0 || calls[1] < 0) {
        return fail(st, FAILED, "a call failed while calibrating");
    }
    double *times = (double *)malloc(2 * (size_t)rounds * sizeof *times);
    if (!times) {
        return fail(st, FAILED, "out of memory");
    }
    for (int round = 0; round < rounds; round++) {
        for (int turn = 0; turn < 2; turn++) {
            const int which = (round + turn) % 2;
            const double each = batch(st, which, calls[which]);
            if (each < 0.0) {
                free(times);
                return fail(st, FAILED, "a %s call failed", which == 0 ? "opgen" : "oneDNN");
            }
            times[which * rounds + round] = each;
        }
    }
    result->opgen_calls = calls[0], result->onednn_calls = calls[1];
    result->opgen_seconds = median(times, rounds);
    result->onednn_seconds = median(times + rounds, rounds);
    free(times);
    return TIMED;
}

static int start(cell_state *st)
{
    const bench_cell *cell = st->cell;
    const dnnl_dims_t dims = {st->n, st->c, st->h, st->w}; /* oneDNN: logical order; the layout is the tag */
    const dnnl_format_tag_t tag = cell->layout == OPGEN_DATA_FORMAT_NCX ? dnnl_nchw : dnnl_nhwc;
    TRY(onednn(st, dnnl_engine_create(&st->engine, dnnl_cpu, 0), "dnnl_engine_create"));
    TRY(onednn(st, dnnl_stream_create(&st->stream, st->engine, dnnl_stream_default_flags), "dnnl_stream_create"));
    TRY(onednn(st, dnnl_primitive_attr_create(&st->attr), "dnnl_primitive_attr_create"));
    TRY(onednn(st, dnnl_primitive_attr_set_scratchpad_mode(st->attr, dnnl_scratchpad_mode_user),
               "dnnl_primitive_attr_set_scratchpad_mode"));
    TRY(onednn(st, dnnl_memory_desc_create_with_tag(&st->descs[0], 4, dims, onednn_dtype(cell->dtype), tag),
               "dnnl_memory_desc_create_with_tag"));
    switch (cell->op) {
    case OP_PRELU:
        return setup_prelu(st);
    case OP_BATCH_NORM:
        return setup_norm(st);
    case OP_SOFT_MAX:
    case OP_LOG_SOFT_MAX:
    case OP_SOFT_MAX_BACKWARD:
    case OP_LOG_SOFT_MAX_BACKWARD:
        return setup_softmax(st);
    case OP_LAYER_NORM:
    case OP_LAYER_NORM_BACKWARD:
        return setup_layer_norm(st);
    default:
        return setup_eltwise(st);
    }
}

static void release(cell_state *st)
{
    for (int i = 0; i < st->nargs; i++) {
        dnnl_memory_destroy(st->memories[i]);
    }
    if (st->primitive) {
        dnnl_primitive_destroy(st->primitive);
    }
    for (int i = 0; i < 3; i++) {
        if (st->descs[i]) {
            dnnl_memory_desc_destroy(st->descs[i]);
        }
    }
    if (st->timed) {
        dnnl_primitive_desc_destroy(st->timed);
    }
    if (st->forward) {
        dnnl_primitive_desc_destroy(st->forward);
    }
    if (st->attr) {
        dnnl_primitive_attr_destroy(st->attr);
    }
    if (st->stream) {
        dnnl_stream_destroy(st->stream);
    }
    if (st->engine) {
        dnnl_engine_destroy(st->engine);
    }
    for (int i = 0; i < st->owned_count; i++) {
        free(st->owned[i]);
    }
}

void bench_onednn_version(int *version)
{
    const dnnl_version_t *found = dnnl_version();
    version[0] = found->major;
    version[1] = found->minor;
    version[2] = found->patch;
}

int bench_onednn_cell(const bench_cell *cell, bench_result *result)
{
    cell_state st;
    memset(&st, 0, sizeof st);
    memset(result, 0, sizeof *result);
    st.cell = cell, st.result = result;
    st.n = cell->dims[0], st.c = cell->dims[1], st.h = cell->dims[2], st.w = cell->dims[3];
    st.count = st.n * st.c * st.h * st.w;
    st.bytes = (size_t)st.count * dtype_size(cell->dtype);
    const int ncx = cell->layout == OPGEN_DATA_FORMAT_NCX;
    st.dims[0] = st.n, st.dims[1] = ncx ? st.c : st.h, st.dims[2] = ncx ? st.h : st.w, st.dims[3] = ncx ? st.w : st.c;
    st.random = cell->seed;

    /* oneDNN's OpenMP build takes OpenMP's thread count, at creation and at each run */
    const int saved_threads = omp_get_max_threads();
    omp_set_num_threads(cell->threads);
    int status = start(&st);
    status = status == TIMED ? prepare(&st) : status;
    status = status == TIMED ? compare(&st) : status;
    status = status == TIMED ? time_rounds(&st) : status;
    result->status = status;
    release(&st);
    omp_set_num_threads(saved_threads);
    return status;
}
