/* Tokenization: the tokens of a text held in memory (sl_tokenize, for valid and test
 * files, prompts and scored text) and of a file read a piece at a time
 * (sl_tokenize_stream, for a training text that need never be held whole), the two
 * walking the same tokens. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/sl_data_internal.h"

/* Walks a validated buffer token by token. Word level: runs of bytes other than
 * space, tab, CR and newline, and an <eos> (len 0) at every newline and after a last
 * line that has none. Character level: one UTF-8 sequence per token. */
typedef struct {
    const char *buf;
    size_t len, pos;
    sl_level_t level;
    int tail_eos_done;
} tok_iter_t;

static int
is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* 1 with the next token in (*tok, *n), n == 0 for <eos>; 0 at the end. */
static int
next_token(tok_iter_t *it, const char **tok, size_t *n)
{
    const char *b = it->buf;

    if (it->level == SL_LEVEL_CHAR) {
        if (it->pos >= it->len)
            return 0;
        *tok = b + it->pos;
        *n = sl_utf8_seq_bytes((unsigned char)b[it->pos]);
        it->pos += *n;
        return 1;
    }
    while (it->pos < it->len && is_space(b[it->pos]))
        it->pos++;
    if (it->pos < it->len) {
        size_t start = it->pos;
        if (b[start] == '\n') {
            it->pos++;
            *n = 0;
            return 1;
        }
        while (it->pos < it->len && b[it->pos] != '\n' && !is_space(b[it->pos]))
            it->pos++;
        *tok = b + start;
        *n = it->pos - start;
        return 1;
    }
    if (it->len > 0 && b[it->len - 1] != '\n' && !it->tail_eos_done) {
        it->tail_eos_done = 1;
        *n = 0;
        return 1;
    }
    return 0;
}

sl_status_t
sl_idbuf_push(sl_idbuf_t *b, int32_t id, const char *name)
{
    if (b->len == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        int32_t *ids = realloc(b->ids, cap * sizeof *ids);
        if (!ids)
            return sl_err_set(SL_ERR_NOMEM, "%s: out of memory at %zu tokens", name, b->len);
        b->ids = ids;
        b->cap = cap;
    }
    b->ids[b->len++] = id;
    return SL_OK;
}

void
sl_idbuf_take(sl_idbuf_t *b, size_t n, sl_tokens_t *tokens)
{
    if (n == 0) {
        free(b->ids);
        tokens->ids = NULL;
    } else {
        int32_t *ids = realloc(b->ids, n * sizeof *ids);
        tokens->ids = ids ? ids : b->ids; /* a failed shrink keeps the larger block */
    }
    tokens->len = n;
    memset(b, 0, sizeof *b);
}

sl_status_t
sl_tokenize(const sl_vocab_t *v, sl_level_t level, const char *name, const char *text, size_t len,
            int line_end, sl_tokens_t *out)
{
    tok_iter_t it = {text, len, 0, level, !line_end};
    sl_idbuf_t b = {0};
    const char *tok = NULL;
    size_t n, bad = sl_utf8_invalid_at((const unsigned char *)text, len);

    memset(out, 0, sizeof *out);
    if (bad < len)
        return sl_err_set(SL_ERR_FORMAT, "%s: invalid UTF-8 at byte %zu", name, bad);
    while (next_token(&it, &tok, &n)) {
        int32_t id = n == 0 ? v->eos : sl_vocab_find(v, tok, n);
        sl_status_t st = sl_idbuf_push(&b, id >= 0 ? id : v->unk, name);
        if (st != SL_OK) {
            free(b.ids);
            return st;
        }
    }
    sl_idbuf_take(&b, b.len, out);
    return SL_OK;
}

/* How much of buf's len bytes (valid UTF-8; more may follow unless at_end) holds
 * whole tokens: at word level up to the last space or newline, which no token
 * crosses, looked for after from (the bytes before it have none); at character level
 * all of it, a sequence cut by the read being left out of the validated part already. */
static size_t
whole_tokens(const char *buf, size_t from, size_t len, sl_level_t level, int at_end)
{
    if (at_end || level == SL_LEVEL_CHAR)
        return len;
    for (size_t cut = len; cut > from; cut--)
        if (buf[cut - 1] == '\n' || is_space(buf[cut - 1]))
            return cut;
    return 0;
}

/* fn of every token of buf's len bytes but a last line's <eos> (the caller's: only
 * the file's end knows it). */
static sl_status_t
emit_tokens(const char *buf, size_t len, sl_level_t level, sl_token_fn fn, void *ctx)
{
    tok_iter_t it = {buf, len, 0, level, 1};
    const char *tok = NULL;
    size_t n;

    while (next_token(&it, &tok, &n))
        SL_TRY(fn(ctx, n ? tok : NULL, n));
    return SL_OK;
}

/* The buffer holds the bytes not yet tokenized (a word cut by the last read, a UTF-8
 * sequence cut by it) and then one more read: it grows only for a longer word. Of
 * those kept, the first `done` are valid UTF-8 without a space or newline, so that a
 * long word is not validated and searched again at every read. */
sl_status_t
sl_tokenize_stream(FILE *fp, const char *name, sl_level_t level, size_t chunk, sl_token_fn fn,
                   void *ctx, sl_hash_t *h, uint64_t *bytes)
{
    char *buf = NULL, last = '\n';
    size_t cap = 0, keep = 0, done = 0, got;
    uint64_t base = 0; /* file offset of buf[0] */
    int at_end = 0;
    sl_status_t st = SL_OK;

    *bytes = 0;
    while (!at_end) {
        size_t len, valid, cut, bad;
        if (keep + chunk > cap) {
            size_t want = keep + chunk > 2 * cap ? keep + chunk : 2 * cap;
            char *b = realloc(buf, want);
            if (!b) {
                st = sl_err_set(SL_ERR_NOMEM, "%s: out of memory for a word of %zu bytes", name,
                                keep);
                goto out;
            }
            buf = b;
            cap = want;
        }
        got = fread(buf + keep, 1, chunk, fp);
        if (got < chunk) {
            if (ferror(fp)) {
                st = sl_err_set(SL_ERR_IO, "%s: read error: %s", name, strerror(errno));
                goto out;
            }
            at_end = 1;
        }
        if (h)
            sl_hash_update(h, buf + keep, got);
        if (got)
            last = buf[keep + got - 1];
        *bytes += got;
        len = keep + got;
        valid = bad = done + sl_utf8_invalid_at((const unsigned char *)buf + done, len - done);
        /* an invalid sequence in the last 3 bytes may be one the read cut short */
        if (bad < len && (at_end || len - bad > 3)) {
            st = sl_err_set(SL_ERR_FORMAT, "%s: invalid UTF-8 at byte %llu", name,
                            (unsigned long long)(base + bad));
            goto out;
        }
        cut = whole_tokens(buf, done, valid, level, at_end);
        SL_TRY_GOTO(emit_tokens(buf, cut, level, fn, ctx), st, out);
        memmove(buf, buf + cut, len - cut);
        keep = len - cut;
        done = valid - cut;
        base += cut;
    }
    if (level == SL_LEVEL_WORD && last != '\n')
        st = fn(ctx, NULL, 0);
out:
    free(buf);
    return st;
}
