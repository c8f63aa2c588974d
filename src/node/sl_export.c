/* safetensors export (weights plus a JSON file of vocabulary and configuration) and
 * import (sl_export.h). The export builds the model on the CPU backend, loads the
 * model file (with its own metadata, or with the corpus of a configuration for an
 * older file, as shoal eval does), and writes the views sl_lm_tensors names. */
#define _POSIX_C_SOURCE 200809L
#include "node/sl_export.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_file.h"
#include "common/sl_safetensors.h"
#include "data/sl_data.h"
#include "model/sl_model_tensors.h"
#include "node/sl_checkpoint.h"
#include "node/sl_metrics.h"
#include "node/sl_model_file.h"
#include "node/sl_train_internal.h"

sl_status_t
sl_export_json_path(const char *out, char *buf, size_t size)
{
    static const char ext[] = ".safetensors";
    size_t len = strlen(out), cut = strlen(ext);
    int n;

    if (len > cut && strcmp(out + len - cut, ext) == 0)
        n = snprintf(buf, size, "%.*s.json", (int)(len - cut), out);
    else
        n = snprintf(buf, size, "%s.json", out);
    if (n < 0 || (size_t)n >= size)
        return sl_err_set(SL_ERR_INVALID, "%s: path too long", out);
    return SL_OK;
}

/* The base name of path (what the JSON file calls the weights: they sit side by side). */
static const char *
base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* What the JSON file says besides the model and data settings of cfg. */
typedef struct {
    const sl_vocab_t *vocab; /* id order */
    const char *run;         /* the training run's name */
    const char *model;       /* the model file, as given */
    long step;
    const char *version; /* shoal's */
} json_src_t;

static void
write_json_body(FILE *fp, const sl_config_t *cfg, const json_src_t *src, const char *weights)
{
    const sl_vocab_t *vocab = src->vocab;
    int v = sl_vocab_size(vocab), eos = sl_vocab_eos(vocab);

    fputs("{\n  \"format\": \"shoal-export\",\n  \"format_version\": 1,\n  \"shoal_version\": ",
          fp);
    sl_json_string(fp, src->version);
    fputs(",\n  \"weights\": ", fp);
    sl_json_string(fp, weights);
    fputs(",\n  \"source\": {\"model\": ", fp);
    sl_json_string(fp, src->model);
    fprintf(fp, ", \"step\": %ld, \"run\": ", src->step);
    sl_json_string(fp, src->run);
    fprintf(fp, "},\n  \"model\": {\"vocab\": %d, \"embedding\": %d, \"layers\": [", v,
            cfg->model.embedding);
    for (int l = 0; l < cfg->model.nlayers; l++)
        fprintf(fp, "%s{\"lstm\": %d, \"projection\": %d}", l ? ", " : "",
                cfg->model.layers[l].hidden, cfg->model.layers[l].projection);
    fprintf(fp, "], \"output\": \"%s\", \"dropout\": %.17g, \"init_range\": %.17g},\n",
            sl_output_name(cfg->model.output), cfg->model.dropout, cfg->model.init_range);
    fprintf(fp, "  \"data\": {\"level\": \"%s\", \"vocab_size\": %d, \"unk\": \"<unk>\", ",
            sl_level_name(cfg->data.level), cfg->data.vocab_size);
    fprintf(fp, "\"unk_id\": %d, \"eos\": %s, \"eos_id\": ", sl_vocab_unk(vocab),
            eos >= 0 ? "\"<eos>\"" : "null");
    if (eos >= 0)
        fprintf(fp, "%d},\n", eos);
    else
        fputs("null},\n", fp);
    /* how shoal evaluates: EVAL_BATCH contiguous streams of train.bptt steps, the hidden
     * state carried across a split's batches, the remainder dropped */
    fprintf(fp, "  \"eval\": {\"streams\": %d, \"bptt\": %d},\n  \"vocab\": [\n", EVAL_BATCH,
            cfg->train.bptt);
    for (int id = 0; id < v; id++) {
        fputs("    ", fp);
        sl_json_string(fp, sl_vocab_word(vocab, id));
        fputs(id + 1 < v ? ",\n" : "\n", fp);
    }
    fputs("  ]\n}\n", fp);
}

/* The JSON file into f's temp file for path, as sl_st_write_temp does the weights. */
static sl_status_t
write_json_temp(sl_atomic_file_t *f, const char *path, const sl_config_t *cfg,
                const json_src_t *src, const char *weights)
{
    SL_TRY(sl_atomic_open(f, path));
    write_json_body(f->fp, cfg, src, weights);
    if (fflush(f->fp) != 0 || ferror(f->fp)) {
        sl_status_t st =
            sl_err_set(SL_ERR_IO, "%s: cannot write: %s", f->tmp_path, strerror(errno));
        sl_atomic_abort(f);
        return st;
    }
    return SL_OK;
}

/* Both files written whole before either replaces anything, so that a failed export
 * (a full disk, a directory in the JSON file's place) leaves the old pair as it was. */
static sl_status_t
write_pair(const char *out, const sl_st_out_t *w, int n, const char *json, const sl_config_t *cfg,
           const json_src_t *src)
{
    static const char *meta[] = {"format", "pt", "producer", "shoal", NULL};
    sl_atomic_file_t wf, jf;
    sl_status_t st;

    SL_TRY(sl_st_write_temp(&wf, out, w, n, meta));
    st = write_json_temp(&jf, json, cfg, src, base_name(out));
    if (st != SL_OK) {
        sl_atomic_abort(&wf);
        return st;
    }
    st = sl_atomic_commit(&wf);
    if (st != SL_OK) {
        sl_atomic_abort(&jf);
        return st;
    }
    return sl_atomic_commit(&jf);
}

/* The model file's parameters into *host (malloc'd by sl_alloc, their count in
 * *nparams): the model built on the CPU backend for the corpus's vocabulary, loaded as
 * shoal eval loads it. */
static sl_status_t
read_params(const sl_config_t *cfg, const sl_corpus_t *corpus, const char *model, float **host,
            size_t *nparams, long *step)
{
    sl_backend_t *be = NULL;
    sl_lm_t *lm = NULL;
    sl_ckpt_ident_t id;
    sl_ckpt_cursor_t cur;
    int vocab = sl_vocab_size(corpus->vocab), damaged;
    sl_status_t st;

    sl_ckpt_ident_init(&id, cfg, vocab, corpus->hash, 0, 1);
    SL_TRY(sl_backend_cpu_new(&be, cfg->run.threads));
    SL_TRY_GOTO(sl_lm_new(&lm, cfg, vocab, 1, 1, be), st, out);
    SL_TRY_GOTO(sl_checkpoint_check(model, &id, lm, NULL, NULL, NULL, &cur, &damaged), st, out);
    SL_TRY_GOTO(sl_checkpoint_load(model, &id, be, lm, NULL, NULL, NULL, NULL), st, out);
    *nparams = sl_lm_nparams(lm);
    SL_TRY_GOTO(SL_ALLOC(host, *nparams, "parameters"), st, out);
    SL_TRY_GOTO(be->ops->to_host(be->ctx, *host, sl_lm_params(lm), *nparams * sizeof **host), st,
                out);
    *step = cur.step;
out:
    sl_lm_destroy(&lm);
    sl_backend_destroy(&be);
    return st;
}

/* The weights file out from host (the count parameters of a model of cfg with src's
 * vocabulary, as loaded), then the JSON file; fills res. */
static sl_status_t
write_export(const sl_config_t *cfg, const json_src_t *src, const float *host, size_t count,
             const char *out, sl_export_result_t *res)
{
    sl_lm_tensor_t t[SL_LM_MAX_TENSORS];
    sl_st_out_t w[SL_LM_MAX_TENSORS];
    float *zeros = NULL;
    size_t nparams, most = 0;
    int n;
    sl_status_t st;

    res->vocab = sl_vocab_size(src->vocab);
    res->step = src->step;
    SL_TRY(sl_lm_tensors(cfg, res->vocab, t, &n, &nparams));
    SL_ASSERT(nparams == count);
    for (int i = 0; i < n; i++)
        if (t[i].zeros && t[i].count > most)
            most = t[i].count;
    SL_TRY(SL_CALLOC(&zeros, most ? most : 1, "zero biases"));
    for (int i = 0; i < n; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].name = t[i].name;
        w[i].ndim = t[i].ndim;
        w[i].shape[0] = t[i].shape[0];
        w[i].shape[1] = t[i].shape[1];
        w[i].data = t[i].zeros ? zeros : host + t[i].offset;
    }
    SL_TRY_GOTO(write_pair(out, w, n, res->json, cfg, src), st, done);
    res->tensors = n;
    res->nparams = nparams;
done:
    sl_free(zeros);
    return st;
}

/* The JSON path of out into res, and neither output the model file itself. */
static sl_status_t
check_outputs(const char *model, const char *out, sl_export_result_t *res)
{
    const char *same;

    SL_TRY(sl_export_json_path(out, res->json, sizeof res->json));
    same = sl_file_same(model, out) ? out : sl_file_same(model, res->json) ? res->json : NULL;
    if (same)
        return sl_err_set(SL_ERR_INVALID, "%s: is the model file %s itself: export it elsewhere",
                          same, model);
    return SL_OK;
}

sl_status_t
sl_export_safetensors(const sl_config_t *cfg, const char *model, const char *out,
                      const char *version, sl_export_result_t *res)
{
    json_src_t src = {NULL, cfg->run.name, model, 0, version};
    sl_corpus_t corpus;
    float *host = NULL;
    size_t nparams;
    sl_status_t st;

    memset(res, 0, sizeof *res);
    SL_TRY(check_outputs(model, out, res));
    SL_TRY(sl_corpus_load(&corpus, cfg));
    src.vocab = corpus.vocab;
    SL_TRY_GOTO(read_params(cfg, &corpus, model, &host, &nparams, &src.step), st, done);
    st = write_export(cfg, &src, host, nparams, out, res);
done:
    sl_free(host);
    sl_corpus_fini(&corpus);
    return st;
}

sl_status_t
sl_export_self_contained(const char *model, const char *out, const char *version,
                         sl_export_result_t *res)
{
    sl_model_file_t m;
    json_src_t src;
    float *host = NULL;
    size_t nparams;
    sl_status_t st;

    memset(res, 0, sizeof *res);
    SL_TRY(check_outputs(model, out, res));
    /* one thread: the export computes nothing */
    SL_TRY(sl_model_file_open(&m, model, "cpu", 1, 0));
    src = (json_src_t){m.vocab, m.info.meta.run_name, model, m.info.cur.step, version};
    nparams = sl_lm_nparams(m.lm);
    SL_TRY_GOTO(SL_ALLOC(&host, nparams, "parameters"), st, done);
    SL_TRY_GOTO(m.be->ops->to_host(m.be->ctx, host, sl_lm_params(m.lm), nparams * sizeof *host), st,
                done);
    st = write_export(&m.cfg, &src, host, nparams, out, res);
done:
    sl_free(host);
    sl_model_file_close(&m);
    return st;
}

/* Every tensor of the model there with its dtype and shape, and no other. */
static sl_status_t
check_tensors(const char *path, const sl_st_file_t *f, const sl_lm_tensor_t *t, int n)
{
    char have[96], want[96];

    for (int i = 0; i < n; i++) {
        const sl_st_tensor_t *x = sl_st_find(f, t[i].name);
        uint64_t shape[2] = {t[i].shape[0], t[i].shape[1]};
        int same = x && x->ndim == t[i].ndim;

        if (!x)
            return sl_err_set(SL_ERR_FORMAT, "%s: no tensor '%s' (doc/export.md names them)", path,
                              t[i].name);
        if (strcmp(x->dtype, "F32") != 0)
            return sl_err_set(SL_ERR_FORMAT, "%s: tensor '%s' is %s; shoal imports F32 only", path,
                              t[i].name, x->dtype);
        for (int d = 0; same && d < t[i].ndim; d++)
            same = x->shape[d] == shape[d];
        if (!same) {
            sl_st_shape_text(x->shape, x->ndim, have, sizeof have);
            sl_st_shape_text(shape, t[i].ndim, want, sizeof want);
            return sl_err_set(SL_ERR_FORMAT,
                              "%s: tensor '%s' has shape %s; the config's model needs %s", path,
                              t[i].name, have, want);
        }
    }
    for (int j = 0; j < f->n; j++) {
        int known = 0;
        for (int i = 0; i < n && !known; i++)
            known = strcmp(f->t[j].name, t[i].name) == 0;
        if (!known)
            return sl_err_set(SL_ERR_FORMAT,
                              "%s: tensor '%s' is not one of this model's (doc/export.md)", path,
                              f->t[j].name);
    }
    return SL_OK;
}

sl_status_t
sl_import_safetensors(const char *path, const sl_config_t *cfg, int vocab, sl_backend_t *be,
                      sl_lm_t *lm)
{
    sl_lm_tensor_t t[SL_LM_MAX_TENSORS];
    sl_st_file_t f;
    float *host = NULL, *hh = NULL;
    size_t nparams;
    int n;
    sl_status_t st;

    SL_TRY(sl_lm_tensors(cfg, vocab, t, &n, &nparams));
    SL_ASSERT(nparams == sl_lm_nparams(lm));
    SL_TRY(sl_st_read(path, &f));
    SL_TRY_GOTO(check_tensors(path, &f, t, n), st, out);
    SL_TRY_GOTO(SL_ALLOC(&host, nparams, "parameters"), st, out);
    for (int i = 0; i < n; i++) {
        const sl_st_tensor_t *x = sl_st_find(&f, t[i].name);
        if (!t[i].zeros) {
            sl_st_get_f32(&f, x, host + t[i].offset);
            continue;
        }
        /* b = b_ih + b_hh; a zero b_hh (shoal's own export) leaves b_ih's bits as they are */
        SL_TRY_GOTO(SL_ALLOC(&hh, t[i].count, "second bias"), st, out);
        sl_st_get_f32(&f, x, hh);
        for (size_t k = 0; k < t[i].count; k++)
            if (hh[k] != 0.0f)
                host[t[i].offset + k] += hh[k];
        sl_free(hh);
        hh = NULL;
    }
    st = be->ops->to_device(be->ctx, sl_lm_params(lm), host, nparams * sizeof *host);
out:
    sl_free(hh);
    sl_free(host);
    sl_st_fini(&f);
    return st;
}
