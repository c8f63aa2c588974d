/* Generation: prompt, then one token at a time (sl_generate.h). */
#include "node/sl_generate.h"

#include <stdlib.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_rng.h"
#include "node/sl_score.h"

/* The text of id as written after the text so far: a word gets a space before it
 * unless a line starts there; <eos> is a newline. */
static sl_status_t
emit(const sl_vocab_t *v, sl_level_t level, int id, int *line_start, sl_generate_fn fn, void *ctx)
{
    const char *w = sl_vocab_word(v, id);
    char buf[1024];
    size_t n = strlen(w);

    if (level == SL_LEVEL_CHAR)
        return fn(ctx, id, w, n);
    if (id == sl_vocab_eos(v)) {
        *line_start = 1;
        return fn(ctx, id, "\n", 1);
    }
    if (*line_start || n + 1 >= sizeof buf) {
        *line_start = 0;
        return fn(ctx, id, w, n);
    }
    buf[0] = ' ';
    memcpy(buf + 1, w, n);
    return fn(ctx, id, buf, n + 1);
}

sl_status_t
sl_generate(sl_lm_t *lm, const sl_vocab_t *v, sl_level_t level, const sl_generate_opts_t *o,
            sl_generate_fn fn, void *ctx)
{
    const char *prompt = o->prompt ? o->prompt : "";
    size_t plen = strlen(prompt);
    uint64_t words[2] = {o->seed, 'G'};
    sl_tokens_t tok = {0};
    sl_lm_state_t *st = NULL;
    sl_picker_t pk = {0};
    float *logits = NULL;
    sl_rng_t rng;
    int32_t x;
    int line_start;
    sl_status_t rc;

    SL_TRY(sl_pick_opts_check(&o->pick));
    SL_TRY(sl_tokenize(v, level, "prompt", prompt, plen, 0, &tok));
    SL_TRY_GOTO(sl_lm_state_new(lm, 1, &st), rc, out);
    SL_TRY_GOTO(sl_picker_init(&pk, sl_vocab_size(v)), rc, out);
    SL_TRY_GOTO(SL_ALLOC(&logits, (size_t)sl_vocab_size(v), "logits"), rc, out);
    sl_rng_init(&rng, sl_hash_u64s(words, 2));
    /* a line starts where the prompt ends with a newline, or where there is none */
    line_start = plen == 0 || prompt[plen - 1] == '\n';
    x = sl_score_line_start(v, level);
    if (plen > 0) /* only a prompt that reads is written */
        SL_TRY_GOTO(fn(ctx, -1, prompt, plen), rc, out);
    for (size_t i = 0; i < tok.len; i++) {
        SL_TRY_GOTO(sl_lm_next_logits(lm, st, &x, logits), rc, out);
        x = tok.ids[i];
    }
    for (long i = 0; i < o->tokens; i++) {
        SL_TRY_GOTO(sl_lm_next_logits(lm, st, &x, logits), rc, out);
        x = sl_picker_pick(&pk, logits, &o->pick, &rng);
        SL_TRY_GOTO(emit(v, level, x, &line_start, fn, ctx), rc, out);
    }
    rc = SL_OK;
out:
    free(tok.ids);
    sl_free(logits);
    sl_picker_fini(&pk);
    sl_lm_state_destroy(&st);
    return rc;
}
