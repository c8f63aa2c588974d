/* --init's weights (sl_import.h). */
#include "node/sl_import.h"

#include <stdio.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "model/sl_model_tensors.h"
#include "node/sl_checkpoint.h"
#include "node/sl_export.h"
#include "node/sl_model_file.h"

/* Whether path starts as a shoal model or checkpoint file does (one that cannot be
 * read is left to the safetensors reader, which says why). */
static int
is_shoal_file(const char *path)
{
    char magic[8];
    FILE *f = fopen(path, "rb");
    int yes;

    if (!f)
        return 0;
    yes = fread(magic, 1, sizeof magic, f) == sizeof magic &&
          memcmp(magic, SL_CKPT_MAGIC, sizeof magic) == 0;
    fclose(f);
    return yes;
}

/* Whether x has a row per vocabulary entry. */
static int
by_word(const sl_lm_tensor_t *x)
{
    return strcmp(x->name, "encoder.weight") == 0 || strncmp(x->name, "decoder.", 8) == 0;
}

/* The file's tensors (have) against the run's (want): the same names in the same order,
 * the same shapes but for the rows of the vocabulary's. */
static sl_status_t
check_tensors(const char *path, const sl_lm_tensor_t *have, int nhave, const sl_lm_tensor_t *want,
              int nwant)
{
    for (int i = 0; i < nhave || i < nwant; i++) {
        const sl_lm_tensor_t *h = i < nhave ? &have[i] : NULL, *w = i < nwant ? &want[i] : NULL;
        int rows_differ;

        if (!h || !w || strcmp(h->name, w->name) != 0)
            return sl_err_set(SL_ERR_CONFIG,
                              "%s: its model has %s where this run's has %s (the model "
                              "section must describe the file's layers)",
                              path, h ? h->name : "no more tensors",
                              w ? w->name : "no more tensors");
        rows_differ = h->shape[0] != w->shape[0] && !by_word(w);
        if (rows_differ || h->shape[1] != w->shape[1])
            return sl_err_set(SL_ERR_CONFIG,
                              "%s: its %s is %zu x %zu, this run's %zu x %zu (the model section "
                              "must have the file's sizes)",
                              path, w->name, h->shape[0], h->shape[1], w->shape[0], w->shape[1]);
    }
    return SL_OK;
}

/* The id in from of the word to's id r names; -1 when from lacks it. */
static int
same_word(const sl_vocab_t *from, const sl_vocab_t *to, int r)
{
    const char *w = sl_vocab_word(to, r);
    int id = sl_vocab_id(from, w, strlen(w));

    return strcmp(sl_vocab_word(from, id), w) == 0 ? id : -1;
}

/* host (the run's parameters) takes the file's: whole tensors, or row by word. */
static int
take_rows(const sl_lm_tensor_t *have, const sl_lm_tensor_t *want, int n, const float *file,
          float *host, const sl_vocab_t *from, const sl_vocab_t *to)
{
    int rows = 0;

    for (int r = 0; r < sl_vocab_size(to); r++) {
        int id = same_word(from, to, r);
        if (id < 0)
            continue;
        rows++;
        for (int i = 0; i < n; i++) {
            size_t cols = want[i].shape[1] ? want[i].shape[1] : 1;
            if (by_word(&want[i]))
                memcpy(host + want[i].offset + (size_t)r * cols,
                       file + have[i].offset + (size_t)id * cols, cols * sizeof *host);
        }
    }
    for (int i = 0; i < n; i++)
        if (!by_word(&want[i]) && !want[i].zeros)
            memcpy(host + want[i].offset, file + have[i].offset, want[i].count * sizeof *host);
    return rows;
}

static sl_status_t
import_model(const char *path, const sl_config_t *cfg, const sl_vocab_t *vocab, sl_backend_t *be,
             sl_lm_t *lm, int *rows)
{
    sl_lm_tensor_t have[SL_LM_MAX_TENSORS], want[SL_LM_MAX_TENSORS];
    size_t nfile, nrun;
    float *file = NULL, *host = NULL;
    int nhave, nwant;
    sl_model_file_t m;
    sl_status_t st;

    SL_TRY(sl_model_file_open(&m, path, "cpu", 1, 0));
    if (m.level != cfg->data.level) {
        st = sl_err_set(SL_ERR_CONFIG, "%s: a %s-level model, but this run's data.level is %s",
                        path, sl_level_name(m.level), sl_level_name(cfg->data.level));
        goto out;
    }
    SL_TRY_GOTO(sl_lm_tensors(&m.cfg, sl_vocab_size(m.vocab), have, &nhave, &nfile), st, out);
    SL_TRY_GOTO(sl_lm_tensors(cfg, sl_vocab_size(vocab), want, &nwant, &nrun), st, out);
    SL_ASSERT(nrun == sl_lm_nparams(lm));
    SL_TRY_GOTO(check_tensors(path, have, nhave, want, nwant), st, out);
    SL_TRY_GOTO(SL_ALLOC(&file, nfile, "the file's parameters"), st, out);
    SL_TRY_GOTO(SL_ALLOC(&host, nrun, "parameters"), st, out);
    SL_TRY_GOTO(m.be->ops->to_host(m.be->ctx, file, sl_lm_params(m.lm), nfile * sizeof *file), st,
                out);
    SL_TRY_GOTO(be->ops->to_host(be->ctx, host, sl_lm_params(lm), nrun * sizeof *host), st, out);
    *rows = take_rows(have, want, nwant, file, host, m.vocab, vocab);
    st = be->ops->to_device(be->ctx, sl_lm_params(lm), host, nrun * sizeof *host);
out:
    sl_free(file);
    sl_free(host);
    sl_model_file_close(&m);
    return st;
}

sl_status_t
sl_import_weights(const char *path, const sl_config_t *cfg, const sl_vocab_t *vocab,
                  sl_backend_t *be, sl_lm_t *lm, int *rows)
{
    *rows = -1;
    if (is_shoal_file(path))
        return import_model(path, cfg, vocab, be, lm, rows);
    return sl_import_safetensors(path, cfg, sl_vocab_size(vocab), be, lm);
}
