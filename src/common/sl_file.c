/* Whole-file reads, atomic replacement (with the replaced file kept, for checkpoint
 * generations), removal of stale temp files, a rename decided under a lock, mkdir -p. */
#define _DEFAULT_SOURCE /* flock */
#define _POSIX_C_SOURCE 200809L
#include "common/sl_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sl_log.h"

#define TEMP_INFIX ".tmp." /* path.tmp.<pid> */

sl_status_t
sl_file_read_all(const char *path, char **data, size_t *len)
{
    FILE *fp;

    *data = NULL;
    *len = 0;
    fp = fopen(path, "rb");
    if (!fp)
        return sl_err_set(SL_ERR_IO, "%s: %s", path, strerror(errno));
    return sl_file_read_rest(fp, path, data, len);
}

/* Whether fp is what a whole-file read can end: a file, a pipe or socket, or a terminal
 * (read to its end of input). Any other device (/dev/zero, /dev/urandom, a disk) is not:
 * its bytes never end, or are not a file's, and reading them whole would fill memory. */
static int
has_an_end(FILE *fp)
{
    struct stat sb;

    if (fstat(fileno(fp), &sb) != 0)
        return 1; /* fread says what is wrong */
    return !(S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode)) || isatty(fileno(fp));
}

sl_status_t
sl_file_read_rest(FILE *fp, const char *path, char **data, size_t *len)
{
    char *buf = NULL;
    size_t cap = 0, n = 0;

    *data = NULL;
    *len = 0;
    if (!has_an_end(fp)) {
        fclose(fp);
        return sl_err_set(SL_ERR_IO, "%s: a device, not a file or a pipe", path);
    }
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

/* The error of sl_atomic_open with errno: "tmp: [what: ]reason". The temp file is
 * removed only when this call made it (created): otherwise the name holds what someone
 * else put there, or nothing. */
static sl_status_t
open_failed(sl_atomic_file_t *f, const char *what, int created)
{
    sl_status_t st = sl_err_set(SL_ERR_IO, "%s: %s%s%s", f->tmp_path, what ? what : "",
                                what ? ": " : "", strerror(errno));
    if (!created) {
        free(f->tmp_path);
        f->tmp_path = NULL;
    }
    sl_atomic_abort(f);
    return st;
}

sl_status_t
sl_file_temp_name(const char *path, char *out, size_t size)
{
    int n = snprintf(out, size, "%s%s%ld", path, TEMP_INFIX, (long)getpid());

    if (n < 0 || (size_t)n >= size)
        return sl_err_set(SL_ERR_INVALID, "%s: path too long for its temporary file", path);
    return SL_OK;
}

/* What lstat says path is, for a refusal; NULL for a regular file or nothing there. */
static const char *
not_regular(const char *path)
{
    struct stat sb;

    if (lstat(path, &sb) != 0 || S_ISREG(sb.st_mode))
        return NULL;
    if (S_ISDIR(sb.st_mode))
        return "a directory";
    if (S_ISLNK(sb.st_mode))
        return "a symbolic link";
    if (S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode))
        return "a device";
    if (S_ISFIFO(sb.st_mode))
        return "a FIFO";
    return "a socket";
}

sl_status_t
sl_atomic_open(sl_atomic_file_t *f, const char *path)
{
    size_t n = strlen(path) + 32;
    const char *kind;
    sl_status_t st;
    int fd;

    memset(f, 0, sizeof *f);
    kind = not_regular(path);
    if (kind)
        return sl_err_set(
            SL_ERR_IO, "%s: is %s, not a regular file; shoal replaces only regular files%s", path,
            kind, strcmp(kind, "a symbolic link") == 0 ? " (give the path it points to)" : "");
    f->path = strdup(path);
    f->tmp_path = malloc(n);
    if (!f->path || !f->tmp_path) {
        sl_atomic_abort(f);
        return sl_err_set(SL_ERR_NOMEM, "%s: out of memory", path);
    }
    st = sl_file_temp_name(path, f->tmp_path, n);
    if (st != SL_OK) {
        free(f->tmp_path); /* a name cut short: nothing of ours to remove */
        f->tmp_path = NULL;
        sl_atomic_abort(f);
        return st;
    }
    if (unlink(f->tmp_path) != 0 && errno != ENOENT)
        return open_failed(f, "cannot remove the old temporary file", 0);
    fd = open(f->tmp_path, O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0)
        return open_failed(f, NULL, 0);
    f->fp = fdopen(fd, "wb");
    if (!f->fp) {
        int e = errno;
        close(fd);
        errno = e;
        return open_failed(f, NULL, 1);
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

/* The directory that holds path ("." for a bare name), malloc'd; NULL without memory. */
static char *
parent_of(const char *path)
{
    char *dir = strdup(path);
    char *slash = dir ? strrchr(dir, '/') : NULL;

    if (!dir)
        return NULL;
    if (slash == dir)
        slash[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        strcpy(dir, ".");
    return dir;
}

static void
fsync_parent_dir(const char *path)
{
    char *dir = parent_of(path);
    int fd;

    if (!dir)
        return;
    fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

sl_status_t
sl_atomic_commit_keep(sl_atomic_file_t *f, const char *prev_path)
{
    sl_status_t st = SL_OK;

    if (fflush(f->fp) != 0 || fsync(fileno(f->fp)) != 0)
        st = sl_err_set(SL_ERR_IO, "%s: cannot flush: %s", f->tmp_path, strerror(errno));
    if (fclose(f->fp) != 0 && st == SL_OK)
        st = sl_err_set(SL_ERR_IO, "%s: cannot close: %s", f->tmp_path, strerror(errno));
    f->fp = NULL;
    if (st == SL_OK && prev_path) {
        /* the old file becomes the previous one before the new one takes its name, and
         * the directory says so first, so that no crash can lose both */
        if (rename(f->path, prev_path) == 0)
            fsync_parent_dir(f->path);
        else if (errno != ENOENT)
            st = sl_err_set(SL_ERR_IO, "%s: cannot keep it as %s: %s", f->path, prev_path,
                            strerror(errno));
    }
    if (st == SL_OK && rename(f->tmp_path, f->path) != 0)
        st = sl_err_set(SL_ERR_IO, "%s: cannot rename into place: %s", f->path, strerror(errno));
    if (st == SL_OK)
        fsync_parent_dir(f->path);
    sl_atomic_abort(f);
    return st;
}

sl_status_t
sl_atomic_commit(sl_atomic_file_t *f)
{
    return sl_atomic_commit_keep(f, NULL);
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
sl_file_lock_try(const char *path, int *fd, int *state)
{
    *state = -1;
    if ((*fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0)
        return sl_err_set(SL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (flock(*fd, LOCK_EX | LOCK_NB) == 0)
        *state = 1;
    else if (errno == EWOULDBLOCK)
        *state = 0;
    if (*state < 0) {
        close(*fd);
        *fd = -1;
    }
    return SL_OK;
}

sl_status_t
sl_file_rename_locked(const char *from, const char *path, int (*keep)(const char *path, void *ctx),
                      void *ctx, int *renamed)
{
    char *dir = parent_of(path);
    sl_status_t st = SL_OK;
    int fd;

    *renamed = 0;
    if (!dir)
        return sl_err_set(SL_ERR_NOMEM, "%s: out of memory", path);
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        st = sl_err_set(SL_ERR_IO, "%s: %s", dir, strerror(errno));
    while (st == SL_OK && flock(fd, LOCK_EX) != 0)
        if (errno != EINTR)
            st = sl_err_set(SL_ERR_IO, "%s: cannot lock: %s", dir, strerror(errno));
    if (st == SL_OK && !keep(path, ctx)) {
        if (rename(from, path) != 0)
            st = sl_err_set(SL_ERR_IO, "%s: cannot rename %s into place: %s", path, from,
                            strerror(errno));
        else
            *renamed = 1;
    }
    if (*renamed)
        fsync_parent_dir(path);
    if (fd >= 0)
        close(fd); /* drops the lock */
    free(dir);
    return st;
}

/* Is name base + ".tmp." + digits? */
static int
is_temp_of(const char *name, const char *base)
{
    size_t nb = strlen(base), ni = strlen(TEMP_INFIX);
    const char *digits = name + nb + ni;

    return strncmp(name, base, nb) == 0 && strncmp(name + nb, TEMP_INFIX, ni) == 0 &&
           *digits != '\0' && strspn(digits, "0123456789") == strlen(digits);
}

sl_status_t
sl_file_remove_stale_temps(const char *path, int *removed)
{
    char *dir = parent_of(path), *entry;
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    struct dirent *e;
    DIR *d;
    size_t size;
    int n = 0;

    if (removed)
        *removed = 0;
    if (!dir)
        return sl_err_set(SL_ERR_NOMEM, "%s: out of memory", path);
    if ((d = opendir(dir)) == NULL) {
        /* no directory: nothing to remove, and the write itself will say why */
        sl_status_t st = errno == ENOENT || errno == ENOTDIR
                             ? SL_OK
                             : sl_err_set(SL_ERR_IO, "%s: %s", dir, strerror(errno));
        free(dir);
        return st;
    }
    size = strlen(dir) + NAME_MAX + 2;
    entry = malloc(size);
    while (entry && (e = readdir(d)) != NULL) {
        if (!is_temp_of(e->d_name, base))
            continue;
        snprintf(entry, size, "%s/%s", dir, e->d_name);
        if (unlink(entry) == 0) {
            sl_log_info("file", "removed %s, left by an interrupted write", entry);
            n++;
        } else {
            sl_log_warn("file", "%s: cannot remove this stale temporary file: %s", entry,
                        strerror(errno));
        }
    }
    closedir(d);
    free(dir);
    if (!entry)
        return sl_err_set(SL_ERR_NOMEM, "%s: out of memory", path);
    free(entry);
    if (removed)
        *removed = n;
    return SL_OK;
}

int
sl_file_same(const char *a, const char *b)
{
    struct stat sa, sb;

    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
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
            struct stat sb;

            *s = '\0';
            /* a file of that name is no directory (mkdir says only EEXIST) */
            if (mkdir(p, 0777) != 0 &&
                (errno != EEXIST || stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))) {
                sl_status_t st = sl_err_set(SL_ERR_IO, "%s: cannot create directory: %s", p,
                                            strerror(errno == EEXIST ? ENOTDIR : errno));
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
