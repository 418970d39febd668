/* opgen_exp_linef, the along_axes kernels' exp of an argument never above 0, against libm's exp
 * in double on every STEP-th negative float (every binade, densely; STEP 1, every negative
 * float, takes about a minute a build and gave 2^-23.4 fused, 2^-23.06 not, when the function
 * was written): its error within 2^-23 of e^x, relatively, where e^x is a normal float (the 1
 * ulp, 2 u, the along_axes accuracy bounds take for exp), and within that plus 2^-149 below (a
 * subnormal result rounds to its grid); NaN for NaN, 0 for -inf, 1 for -0. Prints the count
 * checked, the count outside the bound and the largest relative error's binary logarithm. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "opgen_internal.h"

#define STEP 3

int main(void)
{
    long checked = 0, outside = 0;
    double largest = 0.0;
    for (uint64_t pattern = 0x80000000u; pattern <= 0xFFFFFFFFu; pattern += STEP) {
        const uint32_t bits = (uint32_t)pattern;
        float x;
        memcpy(&x, &bits, sizeof x);
        const double got = opgen_exp_linef(x);
        ++checked;
        if (isnan(x)) {
            outside += !isnan(got);
            continue;
        }
        const double want = exp((double)x), error = fabs(got - want);
        if (want >= 0x1p-126) {
            largest = error / want > largest ? error / want : largest;
            outside += error > 0x1p-23 * want;
        } else {
            outside += error > 0x1p-23 * want + 0x1p-149;
        }
    }
    outside += opgen_exp_linef(-INFINITY) != 0.0f;
    outside += opgen_exp_linef(-0.0f) != 1.0f;
    printf("%ld %ld %.2f\n", checked, outside, log2(largest));
    return 0;
}
