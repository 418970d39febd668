/* opgen_exp_short, opgen_exp_shortf and opgen_exp_short3f (the kernels' exp inside
 * plan.float_first's intervals: no clamp, one scaling, a short polynomial) against opgen_exp,
 * on the arguments whose e^x is normal: for double 2^24 evenly spread x in [-707, 709] and
 * x = (k + 1/2) ln 2 for every k there, where |r| is largest; for float every 61st float in
 * [-86.6, 88]. Prints, per function, the count checked and the largest relative difference
 * (%a). Then, per function, how many of those arguments x / scale, for scale -2, -1, 1/2 and
 * 4, give other bits as (x / scale, scale) than as (x, 1): the count checked and the
 * mismatches (%a, 0 expected). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "opgen_internal.h"

static double worst, worstf[2];
static long checked, checkedf[2], scaled, scaledf[2], mismatches, mismatchesf[2];
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

static void checkf(float x, int which, float (*function)(float, float))
{
    const float short_exp = function(x, 1.0f);
    const double full = opgen_exp((double)x), relative = fabs((double)short_exp - full) / full;
    worstf[which] = relative > worstf[which] || relative != relative ? relative : worstf[which];
    ++checkedf[which];
    for (int i = 0; i < 4; ++i) {
        const float scale = (float)scales[i];
        mismatchesf[which] += memcmp(&short_exp, &(float){function(x / scale, scale)}, sizeof short_exp) != 0;
        ++scaledf[which];
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
            checkf(x, 0, opgen_exp_shortf);
            checkf(x, 1, opgen_exp_short3f);
        }
    }
    printf("opgen_exp_short %ld %a\n", checked, worst);
    printf("opgen_exp_shortf %ld %a\n", checkedf[0], worstf[0]);
    printf("opgen_exp_short3f %ld %a\n", checkedf[1], worstf[1]);
    printf("scaled_opgen_exp_short %ld %a\n", scaled, (double)mismatches);
    printf("scaled_opgen_exp_shortf %ld %a\n", scaledf[0], (double)mismatchesf[0]);
    printf("scaled_opgen_exp_short3f %ld %a\n", scaledf[1], (double)mismatchesf[1]);
    return 0;
}
