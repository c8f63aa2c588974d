/* Tests of the node's ipc directory (src/node/sl_ipc_dir.c): it is made 0700 and shared
 * by the nodes of a run, a directory of that name that is not the user's own and private
 * (a wider mode, a symbolic link, a file, another owner) is refused naming its owner,
 * the last node to leave removes it, and the directories of dead runs beside it are
 * swept while those of live runs, young ones and anything not ours stay. Ends with a
 * node (sl_node_run) that meets such a directory at the run's name. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/sl_log.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "node/sl_ipc_dir.h"
#include "node/sl_node.h"
#include "node/sl_rendezvous.h"
#include "test_tool.h"

#define NOBODY 65534 /* an owner other than us, when we are root and may chown */

static char tmp_root[] = "/tmp/shoal-check-ipc-dir-XXXXXX";
static char data_dir[1024];

static void
path_in(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", tmp_root, name);
}

/* A socket file at path, bound and left: listening (live; the caller closes the returned
 * descriptor) or closed at once (a dead node's, which refuses connections: returns -1). */
static int
socket_file(const char *path, int live)
{
    struct sockaddr_un sa;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    ck_assert_int_ge(fd, 0);
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    ck_assert_uint_lt(strlen(path), sizeof sa.sun_path);
    memcpy(sa.sun_path, path, strlen(path));
    ck_assert_msg(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "%s: %s", path,
                  strerror(errno));
    if (live) {
        ck_assert_int_eq(listen(fd, 4), 0);
        return fd;
    }
    close(fd);
    return -1;
}

/* Sets the modification time of path (itself, not a link's target) age_s seconds back. */
static void
age(const char *path, int age_s)
{
    struct timespec t[2];

    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= age_s;
    t[1] = t[0];
    ck_assert_int_eq(utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW), 0);
}

static int
exists(const char *path)
{
    struct stat sb;

    return lstat(path, &sb) == 0;
}

/* A run's directory dir/shoal-<id> with a rank-0 socket (live or dead), mode, aged
 * age_s; its path into out. Returns the live socket's descriptor, or -1. */
static int
run_dir(char *out, size_t cap, const char *parent, uint64_t id, int live, mode_t mode, int age_s)
{
    char sock[1200];
    int fd;

    snprintf(out, cap, "%s/shoal-%016" PRIx64, parent, id);
    ck_assert_int_eq(mkdir(out, 0700), 0);
    snprintf(sock, sizeof sock, "%s/rank-0", out);
    fd = socket_file(sock, live);
    ck_assert_int_eq(chmod(out, mode), 0);
    age(out, age_s);
    return fd;
}

/* ---------------------------------------------------------------- core */

/* Made 0700; a second node of the run accepts it; it goes when the last node leaves. */
START_TEST(test_claim_shared_then_left)
{
    char dir[1100], s0[1200], s1[1200];
    struct stat sb;

    path_in(dir, sizeof dir, "shoal-00000000000000aa");
    ck_assert_msg(sl_ipc_dir_claim(dir) == SL_OK, "%s", sl_err_msg());
    ck_assert_int_eq(lstat(dir, &sb), 0);
    ck_assert(S_ISDIR(sb.st_mode));
    ck_assert_uint_eq(sb.st_uid, getuid());
    ck_assert_uint_eq(sb.st_mode & 0777, 0700);
    ck_assert_msg(sl_ipc_dir_claim(dir) == SL_OK, "a second node: %s", sl_err_msg());
    snprintf(s0, sizeof s0, "%s/rank-0", dir);
    snprintf(s1, sizeof s1, "%s/rank-1", dir);
    socket_file(s0, 0);
    socket_file(s1, 0);
    sl_ipc_dir_leave(dir, s0);
    ck_assert(!exists(s0));
    ck_assert_msg(exists(dir) && exists(s1), "the first node to leave removed the directory");
    sl_ipc_dir_leave(dir, s1);
    ck_assert_msg(!exists(dir), "the last node to leave kept the directory");
    sl_ipc_dir_leave(NULL, ""); /* nothing of either kind */
}
END_TEST

/* Of the directories beside ours, only the old ones whose sockets nobody listens on go:
 * a node's and a shoal run's. */
START_TEST(test_sweep_dead_only)
{
    char parent[1100], mine[1200], dead[1200], live[1200], young[1200], extra[1200], open_dir[1200],
        link[1200], target[1200], supervisor[1200], foreign[1200], path[1300];
    int fd, old = 2 * SL_IPC_DIR_STALE_S;

    path_in(parent, sizeof parent, "sweep");
    ck_assert_int_eq(mkdir(parent, 0700), 0);
    run_dir(mine, sizeof mine, parent, 1, 0, 0700, old); /* ours: never swept */
    run_dir(dead, sizeof dead, parent, 2, 0, 0700, old);
    fd = run_dir(live, sizeof live, parent, 3, 1, 0700, old);
    run_dir(young, sizeof young, parent, 4, 0, 0700, 10);
    run_dir(extra, sizeof extra, parent, 5, 0, 0700, 0);
    snprintf(path, sizeof path, "%s/notes.txt", extra);
    test_write_file(path, "mine\n", 5);
    age(extra, old);
    run_dir(open_dir, sizeof open_dir, parent, 6, 0, 0755, old);
    /* a symbolic link with a run's name, to a dead run's directory elsewhere */
    run_dir(target, sizeof target, tmp_root, 7, 0, 0700, old);
    snprintf(link, sizeof link, "%s/shoal-%016x", parent, 7u);
    ck_assert_int_eq(symlink(target, link), 0);
    age(link, old);
    /* a shoal run killed before it removed its directory (mkdtemp's name) */
    snprintf(supervisor, sizeof supervisor, "%s/shoal-run-Ab12Cd", parent);
    ck_assert_int_eq(mkdir(supervisor, 0700), 0);
    age(supervisor, old);

    ck_assert_int_eq(sl_ipc_dir_sweep(mine, SL_IPC_DIR_STALE_S), 2);
    ck_assert_msg(!exists(dead), "the dead run's directory was kept");
    ck_assert_msg(exists(mine), "our own run's directory was removed");
    snprintf(path, sizeof path, "%s/rank-0", live);
    ck_assert_msg(exists(path), "the live run's socket was removed");
    ck_assert_msg(exists(young), "a directory too young was removed");
    snprintf(path, sizeof path, "%s/rank-0", extra);
    ck_assert_msg(exists(path), "a directory holding another file was swept");
    snprintf(path, sizeof path, "%s/rank-0", open_dir);
    ck_assert_msg(exists(path), "a directory open to others was swept");
    snprintf(path, sizeof path, "%s/rank-0", target);
    ck_assert_msg(exists(link) && exists(path), "a symbolic link was followed");
    ck_assert_msg(!exists(supervisor), "a dead shoal run's directory was kept");
    close(fd);

    /* the live run ends without removing its directory: now it goes too */
    ck_assert_int_eq(sl_ipc_dir_sweep(mine, SL_IPC_DIR_STALE_S), 1);
    ck_assert(!exists(live));
    if (getuid() != 0) {
        fprintf(stderr, "check_ipc_dir: not root: the case of another user's dead run's "
                        "directory is skipped\n");
        return;
    }
    run_dir(foreign, sizeof foreign, parent, 8, 0, 0700, 0);
    snprintf(path, sizeof path, "%s/rank-0", foreign);
    ck_assert_int_eq(lchown(path, NOBODY, NOBODY), 0);
    ck_assert_int_eq(chown(foreign, NOBODY, NOBODY), 0);
    age(foreign, old);
    ck_assert_int_eq(sl_ipc_dir_sweep(mine, SL_IPC_DIR_STALE_S), 0);
    ck_assert_msg(exists(path), "another user's directory was swept");
}
END_TEST

/* ---------------------------------------------------------------- limits */

/* Refuses a directory at the name that is not ours and private, saying whose it is,
 * and changes nothing about it. */
START_TEST(test_claim_refuses)
{
    char dir[1100], target[1100], want[1300];
    struct stat sb;
    static const struct {
        const char *name, *why;
        int kind; /* 0 a directory of that mode, 1 a symbolic link, 2 a file, 3 nobody's */
        mode_t mode;
    } cases[] = {
        {"shoal-0000000000000001", "mode 0755 lets others in", 0, 0755},
        {"shoal-0000000000000002", "mode 0770 lets others in", 0, 0770},
        {"shoal-0000000000000003", "mode 0701 lets others in", 0, 0701},
        {"shoal-0000000000000004", "a symbolic link", 1, 0700},
        {"shoal-0000000000000005", "not a directory", 2, 0},
        {"shoal-0000000000000006", "owned by uid 65534", 3, 0700},
    };

    path_in(target, sizeof target, "somewhere");
    ck_assert_int_eq(mkdir(target, 0700), 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        path_in(dir, sizeof dir, cases[i].name);
        if (cases[i].kind == 3 && getuid() != 0) {
            fprintf(stderr, "check_ipc_dir: not root: the case of another user's directory "
                            "is skipped\n");
            continue;
        }
        if (cases[i].kind == 1) {
            ck_assert_int_eq(symlink(target, dir), 0);
        } else if (cases[i].kind == 2) {
            test_write_file(dir, "x", 1);
        } else {
            ck_assert_int_eq(mkdir(dir, 0700), 0);
            ck_assert_int_eq(chmod(dir, cases[i].mode), 0);
        }
        if (cases[i].kind == 3)
            ck_assert_int_eq(chown(dir, NOBODY, NOBODY), 0);
        ck_assert_int_eq(sl_ipc_dir_claim(dir), SL_ERR_IO);
        snprintf(want, sizeof want, "%s: refused as the ipc directory: ", dir);
        ck_assert_msg(strncmp(sl_err_msg(), want, strlen(want)) == 0, "%s", sl_err_msg());
        ck_assert_msg(strstr(sl_err_msg(), cases[i].why), "%s", sl_err_msg());
        ck_assert_msg(strstr(sl_err_msg(), "owned by uid "), "no owner: %s", sl_err_msg());
        ck_assert_ptr_null(strchr(sl_err_msg(), '\n'));
        ck_assert_int_eq(lstat(dir, &sb), 0);
        if (cases[i].kind == 1)
            ck_assert(S_ISLNK(sb.st_mode));
        else if (cases[i].kind != 2)
            ck_assert_uint_eq(sb.st_mode & 07777, cases[i].mode);
    }
    ck_assert_int_eq(lstat(target, &sb), 0);
    ck_assert_uint_eq(sb.st_mode & 07777, 0700);
}
END_TEST

/* The fixture of the node test: the run's name, once rank 0 knows its master address. */
typedef struct {
    const sl_config_t *cfg;
    const char *tmp;
    char dir[1100];
} squat_t;

/* on_master: someone made the run's directory first, open to all. */
static void
squat(void *ctx, const char *master)
{
    squat_t *q = ctx;
    uint64_t id;

    ck_assert_int_eq(sl_rendezvous_run_id(q->cfg, master, &id), SL_OK);
    snprintf(q->dir, sizeof q->dir, "%s/shoal-%016" PRIx64, q->tmp, id);
    ck_assert_int_eq(mkdir(q->dir, 0700), 0);
    ck_assert_int_eq(chmod(q->dir, 0777), 0);
}

/* A node whose run's ipc directory someone else made first stops with the error before
 * it binds anything there; a dead run's directory beside it is gone all the same. */
START_TEST(test_node_refuses_squatted_dir)
{
    sl_config_t cfg;
    sl_node_opts_t o;
    sl_node_result_t res;
    squat_t q = {0};
    char tmp[1100], dead[1200], want[1300];
    sl_status_t st;

    path_in(tmp, sizeof tmp, "tmp");
    ck_assert_int_eq(mkdir(tmp, 0700), 0);
    setenv("TMPDIR", tmp, 1);
    run_dir(dead, sizeof dead, tmp, 0x5eed, 0, 0700, 2 * SL_IPC_DIR_STALE_S);
    test_tiny_config(&cfg, tmp_root, data_dir, "squat", "cluster.nodes=2", "cluster.transport=ipc",
                     "cluster.rendezvous_timeout_ms=3000", "cluster.security=none", NULL);
    q.cfg = &cfg;
    q.tmp = tmp;
    sl_node_opts_init(&o);
    o.rank = 0;
    o.size = 2;
    o.master = "127.0.0.1:0";
    o.quiet = 1;
    o.on_master = squat;
    o.hook_ctx = &q;
    st = sl_node_run(&cfg, &o, &res);
    ck_assert_int_eq(st, SL_ERR_IO);
    snprintf(want, sizeof want, "%s: refused as the ipc directory: mode 0777", q.dir);
    ck_assert_msg(strncmp(sl_err_msg(), want, strlen(want)) == 0, "%s", sl_err_msg());
    ck_assert_int_eq(res.trained, 0);
    snprintf(want, sizeof want, "%s/rank-0", q.dir);
    ck_assert_msg(!exists(want), "the node bound its socket in a directory it refused");
    ck_assert_msg(exists(q.dir), "the node removed a directory it did not claim");
    ck_assert_msg(!exists(dead), "the dead run's directory beside it was kept");
    sl_config_fini(&cfg);
}
END_TEST

static Suite *
ipc_dir_suite(void)
{
    Suite *s = suite_create("ipc_dir");
    TCase *core = tcase_create("core");
    TCase *limits = tcase_create("limits");

    tcase_add_test(core, test_claim_shared_then_left);
    tcase_add_test(core, test_sweep_dead_only);
    tcase_add_test(limits, test_claim_refuses);
    tcase_add_test(limits, test_node_refuses_squatted_dir);
    tcase_set_timeout(limits, 60); /* a hang guard: a node meets nobody */
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    test_data_dir(data_dir, sizeof data_dir);
    sl_log_set_level(SL_LOG_ERROR);
    return test_main_in_tmp(ipc_dir_suite(), tmp_root, "check_ipc_dir");
}
