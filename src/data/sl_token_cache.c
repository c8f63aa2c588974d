/* The token cache: one binary file per (corpus bytes, settings) holding the vocabulary
 * and the token ids of train/valid/test, so that later runs skip tokenization.
 *
 * Layout (native byte order; a foreign one fails the magic):
 *   header   magic "SHOALTOK", u32 version, u32 level, u64 hash, u32 vocab entries,
 *            i32 unk, i32 eos, u32 zero, u64 text bytes, u64 train, valid, test lengths
 *   vocab    i64 counts[V], u32 lens[V], text (each word + NUL), zero pad to 4 bytes
 *   ids      i32 train[], valid[], test[]
 *   trailer  u64 sl_hash of every byte before it
 *
 * It deals in a vocabulary and three token arrays; the corpus object is sl_corpus.c's,
 * which calls this file and is never called back. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/sl_file.h"
#include "common/sl_hash.h"
#include "data/sl_data_internal.h"

#define CACHE_MAGIC "SHOALTOK"
#define CACHE_SUM_SEED 0x746f6b656e73ULL /* "tokens" */

typedef struct {
    char magic[8];
    uint32_t version;
    uint32_t level;
    uint64_t hash;
    uint32_t nvocab;
    int32_t unk;
    int32_t eos;
    uint32_t zero;
    uint64_t text_bytes;
    uint64_t n[3]; /* train, valid, test */
} cache_header_t;

static size_t
pad4(uint64_t bytes)
{
    return (size_t)((4 - bytes % 4) % 4);
}

/* Reads bytes into dst and feeds them to the checksum; 0 at a short read. */
static int
read_sum(FILE *fp, void *dst, size_t bytes, sl_hash_t *sum)
{
    if (bytes && fread(dst, 1, bytes, fp) != bytes)
        return 0;
    sl_hash_update(sum, dst, bytes);
    return 1;
}

/* n ids into dst, of which only those at [lo, hi) are kept (dst holds hi - lo), a
 * piece at a time, every one fed to the checksum; 0 at a short read. */
static int
read_sum_share(FILE *fp, int32_t *dst, size_t n, size_t lo, size_t hi, sl_hash_t *sum)
{
    int32_t buf[16384];

    if (lo == 0 && hi == n) /* all of them: straight in */
        return read_sum(fp, dst, n * sizeof *dst, sum);
    for (size_t at = 0; at < n;) {
        size_t k = n - at < 16384 ? n - at : 16384;
        size_t a = at > lo ? at : lo, b = at + k < hi ? at + k : hi;

        if (!read_sum(fp, buf, k * sizeof *buf, sum))
            return 0;
        if (a < b)
            memcpy(dst + (a - lo), buf + (a - at), (b - a) * sizeof *buf);
        at += k;
    }
    return 1;
}

static sl_status_t
corrupt(const char *path, const char *what)
{
    return sl_err_set(SL_ERR_FORMAT, "%s: corrupt token cache (%s)", path, what);
}

/* Every size in the header is checked against the file size before anything is
 * allocated, so a damaged header cannot ask for absurd amounts of memory. */
static sl_status_t
check_header(const char *path, const cache_header_t *h, uint64_t hash, sl_level_t level,
             uint64_t file_bytes)
{
    uint64_t need;

    if (memcmp(h->magic, CACHE_MAGIC, 8) != 0)
        return corrupt(path, "bad magic");
    if (h->version != SL_DATA_FORMAT_VERSION)
        return corrupt(path, "other format version");
    if (h->hash != hash || h->level != (uint32_t)level)
        return corrupt(path, "hash does not match its name");
    if (h->nvocab == 0 || h->nvocab > INT32_MAX || h->zero != 0)
        return corrupt(path, "bad vocabulary size");
    if (h->unk < 0 || (uint32_t)h->unk >= h->nvocab || h->eos < -1 ||
        (h->eos >= 0 && (uint32_t)h->eos >= h->nvocab) || (h->eos < 0) != (level == SL_LEVEL_CHAR))
        return corrupt(path, "bad special ids");
    need = sizeof *h + 8;
    if (h->text_bytes > file_bytes || h->n[0] > file_bytes || h->n[1] > file_bytes ||
        h->n[2] > file_bytes)
        return corrupt(path, "sizes larger than the file");
    need += (uint64_t)h->nvocab * 12 + h->text_bytes + pad4(h->text_bytes);
    need += (h->n[0] + h->n[1] + h->n[2]) * 4;
    if (need != file_bytes)
        return corrupt(path, "file size does not match its header");
    if (h->n[0] == 0)
        return corrupt(path, "no training tokens");
    return SL_OK;
}

static sl_status_t
check_ids(const char *path, const int32_t *ids, size_t n, int32_t nvocab)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= nvocab)
            return corrupt(path, "token id out of range");
    return SL_OK;
}

/* Rebuilds the vocabulary table from counts, lengths and text, checking that every
 * word ends where its length says and that no word appears twice. */
static sl_status_t
load_vocab(const char *path, const cache_header_t *h, const int64_t *counts, const uint32_t *lens,
           const char *text, sl_vocab_t **out)
{
    sl_vocab_t *v;
    uint64_t at = 0;

    SL_TRY(sl_vocab_new(&v, (int)h->nvocab));
    for (uint32_t i = 0; i < h->nvocab; i++) {
        int32_t id;
        if (lens[i] >= h->text_bytes - at || text[at + lens[i]] != '\0') {
            sl_vocab_destroy(&v);
            return corrupt(path, "vocabulary text");
        }
        sl_status_t st = sl_vocab_intern(v, text + at, lens[i], &id);
        if (st != SL_OK) {
            sl_vocab_destroy(&v);
            return st;
        }
        if (id != (int32_t)i) {
            sl_vocab_destroy(&v);
            return corrupt(path, "duplicate word");
        }
        v->count[i] = (long)counts[i];
        at += (uint64_t)lens[i] + 1;
    }
    if (at != h->text_bytes) {
        sl_vocab_destroy(&v);
        return corrupt(path, "vocabulary text");
    }
    /* the specials are where the header says, under their names (the corpus's and a
     * model file's vocabulary find them by name) */
    if (sl_vocab_find(v, "<unk>", 5) != h->unk ||
        (h->eos >= 0 && sl_vocab_find(v, "<eos>", 5) != h->eos)) {
        sl_vocab_destroy(&v);
        return corrupt(path, "special ids do not name <unk> and <eos>");
    }
    v->unk = h->unk;
    v->eos = h->eos;
    *out = v;
    return SL_OK;
}

/* Frees what sl_token_cache_read has made so far and zeroes it. */
static void
discard(sl_vocab_t **vocab, sl_tokens_t *const parts[SL_TOKEN_CACHE_PARTS])
{
    sl_vocab_destroy(vocab);
    for (int k = 0; k < SL_TOKEN_CACHE_PARTS; k++) {
        free(parts[k]->ids);
        memset(parts[k], 0, sizeof *parts[k]);
    }
}

sl_status_t
sl_token_cache_read(const char *path, uint64_t hash, sl_level_t level, sl_vocab_t **vocab,
                    sl_tokens_t *const parts[SL_TOKEN_CACHE_PARTS], sl_train_share_t *share)
{
    sl_status_t st = SL_OK;
    cache_header_t h;
    sl_hash_t sum;
    struct stat sb;
    int64_t *counts = NULL;
    uint32_t *lens = NULL;
    char *text = NULL;
    unsigned char pad[4];
    uint64_t stored;
    FILE *fp;

    *vocab = NULL;
    for (int k = 0; k < SL_TOKEN_CACHE_PARTS; k++)
        memset(parts[k], 0, sizeof *parts[k]);
    fp = fopen(path, "rb");
    if (!fp)
        return sl_err_set(SL_ERR_IO, "%s: %s", path, strerror(errno));
    sl_hash_init(&sum, CACHE_SUM_SEED);
    if (fstat(fileno(fp), &sb) != 0 || !read_sum(fp, &h, sizeof h, &sum)) {
        st = corrupt(path, "short header");
        goto out;
    }
    SL_TRY_GOTO(check_header(path, &h, hash, level, (uint64_t)sb.st_size), st, out);
    counts = malloc(h.nvocab * sizeof *counts);
    lens = malloc(h.nvocab * sizeof *lens);
    text = malloc(h.text_bytes + 1);
    if (!counts || !lens || !text) {
        st = sl_err_set(SL_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    if (!read_sum(fp, counts, h.nvocab * sizeof *counts, &sum) ||
        !read_sum(fp, lens, h.nvocab * sizeof *lens, &sum) ||
        !read_sum(fp, text, h.text_bytes, &sum) || !read_sum(fp, pad, pad4(h.text_bytes), &sum)) {
        st = corrupt(path, "short read");
        goto out;
    }
    for (int k = 0; k < SL_TOKEN_CACHE_PARTS; k++) {
        size_t lo = 0, hi = h.n[k];

        if (k == 0) { /* the training ids: share's only */
            lo = sl_batcher_share_start(h.n[0], share->rank, share->nranks);
            hi = sl_batcher_share_start(h.n[0], share->rank + 1, share->nranks);
            share->from = lo;
            share->all = h.n[0];
        }
        parts[k]->len = hi - lo;
        if (hi > lo && !(parts[k]->ids = malloc((hi - lo) * sizeof(int32_t)))) {
            st = sl_err_set(SL_ERR_NOMEM, "%s: out of memory", path);
            goto out;
        }
        if (!read_sum_share(fp, parts[k]->ids, h.n[k], lo, hi, &sum)) {
            st = corrupt(path, "short read");
            goto out;
        }
    }
    if (fread(&stored, sizeof stored, 1, fp) != 1 || stored != sl_hash_final(&sum)) {
        st = corrupt(path, "checksum mismatch");
        goto out;
    }
    if (memcmp(pad, "\0\0\0", pad4(h.text_bytes)) != 0) {
        st = corrupt(path, "padding not zero");
        goto out;
    }
    for (int k = 0; k < SL_TOKEN_CACHE_PARTS; k++)
        SL_TRY_GOTO(check_ids(path, parts[k]->ids, parts[k]->len, (int32_t)h.nvocab), st, out);
    SL_TRY_GOTO(load_vocab(path, &h, counts, lens, text, vocab), st, out);
out:
    fclose(fp);
    free(counts);
    free(lens);
    free(text);
    if (st != SL_OK)
        discard(vocab, parts);
    return st;
}

static sl_status_t
write_sum(sl_atomic_file_t *f, const void *data, size_t bytes, sl_hash_t *sum)
{
    sl_hash_update(sum, data, bytes);
    return sl_atomic_write(f, data, bytes);
}

static sl_status_t
write_all(sl_atomic_file_t *f, uint64_t hash, sl_level_t level, const sl_vocab_t *v,
          const sl_tokens_t *const parts[SL_TOKEN_CACHE_PARTS])
{
    static const unsigned char zeros[4];
    cache_header_t h;
    sl_hash_t sum;
    uint64_t total;

    memset(&h, 0, sizeof h);
    memcpy(h.magic, CACHE_MAGIC, 8);
    h.version = SL_DATA_FORMAT_VERSION;
    h.level = (uint32_t)level;
    h.hash = hash;
    h.nvocab = (uint32_t)v->size;
    h.unk = v->unk;
    h.eos = v->eos;
    h.text_bytes = v->text_len;
    for (int k = 0; k < SL_TOKEN_CACHE_PARTS; k++)
        h.n[k] = parts[k]->len;
    sl_hash_init(&sum, CACHE_SUM_SEED);
    SL_TRY(write_sum(f, &h, sizeof h, &sum));
    for (int i = 0; i < v->size; i++) {
        int64_t count = v->count[i];
        SL_TRY(write_sum(f, &count, sizeof count, &sum));
    }
    SL_TRY(write_sum(f, v->len, (size_t)v->size * sizeof *v->len, &sum));
    SL_TRY(write_sum(f, v->text, v->text_len, &sum));
    if (pad4(v->text_len))
        SL_TRY(write_sum(f, zeros, pad4(v->text_len), &sum));
    for (int k = 0; k < SL_TOKEN_CACHE_PARTS; k++)
        if (parts[k]->len)
            SL_TRY(write_sum(f, parts[k]->ids, parts[k]->len * sizeof(int32_t), &sum));
    total = sl_hash_final(&sum);
    return sl_atomic_write(f, &total, sizeof total);
}

sl_status_t
sl_token_cache_write(const char *path, uint64_t hash, sl_level_t level, const sl_vocab_t *vocab,
                     const sl_tokens_t *const parts[SL_TOKEN_CACHE_PARTS])
{
    sl_atomic_file_t f;
    sl_status_t st;

    SL_TRY(sl_atomic_open(&f, path));
    st = write_all(&f, hash, level, vocab, parts);
    if (st != SL_OK) {
        sl_atomic_abort(&f);
        return st;
    }
    return sl_atomic_commit(&f);
}
