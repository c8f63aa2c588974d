/* Scoring text with a model: the mean loss of a token array as training evaluates a
 * split, and the loss of each line on its own.
 *
 * A whole text is cut as evaluation cuts the valid and test splits: into B = 10
 * parallel streams of equal length read T = bptt tokens at a time, the hidden state
 * carried along each stream, the first token of a stream only read and the tail that
 * fills no window left out (fewer streams, then shorter windows, for a text too short
 * for 10 x (T + 1) tokens). So a model scored on its training run's test file gives
 * that run's test loss to the last bit. A line is scored from a fresh state that has
 * read only the line-start token (sl_score_line_start), so that every token of the
 * line, its <eos> or newline included, is predicted. */
#ifndef SL_SCORE_H
#define SL_SCORE_H

#include <stddef.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "data/sl_data.h"
#include "model/sl_model.h"

typedef struct {
    double loss;       /* nats per scored token, full softmax */
    long scored;       /* tokens predicted */
    long tokens;       /* tokens of the text */
    long unk;          /* of them <unk> */
    int streams, bptt; /* the windows used */
} sl_score_t;

/* Scores tokens (borrowed; its <unk> id is unk) with lm in windows of up to bptt steps
 * and up to max_streams streams (at most what lm was built for). SL_ERR_INVALID "name:
 * too short to score (N tokens)" for fewer than 2 tokens; lm's errors. */
sl_status_t sl_score_tokens(sl_lm_t *lm, const sl_tokens_t *tokens, int unk, int bptt,
                            int max_streams, const char *name, sl_score_t *out);

/* The token a line is read after: <eos> at word level, the newline character (else
 * <unk>) at character level. */
int sl_score_line_start(const sl_vocab_t *v, sl_level_t level);

/* Called for each line (1-based number, tokens scored, their summed loss in nats). */
typedef sl_status_t (*sl_score_line_fn)(void *ctx, long line, long tokens, double loss_sum);

/* Scores each line of text (len bytes; name in messages, "name:LINE: ..." for a line's
 * bad UTF-8, found before fn is first called) on its own, windows of up to bptt steps,
 * and calls fn after each. A last
 * line without a newline is a line; nothing after a final newline is. fn's status
 * other than SL_OK stops it and is returned. */
sl_status_t sl_score_lines(sl_lm_t *lm, const sl_vocab_t *v, sl_level_t level, const char *name,
                           const char *text, size_t len, int bptt, sl_score_line_fn fn, void *ctx);

#endif
