/* The memory this process can still take (sl_meminfo.h): /proc/meminfo's MemAvailable
 * and the limits of its memory cgroups, v2 (unified) or v1. */
#define _POSIX_C_SOURCE 200809L
#include "common/sl_meminfo.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define PATH_BYTES 4096
/* v1 writes "no limit" as about 2^63, rounded to its page size */
#define UNLIMITED (UINT64_C(1) << 62)

/* The number after key at the start of one of file's lines ("MemAvailable:  12 kB",
 * "file 12"). 1 with it in *out, 0 when there is none. */
static int
read_key(const char *file, const char *key, uint64_t *out)
{
    FILE *f = fopen(file, "r");
    char line[256];
    size_t k = strlen(key);
    unsigned long long v;
    int found = 0;

    if (!f)
        return 0;
    while (!found && fgets(line, sizeof line, f))
        found = strncmp(line, key, k) == 0 && sscanf(line + k, "%*[: \t]%llu", &v) == 1;
    fclose(f);
    if (found)
        *out = (uint64_t)v;
    return found;
}

/* The number file holds alone (memory.max, memory.current, ...): 1 with it in *out, 0
 * when it holds none ("max") or is not there. */
static int
read_number(const char *file, uint64_t *out)
{
    FILE *f = fopen(file, "r");
    unsigned long long v;
    int found;

    if (!f)
        return 0;
    found = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    if (found)
        *out = (uint64_t)v;
    return found;
}

/* Lowers *avail to what the cgroups at base + path and above, up to base, leave: the
 * limit (file limit_name) less the usage (usage_name), the file cache of memory.stat
 * (cache_key) counted as free. */
static void
cgroup_walk(const char *base, const char *path, const char *limit_name, const char *usage_name,
            const char *cache_key, uint64_t *avail)
{
    char dir[PATH_BYTES], file[PATH_BYTES + 64];
    char *slash;

    snprintf(dir, sizeof dir, "%s", path);
    for (;;) {
        uint64_t limit, usage, cache = 0, used, left;

        snprintf(file, sizeof file, "%s%s/%s", base, dir, limit_name);
        if (read_number(file, &limit) && limit < UNLIMITED) {
            snprintf(file, sizeof file, "%s%s/%s", base, dir, usage_name);
            if (read_number(file, &usage)) {
                snprintf(file, sizeof file, "%s%s/memory.stat", base, dir);
                read_key(file, cache_key, &cache);
                used = usage > cache ? usage - cache : 0;
                left = used < limit ? limit - used : 0;
                if (left < *avail)
                    *avail = left;
            }
        }
        if (!dir[0] || !(slash = strrchr(dir, '/')))
            break;
        *slash = '\0'; /* "/a/b" -> "/a" -> "" (the base itself) */
    }
}

uint64_t
sl_mem_available_at(const char *root)
{
    char file[PATH_BYTES], line[PATH_BYTES], base[PATH_BYTES];
    uint64_t avail = UINT64_MAX, kb;
    FILE *f;

    snprintf(file, sizeof file, "%s/proc/meminfo", root);
    if (read_key(file, "MemAvailable", &kb))
        avail = kb * 1024;
    snprintf(file, sizeof file, "%s/proc/self/cgroup", root);
    if ((f = fopen(file, "r")) != NULL) {
        while (fgets(line, sizeof line, f)) {
            char *ctrl = strchr(line, ':'), *path = ctrl ? strchr(ctrl + 1, ':') : NULL;
            if (!path)
                continue;
            *path++ = '\0';
            path[strcspn(path, "\n")] = '\0';
            if (strcmp(ctrl + 1, "") == 0) { /* "0::/path": v2, unified or beside v1 */
                snprintf(base, sizeof base, "%s/sys/fs/cgroup/cgroup.controllers", root);
                if (access(base, F_OK) == 0)
                    snprintf(base, sizeof base, "%s/sys/fs/cgroup", root);
                else
                    snprintf(base, sizeof base, "%s/sys/fs/cgroup/unified", root);
                cgroup_walk(base, path, "memory.max", "memory.current", "file", &avail);
            } else if (strstr(ctrl + 1, "memory")) { /* "4:memory:/path": v1 */
                snprintf(base, sizeof base, "%s/sys/fs/cgroup/memory", root);
                cgroup_walk(base, path, "memory.limit_in_bytes", "memory.usage_in_bytes",
                            "total_cache", &avail);
            }
        }
        fclose(f);
    }
    if (avail == UINT64_MAX)
        return 0;
    return avail ? avail : 1; /* nothing left is not "nothing says" */
}

uint64_t
sl_mem_available(void)
{
    return sl_mem_available_at("");
}
