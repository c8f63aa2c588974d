/* libFuzzer target: the readers of model and checkpoint files (node/sl_checkpoint.h,
 * node/sl_model_file.h, model/sl_model_meta.h) and of the safetensors weights that
 * shoal train --init imports (node/sl_export.h), on arbitrary bytes written to a file.
 * Input: [mode u8][file bytes]. Mode bit 2 clear: a checkpoint or model file; bit 1
 * first writes the architecture hash that the header's sizes give (header offset 24),
 * bit 0 then the checksum (the last 8 bytes), so that the checks behind them are
 * reached; bit 3: the file is preceded by a text, [u16 le length][text], that a model
 * which opens scores as shoal score does (sl_tokenize and sl_score_tokens, then
 * sl_score_lines). The file goes through sl_checkpoint_inspect, sl_model_file_open on the cpu
 * backend (1 thread, windows of the file's own train.bptt, as shoal score, sample and
 * export open it) and, when it opens, sl_checkpoint_check
 * with its own identity, then for a checkpoint sl_checkpoint_check and
 * sl_checkpoint_load with an optimizer and hidden state. Mode bit 2 set: a safetensors
 * file through sl_st_read, every tensor read back, and sl_import_safetensors into a
 * tiny model (that of the seed tiny-word.safetensors). What the readers promise is
 * checked: a failure is a one-line message (no control characters) that starts with
 * the path, never SL_ERR_NOMEM (nothing is allocated from a header before the file's
 * size backs it); what they accept is consistent (sizes, vocabulary, verdicts). A
 * broken promise prints what broke and aborts. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sl_endian.h"
#include "common/sl_hash.h"
#include "common/sl_log.h"
#include "common/sl_safetensors.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "model/sl_model.h"
#include "model/sl_optim.h"
#include "node/sl_checkpoint.h"
#include "node/sl_export.h"
#include "node/sl_model_file.h"
#include "node/sl_node_backend.h"
#include "node/sl_score.h"

#define CKPT_HASH_SEED 0x53484f414c434b50ull /* sl_checkpoint.c's, "SHOALCKP" */
#define OFF_ARCH 24
#define BPTT 3 /* the tiny model's */
#define MODE_CHECKSUM 1u
#define MODE_ARCH 2u
#define MODE_SAFETENSORS 4u
#define MODE_TEXT 8u
#define TEXT_NAME "fuzz.txt"
/* the tiny model that safetensors files are imported into */
#define TINY_VOCAB 10
#define TINY_E 3
#define TINY_H 3

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[] = "/tmp/shoal-fuzz-model-XXXXXX";
static char path[sizeof dir + 16];
static sl_config_t tiny_cfg;
static sl_backend_t *tiny_be;
static sl_lm_t *tiny_lm;

static void
broken(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_model: %s: %s\n", what, detail);
    abort();
}

static void
cleanup(void)
{
    sl_lm_destroy(&tiny_lm);
    sl_backend_destroy(&tiny_be);
    sl_config_fini(&tiny_cfg);
    unlink(path);
    rmdir(dir);
}

/* Once: the private directory, quiet logs, the tiny model. */
static void
setup(void)
{
    static int done;

    if (done)
        return;
    done = 1;
    if (!mkdtemp(dir))
        broken("mkdtemp", dir);
    snprintf(path, sizeof path, "%s/m.bin", dir);
    sl_log_set_level(SL_LOG_ERROR);
    sl_config_init(&tiny_cfg);
    tiny_cfg.model.embedding = TINY_E;
    tiny_cfg.model.nlayers = 1;
    tiny_cfg.model.layers[0].hidden = TINY_H;
    tiny_cfg.model.layers[0].projection = 0;
    tiny_cfg.model.output = SL_OUTPUT_FULL;
    tiny_cfg.train.bptt = BPTT;
    tiny_cfg.run.threads = 1;
    if (sl_node_backend_open(&tiny_cfg, 0, &tiny_be) != SL_OK ||
        sl_lm_new(&tiny_lm, &tiny_cfg, TINY_VOCAB, 1, 1, tiny_be) != SL_OK)
        broken("the tiny model", sl_err_msg());
    atexit(cleanup);
}

static void
write_file(const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");

    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        broken("cannot write", path);
}

/* A failure: not SL_ERR_NOMEM, one plain line "NAME: text" (or "NAME:LINE: text"). */
static void
check_named_failure(sl_status_t st, const char *who, const char *name)
{
    const char *msg = sl_err_msg();
    size_t n = strlen(name);

    if (st == SL_ERR_NOMEM)
        broken(who, msg);
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            broken("message not on one plain line", msg);
    if (strncmp(msg, name, n) != 0 || msg[n] != ':' || !msg[n + 1])
        broken("message does not start with the file's name", msg);
}

/* The same for the file at path: "PATH: text". */
static void
check_failure(sl_status_t st, const char *who)
{
    check_named_failure(st, who, path);
    if (sl_err_msg()[strlen(path) + 1] != ' ')
        broken("message does not start with 'PATH: '", sl_err_msg());
}

static sl_status_t
count_line(void *ctx, long line, long tokens, double loss_sum)
{
    long *lines = ctx;

    (void)loss_sum;
    if (line != *lines + 1 || tokens < 1)
        broken("sl_score_lines: lines out of order or empty", TEXT_NAME);
    *lines = line;
    return SL_OK;
}

/* text scored with the model m, whole (sl_tokenize, sl_score_tokens) and line by line:
 * what shoal score does with a file. */
static void
score_text(sl_model_file_t *m, const char *text, size_t len)
{
    sl_tokens_t tok;
    sl_score_t sc;
    long lines = 0;
    sl_status_t st = sl_tokenize(m->vocab, m->level, TEXT_NAME, text, len, 1, &tok);

    if (st != SL_OK) {
        check_named_failure(st, "sl_tokenize", TEXT_NAME);
    } else {
        st = sl_score_tokens(m->lm, &tok, sl_vocab_unk(m->vocab), m->cfg.train.bptt,
                             SL_MODEL_FILE_STREAMS, TEXT_NAME, &sc);
        if (st != SL_OK)
            check_named_failure(st, "sl_score_tokens", TEXT_NAME);
        else if (sc.tokens != (long)tok.len || sc.scored < 1 || sc.scored > sc.tokens ||
                 sc.unk > sc.tokens)
            broken("sl_score_tokens: counts out of range", TEXT_NAME);
        free(tok.ids);
    }
    st = sl_score_lines(m->lm, m->vocab, m->level, TEXT_NAME, text, len, m->cfg.train.bptt,
                        count_line, &lines);
    if (st != SL_OK)
        check_named_failure(st, "sl_score_lines", TEXT_NAME);
}

/* The checkpoint's architecture hash and checksum, as the mode says. */
static void
reseal(uint8_t *b, size_t size, unsigned mode)
{
    if ((mode & MODE_ARCH) && size >= 112) {
        sl_ckpt_ident_t id;
        memset(&id, 0, sizeof id);
        id.vocab = (int)sl_get_u32(b + 32);
        id.embedding = (int)sl_get_u32(b + 36);
        id.nlayers = (int)sl_get_u32(b + 40);
        for (int l = 0; l < SL_MAX_LAYERS; l++) {
            id.layers[l].hidden = (int)sl_get_u32(b + 48 + 4 * l);
            id.layers[l].projection = (int)sl_get_u32(b + 80 + 4 * l);
        }
        sl_put_u64(b + OFF_ARCH, sl_ckpt_arch_hash(&id));
    }
    if ((mode & MODE_CHECKSUM) && size >= 8)
        sl_put_u64(b + size - 8, sl_hash_bytes(b, size - 8, CKPT_HASH_SEED));
}

/* The settings a model file gives within the ranges of the configuration keys (shoal
 * export writes them into its JSON file, shoal eval and sample use them). */
static int
settings_in_range(const sl_config_t *c)
{
    return c->model.dropout >= 0.0 && c->model.dropout < 1.0 && c->model.init_range > 0.0 &&
           isfinite(c->model.init_range) && c->model.samples >= 0 && c->data.vocab_size >= 0 &&
           c->data.valid_fraction >= 0.0 && c->data.valid_fraction < 1.0 &&
           c->data.max_tokens >= 0 && c->train.batch >= 1;
}

/* A checkpoint's training state, loaded as a resumed run would with the optimizer and
 * batch shape its header names (up to the streams the model was built for). */
static void
check_train_state(sl_model_file_t *m, const sl_ckpt_ident_t *own)
{
    sl_ckpt_ident_t id = *own;
    sl_optim_t *opt = NULL;
    sl_lm_state_t *st = NULL;
    sl_ckpt_cursor_t cur;
    sl_status_t a, b;
    int damaged;

    if ((unsigned)m->info.id.optimizer > SL_OPT_ADAM || m->info.id.batch < 1 ||
        m->info.id.batch > SL_MODEL_FILE_STREAMS)
        return;
    m->cfg.train.optimizer.type = m->info.id.optimizer;
    if (sl_optim_new(&opt, &m->cfg, sl_lm_nparams(m->lm), m->be) != SL_OK ||
        sl_lm_state_new(m->lm, m->info.id.batch, &st) != SL_OK)
        broken("optimizer or state for a model that opened", sl_err_msg());
    id.optimizer = m->info.id.optimizer;
    id.batch = m->info.id.batch;
    id.bptt = m->info.id.bptt;
    id.nodes = m->info.id.nodes;
    id.rank = m->info.id.rank;
    id.sync = m->info.id.sync;
    /* a run one step longer, of epochs as long as the cursor says (when it can) */
    id.total_steps = m->info.cur.step + 1;
    id.batches_per_epoch = m->info.cur.batch_index + 1;
    if (m->info.cur.epoch > 0 && m->info.cur.step > m->info.cur.batch_index &&
        (m->info.cur.step - m->info.cur.batch_index) / m->info.cur.epoch > m->info.cur.batch_index)
        id.batches_per_epoch = (m->info.cur.step - m->info.cur.batch_index) / m->info.cur.epoch;
    a = sl_checkpoint_check(path, &id, m->lm, opt, st, NULL, &cur, &damaged);
    if (a != SL_OK)
        check_failure(a, "sl_checkpoint_check with training state");
    b = sl_checkpoint_load(path, &id, m->be, m->lm, opt, st, NULL, &cur);
    if (b != SL_OK)
        check_failure(b, "sl_checkpoint_load with training state");
    if ((a == SL_OK) != (b == SL_OK))
        broken("sl_checkpoint_check and sl_checkpoint_load disagree", sl_err_msg());
    sl_lm_state_destroy(&st);
    sl_optim_destroy(&opt);
}

static void
check_checkpoint(size_t size, const char *text, size_t text_len)
{
    sl_ckpt_info_t info;
    sl_model_file_t m;
    sl_status_t st = sl_checkpoint_inspect(path, &info);

    if (st != SL_OK) {
        check_failure(st, "sl_checkpoint_inspect");
    } else {
        if (info.version < 1 || info.version > SL_CKPT_VERSION || info.nparams > size / 4 ||
            (info.has_meta && info.meta.vocab && sl_vocab_size(info.meta.vocab) != info.id.vocab))
            broken("sl_checkpoint_inspect took an inconsistent file", path);
        sl_checkpoint_info_fini(&info);
    }
    st = sl_model_file_open(&m, path, "cpu", 1, 0);
    if (st != SL_OK) {
        check_failure(st, "sl_model_file_open");
        return;
    }
    if (sl_lm_nparams(m.lm) != m.info.nparams || sl_vocab_size(m.vocab) != m.info.id.vocab ||
        m.cfg.train.bptt != m.info.meta.bptt)
        broken("sl_model_file_open built another model than the file's", path);
    if (!settings_in_range(&m.cfg))
        broken("a model file's settings that no configuration may have", path);
    {
        sl_ckpt_ident_t id;
        int damaged;
        sl_ckpt_ident_init(&id, &m.cfg, m.info.id.vocab, m.info.id.corpus_hash, 0, 1);
        if (sl_checkpoint_check(path, &id, m.lm, NULL, NULL, NULL, NULL, &damaged) != SL_OK)
            broken("a model that opened does not check", sl_err_msg());
        if (text) {
            char *t = malloc(text_len ? text_len : 1); /* exact size, as the file */
            if (!t)
                abort();
            memcpy(t, text, text_len);
            score_text(&m, t, text_len);
            free(t);
        }
        if (m.info.train_state)
            check_train_state(&m, &id);
    }
    sl_model_file_close(&m);
}

static void
check_safetensors(void)
{
    sl_st_file_t f;
    sl_status_t st = sl_st_read(path, &f);

    if (st != SL_OK) {
        check_failure(st, "sl_st_read");
    } else {
        uint64_t covered = 0;
        for (int i = 0; i < f.n; i++) {
            const sl_st_tensor_t *t = &f.t[i];
            if (t->begin > t->end || t->end > f.data_len || sl_st_find(&f, t->name) != t)
                broken("sl_st_read took an inconsistent file", t->name);
            covered += t->end - t->begin;
            if (strcmp(t->dtype, "F32") == 0) {
                float *x = malloc(t->end - t->begin + 1);
                if (!x)
                    abort();
                sl_st_get_f32(&f, t, x);
                free(x);
            }
        }
        if (covered != f.data_len)
            broken("sl_st_read: tensors do not cover the data section", path);
        sl_st_fini(&f);
    }
    st = sl_import_safetensors(path, &tiny_cfg, TINY_VOCAB, tiny_be, tiny_lm);
    if (st != SL_OK)
        check_failure(st, "sl_import_safetensors");
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = NULL;
    size_t text_len = 0;
    unsigned mode;
    uint8_t *b;

    if (size < 1)
        return 0;
    setup();
    mode = data[0];
    data++;
    size--;
    if ((mode & MODE_TEXT) && !(mode & MODE_SAFETENSORS)) {
        if (size < 2 || (size_t)(data[0] | data[1] << 8) > size - 2)
            return 0;
        text_len = (size_t)(data[0] | data[1] << 8);
        text = (const char *)data + 2;
        data += 2 + text_len;
        size -= 2 + text_len;
    }
    b = malloc(size ? size : 1); /* exact size: ASan sees overreads */
    if (!b)
        abort();
    memcpy(b, data, size);
    if (!(mode & MODE_SAFETENSORS))
        reseal(b, size, mode);
    write_file(b, size);
    free(b);
    if (mode & MODE_SAFETENSORS)
        check_safetensors();
    else
        check_checkpoint(size, text, text_len);
    return 0;
}
