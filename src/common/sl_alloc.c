/* Aligned allocation with overflow checks. */
#include "common/sl_alloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

sl_status_t
sl_alloc(void **out, size_t count, size_t size, int zero, const char *what)
{
    size_t bytes;
    void *p = NULL;

    *out = NULL;
    if (size && count > SIZE_MAX / size)
        return sl_err_set(SL_ERR_NOMEM, "%s: %zu x %zu bytes is more than this machine can address",
                          what, count, size);
    bytes = count * size;
    if (bytes == 0)
        bytes = SL_ALIGN;
    bytes = (bytes + SL_ALIGN - 1) / SL_ALIGN * SL_ALIGN;
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
