/* The memory this process can still take: the machine's, and its memory cgroup's (a
 * batch system's job limit, e.g. Slurm's --mem), whichever leaves less. */
#ifndef SL_MEMINFO_H
#define SL_MEMINFO_H

#include <stdint.h>

/* Bytes this process can still allocate without swapping or being killed for it: the
 * machine's MemAvailable (/proc/meminfo), or less where a memory cgroup of this
 * process or one above it has a limit (cgroup v2 memory.max, v1 memory.limit_in_bytes)
 * with less left under it (the limit less the usage, file cache counted as free, as
 * the kernel takes it back before it kills). 0 when nothing says. */
uint64_t sl_mem_available(void);
/* The same with every path under root ("" for this machine's; tests give a folder that
 * holds proc/meminfo, proc/self/cgroup and sys/fs/cgroup/...). */
uint64_t sl_mem_available_at(const char *root);

#endif
