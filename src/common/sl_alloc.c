/* Aligned allocation with overflow checks, and large blocks weighed against memory. */
#include "common/sl_alloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "common/sl_meminfo.h"

/* From this size on an allocation is weighed against the memory this process has. */
#define SL_ALLOC_CHECKED ((size_t)64 << 20)

sl_status_t
sl_alloc(void **out, size_t count, size_t size, int zero, const char *what)
{
    size_t bytes;
    uint64_t avail;
    void *p = NULL;

    *out = NULL;
    if (size && count > SIZE_MAX / size)
        return sl_err_set(SL_ERR_NOMEM, "%s: %zu x %zu bytes is more than this machine can address",
                          what, count, size);
    bytes = count * size;
    if (bytes == 0)
        bytes = SL_ALIGN;
    bytes = (bytes + SL_ALIGN - 1) / SL_ALIGN * SL_ALIGN;
    /* the kernel grants more than it has (overcommit), then kills the process that
     * touches it: a one-line error here instead */
    if (bytes >= SL_ALLOC_CHECKED && (avail = sl_mem_available()) != 0 && bytes > avail) {
        char want[32], have[32];
        return sl_err_set(SL_ERR_NOMEM, "%s: %s asked for, %s of memory available to this process",
                          what, sl_format_bytes((double)bytes, want, sizeof want),
                          sl_format_bytes((double)avail, have, sizeof have));
    }
    if (posix_memalign(&p, SL_ALIGN, bytes) != 0) {
        char human[32];
        return sl_err_set(SL_ERR_NOMEM, "%s: cannot allocate %s of memory", what,
                          sl_format_bytes((double)bytes, human, sizeof human));
    }
    if (zero)
        memset(p, 0, bytes);
    *out = p;
    return SL_OK;
}

void
sl_free(void *p)
{
    free(p);
}

char *
sl_format_bytes(double bytes, char *buf, size_t size)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = -1;

    if (bytes < 1024) {
        snprintf(buf, size, "%.0f bytes", bytes);
        return buf;
    }
    while (bytes >= 1024 && u < 5) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, size, "%.*f %s", bytes < 10 ? 2 : bytes < 100 ? 1 : 0, bytes, units[u]);
    return buf;
}

int
sl_alloc_keep_large_blocks(void)
{
#ifdef __GLIBC__
    /* the mmap threshold first: setting either one ends glibc's own adjustments */
    return mallopt(M_MMAP_THRESHOLD, (int)SL_ALLOC_HEAP_BLOCK_BYTES) == 1 &&
           mallopt(M_TRIM_THRESHOLD, (int)SL_ALLOC_KEEP_BYTES) == 1;
#else
    return 0;
#endif
}
