/* tests/unit/test_tool.h: helpers shared by the Check tests that run shoal's programs
 * or read what they wrote: running a command-line tool with its output captured,
 * reading and writing whole files, numbers in JSON text, the parameters of a model
 * file, a forked process's child by name, a file that appears; for the node tests the
 * tiny training configuration, checkpoints taken apart, and shoal run staged;
 * configuration text that must load; a free port, adopting orphans, a rank's batches
 * per epoch; a pause; random inputs and a tolerance check for
 * the kernel tests; the tiny model configuration of the model tests; a model file's
 * metadata records and the token sets generation may draw from. */
#ifndef SL_TEST_TOOL_H
#define SL_TEST_TOOL_H

#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "node/sl_train.h"

/* Check gives the runner the place of every assertion that passes (_mark_point), and
 * the runner reads them back one by one, moving the rest of its buffer each time: tests
 * with 10^5 assertions in loops spent most of their time there (check_common 96%,
 * check_sync 98%). A place goes to Check here only when it is not one of the last few
 * that went: a crash is still placed at an assertion it came after (in a loop, the
 * loop's), and a loop costs a message or two. */
void test_mark_point(const char *file, int line);
#define _mark_point(file, line) test_mark_point(file, line)

/* main() of a test program: runs suite s in fork mode (each case in its own process)
 * and returns the exit status. */
int test_main(Suite *s);
/* The same inside a private temporary folder: tmp_root, a mkdtemp(3) template such as
 * "/tmp/shoal-check-x-XXXXXX", is made first (1, with a line naming prog, when it
 * cannot be) and removed with everything in it afterwards, pass or fail; kept, with a line
 * naming it, when a case failed and SHOAL_TEST_KEEP is set (the nodes' logs of a flaky run). */
int test_main_in_tmp(Suite *s, char *tmp_root, const char *prog);
/* Removes path and everything below it; nothing when it is not there. */
void test_remove_tree(const char *path);
/* The corpora folder into buf (cap bytes): $SHOAL_DATA, else
 * $SHOAL_SRCDIR/../shared/data (SHOAL_SRCDIR defaulting to ".."). */
void test_data_dir(char *buf, size_t cap);
/* The same made absolute (as given when it does not resolve), for paths that are read
 * from another directory. */
void test_data_dir_absolute(char *buf, size_t cap);

/* Writes $SHOAL_BUILDDIR/tools/NAME (default ./tools/NAME) to bin (cap bytes). Returns
 * 1 when it is executable, else 0 after a line on stderr saying the case is skipped. */
int test_tool_find(const char *name, char *bin, size_t cap);

/* Runs bin with args (NULL-terminated, at most 30) and, when path is not NULL, the
 * environment variable PATH=path; its stdout goes to out and its stderr to err, each
 * NUL-terminated and truncated to its capacity. Returns the exit status; a signal fails
 * the test. The outputs are read one after the other, so each must fit a pipe's buffer
 * (64 KiB) while the other is read: the tools' outputs in the tests are small. */
int test_tool_run(const char *bin, char *out, size_t out_cap, char *err, size_t err_cap,
                  const char *path, const char *const *args);

/* The whole file at path, malloc'd and NUL-terminated (its length without the NUL in
 * *len when len is not NULL); NULL when it cannot be opened. */
char *test_read_file(const char *path, size_t *len);

/* Writes len bytes of data to path (created or truncated); fails the test on error. */
void test_write_file(const char *path, const void *data, size_t len);

/* The number after the first "key": (spaces allowed after the colon) in a JSON text;
 * NAN for null. A key that is not there fails the test. */
double test_json_num(const char *text, const char *key);

/* The parameters of a model or checkpoint file (versions 3 and 4; 4 is the format shoal writes):
 * nparams floats after the header, malloc'd; their count in *n. Fails the test when
 * the file is missing or short. */
float *test_model_params(const char *path, size_t *n);

/* The pid of a child of parent whose name (/proc/PID/comm, as prctl sets it) is comm,
 * 0 if none. */
pid_t test_child_named(pid_t parent, const char *comm);

/* Waits until path holds at least min_bytes bytes, polling. It fails the test when
 * pid (not 0) has exited first (its status is then lost: the caller fails anyway) or
 * after hang_s seconds, a guard against a hang, not a timing: make it generous. */
void test_wait_file(const char *path, long min_bytes, pid_t pid, double hang_s);

/* The tiny configuration of the node tests: a 20000-token slice of Brown (data is the
 * corpus folder), vocab 500, E 16, one layer of 16, B 32 x T 8 (78 batches an epoch),
 * sampled softmax, dropout 0.2, Adam. The run directory is <root>/<run>, the token
 * cache <root>/cache. Further "key=value" overrides follow, NULL-terminated. Fails the
 * test on a bad override; the caller finishes cfg with sl_config_fini. */
void test_tiny_config(sl_config_t *cfg, const char *root, const char *data, const char *run, ...);

/* Trains cfg quietly as the only node (resume: opts.resume); the trainer's status. */
sl_status_t test_train(const sl_config_t *cfg, int resume, sl_train_result_t *res);

/* test_train that must return SL_OK. */
void test_train_ok(const sl_config_t *cfg, int resume, sl_train_result_t *res);

/* The little-endian 64-bit signed integer at byte off of the file at path (a
 * checkpoint header's field: 144 is the step); fails the test when it is short. */
long test_ckpt_i64(const char *path, size_t off);

/* The float payload's bytes (parameters, optimizer and hidden state) of a checkpoint
 * held in data. */
size_t test_ckpt_float_bytes(const unsigned char *data);

/* Where the metadata section's 8-byte length sits in a version 4 checkpoint held in
 * data: after the floats and the sync section. What comes before it is the training
 * state; the metadata after it (vocabulary, provenance) names the run too. */
size_t test_ckpt_meta_at(const unsigned char *data);

/* Offset of the record tagged tag (four letters) in the metadata section that starts
 * at d + at (model/sl_model_meta.h); fails the test when there is none. */
size_t test_meta_record(const unsigned char *d, size_t at, const char *tag);

/* The tokens sl_picker_allowed may return, worked out independently: ids by decreasing
 * logit (ties: the lower id) into ids (V of them), the first k (0: all), then the
 * fewest whose probabilities at temperature t (renormalised over the k) reach p.
 * Returns their count (V up to 256). */
int test_pick_allowed(const float *logit, int V, int k, double p, double t, int *ids);

/* Sets the checksum (the last 8 bytes) of a checkpoint held in data (len bytes). */
void test_ckpt_rehash(unsigned char *data, size_t len);

/* The version 1 file of a version 3 or 4 checkpoint (data, len), as shoal 1 wrote it: the
 * header's first 192 bytes with version 1, the floats, no sync section, its checksum.
 * Returns it malloc'd, its length in *out_len. */
unsigned char *test_ckpt_to_version1(const unsigned char *data, size_t len, size_t *out_len);

/* Writes $SHOAL_BUILDDIR/shoal (default ./shoal) to bin (cap bytes). Returns 1 when it
 * is executable, else 0 after a line on stderr saying the case is skipped. */
int test_shoal_find(char *bin, size_t cap);

/* Runs bin (shoal) with args (NULL-terminated, at most 30) with SHOAL_STAGE_SYNC=stage
 * and SHOAL_LOG=debug, its stdout and stderr both into the file log_path; returns the
 * exit status, or 128 + signal, and that file's text (malloc'd) in *log. */
int test_shoal_staged(const char *bin, const char *log_path, const char *stage, char **log,
                      const char *const *args);

/* The same run must exit 0: its log is <dir>/staged.log; returns its text (malloc'd). */
char *test_shoal_staged_ok(const char *bin, const char *dir, const char *stage,
                           const char *const *args);

/* Writes <dir>/<run>.yaml, its path into conf (size bytes): the tiny run of the resume
 * tests, nodes nodes with sync (the YAML value of sync:), 12 steps of 8 x 8 (no epoch
 * end, no valid or test split), dropout and the sampled softmax so that every random
 * key is used; run.dir <dir>/<run>, the corpus data_dir/brown, its cache <dir>/cache. */
void test_resume_run_yaml(char *conf, size_t size, const char *dir, const char *run,
                          const char *data_dir, int nodes, const char *sync);

/* Loads the YAML text yaml (named t.yaml) into c; fails the test when it does not load. */
void test_config_load_ok(sl_config_t *c, const char *yaml);

/* Applies the --set assignment ("key=value") to c; fails the test when it fails. */
void test_config_set_ok(sl_config_t *c, const char *assignment);

/* A free tcp port of 127.0.0.1 (bound, read back, closed) for a master address, below
 * the kernel's ephemeral range where it can, so that no outgoing connection takes it. */
int test_free_port(void);

/* Makes this process adopt its descendants' orphans (Linux; nothing elsewhere), so
 * that a node left running is still its child, to find and reap. */
void test_become_subreaper(void);

/* Batches per epoch of rank r of n with batch B x T bptt on the corpus of the
 * configuration file conf, computed as the trainer does. */
long test_share_batches(const char *conf, int r, int n, int batch, int bptt);

/* Sleeps ms milliseconds (a pause between retries, never a wait for an event). */
void test_sleep_ms(int ms);

/* Fills x (n floats) uniform in [-scale, scale) from the stream key (never zero-filled
 * inputs). */
void test_fill(float *x, size_t n, uint64_t key, float scale);

/* A malloc'd copy of x (n floats); the caller frees it. */
float *test_fcopy(const float *x, size_t n);

/* |got - want| <= abs_tol + rel_tol |want|, with a message naming the element (the
 * caller includes check.h). */
#define TEST_ASSERT_CLOSE(got, want, abs_tol, rel_tol, what, idx)                                  \
    ck_assert_msg(                                                                                 \
        fabs((double)(got) - (double)(want)) <= (abs_tol) + (rel_tol)*fabs((double)(want)),        \
        "%s[%d]: got %.9g, want %.9g", (what), (int)(idx), (double)(got), (double)(want))

/* The tiny sizes of the model tests (check_model*.c) that test_lm_config sets:
 * embedding, hidden, sampled-softmax samples, batch and steps. */
enum { TEST_LM_E = 5, TEST_LM_H = 6, TEST_LM_S = 5, TEST_LM_B = 2, TEST_LM_T = 3 };

/* The model and optimizer fields of the tiny test models, over the defaults already in
 * c: run.seed 7, nlayers LSTM layers of TEST_LM_H (projection proj, 0 for none),
 * output out, dropout, init range 0.3, and lr 0.1 with Adam's betas 0.9 and 0.999 and
 * eps 1e-8. */
void test_lm_config(sl_config_t *c, int nlayers, int proj, sl_output_kind_t out, double dropout);

#endif
