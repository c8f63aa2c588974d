/* Whole-file reads, atomic replacement, mkdir -p. */
#define _POSIX_C_SOURCE 200809L
#include "common/sl_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

sl_status_t
sl_file_read_all(const char *path, char **data, size_t *len)
{
    FILE *fp;
    char *buf = NULL;
    size_t cap = 0, n = 0;

    *data = NULL;
    *len = 0;
    fp = fopen(path, "rb");
    if (!fp)
        return sl_err_set(SL_ERR_IO, "%s: %s", path, strerror(errno));
    for (;;) {
        if (n + 65536 + 1 > cap) {
            size_t ncap = cap ? cap * 2 : 1 << 20;
            char *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                fclose(fp);
                return sl_err_set(SL_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, ncap);
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, fp);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(fp)) {
        int e = errno;
        free(buf);
        fclose(fp);
        return sl_err_set(SL_ERR_IO, "%s: read error: %s", path, strerror(e));
    }
    fclose(fp);
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return SL_OK;
}

sl_status_t
sl_atomic_open(sl_atomic_file_t *f, const char *path)
{
    size_t n = strlen(path) + 32;

    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    f->tmp_path = malloc(n);
    if (!f->path || !f->tmp_path) {
        sl_atomic_abort(f);
        return sl_err_set(SL_ERR_NOMEM, "%s: out of memory", path);
    }
    snprintf(f->tmp_path, n, "%s.tmp.%ld", path, (long)getpid());
    f->fp = fopen(f->tmp_path, "wb");
    if (!f->fp) {
        sl_status_t st = sl_err_set(SL_ERR_IO, "%s: %s", f->tmp_path, strerror(errno));
        sl_atomic_abort(f);
        return st;
    }
    return SL_OK;
}

sl_status_t
sl_atomic_write(sl_atomic_file_t *f, const void *data, size_t bytes)
{
    if (bytes && fwrite(data, 1, bytes, f->fp) != bytes)
        return sl_err_set(SL_ERR_IO, "%s: write failed: %s", f->tmp_path, strerror(errno));
    return SL_OK;
}

static void
fsync_parent_dir(const char *path)
{
    char *dir = strdup(path);
    char *slash = dir ? strrchr(dir, '/') : NULL;
    int fd;

    if (!dir)
        return;
    if (slash == dir)
        slash[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        strcpy(dir, ".");
    fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

sl_status_t
sl_atomic_commit(sl_atomic_file_t *f)
{
    sl_status_t st = SL_OK;

    if (fflush(f->fp) != 0 || fsync(fileno(f->fp)) != 0)
        st = sl_err_set(SL_ERR_IO, "%s: cannot flush: %s", f->tmp_path, strerror(errno));
    if (fclose(f->fp) != 0 && st == SL_OK)
        st = sl_err_set(SL_ERR_IO, "%s: cannot close: %s", f->tmp_path, strerror(errno));
    f->fp = NULL;
    if (st == SL_OK && rename(f->tmp_path, f->path) != 0)
        st = sl_err_set(SL_ERR_IO, "%s: cannot rename into place: %s", f->path, strerror(errno));
    if (st == SL_OK)
        fsync_parent_dir(f->path);
    sl_atomic_abort(f);
    return st;
}

void
sl_atomic_abort(sl_atomic_file_t *f)
{
    if (f->fp) {
        fclose(f->fp);
        f->fp = NULL;
    }
    if (f->tmp_path)
        unlink(f->tmp_path); /* no-op after a successful rename */
    free(f->path);
    free(f->tmp_path);
    f->path = f->tmp_path = NULL;
}

sl_status_t
sl_file_mkdirs(const char *path)
{
    char *p = strdup(path);

    if (!p)
        return sl_err_set(SL_ERR_NOMEM, "%s: out of memory", path);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(p, 0777) != 0 && errno != EEXIST) {
                sl_status_t st = sl_err_set(SL_ERR_IO, "%s: cannot create directory: %s", p,
                                            strerror(errno));
                free(p);
                return st;
            }
            *s = c;
            if (c == '\0')
                break;
        }
    }
    free(p);
    return SL_OK;
}
