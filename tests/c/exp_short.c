/* opgen_exp_short and opgen_exp_shortf (the kernels' exp inside plan.float_first's
 * intervals: no clamp, one scaling, a short polynomial) against opgen_exp, on the arguments whose
 * e^x is normal: for double 2^24 evenly spread x in [-707, 709] and x = (k + 1/2) ln 2 for
 * every k there, where |r| is largest; for float every 61st float in [-86.6, 88]. Prints, per
 * type, the count checked and the largest relative difference (%a). Then, per type, how many
 * of those arguments x / scale, for scale -2, -1, 1/2 and 4, give other bits as (x / scale,
 * scale) than as (x, 1): the count checked and the mismatches (%a, 0 expected). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "opgen_internal.h"

static double worst, worstf;
static long checked, checkedf, scaled, scaledf, mismatches, mismatchesf;
static const double scales[] = {-2.0, -1.0, 0.5, 4.0};

static void check(double x)
{
    const double full = opgen_exp(x), short_exp = opgen_exp_short(x, 1.0), relative = fabs(short_exp - full) / full;
    worst = relative > worst || relative != relative ? relative : worst; /* NaN sticks */
    ++checked;
    for (int i = 0; i < 4; ++i) {
        mismatches += memcmp(&short_exp, &(double){opgen_exp_short(x / scales[i], scales[i])}, sizeof short_exp) != 0;
        ++scaled;
    }
}

static void checkf(float x)
{
    const float short_exp = opgen_exp_shortf(x, 1.0f);
    const double full = opgen_exp((double)x), relative = fabs((double)short_exp - full) / full;
    worstf = relative > worstf || relative != relative ? relative : worstf;
    ++checkedf;
    for (int i = 0; i < 4; ++i) {
        const float scale = (float)scales[i];
        mismatchesf += memcmp(&short_exp, &(float){opgen_exp_shortf(x / scale, scale)}, sizeof short_exp) != 0;
        ++scaledf;
    }
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
    printf("scaled_double %ld %a\nscaled_float %ld %a\n", scaled, (double)mismatches, scaledf, (double)mismatchesf);
    return 0;
}
