/* opgen_exp_short (the f32 kernels' exp inside plan.float_first's intervals: no clamp, one
 * scaling, a shorter series) against opgen_exp on 2^24 evenly spread x in [-707, 709], where
 * e^x is normal, and on x = (k + 1/2) ln 2 for every k there, where |r| is largest. Prints
 * "exp_short" with the count checked and the largest relative difference (%a). */
#include <math.h>
#include <stdio.h>

#include "opgen_internal.h"

static double worst = 0.0;
static long checked = 0;

static void check(double x)
{
    const double short_series = opgen_exp_short(x), full = opgen_exp(x);
    const double relative = fabs(short_series - full) / full;
    worst = relative > worst || relative != relative ? relative : worst; /* NaN sticks */
    ++checked;
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
    printf("exp_short %ld %a\n", checked, worst);
    return 0;
}
