/* opgen_exp_nonpositive(f), the kernels' exp where expr.nonpositive shows the argument is never
 * above 0, against opgen_exp(f): the same bits on every argument they are called with. For float
 * every 61st pattern with the sign bit set (0, subnormals, normals, -inf and NaNs among them),
 * for double 2^24 evenly spread x in [-800, 0]; both with +0, -0, -inf, NaN and the neighbours
 * of the lower clamp. Prints, per function, the count checked and the count of other bits (a NaN
 * for a NaN counts as the same: which NaN an operation passes on is the compiler's choice). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "opgen_internal.h"

static long checked, mismatches, checkedf, mismatchesf;

static void check(double x)
{
    const double full = opgen_exp(x), nonpositive = opgen_exp_nonpositive(x);
    mismatches += memcmp(&full, &nonpositive, sizeof full) != 0 && !(isnan(full) && isnan(nonpositive));
    ++checked;
}

static void checkf(float x)
{
    const float full = opgen_expf(x), nonpositive = opgen_exp_nonpositivef(x);
    mismatchesf += memcmp(&full, &nonpositive, sizeof full) != 0 && !(isnan(full) && isnan(nonpositive));
    ++checkedf;
}

int main(void)
{
    const double specials[] = {0.0, -0.0, -INFINITY, NAN, -NAN, -746.0, -745.0, -105.0, -104.0, -1e-310};
    for (int i = 0; i < (int)(sizeof specials / sizeof specials[0]); ++i) {
        check(specials[i]);
        check(nextafter(specials[i], -INFINITY));
        checkf((float)specials[i]);
        checkf(nextafterf((float)specials[i], -INFINITY));
    }
    const long points = 1L << 24;
    for (long i = 0; i <= points; ++i) {
        check(-800.0 * (double)i / (double)points);
    }
    for (uint64_t pattern = 0x80000000u; pattern <= 0xFFFFFFFFu; pattern += 61) {
        const uint32_t bits = (uint32_t)pattern;
        float x;
        memcpy(&x, &bits, sizeof x);
        checkf(x);
    }
    printf("opgen_exp_nonpositive %ld %ld\n", checked, mismatches);
    printf("opgen_exp_nonpositivef %ld %ld\n", checkedf, mismatchesf);
    return 0;
}
