/* The CUDA backend's recordings (sl_backend.h's record_begin, record_end, replay,
 * record_free): CUDA graphs captured from the backend's stream. The model's recurrent
 * loops queue a few small kernels per time step, each costing the host more to launch
 * than the GPU to run; replayed as a graph, the loop is one launch. A recording keeps
 * the precision and the scratch generation it was made with: bf16 / fp16 gemms are
 * other kernels than fp32 ones, and gemm's 16-bit operands live in a buffer that moves
 * when it grows (sl_cuda.cu, half_space); either change makes it stale. */
#include "config.h"

#include "kernels/cuda/sl_cuda_ctx.h"

extern "C" {
#include "common/sl_alloc.h"
}

typedef struct {
    cudaGraphExec_t exec;
    sl_precision_t prec;
    unsigned gen;
} recording_t;

/* Declines (0) where recordings are off or an earlier failure is pending: the ops then
 * run one by one and report it as usual. Capture is thread-local, so other threads'
 * CUDA calls (another backend's, the staging thread's) go on meanwhile. */
int
sl_cuda_record_begin(void *ctx)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;

    SL_ASSERT(!cu->recording);
    if (!cu->graphs || cu->err != SL_OK || !sl_cuda_enter(cu, "record_begin"))
        return 0;
    if (!sl_cuda_check(cu, cudaStreamBeginCapture(cu->stream, cudaStreamCaptureModeThreadLocal),
                       "record_begin"))
        return 0;
    cu->recording = 1;
    return 1;
}

/* Capture always ends, so the stream is usable again whatever failed meanwhile; the
 * first failure stays recorded, with a hint at running without recordings. */
void
sl_cuda_record_end(void *ctx, void **rec)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    recording_t *r = NULL;
    const char *what = "record_end (SHOAL_CUDA_GRAPHS=0 runs without recordings)";

    *rec = NULL;
    SL_ASSERT(cu->recording);
    cu->recording = 0;
    if (!sl_cuda_check(cu, cudaStreamEndCapture(cu->stream, &graph), what) || cu->err != SL_OK)
        goto out;
    if (!sl_cuda_check(cu, cudaGraphInstantiate(&exec, graph, 0), what))
        goto out;
    if (sl_alloc((void **)&r, 1, sizeof *r, 1, "CUDA graph") != SL_OK) {
        sl_cuda_fail(cu, SL_ERR_NOMEM, "%s: record_end: out of memory", cu->name);
        goto out;
    }
    r->exec = exec;
    r->prec = cu->prec;
    r->gen = cu->scratch_gen;
    exec = NULL;
    if (sl_cuda_check(cu, cudaGraphLaunch(r->exec, cu->stream), what)) {
        *rec = r;
        r = NULL;
    }
out:
    if (r) {
        cudaGraphExecDestroy(r->exec);
        sl_free(r);
    }
    if (exec)
        cudaGraphExecDestroy(exec);
    if (graph)
        cudaGraphDestroy(graph);
}

int
sl_cuda_replay(void *ctx, void *rec)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    recording_t *r = (recording_t *)rec;

    SL_ASSERT(r && !cu->recording);
    if (r->prec != cu->prec || r->gen != cu->scratch_gen)
        return 0;
    if (sl_cuda_enter(cu, "replay"))
        sl_cuda_check(cu, cudaGraphLaunch(r->exec, cu->stream), "replay");
    return 1;
}

/* Waits for the stream first: a launch of this graph may still be queued. */
void
sl_cuda_record_free(void *ctx, void *rec)
{
    sl_cuda_t *cu = (sl_cuda_t *)ctx;
    recording_t *r = (recording_t *)rec;

    if (!r)
        return;
    if (sl_cuda_enter(cu, "record_free"))
        sl_cuda_check(cu, cudaStreamSynchronize(cu->stream), "record_free");
    cudaGraphExecDestroy(r->exec);
    sl_free(r);
}
