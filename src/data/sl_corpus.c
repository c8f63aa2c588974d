/* Corpus loading: read the files, hash their bytes with the settings, reuse the token
 * cache or tokenize (words or code points), build the count-ordered vocabulary, map
 * every token to its id and split off validation and max_tokens. */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sl_file.h"
#include "common/sl_hash.h"
#include "common/sl_log.h"
#include "config/sl_config.h"
#include "data/sl_data_internal.h"

#define CORPUS_HASH_SEED 0x636f72707573ULL /* "corpus" */
#define TEXT_CHUNK_BYTES (1 << 20)         /* a text is read this much at a time */

enum { SRC_TRAIN, SRC_VALID, SRC_TEST, NSRC };
static const char *const src_key[NSRC] = {"data.train", "data.valid", "data.test"};

typedef struct {
    const char *path; /* borrowed from the config; NULL when the split has no file */
    char *data;       /* a pipe's bytes (read once, to hash them); NULL for a file */
    size_t len;
} source_t;

/* One candidate word of the vocabulary while it is being ordered. */
typedef struct {
    long count;
    const char *word;
    uint32_t len;
    int32_t type; /* index in the table of distinct training tokens; -1 for a special */
} entry_t;

/* Descending count, ties in byte order (a prefix first), so ids follow Zipf ranks. */
static int
entry_cmp(const void *pa, const void *pb)
{
    const entry_t *a = pa, *b = pb;
    int c;

    if (a->count != b->count)
        return a->count > b->count ? -1 : 1;
    c = memcmp(a->word, b->word, a->len < b->len ? a->len : b->len);
    if (c)
        return c;
    return (a->len > b->len) - (a->len < b->len);
}

/* The vocabulary from the training counts: the top vocab_size distinct tokens (all of
 * them when 0) plus <unk> (counting the tokens left out) and, for words, <eos>; then
 * everything ordered by entry_cmp. map[type] receives the final id of each type.
 * vocab_where says where data.vocab_size was set (NULL: its default, which a small or
 * character corpus may not reach: then every distinct token is kept, with a line). */
static sl_status_t
build_vocab(const char *path, const sl_vocab_t *types, int32_t eos_type, int32_t unk_type,
            sl_level_t level, int vocab_size, const char *vocab_where, sl_vocab_t **out,
            int32_t *map)
{
    sl_status_t st = SL_OK;
    entry_t *e = malloc(((size_t)types->size + 2) * sizeof *e);
    sl_vocab_t *v = NULL;
    int ncand = 0, keep;
    long unk_count = unk_type >= 0 ? types->count[unk_type] : 0;
    const char *what = level == SL_LEVEL_WORD ? "words" : "characters";

    if (!e)
        return sl_err_set(SL_ERR_NOMEM, "%s: out of memory", path);
    for (int32_t t = 0; t < types->size; t++)
        if (t != eos_type && t != unk_type && types->count[t] > 0)
            e[ncand++] = (entry_t){types->count[t], types->text + types->off[t], types->len[t], t};
    if (ncand == 0) { /* word level: empty lines, or literal <unk>s; nothing to learn */
        st = sl_err_set(SL_ERR_INVALID, "%s: corpus has no %s%s", path, what,
                        unk_count ? " but <unk>" : " (its lines are empty)");
        goto out;
    }
    keep = vocab_size ? vocab_size : ncand;
    if (keep > ncand && !vocab_where) {
        sl_log_info("data",
                    "%s has %d distinct %s, fewer than the default data.vocab_size %d: "
                    "the vocabulary keeps them all",
                    path, ncand, what, vocab_size);
        keep = ncand;
    } else if (keep > ncand) {
        st = sl_err_set(SL_ERR_INVALID,
                        "%s: data.vocab_size %d is larger than the %d distinct %s of %s "
                        "(set at most %d, or leave the key out to keep them all)",
                        vocab_where, vocab_size, ncand, what, path, ncand);
        goto out;
    }
    qsort(e, (size_t)ncand, sizeof *e, entry_cmp);
    for (int i = keep; i < ncand; i++)
        unk_count += e[i].count;
    e[keep++] = (entry_t){unk_count, "<unk>", 5, -1};
    if (level == SL_LEVEL_WORD)
        e[keep++] = (entry_t){types->count[eos_type], "<eos>", 5, -1};
    qsort(e, (size_t)keep, sizeof *e, entry_cmp);

    SL_TRY_GOTO(sl_vocab_new(&v, keep), st, out);
    for (int32_t t = 0; t < types->size; t++)
        map[t] = -1; /* becomes <unk> below */
    for (int i = 0; i < keep; i++) {
        int32_t id;
        SL_TRY_GOTO(sl_vocab_intern(v, e[i].word, e[i].len, &id), st, out);
        v->count[id] = e[i].count;
        if (e[i].type >= 0)
            map[e[i].type] = id;
    }
    v->unk = sl_vocab_find(v, "<unk>", 5);
    v->eos = level == SL_LEVEL_WORD ? sl_vocab_find(v, "<eos>", 5) : -1;
    if (eos_type >= 0)
        map[eos_type] = v->eos;
    for (int32_t t = 0; t < types->size; t++)
        if (map[t] < 0)
            map[t] = v->unk;
    *out = v;
    v = NULL;
out:
    sl_vocab_destroy(&v);
    free(e);
    return st;
}

/* The settings' part of the corpus hash into h. */
static void
hash_settings(sl_hash_t *h, const sl_config_t *cfg)
{
    double frac = cfg->data.valid_fraction;
    uint64_t words[5];

    words[0] = SL_DATA_FORMAT_VERSION;
    words[1] = (uint64_t)cfg->data.level;
    words[2] = (uint64_t)(int64_t)cfg->data.vocab_size;
    memcpy(&words[3], &frac, sizeof frac);
    words[4] = (uint64_t)(int64_t)cfg->data.max_tokens;
    sl_hash_init(h, CORPUS_HASH_SEED);
    sl_hash_update(h, words, sizeof words);
}

/* The cache directory: data.cache_dir, else $XDG_CACHE_HOME/shoal, else
 * $HOME/.cache/shoal; NULL (no cache) when none of them is set. Caller frees. */
static char *
cache_dir(const sl_config_t *cfg)
{
    const char *dir = cfg->data.cache_dir, *env;
    char *out = NULL;

    if (dir && *dir)
        return strdup(dir);
    if ((env = getenv("XDG_CACHE_HOME")) && *env) {
        if (asprintf(&out, "%s/shoal", env) < 0)
            out = NULL;
    } else if ((env = getenv("HOME")) && *env) {
        if (asprintf(&out, "%s/.cache/shoal", env) < 0)
            out = NULL;
    }
    return out;
}

static sl_status_t
check_settings(const sl_config_t *cfg)
{
    const char *path = cfg->data.train;

    if (!path || !*path)
        return sl_err_set(SL_ERR_INVALID, "data.train: no training file given");
    if (cfg->data.level != SL_LEVEL_WORD && cfg->data.level != SL_LEVEL_CHAR)
        return sl_err_set(SL_ERR_INVALID, "%s: unknown data.level %d", path, (int)cfg->data.level);
    if (cfg->data.vocab_size < 0)
        return sl_err_set(SL_ERR_INVALID, "%s: data.vocab_size %d is negative", path,
                          cfg->data.vocab_size);
    if (!(cfg->data.valid_fraction >= 0 && cfg->data.valid_fraction < 1))
        return sl_err_set(SL_ERR_INVALID, "%s: data.valid_fraction %g is not in [0, 1)", path,
                          cfg->data.valid_fraction);
    if (cfg->data.max_tokens < 0)
        return sl_err_set(SL_ERR_INVALID, "%s: data.max_tokens %ld is negative", path,
                          cfg->data.max_tokens);
    return SL_OK;
}

/* A failure st reading split k's file, with the key and where the configuration set it
 * ("conf/x.yaml:21:10: data.train: ...: No such file or directory"). */
static sl_status_t
source_error(const sl_config_t *cfg, int k, const source_t *src, sl_status_t st)
{
    const char *at = sl_config_key_where(cfg, src_key[k]);

    if (!at)
        return sl_err_prefix(st, "%s", src_key[k]);
    if (src->path[0] != '/' && strncmp(at, "--set", 5) != 0) {
        char why[512];
        snprintf(why, sizeof why, "%s", sl_err_msg());
        return sl_err_set(st,
                          "%s: %s: %s (a relative path is read beside the configuration "
                          "file, else from the working directory)",
                          at, src_key[k], why);
    }
    return sl_err_prefix(st, "%s: %s", at, src_key[k]);
}

/* Split k's part of the corpus hash (corpus_hash's: a head, then the bytes) into h, and
 * the training text into sha, read a piece at a time: with a valid token cache the
 * texts are then never held whole (a node of a large corpus holds its ids only). A
 * file that is not regular (a pipe) is read whole into src. */
static sl_status_t
hash_source(const sl_config_t *cfg, int k, source_t *src, sl_hash_t *h,
            crypto_hash_sha256_state *sha)
{
    unsigned char buf[1 << 16];
    uint64_t head[2] = {src->path != NULL, 0};
    size_t got, total = 0;
    struct stat sb;
    sl_status_t st = SL_OK;
    FILE *fp;

    if (!src->path) {
        sl_hash_update(h, head, sizeof head);
        return SL_OK;
    }
    if (!(fp = fopen(src->path, "rb")))
        return source_error(cfg, k, src,
                            sl_err_set(SL_ERR_IO, "%s: %s", src->path, strerror(errno)));
    if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        if ((st = sl_file_read_rest(fp, src->path, &src->data, &src->len)) != SL_OK)
            return source_error(cfg, k, src, st);
        head[1] = src->len;
        sl_hash_update(h, head, sizeof head);
        sl_hash_update(h, src->data, src->len);
        if (k == SRC_TRAIN)
            crypto_hash_sha256_update(sha, (const unsigned char *)src->data, src->len);
        return SL_OK;
    }
    head[1] = (uint64_t)sb.st_size;
    sl_hash_update(h, head, sizeof head);
    while ((got = fread(buf, 1, sizeof buf, fp)) > 0) {
        sl_hash_update(h, buf, got);
        if (k == SRC_TRAIN)
            crypto_hash_sha256_update(sha, buf, got);
        total += got;
    }
    if (ferror(fp))
        st = sl_err_set(SL_ERR_IO, "%s: read error: %s", src->path, strerror(errno));
    else if (total != (size_t)sb.st_size)
        st = sl_err_set(SL_ERR_IO, "%s: changed while it was read", src->path);
    fclose(fp);
    return st == SL_OK ? SL_OK : source_error(cfg, k, src, st);
}

/* The corpus hash, the identity of the data: every setting that changes the ids and
 * each text's bytes after a presence flag and its length (so that moving bytes between
 * files changes it); and the training text's SHA-256; the files read a piece at a
 * time. */
static sl_status_t
hash_sources(const sl_config_t *cfg, source_t *src, uint64_t *hash, unsigned char *sha256)
{
    crypto_hash_sha256_state sha;
    sl_hash_t h;

    hash_settings(&h, cfg);
    crypto_hash_sha256_init(&sha);
    for (int k = 0; k < NSRC; k++)
        SL_TRY(hash_source(cfg, k, &src[k], &h, &sha));
    *hash = sl_hash_final(&h);
    crypto_hash_sha256_final(&sha, sha256);
    return SL_OK;
}

/* Split k's text given to fn a piece at a time (a pipe's from the bytes hash_source
 * kept), and its part of the corpus hash into h as hash_source's: SL_ERR_IO when it is
 * no longer as long as it was then (the caller compares the hashes at the end). */
static sl_status_t
stream_source(const sl_config_t *cfg, int k, const source_t *src, sl_hash_t *h, sl_token_fn fn,
              void *ctx)
{
    uint64_t head[2] = {src->path != NULL, src->len}, bytes = 0;
    struct stat sb;
    sl_status_t st;
    FILE *fp;

    if (src->path && !src->data)
        fp = fopen(src->path, "rb");
    else if (src->len)
        fp = fmemopen(src->data, src->len, "rb");
    else /* no file, or an empty pipe */
        fp = NULL;
    if (!fp && src->path && (!src->data || src->len))
        return source_error(cfg, k, src,
                            sl_err_set(SL_ERR_IO, "%s: %s", src->path, strerror(errno)));
    if (fp && !src->data && fstat(fileno(fp), &sb) == 0)
        head[1] = (uint64_t)sb.st_size;
    sl_hash_update(h, head, sizeof head);
    if (!fp)
        return SL_OK;
    st = sl_tokenize_stream(fp, src->path, cfg->data.level, TEXT_CHUNK_BYTES, fn, ctx, h, &bytes);
    fclose(fp);
    if (st == SL_OK && bytes != head[1])
        st = sl_err_set(SL_ERR_IO, "%s: changed while it was read", src->path);
    return st;
}

/* The training text's distinct tokens and its ids into them, as they are read (word
 * level: <eos> and a literal "<unk>" are entries too, so that they are counted). */
typedef struct {
    sl_vocab_t *types;
    int32_t eos_type;
    sl_idbuf_t raw;
    const char *path;
} types_t;

static sl_status_t
add_type(void *ctx, const char *tok, size_t n)
{
    types_t *t = ctx;
    int32_t type = t->eos_type;

    if (n)
        SL_TRY(sl_vocab_intern(t->types, tok, n, &type));
    return sl_idbuf_push(&t->raw, type, t->path);
}

/* A held-out text's ids in the finished vocabulary (unknown: <unk>), as they are read. */
typedef struct {
    const sl_vocab_t *v;
    sl_idbuf_t ids;
    const char *path;
} known_t;

static sl_status_t
add_known(void *ctx, const char *tok, size_t n)
{
    known_t *k = ctx;
    int32_t id = n ? sl_vocab_find(k->v, tok, n) : k->v->eos;

    return sl_idbuf_push(&k->ids, id >= 0 ? id : k->v->unk, k->path);
}

/* Split k's ids (valid or test) into out when it has a file; out untouched when not. */
static sl_status_t
tokenize_held_out(const sl_config_t *cfg, int k, const source_t *src, const sl_vocab_t *v,
                  sl_hash_t *h, sl_tokens_t *out)
{
    known_t ids = {v, {0}, src->path};
    sl_status_t st = stream_source(cfg, k, src, h, add_known, &ids);

    if (st == SL_OK && src->path && ids.ids.len == 0)
        st = sl_err_set(SL_ERR_INVALID, "%s: corpus is empty", src->path);
    if (st != SL_OK || !src->path) {
        free(ids.ids.ids);
        return st;
    }
    sl_idbuf_take(&ids.ids, ids.ids.len, out);
    return SL_OK;
}

/* Tokenizes everything and fills corpus (vocab and ids; hash left to the caller),
 * each text read a piece at a time (never held whole: the ids are) and hashed again on
 * the way: SL_ERR_IO when the texts are no longer the bytes of hash, which
 * hash_sources read. */
static sl_status_t
build(sl_corpus_t *c, const source_t *src, const sl_config_t *cfg, uint64_t hash)
{
    sl_status_t st;
    types_t t = {NULL, -1, {0}, src[SRC_TRAIN].path};
    int32_t unk_type = -1, *map = NULL;
    size_t n_all, n_train;
    const char *path = src[SRC_TRAIN].path;
    sl_level_t level = cfg->data.level;
    sl_hash_t h;

    SL_TRY(sl_vocab_new(&t.types, 4096));
    if (level == SL_LEVEL_WORD) {
        SL_TRY_GOTO(sl_vocab_intern(t.types, "<eos>", 5, &t.eos_type), st, out);
        SL_TRY_GOTO(sl_vocab_intern(t.types, "<unk>", 5, &unk_type), st, out);
    }
    hash_settings(&h, cfg);
    SL_TRY_GOTO(stream_source(cfg, SRC_TRAIN, &src[SRC_TRAIN], &h, add_type, &t), st, out);
    if (t.raw.len == 0) {
        st = sl_err_set(SL_ERR_INVALID, "%s: corpus is empty", path);
        goto out;
    }
    n_all = n_train = t.raw.len;
    if (!src[SRC_VALID].path && cfg->data.valid_fraction > 0) {
        n_train = (size_t)((double)n_all * (1.0 - cfg->data.valid_fraction));
        if (n_train == 0) {
            st = sl_err_set(SL_ERR_INVALID,
                            "%s: data.valid_fraction %g leaves none of its %zu "
                            "tokens for training",
                            path, cfg->data.valid_fraction, n_all);
            goto out;
        }
    }
    for (size_t i = 0; i < n_train; i++)
        t.types->count[t.raw.ids[i]]++;
    map = malloc((size_t)t.types->size * sizeof *map);
    if (!map) {
        st = sl_err_set(SL_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    SL_TRY_GOTO(build_vocab(path, t.types, t.eos_type, unk_type, level, cfg->data.vocab_size,
                            sl_config_key_where(cfg, "data.vocab_size"), &c->vocab, map),
                st, out);
    for (size_t i = 0; i < n_all; i++)
        t.raw.ids[i] = map[t.raw.ids[i]];
    if (n_train < n_all) {
        c->valid.len = n_all - n_train;
        c->valid.ids = malloc(c->valid.len * sizeof *c->valid.ids);
        if (!c->valid.ids) {
            st = sl_err_set(SL_ERR_NOMEM, "%s: out of memory", path);
            goto out;
        }
        memcpy(c->valid.ids, t.raw.ids + n_train, c->valid.len * sizeof *c->valid.ids);
    }
    if (cfg->data.max_tokens > 0 && (size_t)cfg->data.max_tokens < n_train)
        n_train = (size_t)cfg->data.max_tokens;
    sl_idbuf_take(&t.raw, n_train, &c->train);
    SL_TRY_GOTO(tokenize_held_out(cfg, SRC_VALID, &src[SRC_VALID], c->vocab, &h, &c->valid), st,
                out);
    SL_TRY_GOTO(tokenize_held_out(cfg, SRC_TEST, &src[SRC_TEST], c->vocab, &h, &c->test), st, out);
    if (sl_hash_final(&h) != hash) {
        st = sl_err_set(SL_ERR_IO, "%s: the corpus changed while it was read", path);
        goto out;
    }
    st = SL_OK;
out:
    free(t.raw.ids);
    free(map);
    sl_vocab_destroy(&t.types);
    return st;
}

/* A cached vocabulary was built from the same data.vocab_size, but perhaps as a default
 * capped at the corpus's distinct tokens: one that a file or --set asked for must be
 * all there (build_vocab's error). */
static sl_status_t
check_cached_vocab(const sl_corpus_t *c, const sl_config_t *cfg, const char *path)
{
    const char *at = sl_config_key_where(cfg, "data.vocab_size");
    int specials = cfg->data.level == SL_LEVEL_WORD ? 2 : 1, n = cfg->data.vocab_size;
    int have = c->vocab->size - specials;

    if (!at || n == 0 || have >= n)
        return SL_OK;
    return sl_err_set(SL_ERR_INVALID,
                      "%s: data.vocab_size %d is larger than the %d distinct %s of %s (set at "
                      "most %d, or leave the key out to keep them all)",
                      at, n, have, cfg->data.level == SL_LEVEL_WORD ? "words" : "characters", path,
                      have);
}

/* The token cache at path into corpus when it is there and sound (corpus->from_cache
 * set; of the training ids share's only), the corpus left as it was when not; a corrupt one is
 * warned about when warn is set. Errors: a cached vocabulary smaller than the data.vocab_size asked
 * for. */
static sl_status_t
read_cache(sl_corpus_t *corpus, const sl_config_t *cfg, const char *path, uint64_t hash,
           const char *train, sl_train_share_t *share, int warn)
{
    sl_tokens_t *const parts[SL_TOKEN_CACHE_PARTS] = {&corpus->train, &corpus->valid,
                                                      &corpus->test};
    sl_status_t st = sl_token_cache_read(path, hash, cfg->data.level, &corpus->vocab, parts, share);

    if (st == SL_OK)
        st = check_cached_vocab(corpus, cfg, train);
    if (st == SL_OK) {
        corpus->hash = hash;
        corpus->from_cache = 1;
        corpus->train_from = share->from;
        corpus->train_all = share->all;
        return SL_OK;
    }
    if (st != SL_ERR_FORMAT && st != SL_ERR_IO)
        return st;
    if (st == SL_ERR_FORMAT && warn)
        sl_log_warn("data", "%s; rebuilding it", sl_err_msg());
    sl_err_clear();
    return SL_OK;
}

/* An exclusive lock on <path>.lock (in dir), so that of the processes that start on one
 * corpus together (the nodes of a host, or of a shared file system) one tokenizes it and
 * the others read its cache; -1 when there is none to have (a file system without
 * locks): each then builds it, as without a lock. Says so when it waits. */
static int
lock_cache(const char *dir, const char *path)
{
    char name[4200];
    int fd, state, got;

    if (snprintf(name, sizeof name, "%s.lock", path) >= (int)sizeof name ||
        sl_file_mkdirs(dir) != SL_OK || sl_file_lock_try(name, &fd, &state) != SL_OK) {
        sl_err_clear();
        return -1;
    }
    if (state == 0) {
        sl_log_info("data", "%s: another process is building this token cache; waiting for it",
                    path);
        while ((got = flock(fd, LOCK_EX)) != 0 && errno == EINTR)
            ;
        if (got != 0) {
            close(fd);
            return -1;
        }
    }
    return fd;
}

/* Keeps share's part of the whole training ids the corpus was built with. */
static sl_status_t
cut_share(sl_corpus_t *c, sl_train_share_t *share)
{
    size_t all = c->train.len, lo = sl_batcher_share_start(all, share->rank, share->nranks);
    size_t hi = sl_batcher_share_start(all, share->rank + 1, share->nranks);
    int32_t *own = NULL;

    c->train_from = lo;
    c->train_all = all;
    if (lo == 0 && hi == all)
        return SL_OK;
    if (hi > lo && !(own = malloc((hi - lo) * sizeof *own))) /* ids are free()d */
        return sl_err_set(SL_ERR_NOMEM, "out of memory for a share of %zu training tokens",
                          hi - lo);
    if (own)
        memcpy(own, c->train.ids + lo, (hi - lo) * sizeof *own);
    free(c->train.ids);
    c->train.ids = own;
    c->train.len = hi - lo;
    return SL_OK;
}

sl_status_t
sl_corpus_load(sl_corpus_t *corpus, const sl_config_t *cfg)
{
    return sl_corpus_load_share(corpus, cfg, 0, 1);
}

/* A cache that is absent or unreadable is silently rebuilt, a corrupt one with a
 * warning; a cache that cannot be written costs one warning and nothing else. */
sl_status_t
sl_corpus_load_share(sl_corpus_t *corpus, const sl_config_t *cfg, int rank, int nranks)
{
    sl_status_t st = SL_OK;
    source_t src[NSRC] = {
        {cfg->data.train, NULL, 0}, {cfg->data.valid, NULL, 0}, {cfg->data.test, NULL, 0}};
    char *dir = NULL, *path = NULL;
    uint64_t hash;
    int lock = -1;
    sl_train_share_t share = {rank, nranks, 0, 0};
    const sl_tokens_t *const cparts[SL_TOKEN_CACHE_PARTS] = {&corpus->train, &corpus->valid,
                                                             &corpus->test};

    memset(corpus, 0, sizeof *corpus);
    SL_TRY(check_settings(cfg));
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return sl_err_set(SL_ERR_INVALID, "corpus: rank %d of %d is out of range", rank, nranks);
    for (int k = 0; k < NSRC; k++)
        if (src[k].path && !*src[k].path)
            src[k].path = NULL;
    SL_TRY_GOTO(hash_sources(cfg, src, &hash, corpus->train_sha256), st, out);
    dir = cache_dir(cfg);
    if (dir && asprintf(&path, "%s/%016llx.tokens", dir, (unsigned long long)hash) < 0)
        path = NULL;
    if (path) {
        SL_TRY_GOTO(read_cache(corpus, cfg, path, hash, src[SRC_TRAIN].path, &share, 0), st, out);
        if (!corpus->from_cache) { /* it may have been built while this process waited */
            lock = lock_cache(dir, path);
            SL_TRY_GOTO(read_cache(corpus, cfg, path, hash, src[SRC_TRAIN].path, &share, 1), st,
                        out);
        }
    }
    if (!corpus->from_cache) {
        SL_TRY_GOTO(build(corpus, src, cfg, hash), st, out);
        corpus->hash = hash;
        if (!path)
            sl_log_warn("data", "no cache directory (data.cache_dir, XDG_CACHE_HOME and HOME "
                                "are unset); continuing without a token cache");
        else if (sl_file_mkdirs(dir) != SL_OK ||
                 sl_token_cache_write(path, hash, cfg->data.level, corpus->vocab, cparts) != SL_OK)
            sl_log_warn("data", "%s; continuing without a token cache", sl_err_msg());
        sl_err_clear();
        SL_TRY_GOTO(cut_share(corpus, &share), st, out);
    }
    st = SL_OK;
    sl_log_info("data", "%s: %zu train, %zu valid, %zu test tokens; vocabulary %d%s",
                src[SRC_TRAIN].path, corpus->train_all, corpus->valid.len, corpus->test.len,
                corpus->vocab->size, corpus->from_cache ? " (token cache)" : "");
out:
    if (lock >= 0)
        close(lock);
    for (int k = 0; k < NSRC; k++)
        free(src[k].data);
    free(dir);
    free(path);
    if (st != SL_OK)
        sl_corpus_fini(corpus);
    return st;
}

void
sl_corpus_fini(sl_corpus_t *corpus)
{
    if (!corpus)
        return;
    sl_vocab_destroy(&corpus->vocab);
    free(corpus->train.ids);
    free(corpus->valid.ids);
    free(corpus->test.ids);
    memset(corpus, 0, sizeof *corpus);
}
