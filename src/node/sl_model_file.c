/* Opening a self-contained model file: metadata first, then a model of the file's
 * configuration on the chosen backend, then its parameters, checked against the
 * header's architecture (sl_checkpoint_load). */
#define _POSIX_C_SOURCE 200809L
#include "node/sl_model_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/sl_model_meta.h"
#include "node/sl_node_backend.h"

static sl_status_t
set_string(char **field, const char *value)
{
    char *s = strdup(value);

    if (!s)
        return sl_err_set(SL_ERR_NOMEM, "out of memory");
    free(*field);
    *field = s;
    return SL_OK;
}

/* The metadata's architecture against the header's, and the parameter count it lays
 * out against the file's, before anything is allocated from it. */
static sl_status_t
check_arch(const sl_model_file_t *m, const sl_ckpt_ident_t *id)
{
    sl_component_t comp[SL_LM_MAX_COMPONENTS(1)];
    char have[256], want[256];
    size_t nparams;
    int ncomp;
    sl_status_t st;

    if (sl_ckpt_arch_hash(id) != sl_ckpt_arch_hash(&m->info.id)) {
        sl_ckpt_describe_arch(id, have, sizeof have);
        sl_ckpt_describe_arch(&m->info.id, want, sizeof want);
        return sl_err_set(SL_ERR_FORMAT,
                          "%s: model metadata: a model of %s, but the header says %s", m->path,
                          have, want);
    }
    st = sl_lm_layout(&m->cfg, id->vocab, 1, comp, (int)SL_LM_MAX_COMPONENTS(1), &ncomp, &nparams);
    if (st != SL_OK)
        return sl_err_prefix(st, "%s: model metadata", m->path);
    if (nparams != m->info.nparams)
        return sl_err_set(SL_ERR_FORMAT,
                          "%s: model metadata: a model of %zu parameters, the file holds %llu",
                          m->path, nparams, (unsigned long long)m->info.nparams);
    return SL_OK;
}

static sl_status_t
open_model(sl_model_file_t *m, const char *device, int threads, int bptt)
{
    sl_ckpt_ident_t id;
    sl_status_t st;
    int vocab;

    if (!m->info.has_meta)
        return sl_err_set(SL_ERR_FORMAT,
                          "%s: no vocabulary in this model file (format version %d, without "
                          "metadata); evaluate it with its training data: shoal eval "
                          "CONF.yaml --checkpoint %s",
                          m->path, m->info.version, m->path);
    m->vocab = m->info.meta.vocab;
    m->level = m->info.meta.level;
    vocab = sl_vocab_size(m->vocab);
    sl_model_meta_to_config(&m->info.meta, &m->cfg);
    if (bptt > 0)
        m->cfg.train.bptt = bptt;
    m->cfg.run.threads = threads;
    if (device)
        SL_TRY(set_string(&m->cfg.device, device));
    /* the file's own identity, with the architecture of its metadata */
    sl_ckpt_ident_init(&id, &m->cfg, vocab, m->info.id.corpus_hash, 0, 1);
    SL_TRY(check_arch(m, &id));
    SL_TRY(sl_node_backend_open(&m->cfg, 0, &m->be));
    /* the model's errors name the file: its sizes made them */
    st = sl_lm_new(&m->lm, &m->cfg, vocab, 1, SL_MODEL_FILE_STREAMS, m->be);
    if (st != SL_OK)
        return sl_err_prefix(st, "%s", m->path);
    return sl_checkpoint_load(m->path, &id, m->be, m->lm, NULL, NULL, NULL, NULL);
}

sl_status_t
sl_model_file_open(sl_model_file_t *m, const char *path, const char *device, int threads, int bptt)
{
    sl_status_t st;

    memset(m, 0, sizeof *m);
    m->path = path;
    sl_config_init(&m->cfg);
    st = sl_checkpoint_inspect(path, &m->info);
    if (st == SL_OK)
        st = open_model(m, device, threads, bptt);
    if (st != SL_OK)
        sl_model_file_close(m);
    return st;
}

void
sl_model_file_close(sl_model_file_t *m)
{
    if (!m->path)
        return;
    sl_lm_destroy(&m->lm);
    sl_backend_destroy(&m->be);
    sl_checkpoint_info_fini(&m->info);
    sl_config_fini(&m->cfg);
    memset(m, 0, sizeof *m);
}

void
sl_model_file_describe_vocab(const sl_model_file_t *m, char *buf, size_t size)
{
    snprintf(buf, size, "the model's own (%d entries, %s level)", sl_vocab_size(m->vocab),
             sl_level_name(m->level));
}
