/* Calls every opgen op as a C user would, through the op API (opgen.h) and the aclnn API
 * (opgen_aclnn.h), on golden inputs written by tests/test_vendoring.py, and compares with the
 * float64 oracle's outputs within the allowed error per element.
 * Usage: use_kernels DIR (the directory holding the golden files). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opgen.h"
#include "opgen_aclnn.h"

enum { N = 3, C = 5, S = 37, TOTAL = N * C * S };

static const char *directory;
static int passed, failed;

static void *load(const char *name, size_t bytes)
{
    char path[4096];
    void *data = malloc(bytes ? bytes : 1);
    FILE *file;
    snprintf(path, sizeof path, "%s/%s", directory, name);
    file = fopen(path, "rb");
    if (file == NULL || data == NULL || fread(data, 1, bytes, file) != bytes) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(2);
    }
    fclose(file);
    return data;
}

static void verdict(int ok)
{
    if (ok) {
        ++passed;
    } else {
        ++failed;
    }
}

static void check_status(const char *what, int status)
{
    if (status != 0) {
        fprintf(stderr, "%s: status %d: %s\n", what, status, opgen_last_error());
    }
}

static void check(const char *what, const float *got, const char *expected_name, int64_t count)
{
    double *expected = load(expected_name, (size_t)count * sizeof(double));
    char allowed_name[256];
    double *allowed;
    int64_t bad = 0;
    snprintf(allowed_name, sizeof allowed_name, "%s.allowed", expected_name);
    allowed = load(allowed_name, (size_t)count * sizeof(double));
    for (int64_t i = 0; i < count; ++i) {
        if (!(fabs((double)got[i] - expected[i]) <= allowed[i])) {
            if (bad == 0) {
                fprintf(stderr, "%s[%lld]: got %.9g, expected %.9g\n", what, (long long)i, got[i], expected[i]);
            }
            ++bad;
        }
    }
    verdict(bad == 0);
    free(expected);
    free(allowed);
}

/* A dense f32 descriptor of up to three dims (rank = how many are given as > 0). */
static opgen_tensor f32_tensor(void *data, int64_t d0, int64_t d1, int64_t d2)
{
    opgen_tensor tensor;
    memset(&tensor, 0, sizeof tensor);
    tensor.data = data;
    tensor.dtype = OPGEN_F32;
    tensor.dims[0] = d0;
    tensor.dims[1] = d1;
    tensor.dims[2] = d2;
    tensor.rank = d2 > 0 ? 3 : d1 > 0 ? 2 : 1;
    return tensor;
}

int main(int argc, char **argv)
{
    float *src, *diff_dst, *slope, *mean, *variance, *gamma, *grad_row;
    static float diff_src[TOTAL];
    float diff_slope[C], diff_gamma[S], diff_beta[S];
    opgen_tensor src_t, diff_dst_t, diff_src_t, slope_t, diff_slope_t;
    if (argc != 2) {
        fprintf(stderr, "usage: use_kernels DIR\n");
        return 2;
    }
    directory = argv[1];
    src = load("src.f32", TOTAL * sizeof(float));
    diff_dst = load("diff_dst.f32", TOTAL * sizeof(float));
    slope = load("slope.f32", C * sizeof(float));
    src_t = f32_tensor(src, N, C, S);
    diff_dst_t = f32_tensor(diff_dst, N, C, S);
    diff_src_t = f32_tensor(diff_src, N, C, S);

    /* elementwise ops */
    check_status("relu", opgen_relu_backward(&src_t, &diff_dst_t, &diff_src_t, 1));
    check("relu_backward diff_src", diff_src, "relu.diff_src", TOTAL);
    check_status("hard_sigmoid", opgen_hard_sigmoid_backward(&src_t, &diff_dst_t, &diff_src_t, 1.0f / 6.0f, 0.5f));
    check("hard_sigmoid_backward diff_src", diff_src, "hard_sigmoid.diff_src", TOTAL);
    check_status("sigmoid", opgen_sigmoid_backward(&src_t, &diff_dst_t, &diff_src_t, 1));
    check("sigmoid_backward diff_src", diff_src, "sigmoid.diff_src", TOTAL);
    check_status("tanh", opgen_tanh_backward(&src_t, &diff_dst_t, &diff_src_t, 1));
    check("tanh_backward diff_src", diff_src, "tanh.diff_src", TOTAL);

    /* PReLU, NCX, per-channel slope; two phases: the caller owns the workspace */
    {
        size_t bytes = 0;
        void *workspace;
        slope_t = f32_tensor(slope, C, 0, 0);
        diff_slope_t = f32_tensor(diff_slope, C, 0, 0);
        check_status("prelu size", opgen_prelu_backward_workspace_size(&src_t, &slope_t, &diff_dst_t, &diff_src_t,
                                                                       &diff_slope_t, OPGEN_DATA_FORMAT_NCX, &bytes));
        workspace = malloc(bytes ? bytes : 1);
        check_status("prelu", opgen_prelu_backward_with_workspace(&src_t, &slope_t, &diff_dst_t, &diff_src_t,
                                                                  &diff_slope_t, OPGEN_DATA_FORMAT_NCX, workspace, bytes));
        free(workspace);
        check("prelu_backward diff_src", diff_src, "prelu.diff_src", TOTAL);
        check("prelu_backward diff_slope", diff_slope, "prelu.diff_slope", C);
    }

    /* A broken rule: the status, a message naming the argument, nothing written. */
    {
        opgen_tensor wrong = f32_tensor(slope, C - 1, 0, 0);
        diff_src[0] = 12345.0f;
        opgen_status status = opgen_prelu_backward(&src_t, &wrong, &diff_dst_t, &diff_src_t, &diff_slope_t,
                                                   OPGEN_DATA_FORMAT_NCX);
        verdict(status == OPGEN_INVALID_SHAPE && strstr(opgen_last_error(), "slope") != NULL &&
                diff_src[0] == 12345.0f);
    }

    /* aclnn rules through the op API: grad_output [S] broadcasts to self [N][C][S] */
    grad_row = load("grad_row.f32", S * sizeof(float));
    {
        opgen_tensor grad_t = f32_tensor(grad_row, S, 0, 0);
        check_status("aclnn_prelu", opgen_aclnn_prelu_backward(&grad_t, &src_t, &slope_t, &diff_src_t, &diff_slope_t));
        check("aclnn_prelu_backward grad_input", diff_src, "aclnn.grad_input", TOTAL);
        check("aclnn_prelu_backward grad_weight", diff_slope, "aclnn.grad_weight", C);
    }

    /* The same through CANN's two-phase API; self read through a transposed strided view. */
    {
        int64_t self_dims[3] = { N, C, S }, self_strides[3] = { 1, N, N * C }, row_dims[1] = { S };
        int64_t weight_dims[1] = { C }, storage[1] = { TOTAL };
        float *transposed = malloc(TOTAL * sizeof(float));
        uint64_t workspace_size = 0;
        aclOpExecutor *executor = NULL;
        void *workspace;
        for (int n = 0; n < N; ++n) {
            for (int c = 0; c < C; ++c) {
                for (int s = 0; s < S; ++s) {
                    transposed[n + c * N + s * N * C] = src[(n * C + c) * S + s];
                }
            }
        }
        aclTensor *grad = aclCreateTensor(row_dims, 1, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, row_dims, 1, grad_row);
        aclTensor *self = aclCreateTensor(self_dims, 3, ACL_FLOAT, self_strides, 0, ACL_FORMAT_ND, storage, 1,
                                          transposed);
        aclTensor *weight = aclCreateTensor(weight_dims, 1, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, weight_dims, 1, slope);
        aclTensor *grad_input = aclCreateTensor(self_dims, 3, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, storage, 1, diff_src);
        aclTensor *grad_weight = aclCreateTensor(weight_dims, 1, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, weight_dims, 1,
                                                 diff_slope);
        memset(diff_src, 0, sizeof diff_src);
        check_status("aclnn size", aclnnPreluBackwardGetWorkspaceSize(grad, self, weight, grad_input, grad_weight,
                                                                      &workspace_size, &executor));
        workspace = malloc(workspace_size ? workspace_size : 1);
        check_status("aclnn run", aclnnPreluBackward(workspace, workspace_size, executor, NULL));
        check("aclnnPreluBackward gradInput", diff_src, "aclnn.grad_input", TOTAL);
        check("aclnnPreluBackward gradWeight", diff_slope, "aclnn.grad_weight", C);
        free(workspace);
        aclDestroyTensor(grad);
        aclDestroyTensor(self);
        aclDestroyTensor(weight);
        aclDestroyTensor(grad_input);
        aclDestroyTensor(grad_weight);
        free(transposed);
    }

    /* BatchNorm, NXC: the same data seen as [N * C][S], S channels; one call */
    mean = load("mean.f32", S * sizeof(float));
    variance = load("variance.f32", S * sizeof(float));
    gamma = load("gamma.f32", S * sizeof(float));
    {
        opgen_tensor rows = f32_tensor(src, N * C, S, 0), diff_rows = f32_tensor(diff_dst, N * C, S, 0);
        opgen_tensor out_rows = f32_tensor(diff_src, N * C, S, 0);
        opgen_tensor mean_t = f32_tensor(mean, S, 0, 0), variance_t = f32_tensor(variance, S, 0, 0);
        opgen_tensor gamma_t = f32_tensor(gamma, S, 0, 0), diff_gamma_t = f32_tensor(diff_gamma, S, 0, 0);
        opgen_tensor diff_beta_t = f32_tensor(diff_beta, S, 0, 0);
        check_status("batch_norm", opgen_batch_norm_training_backward(&rows, &diff_rows, &mean_t, &variance_t, &gamma_t,
                                                                      &out_rows, &diff_gamma_t, &diff_beta_t, 1e-3f,
                                                                      OPGEN_DATA_FORMAT_NXC));
        check("batch_norm diff_src", diff_src, "bn.diff_src", TOTAL);
        check("batch_norm diff_gamma", diff_gamma, "bn.diff_gamma", S);
        check("batch_norm diff_beta", diff_beta, "bn.diff_beta", S);
    }

    /* The kernel API below the op API: no checks, dense buffers, the caller's dims. */
    relu_backward_f32(src, diff_dst, diff_src, TOTAL);
    check("relu_backward_f32 diff_src", diff_src, "relu.diff_src", TOTAL);

    printf("%s target: %d passed, %d failed\n", opgen_cpu_target(), passed, failed);
    free(src);
    free(diff_dst);
    free(slope);
    free(grad_row);
    free(mean);
    free(variance);
    free(gamma);
    return failed ? 1 : 0;
}
