/* The thread team the hand-written drivers share (hand-written; opgen copies it into every build
 * that has a driver using it). */
#ifndef OPGEN_TEAM_H
#define OPGEN_TEAM_H

#include <stdint.h>

#include "opgen_internal.h"

/* One thread's contiguous share [first, last) of a loop's steps; `context`: the driver's. */
typedef void (*opgen_team_share)(const void *context, int64_t first, int64_t last);

/* Steps 0..count-1 split among `threads` threads, each taking one contiguous share of them at
 * once and fencing its streamed stores at its end. One thread runs them without a parallel
 * region unless `region` asks for one: entering a region costs about half a microsecond even
 * when it starts no thread, more than the whole of a small call. */
static inline void opgen_team_shares(int threads, int region, int64_t count, opgen_team_share share, const void *context)
{
#if defined(_OPENMP)
    if (threads > 1 || region) {
        OPGEN_PARALLEL(threads)
        {
            const int64_t member = omp_get_thread_num();
            const int64_t members = omp_get_num_threads();
            share(context, count * member / members, count * (member + 1) / members);
            opgen_fence();
        }
        return;
    }
#else
    (void)threads;
    (void)region;
#endif
    share(context, 0, count);
    opgen_fence();
}

#endif /* OPGEN_TEAM_H */
