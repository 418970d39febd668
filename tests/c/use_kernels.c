/* Calls opgen kernels as a C user would, on golden inputs written by tests/test_vendoring.py,
 * and compares with the float64 oracle's outputs within the allowed error per element.
 * Usage: use_kernels DIR (the directory holding the golden files). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opgen.h"

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
    if (bad == 0) {
        ++passed;
    } else {
        ++failed;
    }
    free(expected);
    free(allowed);
}

int main(int argc, char **argv)
{
    enum { N = 3, C = 5, S = 37, TOTAL = N * C * S };
    float *src, *diff_dst, *slope, *mean, *variance, *gamma;
    float diff_src[TOTAL], diff_slope[C], diff_gamma[S], diff_beta[S];
    double sums[C];
    double *workspace;
    if (argc != 2) {
        fprintf(stderr, "usage: use_kernels DIR\n");
        return 2;
    }
    directory = argv[1];
    src = load("src.f32", TOTAL * sizeof(float));
    diff_dst = load("diff_dst.f32", TOTAL * sizeof(float));
    slope = load("slope.f32", C * sizeof(float));

    relu_backward_f32(src, diff_dst, diff_src, TOTAL);
    check("relu_backward diff_src", diff_src, "relu.diff_src", TOTAL);

    /* PReLU, NCX, per-channel slope: [N][C][S] */
    memset(sums, 0, sizeof sums);
    workspace = malloc((size_t)prelu_backward_f32_ncx_workspace_size(N, C, S) * sizeof(double));
    prelu_backward_f32_ncx(src, slope, diff_dst, diff_src, sums, workspace, N, C, S);
    opgen_narrow_f32(sums, diff_slope, C);
    check("prelu_backward diff_src", diff_src, "prelu.diff_src", TOTAL);
    check("prelu_backward diff_slope", diff_slope, "prelu.diff_slope", C);
    free(workspace);

    /* BatchNorm, NXC: the same data seen as [N * C][S], S channels */
    mean = load("mean.f32", S * sizeof(float));
    variance = load("variance.f32", S * sizeof(float));
    gamma = load("gamma.f32", S * sizeof(float));
    workspace = malloc((size_t)batch_norm_training_backward_f32_nxc_workspace_size(N * C, S, 1) * sizeof(double));
    batch_norm_training_backward_f32_nxc(src, diff_dst, mean, variance, gamma, 1e-3f, diff_src, diff_gamma, diff_beta,
                                         workspace, N * C, S);
    check("batch_norm diff_src", diff_src, "bn.diff_src", TOTAL);
    check("batch_norm diff_gamma", diff_gamma, "bn.diff_gamma", S);
    check("batch_norm diff_beta", diff_beta, "bn.diff_beta", S);
    free(workspace);

    printf("%s target: %d passed, %d failed\n", opgen_cpu_target(), passed, failed);
    free(src);
    free(diff_dst);
    free(slope);
    free(mean);
    free(variance);
    free(gamma);
    return failed ? 1 : 0;
}
