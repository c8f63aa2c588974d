/* Choosing the next token from a model's logits, for generation: greedy (temperature
 * 0) or a draw from softmax(logits / temperature) restricted to the top_k most likely
 * tokens, then to the fewest most likely of those whose probability (renormalised over
 * them) reaches top_p. Ties in likelihood go to the lower id, so the allowed set and
 * the greedy choice are well defined. The draw takes one number from a counter RNG
 * (common/sl_rng.h): the same stream gives the same tokens. */
#ifndef SL_TOKEN_PICK_H
#define SL_TOKEN_PICK_H

#include "common/sl_rng.h"
#include "common/sl_status.h"

typedef struct {
    double temperature; /* >= 0; 0: the most likely token */
    int top_k;          /* >= 0; 0: no limit */
    double top_p;       /* (0, 1]; 1: no limit */
} sl_pick_opts_t;

/* Work space for a vocabulary of V tokens: allocated once, so picking allocates
 * nothing. */
typedef struct {
    int V;
    int *order;   /* (V) ids by decreasing logit */
    float *logit; /* (V) a copy being sorted */
    double *prob; /* (V) probabilities in that order */
} sl_picker_t;

/* temperature 1, no top-k or top-p limit. */
void sl_pick_opts_init(sl_pick_opts_t *o);
/* SL_ERR_INVALID with a message naming the option when o is out of range. */
sl_status_t sl_pick_opts_check(const sl_pick_opts_t *o);

sl_status_t sl_picker_init(sl_picker_t *p, int V);
void sl_picker_fini(sl_picker_t *p);

/* The tokens a draw may return for logits (V floats, finite), most likely first: their
 * count, the ids in p->order[0..count) and their renormalised probabilities in
 * p->prob[0..count) (at temperature 0: the most likely token alone, probability 1). */
int sl_picker_allowed(sl_picker_t *p, const float *logits, const sl_pick_opts_t *o);
/* One token for logits: the allowed set's, drawn with one number of rng. */
int sl_picker_pick(sl_picker_t *p, const float *logits, const sl_pick_opts_t *o, sl_rng_t *rng);

#endif
