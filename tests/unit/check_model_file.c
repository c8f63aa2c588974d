/* Unit tests of self-contained model files and their use (issue 19), end to end on
 * tiny models trained here (the metadata section and the token picker alone are
 * check_model_meta.c's):
 * shoal score from another directory with the corpus removed gives the training run's
 * test loss to the bit; shoal sample gives the same text for the same seed, and at
 * temperature 0 the greedy decoding worked out here through the evaluation path;
 * shoal eval reads another file with the model's vocabulary; corrupt, truncated, old
 * and mismatched model files are one-line errors. */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <check.h>
#include <limits.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sl_endian.h"
#include "common/sl_rng.h"
#include "config/sl_config.h"
#include "data/sl_data.h"
#include "model/sl_model_meta.h"
#include "model/sl_token_pick.h"
#include "node/sl_checkpoint.h"
#include "node/sl_model_file.h"
#include "node/sl_score.h"
#include "node/sl_train.h"

#include "test_tool.h"

static char tmp_root[] = "/tmp/shoal-check-model-file-XXXXXX";
static char shoal_bin[PATH_MAX];
static char out[65536], err[65536];

/* ---------------------------------------------------------------- helpers */

static void
path_in(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", tmp_root, name);
}

/* The first lines of a corpus file of ../shared/data into dst. */
static void
copy_lines(const char *src_rel, const char *dst, int lines)
{
    char data_dir[1024], src[2048], *text, *p;
    size_t len;

    test_data_dir(data_dir, sizeof data_dir);
    snprintf(src, sizeof src, "%s/%s", data_dir, src_rel);
    text = test_read_file(src, &len);
    ck_assert_msg(text != NULL, "%s: cannot read", src);
    for (p = text; lines > 0 && (p = strchr(p, '\n')) != NULL; lines--)
        p++;
    test_write_file(dst, text, p ? (size_t)(p - text) : len);
    free(text);
}

/* shoal with args; its exit status, stdout in out and stderr in err. */
static int
run_shoal(const char *const *args)
{
    return test_tool_run(shoal_bin, out, sizeof out, err, sizeof err, NULL, args);
}

static int
count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* A failure of shoal: status want, nothing on stdout, one line on stderr starting with
 * "shoal: " and holding each of the NULL-terminated fragments. */
static void
assert_one_line_error(int got, int want, const char *const *fragments)
{
    ck_assert_msg(got == want, "exit %d, want %d; stderr: %s", got, want, err);
    ck_assert_msg(out[0] == '\0', "stdout: %s", out);
    ck_assert_msg(count_lines(err) == 1 && strncmp(err, "shoal: ", 7) == 0, "stderr: %s", err);
    for (; *fragments; fragments++)
        ck_assert_msg(strstr(err, *fragments) != NULL, "'%s' not in stderr: %s", *fragments, err);
}

/* Brown's first lines in <tmp>/<dir>/{train,valid,test}.txt: enough for the tiny
 * model, and files the test may remove. */
static void
make_word_corpus(const char *dir)
{
    char path[1024], name[1100];

    path_in(path, sizeof path, dir);
    mkdir(path, 0755);
    snprintf(name, sizeof name, "%s/train.txt", path);
    copy_lines("brown/train.txt", name, 1500);
    snprintf(name, sizeof name, "%s/valid.txt", path);
    copy_lines("brown/valid.txt", name, 300);
    snprintf(name, sizeof name, "%s/test.txt", path);
    copy_lines("brown/test.txt", name, 300);
}

/* The tiny word model of the node tests on the corpus in <tmp>/<dir>, 30 steps. */
static void
word_config(sl_config_t *cfg, const char *dir, const char *run)
{
    char data_dir[1024], train[1100], valid[1100], test[1100];

    test_data_dir(data_dir, sizeof data_dir);
    snprintf(train, sizeof train, "data.train=%s/%s/train.txt", tmp_root, dir);
    snprintf(valid, sizeof valid, "data.valid=%s/%s/valid.txt", tmp_root, dir);
    snprintf(test, sizeof test, "data.test=%s/%s/test.txt", tmp_root, dir);
    test_tiny_config(cfg, tmp_root, data_dir, run, train, valid, test, "train.max_steps=30", NULL);
}

/* A character model of tinyshakespeare's first lines (<tmp>/<dir>/input.txt). */
static void
char_config(sl_config_t *cfg, const char *dir, const char *run)
{
    char yaml[2048], path[1024];

    sl_config_init(cfg);
    path_in(path, sizeof path, dir);
    mkdir(path, 0755);
    snprintf(yaml, sizeof yaml, "%s/input.txt", path);
    copy_lines("tinyshakespeare/input.txt", yaml, 2000);
    snprintf(yaml, sizeof yaml,
             "run: {name: %s, dir: %s/%s, log_every: 50}\n"
             "data: {train: %s/input.txt, level: char, vocab_size: 0, valid_fraction: 0.1,\n"
             "       cache_dir: %s/cache}\n"
             "model: {embedding: 16, layers: [{lstm: 32}]}\n"
             "train: {batch: 16, bptt: 16, max_steps: 150, optimizer: {type: adam, lr: 0.01}}\n",
             run, tmp_root, run, path, tmp_root);
    test_config_load_ok(cfg, yaml);
}

/* Writes cfg as YAML to path, for the shoal command line. */
static void
write_config(const sl_config_t *cfg, const char *path)
{
    FILE *f = fopen(path, "w");

    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(sl_config_write_yaml(cfg, f), SL_OK);
    fclose(f);
}

static void
copy_file(const char *from, const char *to)
{
    size_t len;
    char *d = test_read_file(from, &len);

    ck_assert_msg(d != NULL, "%s: cannot read", from);
    test_write_file(to, d, len);
    free(d);
}

/* Where a version 4 file's metadata section starts, and its length. */
static size_t
meta_section(const unsigned char *d, size_t len, size_t *meta_len)
{
    size_t sync_at = SL_CKPT_HEADER_BYTES + test_ckpt_float_bytes(d);
    size_t meta_at = sync_at + 8 + (size_t)sl_get_u64(d + sync_at) + 8;

    ck_assert_uint_le(meta_at + 8, len);
    *meta_len = (size_t)sl_get_u64(d + meta_at - 8);
    ck_assert_uint_eq(meta_at + *meta_len + 8, len);
    return meta_at;
}

/* The version 3 file of a version 4 one, as shoal wrote it before model files carried
 * metadata: no metadata section, version 3, its checksum. */
static unsigned char *
to_version3(const unsigned char *d, size_t len, size_t *out_len)
{
    size_t meta_len, meta_at = meta_section(d, len, &meta_len);
    unsigned char *v3;

    *out_len = meta_at - 8 + 8;
    v3 = malloc(*out_len);
    ck_assert_ptr_nonnull(v3);
    memcpy(v3, d, meta_at - 8);
    sl_put_u32(v3 + 8, 3);
    test_ckpt_rehash(v3, *out_len);
    return v3;
}

/* ----------------------------------------------------------------- picker */

/* --------------------------------------------------------------- end to end */

/* A word model trained here; its corpus then removed. From another directory shoal
 * score gives the run's test loss exactly, shoal eval reads other files with the
 * model's vocabulary, and the file's provenance is the run's. */
START_TEST(test_score_without_corpus)
{
    sl_config_t cfg;
    sl_train_result_t res;
    sl_model_file_t m;
    sl_score_t sc;
    sl_tokens_t tok;
    char corpus[1024], run[1024], away[1024], conf[1100], expect[512], *text;
    unsigned char sha[32];
    size_t len;

    if (!test_shoal_find(shoal_bin, sizeof shoal_bin))
        return;
    ck_assert_ptr_nonnull(realpath(shoal_bin, out));
    snprintf(shoal_bin, sizeof shoal_bin, "%s", out);
    make_word_corpus("wcorpus");
    word_config(&cfg, "wcorpus", "wrun");
    test_train_ok(&cfg, 0, &res);
    ck_assert(res.has_test && res.has_valid);
    path_in(corpus, sizeof corpus, "wcorpus/train.txt");
    text = test_read_file(corpus, &len);
    crypto_hash_sha256(sha, (const unsigned char *)text, len);
    free(text);

    /* another directory with the model and the test file; no corpus, cache or run */
    path_in(away, sizeof away, "away");
    ck_assert_int_eq(mkdir(away, 0755), 0);
    snprintf(conf, sizeof conf, "%s/m.bin", away);
    copy_file(res.model, conf);
    path_in(corpus, sizeof corpus, "wcorpus/test.txt");
    snprintf(conf, sizeof conf, "%s/t.txt", away);
    copy_file(corpus, conf);
    path_in(corpus, sizeof corpus, "wcorpus");
    test_remove_tree(corpus);
    path_in(run, sizeof run, "wrun");
    test_remove_tree(run);
    path_in(run, sizeof run, "cache");
    test_remove_tree(run);
    ck_assert_int_eq(chdir(away), 0);

    ck_assert_int_eq(run_shoal((const char *[]){"score", "m.bin", "t.txt", NULL}), 0);
    snprintf(expect, sizeof expect, "t.txt: ppl %.2f (loss %.6f, ", exp(res.test_loss),
             res.test_loss);
    ck_assert_msg(strncmp(out, expect, strlen(expect)) == 0, "stdout: %s want %s", out, expect);
    ck_assert_int_eq(count_lines(out), 1);
    ck_assert_str_eq(err, ""); /* SHOAL_LOG=warn: the note on the vocabulary is info */

    /* the same in-process: the bits of the training run's test loss, and its provenance */
    ck_assert_msg(sl_model_file_open(&m, "m.bin", NULL, 1, 0) == SL_OK, "%s", sl_err_msg());
    text = test_read_file("t.txt", &len);
    ck_assert_int_eq(sl_tokenize(m.vocab, m.level, "t.txt", text, len, 1, &tok), SL_OK);
    free(text);
    ck_assert_int_eq(sl_score_tokens(m.lm, &tok, sl_vocab_unk(m.vocab), m.cfg.train.bptt,
                                     SL_MODEL_FILE_STREAMS, "t.txt", &sc),
                     SL_OK);
    free(tok.ids);
    ck_assert_msg(memcmp(&sc.loss, &res.test_loss, sizeof sc.loss) == 0, "%.17g vs %.17g", sc.loss,
                  res.test_loss);
    ck_assert(m.info.meta.test_loss == res.test_loss);
    ck_assert(m.info.meta.valid_loss == res.valid_loss);
    ck_assert_int_eq(m.info.meta.valid_step, 30);
    ck_assert_int_eq(m.info.meta.steps, res.steps);
    ck_assert_uint_eq(m.info.meta.tokens, res.tokens);
    ck_assert_int_eq(m.info.meta.nodes, 1);
    ck_assert_int_eq(m.info.meta.sync, SL_SYNC_NONE);
    ck_assert_str_eq(m.info.meta.run_name, "wrun");
    ck_assert_str_eq(m.info.meta.version, PACKAGE_VERSION);
    ck_assert(memcmp(m.info.meta.train_sha256, sha, 32) == 0);
    ck_assert_int_eq(m.info.meta.vocab_limit, 500);
    ck_assert_int_eq(m.info.meta.output, SL_OUTPUT_SAMPLED);
    ck_assert_str_eq(sl_vocab_word(m.vocab, sl_vocab_unk(m.vocab)), "<unk>");
    sl_model_file_close(&m);

    /* shoal eval: the training file is gone and the test split is another file; it
     * reads it with the model's vocabulary and says so */
    copy_lines("brown/valid.txt", "other.txt", 400);
    test_config_set_ok(&cfg, "data.test=other.txt");
    write_config(&cfg, "eval.yaml");
    ck_assert_int_eq(run_shoal((const char *[]){"eval", "eval.yaml", "--checkpoint", "m.bin",
                                                "--split", "test", NULL}),
                     0);
    ck_assert_msg(strncmp(out, "test ppl ", 9) == 0, "stdout: %s stderr: %s", out, err);
    ck_assert_ptr_nonnull(strstr(out, "\nvocabulary: the model's own (502 entries, word level)\n"));
    {
        double eval_loss = strtod(strstr(out, "(loss ") + 6, NULL);
        ck_assert_int_eq(run_shoal((const char *[]){"score", "m.bin", "other.txt", NULL}), 0);
        ck_assert_double_eq_tol(strtod(strstr(out, "(loss ") + 6, NULL), eval_loss, 1e-4);
    }

    /* per line: a header, then one row per line; a line's tokens are its words and <eos> */
    {
        const char *three = "the jury said\n\nit was a good day";
        test_write_file("three.txt", three, strlen(three));
    }
    ck_assert_int_eq(run_shoal((const char *[]){"score", "m.bin", "three.txt", "--per-line", NULL}),
                     0);
    ck_assert_int_eq(count_lines(out), 4);
    ck_assert_msg(strncmp(out, "file\tline\ttokens\tloss\tppl\nthree.txt\t1\t4\t", 40) == 0,
                  "stdout: %s", out);
    ck_assert_ptr_nonnull(strstr(out, "\nthree.txt\t2\t1\t"));
    ck_assert_ptr_nonnull(strstr(out, "\nthree.txt\t3\t6\t"));
    sl_config_fini(&cfg);
}
END_TEST

/* The greedy continuation of prompt worked out with the evaluation path: each next
 * token is the one of least loss (the lowest id among equals), found by evaluating
 * every candidate from a saved state. */
static void
greedy_by_hand(sl_model_file_t *m, const char *prompt, int n, char *buf, size_t size)
{
    sl_lm_state_t *st;
    sl_tokens_t tok;
    float *saved;
    int32_t x, y;
    double loss;
    size_t at = 0;
    int V = sl_vocab_size(m->vocab);

    ck_assert_int_eq(sl_lm_state_new(m->lm, 1, &st), SL_OK);
    saved = malloc(sl_lm_state_size(st) * sizeof *saved);
    ck_assert_int_eq(sl_tokenize(m->vocab, m->level, "prompt", prompt, strlen(prompt), 0, &tok),
                     SL_OK);
    x = sl_score_line_start(m->vocab, m->level);
    for (size_t i = 0; i < tok.len; i++) {
        y = tok.ids[i];
        ck_assert_int_eq(sl_lm_eval_batch(m->lm, st, &x, &y, 1, &loss), SL_OK);
        x = y;
    }
    free(tok.ids);
    buf[0] = '\0';
    for (int k = 0; k < n; k++) {
        double best_loss = INFINITY;
        int best = -1;
        const char *w;
        ck_assert_int_eq(sl_lm_state_save(st, saved), SL_OK);
        for (int c = 0; c < V; c++) {
            y = c;
            ck_assert_int_eq(sl_lm_state_load(st, saved), SL_OK);
            ck_assert_int_eq(sl_lm_eval_batch(m->lm, st, &x, &y, 1, &loss), SL_OK);
            if (loss < best_loss)
                best_loss = loss, best = c;
        }
        ck_assert_int_eq(sl_lm_state_load(st, saved), SL_OK);
        y = best;
        ck_assert_int_eq(sl_lm_eval_batch(m->lm, st, &x, &y, 1, &loss), SL_OK);
        x = best;
        w = sl_vocab_word(m->vocab, best);
        ck_assert_uint_lt(at + strlen(w) + 1, size);
        memcpy(buf + at, w, strlen(w) + 1);
        at += strlen(w);
    }
    free(saved);
    sl_lm_state_destroy(&st);
}

START_TEST(test_sample)
{
    sl_config_t cfg;
    sl_train_result_t res;
    sl_model_file_t m;
    sl_picker_t pk;
    sl_lm_state_t *st;
    char first[4096], greedy[4096], expect[4200], wmodel[1024];
    float *logits;
    int32_t x;

    if (!test_shoal_find(shoal_bin, sizeof shoal_bin))
        return;
    char_config(&cfg, "ccorpus", "crun");
    test_train_ok(&cfg, 0, &res);

    /* same seed, same text; another seed, other text */
    ck_assert_int_eq(run_shoal((const char *[]){"sample", res.model, "--tokens", "60", "--seed",
                                                "5", "--prompt", "ROMEO:", NULL}),
                     0);
    ck_assert_msg(strncmp(out, "ROMEO:", 6) == 0 && strlen(out) > 40, "stdout: %s", out);
    snprintf(first, sizeof first, "%s", out);
    ck_assert_int_eq(run_shoal((const char *[]){"sample", res.model, "--tokens", "60", "--seed",
                                                "5", "--prompt", "ROMEO:", NULL}),
                     0);
    ck_assert_str_eq(out, first);
    ck_assert_int_eq(run_shoal((const char *[]){"sample", res.model, "--tokens", "60", "--seed",
                                                "6", "--prompt", "ROMEO:", NULL}),
                     0);
    ck_assert_str_ne(out, first);

    /* temperature 0 is greedy decoding, and so are top-k 1 and a tiny top-p at any
     * temperature and seed */
    ck_assert_msg(sl_model_file_open(&m, res.model, NULL, 1, 0) == SL_OK, "%s", sl_err_msg());
    greedy_by_hand(&m, "ROMEO:", 30, greedy, sizeof greedy);
    snprintf(expect, sizeof expect, "ROMEO:%s%s", greedy,
             greedy[strlen(greedy) - 1] == '\n' ? "" : "\n");
    ck_assert_int_eq(run_shoal((const char *[]){"sample", res.model, "--tokens", "30",
                                                "--temperature", "0", "--prompt", "ROMEO:", NULL}),
                     0);
    ck_assert_str_eq(out, expect);
    ck_assert_int_eq(run_shoal((const char *[]){"sample", res.model, "--tokens", "30", "--top-k",
                                                "1", "--temperature", "3", "--seed", "11",
                                                "--prompt", "ROMEO:", NULL}),
                     0);
    ck_assert_str_eq(out, expect);
    ck_assert_int_eq(
        run_shoal((const char *[]){"sample", res.model, "--tokens", "30", "--top-p", "1e-9",
                                   "--seed", "12", "--prompt", "ROMEO:", NULL}),
        0);
    ck_assert_str_eq(out, expect);

    /* top-k and top-p on the model's own logits: every draw in the set worked out here */
    ck_assert_int_eq(sl_picker_init(&pk, sl_vocab_size(m.vocab)), SL_OK);
    ck_assert_int_eq(sl_lm_state_new(m.lm, 1, &st), SL_OK);
    logits = malloc((size_t)sl_vocab_size(m.vocab) * sizeof *logits);
    x = sl_score_line_start(m.vocab, m.level);
    for (int step = 0; step < 60; step++) {
        int ids[128], seen[128] = {0}, n, V = sl_vocab_size(m.vocab);
        sl_pick_opts_t o = {0.5 + step % 3 * 0.5, 1 + step % 6, step % 2 ? 0.6 : 1.0};
        sl_rng_t rng;
        ck_assert_int_le(V, 128);
        ck_assert_int_eq(sl_lm_next_logits(m.lm, st, &x, logits), SL_OK);
        n = test_pick_allowed(logits, V, o.top_k, o.top_p, o.temperature, ids);
        for (int j = 0; j < n; j++)
            seen[ids[j]] = 1;
        sl_rng_init(&rng, (uint64_t)step);
        for (int d = 0; d < 50; d++) {
            int id = sl_picker_pick(&pk, logits, &o, &rng);
            ck_assert_msg(seen[id], "step %d: %d outside the allowed %d", step, id, n);
            x = id;
        }
    }
    free(logits);
    sl_lm_state_destroy(&st);
    sl_picker_fini(&pk);
    sl_model_file_close(&m);
    sl_config_fini(&cfg);

    /* a word model: same seed, same words */
    make_word_corpus("scorpus");
    word_config(&cfg, "scorpus", "srun");
    test_train_ok(&cfg, 0, &res);
    snprintf(wmodel, sizeof wmodel, "%s", res.model);
    ck_assert_int_eq(
        run_shoal((const char *[]){"sample", wmodel, "--tokens", "25", "--seed", "3", NULL}), 0);
    ck_assert_msg(strlen(out) > 25 && strchr(out, ' '), "stdout: %s", out);
    snprintf(first, sizeof first, "%s", out);
    ck_assert_int_eq(
        run_shoal((const char *[]){"sample", wmodel, "--tokens", "25", "--seed", "3", NULL}), 0);
    ck_assert_str_eq(out, first);
    sl_config_fini(&cfg);
}
END_TEST

/* Corrupt, truncated, old and mismatched model files, and bad options: one line, never
 * a crash. */
START_TEST(test_bad_model_files)
{
    sl_config_t cfg, ccfg;
    sl_train_result_t res, cres;
    char model[1024], bad[1024], conf[1024], cconf[1024], test[1024], other[1100];
    static const size_t cuts[] = {0, 7, 100, SL_CKPT_HEADER_BYTES + 3};
    unsigned char *d, *v3;
    size_t len, v3len, meta_len, meta_at;

    if (!test_shoal_find(shoal_bin, sizeof shoal_bin))
        return;
    make_word_corpus("bcorpus");
    word_config(&cfg, "bcorpus", "brun");
    test_train_ok(&cfg, 0, &res);
    snprintf(model, sizeof model, "%s", res.model);
    path_in(bad, sizeof bad, "bad.bin");
    path_in(test, sizeof test, "bcorpus/test.txt");
    path_in(conf, sizeof conf, "b.yaml");
    write_config(&cfg, conf);
    d = (unsigned char *)test_read_file(model, &len);

    /* truncated anywhere */
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0] + 3; i++) {
        size_t cut = i < sizeof cuts / sizeof cuts[0]    ? cuts[i]
                     : i == sizeof cuts / sizeof cuts[0] ? len / 2
                                                         : len - 1 - (i % 2) * 40;
        test_write_file(bad, d, cut);
        assert_one_line_error(run_shoal((const char *[]){"score", bad, test, NULL}), 1,
                              (const char *[]){bad, "truncated", NULL});
        assert_one_line_error(run_shoal((const char *[]){"sample", bad, NULL}), 1,
                              (const char *[]){bad, "truncated", NULL});
    }
    /* a flipped bit in the metadata */
    meta_at = meta_section(d, len, &meta_len);
    d[meta_at + meta_len / 2] ^= 0x10;
    test_write_file(bad, d, len);
    assert_one_line_error(run_shoal((const char *[]){"score", bad, test, NULL}), 1,
                          (const char *[]){bad, "checksum mismatch (file corrupt)", NULL});
    d[meta_at + meta_len / 2] ^= 0x10;
    /* lengths that lie, the checksum made right: the section's, a vocabulary entry's */
    sl_put_u64(d + meta_at - 8, (uint64_t)len + 1);
    test_ckpt_rehash(d, len);
    test_write_file(bad, d, len);
    assert_one_line_error(run_shoal((const char *[]){"score", bad, test, NULL}), 1,
                          (const char *[]){bad, "but its model metadata alone is", NULL});
    sl_put_u64(d + meta_at - 8, (uint64_t)meta_len);
    /* a configuration that is not the header's architecture: refused before anything is
     * built from it */
    sl_put_u32(d + test_meta_record(d, meta_at, "MODL") + 12 + 8, 0x7fffffffu); /* hidden */
    test_ckpt_rehash(d, len);
    test_write_file(bad, d, len);
    assert_one_line_error(run_shoal((const char *[]){"score", bad, test, NULL}), 1,
                          (const char *[]){bad,
                                           ": model metadata: a model of vocab 502, embedding 16, "
                                           "1 layer of 2147483647, but the header says vocab "
                                           "502, embedding 16, 1 layer of 16",
                                           NULL});
    sl_put_u32(d + test_meta_record(d, meta_at, "MODL") + 12 + 8, 16);
    sl_put_u32(d + test_meta_record(d, meta_at, "VOCB") + 12 + 4 + 4 * 0, 0x7fffffffu);
    test_ckpt_rehash(d, len);
    test_write_file(bad, d, len);
    assert_one_line_error(run_shoal((const char *[]){"sample", bad, NULL}), 1,
                          (const char *[]){bad, ": model metadata: entry 0 of 502", NULL});
    free(d);

    /* a file of before version 4: no vocabulary for score, the corpus for eval */
    d = (unsigned char *)test_read_file(model, &len);
    v3 = to_version3(d, len, &v3len);
    test_write_file(bad, v3, v3len);
    assert_one_line_error(
        run_shoal((const char *[]){"score", bad, test, NULL}), 1,
        (const char *[]){bad, "no vocabulary in this model file (format version 3", NULL});
    ck_assert_int_eq(
        run_shoal((const char *[]){"eval", conf, "--checkpoint", bad, "--split", "test", NULL}), 0);
    ck_assert_msg(strncmp(out, "test ppl ", 9) == 0, "%s %s", out, err);
    ck_assert_ptr_nonnull(strstr(out, "\nvocabulary: built from data.train "));
    /* ... evaluated on another test file: a warning, not a refusal */
    path_in(test, sizeof test, "other-test.txt");
    copy_lines("brown/valid.txt", test, 200);
    snprintf(other, sizeof other, "data.test=%s", test);
    test_config_set_ok(&cfg, other);
    write_config(&cfg, conf);
    ck_assert_int_eq(
        run_shoal((const char *[]){"eval", conf, "--checkpoint", bad, "--split", "test", NULL}), 0);
    ck_assert_msg(strncmp(out, "test ppl ", 9) == 0, "%s %s", out, err);
    ck_assert_msg(strstr(err, "its data hash differs") && count_lines(err) == 1, "%s", err);
    /* ... of another vocabulary */
    test_config_set_ok(&cfg, "data.vocab_size=400");
    write_config(&cfg, conf);
    assert_one_line_error(run_shoal((const char *[]){"eval", conf, "--checkpoint", bad, NULL}), 1,
                          (const char *[]){bad, "written for a different model (vocab 502", NULL});
    free(v3);
    free(d);

    /* a model of another level */
    char_config(&ccfg, "bccorpus", "bcrun");
    test_train_ok(&ccfg, 0, &cres);
    path_in(cconf, sizeof cconf, "c.yaml");
    write_config(&ccfg, cconf);
    assert_one_line_error(run_shoal((const char *[]){"eval", cconf, "--checkpoint", model, NULL}),
                          2,
                          (const char *[]){model, "a word-level model", "data.level char", NULL});
    assert_one_line_error(
        run_shoal((const char *[]){"eval", conf, "--checkpoint", cres.model, NULL}), 2,
        (const char *[]){"a char-level model", "data.level word", NULL});

    /* bad options and inputs */
    assert_one_line_error(run_shoal((const char *[]){"sample", model, "--top-p", "0", NULL}), 2,
                          (const char *[]){"--top-p must be", NULL});
    assert_one_line_error(run_shoal((const char *[]){"sample", model, "--temperature", "-1", NULL}),
                          2, (const char *[]){"--temperature must be", NULL});
    assert_one_line_error(run_shoal((const char *[]){"sample", model, "--prompt", "ok \xff", NULL}),
                          1, (const char *[]){"prompt: invalid UTF-8 at byte 3", NULL});
    assert_one_line_error(run_shoal((const char *[]){"score", model, NULL}), 2,
                          (const char *[]){"missing FILE", NULL});
    assert_one_line_error(run_shoal((const char *[]){"score", model, "/nonexistent.txt", NULL}), 1,
                          (const char *[]){"/nonexistent.txt", NULL});
    /* devices whose bytes never end, as the text and as the model */
    assert_one_line_error(run_shoal((const char *[]){"score", model, "/dev/zero", NULL}), 1,
                          (const char *[]){"/dev/zero: a device, not a file or a pipe", NULL});
    assert_one_line_error(run_shoal((const char *[]){"sample", "/dev/urandom", NULL}), 1,
                          (const char *[]){"/dev/urandom: a device, not a file or a pipe", NULL});
    test_write_file(bad, "\xff\xfe oops\n", 8);
    assert_one_line_error(run_shoal((const char *[]){"score", model, bad, NULL}), 1,
                          (const char *[]){bad, "invalid UTF-8 at byte 0", NULL});
    assert_one_line_error(run_shoal((const char *[]){"score", model, bad, "--per-line", NULL}), 1,
                          (const char *[]){bad, ":1: invalid UTF-8 at byte 0", NULL});
    /* a bad line after good ones: no row of the good ones either */
    test_write_file(bad, "the jury\nsaid \xff\n", 15);
    assert_one_line_error(run_shoal((const char *[]){"score", model, bad, "--per-line", NULL}), 1,
                          (const char *[]){bad, ":2: invalid UTF-8 at byte 5", NULL});
    sl_config_fini(&ccfg);
    sl_config_fini(&cfg);
}
END_TEST

static Suite *
model_file_suite(void)
{
    Suite *s = suite_create("model_file");
    TCase *core = tcase_create("core");
    TCase *limits = tcase_create("limits");

    tcase_set_timeout(core, 180);
    tcase_set_timeout(limits, 180);
    tcase_add_test(core, test_score_without_corpus);
    tcase_add_test(core, test_sample);
    tcase_add_test(limits, test_bad_model_files);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    /* the shoal commands' info lines (data loaded, ...) would mix with the one line of
     * an error that the tests look for */
    setenv("SHOAL_LOG", "warn", 1);
    return test_main_in_tmp(model_file_suite(), tmp_root, "check_model_file");
}
