/* Unit tests of how the nodes of a run load one corpus (src/data/sl_corpus.c): a node
 * holds its share of the training ids only, built or read from the cache; of the
 * processes that find no cache together one builds it; a training text from a pipe is
 * read once and gives the file's ids, hash and SHA-256. The tiny configuration's slice
 * of Brown, in a temporary directory that the parent process removes. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sl_log.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "data/sl_data.h"

#include "test_tool.h"

static char tmp_root[] = "/tmp/shoal-check-corpus-load-XXXXXX";
static char data_dir[PATH_MAX];

/* The tiny configuration (20,000 training tokens of Brown, vocabulary 500) with its
 * token cache in <root>/<cache>, and one more setting (NULL: none). */
static void
corpus_config(sl_config_t *cfg, const char *cache, const char *more)
{
    char set[PATH_MAX + 32];

    snprintf(set, sizeof set, "data.cache_dir=%s/%s", tmp_root, cache);
    test_tiny_config(cfg, tmp_root, data_dir, "corpus", set, more ? more : "data.vocab_size=500",
                     NULL);
}

/* A node's share of the training ids (sl_corpus_load_share), built (no cache yet) and
 * read from the cache: the whole's ids from train_from on, its train_all, the other
 * splits and the hash as the whole's; a rank out of range is refused. */
START_TEST(test_load_share)
{
    sl_config_t cfg;
    sl_corpus_t whole, part;

    corpus_config(&cfg, "share", NULL);
    for (int round = 0; round < 2; round++) /* round 0 builds rank 1's, then the cache */
        for (int k = round ? 0 : 1; k < (round ? 3 : 2); k++) {
            size_t lo = sl_batcher_share_start(20000, k, 3);
            size_t hi = sl_batcher_share_start(20000, k + 1, 3);

            ck_assert_msg(sl_corpus_load_share(&part, &cfg, k, 3) == SL_OK, "%s", sl_err_msg());
            ck_assert_int_eq(sl_corpus_load(&whole, &cfg), SL_OK);
            ck_assert_int_eq(part.from_cache, round);
            ck_assert(part.train_all == 20000 && part.train_from == lo &&
                      part.train.len == hi - lo);
            ck_assert(whole.train_from == 0 && whole.train_all == whole.train.len);
            ck_assert(memcmp(part.train.ids, whole.train.ids + lo, (hi - lo) * 4) == 0);
            ck_assert(part.valid.len == whole.valid.len && part.hash == whole.hash &&
                      memcmp(part.valid.ids, whole.valid.ids, whole.valid.len * 4) == 0);
            sl_corpus_fini(&whole);
            sl_corpus_fini(&part);
        }
    ck_assert_int_eq(sl_corpus_load_share(&part, &cfg, 3, 3), SL_ERR_INVALID);
    sl_config_fini(&cfg);
}
END_TEST

/* Three processes that load Brown's whole training text at once into an empty cache
 * directory (the nodes of a host starting): one tokenizes it, the others wait for its
 * cache and read it. */
START_TEST(test_cache_built_once)
{
    int gate[2], built = 0, status;
    pid_t pids[3];

    ck_assert_int_eq(pipe(gate), 0);
    for (int i = 0; i < 3; i++) {
        pids[i] = fork();
        ck_assert_int_ge(pids[i], 0);
        if (pids[i] == 0) {
            sl_config_t cfg;
            sl_corpus_t c;
            char go;

            close(gate[1]);
            corpus_config(&cfg, "once", "data.max_tokens=0");
            /* every child starts once the parent closes the gate */
            if (read(gate[0], &go, 1) != 0 || sl_corpus_load(&c, &cfg) != SL_OK)
                _exit(2);
            _exit(c.from_cache);
        }
    }
    close(gate[0]);
    close(gate[1]);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) <= 1);
        built += WEXITSTATUS(status) == 0;
    }
    ck_assert_int_eq(built, 1);
}
END_TEST

/* A writer of the file at from into the FIFO at path, in a child process that gives up
 * after 60 s (a reader that never came must not leave it behind). */
static pid_t
fifo_writer(const char *path, const char *from)
{
    pid_t pid = fork();

    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        size_t len;
        char *text = test_read_file(from, &len);
        int fd;

        alarm(60);
        fd = open(path, O_WRONLY);
        _exit(text && fd >= 0 && write(fd, text, len) == (ssize_t)len && close(fd) == 0 ? 0 : 1);
    }
    return pid;
}

/* A training text from a pipe (process substitution, <(zcat ...)) is read once, whole,
 * where a file is hashed a piece at a time: the same ids, corpus hash and SHA-256 as the
 * file's, so that the second read of the pipe finds the file's token cache. */
START_TEST(test_pipe_corpus)
{
    char train[PATH_MAX], fifo[PATH_MAX], set[PATH_MAX + 16], *text;
    unsigned char want_sha[32];
    sl_config_t cfg, pcfg;
    sl_corpus_t c, p;
    size_t len;
    int status;

    snprintf(train, sizeof train, "%s/brown/train.txt", data_dir);
    snprintf(fifo, sizeof fifo, "%s/train.fifo", tmp_root);
    corpus_config(&cfg, "pipe", NULL);
    ck_assert_int_eq(sl_corpus_load(&c, &cfg), SL_OK);
    text = test_read_file(train, &len);
    crypto_hash_sha256(want_sha, (const unsigned char *)text, len);
    free(text);
    ck_assert(memcmp(c.train_sha256, want_sha, 32) == 0);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    snprintf(set, sizeof set, "data.train=%s", fifo);
    corpus_config(&pcfg, "pipe", set);
    for (int round = 0; round < 2; round++) {
        pid_t pid = fifo_writer(fifo, train);
        sl_status_t st = sl_corpus_load(&p, &pcfg);

        if (st != SL_OK)
            kill(pid, SIGKILL); /* it may wait for a reader still */
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(st == SL_OK, "%s", sl_err_msg());
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        ck_assert_uint_eq(p.hash, c.hash);
        ck_assert_int_eq(p.from_cache, 1); /* the file's cache, read back */
        ck_assert(memcmp(p.train_sha256, want_sha, 32) == 0);
        ck_assert(p.train.len == c.train.len &&
                  memcmp(p.train.ids, c.train.ids, c.train.len * 4) == 0);
        sl_corpus_fini(&p);
    }
    unlink(fifo);
    /* a device is not a pipe: refused, where reading it whole would never end */
    sl_config_fini(&pcfg);
    corpus_config(&pcfg, "pipe", "data.train=/dev/zero");
    ck_assert_int_eq(sl_corpus_load(&p, &pcfg), SL_ERR_IO);
    ck_assert_msg(strstr(sl_err_msg(), "/dev/zero: a device, not a file or a pipe"), "%s",
                  sl_err_msg());
    sl_corpus_fini(&c);
    sl_config_fini(&pcfg);
    sl_config_fini(&cfg);
}
END_TEST

static Suite *
corpus_load_suite(void)
{
    Suite *s = suite_create("corpus_load");
    TCase *core = tcase_create("core");

    tcase_set_timeout(core, 120);
    tcase_add_test(core, test_load_share);
    tcase_add_test(core, test_cache_built_once);
    tcase_add_test(core, test_pipe_corpus);
    suite_add_tcase(s, core);
    return s;
}

int
main(void)
{
    test_data_dir_absolute(data_dir, sizeof data_dir);
    sl_log_set_level(SL_LOG_WARN);
    return test_main_in_tmp(corpus_load_suite(), tmp_root, "check_corpus_load");
}
