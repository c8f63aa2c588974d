/* libFuzzer target: the corpus reader (sl_corpus_load) and the token cache
 * (sl_token_cache_read / sl_token_cache_write) on arbitrary bytes.
 *
 * Byte 0 is a set of flags; bit 0 picks the level (0 word, 1 char), bit 1 the mode.
 *
 * Mode 0, corpus: bytes 1 and 2 are parameters, the rest is split on the first two
 * 0x1e bytes (ASCII record separator) into the train, valid and test texts; a part
 * that is not there (fewer separators) has no file. Bits 2-3 pick data.vocab_size:
 * 0 (every token), the default, byte 1 set in the struct (as a default would be), or
 * byte 1 through sl_config_set (as --set would, so that a vocabulary the corpus cannot
 * fill is an error naming the --set). Bit 4 sets data.valid_fraction byte 2 / 256
 * (used when there is no valid file), bit 5 data.max_tokens byte 2, bit 6 makes an
 * empty valid or test part "no file" (data.valid "") rather than an empty file. The
 * texts are written to files in a private directory (mkdtemp under $TMPDIR, else
 * /tmp), with data.cache_dir below it, and loaded. A failure must be SL_ERR_FORMAT or
 * SL_ERR_INVALID with a one-line message starting "FILE: " (one of the three files) or
 * "WHERE: " (where data.vocab_size was set) and leave the corpus zeroed; an invalid
 * UTF-8 error must name the first bad byte that a separate decoder finds. A success
 * must be what sl_data.h promises: specials in place, ids in range, ids in order of
 * descending count (ties in byte order), counts that are the training occurrences,
 * every text valid UTF-8 with as many tokens as counted here, train (+ held-out valid)
 * the ids sl_tokenize gives the training text, its words interned one by one into a
 * small table that grows given the same ids. The corpus is then written with
 * sl_token_cache_write and read back equal, and loaded again from the token cache
 * sl_corpus_load wrote, equal; with a byte of that cache's body flipped it is rebuilt,
 * equal, and used again; when data.vocab_size was not set, setting the same
 * number with sl_config_set gives with that cache what it gives without.
 *
 * Mode 1, cache image: the rest of the input is a token cache file, read with
 * sl_token_cache_read for the level of bit 0 and the hash in the image's own header
 * (bit 3: another hash, which must fail). Bit 2 reseals the image's checksum (its last
 * 8 bytes) first, so the checks behind it are reached. A failure must be SL_ERR_FORMAT
 * "PATH: corrupt token cache (why)" on one line with nothing left allocated; a cache
 * that is read must hold a consistent vocabulary and ids, read again as a node's share
 * give the batcher's slice of the training ids, and written again under the same hash
 * and level be the same bytes.
 *
 * A broken promise prints what broke and aborts. SHOAL_LOG is not read: the data
 * module's info lines and warnings are silenced unless FUZZ_CORPUS_LOG is set, which
 * also prints each input's outcome (to see what a seed reaches). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sl_hash.h"
#include "common/sl_log.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "data/sl_data_internal.h"

#define SEP 0x1e
#define CACHE_SUM_SEED 0x746f6b656e73ULL /* sl_token_cache.c's; fuzz_cache checks it */
#define CACHE_HEADER_BYTES 72
#define CACHE_HASH_AT 16

enum { F_CHAR = 1, F_CACHE = 2, F_VOCAB = 12, F_FRACTION = 16, F_MAX = 32, F_EMPTY_NONE = 64 };
enum { V_ALL = 0, V_DEFAULT = 4, V_FIELD = 8, V_SET = 12 };
enum { F_RESEAL = 4, F_OTHER_HASH = 8 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[3000];
static char part_path[3][3100], cache_path[3100], image_path[3100], rt_path[3100];
static const char *const part_name[3] = {"train.txt", "valid.txt", "test.txt"};

static int verbose;

static void
outcome(const char *what, sl_status_t st, size_t train, size_t valid, size_t test)
{
    if (!verbose)
        return;
    if (st == SL_OK)
        fprintf(stderr, "fuzz_corpus: %s: %zu train, %zu valid, %zu test tokens\n", what, train,
                valid, test);
    else
        fprintf(stderr, "fuzz_corpus: %s: error %d: %s\n", what, (int)st, sl_err_msg());
}

static void
broken(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_corpus: %s: %s\n", what, detail);
    abort();
}

static void
remove_dir(void)
{
    for (int k = 0; k < 3; k++)
        unlink(part_path[k]);
    unlink(image_path);
    unlink(rt_path);
    rmdir(cache_path);
    rmdir(dir);
}

/* The private directory, made once and removed at exit (what a crash leaves there is
 * the crashing input's files). */
static void
setup(void)
{
    const char *tmp = getenv("TMPDIR");

    if (dir[0])
        return;
    snprintf(dir, sizeof dir, "%s/fuzz_corpus.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror(dir);
        abort();
    }
    for (int k = 0; k < 3; k++)
        snprintf(part_path[k], sizeof part_path[k], "%s/%s", dir, part_name[k]);
    snprintf(cache_path, sizeof cache_path, "%s/cache", dir);
    snprintf(image_path, sizeof image_path, "%s/image.tokens", dir);
    snprintf(rt_path, sizeof rt_path, "%s/roundtrip.tokens", dir);
    atexit(remove_dir);
    verbose = getenv("FUZZ_CORPUS_LOG") != NULL;
    sl_log_set_level(verbose ? SL_LOG_DEBUG : SL_LOG_QUIET);
}

static void
write_file(const char *path, const void *bytes, size_t len)
{
    FILE *fp = fopen(path, "wb");

    if (!fp || (len && fwrite(bytes, 1, len, fp) != len) || fclose(fp) != 0) {
        perror(path);
        abort();
    }
}

/* Whether msg would print as one plain line: non-empty, no control character. */
static int
one_line(const char *msg)
{
    if (!*msg)
        return 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return 0;
    return 1;
}

static int
starts(const char *msg, const char *prefix)
{
    size_t n = strlen(prefix);
    return strncmp(msg, prefix, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ' && msg[n + 2];
}

/* The first invalid UTF-8 sequence's offset, or len: a plain decoder, written apart
 * from sl_utf8.c's table so that the two check each other. */
static size_t
ref_utf8_invalid_at(const unsigned char *s, size_t len)
{
    size_t i = 0;

    while (i < len) {
        unsigned b = s[i];
        uint32_t cp;
        size_t n;

        if (b < 0x80) {
            i++;
            continue;
        }
        if ((b & 0xe0) == 0xc0) {
            n = 2;
            cp = b & 0x1f;
        } else if ((b & 0xf0) == 0xe0) {
            n = 3;
            cp = b & 0x0f;
        } else if ((b & 0xf8) == 0xf0) {
            n = 4;
            cp = b & 0x07;
        } else {
            return i;
        }
        if (len - i < n)
            return i;
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return i;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
            (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
            return i;
        i += n;
    }
    return len;
}

/* Tokens of valid text as sl_data.h describes them, counted here: code points, or
 * words (runs of other than space, tab, CR, newline) plus an <eos> per newline and one
 * for a last line without a newline. */
static size_t
ref_token_count(const unsigned char *s, size_t len, int chars)
{
    size_t n = 0;

    for (size_t i = 0; i < len; i++) {
        int space = s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n';
        if (chars)
            n += (s[i] & 0xc0) != 0x80;
        else
            n += s[i] == '\n' || (!space && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '\t' ||
                                             s[i - 1] == '\r' || s[i - 1] == '\n'));
    }
    if (!chars && len && s[len - 1] != '\n')
        n++;
    return n;
}

/* ---- what a vocabulary and its ids must be ---- */

static int
word_is(const sl_vocab_t *v, int id, const char *w)
{
    return id >= 0 && id < v->size && v->len[id] == strlen(w) &&
           memcmp(v->text + v->off[id], w, v->len[id]) == 0;
}

/* Table, specials and ids of a vocabulary that was read or built. */
static void
check_vocab(const sl_vocab_t *v, sl_level_t level, sl_tokens_t *const parts[3])
{
    char at[64];

    if (!v || v->size < 1 || (level == SL_LEVEL_WORD && v->size < 2))
        broken("vocabulary without its specials", "");
    if (!word_is(v, v->unk, "<unk>"))
        broken("<unk> is not the word at the unk id", "");
    if (level == SL_LEVEL_WORD ? !word_is(v, v->eos, "<eos>") : v->eos != -1)
        broken("<eos> is not the word at the eos id (word level) or not -1 (char)", "");
    for (int id = 0; id < v->size; id++) {
        snprintf(at, sizeof at, "id %d", id);
        if (v->text[v->off[id] + v->len[id]] != '\0' ||
            sl_vocab_find(v, v->text + v->off[id], v->len[id]) != id)
            broken("a word is not found at its own id", at);
    }
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < parts[k]->len; i++)
            if (parts[k]->ids[i] < 0 || parts[k]->ids[i] >= v->size)
                broken("token id out of range", part_name[k]);
}

/* The words of v interned one by one into a table that starts small, so that it grows
 * (the corpus's own tables start at 4096 words, which a fuzzer's inputs do not reach):
 * each gets the id it has in v and is found there, and interning it again adds nothing. */
static void
check_vocab_growth(const sl_vocab_t *v)
{
    sl_vocab_t *g = NULL;
    int32_t id;

    if (sl_vocab_new(&g, 1) != SL_OK)
        broken("sl_vocab_new failed", sl_err_msg());
    for (int i = 0; i < v->size; i++)
        if (sl_vocab_intern(g, v->text + v->off[i], v->len[i], &id) != SL_OK || id != i)
            broken("a growing table gives a word another id", sl_err_msg());
    for (int i = 0; i < v->size; i++)
        if (sl_vocab_find(g, v->text + v->off[i], v->len[i]) != i ||
            sl_vocab_intern(g, v->text + v->off[i], v->len[i], &id) != SL_OK || id != i)
            broken("a grown table does not find a word at its id", "");
    if (g->size != v->size || g->text_len != v->text_len || g->nslots < 2 * (size_t)g->size)
        broken("a grown table's sizes are off", "");
    sl_vocab_destroy(&g);
}

/* Two corpora (or a corpus and a cache) hold the same vocabulary and ids. */
static void
check_same(const char *what, const sl_vocab_t *a, sl_tokens_t *const pa[3], const sl_vocab_t *b,
           sl_tokens_t *const pb[3])
{
    if (a->size != b->size || a->unk != b->unk || a->eos != b->eos || a->text_len != b->text_len)
        broken(what, "vocabulary size or specials differ");
    for (int id = 0; id < a->size; id++)
        if (a->len[id] != b->len[id] || a->count[id] != b->count[id] ||
            memcmp(a->text + a->off[id], b->text + b->off[id], a->len[id]) != 0)
            broken(what, "a word or its count differs");
    for (int k = 0; k < 3; k++)
        if (pa[k]->len != pb[k]->len ||
            (pa[k]->len && memcmp(pa[k]->ids, pb[k]->ids, pa[k]->len * sizeof(int32_t)) != 0))
            broken(what, part_name[k]);
}

/* ---- mode 0: corpus ---- */

typedef struct {
    const unsigned char *text[3];
    size_t len[3];
    int present[3]; /* a file (perhaps empty) is given */
} parts_t;

static void
split(const unsigned char *p, size_t n, int empty_none, parts_t *out)
{
    memset(out, 0, sizeof *out);
    for (int k = 0; k < 3; k++) {
        const unsigned char *sep = k < 2 ? memchr(p, SEP, n) : NULL;
        size_t len = sep ? (size_t)(sep - p) : n;

        out->text[k] = p;
        out->len[k] = len;
        out->present[k] = k == 0 || !empty_none || len > 0;
        if (!sep) {
            for (int j = k + 1; j < 3; j++)
                out->present[j] = 0;
            return;
        }
        p = sep + 1;
        n -= len + 1;
    }
}

static void
set_str(char **field, const char *value)
{
    free(*field);
    *field = strdup(value);
    if (!*field)
        abort();
}

/* A failed load: the promised status and message, a zeroed corpus, and for invalid
 * UTF-8 the byte the reference decoder finds. */
static void
check_failure(sl_status_t st, const sl_corpus_t *c, const sl_config_t *cfg, const parts_t *pt)
{
    static const sl_corpus_t zero;
    const char *msg = sl_err_msg(), *where = sl_config_key_where(cfg, "data.vocab_size");
    int file = -1;

    if (st != SL_ERR_FORMAT && st != SL_ERR_INVALID)
        broken("a load failed with another status than SL_ERR_FORMAT or SL_ERR_INVALID", msg);
    if (!one_line(msg))
        broken("message not on one plain line", msg);
    for (int k = 0; k < 3; k++)
        if (pt->present[k] && starts(msg, part_path[k]))
            file = k;
    if (file < 0 && !(where && starts(msg, where)))
        broken("message does not start with 'FILE: ' or where data.vocab_size was set", msg);
    if (memcmp(c, &zero, sizeof zero) != 0)
        broken("a failed load left the corpus filled", msg);
    if (file >= 0 && strstr(msg, "invalid UTF-8")) {
        size_t at, bad = ref_utf8_invalid_at(pt->text[file], pt->len[file]);
        const char *p = msg + strlen(part_path[file]);
        if (sscanf(p, ": invalid UTF-8 at byte %zu", &at) != 1 || at != bad)
            broken("invalid UTF-8 reported at another byte than the first bad one", msg);
    }
}

/* A successful load: what sl_data.h promises of it. */
static void
check_corpus(const sl_corpus_t *c, const sl_config_t *cfg, const parts_t *pt)
{
    sl_level_t level = cfg->data.level;
    sl_tokens_t *const parts[3] = {(sl_tokens_t *)&c->train, (sl_tokens_t *)&c->valid,
                                   (sl_tokens_t *)&c->test};
    const sl_vocab_t *v = c->vocab;
    int specials = level == SL_LEVEL_WORD ? 2 : 1, held_out = !pt->present[1] && c->valid.len;
    size_t n_train;
    sl_tokens_t full;
    long *seen;

    check_vocab(v, level, parts);
    check_vocab_growth(v);
    for (int k = 0; k < 3; k++) {
        if (pt->present[k] && ref_utf8_invalid_at(pt->text[k], pt->len[k]) != pt->len[k])
            broken("a text with invalid UTF-8 was loaded", part_name[k]);
        if (k > 0 && pt->present[k] &&
            parts[k]->len != ref_token_count(pt->text[k], pt->len[k], level == SL_LEVEL_CHAR))
            broken("tokens of a file not as many as counted", part_name[k]);
        if (k > 0 && !pt->present[k] && parts[k]->len && !(k == 1 && held_out))
            broken("tokens without a file", part_name[k]);
    }
    if (held_out && cfg->data.valid_fraction <= 0)
        broken("validation tokens held out without data.valid_fraction", "");
    if (cfg->data.vocab_size > 0 && v->size - specials > cfg->data.vocab_size)
        broken("vocabulary larger than data.vocab_size", "");
    if (sl_config_key_where(cfg, "data.vocab_size") && cfg->data.vocab_size > 0 &&
        v->size - specials != cfg->data.vocab_size)
        broken("vocabulary not the data.vocab_size that --set asked for", "");
    for (int id = 0; id + 1 < v->size; id++) {
        uint32_t la = v->len[id], lb = v->len[id + 1];
        int cmp = memcmp(v->text + v->off[id], v->text + v->off[id + 1], la < lb ? la : lb);
        if (v->count[id] < v->count[id + 1] ||
            (v->count[id] == v->count[id + 1] && (cmp > 0 || (cmp == 0 && la >= lb))))
            broken("ids not in order of descending count, ties in byte order", "");
    }
    /* train, then the held-out tail, are the training text's ids as sl_tokenize reads
     * it, as many as counted here */
    if (sl_tokenize(v, level, "train", (const char *)pt->text[0], pt->len[0], 1, &full) != SL_OK)
        broken("sl_tokenize fails on a loaded training text", sl_err_msg());
    if (held_out && full.len < c->valid.len)
        broken("more held-out validation tokens than training text", "");
    n_train = full.len - (held_out ? c->valid.len : 0);
    if (full.len != ref_token_count(pt->text[0], pt->len[0], level == SL_LEVEL_CHAR) ||
        c->train.len > n_train ||
        memcmp(full.ids, c->train.ids, c->train.len * sizeof(int32_t)) != 0 ||
        (held_out && memcmp(full.ids + n_train, c->valid.ids, c->valid.len * sizeof(int32_t)) != 0))
        broken("train ids differ from sl_tokenize's of the training text", "");
    if (c->train.len < n_train &&
        !(cfg->data.max_tokens > 0 && c->train.len == (size_t)cfg->data.max_tokens))
        broken("training tokens cut short other than at data.max_tokens", "");
    free(full.ids);
    if (cfg->data.max_tokens > 0 && c->train.len > (size_t)cfg->data.max_tokens)
        broken("more training tokens than data.max_tokens", "");
    /* counts are the occurrences in the training part (whole when not cut by max_tokens) */
    if (c->train.len == n_train) {
        seen = calloc((size_t)v->size, sizeof *seen);
        if (!seen)
            abort();
        for (size_t i = 0; i < c->train.len; i++)
            seen[c->train.ids[i]]++;
        for (int id = 0; id < v->size; id++)
            if (seen[id] != v->count[id])
                broken("a count is not the word's occurrences in the training text",
                       v->text + v->off[id]);
        free(seen);
    }
}

/* A damaged cache (one byte after the header flipped: mode 1 damages headers) is rebuilt: the
 * corpus loads the same, not from the cache, and the cache is whole again. */
static void
check_cache_damaged(const sl_corpus_t *c, const sl_config_t *cfg, const char *cached)
{
    sl_tokens_t *const pc[3] = {(sl_tokens_t *)&c->train, (sl_tokens_t *)&c->valid,
                                (sl_tokens_t *)&c->test};
    FILE *fp = fopen(cached, "r+b");
    long bytes, at;
    int ch;
    sl_corpus_t again;

    if (!fp || fseek(fp, 0, SEEK_END) != 0 || (bytes = ftell(fp)) <= CACHE_HEADER_BYTES)
        abort();
    at = CACHE_HEADER_BYTES + (long)(c->hash % (uint64_t)(bytes - CACHE_HEADER_BYTES));
    if (fseek(fp, at, SEEK_SET) != 0 || (ch = fgetc(fp)) == EOF || fseek(fp, at, SEEK_SET) != 0 ||
        fputc(ch ^ 0x01, fp) == EOF || fclose(fp) != 0)
        abort();
    if (sl_corpus_load(&again, cfg) != SL_OK)
        broken("a damaged token cache makes the corpus fail", sl_err_msg());
    if (again.from_cache)
        broken("a damaged token cache was used", "");
    {
        sl_tokens_t *const pa[3] = {&again.train, &again.valid, &again.test};
        check_same("the corpus rebuilt over a damaged cache differs", c->vocab, pc, again.vocab,
                   pa);
    }
    sl_corpus_fini(&again);
    if (sl_corpus_load(&again, cfg) != SL_OK || !again.from_cache)
        broken("the rebuilt token cache is not used", sl_err_msg());
    sl_corpus_fini(&again);
}

/* A cache built under a data.vocab_size that no one set (a default may keep fewer
 * words) serves the same number given with --set as a fresh build does: the same
 * corpus, or the same error. cfg gets the --set. */
static void
check_cache_explicit(sl_config_t *cfg, const char *cached)
{
    char set[64], msg[2048];
    sl_corpus_t a, b;
    sl_status_t sa, sb;

    if (sl_config_key_where(cfg, "data.vocab_size"))
        return;
    snprintf(set, sizeof set, "data.vocab_size=%d", cfg->data.vocab_size);
    if (sl_config_set(cfg, set) != SL_OK)
        broken("sl_config_set refused a vocab_size", sl_err_msg());
    sa = sl_corpus_load(&a, cfg);
    snprintf(msg, sizeof msg, "%s", sa == SL_OK ? "" : sl_err_msg());
    if (sa == SL_OK && !a.from_cache)
        broken("a load under --set data.vocab_size did not use the token cache", "");
    unlink(cached);
    sb = sl_corpus_load(&b, cfg);
    if (sa != sb || (sa != SL_OK && strcmp(msg, sl_err_msg()) != 0))
        broken("a token cache changes what --set data.vocab_size gives", msg);
    if (sa == SL_OK) {
        sl_tokens_t *const pa[3] = {&a.train, &a.valid, &a.test};
        sl_tokens_t *const pb[3] = {&b.train, &b.valid, &b.test};
        check_same("a token cache changes the corpus of a --set data.vocab_size", a.vocab, pa,
                   b.vocab, pb);
    }
    sl_corpus_fini(&a);
    sl_corpus_fini(&b);
}

/* The corpus through sl_token_cache_write and _read, and again through sl_corpus_load
 * from the cache that the first load wrote; then check_cache_explicit. */
static void
check_round_trips(const sl_corpus_t *c, sl_config_t *cfg)
{
    sl_tokens_t *const pc[3] = {(sl_tokens_t *)&c->train, (sl_tokens_t *)&c->valid,
                                (sl_tokens_t *)&c->test};
    const sl_tokens_t *const cpc[3] = {&c->train, &c->valid, &c->test};
    sl_tokens_t t[3];
    sl_tokens_t *const pt[3] = {&t[0], &t[1], &t[2]};
    sl_vocab_t *v = NULL;
    sl_corpus_t again;
    char cached[3200];
    sl_status_t st;

    if (sl_token_cache_write(rt_path, c->hash, cfg->data.level, c->vocab, cpc) != SL_OK)
        broken("sl_token_cache_write failed", sl_err_msg());
    sl_train_share_t all = {0, 1, 0, 0};

    if (sl_token_cache_read(rt_path, c->hash, cfg->data.level, &v, pt, &all) != SL_OK)
        broken("a written token cache does not read back", sl_err_msg());
    check_same("a written token cache reads back different", c->vocab, pc, v, pt);
    sl_vocab_destroy(&v);
    for (int k = 0; k < 3; k++)
        free(t[k].ids);
    unlink(rt_path);

    snprintf(cached, sizeof cached, "%s/%016llx.tokens", cache_path, (unsigned long long)c->hash);
    if (access(cached, F_OK) != 0)
        broken("sl_corpus_load wrote no token cache", cached);
    st = sl_corpus_load(&again, cfg);
    if (st != SL_OK)
        broken("the corpus does not load again from its token cache", sl_err_msg());
    if (!again.from_cache || again.hash != c->hash)
        broken("the second load did not use the token cache", "");
    {
        sl_tokens_t *const pa[3] = {&again.train, &again.valid, &again.test};
        check_same("the corpus reads back different from its token cache", c->vocab, pc,
                   again.vocab, pa);
    }
    sl_corpus_fini(&again);
    check_cache_damaged(c, cfg, cached);
    check_cache_explicit(cfg, cached);
    unlink(cached);
}

static void
fuzz_corpus(unsigned flags, const unsigned char *p, size_t n)
{
    unsigned b1 = n > 0 ? p[0] : 0, b2 = n > 1 ? p[1] : 0;
    sl_config_t cfg;
    sl_corpus_t c;
    parts_t pt;
    sl_status_t st;

    p += n > 2 ? 2 : n;
    n -= n > 2 ? 2 : n;
    split(p, n, (flags & F_EMPTY_NONE) != 0, &pt);
    sl_config_init(&cfg);
    set_str(&cfg.data.cache_dir, cache_path);
    for (int k = 0; k < 3; k++) {
        char **field = k == 0 ? &cfg.data.train : k == 1 ? &cfg.data.valid : &cfg.data.test;
        if (pt.present[k])
            write_file(part_path[k], pt.text[k], pt.len[k]);
        set_str(field, pt.present[k] ? part_path[k] : "");
    }
    cfg.data.level = flags & F_CHAR ? SL_LEVEL_CHAR : SL_LEVEL_WORD;
    switch (flags & F_VOCAB) {
    case V_ALL:
        cfg.data.vocab_size = 0;
        break;
    case V_DEFAULT:
        break;
    case V_FIELD:
        cfg.data.vocab_size = (int)b1;
        break;
    default: {
        char set[64];
        snprintf(set, sizeof set, "data.vocab_size=%u", b1);
        if (sl_config_set(&cfg, set) != SL_OK)
            broken("sl_config_set refused a vocab_size", sl_err_msg());
    }
    }
    cfg.data.valid_fraction = flags & F_FRACTION ? b2 / 256.0 : 0;
    cfg.data.max_tokens = flags & F_MAX ? (long)b2 : 0;

    st = sl_corpus_load(&c, &cfg);
    outcome("corpus", st, c.train.len, c.valid.len, c.test.len);
    if (st != SL_OK) {
        check_failure(st, &c, &cfg, &pt);
    } else {
        if (c.from_cache)
            broken("a first load came from a token cache", "");
        check_corpus(&c, &cfg, &pt);
        check_round_trips(&c, &cfg);
    }
    sl_corpus_fini(&c);
    sl_config_fini(&cfg);
    for (int k = 0; k < 3; k++)
        unlink(part_path[k]);
}

/* ---- mode 1: a token cache image ---- */

static uint64_t
get_u64(const unsigned char *p)
{
    uint64_t x;
    memcpy(&x, p, sizeof x);
    return x;
}

/* The cache at path read again as rank 1's share of 3 (a node's, sl_corpus_load_share):
 * of the training ids the slice the batcher gives rank 1 of whole, the rest the same. */
static void
check_share(const char *path, uint64_t hash, sl_level_t level, const sl_tokens_t *whole)
{
    sl_tokens_t t[3];
    sl_tokens_t *const pt[3] = {&t[0], &t[1], &t[2]};
    sl_train_share_t share = {1, 3, 0, 0};
    sl_vocab_t *v = NULL;
    size_t lo = sl_batcher_share_start(whole[0].len, 1, 3);
    size_t hi = sl_batcher_share_start(whole[0].len, 2, 3);

    if (sl_token_cache_read(path, hash, level, &v, pt, &share) != SL_OK)
        broken("a cache read whole does not read as a share", sl_err_msg());
    if (share.from != lo || share.all != whole[0].len || t[0].len != hi - lo ||
        (hi > lo && memcmp(t[0].ids, whole[0].ids + lo, (hi - lo) * 4) != 0))
        broken("a share read is not the batcher's slice of the whole", "");
    for (int k = 1; k < 3; k++)
        if (t[k].len != whole[k].len ||
            (t[k].len && memcmp(t[k].ids, whole[k].ids, t[k].len * 4) != 0))
            broken("a share read has other valid or test ids", "");
    sl_vocab_destroy(&v);
    for (int k = 0; k < 3; k++)
        free(t[k].ids);
}
static void
fuzz_cache(unsigned flags, const unsigned char *p, size_t n)
{
    sl_level_t level = flags & F_CHAR ? SL_LEVEL_CHAR : SL_LEVEL_WORD;
    unsigned char *img = malloc(n ? n : 1);
    uint64_t hash = n >= CACHE_HEADER_BYTES ? get_u64(p + CACHE_HASH_AT) : 0;
    sl_tokens_t t[3];
    sl_tokens_t *const pt[3] = {&t[0], &t[1], &t[2]};
    static sl_vocab_t dummy;
    sl_vocab_t *v = &dummy; /* not NULL: the reader must set it */
    sl_train_share_t all = {0, 1, 0, 0};
    sl_status_t st;

    if (!img)
        abort();
    memcpy(img, p, n);
    if ((flags & F_RESEAL) && n >= 8) {
        uint64_t sum = sl_hash_bytes(img, n - 8, CACHE_SUM_SEED);
        memcpy(img + n - 8, &sum, sizeof sum);
    }
    if (flags & F_OTHER_HASH)
        hash = ~hash;
    write_file(image_path, img, n);
    memset(t, 0x5a, sizeof t);
    st = sl_token_cache_read(image_path, hash, level, &v, pt, &all);
    outcome("cache", st, t[0].len, t[1].len, t[2].len);
    if (st != SL_OK) {
        const char *msg = sl_err_msg();
        char prefix[3200];
        snprintf(prefix, sizeof prefix, "%s: corrupt token cache (", image_path);
        if (st != SL_ERR_FORMAT)
            broken("a cache read failed with another status than SL_ERR_FORMAT", msg);
        if (!one_line(msg) || strncmp(msg, prefix, strlen(prefix)) != 0 ||
            msg[strlen(msg) - 1] != ')')
            broken("message not 'PATH: corrupt token cache (why)' on one line", msg);
        if (v)
            broken("a failed cache read left a vocabulary", msg);
        for (int k = 0; k < 3; k++)
            if (t[k].ids || t[k].len)
                broken("a failed cache read left ids", msg);
    } else {
        const sl_tokens_t *const cpt[3] = {&t[0], &t[1], &t[2]};
        unsigned char *back;
        size_t back_len;
        FILE *fp;

        if (flags & F_OTHER_HASH)
            broken("a cache was read under another hash than its own", "");
        check_vocab(v, level, pt);
        if (t[0].len == 0)
            broken("a cache was read without training tokens", "");
        if (all.from != 0 || all.all != t[0].len)
            broken("a whole read is not the whole training split", "");
        check_share(image_path, hash, level, t);
        if (sl_token_cache_write(rt_path, hash, level, v, cpt) != SL_OK)
            broken("sl_token_cache_write failed", sl_err_msg());
        fp = fopen(rt_path, "rb");
        back = malloc(n + 1);
        if (!fp || !back)
            abort();
        back_len = fread(back, 1, n + 1, fp);
        fclose(fp);
        if (back_len != n || memcmp(back, img, n) != 0)
            broken("a cache that was read is written back as other bytes", "");
        if (sl_hash_bytes(back, n - 8, CACHE_SUM_SEED) != get_u64(back + n - 8))
            broken("CACHE_SUM_SEED is not sl_token_cache.c's: resealing is wrong", "");
        free(back);
        sl_vocab_destroy(&v);
        for (int k = 0; k < 3; k++)
            free(t[k].ids);
        unlink(rt_path);
    }
    free(img);
    unlink(image_path);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned flags;

    setup();
    if (size == 0)
        return 0;
    flags = data[0];
    if (flags & F_CACHE)
        fuzz_cache(flags, data + 1, size - 1);
    else
        fuzz_corpus(flags, data + 1, size - 1);
    sl_err_clear();
    return 0;
}
