/* The metadata section of model files: encoding into one buffer, and decoding with
 * every length checked against the bytes that remain (layout in sl_model_meta.h). */
#include "config.h"

#include "model/sl_model_meta.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_endian.h"

#define TAG(a, b, c, d)                                                                            \
    ((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16 | (uint32_t)(d) << 24)
#define TAG_DATA TAG('D', 'A', 'T', 'A')
#define TAG_VOCB TAG('V', 'O', 'C', 'B')
#define TAG_MODL TAG('M', 'O', 'D', 'L')
#define TAG_PROV TAG('P', 'R', 'O', 'V')
#define META_MAX_WORD 65536u /* bytes of one vocabulary entry: more is a corrupt file */

void
sl_model_meta_init(sl_model_meta_t *m, const sl_config_t *cfg, const sl_vocab_t *v)
{
    memset(m, 0, sizeof *m);
    m->level = cfg->data.level;
    m->vocab = v;
    m->unk = sl_vocab_unk(v);
    m->eos = sl_vocab_eos(v);
    m->vocab_limit = cfg->data.vocab_size;
    m->valid_fraction = cfg->data.valid_fraction;
    m->max_tokens = cfg->data.max_tokens;
    m->embedding = cfg->model.embedding;
    m->nlayers = cfg->model.nlayers;
    memcpy(m->layers, cfg->model.layers, sizeof m->layers);
    m->output = cfg->model.output;
    m->samples = cfg->model.samples;
    m->dropout = cfg->model.dropout;
    m->init_range = cfg->model.init_range;
    m->bptt = cfg->train.bptt;
    m->batch = cfg->train.batch;
    m->seed = cfg->run.seed;
    snprintf(m->version, sizeof m->version, "%s", PACKAGE_VERSION);
    snprintf(m->run_name, sizeof m->run_name, "%s", cfg->run.name ? cfg->run.name : "");
    m->nodes = 1;
    m->sync = SL_SYNC_NONE;
    m->valid_loss = m->test_loss = NAN;
    m->valid_step = -1;
}

void
sl_model_meta_fini(sl_model_meta_t *m)
{
    sl_vocab_destroy(&m->owned);
    memset(m, 0, sizeof *m);
}

/* ---- writing ---- */

typedef struct {
    unsigned char *p;
    size_t len, cap;
    int failed;
} wbuf_t;

static unsigned char *
wb_room(wbuf_t *w, size_t n)
{
    if (w->failed)
        return NULL;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 4096;
        unsigned char *p;
        while (cap < w->len + n)
            cap *= 2;
        if (!(p = realloc(w->p, cap))) {
            w->failed = 1;
            return NULL;
        }
        w->p = p;
        w->cap = cap;
    }
    w->len += n;
    return w->p + w->len - n;
}

static void
wb_u32(wbuf_t *w, uint32_t v)
{
    unsigned char *p = wb_room(w, 4);
    if (p)
        sl_put_u32(p, v);
}

static void
wb_u64(wbuf_t *w, uint64_t v)
{
    unsigned char *p = wb_room(w, 8);
    if (p)
        sl_put_u64(p, v);
}

static void
wb_f64(wbuf_t *w, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    wb_u64(w, bits);
}

static void
wb_bytes(wbuf_t *w, const void *data, size_t n)
{
    unsigned char *p = wb_room(w, n);
    if (p && n)
        memcpy(p, data, n);
}

static void
wb_string(wbuf_t *w, const char *s)
{
    wb_u32(w, (uint32_t)strlen(s));
    wb_bytes(w, s, strlen(s));
}

/* A record's tag and a length to fill in by record_end; returns where it starts. */
static size_t
record_begin(wbuf_t *w, uint32_t tag)
{
    wb_u32(w, tag);
    wb_u64(w, 0);
    return w->len;
}

static void
record_end(wbuf_t *w, size_t start)
{
    if (!w->failed)
        sl_put_u64(w->p + start - 8, (uint64_t)(w->len - start));
}

sl_status_t
sl_model_meta_encode(const sl_model_meta_t *m, unsigned char **out, size_t *len)
{
    wbuf_t w = {0};
    size_t at;
    int n = sl_vocab_size(m->vocab);

    wb_u32(&w, SL_MODEL_META_VERSION);
    wb_u32(&w, 4);
    at = record_begin(&w, TAG_DATA);
    wb_u32(&w, (uint32_t)m->level);
    wb_u32(&w, (uint32_t)m->unk);
    wb_u32(&w, (uint32_t)m->eos);
    wb_u32(&w, SL_MODEL_META_UNK_RULE);
    wb_u32(&w, (uint32_t)m->vocab_limit);
    wb_f64(&w, m->valid_fraction);
    wb_u64(&w, (uint64_t)(int64_t)m->max_tokens);
    record_end(&w, at);

    at = record_begin(&w, TAG_VOCB);
    wb_u32(&w, (uint32_t)n);
    for (int i = 0; i < n; i++)
        wb_string(&w, sl_vocab_word(m->vocab, i));
    record_end(&w, at);

    at = record_begin(&w, TAG_MODL);
    wb_u32(&w, (uint32_t)m->embedding);
    wb_u32(&w, (uint32_t)m->nlayers);
    for (int l = 0; l < m->nlayers && l < SL_MAX_LAYERS; l++) {
        wb_u32(&w, (uint32_t)m->layers[l].hidden);
        wb_u32(&w, (uint32_t)m->layers[l].projection);
    }
    wb_u32(&w, (uint32_t)m->output);
    wb_u32(&w, (uint32_t)m->samples);
    wb_f64(&w, m->dropout);
    wb_f64(&w, m->init_range);
    wb_u32(&w, (uint32_t)m->bptt);
    wb_u32(&w, (uint32_t)m->batch);
    wb_u64(&w, m->seed);
    record_end(&w, at);

    at = record_begin(&w, TAG_PROV);
    wb_string(&w, m->version);
    wb_string(&w, m->run_name);
    wb_u32(&w, (uint32_t)m->nodes);
    wb_u32(&w, (uint32_t)m->sync);
    wb_u32(&w, (uint32_t)m->models_averaged);
    wb_u64(&w, (uint64_t)(int64_t)m->steps);
    wb_u64(&w, m->tokens);
    wb_f64(&w, m->valid_loss);
    wb_u64(&w, (uint64_t)(int64_t)m->valid_step);
    wb_f64(&w, m->test_loss);
    wb_u64(&w, m->data_hash);
    wb_bytes(&w, m->train_sha256, sizeof m->train_sha256);
    record_end(&w, at);

    if (w.failed) {
        free(w.p);
        return sl_err_set(SL_ERR_NOMEM, "model metadata: out of memory");
    }
    *out = w.p;
    *len = w.len;
    return SL_OK;
}

/* ---- reading ---- */

/* A cursor over one record (or the section); a read past its end sets short_by. */
typedef struct {
    const unsigned char *p;
    size_t left;
    int short_read;
} rbuf_t;

static const unsigned char *
rb_take(rbuf_t *r, size_t n)
{
    const unsigned char *p = r->p;

    if (r->short_read || n > r->left) {
        r->short_read = 1;
        return NULL;
    }
    r->p += n;
    r->left -= n;
    return p;
}

static uint32_t
rb_u32(rbuf_t *r)
{
    const unsigned char *p = rb_take(r, 4);
    return p ? sl_get_u32(p) : 0;
}

static uint64_t
rb_u64(rbuf_t *r)
{
    const unsigned char *p = rb_take(r, 8);
    return p ? sl_get_u64(p) : 0;
}

static double
rb_f64(rbuf_t *r)
{
    uint64_t bits = rb_u64(r);
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* A length-prefixed string into buf (cut to size - 1 bytes). */
static void
rb_string(rbuf_t *r, char *buf, size_t size)
{
    uint32_t n = rb_u32(r);
    const unsigned char *p = rb_take(r, n);
    size_t keep = n < size - 1 ? n : size - 1;

    buf[0] = '\0';
    if (!p)
        return;
    memcpy(buf, p, keep);
    buf[keep] = '\0';
    for (size_t i = 0; i < keep; i++) /* provenance is printed: no control bytes */
        if ((unsigned char)buf[i] < 0x20)
            buf[i] = '?';
}

static sl_status_t
bad(const char *name, const char *what, const char *record)
{
    return sl_err_set(SL_ERR_FORMAT, "%s: model metadata: %s%s%s", name, what,
                      record ? " in the record " : "", record ? record : "");
}

static sl_status_t
read_data(sl_model_meta_t *m, const char *name, rbuf_t *r)
{
    uint32_t level = rb_u32(r), rule;

    m->unk = (int)(int32_t)rb_u32(r);
    m->eos = (int)(int32_t)rb_u32(r);
    rule = rb_u32(r);
    m->vocab_limit = (int)(int32_t)rb_u32(r);
    m->valid_fraction = rb_f64(r);
    m->max_tokens = (long)(int64_t)rb_u64(r);
    if (r->short_read)
        return bad(name, "truncated", "DATA");
    if (level > SL_LEVEL_CHAR)
        return bad(name, "unknown data level", "DATA");
    if (rule != SL_MODEL_META_UNK_RULE)
        return bad(name, "unknown rule for tokens outside the vocabulary", "DATA");
    if (!sl_config_number_in_range("data.vocab_size", m->vocab_limit) ||
        !sl_config_number_in_range("data.valid_fraction", m->valid_fraction) ||
        !sl_config_number_in_range("data.max_tokens", (double)m->max_tokens))
        return bad(name, "settings out of range", "DATA");
    m->level = (sl_level_t)level;
    return SL_OK;
}

/* The words in id order, then the specials checked against the DATA record's ids. */
static sl_status_t
read_vocab(sl_model_meta_t *m, const char *name, rbuf_t *r)
{
    uint32_t n = rb_u32(r);
    sl_status_t st;

    if (r->short_read || n == 0 || n > r->left / 4) /* every entry takes 4 bytes at least */
        return bad(name, "bad number of entries", "VOCB");
    SL_TRY(sl_vocab_begin(&m->owned, (int)n));
    for (uint32_t i = 0; i < n; i++) {
        uint32_t len = rb_u32(r);
        const unsigned char *w = len <= META_MAX_WORD ? rb_take(r, len) : NULL;
        if (!w || len == 0) {
            char what[96];
            snprintf(what, sizeof what,
                     "entry %" PRIu32 " of %" PRIu32 " (%" PRIu32 " bytes) is bad", i, n, len);
            return bad(name, what, "VOCB");
        }
        if ((st = sl_vocab_append(m->owned, (const char *)w, len)) != SL_OK)
            return sl_err_prefix(st, "%s: model metadata", name);
    }
    if ((st = sl_vocab_end(m->owned, m->level)) != SL_OK)
        return sl_err_prefix(st, "%s: model metadata", name);
    if (sl_vocab_unk(m->owned) != m->unk || sl_vocab_eos(m->owned) != m->eos)
        return bad(name, "the special token ids do not name <unk> and <eos>", NULL);
    m->vocab = m->owned;
    return SL_OK;
}

static sl_status_t
read_model(sl_model_meta_t *m, const char *name, rbuf_t *r)
{
    m->embedding = (int)rb_u32(r);
    m->nlayers = (int)rb_u32(r);
    if (r->short_read || m->nlayers < 1 || m->nlayers > SL_MAX_LAYERS)
        return bad(name, "bad number of layers", "MODL");
    for (int l = 0; l < m->nlayers; l++) {
        m->layers[l].hidden = (int)rb_u32(r);
        m->layers[l].projection = (int)rb_u32(r);
    }
    m->output = (sl_output_kind_t)rb_u32(r);
    m->samples = (int)rb_u32(r);
    m->dropout = rb_f64(r);
    m->init_range = rb_f64(r);
    m->bptt = (int)rb_u32(r);
    m->batch = (int)rb_u32(r);
    m->seed = rb_u64(r);
    if (r->short_read)
        return bad(name, "truncated", "MODL");
    if ((unsigned)m->output > SL_OUTPUT_SAMPLED || m->embedding < 1 || m->bptt < 1 ||
        m->batch < 1 || m->samples < 0)
        return bad(name, "sizes out of range", "MODL");
    /* an infinite init range went into export's JSON */
    if (!sl_config_number_in_range("model.dropout", m->dropout) ||
        !sl_config_number_in_range("model.init_range", m->init_range))
        return bad(name, "dropout or init range out of range", "MODL");
    if (m->bptt > SL_MAX_BPTT) { /* the windows of shoal score and sample: buffers */
        char what[64];
        snprintf(what, sizeof what, "train.bptt %d above %d", m->bptt, SL_MAX_BPTT);
        return bad(name, what, "MODL");
    }
    for (int l = 0; l < m->nlayers; l++)
        if (m->layers[l].hidden < 1 || m->layers[l].projection < 0)
            return bad(name, "sizes out of range", "MODL");
    return SL_OK;
}

static sl_status_t
read_prov(sl_model_meta_t *m, const char *name, rbuf_t *r)
{
    const unsigned char *sha;

    rb_string(r, m->version, sizeof m->version);
    rb_string(r, m->run_name, sizeof m->run_name);
    m->nodes = (int)rb_u32(r);
    m->sync = (sl_sync_algorithm_t)rb_u32(r);
    m->models_averaged = (int)rb_u32(r);
    m->steps = (long)(int64_t)rb_u64(r);
    m->tokens = rb_u64(r);
    m->valid_loss = rb_f64(r);
    m->valid_step = (long)(int64_t)rb_u64(r);
    m->test_loss = rb_f64(r);
    m->data_hash = rb_u64(r);
    sha = rb_take(r, sizeof m->train_sha256);
    if (!sha)
        return bad(name, "truncated", "PROV");
    memcpy(m->train_sha256, sha, sizeof m->train_sha256);
    if ((unsigned)m->sync > SL_SYNC_GOSSIP_BMUF || m->nodes < 1)
        return bad(name, "sizes out of range", "PROV");
    return SL_OK;
}

static sl_status_t
decode(sl_model_meta_t *m, const char *name, const unsigned char *p, size_t len)
{
    rbuf_t sec = {p, len, 0};
    uint32_t version = rb_u32(&sec), nrec = rb_u32(&sec), seen = 0;
    static const uint32_t order[] = {TAG_DATA, TAG_VOCB, TAG_MODL, TAG_PROV};
    static const char *const names[] = {"DATA", "VOCB", "MODL", "PROV"};

    if (sec.short_read)
        return bad(name, "truncated section", NULL);
    if (version != SL_MODEL_META_VERSION) {
        char what[96];
        snprintf(what, sizeof what, "section version %" PRIu32 " (this shoal reads %u)", version,
                 SL_MODEL_META_VERSION);
        return bad(name, what, NULL);
    }
    for (uint32_t i = 0; i < nrec; i++) {
        uint32_t tag = rb_u32(&sec);
        uint64_t n = rb_u64(&sec);
        rbuf_t r;
        int k = 0;

        if (sec.short_read || n > sec.left) {
            char what[96];
            snprintf(what, sizeof what, "record %" PRIu32 " of %" PRIu32 " runs past the section",
                     i, nrec);
            return bad(name, what, NULL);
        }
        r = (rbuf_t){rb_take(&sec, (size_t)n), (size_t)n, 0};
        while (k < 4 && order[k] != tag)
            k++;
        if (k == 4)
            continue; /* a record of a later version */
        if (seen & (1u << k))
            return bad(name, "a second record", names[k]);
        seen |= 1u << k;
        /* the vocabulary needs the level: DATA comes first */
        if (k == 1 && !(seen & 1u))
            return bad(name, "vocabulary before the data settings", NULL);
        SL_TRY(k == 0   ? read_data(m, name, &r)
               : k == 1 ? read_vocab(m, name, &r)
               : k == 2 ? read_model(m, name, &r)
                        : read_prov(m, name, &r));
    }
    if (sec.left != 0)
        return bad(name, "bytes after the last record", NULL);
    for (int k = 0; k < 4; k++)
        if (!(seen & (1u << k))) {
            char what[64];
            snprintf(what, sizeof what, "no %s record", names[k]);
            return bad(name, what, NULL);
        }
    return SL_OK;
}

sl_status_t
sl_model_meta_decode(sl_model_meta_t *m, const char *name, const unsigned char *p, size_t len)
{
    sl_status_t st;

    memset(m, 0, sizeof *m);
    st = decode(m, name, p, len);
    if (st != SL_OK)
        sl_model_meta_fini(m);
    return st;
}

void
sl_model_meta_to_config(const sl_model_meta_t *m, sl_config_t *cfg)
{
    cfg->data.level = m->level;
    cfg->data.vocab_size = m->vocab_limit;
    cfg->model.embedding = m->embedding;
    cfg->model.nlayers = m->nlayers;
    memcpy(cfg->model.layers, m->layers, sizeof cfg->model.layers);
    cfg->model.output = m->output;
    cfg->model.samples = m->samples;
    cfg->model.dropout = m->dropout;
    cfg->model.init_range = m->init_range;
    cfg->train.bptt = m->bptt;
    cfg->train.batch = m->batch;
    cfg->run.seed = m->seed;
}
