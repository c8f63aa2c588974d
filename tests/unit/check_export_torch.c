/* The PyTorch check of shoal export: tools/shoal_torch.py loads the export of a tiny
 * model into PyTorch (nn.Embedding, nn.LSTM with proj_size, nn.Linear) and scores a
 * text file; its loss must be shoal's own evaluation of the same file to within 1e-4
 * relative. A word model with an LSTMP layer and a character model, on a file that
 * holds what tokenization must get right (CR LF, tabs, runs of spaces, unknown words
 * and characters, literal <unk> and <eos>, a last line without a newline). Skipped
 * (exit 77, saying why) where python3 ($SHOAL_PYTHON) cannot import torch. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_log.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "node/sl_export.h"
#include "node/sl_train.h"

#include "test_tool.h"

static char tmp_root[] = "/tmp/shoal-check-export-torch-XXXXXX";
static char data_dir[PATH_MAX];

static const char *
python(void)
{
    const char *py = getenv("SHOAL_PYTHON");
    return py && *py ? py : "python3";
}

/* A text to score: the start of Brown's test text, then the hard cases. */
static void
write_text(const char *path)
{
    static const char tail[] = "Zyx qqq <unk> the <eos> caf\xc3\xa9  na\xc3\xafve\tword\r\n"
                               "line two \r\n\n\n  \t \nthe last line has no newline \xe2\x82\xac";
    char src[PATH_MAX], *brown, *text;
    size_t len, cut = 30000;

    snprintf(src, sizeof src, "%s/brown/test.txt", data_dir);
    brown = test_read_file(src, &len);
    ck_assert_ptr_nonnull(brown);
    while (cut < len && brown[cut - 1] != '\n')
        cut++;
    text = malloc(cut + sizeof tail);
    memcpy(text, brown, cut);
    memcpy(text + cut, tail, sizeof tail);
    test_write_file(path, text, cut + sizeof tail - 1);
    free(text);
    free(brown);
}

/* Trains cfg, exports its model, scores the test file with tools/shoal_torch.py and
 * compares with shoal's evaluation of the test split (the same file). */
static void
check_against_torch(const sl_config_t *cfg, const char *name)
{
    sl_train_result_t res;
    sl_export_result_t ex;
    sl_eval_result_t ev;
    char out[PATH_MAX], script[PATH_MAX], cmd[4 * PATH_MAX], o[4096], e[8192], *p;
    const char *srcdir = getenv("SHOAL_SRCDIR");
    const char *args[] = {"-c", cmd, NULL};
    double loss, rel;
    int rc;

    test_train_ok(cfg, 0, &res);
    snprintf(out, sizeof out, "%s/%s.safetensors", tmp_root, name);
    ck_assert_msg(sl_export_safetensors(cfg, res.model, out, "test", &ex) == SL_OK, "%s",
                  sl_err_msg());
    ck_assert_msg(sl_eval_run(cfg, res.model, "test", &ev) == SL_OK, "%s", sl_err_msg());
    snprintf(script, sizeof script, "%s/tools/shoal_torch.py", srcdir ? srcdir : "..");
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' '%s'", python(), script, out, cfg->data.test);
    rc = test_tool_run("/bin/sh", o, sizeof o, e, sizeof e, NULL, args);
    ck_assert_msg(rc == 0, "%s: exit %d: %s", cmd, rc, e);
    p = strstr(o, "(loss ");
    ck_assert_msg(p != NULL, "%s printed: %s", cmd, o);
    loss = strtod(p + 6, NULL);
    ck_assert_msg(strstr(o, cfg->data.level == SL_LEVEL_CHAR ? "bpc " : "ppl ") == o, "%s", o);
    ck_assert_msg(strstr(p, "tokens)") != NULL, "%s", o);
    ck_assert_int_eq(strtol(strchr(p, ',') + 1, NULL, 10), ev.tokens);
    rel = fabs(loss - ev.loss) / ev.loss;
    fprintf(stderr, "check_export_torch: %s: shoal loss %.9f, PyTorch %.9f (relative %.2g)\n", name,
            ev.loss, loss, rel);
    ck_assert_msg(rel < 1e-4, "%s: PyTorch's loss %.9f, shoal's %.9f", name, loss, ev.loss);
}

START_TEST(test_torch_word_lstmp)
{
    sl_config_t cfg;
    char text[PATH_MAX], set[PATH_MAX + 16];

    snprintf(text, sizeof text, "%s/word.txt", tmp_root);
    write_text(text);
    snprintf(set, sizeof set, "data.test=%s", text);
    test_tiny_config(&cfg, tmp_root, data_dir, "word", set,
                     "model.layers=[{lstm: 16, projection: 8}, {lstm: 12}]", "train.max_steps=60",
                     NULL);
    check_against_torch(&cfg, "word");
    sl_config_fini(&cfg);
}
END_TEST

START_TEST(test_torch_char)
{
    sl_config_t cfg;
    char text[PATH_MAX], test[PATH_MAX + 16], train[PATH_MAX + 16];

    snprintf(text, sizeof text, "%s/char.txt", tmp_root);
    write_text(text);
    snprintf(test, sizeof test, "data.test=%s", text);
    snprintf(train, sizeof train, "data.train=%s/tinyshakespeare/input.txt", data_dir);
    test_tiny_config(&cfg, tmp_root, data_dir, "char", train, test,
                     "data.valid=", "data.valid_fraction=0.1", "data.level=char",
                     "data.vocab_size=0", "model.output.type=full", "train.max_steps=60", NULL);
    check_against_torch(&cfg, "char");
    sl_config_fini(&cfg);
}
END_TEST

static Suite *
export_torch_suite(void)
{
    Suite *s = suite_create("export_torch");
    TCase *core = tcase_create("core");

    tcase_set_timeout(core, 600);
    tcase_add_test(core, test_torch_word_lstmp);
    tcase_add_test(core, test_torch_char);
    suite_add_tcase(s, core);
    return s;
}

int
main(void)
{
    char cmd[PATH_MAX + 64];

    snprintf(cmd, sizeof cmd, "'%s' -c 'import torch' >/dev/null 2>&1", python());
    if (system(cmd) != 0) {
        printf("check_export_torch: SKIP: %s cannot import torch (pip install torch, or set "
               "SHOAL_PYTHON to a python3 that can, to run the PyTorch check of shoal export)\n",
               python());
        return 77;
    }
    test_data_dir_absolute(data_dir, sizeof data_dir);
    sl_log_set_level(SL_LOG_WARN);
    return test_main_in_tmp(export_torch_suite(), tmp_root, "check_export_torch");
}
