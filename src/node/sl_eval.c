/* shoal eval: a checkpoint or model file on the valid or test split of a configuration's
 * data. A model file with metadata reads the split with its own vocabulary (the split
 * may be any text); an older one with the vocabulary of the configuration's training
 * data, as before. Scored as training evaluates (sl_score.h). */
#include "node/sl_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_file.h"
#include "common/sl_log.h"
#include "data/sl_data.h"
#include "model/sl_model.h"
#include "node/sl_checkpoint.h"
#include "node/sl_model_file.h"
#include "node/sl_node_backend.h"
#include "node/sl_run_files.h"
#include "node/sl_score.h"

static sl_status_t
no_split(const sl_config_t *cfg, const char *split)
{
    if (strcmp(split, "test") == 0)
        return sl_err_set(SL_ERR_CONFIG, "%s: no test split (data.test is not set)", cfg->source);
    return sl_err_set(SL_ERR_CONFIG,
                      "%s: no valid split (data.valid is not set and data.valid_fraction is 0)",
                      cfg->source);
}

/* The split's ids with vocabulary v: its file, or for valid the tail valid_fraction of
 * the training file (as sl_corpus_load cuts it). */
static sl_status_t
split_tokens(const sl_config_t *cfg, const char *split, const sl_vocab_t *v, sl_level_t level,
             sl_tokens_t *out)
{
    const char *path = strcmp(split, "test") == 0 ? cfg->data.test : cfg->data.valid;
    int tail = 0;
    char *data;
    size_t len;
    sl_status_t st;

    if (!path || !*path) {
        if (strcmp(split, "valid") != 0 || !(cfg->data.valid_fraction > 0))
            return no_split(cfg, split);
        path = cfg->data.train;
        tail = 1;
    }
    SL_TRY(sl_file_read_all(path, &data, &len));
    st = sl_tokenize(v, level, path, data, len, 1, out);
    free(data);
    if (st == SL_OK && out->len == 0)
        st = sl_err_set(SL_ERR_INVALID, "%s: corpus is empty", path);
    if (st == SL_OK && tail) {
        size_t keep = (size_t)((double)out->len * (1.0 - cfg->data.valid_fraction));
        memmove(out->ids, out->ids + keep, (out->len - keep) * sizeof *out->ids);
        out->len -= keep;
    }
    return st;
}

static void
fill(sl_eval_result_t *res, const sl_score_t *sc)
{
    res->loss = sc->loss;
    res->tokens = sc->scored;
}

/* A file with metadata: its vocabulary and model; cfg gives the data, device, threads
 * and windows. */
static sl_status_t
eval_self_contained(const sl_config_t *cfg, const char *path, const char *split,
                    sl_eval_result_t *res)
{
    sl_model_file_t m;
    sl_tokens_t tok = {0};
    sl_score_t sc;
    sl_status_t st;

    SL_TRY(sl_model_file_open(&m, path, cfg->device, cfg->run.threads, cfg->train.bptt));
    if (m.level != cfg->data.level) {
        st = sl_err_set(SL_ERR_CONFIG, "%s: a %s-level model, but %s has data.level %s", path,
                        sl_level_name(m.level), cfg->source, sl_level_name(cfg->data.level));
        sl_model_file_close(&m);
        return st;
    }
    res->level = m.level;
    sl_model_file_describe_vocab(&m, res->vocab, sizeof res->vocab);
    st = split_tokens(cfg, split, m.vocab, m.level, &tok);
    if (st == SL_OK)
        st = sl_score_tokens(m.lm, &tok, sl_vocab_unk(m.vocab), cfg->train.bptt,
                             SL_MODEL_FILE_STREAMS, split, &sc);
    if (st == SL_OK)
        fill(res, &sc);
    free(tok.ids);
    sl_model_file_close(&m);
    return st;
}

/* A file without metadata: the configuration's corpus gives the vocabulary, as before;
 * a corpus of other bytes (another valid or test file) costs a warning, not a refusal. */
static sl_status_t
eval_with_corpus(const sl_config_t *cfg, const char *path, const char *split,
                 const sl_ckpt_info_t *info, sl_eval_result_t *res)
{
    sl_backend_t *be = NULL;
    sl_corpus_t corpus;
    sl_lm_t *lm = NULL;
    sl_ckpt_ident_t id;
    const sl_tokens_t *tok;
    sl_score_t sc;
    int vocab;
    sl_status_t rc;

    memset(&corpus, 0, sizeof corpus);
    SL_TRY_GOTO(sl_node_backend_open(cfg, 0, &be), rc, out);
    SL_TRY_GOTO(sl_corpus_load(&corpus, cfg), rc, out);
    tok = strcmp(split, "test") == 0 ? &corpus.test : &corpus.valid;
    if (tok->len == 0) {
        rc = no_split(cfg, split);
        goto out;
    }
    vocab = sl_vocab_size(corpus.vocab);
    snprintf(res->vocab, sizeof res->vocab, "built from data.train %s (%d entries; %s has none)",
             cfg->data.train, vocab, path);
    /* the file's data hash: another valid or test file is no reason to refuse it */
    sl_ckpt_ident_init(&id, cfg, vocab, info->id.corpus_hash, 0, 1);
    SL_TRY_GOTO(sl_lm_new(&lm, cfg, vocab, 1, SL_MODEL_FILE_STREAMS, be), rc, out);
    SL_TRY_GOTO(sl_checkpoint_load(path, &id, be, lm, NULL, NULL, NULL, NULL), rc, out);
    if (info->id.corpus_hash != corpus.hash)
        sl_log_warn("eval",
                    "%s: its data hash differs from the configuration's (another training, "
                    "valid or test file, or other data settings); the vocabulary built from "
                    "%s is right only if that is the file it was trained on",
                    path, cfg->data.train);
    SL_TRY_GOTO(sl_score_tokens(lm, tok, sl_vocab_unk(corpus.vocab), cfg->train.bptt,
                                SL_MODEL_FILE_STREAMS, split, &sc),
                rc, out);
    fill(res, &sc);
out:
    sl_lm_destroy(&lm);
    sl_corpus_fini(&corpus);
    sl_backend_destroy(&be);
    return rc;
}

sl_status_t
sl_eval_run(const sl_config_t *cfg, const char *path, const char *split, sl_eval_result_t *res)
{
    char model[SL_TRAIN_PATH_MAX];
    sl_ckpt_info_t info;
    sl_status_t rc;

    memset(res, 0, sizeof *res);
    res->level = cfg->data.level;
    res->loss = NAN;
    if (!path) /* the run's own */
        SL_TRY(sl_run_model_path(cfg, model, sizeof model));
    SL_TRY(sl_checkpoint_inspect(path ? path : model, &info));
    path = path ? path : model;
    rc = info.has_meta ? eval_self_contained(cfg, path, split, res)
                       : eval_with_corpus(cfg, path, split, &info, res);
    sl_checkpoint_info_fini(&info);
    return rc;
}
