/* tests/unit/test_tool.c: helpers shared by the Check tests (test_tool.h): running a
 * command-line tool, files, JSON numbers, model files, children by name, the node
 * tests' tiny configuration, checkpoints and staged shoal runs, configuration that must
 * load, a free port, adopting orphans, a rank's batches per epoch, a pause, random
 * kernel inputs, the model tests' tiny configuration, records of a model file's
 * metadata and the token sets generation may draw from. Test support only: nothing here
 * may be linked into shoal itself. */
#define _POSIX_C_SOURCE 200809L
#include "test_tool.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "common/sl_endian.h"
#include "common/sl_hash.h"
#include "common/sl_rng.h"
#include "data/sl_data.h"
#include "node/sl_checkpoint.h"

int
test_main(Suite *s)
{
    SRunner *sr = srunner_create(s);
    int failed;

    /* failures quote whole node logs; Check's 4 KiB default would lose the message */
    check_set_max_msg_size(1 << 20);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

int
test_main_in_tmp(Suite *s, char *tmp_root, const char *prog)
{
    int rc;

    if (!mkdtemp(tmp_root)) {
        fprintf(stderr, "%s: mkdtemp %s: %s\n", prog, tmp_root, strerror(errno));
        return 1;
    }
    rc = test_main(s);
    if (rc != EXIT_SUCCESS && getenv("SHOAL_TEST_KEEP")) /* the failed case's logs, to read */
        fprintf(stderr, "%s: failed; %s kept (SHOAL_TEST_KEEP)\n", prog, tmp_root);
    else
        test_remove_tree(tmp_root);
    return rc;
}

static int
remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void
test_remove_tree(const char *path)
{
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void
test_data_dir(char *buf, size_t cap)
{
    const char *data = getenv("SHOAL_DATA"), *src = getenv("SHOAL_SRCDIR");

    if (data)
        snprintf(buf, cap, "%s", data);
    else
        snprintf(buf, cap, "%s/../shared/data", src ? src : "..");
}

void
test_data_dir_absolute(char *buf, size_t cap)
{
    char given[PATH_MAX], full[PATH_MAX];

    test_data_dir(given, sizeof given);
    snprintf(buf, cap, "%s", realpath(given, full) ? full : given);
}

int
test_tool_find(const char *name, char *bin, size_t cap)
{
    const char *b = getenv("SHOAL_BUILDDIR");

    snprintf(bin, cap, "%s/tools/%s", b ? b : ".", name);
    if (access(bin, X_OK) != 0) {
        fprintf(stderr, "%s is not built; skipping the command-line case\n", bin);
        return 0;
    }
    return 1;
}

/* One of a child's output pipes: what is read into buf (cap bytes, NUL-terminated);
 * what does not fit is read and dropped, so that the writer never blocks. */
typedef struct {
    int fd;
    char *buf;
    size_t cap, got;
} sink_t;

/* Reads from s once; at its end, closes it (fd -1). */
static void
read_some(sink_t *s)
{
    char drop[4096];
    int room = s->got + 1 < s->cap;
    ssize_t k =
        read(s->fd, room ? s->buf + s->got : drop, room ? s->cap - 1 - s->got : sizeof drop);

    if (k < 0 && errno == EINTR)
        return;
    if (k <= 0) {
        close(s->fd);
        s->fd = -1;
    } else if (room) {
        s->got += (size_t)k;
    }
}

/* Reads both pipes to their ends, whichever has something: a child that fills one
 * while the other is read never waits. */
static void
read_both(sink_t *out, sink_t *err)
{
    sink_t *s[2] = {out, err};

    while (out->fd >= 0 || err->fd >= 0) {
        struct pollfd p[2] = {{out->fd, POLLIN, 0}, {err->fd, POLLIN, 0}};

        if (poll(p, 2, -1) < 0) {
            ck_assert_int_eq(errno, EINTR);
            continue;
        }
        for (int i = 0; i < 2; i++)
            if (s[i]->fd >= 0 && p[i].revents)
                read_some(s[i]);
    }
    out->buf[out->got] = '\0';
    err->buf[err->got] = '\0';
}

int
test_tool_run(const char *bin, char *out, size_t out_cap, char *err, size_t err_cap,
              const char *path, const char *const *args)
{
    const char *argv[32];
    int n = 0, status, po[2], pe[2];
    pid_t pid, parent;

    ck_assert(out_cap > 0 && err_cap > 0);
    argv[n++] = bin;
    while (*args && n < 31)
        argv[n++] = *args++;
    ck_assert_msg(*args == NULL, "test_tool_run: more than 30 arguments");
    argv[n] = NULL;
    ck_assert_int_eq(pipe(po), 0);
    ck_assert_int_eq(pipe(pe), 0);
    parent = getpid();
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
#ifdef __linux__
        /* a case Check kills on its timeout takes the program (and its nodes) with it */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
            _exit(97);
#endif
        dup2(po[1], STDOUT_FILENO);
        dup2(pe[1], STDERR_FILENO);
        close(po[0]);
        close(pe[0]);
        if (path)
            setenv("PATH", path, 1);
        execv(bin, (char *const *)argv);
        _exit(98);
    }
    close(po[1]);
    close(pe[1]);
    read_both(&(sink_t){po[0], out, out_cap, 0}, &(sink_t){pe[0], err, err_cap, 0});
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status), "%s died of signal %d", bin, WTERMSIG(status));
    return WEXITSTATUS(status);
}

char *
test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;

    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    if (len)
        *len = (size_t)n;
    return buf;
}

void
test_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");

    ck_assert_msg(f != NULL, "%s: cannot write", path);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

double
test_json_num(const char *text, const char *key)
{
    char pat[80];
    const char *p;

    snprintf(pat, sizeof pat, "\"%s\":", key);
    p = strstr(text, pat);
    ck_assert_msg(p != NULL, "no %s in %s", key, text);
    p += strlen(pat);
    while (*p == ' ')
        p++;
    if (strncmp(p, "null", 4) == 0)
        return NAN;
    return strtod(p, NULL);
}

float *
test_model_params(const char *path, size_t *n)
{
    size_t len;
    char *data = test_read_file(path, &len);
    float *p;

    ck_assert_msg(data != NULL, "%s is missing", path);
    ck_assert_uint_gt(len, SL_CKPT_HEADER_BYTES);
    *n = (size_t)sl_get_u64((const unsigned char *)data + 120); /* nparams */
    ck_assert_uint_ge(len, SL_CKPT_HEADER_BYTES + *n * sizeof *p);
    p = malloc(*n * sizeof *p);
    ck_assert_ptr_nonnull(p);
    memcpy(p, data + SL_CKPT_HEADER_BYTES, *n * sizeof *p);
    free(data);
    return p;
}

pid_t
test_child_named(pid_t parent, const char *comm)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    pid_t found = 0;

    ck_assert_ptr_nonnull(d);
    while (!found && (e = readdir(d)) != NULL) {
        char path[300], buf[512], *lp, *rp;
        FILE *f;
        size_t k;
        int ppid;

        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        if (!(f = fopen(path, "r")))
            continue;
        k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[k] = '\0';
        lp = strchr(buf, '(');
        rp = strrchr(buf, ')');
        if (!lp || !rp || sscanf(rp + 1, " %*c %d", &ppid) != 1 || ppid != parent)
            continue;
        if ((size_t)(rp - lp - 1) == strlen(comm) && strncmp(lp + 1, comm, strlen(comm)) == 0)
            found = (pid_t)atoi(e->d_name);
    }
    closedir(d);
    return found;
}

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* 1 when pid has exited (a zombie not yet reaped counts), from /proc. */
static int
exited(pid_t pid)
{
    char path[64], buf[512], *rp;
    FILE *f;
    size_t k;

    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (!(f = fopen(path, "r")))
        return 1;
    k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[k] = '\0';
    rp = strrchr(buf, ')');
    return !rp || rp[1] == '\0' || rp[2] == 'Z' || rp[2] == 'X';
}

void
test_wait_file(const char *path, long min_bytes, pid_t pid, double hang_s)
{
    struct timespec pause = {0, 10 * 1000 * 1000};
    double t0 = now_s();
    struct stat sb;

    while (stat(path, &sb) != 0 || sb.st_size < min_bytes) {
        ck_assert_msg(pid == 0 || !exited(pid), "%s: the process exited before it was written",
                      path);
        ck_assert_msg(now_s() - t0 < hang_s, "%s did not appear in %.0f s (hung?)", path, hang_s);
        nanosleep(&pause, NULL);
    }
}

void
test_tiny_config(sl_config_t *cfg, const char *root, const char *data, const char *run, ...)
{
    char yaml[4096];
    const char *set;
    va_list ap;

    snprintf(yaml, sizeof yaml,
             "run: {name: %s, dir: %s/%s, log_every: 10, checkpoint_every: 25}\n"
             "data:\n"
             "  train: %s/brown/train.txt\n"
             "  valid: %s/brown/valid.txt\n"
             "  test: %s/brown/test.txt\n"
             "  vocab_size: 500\n"
             "  max_tokens: 20000\n"
             "  cache_dir: %s/cache\n"
             "model: {embedding: 16, layers: [{lstm: 16}], dropout: 0.2,\n"
             "        output: {type: sampled, samples: 32}}\n"
             "train: {batch: 32, bptt: 8, epochs: 2,\n"
             "        optimizer: {type: adam, lr: 0.01}}\n",
             run, root, run, data, data, data, root);
    sl_config_init(cfg);
    ck_assert_msg(sl_config_load_string(cfg, yaml, "tiny.yaml") == SL_OK, "%s", sl_err_msg());
    va_start(ap, run);
    while ((set = va_arg(ap, const char *)) != NULL)
        ck_assert_msg(sl_config_set(cfg, set) == SL_OK, "%s: %s", set, sl_err_msg());
    va_end(ap);
    ck_assert_msg(sl_config_validate(cfg) == SL_OK, "%s", sl_err_msg());
}

sl_status_t
test_train(const sl_config_t *cfg, int resume, sl_train_result_t *res)
{
    sl_train_opts_t opts;

    sl_train_opts_init(&opts);
    opts.resume = resume;
    opts.quiet = 1;
    return sl_train_run(cfg, &opts, res);
}

void
test_train_ok(const sl_config_t *cfg, int resume, sl_train_result_t *res)
{
    sl_status_t rc = test_train(cfg, resume, res);
    ck_assert_msg(rc == SL_OK, "training failed: %s", sl_err_msg());
}

long
test_ckpt_i64(const char *path, size_t off)
{
    size_t len;
    unsigned char *d = (unsigned char *)test_read_file(path, &len);
    uint64_t v = 0;

    ck_assert_ptr_nonnull(d);
    ck_assert_uint_ge(len, off + 8);
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)d[off + i] << (8 * i);
    free(d);
    return (long)(int64_t)v;
}

size_t
test_ckpt_float_bytes(const unsigned char *data)
{
    return 4 * (size_t)(sl_get_u64(data + 120) + sl_get_u64(data + 128) + sl_get_u64(data + 136));
}

size_t
test_ckpt_meta_at(const unsigned char *data)
{
    size_t sync_at = SL_CKPT_HEADER_BYTES + test_ckpt_float_bytes(data);

    return sync_at + 8 + (size_t)sl_get_u64(data + sync_at);
}

#define CKPT_HASH_SEED 0x53484f414c434b50ull /* sl_checkpoint.c's */

void
test_ckpt_rehash(unsigned char *data, size_t len)
{
    sl_put_u64(data + len - 8, sl_hash_bytes(data, len - 8, CKPT_HASH_SEED));
}

unsigned char *
test_ckpt_to_version1(const unsigned char *data, size_t len, size_t *out_len)
{
    size_t fb = test_ckpt_float_bytes(data);
    unsigned char *v1;

    ck_assert_uint_gt(len, SL_CKPT_HEADER_BYTES + fb + 16);
    *out_len = SL_CKPT_V1_HEADER_BYTES + fb + 8;
    v1 = malloc(*out_len);
    ck_assert_ptr_nonnull(v1);
    memcpy(v1, data, SL_CKPT_V1_HEADER_BYTES);
    sl_put_u32(v1 + 8, 1);
    memcpy(v1 + SL_CKPT_V1_HEADER_BYTES, data + SL_CKPT_HEADER_BYTES, fb);
    test_ckpt_rehash(v1, *out_len);
    return v1;
}

int
test_shoal_find(char *bin, size_t cap)
{
    const char *b = getenv("SHOAL_BUILDDIR");

    snprintf(bin, cap, "%s/shoal", b ? b : ".");
    if (access(bin, X_OK) != 0) {
        fprintf(stderr, "%s is not built; skipping the command-line case\n", bin);
        return 0;
    }
    return 1;
}

int
test_shoal_staged(const char *bin, const char *log_path, const char *stage, char **log,
                  const char *const *args)
{
    const char *argv[32];
    int n = 0, status;
    pid_t pid;

    argv[n++] = bin;
    while (*args && n < 31)
        argv[n++] = *args++;
    argv[n] = NULL;
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen(log_path, "w", stdout) || dup2(fileno(stdout), 2) < 0)
            _exit(99);
        setenv("SHOAL_LOG", "debug", 1);
        setenv("SHOAL_STAGE_SYNC", stage, 1);
        execv(bin, (char *const *)argv);
        _exit(98);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    *log = test_read_file(log_path, NULL);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

char *
test_shoal_staged_ok(const char *bin, const char *dir, const char *stage, const char *const *args)
{
    char path[1100], *log;
    int rc;

    snprintf(path, sizeof path, "%s/staged.log", dir);
    rc = test_shoal_staged(bin, path, stage, &log, args);
    ck_assert_msg(rc == 0, "shoal %s %s exited %d:\n%s", args[0], args[1], rc, log);
    return log;
}

void
test_resume_run_yaml(char *conf, size_t size, const char *dir, const char *run,
                     const char *data_dir, int nodes, const char *sync)
{
    char yaml[2048];

    snprintf(conf, size, "%s/%s.yaml", dir, run);
    snprintf(yaml, sizeof yaml,
             "run: {name: %s, dir: %s/%s, log_every: 4, checkpoint_every: 0}\n"
             "data: {train: %s/brown/train.txt, vocab_size: 500, max_tokens: 20000,\n"
             "       cache_dir: %s/cache}\n"
             "model: {embedding: 16, layers: [{lstm: 16}], dropout: 0.2,\n"
             "        output: {type: sampled, samples: 32}}\n"
             "train: {batch: 8, bptt: 8, max_steps: 12, eval_every_epoch: false,\n"
             "        optimizer: {type: adam, lr: 0.01, clip: 1}}\n"
             "cluster: {nodes: %d, rendezvous_timeout_ms: 20000}\n"
             "sync: %s\n",
             run, dir, run, data_dir, dir, nodes, sync);
    test_write_file(conf, yaml, strlen(yaml));
}

void
test_config_load_ok(sl_config_t *c, const char *yaml)
{
    sl_status_t st = sl_config_load_string(c, yaml, "t.yaml");
    ck_assert_msg(st == SL_OK, "load failed: %s", sl_err_msg());
}

void
test_config_set_ok(sl_config_t *c, const char *assignment)
{
    sl_status_t st = sl_config_set(c, assignment);
    ck_assert_msg(st == SL_OK, "--set %s failed: %s", assignment, sl_err_msg());
}

/* Binds a tcp socket of 127.0.0.1 to port (0: one the kernel picks) and returns the
 * port bound, or -1 when it is taken. */
static int
bind_port(int port)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int s = socket(AF_INET, SOCK_STREAM, 0), ok;

    ck_assert_int_ge(s, 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    ok = bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
         getsockname(s, (struct sockaddr *)&a, &len) == 0;
    close(s);
    return ok ? ntohs(a.sin_port) : -1;
}

/* A random port from 10000 up to the kernel's ephemeral range: a port of that range
 * (what bind to port 0 gives) is also handed to outgoing connections, ZeroMQ's and the
 * other tests', one of which may take it before the node binds it, or while a
 * restarted rank 0 is down. Where the range starts too low, the kernel's pick. */
int
test_free_port(void)
{
    static uint64_t calls;
    unsigned lo = 32768, hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");

    if (f) {
        if (fscanf(f, "%u %u", &lo, &hi) != 2)
            lo = 32768;
        fclose(f);
    }
    for (int tries = 0; lo > 11000 && tries < 200; tries++) {
        uint64_t words[3] = {(uint64_t)getpid(), (uint64_t)(now_s() * 1e9), ++calls};
        int port = bind_port(10000 + (int)(sl_hash_bytes(words, sizeof words, 0) % (lo - 10000)));
        if (port > 0)
            return port;
    }
    return bind_port(0);
}

void
test_become_subreaper(void)
{
#ifdef __linux__
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
#endif
}

long
test_share_batches(const char *conf, int r, int n, int batch, int bptt)
{
    sl_config_t cfg;
    sl_corpus_t corpus;
    sl_batcher_t bt;
    long bpe;

    sl_config_init(&cfg);
    ck_assert_msg(sl_config_load_file(&cfg, conf) == SL_OK, "%s", sl_err_msg());
    ck_assert_msg(sl_corpus_load(&corpus, &cfg) == SL_OK, "%s", sl_err_msg());
    ck_assert_int_eq(sl_batcher_init(&bt, &corpus.train, r, n, batch, bptt), SL_OK);
    bpe = bt.batches_per_epoch;
    sl_corpus_fini(&corpus);
    sl_config_fini(&cfg);
    return bpe;
}

void
test_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void
test_fill(float *x, size_t n, uint64_t key, float scale)
{
    sl_rng_t r;

    sl_rng_init(&r, key);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((2.0 * sl_rng_double(&r) - 1.0) * scale);
}

float *
test_fcopy(const float *x, size_t n)
{
    float *y = malloc(n * sizeof *y);

    ck_assert_ptr_nonnull(y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

void
test_lm_config(sl_config_t *c, int nlayers, int proj, sl_output_kind_t out, double dropout)
{
    c->run.seed = 7;
    c->model.embedding = TEST_LM_E;
    c->model.nlayers = nlayers;
    for (int l = 0; l < nlayers; l++) {
        c->model.layers[l].hidden = TEST_LM_H;
        c->model.layers[l].projection = proj;
    }
    c->model.dropout = dropout;
    c->model.output = out;
    c->model.samples = TEST_LM_S;
    c->model.init_range = 0.3;
    c->train.batch = TEST_LM_B;
    c->train.bptt = TEST_LM_T;
    c->train.optimizer.lr = 0.1;
    c->train.optimizer.beta1 = 0.9;
    c->train.optimizer.beta2 = 0.999;
    c->train.optimizer.eps = 1e-8;
}

size_t
test_meta_record(const unsigned char *d, size_t at, const char *tag)
{
    uint32_t n = sl_get_u32(d + at + 4);
    size_t p = at + 8;

    for (uint32_t i = 0; i < n; i++) {
        if (memcmp(d + p, tag, 4) == 0)
            return p;
        p += 12 + (size_t)sl_get_u64(d + p + 4);
    }
    ck_abort_msg("no %s record", tag);
    return 0;
}

/* Sorted by insertion, summed in the picker's order: the same doubles, so the same
 * boundary for top-p. */
int
test_pick_allowed(const float *logit, int V, int k, double p, double t, int *ids)
{
    double prob[256], sum = 0, cum = 0;
    int n;

    ck_assert_int_le(V, 256);
    for (int i = 0; i < V; i++)
        ids[i] = i;
    for (int i = 1; i < V; i++) /* insertion sort */
        for (int j = i; j > 0; j--) {
            int a = ids[j - 1], b = ids[j];
            if (logit[b] > logit[a] || (logit[b] == logit[a] && b < a))
                ids[j - 1] = b, ids[j] = a;
            else
                break;
        }
    n = k > 0 && k < V ? k : V;
    for (int i = 0; i < n; i++)
        sum += prob[i] = exp((logit[ids[i]] - logit[ids[0]]) / t);
    for (int i = 0; i < n; i++) {
        cum += prob[i] / sum;
        if (cum >= p)
            return i + 1;
    }
    return n;
}

/* Check's own _mark_point from here on. */
#undef _mark_point

void
test_mark_point(const char *file, int line)
{
    enum { RECENT = 8 };
    static struct {
        const char *file;
        int line;
    } recent[RECENT];
    static unsigned next;
    /* the nodes of a test cluster in threads assert at once */
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

    pthread_mutex_lock(&lock);
    for (int i = 0; i < RECENT; i++)
        if (recent[i].line == line && recent[i].file == file) {
            pthread_mutex_unlock(&lock);
            return;
        }
    recent[next % RECENT].file = file;
    recent[next % RECENT].line = line;
    next++;
    _mark_point(file, line);
    pthread_mutex_unlock(&lock);
}
