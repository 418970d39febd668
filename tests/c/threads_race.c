/* Two threads use the library at once: the first choice of the CPU target, the thread-count
 * setting, and bf16 kernels (whose stores read a flag of the chosen target). Built with
 * ThreadSanitizer by tests/test_sanitizers.py: a data race fails the run. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "opgen.h"

#define COUNT 40 /* two blocks and a tail */

static void *use_library(void *argument)
{
    const int id = *(const int *)argument;
    opgen_bf16 src[COUNT], diff_dst[COUNT], diff_src[COUNT];
    for (int i = 0; i < COUNT; ++i) {
        /* +-(1 + i/128) or so: every other element negative */
        src[i] = (opgen_bf16)((0x3f80u + (unsigned)(i + id)) | (i % 2 ? 0x8000u : 0u));
        diff_dst[i] = (opgen_bf16)(0x4000u + (unsigned)i);
    }
    for (int round = 0; round < 200; ++round) {
        relu_backward_bf16(src, diff_dst, diff_src, COUNT);
        for (int i = 0; i < COUNT; ++i) {
            const opgen_bf16 expected = (src[i] & 0x8000u) ? 0 : diff_dst[i];
            if (diff_src[i] != expected) {
                return (void *)1;
            }
        }
        opgen_set_num_threads(1 + (round + id) % 3);
        if (opgen_get_num_threads() < 1 || opgen_cpu_target()[0] == '\0') {
            return (void *)1;
        }
    }
    return NULL;
}

int main(void)
{
    pthread_t threads[2];
    int ids[2] = {0, 1};
    void *results[2] = {NULL, NULL};
    for (int t = 0; t < 2; ++t) {
        if (pthread_create(&threads[t], NULL, use_library, &ids[t]) != 0) {
            return 2;
        }
    }
    for (int t = 0; t < 2; ++t) {
        pthread_join(threads[t], &results[t]);
    }
    if (results[0] != NULL || results[1] != NULL) {
        puts("wrong results");
        return 1;
    }
    printf("%s threads ok\n", opgen_cpu_target());
    return 0;
}
