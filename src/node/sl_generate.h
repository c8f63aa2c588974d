/* Text generation with a model: the state reads the line-start token and the prompt,
 * then each new token is chosen from the logits (model/sl_token_pick.h) and read in
 * turn. Word level: tokens are written separated by spaces, <eos> as a newline;
 * character level: as they are. The draws come from a counter RNG keyed by the seed,
 * so the same model, prompt, options and seed give the same text. */
#ifndef SL_GENERATE_H
#define SL_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "data/sl_data.h"
#include "model/sl_model.h"
#include "model/sl_token_pick.h"

typedef struct {
    const char *prompt; /* UTF-8 text the model reads first, handed to the callback
                           whole (id -1) once it tokenizes; "" or NULL: none */
    long tokens;        /* tokens to generate */
    sl_pick_opts_t pick;
    uint64_t seed;
} sl_generate_opts_t;

/* Called with the prompt (id -1), then with each generated token: its id and its text
 * (bytes, as written). A status other than SL_OK stops generation and is returned. */
typedef sl_status_t (*sl_generate_fn)(void *ctx, int id, const char *text, size_t len);

/* Generates o->tokens tokens with lm (one stream) over vocabulary v at level. Errors:
 * SL_ERR_FORMAT "prompt: invalid UTF-8 at byte N", sl_pick_opts_check's, lm's. */
sl_status_t sl_generate(sl_lm_t *lm, const sl_vocab_t *v, sl_level_t level,
                        const sl_generate_opts_t *o, sl_generate_fn fn, void *ctx);

#endif
