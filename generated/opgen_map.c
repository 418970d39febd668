/* The loop driver of the elementwise ops (hand-written): see opgen_map.h. */
#include "opgen_map.h"

void opgen_map_run(const opgen_map_kernel *kernel, const opgen_map_call *given)
{
    opgen_map_call call = *given;
    const int64_t count = call.count;
    const int64_t head = kernel->from_zero ? 0
                                           : opgen_min(count, opgen_to_line(call.tensors[kernel->lead],
                                                                            (size_t)kernel->lead_size));
    const int64_t blocks = (count - head) / OPGEN_BLOCK;
    const int threads = opgen_threads_for(count * kernel->work_per_element);
    call.stream = count * kernel->element_bytes >= OPGEN_STREAM_BYTES;
    (void)threads;
    /* whole blocks, split among the threads in contiguous shares. One thread runs them without
     * a parallel region: entering one costs about half a microsecond even when it starts no
     * thread, more than the whole of a small call. */
#if defined(_OPENMP)
    if (threads > 1) {
        OPGEN_PARALLEL(threads)
        {
            const int64_t member = omp_get_thread_num();
            const int64_t members = omp_get_num_threads();
            const int64_t first = head + blocks * member / members * OPGEN_BLOCK;
            const int64_t last = head + blocks * (member + 1) / members * OPGEN_BLOCK;
            kernel->blocks(&call, first, last);
            opgen_fence();
        }
    } else
#endif
    {
        kernel->blocks(&call, head, head + blocks * OPGEN_BLOCK);
        opgen_fence();
    }
    /* the elements before the first block and after the last one */
    kernel->elements(&call, 0, head);
    kernel->elements(&call, head + blocks * OPGEN_BLOCK, count);
}
