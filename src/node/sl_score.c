/* Scoring text: a token array in evaluation's windows, or line by line (sl_score.h).
 * The window loop is the trainer's evaluation loop, call for call, so the sums are
 * the same bits. */
#include "node/sl_score.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_alloc.h"

sl_status_t
sl_score_tokens(sl_lm_t *lm, const sl_tokens_t *tokens, int unk, int bptt, int max_streams,
                const char *name, sl_score_t *out)
{
    sl_lm_state_t *st = NULL;
    sl_batcher_t bt;
    int32_t *x = NULL, *y = NULL;
    int B = max_streams, T = bptt;
    double sum = 0;
    sl_status_t rc;

    memset(out, 0, sizeof *out);
    out->loss = NAN;
    out->tokens = (long)tokens->len;
    for (size_t i = 0; i < tokens->len; i++)
        out->unk += tokens->ids[i] == unk;
    if (tokens->len < 2)
        return sl_err_set(SL_ERR_INVALID, "%s: too short to score (%zu token%s)", name, tokens->len,
                          tokens->len == 1 ? "" : "s");
    while (B > 1 && tokens->len < (size_t)B * ((size_t)T + 1))
        B--;
    if (tokens->len < (size_t)T + 1)
        T = (int)tokens->len - 1;
    SL_TRY(sl_batcher_init(&bt, tokens, 0, 1, B, T));
    SL_TRY_GOTO(sl_lm_state_new(lm, B, &st), rc, out);
    SL_TRY_GOTO(SL_ALLOC(&x, (size_t)B * (size_t)T, "score inputs"), rc, out);
    SL_TRY_GOTO(SL_ALLOC(&y, (size_t)B * (size_t)T, "score targets"), rc, out);
    sl_lm_state_reset(st);
    for (long i = 0; i < bt.batches_per_epoch; i++) {
        double s;
        sl_batcher_get(&bt, i, x, y);
        SL_TRY_GOTO(sl_lm_eval_batch(lm, st, x, y, T, &s), rc, out);
        sum += s;
    }
    out->scored = bt.batches_per_epoch * (long)B * T;
    out->loss = out->scored > 0 ? sum / (double)out->scored : NAN;
    out->streams = B;
    out->bptt = T;
    rc = SL_OK;
out:
    sl_free(x);
    sl_free(y);
    sl_lm_state_destroy(&st);
    return rc;
}

int
sl_score_line_start(const sl_vocab_t *v, sl_level_t level)
{
    return level == SL_LEVEL_WORD ? sl_vocab_eos(v) : sl_vocab_id(v, "\n", 1);
}

/* The summed loss of tokens read after the start token, from a fresh state, in windows
 * of up to bptt (x and y hold bptt ids). */
static sl_status_t
score_line(sl_lm_t *lm, sl_lm_state_t *st, const sl_tokens_t *tok, int start, int bptt, int32_t *x,
           int32_t *y, double *sum)
{
    size_t done = 0;

    *sum = 0;
    sl_lm_state_reset(st);
    while (done < tok->len) {
        int n = tok->len - done < (size_t)bptt ? (int)(tok->len - done) : bptt;
        double s;
        for (int t = 0; t < n; t++) {
            x[t] = done + t == 0 ? start : tok->ids[done + t - 1];
            y[t] = tok->ids[done + t];
        }
        SL_TRY(sl_lm_eval_batch(lm, st, x, y, n, &s));
        *sum += s;
        done += (size_t)n;
    }
    return SL_OK;
}

/* The length of the line at text (len bytes left), its newline included. */
static size_t
line_bytes(const char *text, size_t len)
{
    const char *nl = memchr(text, '\n', len);

    return nl ? (size_t)(nl - text) + 1 : len;
}

/* Line number line of text (n bytes at text) tokenized; name:LINE in its errors. */
static sl_status_t
tokenize_line(const sl_vocab_t *v, sl_level_t level, const char *name, long line, const char *text,
              size_t n, sl_tokens_t *tok)
{
    char where[1100];

    snprintf(where, sizeof where, "%s:%ld", name, line);
    return sl_tokenize(v, level, where, text, n, 1, tok);
}

sl_status_t
sl_score_lines(sl_lm_t *lm, const sl_vocab_t *v, sl_level_t level, const char *name,
               const char *text, size_t len, int bptt, sl_score_line_fn fn, void *ctx)
{
    sl_lm_state_t *st = NULL;
    int32_t *x = NULL, *y = NULL;
    int start = sl_score_line_start(v, level);
    size_t at = 0;
    long line = 0;
    sl_status_t rc;

    /* every line reads before the first is reported: a bad one fails the text whole */
    for (size_t n; at < len; at += n) {
        sl_tokens_t tok;

        n = line_bytes(text + at, len - at);
        SL_TRY(tokenize_line(v, level, name, ++line, text + at, n, &tok));
        free(tok.ids);
    }
    at = 0;
    line = 0;
    SL_TRY_GOTO(sl_lm_state_new(lm, 1, &st), rc, out);
    SL_TRY_GOTO(SL_ALLOC(&x, (size_t)bptt, "score inputs"), rc, out);
    SL_TRY_GOTO(SL_ALLOC(&y, (size_t)bptt, "score targets"), rc, out);
    while (at < len) {
        size_t n = line_bytes(text + at, len - at);
        sl_tokens_t tok;
        double sum;

        SL_TRY_GOTO(tokenize_line(v, level, name, ++line, text + at, n, &tok), rc, out);
        rc = score_line(lm, st, &tok, start, bptt, x, y, &sum);
        if (rc == SL_OK)
            rc = fn(ctx, line, (long)tok.len, sum);
        free(tok.ids);
        if (rc != SL_OK)
            goto out;
        at += n;
    }
    rc = SL_OK;
out:
    sl_free(x);
    sl_free(y);
    sl_lm_state_destroy(&st);
    return rc;
}
