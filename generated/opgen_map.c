/* The loop driver of the elementwise ops (hand-written): see opgen_map.h. */
#include "opgen_map.h"
#include "opgen_team.h"

/* What a call's shares of blocks need. */
typedef struct opgen_map_loop {
    const opgen_map_kernel *kernel;
    const opgen_map_call *call;
    int64_t head; /* the elements before the first block */
} opgen_map_loop;

static void opgen_map_blocks(const void *context, int64_t first, int64_t last)
{
    const opgen_map_loop *loop = (const opgen_map_loop *)context;
    loop->kernel->blocks(loop->call, loop->head + first * OPGEN_BLOCK, loop->head + last * OPGEN_BLOCK);
}

void opgen_map_run(const opgen_map_kernel *kernel, const opgen_map_call *given)
{
    opgen_map_call call = *given;
    const int64_t count = call.count;
    const int64_t head = kernel->from_zero ? 0
                                           : opgen_min(count, opgen_to_line(call.tensors[kernel->lead],
                                                                            (size_t)kernel->lead_size));
    const int64_t blocks = (count - head) / OPGEN_BLOCK;
    const opgen_map_loop loop = { kernel, &call, head };
    call.stream = count * kernel->element_bytes >= OPGEN_STREAM_BYTES;
    /* whole blocks, split among the threads in contiguous shares */
    opgen_team_shares(opgen_threads_for(count * kernel->work_per_element), 0, blocks, opgen_map_blocks, &loop);
    /* the elements before the first block and after the last one */
    kernel->elements(&call, 0, head);
    kernel->elements(&call, head + blocks * OPGEN_BLOCK, count);
}
