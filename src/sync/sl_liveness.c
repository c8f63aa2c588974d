/* The liveness table (sl_liveness.h): who missed and who answered in this step, missed
 * rounds in a row, who is dead, and the warnings about it. Must not send, receive or
 * wait: it reads the transport's last-heard times and lost connections only. */
#include "sync/sl_liveness.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_clock.h"
#include "common/sl_log.h"
#include "sync/sl_sync.h"

struct sl_liveness {
    sl_transport_t *tr; /* borrowed */
    int size;
    int timeout_ms;
    int *missed;                        /* (size) sync steps missed in a row, per rank */
    unsigned char *dead, *told;         /* (size) taken for dead; reported missing */
    unsigned char *step_miss, *step_ok; /* (size) in this sync step: missed / answered */
    double *dead_at;     /* (size) sl_clock_now() when each dead rank was taken for dead */
    uint32_t *hellos_at; /* (size) its hellos (sl_transport_comebacks) by then */
    int ndead;
    double step_end; /* sl_clock_now() when the last step's tally was made (end_step) */
    /* (size) per rank, the change not taken yet: 'D' taken for dead after missed rounds,
     * 'C' taken for dead when its connection went, 'B' back, 0 none;
     * and the live count then. Guarded: with overlap the worker makes them and the
     * trainer takes them */
    pthread_mutex_t lock;
    unsigned char *change;
    int *live_then;
};

sl_status_t
sl_liveness_new(sl_liveness_t **out, sl_transport_t *tr, int size, int timeout_ms)
{
    sl_liveness_t *lv;
    sl_status_t st;

    *out = NULL;
    if (size < 1)
        return sl_err_set(SL_ERR_INVALID, "sync: liveness of %d nodes", size);
    SL_TRY(SL_CALLOC(&lv, 1, "sync peers"));
    lv->tr = tr;
    lv->size = size;
    lv->timeout_ms = timeout_ms;
    lv->step_end = sl_clock_now();
    SL_TRY_GOTO(SL_CALLOC(&lv->missed, (size_t)size, "sync peers"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&lv->dead, (size_t)size, "sync peers"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&lv->told, (size_t)size, "sync peers"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&lv->step_miss, (size_t)size, "sync peers"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&lv->step_ok, (size_t)size, "sync peers"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&lv->dead_at, (size_t)size, "sync peers"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&lv->hellos_at, (size_t)size, "sync peers"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&lv->change, (size_t)size, "sync peers"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&lv->live_then, (size_t)size, "sync peers"), st, fail);
    pthread_mutex_init(&lv->lock, NULL);
    /* a rank this node has no endpoint for (it came back and did not hear from it) is
     * dead until it is heard from */
    for (int r = 0; tr && r < size; r++)
        if (r != (int)sl_transport_rank(tr) && !sl_transport_knows(tr, (uint32_t)r)) {
            lv->dead[r] = 1;
            lv->ndead++;
        }
    *out = lv;
    return SL_OK;
fail:
    sl_liveness_destroy(&lv);
    return st;
}

void
sl_liveness_destroy(sl_liveness_t **lvp)
{
    sl_liveness_t *lv = lvp ? *lvp : NULL;

    if (!lv)
        return;
    sl_free(lv->missed);
    sl_free(lv->dead);
    sl_free(lv->told);
    sl_free(lv->step_miss);
    sl_free(lv->step_ok);
    sl_free(lv->dead_at);
    sl_free(lv->hellos_at);
    if (lv->change)
        pthread_mutex_destroy(&lv->lock);
    sl_free(lv->change);
    sl_free(lv->live_then);
    sl_free(lv);
    *lvp = NULL;
}

int
sl_liveness_is_dead(const sl_liveness_t *lv, int r)
{
    return r >= 0 && r < lv->size && lv->dead[r];
}

int
sl_liveness_ndead(const sl_liveness_t *lv)
{
    return lv->ndead;
}

/* A dead rank whose new process said hello since it was taken for dead: it gets this
 * node's pushes again (it needs them to catch up), but is not waited for until it is
 * heard from. */
static int
is_back(const sl_liveness_t *lv, int r)
{
    return lv->dead[r] && lv->tr && sl_transport_comebacks(lv->tr, (uint32_t)r) != lv->hellos_at[r];
}

size_t
sl_liveness_live(const sl_liveness_t *lv, const int *list, int n, uint32_t *out, size_t *nwait)
{
    size_t m = 0;

    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < n; i++) {
            int r = list[i], waited = !lv->dead[r] && !lv->step_miss[r];
            if (pass == 0 ? waited : !waited && (!lv->dead[r] || is_back(lv, r)))
                out[m++] = (uint32_t)r;
        }
        if (pass == 0)
            *nwait = m;
    }
    return m;
}

void
sl_liveness_tally(sl_liveness_t *lv, sl_liveness_role_t role, const uint32_t *peers, size_t n,
                  size_t nwait, const uint32_t *heard, size_t nheard, const char *name,
                  uint64_t round)
{
    for (size_t i = 0; i < n; i++) {
        int r = (int)peers[i], in = 0;

        for (size_t j = 0; j < nheard; j++)
            in |= heard[j] == peers[i];
        if (in) {
            lv->step_ok[r] = 1;
            continue;
        }
        if (i >= nwait)
            continue;
        lv->step_miss[r] = 1;
        if (lv->told[r])
            continue;
        lv->told[r] = 1;
        if (role == SL_LIVENESS_CHOSEN)
            sl_log_warn("sync",
                        "node %d did not answer within %d ms (%s, round %" PRIu64
                        "): averaging without it",
                        r, lv->timeout_ms, name, round);
        else
            sl_log_warn("sync",
                        "node %d did not ask for its rows within %d ms (%s, round %" PRIu64
                        "): going on without it",
                        r, lv->timeout_ms, name, round);
    }
}

/* Keeps rank r's change (what: 'D', 'C' or 'B') for sl_liveness_next_event. */
static void
note_change(sl_liveness_t *lv, int r, unsigned char what)
{
    pthread_mutex_lock(&lv->lock);
    lv->change[r] = what;
    lv->live_then[r] = lv->size - lv->ndead;
    pthread_mutex_unlock(&lv->lock);
}

int
sl_liveness_next_event(sl_liveness_t *lv, sl_members_event_t *ev)
{
    int found = 0;

    pthread_mutex_lock(&lv->lock);
    for (int r = 0; r < lv->size && !found; r++) {
        if (!lv->change[r])
            continue;
        found = 1;
        memset(ev, 0, sizeof *ev);
        ev->rank = r;
        ev->members = lv->live_then[r];
        ev->joined = lv->change[r] == 'B';
        if (ev->joined)
            snprintf(ev->why, sizeof ev->why, "it answered a current round; averaged with again");
        else if (lv->change[r] == 'C')
            snprintf(ev->why, sizeof ev->why,
                     "its connection closed (the process is gone): taken for dead, left out "
                     "from now on and from the final model");
        else
            snprintf(ev->why, sizeof ev->why,
                     "missed %d rounds in a row: taken for dead, left out from now on and from "
                     "the final model",
                     SL_SYNC_DEAD_ROUNDS);
        lv->change[r] = 0;
    }
    pthread_mutex_unlock(&lv->lock);
    return found;
}

/* Takes rank r for dead now; what says why ('D' or 'C'). */
static void
take_dead(sl_liveness_t *lv, int r, unsigned char what)
{
    lv->dead[r] = 1;
    lv->dead_at[r] = sl_clock_now();
    lv->hellos_at[r] = sl_transport_comebacks(lv->tr, (uint32_t)r);
    lv->ndead++;
    note_change(lv, r, what);
}

/* Counted per step, not per component, so that a step with many components counts
 * once. Late is not dead: a peer that missed but was heard from during the step (its
 * frame of an earlier round came after the wait for it) is alive, and its count starts
 * again. Without that, a node delayed by its own wait for a dead neighbour looks dead
 * to the nodes waiting for it, and they to theirs. A peer whose connection went since
 * it was last heard is dead at once, before anyone waits for it: a killed process
 * costs its neighbours no timeout (a stopped one still costs SL_SYNC_DEAD_ROUNDS). */
void
sl_liveness_end_step(sl_liveness_t *lv)
{
    sl_transport_watch(lv->tr);
    for (int r = 0; r < lv->size; r++) {
        double heard = sl_transport_last_heard(lv->tr, (uint32_t)r);

        if (lv->dead[r] && heard > lv->dead_at[r]) {
            lv->dead[r] = 0;
            lv->ndead--;
            lv->missed[r] = lv->told[r] = 0;
            note_change(lv, r, 'B');
        }
        if (lv->step_ok[r] || (lv->step_miss[r] && heard > lv->step_end))
            lv->missed[r] = 0;
        else if (lv->step_miss[r])
            lv->missed[r]++;
        lv->step_ok[r] = lv->step_miss[r] = 0;
        if (!lv->dead[r] && lv->missed[r] >= SL_SYNC_DEAD_ROUNDS)
            take_dead(lv, r, 'D');
        else if (!lv->dead[r] && sl_transport_gone(lv->tr, (uint32_t)r))
            take_dead(lv, r, 'C');
    }
    lv->step_end = sl_clock_now();
}
