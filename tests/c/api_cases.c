/* The op API and the aclnn API under the sanitizers (tests/test_sanitizers.py links this into
 * its driver): every broadcast form, leading dims, short inner dims, empty tensors, strided
 * aclnn views and every failing check, on buffers of exactly the size each tensor needs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opgen.h"
#include "opgen_aclnn.h"

static unsigned api_state = 777u;

static int64_t elements(int rank, const int64_t *dims)
{
    int64_t count = 1;
    for (int d = 0; d < rank; ++d) {
        count *= dims[d];
    }
    return count;
}

static opgen_tensor make(opgen_dtype dtype, int rank, const int64_t *dims)
{
    opgen_tensor tensor;
    size_t bytes;
    memset(&tensor, 0, sizeof tensor);
    tensor.dtype = dtype;
    tensor.rank = rank;
    memcpy(tensor.dims, dims, (size_t)rank * sizeof *dims);
    bytes = (size_t)elements(rank, dims) * (dtype == OPGEN_F32 ? 4u : 2u);
    tensor.data = bytes ? malloc(bytes) : NULL;
    for (size_t i = 0; i < bytes; ++i) {
        api_state = api_state * 1103515245u + 12345u;
        ((unsigned char *)tensor.data)[i] = (unsigned char)(api_state >> 16);
    }
    return tensor;
}

static void expect(const char *what, int status, int wanted)
{
    if (status != wanted) {
        fprintf(stderr, "%s: status %d, expected %d: %s\n", what, status, wanted, opgen_last_error());
        exit(1);
    }
}

static void prelu_case(opgen_dtype dtype, int rank, const int64_t *dims, int slope_rank, const int64_t *slope_dims,
                       opgen_data_format format, int wanted)
{
    opgen_tensor src = make(dtype, rank, dims), diff_dst = make(dtype, rank, dims), diff_src = make(dtype, rank, dims);
    opgen_tensor slope = make(dtype, slope_rank, slope_dims), diff_slope = make(dtype, slope_rank, slope_dims);
    expect("prelu", opgen_prelu_backward(&src, &slope, &diff_dst, &diff_src, &diff_slope, format), wanted);
    free(src.data);
    free(diff_dst.data);
    free(diff_src.data);
    free(slope.data);
    free(diff_slope.data);
}

/* Add of inputs of the two shapes into an output of `out_dims` (their broadcast shape, or not) */
static void add_case(opgen_dtype dtype, int rank_0, const int64_t *dims_0, int rank_1, const int64_t *dims_1,
                     int out_rank, const int64_t *out_dims, opgen_auto_broadcast rule, int wanted)
{
    opgen_tensor src_0 = make(dtype, rank_0, dims_0), src_1 = make(dtype, rank_1, dims_1);
    opgen_tensor dst = make(dtype, out_rank, out_dims);
    expect("add", opgen_add(&src_0, &src_1, &dst, rule), wanted);
    expect("squared_difference", opgen_squared_difference(&src_0, &src_1, &dst, rule), wanted);
    free(src_0.data);
    free(src_1.data);
    free(dst.data);
}

static void batch_norm_case(opgen_dtype dtype, opgen_dtype stats, int rank, const int64_t *dims,
                            opgen_data_format format, int with_gamma)
{
    const int64_t channels[1] = { dims[format == OPGEN_DATA_FORMAT_NCX ? 1 : rank - 1] };
    opgen_tensor src = make(dtype, rank, dims), diff_dst = make(dtype, rank, dims), diff_src = make(dtype, rank, dims);
    opgen_tensor mean = make(stats, 1, channels), variance = make(stats, 1, channels), gamma = make(stats, 1, channels);
    opgen_tensor diff_gamma = make(stats, 1, channels), diff_beta = make(stats, 1, channels);
    expect("batch_norm", opgen_batch_norm_training_backward(&src, &diff_dst, &mean, &variance, with_gamma ? &gamma : NULL,
                                                            &diff_src, with_gamma ? &diff_gamma : NULL,
                                                            with_gamma ? &diff_beta : NULL, 1e-3f, format),
           OPGEN_SUCCESS);
    free(src.data);
    free(diff_dst.data);
    free(diff_src.data);
    free(mean.data);
    free(variance.data);
    free(gamma.data);
    free(diff_gamma.data);
    free(diff_beta.data);
}

static void aclnn_case(int rank, const int64_t *dims, int strided, int grad_rank, const int64_t *grad_dims,
                       int64_t weight_count, int wanted)
{
    const int64_t total = elements(rank, dims), grad_total = elements(grad_rank, grad_dims);
    int64_t strides[OPGEN_MAX_RANK], storage[1] = { total * (strided ? 2 : 1) }, weight_dims[1] = { weight_count };
    int64_t grad_storage[1] = { grad_total }, out_storage[1] = { total };
    float *self_data = calloc((size_t)(storage[0] ? storage[0] : 1), sizeof(float));
    float *grad_data = calloc((size_t)(grad_total ? grad_total : 1), sizeof(float));
    float *out_data = calloc((size_t)(total ? total : 1), sizeof(float));
    float weight_data[64] = { 0.25f }, grad_weight_data[64];
    uint64_t size = 0;
    aclOpExecutor *executor = NULL;
    int64_t step = strided ? 2 : 1;
    for (int d = rank - 1; d >= 0; --d) { /* every other element: a strided view inside the storage */
        strides[d] = step;
        step *= dims[d];
    }
    aclTensor *self = aclCreateTensor(dims, (uint64_t)rank, ACL_FLOAT, strides, 0, ACL_FORMAT_ND, storage, 1, self_data);
    aclTensor *grad = aclCreateTensor(grad_dims, (uint64_t)grad_rank, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, grad_storage, 1,
                                      grad_data);
    aclTensor *weight = aclCreateTensor(weight_dims, 1, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, weight_dims, 1, weight_data);
    aclTensor *out = aclCreateTensor(dims, (uint64_t)rank, ACL_FLOAT, strides, 0, ACL_FORMAT_ND, out_storage, 1,
                                     out_data);
    aclTensor *grad_weight = aclCreateTensor(weight_dims, 1, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, weight_dims, 1,
                                             grad_weight_data);
    int status;
    if (strided) { /* the output is dense here; the input strided */
        aclDestroyTensor(out);
        out = aclCreateTensor(dims, (uint64_t)rank, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, out_storage, 1, out_data);
    }
    status = aclnnPreluBackwardGetWorkspaceSize(grad, self, weight, out, grad_weight, &size, &executor);
    if (status == ACLNN_SUCCESS) {
        void *workspace = size ? malloc(size) : NULL;
        status = aclnnPreluBackward(workspace, size, executor, NULL);
        expect("aclnn second run", aclnnPreluBackward(workspace, size, executor, NULL), ACLNN_ERR_PARAM_INVALID);
        free(workspace);
        /* an executor that will not run: destroyed (ASan checks the free) */
        expect("aclnn phase one again",
               aclnnPreluBackwardGetWorkspaceSize(grad, self, weight, out, grad_weight, &size, &executor), ACLNN_SUCCESS);
        expect("aclnn destroy", aclDestroyAclOpExecutor(executor), ACLNN_SUCCESS);
    }
    expect("aclnn", status, wanted);
    aclDestroyTensor(self);
    aclDestroyTensor(grad);
    aclDestroyTensor(weight);
    aclDestroyTensor(out);
    aclDestroyTensor(grad_weight);
    free(self_data);
    free(grad_data);
    free(out_data);
}

void run_api_cases(void)
{
    const opgen_dtype dtypes[3] = { OPGEN_F32, OPGEN_F16, OPGEN_BF16 };
    const int64_t shape[4] = { 2, 3, 4, 5 }, channels3[1] = { 3 }, channels5[1] = { 5 }, one[1] = { 1 };
    const int64_t trailing[3] = { 3, 4, 5 }, numpy_a[4] = { 1, 3, 1, 5 }, numpy_b[4] = { 2, 1, 4, 1 };
    const int64_t short_inner[3] = { 2, 3, 4 }, empty[3] = { 0, 3, 4 }, long_inner[3] = { 2, 3, 70001 };
    const int64_t vector[1] = { 7 }, bad_slope[1] = { 4 }, rows[2] = { 700, 3 }, no_spatial[3] = { 2, 3, 0 };
    const int64_t column[2] = { 3, 1 }, row[2] = { 1, 4 }, grid[2] = { 3, 4 }, wide[2] = { 2, 4 };
    const int64_t planes[3] = { 2, 3, 5 }, empty_grid[3] = { 2, 0, 4 }, empty_column[3] = { 1, 0, 1 };
    for (int i = 0; i < 3; ++i) {
        const opgen_dtype dtype = dtypes[i];
        add_case(dtype, 2, column, 2, row, 2, grid, OPGEN_AUTO_BROADCAST_NUMPY, OPGEN_SUCCESS);
        add_case(dtype, 1, channels5, 3, planes, 3, planes, OPGEN_AUTO_BROADCAST_NUMPY, OPGEN_SUCCESS);
        add_case(dtype, 0, one, 1, long_inner + 2, 1, long_inner + 2, OPGEN_AUTO_BROADCAST_NUMPY, OPGEN_SUCCESS);
        add_case(dtype, 3, empty_grid, 3, empty_column, 3, empty_grid, OPGEN_AUTO_BROADCAST_NUMPY, OPGEN_SUCCESS);
        add_case(dtype, 2, grid, 2, grid, 2, grid, OPGEN_AUTO_BROADCAST_NONE, OPGEN_SUCCESS);
        add_case(dtype, 2, column, 2, row, 2, grid, OPGEN_AUTO_BROADCAST_NONE, OPGEN_INVALID_SHAPE);
        add_case(dtype, 2, wide, 2, grid, 2, grid, OPGEN_AUTO_BROADCAST_NUMPY, OPGEN_INVALID_SHAPE);
        add_case(dtype, 2, column, 2, row, 2, wide, OPGEN_AUTO_BROADCAST_NUMPY, OPGEN_INVALID_SHAPE);
        prelu_case(dtype, 4, shape, 1, channels3, OPGEN_DATA_FORMAT_NCX, OPGEN_SUCCESS);
        prelu_case(dtype, 4, shape, 1, channels5, OPGEN_DATA_FORMAT_NXC, OPGEN_SUCCESS);
        prelu_case(dtype, 4, shape, 1, one, OPGEN_DATA_FORMAT_NCX, OPGEN_SUCCESS);
        prelu_case(dtype, 4, shape, 3, trailing, OPGEN_DATA_FORMAT_NCX, OPGEN_SUCCESS);
        prelu_case(dtype, 4, shape, 4, numpy_a, OPGEN_DATA_FORMAT_NXC, OPGEN_SUCCESS);
        prelu_case(dtype, 4, shape, 4, numpy_b, OPGEN_DATA_FORMAT_NCX, OPGEN_SUCCESS);
        prelu_case(dtype, 3, short_inner, 1, channels3, OPGEN_DATA_FORMAT_NCX, OPGEN_SUCCESS);
        prelu_case(dtype, 3, long_inner, 1, channels3, OPGEN_DATA_FORMAT_NCX, OPGEN_SUCCESS);
        prelu_case(dtype, 3, empty, 1, channels3, OPGEN_DATA_FORMAT_NCX, OPGEN_SUCCESS);
        prelu_case(dtype, 1, vector, 1, one, OPGEN_DATA_FORMAT_NXC, OPGEN_SUCCESS);
        prelu_case(dtype, 4, shape, 1, bad_slope, OPGEN_DATA_FORMAT_NCX, OPGEN_INVALID_SHAPE);
    }
    batch_norm_case(OPGEN_F32, OPGEN_F32, 4, shape, OPGEN_DATA_FORMAT_NCX, 1);
    batch_norm_case(OPGEN_BF16, OPGEN_F32, 4, shape, OPGEN_DATA_FORMAT_NXC, 0);
    batch_norm_case(OPGEN_BF16, OPGEN_BF16, 2, rows, OPGEN_DATA_FORMAT_NXC, 1);
    batch_norm_case(OPGEN_F16, OPGEN_F32, 3, no_spatial, OPGEN_DATA_FORMAT_NCX, 1);
    batch_norm_case(OPGEN_F16, OPGEN_F32, 3, empty, OPGEN_DATA_FORMAT_NXC, 1);
    aclnn_case(4, shape, 0, 4, shape, 3, ACLNN_SUCCESS);
    aclnn_case(4, shape, 1, 2, shape + 2, 3, ACLNN_SUCCESS);
    aclnn_case(4, shape, 1, 1, one, 1, ACLNN_SUCCESS);
    aclnn_case(3, empty, 0, 3, empty, 3, ACLNN_SUCCESS);
    aclnn_case(4, shape, 0, 4, shape, 4, ACLNN_ERR_PARAM_INVALID);
    aclnn_case(4, shape, 1, 1, bad_slope, 3, ACLNN_ERR_PARAM_INVALID);
    printf("api cases ok\n");
}
