/* Payloads lent to ZeroMQ (SL_SEND_LEND): how many a link still has out, and the wait
 * until every one is back. ZeroMQ gives a payload back from its I/O thread, so the
 * count has a lock of its own; the links that lend (sl_link_zmq.c, and sl_link_emu.c
 * for the frames it holds before its base has them) share this one wait. */
#ifndef SL_LENT_H
#define SL_LENT_H

#include <pthread.h>
#include <stdint.h>

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t back; /* signalled when the count reaches 0 (CLOCK_MONOTONIC) */
    uint64_t out;        /* lent, not given back yet */
} sl_lent_t;

void sl_lent_init(sl_lent_t *l);
/* None may be out any more. */
void sl_lent_fini(sl_lent_t *l);
/* One more payload lent. */
void sl_lent_take(sl_lent_t *l);
/* One given back (any thread); wakes the waiters when it was the last. */
void sl_lent_give_back(sl_lent_t *l);
/* Waits up to timeout_ms (>= 0) until none is out; returns how many still are. */
uint64_t sl_lent_wait(sl_lent_t *l, int timeout_ms);

#endif
