/* Files: whole-file reads and atomic writes (temp file, fsync, rename, fsync dir),
 * so that a checkpoint, cache or metrics file is either the old one or the new one. */
#ifndef SL_FILE_H
#define SL_FILE_H

#include <stddef.h>
#include <stdio.h>

#include "common/sl_status.h"

/* Reads a whole file into a malloc'd buffer (NUL-terminated, *len excludes the NUL).
 * SL_ERR_IO "path: reason" when missing or unreadable, or a device other than a
 * terminal (/dev/zero would never end). Caller frees with free(). */
sl_status_t sl_file_read_all(const char *path, char **data, size_t *len);
/* The same for what is left to read of fp (path names it in errors), which it closes:
 * a pipe is read once, where opening it again would wait for another writer. */
sl_status_t sl_file_read_rest(FILE *fp, const char *path, char **data, size_t *len);

/* Atomic writer: writes go to "path.tmp.<pid>"; commit fsyncs, renames over path and
 * fsyncs the directory; abort removes the temp file and leaves path untouched. The temp
 * file is always a new file: whatever was at its name (left by a crashed process of the
 * same pid, or a link planted there) is unlinked first -- unlink never follows a link --
 * and it is created with O_EXCL | O_NOFOLLOW, mode 0644 less the umask, so no write can
 * land in another file. Only a regular file (or nothing) at path is replaced: a
 * directory, symbolic link, device or FIFO there is SL_ERR_IO ("path: is a device: ...")
 * before anything is written, so that no rename takes the place of /dev/null or of a
 * link's name. */
typedef struct {
    FILE *fp;
    char *path;
    char *tmp_path;
} sl_atomic_file_t;

sl_status_t sl_atomic_open(sl_atomic_file_t *f, const char *path);
/* "path.tmp.<pid>", this process's temp file for path, into out (size bytes):
 * sl_file_remove_stale_temps removes it when a crash leaves it. SL_ERR_INVALID when
 * it does not fit. */
sl_status_t sl_file_temp_name(const char *path, char *out, size_t size);
sl_status_t sl_atomic_write(sl_atomic_file_t *f, const void *data, size_t bytes);
sl_status_t sl_atomic_commit(sl_atomic_file_t *f);
/* The same, keeping the file it replaces: path (when it exists) is first renamed to
 * prev_path (replacing it) and the directory fsynced, then the new file renamed over
 * path. A crash leaves path and prev_path as they were, or prev_path = the old path
 * and no path, or both new: never a torn file. */
sl_status_t sl_atomic_commit_keep(sl_atomic_file_t *f, const char *prev_path);
void sl_atomic_abort(sl_atomic_file_t *f);

/* Removes the temp files "path.tmp.<digits>" an interrupted atomic write of path left
 * (in path's directory, nothing else; links are removed, not followed) and logs each
 * one; *removed (may be NULL) counts them. Call it before this process writes path. No
 * directory there (missing, or not a directory) is SL_OK with none removed: the write
 * will say why it fails. A directory that cannot be read is SL_ERR_IO; an entry that
 * cannot be removed is logged and left. */
sl_status_t sl_file_remove_stale_temps(const char *path, int *removed);

/* The lock file path (made when missing), locked exclusively (flock) without waiting.
 * *state 1: locked, *fd its descriptor (O_CLOEXEC), held until it closes or the process
 * ends; 0: another process holds it, *fd open all the same (to read what the holder
 * wrote there, or to wait with flock) for the caller to close; -1: the file system has
 * no locks, *fd -1. SL_ERR_IO "path: cannot open: why". */
sl_status_t sl_file_lock_try(const char *path, int *fd, int *state);

/* Renames the complete file from over path (same filesystem) unless keep(path, ctx)
 * says that what path holds stays; *renamed says which. keep is asked, and the rename
 * made, under an exclusive lock (flock) on path's directory, waited for, so that
 * processes of one host, or of several on a shared filesystem with flock, that offer
 * files for one name decide one after the other. The directory is fsynced after a
 * rename. SL_ERR_IO (from left where it is), SL_ERR_NOMEM. */
sl_status_t sl_file_rename_locked(const char *from, const char *path,
                                  int (*keep)(const char *path, void *ctx), void *ctx,
                                  int *renamed);

/* 1 when paths a and b both exist and are one file (links followed), else 0. */
int sl_file_same(const char *a, const char *b);

/* mkdir -p; SL_ERR_IO naming the part that failed. */
sl_status_t sl_file_mkdirs(const char *path);

#endif
