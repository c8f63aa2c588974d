/* Tests of --init with a shoal model file (src/node/sl_import.c): a run over another
 * vocabulary takes the file's rows of the vocabulary's tensors word by word (a word it
 * lacks keeps the run's random row) and every other tensor whole, checked against both
 * files' parameters; `shoal train --init model.bin` of the same run starts from its
 * parameters bit for bit; a model of other sizes, layers or level is refused with one
 * line and changes nothing. A tiny model on slices of Brown. */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_log.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "data/sl_data.h"
#include "kernels/sl_backend.h"
#include "model/sl_model.h"
#include "model/sl_model_tensors.h"
#include "node/sl_import.h"
#include "node/sl_model_file.h"
#include "node/sl_train.h"

#include "test_tool.h"

static char tmp_root[] = "/tmp/shoal-check-init-model-XXXXXX";
static char data_dir[PATH_MAX];

/* A run built for cfg: its corpus, and a model on the CPU with its random
 * initialisation. */
typedef struct {
    sl_corpus_t corpus;
    sl_backend_t *be;
    sl_lm_t *lm;
} run_t;

static void
run_open(run_t *r, const sl_config_t *cfg)
{
    ck_assert_msg(sl_corpus_load(&r->corpus, cfg) == SL_OK, "%s", sl_err_msg());
    ck_assert_int_eq(sl_backend_cpu_new(&r->be, 1), SL_OK);
    ck_assert_int_eq(sl_lm_new(&r->lm, cfg, sl_vocab_size(r->corpus.vocab), 1, 1, r->be), SL_OK);
}

static float *
run_params(const run_t *r)
{
    size_t n = sl_lm_nparams(r->lm);
    float *p = malloc(n * sizeof *p);

    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(r->be->ops->to_host(r->be->ctx, p, sl_lm_params(r->lm), n * sizeof *p), SL_OK);
    return p;
}

static void
run_close(run_t *r)
{
    sl_lm_destroy(&r->lm);
    sl_backend_destroy(&r->be);
    sl_corpus_fini(&r->corpus);
}

/* The tiny model trained 20 steps on Brown's training text, vocabulary 500: its
 * model.bin into path. */
static void
trained_model(char *path, size_t cap)
{
    sl_config_t cfg;
    sl_train_result_t res;

    test_tiny_config(&cfg, tmp_root, data_dir, "from", "train.max_steps=20", NULL);
    test_train_ok(&cfg, 0, &res);
    snprintf(path, cap, "%s", res.model);
    sl_config_fini(&cfg);
}

/* A run over Brown's validation text (vocabulary 300, some of its words not among the
 * file's 500) takes the file's rows by word: for each entry of its vocabulary, the
 * file's row of that word when the file has it, else its own random row; the LSTM
 * whole. */
START_TEST(test_rows_by_word)
{
    char model[PATH_MAX], train_set[PATH_MAX + 16];
    sl_lm_tensor_t t[SL_LM_MAX_TENSORS], ft[SL_LM_MAX_TENSORS];
    sl_config_t cfg;
    sl_model_file_t m;
    run_t r;
    float *before, *after, *file;
    size_t nparams;
    int nt, nft, rows = -2, found = 0, missing = 0;

    trained_model(model, sizeof model);
    snprintf(train_set, sizeof train_set, "data.train=%s/brown/valid.txt", data_dir);
    test_tiny_config(&cfg, tmp_root, data_dir, "to", train_set, "data.vocab_size=300", NULL);
    run_open(&r, &cfg);
    before = run_params(&r);
    ck_assert_msg(sl_import_weights(model, &cfg, r.corpus.vocab, r.be, r.lm, &rows) == SL_OK, "%s",
                  sl_err_msg());
    after = run_params(&r);
    ck_assert_int_eq(sl_model_file_open(&m, model, "cpu", 1, 0), SL_OK);
    file = malloc(sl_lm_nparams(m.lm) * sizeof *file);
    ck_assert_int_eq(
        m.be->ops->to_host(m.be->ctx, file, sl_lm_params(m.lm), sl_lm_nparams(m.lm) * sizeof *file),
        SL_OK);
    ck_assert_int_eq(sl_lm_tensors(&cfg, sl_vocab_size(r.corpus.vocab), t, &nt, &nparams), SL_OK);
    ck_assert_uint_eq(nparams, sl_lm_nparams(r.lm));
    ck_assert_int_eq(sl_lm_tensors(&m.cfg, sl_vocab_size(m.vocab), ft, &nft, &nparams), SL_OK);
    ck_assert_int_eq(nft, nt);
    ck_assert_str_eq(t[nt - 2].name, "decoder.weight");
    /* the vocabulary's tensors: encoder.weight (V x 16), decoder.weight (V x 16),
     * decoder.bias (V) */
    for (int id = 0; id < sl_vocab_size(r.corpus.vocab); id++) {
        const char *w = sl_vocab_word(r.corpus.vocab, id);
        int fid = sl_vocab_id(m.vocab, w, strlen(w));
        int has = strcmp(sl_vocab_word(m.vocab, fid), w) == 0;
        size_t e = t[0].offset + (size_t)id * 16, fe = ft[0].offset + (size_t)fid * 16;
        size_t d = t[nt - 2].offset + (size_t)id * 16, fd = ft[nt - 2].offset + (size_t)fid * 16;
        size_t b = t[nt - 1].offset + (size_t)id, fb = ft[nt - 1].offset + (size_t)fid;

        found += has;
        missing += !has;
        if (has) {
            ck_assert_msg(memcmp(after + e, file + fe, 16 * sizeof *file) == 0, "row of '%s'", w);
            ck_assert_msg(memcmp(after + d, file + fd, 16 * sizeof *file) == 0, "'%s' decoder", w);
            ck_assert_msg(after[b] == file[fb], "'%s' decoder bias", w);
        } else {
            ck_assert_msg(memcmp(after + e, before + e, 16 * sizeof *file) == 0, "'%s' moved", w);
            ck_assert_msg(memcmp(after + d, before + d, 16 * sizeof *file) == 0, "'%s' moved", w);
        }
    }
    ck_assert_int_eq(rows, found);
    ck_assert_msg(found > 250 && missing > 0, "found %d, missing %d", found, missing);
    /* the LSTM, between the encoder and the decoder, whole */
    ck_assert(memcmp(after + t[1].offset, file + ft[1].offset,
                     (t[nt - 2].offset - t[1].offset) * sizeof *file) == 0);
    free(before);
    free(after);
    free(file);
    sl_model_file_close(&m);
    run_close(&r);
    sl_config_fini(&cfg);
}
END_TEST

/* A model of other sizes, layers or level: one line naming the file, the run's
 * parameters as they were. */
START_TEST(test_refused)
{
    static const char *const cases[][3] = {
        {"model.embedding=24", "data.vocab_size=500",
         "its encoder.weight is 502 x 16, this run's 502 x 24"},
        {"model.layers=[{lstm: 16}, {lstm: 16}]", "data.vocab_size=500",
         "its model has decoder.weight where this run's has rnns.1.weight_ih_l0"},
        {"data.level=char", "data.vocab_size=0",
         "a word-level model, but this run's data.level is char"},
    };
    char model[PATH_MAX], want[PATH_MAX + 128];

    trained_model(model, sizeof model);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_config_t cfg;
        run_t r;
        float *before, *after;
        int rows;

        test_tiny_config(&cfg, tmp_root, data_dir, "bad", cases[i][0], cases[i][1], NULL);
        run_open(&r, &cfg);
        before = run_params(&r);
        ck_assert_int_eq(sl_import_weights(model, &cfg, r.corpus.vocab, r.be, r.lm, &rows),
                         SL_ERR_CONFIG);
        snprintf(want, sizeof want, "%s: %s", model, cases[i][2]);
        ck_assert_msg(strncmp(sl_err_msg(), want, strlen(want)) == 0, "%s", sl_err_msg());
        ck_assert_ptr_null(strchr(sl_err_msg(), '\n'));
        after = run_params(&r);
        ck_assert(memcmp(before, after, sl_lm_nparams(r.lm) * sizeof *after) == 0);
        free(before);
        free(after);
        run_close(&r);
        sl_config_fini(&cfg);
    }
}
END_TEST

/* shoal train --init model.bin, the same settings, a step too small to move a weight
 * (lr 1e-30): the new run's model.bin holds the file's parameters. */
START_TEST(test_cli_same_run)
{
    char model[PATH_MAX], conf[PATH_MAX], dir_set[PATH_MAX + 16], model2[PATH_MAX], bin[PATH_MAX];
    char o[8192], e[8192];
    float *want, *got;
    size_t n, k;
    int rc;

    trained_model(model, sizeof model);
    snprintf(conf, sizeof conf, "%s/from/config.yaml", tmp_root);
    snprintf(dir_set, sizeof dir_set, "run.dir=%s/again", tmp_root);
    ck_assert(test_shoal_find(bin, sizeof bin));
    setenv("SHOAL_LOG", "warn", 1);
    rc = test_tool_run(bin, o, sizeof o, e, sizeof e, NULL,
                       (const char *const[]){"train", conf, "--init", model, "--set", dir_set,
                                             "--set", "train.max_steps=1", "--set",
                                             "train.optimizer.lr=1e-30", "--quiet", NULL});
    ck_assert_msg(rc == 0, "shoal train --init: exit %d: %s", rc, e);
    snprintf(model2, sizeof model2, "%s/again/model.bin", tmp_root);
    want = test_model_params(model, &n);
    got = test_model_params(model2, &k);
    ck_assert_uint_eq(k, n);
    ck_assert_msg(memcmp(got, want, n * sizeof *got) == 0, "shoal train --init: other weights");
    free(want);
    free(got);
}
END_TEST

static Suite *
init_model_suite(void)
{
    Suite *s = suite_create("init_model");
    TCase *core = tcase_create("core");

    tcase_set_timeout(core, 300);
    tcase_add_test(core, test_rows_by_word);
    tcase_add_test(core, test_refused);
    tcase_add_test(core, test_cli_same_run);
    suite_add_tcase(s, core);
    return s;
}

int
main(void)
{
    test_data_dir_absolute(data_dir, sizeof data_dir);
    sl_log_set_level(SL_LOG_WARN);
    return test_main_in_tmp(init_model_suite(), tmp_root, "check_init_model");
}
