// The generated headers from C++: the C library (built by a C compiler) called through the op
// API and the aclnn API. Values are small dyadic numbers, so every product and sum is exact
// and the expected results below are the math, not an approximation of it.
#include <cstdio>
#include <vector>

#include "opgen.h"
#include "opgen_aclnn.h"

static int failures = 0;

static void expect(bool ok, const char *what)
{
    if (!ok) {
        std::printf("FAILED: %s (%s)\n", what, opgen_last_error());
        ++failures;
    }
}

int main()
{
    const int count = 6;
    std::vector<float> src = {-2.0f, -1.0f, 0.0f, 0.5f, 3.0f, -0.25f};
    std::vector<float> grad = {1.0f, -0.5f, 2.0f, 4.0f, -8.0f, 0.75f};
    std::vector<float> out(count, 7.0f);

    opgen_tensor x = {src.data(), OPGEN_F32, 1, {count}};
    opgen_tensor g = {grad.data(), OPGEN_F32, 1, {count}};
    opgen_tensor y = {out.data(), OPGEN_F32, 1, {count}};
    expect(opgen_relu_backward(&x, &g, &y, 0) == OPGEN_SUCCESS, "relu status");
    for (int i = 0; i < count; ++i) {
        expect(out[i] == (src[i] > 0.0f ? grad[i] : 0.0f), "relu value");
    }

    // aclnn: one weight for every element; gradWeight = sum over self <= 0 of self * grad
    const float weight = 0.5f;
    float grad_weight = 7.0f;
    const int64_t dims[1] = {count}, one[1] = {1};
    aclTensor *t_grad = aclCreateTensor(dims, 1, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, dims, 1, grad.data());
    aclTensor *t_self = aclCreateTensor(dims, 1, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, dims, 1, src.data());
    aclTensor *t_weight =
        aclCreateTensor(one, 1, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, one, 1, const_cast<float *>(&weight));
    aclTensor *t_input = aclCreateTensor(dims, 1, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, dims, 1, out.data());
    aclTensor *t_gw = aclCreateTensor(one, 1, ACL_FLOAT, nullptr, 0, ACL_FORMAT_ND, one, 1, &grad_weight);
    uint64_t size = 0;
    aclOpExecutor *executor = nullptr;
    expect(aclnnPreluBackwardGetWorkspaceSize(t_grad, t_self, t_weight, t_input, t_gw, &size, &executor) == 0,
           "aclnn phase one");
    std::vector<unsigned char> workspace(size + 1);
    expect(aclnnPreluBackward(workspace.data(), size, executor, nullptr) == 0, "aclnn phase two");
    float expected_weight = 0.0f;
    for (int i = 0; i < count; ++i) {
        expect(out[i] == (src[i] > 0.0f ? grad[i] : weight * grad[i]), "aclnn gradInput");
        expected_weight += src[i] > 0.0f ? 0.0f : src[i] * grad[i];
    }
    expect(grad_weight == expected_weight, "aclnn gradWeight");
    for (aclTensor *t : {t_grad, t_self, t_weight, t_input, t_gw}) {
        aclDestroyTensor(t);
    }
    std::printf("C++: %s\n", failures == 0 ? "all passed" : "some failed");
    return failures == 0 ? 0 : 1;
}
