/* Files: whole-file reads and atomic writes (temp file, fsync, rename, fsync dir),
 * so that a checkpoint, cache or metrics file is either the old one or the new one. */
#ifndef SL_FILE_H
#define SL_FILE_H

#include <stddef.h>
#include <stdio.h>

#include "common/sl_status.h"

/* Reads a whole file into a malloc'd buffer (NUL-terminated, *len excludes the NUL).
 * SL_ERR_IO "path: reason" when missing or unreadable. Caller frees with free(). */
sl_status_t sl_file_read_all(const char *path, char **data, size_t *len);

/* Atomic writer: writes go to "path.tmp.<pid>"; commit fsyncs, renames over path and
 * fsyncs the directory; abort removes the temp file and leaves path untouched. */
typedef struct {
    FILE *fp;
    char *path;
    char *tmp_path;
} sl_atomic_file_t;

sl_status_t sl_atomic_open(sl_atomic_file_t *f, const char *path);
sl_status_t sl_atomic_write(sl_atomic_file_t *f, const void *data, size_t bytes);
sl_status_t sl_atomic_commit(sl_atomic_file_t *f);
void sl_atomic_abort(sl_atomic_file_t *f);

/* mkdir -p; SL_ERR_IO naming the part that failed. */
sl_status_t sl_file_mkdirs(const char *path);

#endif
