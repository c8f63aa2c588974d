/* The ipc directory of a node (sl_ipc_dir.h): claimed only when it is the user's own,
 * and the directories of dead runs beside it swept away. */
#define _POSIX_C_SOURCE 200809L
#include "node/sl_ipc_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/sl_log.h"

#define RUN_DIR_PREFIX "shoal-"
#define RUN_DIR_HEX 16 /* the run id, as sl_node.c names the directory */
#define LAUNCH_DIR_PREFIX "shoal-run-" /* then mkdtemp's 6 characters (sl_supervisor.c) */
#define LAUNCH_DIR_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
#define SOCKET_PREFIX "rank-"

/* Whether sb (from lstat) is a directory of this user's that nobody else may enter. */
static int
own_private_dir(const struct stat *sb)
{
    return S_ISDIR(sb->st_mode) && sb->st_uid == getuid() && (sb->st_mode & 077) == 0;
}

/* "uid 1000 (alice)" into buf. */
static const char *
owner_name(uid_t uid, char *buf, size_t cap)
{
    struct passwd pw, *found = NULL;
    char names[1024];

    if (getpwuid_r(uid, &pw, names, sizeof names, &found) == 0 && found)
        snprintf(buf, cap, "uid %u (%s)", (unsigned)uid, found->pw_name);
    else
        snprintf(buf, cap, "uid %u", (unsigned)uid);
    return buf;
}

sl_status_t
sl_ipc_dir_claim(const char *dir)
{
    struct stat sb;
    char owner[300], me[300];

    if (mkdir(dir, 0700) == 0)
        return SL_OK;
    if (errno != EEXIST)
        return sl_err_set(SL_ERR_IO, "%s: cannot create the ipc directory: %s", dir,
                          strerror(errno));
    if (lstat(dir, &sb) != 0)
        return sl_err_set(SL_ERR_IO, "%s: ipc directory: %s", dir, strerror(errno));
    owner_name(sb.st_uid, owner, sizeof owner);
    if (S_ISLNK(sb.st_mode))
        return sl_err_set(SL_ERR_IO,
                          "%s: refused as the ipc directory: a symbolic link, owned by %s; "
                          "remove it or set TMPDIR to a directory of your own",
                          dir, owner);
    if (!S_ISDIR(sb.st_mode))
        return sl_err_set(SL_ERR_IO,
                          "%s: refused as the ipc directory: not a directory, owned by %s; "
                          "remove it or set TMPDIR to a directory of your own",
                          dir, owner);
    if (sb.st_uid != getuid())
        return sl_err_set(SL_ERR_IO,
                          "%s: refused as the ipc directory: owned by %s, not by this user "
                          "(%s); set TMPDIR to a directory of your own",
                          dir, owner, owner_name(getuid(), me, sizeof me));
    if (!own_private_dir(&sb))
        return sl_err_set(SL_ERR_IO,
                          "%s: refused as the ipc directory: mode %04o lets others in (owned "
                          "by %s); it must be 0700: remove it or chmod 0700 it",
                          dir, (unsigned)(sb.st_mode & 07777), owner);
    /* another node of this run made it, or a dead run of the same id did: it is in use
     * again, which keeps sweepers of other runs away from it (they wait SL_IPC_DIR_STALE_S) */
    if (utimensat(AT_FDCWD, dir, NULL, AT_SYMLINK_NOFOLLOW) != 0)
        sl_log_debug("node", "%s: cannot touch: %s", dir, strerror(errno));
    return SL_OK;
}

/* Whether name is a directory name a node gives its run, shoal-<16 hex digits>, or one
 * shoal run makes for its nodes, shoal-run-<6 letters or digits>. */
static int
run_dir_name(const char *name)
{
    size_t n = strlen(RUN_DIR_PREFIX), l = strlen(LAUNCH_DIR_PREFIX);

    if (strncmp(name, LAUNCH_DIR_PREFIX, l) == 0)
        return strspn(name + l, LAUNCH_DIR_CHARS) == 6 && name[l + 6] == '\0';
    return strncmp(name, RUN_DIR_PREFIX, n) == 0 &&
           strspn(name + n, "0123456789abcdef") == RUN_DIR_HEX && name[n + RUN_DIR_HEX] == '\0';
}

/* Whether name is a node's socket name: rank-<digits>. */
static int
socket_name(const char *name)
{
    size_t n = strlen(SOCKET_PREFIX), digits = strspn(name + n, "0123456789");

    return strncmp(name, SOCKET_PREFIX, n) == 0 && digits > 0 && name[n + digits] == '\0';
}

/* Whether nothing listens on the socket file at path: connect() is refused (or it is
 * gone). A connection that is accepted, or a full backlog, means a live node. */
static int
socket_dead(const char *path)
{
    struct sockaddr_un sa;
    int fd, dead;

    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof sa.sun_path)
        return 0; /* not one a node could have bound */
    memcpy(sa.sun_path, path, strlen(path));
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    dead = connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 &&
           (errno == ECONNREFUSED || errno == ENOENT);
    close(fd);
    return dead;
}

/* Whether every entry of the directory d (at path) is a rank-<N> socket of ours that
 * nothing listens on; with unlink_them set, removes them, each looked at once more (a node
 * may have bound one since). */
static int
sockets_all_dead(DIR *d, const char *path, int unlink_them)
{
    struct dirent *e;
    struct stat sb;
    char sock[4200];

    rewinddir(d);
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (!socket_name(e->d_name) ||
            fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISSOCK(sb.st_mode) ||
            sb.st_uid != getuid())
            return 0;
        snprintf(sock, sizeof sock, "%s/%s", path, e->d_name);
        if (!socket_dead(sock) || (unlink_them && unlinkat(dirfd(d), e->d_name, 0) != 0))
            return 0;
    }
    return 1;
}

/* Removes parent/name when it is a dead run's directory (sl_ipc_dir_sweep). */
static int
sweep_one(int parent_fd, const char *parent, const char *name, int stale_s, time_t now)
{
    struct stat sb, opened;
    char path[4100];
    DIR *d;
    int fd, dead;

    if (fstatat(parent_fd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !own_private_dir(&sb) ||
        now - sb.st_mtime < stale_s)
        return 0;
    fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 0;
    /* the directory looked at above, not one put there since */
    if (fstat(fd, &opened) != 0 || opened.st_dev != sb.st_dev || opened.st_ino != sb.st_ino ||
        !(d = fdopendir(fd))) {
        close(fd);
        return 0;
    }
    snprintf(path, sizeof path, "%s/%s", parent, name);
    dead = sockets_all_dead(d, path, 0) && sockets_all_dead(d, path, 1);
    closedir(d);
    /* fails, keeping it, when a node has bound a socket in it meanwhile */
    if (!dead || unlinkat(parent_fd, name, AT_REMOVEDIR) != 0)
        return 0;
    sl_log_info("node", "removed %s, the ipc directory of a run that is gone", path);
    return 1;
}

int
sl_ipc_dir_sweep(const char *dir, int stale_s)
{
    const char *slash = strrchr(dir, '/');
    char parent[4096];
    struct dirent *e;
    DIR *d;
    int removed = 0;
    time_t now = time(NULL);

    if (!slash || (size_t)(slash - dir) >= sizeof parent)
        return 0;
    if (slash == dir)
        snprintf(parent, sizeof parent, "/");
    else
        snprintf(parent, sizeof parent, "%.*s", (int)(slash - dir), dir);
    d = opendir(parent);
    if (!d)
        return 0;
    while ((e = readdir(d)) != NULL)
        if (run_dir_name(e->d_name) && strcmp(e->d_name, slash + 1) != 0)
            removed += sweep_one(dirfd(d), parent, e->d_name, stale_s, now);
    closedir(d);
    return removed;
}

void
sl_ipc_dir_leave(const char *dir, const char *socket_path)
{
    if (socket_path && *socket_path)
        unlink(socket_path);
    if (dir && *dir)
        rmdir(dir);
}
