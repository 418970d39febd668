/* opgen_scale_add and opgen_scale_addf (the math's c * x + k with c a power of 2 and k a
 * constant of magnitude 2^-100 to 2^100, expr._scale_add) against a multiply and an add, for
 * c = +-2^-8 .. 2^8, constants from 2^-100 to 2^100 of both signs, and x every 65537th float
 * bit pattern (subnormals and NaNs among them), as many spread double patterns, and zeros,
 * infinities, the smallest subnormals and the largest values. Built with -mfma the helpers
 * fuse; the sums must keep their bits all the same. Prints the count checked and the
 * mismatches (0 expected; two NaNs match). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "opgen_internal.h"

static const double constants[] = {0.5, 1.0, 3.0, 0.1, 0x1p-100, 0x1.8p-90, 1e30, 0x1p100};
static const uint32_t special_floats[] = {0x00000000u, 0x00000001u, 0x007FFFFFu, 0x00800000u, 0x7F7FFFFFu, 0x7F800000u};
static const uint64_t special_doubles[] = {0x0u, 0x1u, 0x000FFFFFFFFFFFFFu, 0x0010000000000000u, 0x7FEFFFFFFFFFFFFFu,
                                           0x7FF0000000000000u};
static long checked, mismatches;

static void check_float(float scale, float constant, uint32_t pattern)
{
    float x, fused, plain;
    memcpy(&x, &pattern, sizeof x);
    volatile float product = scale * x; /* rounded on its own */
    fused = opgen_scale_addf(scale, x, constant);
    plain = product + constant;
    mismatches += memcmp(&fused, &plain, sizeof fused) != 0 && !(fused != fused && plain != plain);
    ++checked;
}

static void check_double(double scale, double constant, uint64_t pattern)
{
    double x, fused, plain;
    memcpy(&x, &pattern, sizeof x);
    volatile double product = scale * x;
    fused = opgen_scale_add(scale, x, constant);
    plain = product + constant;
    mismatches += memcmp(&fused, &plain, sizeof fused) != 0 && !(fused != fused && plain != plain);
    ++checked;
}

int main(void)
{
    for (int power = -8; power <= 8; ++power) {
        for (int sign = -1; sign <= 1; sign += 2) {
            const double scale = sign * ldexp(1.0, power);
            for (size_t i = 0; i < sizeof constants / sizeof *constants; ++i) {
                for (int constant_sign = -1; constant_sign <= 1; constant_sign += 2) {
                    const double constant = constant_sign * constants[i];
                    for (uint64_t bits = 0; bits <= 0xFFFFFFFFu; bits += 65537) {
                        check_float((float)scale, (float)constant, (uint32_t)bits);
                        check_double(scale, constant, bits * 0x9E3779B97F4A7C15u);
                    }
                    for (size_t s = 0; s < sizeof special_floats / sizeof *special_floats; ++s) {
                        for (int negative = 0; negative <= 1; ++negative) {
                            check_float((float)scale, (float)constant, special_floats[s] | (uint32_t)negative << 31);
                            check_double(scale, constant, special_doubles[s] | (uint64_t)negative << 63);
                        }
                    }
                }
            }
        }
    }
    printf("%ld %ld\n", checked, mismatches);
    return 0;
}
