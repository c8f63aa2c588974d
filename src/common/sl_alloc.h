/* Allocation: 64-byte aligned buffers for kernels, checked counts. */
#ifndef SL_ALLOC_H
#define SL_ALLOC_H

#include <stddef.h>

#include "common/sl_status.h"

#define SL_ALIGN 64

/* Allocates count*size bytes aligned to SL_ALIGN into *out (zeroed when zero != 0).
 * SL_ERR_NOMEM (with message naming what) on overflow or failure. Free with sl_free. */
sl_status_t sl_alloc(void **out, size_t count, size_t size, int zero, const char *what);
void sl_free(void *p);

#define SL_ALLOC(pp, count, what) sl_alloc((void **)(pp), (count), sizeof **(pp), 0, (what))
#define SL_CALLOC(pp, count, what) sl_alloc((void **)(pp), (count), sizeof **(pp), 1, (what))

#endif
