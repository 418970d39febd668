/* opgen_exp_normalf (one scaling, no clamp) against opgen_expf, bit for bit, on every 61st
 * float x whose e^x lies in [2^-125, 2^127): the range plan.float_first's intervals keep
 * its arguments in. Prints "exp ok" and the count checked, or the first difference. */
#include <stdio.h>
#include <string.h>

#include "opgen_internal.h"

int main(void)
{
    long checked = 0;
    for (uint64_t pattern = 0; pattern <= 0xFFFFFFFFu; pattern += 61) {
        const uint32_t bits = (uint32_t)pattern;
        float x, normal, general;
        memcpy(&x, &bits, sizeof x);
        if (!(x >= -86.6f && x <= 88.0f)) { /* e^-86.6 > 2^-125, e^88 < 2^127; NaN fails */
            continue;
        }
        normal = opgen_exp_normalf(x);
        general = opgen_expf(x);
        if (memcmp(&normal, &general, sizeof normal) != 0) {
            printf("x = %a: opgen_exp_normalf %a, opgen_expf %a\n", (double)x, (double)normal, (double)general);
            return 1;
        }
        ++checked;
    }
    printf("exp ok %ld\n", checked);
    return 0;
}
