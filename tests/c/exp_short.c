/* opgen_exp_short and opgen_exp_shortf (the kernels' exp inside plan.float_first's
 * intervals: no clamp, one scaling, a short polynomial) against opgen_exp, on the arguments whose
 * e^x is normal: for double 2^24 evenly spread x in [-707, 709] and x = (k + 1/2) ln 2 for
 * every k there, where |r| is largest; for float every 61st float in [-86.6, 88]. Prints, per
 * type, the count checked and the largest relative difference (%a). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "opgen_internal.h"

static double worst, worstf;
static long checked, checkedf;

static void check(double x)
{
    const double full = opgen_exp(x), relative = fabs(opgen_exp_short(x) - full) / full;
    worst = relative > worst || relative != relative ? relative : worst; /* NaN sticks */
    ++checked;
}

static void checkf(float x)
{
    const double full = opgen_exp((double)x), relative = fabs((double)opgen_exp_shortf(x) - full) / full;
    worstf = relative > worstf || relative != relative ? relative : worstf;
    ++checkedf;
}

int main(void)
{
    const long points = 1L << 24;
    for (long i = 0; i <= points; ++i) {
        check(-707.0 + 1416.0 * (double)i / (double)points);
    }
    for (int k = -1020; k <= 1021; ++k) {
        const double x = (k + 0.5) * 0.6931471805599453;
        if (x > -707.0 && x < 709.0) {
            check(nextafter(x, 0.0));
            check(x);
            check(nextafter(x, 1000.0));
        }
    }
    for (uint64_t pattern = 0; pattern <= 0xFFFFFFFFu; pattern += 61) {
        const uint32_t bits = (uint32_t)pattern;
        float x;
        memcpy(&x, &bits, sizeof x);
        if (x >= -86.6f && x <= 88.0f) { /* e^-86.6 > 2^-125, e^88 < 2^127; NaN fails */
            checkf(x);
        }
    }
    printf("double %ld %a\nfloat %ld %a\n", checked, worst, checkedf, worstf);
    return 0;
}
