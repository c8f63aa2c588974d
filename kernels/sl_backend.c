/* The backend registry: turns a device name ("cpu", "cuda", "cuda:N") into a backend,
 * CUDA's from the module that kernels/sl_cuda_loader.c loads. The only file that knows
 * which backends exist, and the only one that asks #ifdef HAVE_CUDA. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "kernels/sl_backend.h"
#ifdef HAVE_CUDA
#include "kernels/sl_cuda_loader.h"
#endif

/* "cuda" or "cuda:N" with N a decimal device index; *index gets N (0 for "cuda"). */
static int
parse_cuda(const char *name, long *index)
{
    char *end;

    if (strncmp(name, "cuda", 4) != 0)
        return 0;
    if (name[4] == '\0') {
        *index = 0;
        return 1;
    }
    if (name[4] != ':' || !isdigit((unsigned char)name[5]))
        return 0;
    errno = 0;
    *index = strtol(name + 5, &end, 10);
    return *end == '\0' && errno == 0;
}

sl_status_t
sl_backend_new(sl_backend_t **out, const char *name, int threads)
{
    long index;

    *out = NULL;
    if (name == NULL || name[0] == '\0')
        return sl_err_set(SL_ERR_INVALID, "device: no name given (accepted: cpu, cuda, cuda:N)");
    if (strcmp(name, "cpu") == 0)
        return sl_backend_cpu_new(out, threads);
    if (parse_cuda(name, &index)) {
#ifdef HAVE_CUDA
        if (index > INT_MAX)
            return sl_err_set(SL_ERR_INVALID, "device '%s': device index out of range", name);
        return sl_cuda_loader_backend_new(out, (int)index);
#else
        return sl_err_set(SL_ERR_UNSUPPORTED,
                          "device 'cuda:%ld': this shoal was built without CUDA "
                          "(configure --with-cuda)",
                          index);
#endif
    }
    return sl_err_set(SL_ERR_INVALID, "device '%s': unknown (accepted: cpu, cuda, cuda:N)", name);
}

void
sl_backend_cuda_describe(char *buf, size_t size)
{
#ifdef HAVE_CUDA
    sl_cuda_loader_describe(buf, size);
#else
    snprintf(buf, size, "none: this shoal was built without CUDA (configure --with-cuda)");
#endif
}

/* Objects come from sl_alloc in each backend's constructor; the context is the
 * backend's to release. */
void
sl_backend_destroy(sl_backend_t **b)
{
    if (b == NULL || *b == NULL)
        return;
    if ((*b)->ops != NULL && (*b)->ops->destroy != NULL)
        (*b)->ops->destroy((*b)->ctx);
    sl_free(*b);
    *b = NULL;
}

int
sl_backend_on_host(const sl_backend_t *be)
{
    return strncmp(be->name, "cpu", 3) == 0;
}

sl_status_t
sl_backend_host_alloc(sl_backend_t *be, void **ptr, size_t bytes)
{
    *ptr = NULL;
    return be->ops->host_alloc(be->ctx, ptr, bytes);
}

void
sl_backend_host_free(sl_backend_t *be, void **ptr)
{
    if (*ptr == NULL)
        return;
    be->ops->host_free(be->ctx, *ptr);
    *ptr = NULL;
}
