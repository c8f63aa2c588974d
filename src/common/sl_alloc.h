/* Allocation: 64-byte aligned buffers for kernels, checked counts. */
#ifndef SL_ALLOC_H
#define SL_ALLOC_H

#include <stddef.h>

#include "common/sl_status.h"

#define SL_ALIGN 64

/* Allocates count*size bytes aligned to SL_ALIGN into *out (zeroed when zero != 0).
 * SL_ERR_NOMEM on overflow or failure, or, from 64 MiB on, when this process has less
 * memory available (sl_meminfo.h: the machine's, or its job's cgroup limit), where the
 * kernel would grant it and kill the process that touched it. The message names what
 * (say there which keys size it: "parameters (data.vocab_size, model.embedding,
 * model.layers)") and the bytes in human units. Free with sl_free. */
sl_status_t sl_alloc(void **out, size_t count, size_t size, int zero, const char *what);
void sl_free(void *p);

/* bytes in human units into buf: "512 bytes", "3.2 KiB", "1.50 GiB" (powers of 1024,
 * three significant digits). Returns buf. */
char *sl_format_bytes(double bytes, char *buf, size_t size);

/* Blocks up to this size come from the heap, and the heap keeps up to
 * SL_ALLOC_KEEP_BYTES freed at its top (sl_alloc_keep_large_blocks). */
#define SL_ALLOC_HEAP_BLOCK_BYTES ((size_t)32 << 20)
#define SL_ALLOC_KEEP_BYTES ((size_t)256 << 20)

/* For a process that moves large frames (a node, a benchmark): asks the C library
 * (glibc's mallopt; elsewhere nothing) to serve blocks up to SL_ALLOC_HEAP_BLOCK_BYTES
 * from its heaps and to keep what is freed. A transport allocates and frees a frame's
 * bytes at every message, in ZeroMQ's threads too; by default glibc gives blocks of
 * that kind back to the kernel and faults their pages in afresh next time (a ZeroMQ
 * exchange of 4 MiB then runs at about 60% of the speed: bench/README.md).
 * Process-wide: only programs call it, at start, never the library. Returns 1 when the
 * settings were taken. */
int sl_alloc_keep_large_blocks(void);

#define SL_ALLOC(pp, count, what) sl_alloc((void **)(pp), (count), sizeof **(pp), 0, (what))
#define SL_CALLOC(pp, count, what) sl_alloc((void **)(pp), (count), sizeof **(pp), 1, (what))

#endif
