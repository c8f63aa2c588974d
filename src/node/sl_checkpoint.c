/* Checkpoint and model files: encoding, atomic writing, validation and loading.
 * Integers and floats are stored little-endian whatever the host. */
#include "node/sl_checkpoint.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_endian.h"
#include "common/sl_file.h"
#include "common/sl_hash.h"

#define CKPT_HASH_SEED 0x53484f414c434b50ull /* "SHOALCKP" */
/* Element counts above this cannot be real (2^40 floats = 4 TiB): a corrupt header. */
#define CKPT_MAX_COUNT (1ull << 40)

/* Header field offsets (see sl_checkpoint.h). */
enum {
    OFF_MAGIC = 0,
    OFF_VERSION = 8,
    OFF_FLAGS = 12,
    OFF_CORPUS = 16,
    OFF_ARCH = 24,
    OFF_VOCAB = 32,
    OFF_EMBEDDING = 36,
    OFF_NLAYERS = 40,
    OFF_OPTIMIZER = 44,
    OFF_HIDDEN = 48,
    OFF_PROJECTION = 80,
    OFF_BATCH = 112,
    OFF_BPTT = 116,
    OFF_NPARAMS = 120,
    OFF_OPT_FLOATS = 128,
    OFF_STATE_FLOATS = 136,
    OFF_STEP = 144,
    OFF_EPOCH = 152,
    OFF_BATCH_INDEX = 160,
    OFF_OPT_STEPS = 168,
    OFF_TOKENS = 176,
    OFF_TRAIN_TIME = 184,
    OFF_NODES = 192, /* version 2 from here */
    OFF_RANK = 196,
    OFF_SYNC = 200,
    OFF_LOSS_SCALE = 204, /* version 3 from here (0 in version 2) */
    OFF_LS_GOOD = 208,
    OFF_LS_OVERFLOWS = 216,
    OFF_LS_SKIPPED = 224,
    OFF_RESERVED = 232
};

typedef struct {
    uint32_t version, flags;
    size_t header_bytes; /* of this version */
    sl_ckpt_ident_t id;
    uint64_t arch_hash;
    uint64_t nparams, opt_floats, state_floats;
    long opt_steps;
    sl_ckpt_cursor_t cur;
    uint64_t sync_bytes;           /* version 2: the sync section's length (read from the body) */
    uint64_t meta_off, meta_bytes; /* version 4: where the metadata section is, its length */
} header_t;

static int
host_is_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* Converts n floats between host order and little-endian, in place (its own inverse). */
static void
swap_floats_if_big_endian(void *data, size_t n)
{
    unsigned char *p = data;

    if (host_is_little_endian())
        return;
    for (size_t i = 0; i < n; i++, p += 4) {
        unsigned char t0 = p[0], t1 = p[1];
        p[0] = p[3];
        p[1] = p[2];
        p[2] = t1;
        p[3] = t0;
    }
}

void
sl_ckpt_ident_init(sl_ckpt_ident_t *id, const sl_config_t *cfg, int vocab, uint64_t corpus_hash,
                   int rank, int nodes)
{
    memset(id, 0, sizeof *id);
    id->corpus_hash = corpus_hash;
    id->vocab = vocab;
    id->embedding = cfg->model.embedding;
    id->nlayers = cfg->model.nlayers;
    for (int l = 0; l < cfg->model.nlayers && l < SL_MAX_LAYERS; l++)
        id->layers[l] = cfg->model.layers[l];
    id->optimizer = cfg->train.optimizer.type;
    id->batch = cfg->train.batch;
    id->bptt = cfg->train.bptt;
    id->nodes = nodes;
    id->rank = rank;
    id->sync = nodes > 1 ? cfg->sync.algorithm : SL_SYNC_NONE; /* as sl_sync_new */
}

uint64_t
sl_ckpt_arch_hash(const sl_ckpt_ident_t *id)
{
    unsigned char buf[4 * (3 + 2 * SL_MAX_LAYERS)];
    int n = id->nlayers < 0 ? 0 : id->nlayers > SL_MAX_LAYERS ? SL_MAX_LAYERS : id->nlayers;
    size_t len = 0;

    sl_put_u32(buf + len, (uint32_t)id->vocab), len += 4;
    sl_put_u32(buf + len, (uint32_t)id->embedding), len += 4;
    sl_put_u32(buf + len, (uint32_t)id->nlayers), len += 4;
    for (int l = 0; l < n; l++) {
        sl_put_u32(buf + len, (uint32_t)id->layers[l].hidden), len += 4;
        sl_put_u32(buf + len, (uint32_t)id->layers[l].projection), len += 4;
    }
    return sl_hash_bytes(buf, len, CKPT_HASH_SEED);
}

static int
layers_equal(const sl_layer_config_t *a, const sl_layer_config_t *b)
{
    return a->hidden == b->hidden && a->projection == b->projection;
}

static size_t
describe_layer(const sl_layer_config_t *l, char *buf, size_t size)
{
    int n = l->projection > 0 ? snprintf(buf, size, "%d/%d", l->hidden, l->projection)
                              : snprintf(buf, size, "%d", l->hidden);
    return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size ? size - 1 : 0;
}

void
sl_ckpt_describe_arch(const sl_ckpt_ident_t *id, char *buf, size_t size)
{
    int n = id->nlayers < 0 ? 0 : id->nlayers > SL_MAX_LAYERS ? SL_MAX_LAYERS : id->nlayers;
    int uniform = 1;
    size_t len;

    for (int l = 1; l < n; l++)
        uniform &= layers_equal(&id->layers[l], &id->layers[0]);
    snprintf(buf, size, "vocab %d, embedding %d, ", id->vocab, id->embedding);
    len = strlen(buf);
    if (n == 0) {
        snprintf(buf + len, size - len, "%d layers", id->nlayers);
    } else if (uniform) {
        snprintf(buf + len, size - len, "%d layer%s of ", id->nlayers, id->nlayers == 1 ? "" : "s");
        len = strlen(buf);
        describe_layer(&id->layers[0], buf + len, size - len);
    } else {
        snprintf(buf + len, size - len, "layers ");
        for (int l = 0; l < n; l++) {
            len = strlen(buf);
            if (l > 0 && len + 2 < size)
                memcpy(buf + len, ", ", 3), len += 2;
            describe_layer(&id->layers[l], buf + len, size - len);
        }
    }
}

/* The header's length in a file of version (1 to SL_CKPT_VERSION). */
static size_t
header_bytes(uint32_t version)
{
    return version == 1   ? SL_CKPT_V1_HEADER_BYTES
           : version == 2 ? SL_CKPT_V2_HEADER_BYTES
                          : SL_CKPT_HEADER_BYTES; /* versions 3 and 4 */
}

static void
encode_header(unsigned char *h, const header_t *hd)
{
    memset(h, 0, SL_CKPT_HEADER_BYTES);
    memcpy(h + OFF_MAGIC, SL_CKPT_MAGIC, 8);
    sl_put_u32(h + OFF_VERSION, SL_CKPT_VERSION);
    sl_put_u32(h + OFF_FLAGS, hd->flags);
    sl_put_u64(h + OFF_CORPUS, hd->id.corpus_hash);
    sl_put_u64(h + OFF_ARCH, hd->arch_hash);
    sl_put_u32(h + OFF_VOCAB, (uint32_t)hd->id.vocab);
    sl_put_u32(h + OFF_EMBEDDING, (uint32_t)hd->id.embedding);
    sl_put_u32(h + OFF_NLAYERS, (uint32_t)hd->id.nlayers);
    sl_put_u32(h + OFF_OPTIMIZER, (uint32_t)hd->id.optimizer);
    for (int l = 0; l < SL_MAX_LAYERS && l < hd->id.nlayers; l++) {
        sl_put_u32(h + OFF_HIDDEN + 4 * l, (uint32_t)hd->id.layers[l].hidden);
        sl_put_u32(h + OFF_PROJECTION + 4 * l, (uint32_t)hd->id.layers[l].projection);
    }
    sl_put_u32(h + OFF_BATCH, (uint32_t)hd->id.batch);
    sl_put_u32(h + OFF_BPTT, (uint32_t)hd->id.bptt);
    sl_put_u64(h + OFF_NPARAMS, hd->nparams);
    sl_put_u64(h + OFF_OPT_FLOATS, hd->opt_floats);
    sl_put_u64(h + OFF_STATE_FLOATS, hd->state_floats);
    sl_put_u64(h + OFF_STEP, (uint64_t)(int64_t)hd->cur.step);
    sl_put_u64(h + OFF_EPOCH, (uint64_t)(int64_t)hd->cur.epoch);
    sl_put_u64(h + OFF_BATCH_INDEX, (uint64_t)(int64_t)hd->cur.batch_index);
    sl_put_u64(h + OFF_OPT_STEPS, (uint64_t)(int64_t)hd->opt_steps);
    sl_put_u64(h + OFF_TOKENS, hd->cur.tokens);
    {
        uint64_t bits;
        memcpy(&bits, &hd->cur.train_time_s, sizeof bits);
        sl_put_u64(h + OFF_TRAIN_TIME, bits);
    }
    sl_put_u32(h + OFF_NODES, (uint32_t)hd->id.nodes);
    sl_put_u32(h + OFF_RANK, (uint32_t)hd->id.rank);
    sl_put_u32(h + OFF_SYNC, (uint32_t)hd->id.sync);
    {
        uint32_t bits;
        memcpy(&bits, &hd->cur.loss_scale, sizeof bits);
        sl_put_u32(h + OFF_LOSS_SCALE, bits);
    }
    sl_put_u64(h + OFF_LS_GOOD, (uint64_t)(int64_t)hd->cur.loss_scale_good);
    sl_put_u64(h + OFF_LS_OVERFLOWS, (uint64_t)(int64_t)hd->cur.loss_scale_overflows);
    sl_put_u64(h + OFF_LS_SKIPPED, (uint64_t)(int64_t)hd->cur.loss_scale_skipped);
}

static void
decode_header(const unsigned char *h, header_t *hd)
{
    uint64_t bits;

    memset(hd, 0, sizeof *hd);
    hd->version = sl_get_u32(h + OFF_VERSION);
    hd->header_bytes = header_bytes(hd->version);
    hd->flags = sl_get_u32(h + OFF_FLAGS);
    hd->id.corpus_hash = sl_get_u64(h + OFF_CORPUS);
    hd->arch_hash = sl_get_u64(h + OFF_ARCH);
    hd->id.vocab = (int)sl_get_u32(h + OFF_VOCAB);
    hd->id.embedding = (int)sl_get_u32(h + OFF_EMBEDDING);
    hd->id.nlayers = (int)sl_get_u32(h + OFF_NLAYERS);
    hd->id.optimizer = (sl_opt_kind_t)sl_get_u32(h + OFF_OPTIMIZER);
    for (int l = 0; l < SL_MAX_LAYERS; l++) {
        hd->id.layers[l].hidden = (int)sl_get_u32(h + OFF_HIDDEN + 4 * l);
        hd->id.layers[l].projection = (int)sl_get_u32(h + OFF_PROJECTION + 4 * l);
    }
    hd->id.batch = (int)sl_get_u32(h + OFF_BATCH);
    hd->id.bptt = (int)sl_get_u32(h + OFF_BPTT);
    hd->nparams = sl_get_u64(h + OFF_NPARAMS);
    hd->opt_floats = sl_get_u64(h + OFF_OPT_FLOATS);
    hd->state_floats = sl_get_u64(h + OFF_STATE_FLOATS);
    hd->cur.step = (long)(int64_t)sl_get_u64(h + OFF_STEP);
    hd->cur.epoch = (int)(int64_t)sl_get_u64(h + OFF_EPOCH);
    hd->cur.batch_index = (long)(int64_t)sl_get_u64(h + OFF_BATCH_INDEX);
    hd->opt_steps = (long)(int64_t)sl_get_u64(h + OFF_OPT_STEPS);
    hd->cur.tokens = sl_get_u64(h + OFF_TOKENS);
    bits = sl_get_u64(h + OFF_TRAIN_TIME);
    memcpy(&hd->cur.train_time_s, &bits, sizeof bits);
    hd->cur.version = (int)hd->version;
    if (hd->version == 1)
        return;
    hd->id.nodes = (int)sl_get_u32(h + OFF_NODES);
    hd->id.rank = (int)sl_get_u32(h + OFF_RANK);
    hd->id.sync = (sl_sync_algorithm_t)sl_get_u32(h + OFF_SYNC);
    if (hd->version == 2)
        return;
    {
        uint32_t lbits = sl_get_u32(h + OFF_LOSS_SCALE);
        memcpy(&hd->cur.loss_scale, &lbits, sizeof lbits);
    }
    hd->cur.loss_scale_good = (long)(int64_t)sl_get_u64(h + OFF_LS_GOOD);
    hd->cur.loss_scale_overflows = (long)(int64_t)sl_get_u64(h + OFF_LS_OVERFLOWS);
    hd->cur.loss_scale_skipped = (long)(int64_t)sl_get_u64(h + OFF_LS_SKIPPED);
}

/* The metadata section for id->meta (none when NULL), with the steps, tokens, nodes and
 * sync algorithm of this save. */
static sl_status_t
encode_meta(const sl_ckpt_ident_t *id, const sl_ckpt_cursor_t *cur, unsigned char **out,
            size_t *len)
{
    sl_model_meta_t m;

    *out = NULL;
    *len = 0;
    if (!id->meta)
        return SL_OK;
    m = *id->meta;
    m.steps = cur->step;
    m.tokens = cur->tokens;
    m.nodes = id->nodes > 0 ? id->nodes : 1;
    m.sync = id->sync;
    return sl_model_meta_encode(&m, out, len);
}

/* Writes n floats (host order) as little-endian and feeds them to the checksum. */
static sl_status_t
write_floats(sl_atomic_file_t *f, sl_hash_t *hs, float *host, size_t n)
{
    swap_floats_if_big_endian(host, n);
    sl_hash_update(hs, host, n * sizeof(float));
    return sl_atomic_write(f, host, n * sizeof(float));
}

sl_status_t
sl_checkpoint_save(const char *path, const sl_ckpt_ident_t *id, const sl_ckpt_cursor_t *cur,
                   sl_backend_t *be, sl_lm_t *lm, const sl_optim_t *opt, const sl_lm_state_t *st,
                   const sl_sync_t *sync)
{
    unsigned char head[SL_CKPT_HEADER_BYTES], len8[8], tail[8];
    unsigned char *sync_state = NULL, *meta = NULL;
    sl_atomic_file_t f;
    sl_hash_t hs;
    header_t hd;
    float *host = NULL;
    size_t most, sync_bytes = 0, meta_bytes = 0;
    sl_status_t rc;

    SL_ASSERT((opt == NULL) == (st == NULL));
    SL_TRY(encode_meta(id, cur, &meta, &meta_bytes));
    memset(&hd, 0, sizeof hd);
    hd.id = *id;
    hd.arch_hash = sl_ckpt_arch_hash(id);
    hd.cur = *cur;
    hd.nparams = sl_lm_nparams(lm);
    if (opt) {
        hd.flags = SL_CKPT_TRAIN_STATE;
        hd.opt_floats = sl_optim_state_size(opt);
        hd.state_floats = sl_lm_state_size(st);
        hd.opt_steps = sl_optim_steps(opt);
        sync_bytes = sync ? sl_sync_state_bytes(sync) : 0;
    }
    encode_header(head, &hd);

    most = hd.nparams;
    if (hd.opt_floats > most)
        most = hd.opt_floats;
    if (hd.state_floats > most)
        most = hd.state_floats;
    rc = SL_ALLOC(&host, most ? most : 1, "checkpoint staging buffer");
    if (rc == SL_OK && sync_bytes > 0) {
        rc = SL_ALLOC(&sync_state, sync_bytes, "checkpoint sync state");
        if (rc == SL_OK)
            rc = sl_sync_state_save(sync, sync_state, sync_bytes);
    }
    if (rc == SL_OK)
        rc = sl_atomic_open(&f, path);
    if (rc != SL_OK) {
        free(meta);
        sl_free(sync_state);
        sl_free(host);
        return rc;
    }
    sl_hash_init(&hs, CKPT_HASH_SEED);
    sl_hash_update(&hs, head, sizeof head);
    SL_TRY_GOTO(sl_atomic_write(&f, head, sizeof head), rc, fail);

    SL_TRY_GOTO(be->ops->to_host(be->ctx, host, sl_lm_params(lm), hd.nparams * sizeof(float)), rc,
                fail);
    SL_TRY_GOTO(write_floats(&f, &hs, host, hd.nparams), rc, fail);
    if (opt) {
        long steps;
        SL_TRY_GOTO(sl_optim_state_save(opt, host, &steps), rc, fail);
        SL_TRY_GOTO(write_floats(&f, &hs, host, hd.opt_floats), rc, fail);
        SL_TRY_GOTO(sl_lm_state_save(st, host), rc, fail);
        SL_TRY_GOTO(write_floats(&f, &hs, host, hd.state_floats), rc, fail);
    }
    sl_put_u64(len8, sync_bytes);
    sl_hash_update(&hs, len8, sizeof len8);
    SL_TRY_GOTO(sl_atomic_write(&f, len8, sizeof len8), rc, fail);
    if (sync_bytes > 0) {
        sl_hash_update(&hs, sync_state, sync_bytes);
        SL_TRY_GOTO(sl_atomic_write(&f, sync_state, sync_bytes), rc, fail);
    }
    sl_put_u64(len8, meta_bytes);
    sl_hash_update(&hs, len8, sizeof len8);
    SL_TRY_GOTO(sl_atomic_write(&f, len8, sizeof len8), rc, fail);
    if (meta_bytes > 0) {
        sl_hash_update(&hs, meta, meta_bytes);
        SL_TRY_GOTO(sl_atomic_write(&f, meta, meta_bytes), rc, fail);
    }
    sl_put_u64(tail, sl_hash_final(&hs));
    SL_TRY_GOTO(sl_atomic_write(&f, tail, sizeof tail), rc, fail);
    free(meta);
    sl_free(sync_state);
    sl_free(host);
    if (!opt)
        return sl_atomic_commit(&f);
    {
        char prev[SL_CKPT_PATH_MAX];
        SL_TRY(sl_checkpoint_prev_path(path, prev, sizeof prev));
        return sl_atomic_commit_keep(&f, prev);
    }
fail:
    sl_atomic_abort(&f);
    free(meta);
    sl_free(sync_state);
    sl_free(host);
    return rc;
}

/* The smallest file of a version: header, sync length (version 2 on), metadata length
 * (version 4 on), checksum. */
static size_t
min_file_bytes(uint32_t version)
{
    return header_bytes(version) + (version == 1 ? 0 : 8) + (version >= 4 ? 8 : 0) + 8;
}

/* The cursor's counters as the file holds them (i64), before anything uses them: none
 * negative, the epoch within an int (the "within 32 bits", signed), the others
 * within CKPT_MAX_COUNT; and the tokens exactly the steps' (every step takes batch x
 * bptt tokens), so that a header whose counters disagree is corrupt. */
static sl_status_t
check_counters(const char *path, const unsigned char *data, const header_t *hd)
{
    static const struct {
        size_t off;
        const char *name;
        uint64_t most;
    } counters[] = {{OFF_STEP, "step", CKPT_MAX_COUNT},
                    {OFF_EPOCH, "epoch", INT_MAX},
                    {OFF_BATCH_INDEX, "batch index", CKPT_MAX_COUNT},
                    {OFF_OPT_STEPS, "optimizer steps", CKPT_MAX_COUNT}};
    uint64_t per_step = (uint64_t)(uint32_t)hd->id.batch * (uint32_t)hd->id.bptt;

    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
        int64_t v = (int64_t)sl_get_u64(data + counters[i].off);
        if (v < 0 || (uint64_t)v > counters[i].most)
            return sl_err_set(SL_ERR_FORMAT, "%s: corrupt header (%s %" PRId64 " out of range)",
                              path, counters[i].name, v);
    }
    if (hd->cur.tokens != (uint64_t)hd->cur.step * per_step)
        return sl_err_set(SL_ERR_FORMAT,
                          "%s: corrupt header (%" PRIu64 " tokens after %ld steps of %" PRIu64 ")",
                          path, hd->cur.tokens, hd->cur.step, per_step);
    return SL_OK;
}

/* Structure of the file: magic, version, size, checksum, counters. Each failure is one
 * line. */
static sl_status_t
check_container(const char *path, const unsigned char *data, size_t len, header_t *hd)
{
    uint64_t payload, expected;
    uint32_t version = SL_CKPT_VERSION;

    if (len < 8 ? memcmp(data, SL_CKPT_MAGIC, len) != 0 : memcmp(data, SL_CKPT_MAGIC, 8) != 0)
        return sl_err_set(SL_ERR_FORMAT, "%s: not a shoal checkpoint (bad magic)", path);
    if (len >= OFF_VERSION + 4) {
        version = sl_get_u32(data + OFF_VERSION);
        if (version < 1 || version > SL_CKPT_VERSION)
            return sl_err_set(SL_ERR_FORMAT,
                              "%s: checkpoint format version %" PRIu32
                              " is not supported (this shoal reads 1 to %d)",
                              path, version, SL_CKPT_VERSION);
    }
    if (len < min_file_bytes(version))
        return sl_err_set(SL_ERR_FORMAT, "%s: truncated: %zu bytes, expected at least %zu", path,
                          len, min_file_bytes(version));
    decode_header(data, hd);
    if (hd->nparams > CKPT_MAX_COUNT || hd->opt_floats > CKPT_MAX_COUNT ||
        hd->state_floats > CKPT_MAX_COUNT)
        return sl_err_set(SL_ERR_FORMAT,
                          "%s: corrupt header (element counts %" PRIu64 ", %" PRIu64 ", %" PRIu64
                          ")",
                          path, hd->nparams, hd->opt_floats, hd->state_floats);
    payload = 4 * (hd->nparams + hd->opt_floats + hd->state_floats);
    expected = min_file_bytes(version) + payload;
    if (version != 1 && len >= expected) {
        /* the sync section's length, then the section itself */
        hd->sync_bytes = sl_get_u64(data + hd->header_bytes + payload);
        if (hd->sync_bytes > len)
            return sl_err_set(SL_ERR_FORMAT,
                              "%s: truncated: %zu bytes, but its sync state alone is %" PRIu64,
                              path, len, hd->sync_bytes);
        expected += hd->sync_bytes;
    }
    if (version >= 4 && len >= expected) {
        /* the metadata section's length, after the sync section, then the section */
        hd->meta_off = expected - 8;
        hd->meta_bytes = sl_get_u64(data + hd->meta_off - 8);
        if (hd->meta_bytes > len)
            return sl_err_set(SL_ERR_FORMAT,
                              "%s: truncated: %zu bytes, but its model metadata alone is %" PRIu64,
                              path, len, hd->meta_bytes);
        expected += hd->meta_bytes;
    }
    if (len < expected)
        return sl_err_set(SL_ERR_FORMAT, "%s: truncated: %zu bytes, expected %" PRIu64, path, len,
                          expected);
    if (len > expected)
        return sl_err_set(SL_ERR_FORMAT, "%s: %zu bytes, expected %" PRIu64 " (file corrupt)", path,
                          len, expected);
    if (sl_hash_bytes(data, expected - 8, CKPT_HASH_SEED) != sl_get_u64(data + expected - 8))
        return sl_err_set(SL_ERR_FORMAT, "%s: checksum mismatch (file corrupt)", path);
    if (hd->id.nlayers < 1 || hd->id.nlayers > SL_MAX_LAYERS ||
        sl_ckpt_arch_hash(&hd->id) != hd->arch_hash)
        return sl_err_set(SL_ERR_FORMAT, "%s: corrupt header (architecture)", path);
    SL_TRY(check_counters(path, data, hd));
    if (!(hd->cur.loss_scale == 0.0f ||
          (isfinite(hd->cur.loss_scale) && hd->cur.loss_scale > 0.0f)) ||
        hd->cur.loss_scale_good < 0 || hd->cur.loss_scale_overflows < 0 ||
        hd->cur.loss_scale_skipped < 0)
        return sl_err_set(SL_ERR_FORMAT, "%s: corrupt header (loss scale)", path);
    return SL_OK;
}

/* Training state of version 2: the same node of a run of as many nodes. Checked before
 * the optimizer and the batch, which another node count changes too (a global batch
 * split over the nodes): the node count is what the operator changed. */
static sl_status_t
check_node(const char *path, const header_t *hd, const sl_ckpt_ident_t *id)
{
    if (hd->version > 1 && (hd->id.nodes != id->nodes || hd->id.rank != id->rank))
        return sl_err_set(SL_ERR_FORMAT, "%s: written by node %d of %d, this is node %d of %d",
                          path, hd->id.rank, hd->id.nodes, id->rank, id->nodes);
    return SL_OK;
}

/* Training state of version 2: the same sync algorithm, and a sync state of the size
 * this node's sync object keeps. */
static sl_status_t
check_run(const char *path, const header_t *hd, const sl_ckpt_ident_t *id, const sl_sync_t *sync)
{
    if (hd->version == 1)
        return SL_OK;
    if (hd->id.sync != id->sync)
        return sl_err_set(
            SL_ERR_FORMAT, "%s: checkpoint was written with sync.algorithm %s; the config has %s",
            path, sl_sync_algorithm_name(hd->id.sync), sl_sync_algorithm_name(id->sync));
    if (sync && hd->sync_bytes != sl_sync_state_bytes(sync))
        return sl_err_set(SL_ERR_FORMAT,
                          "%s: checkpoint holds %" PRIu64 " bytes of sync state, this node's %s "
                          "keeps %zu (was sync.exchange or the model changed?)",
                          path, hd->sync_bytes, sl_sync_algorithm_name(id->sync),
                          sl_sync_state_bytes(sync));
    return SL_OK;
}

/* Does the file fit this model (and, for training state, this optimizer, batch, run
 * and sync)? */
static sl_status_t
check_identity(const char *path, const header_t *hd, const sl_ckpt_ident_t *id, const sl_lm_t *lm,
               const sl_optim_t *opt, const sl_lm_state_t *st, const sl_sync_t *sync)
{
    if (hd->arch_hash != sl_ckpt_arch_hash(id)) {
        char have[256], want[256];
        sl_ckpt_describe_arch(&hd->id, have, sizeof have);
        sl_ckpt_describe_arch(id, want, sizeof want);
        return sl_err_set(SL_ERR_FORMAT,
                          "%s: checkpoint was written for a different model (%s vs %s in the "
                          "config)",
                          path, have, want);
    }
    if (hd->id.corpus_hash != id->corpus_hash)
        return sl_err_set(SL_ERR_FORMAT,
                          "%s: checkpoint was written for a different corpus (data %016" PRIx64
                          " vs %016" PRIx64 " in the config)",
                          path, hd->id.corpus_hash, id->corpus_hash);
    if (hd->nparams != sl_lm_nparams(lm))
        return sl_err_set(SL_ERR_FORMAT,
                          "%s: checkpoint holds %" PRIu64 " parameters, the model has %zu", path,
                          hd->nparams, sl_lm_nparams(lm));
    if (!opt)
        return SL_OK;
    if (!(hd->flags & SL_CKPT_TRAIN_STATE))
        return sl_err_set(SL_ERR_FORMAT,
                          "%s: a model file without training state (training resumes only "
                          "from a checkpoint)",
                          path);
    SL_TRY(check_node(path, hd, id));
    if (hd->id.optimizer != id->optimizer)
        return sl_err_set(
            SL_ERR_FORMAT, "%s: checkpoint was written with optimizer %s; the config has %s", path,
            (unsigned)hd->id.optimizer <= SL_OPT_ADAM ? sl_opt_name(hd->id.optimizer) : "?",
            sl_opt_name(id->optimizer));
    if (hd->id.batch != id->batch || hd->id.bptt != id->bptt)
        return sl_err_set(SL_ERR_FORMAT,
                          "%s: checkpoint was written with train.batch %d and train.bptt %d; the "
                          "config has %d and %d",
                          path, hd->id.batch, hd->id.bptt, id->batch, id->bptt);
    if (hd->opt_floats != sl_optim_state_size(opt) || hd->state_floats != sl_lm_state_size(st))
        return sl_err_set(SL_ERR_FORMAT,
                          "%s: checkpoint holds %" PRIu64 " optimizer and %" PRIu64
                          " hidden-state floats, expected %zu and %zu",
                          path, hd->opt_floats, hd->state_floats, sl_optim_state_size(opt),
                          sl_lm_state_size(st));
    if (id->total_steps > 0 && hd->cur.step > id->total_steps)
        return sl_err_set(SL_ERR_FORMAT,
                          "%s: checkpoint at step %ld, beyond this run's %ld steps (were "
                          "train.epochs or train.max_steps lowered? --no-resume starts over)",
                          path, hd->cur.step, id->total_steps);
    if (id->batches_per_epoch > 0 && hd->cur.batch_index >= id->batches_per_epoch)
        return sl_err_set(SL_ERR_FORMAT,
                          "%s: data cursor at batch %ld of an epoch of %ld batches (was it "
                          "written with another number of nodes?)",
                          path, hd->cur.batch_index, id->batches_per_epoch);
    return check_run(path, hd, id, sync);
}

/* With the epoch's length known: the step is where the epoch and batch index say. */
static sl_status_t
check_cursor(const char *path, const header_t *hd, const sl_ckpt_ident_t *id)
{
    long bpe = id->batches_per_epoch;

    if (bpe > 0 && hd->cur.step != (long)hd->cur.epoch * bpe + hd->cur.batch_index)
        return sl_err_set(SL_ERR_FORMAT,
                          "%s: corrupt header (step %ld is not epoch %d, batch %ld of %ld)", path,
                          hd->cur.step, hd->cur.epoch, hd->cur.batch_index, bpe);
    return SL_OK;
}

/* Every check of a file against this run, in order; *damaged says which kind failed:
 * 1 the file itself (structure, checksum, counters), 0 a sound file that does not fit
 * this run (model, corpus, optimizer, shape, nodes, sync, a step beyond the run). */
static sl_status_t
validate(const char *path, const unsigned char *data, size_t len, const sl_ckpt_ident_t *id,
         const sl_lm_t *lm, const sl_optim_t *opt, const sl_lm_state_t *st, const sl_sync_t *sync,
         header_t *hd, int *damaged)
{
    *damaged = 1;
    SL_TRY(check_container(path, data, len, hd));
    *damaged = 0;
    SL_TRY(check_identity(path, hd, id, lm, opt, st, sync));
    if (!opt)
        return SL_OK;
    *damaged = 1;
    SL_TRY(check_cursor(path, hd, id));
    *damaged = 0;
    return SL_OK;
}

sl_status_t
sl_checkpoint_prev_path(const char *path, char *out, size_t size)
{
    int n = snprintf(out, size, "%s%s", path, SL_CKPT_PREV_SUFFIX);

    if (n < 0 || (size_t)n >= size)
        return sl_err_set(SL_ERR_INVALID, "%s: path too long", path);
    return SL_OK;
}

sl_status_t
sl_checkpoint_check(const char *path, const sl_ckpt_ident_t *id, const sl_lm_t *lm,
                    const sl_optim_t *opt, const sl_lm_state_t *st, const sl_sync_t *sync,
                    sl_ckpt_cursor_t *cur, int *damaged)
{
    char *data;
    size_t len;
    header_t hd;
    sl_status_t rc;

    SL_ASSERT((opt == NULL) == (st == NULL));
    *damaged = 1;
    SL_TRY(sl_file_read_all(path, &data, &len));
    rc = validate(path, (const unsigned char *)data, len, id, lm, opt, st, sync, &hd, damaged);
    if (rc == SL_OK && cur)
        *cur = hd.cur;
    free(data);
    return rc;
}

sl_status_t
sl_checkpoint_load(const char *path, const sl_ckpt_ident_t *id, sl_backend_t *be, sl_lm_t *lm,
                   sl_optim_t *opt, sl_lm_state_t *st, sl_sync_t *sync, sl_ckpt_cursor_t *cur)
{
    char *data;
    unsigned char *p;
    size_t len, floats;
    header_t hd;
    int damaged;
    sl_status_t rc;

    SL_ASSERT((opt == NULL) == (st == NULL));
    SL_TRY(sl_file_read_all(path, &data, &len));
    p = (unsigned char *)data;
    SL_TRY_GOTO(validate(path, p, len, id, lm, opt, st, sync, &hd, &damaged), rc, out);

    /* The sync state checks itself completely before it changes anything; after it,
     * only device copies can fail. */
    p += hd.header_bytes;
    floats = hd.nparams + hd.opt_floats + hd.state_floats;
    if (opt && sync && hd.version != 1) {
        rc = sl_sync_state_load(sync, p + 4 * floats + 8, hd.sync_bytes);
        if (rc != SL_OK) {
            sl_err_prefix(rc, "%s", path);
            goto out;
        }
    }
    swap_floats_if_big_endian(p, floats);
    SL_TRY_GOTO(be->ops->to_device(be->ctx, sl_lm_params(lm), p, hd.nparams * sizeof(float)), rc,
                out);
    if (opt) {
        p += hd.nparams * sizeof(float);
        SL_TRY_GOTO(sl_optim_state_load(opt, (const float *)(const void *)p, hd.opt_steps), rc,
                    out);
        p += hd.opt_floats * sizeof(float);
        SL_TRY_GOTO(sl_lm_state_load(st, (const float *)(const void *)p), rc, out);
        if (cur)
            *cur = hd.cur;
    }
    rc = SL_OK;
out:
    free(data);
    return rc;
}

sl_status_t
sl_checkpoint_inspect(const char *path, sl_ckpt_info_t *info)
{
    char *data;
    size_t len;
    header_t hd;
    sl_status_t rc;

    memset(info, 0, sizeof *info);
    SL_TRY(sl_file_read_all(path, &data, &len));
    rc = check_container(path, (const unsigned char *)data, len, &hd);
    if (rc == SL_OK && hd.meta_bytes > 0) {
        rc = sl_model_meta_decode(&info->meta, path, (const unsigned char *)data + hd.meta_off,
                                  (size_t)hd.meta_bytes);
        info->has_meta = rc == SL_OK;
    }
    if (rc == SL_OK && info->has_meta && info->meta.vocab &&
        sl_vocab_size(info->meta.vocab) != hd.id.vocab) {
        rc = sl_err_set(SL_ERR_FORMAT,
                        "%s: model metadata: a vocabulary of %d entries for a model of %d", path,
                        sl_vocab_size(info->meta.vocab), hd.id.vocab);
        sl_model_meta_fini(&info->meta);
        info->has_meta = 0;
    }
    if (rc == SL_OK) {
        info->version = (int)hd.version;
        info->train_state = (hd.flags & SL_CKPT_TRAIN_STATE) != 0;
        info->id = hd.id;
        info->cur = hd.cur;
        info->nparams = hd.nparams;
    }
    free(data);
    return rc;
}

void
sl_checkpoint_info_fini(sl_ckpt_info_t *info)
{
    if (info->has_meta)
        sl_model_meta_fini(&info->meta);
    memset(info, 0, sizeof *info);
}
