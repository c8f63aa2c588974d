/* Choosing the checkpoint generation to resume from, and the nodes' agreement on a
 * common step (sl_resume.h). */
#define _POSIX_C_SOURCE 200809L
#include "node/sl_resume.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/sl_alloc.h"
#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "transport/sl_collective.h"

#define OFFER_WORDS 4                      /* u64 resume, count, step[2] */
#define OFFER_FLOATS (OFFER_WORDS * 8 / 4) /* as the allgather counts them */

/* One generation: SL_OK and its step, 1 in *missing when there is no file, or the
 * check's error with *damaged. */
static sl_status_t
check_one(const char *path, const sl_ckpt_ident_t *id, const sl_lm_t *lm, const sl_optim_t *opt,
          const sl_lm_state_t *st, const sl_sync_t *sync, long *step, int *missing, int *damaged)
{
    sl_ckpt_cursor_t cur;
    sl_status_t rc;

    *missing = access(path, F_OK) != 0 && errno == ENOENT;
    *damaged = 0;
    if (*missing)
        return SL_OK;
    rc = sl_checkpoint_check(path, id, lm, opt, st, sync, &cur, damaged);
    if (rc == SL_OK)
        *step = cur.step;
    return rc;
}

/* Adds generation (path, step) to offer, keeping the steps highest first. */
static void
offer_add(sl_resume_offer_t *offer, const char *path, long step)
{
    int i = offer->steps.count++;

    for (; i > 0 && offer->steps.step[i - 1] < step; i--) {
        offer->steps.step[i] = offer->steps.step[i - 1];
        memcpy(offer->path[i], offer->path[i - 1], sizeof offer->path[i]);
    }
    offer->steps.step[i] = step;
    snprintf(offer->path[i], sizeof offer->path[i], "%s", path);
}

sl_status_t
sl_resume_scan(const char *path, const sl_ckpt_ident_t *id, const sl_lm_t *lm,
               const sl_optim_t *opt, const sl_lm_state_t *st, const sl_sync_t *sync,
               sl_resume_offer_t *offer)
{
    char paths[SL_RESUME_GENERATIONS][SL_CKPT_PATH_MAX];
    char why[SL_RESUME_GENERATIONS][1024];
    int missing[SL_RESUME_GENERATIONS], damaged[SL_RESUME_GENERATIONS], nbad = 0;
    sl_status_t rc[SL_RESUME_GENERATIONS];

    memset(offer, 0, sizeof *offer);
    offer->steps.resume = 1;
    snprintf(paths[0], sizeof paths[0], "%s", path);
    SL_TRY(sl_checkpoint_prev_path(path, paths[1], sizeof paths[1]));
    for (int g = 0; g < SL_RESUME_GENERATIONS; g++) {
        long step = 0;
        rc[g] = check_one(paths[g], id, lm, opt, st, sync, &step, &missing[g], &damaged[g]);
        why[g][0] = '\0';
        if (rc[g] == SL_OK && !missing[g]) {
            offer_add(offer, paths[g], step);
            continue;
        }
        if (rc[g] == SL_OK)
            continue;
        if (g == 0 && !damaged[g])
            return rc[g]; /* a sound file that does not fit this run: none will */
        snprintf(why[g], sizeof why[g], "%s", sl_err_msg());
        nbad++;
    }
    if (offer->steps.count == 0 && nbad > 0) {
        int only = why[0][0] ? 0 : 1;
        if (nbad == 1)
            return sl_err_set(rc[only], "%s", why[only]);
        return sl_err_set(rc[0], "%s; %s", why[0], why[1]);
    }
    if (why[0][0])
        sl_log_warn("train", "%s; resuming from the previous checkpoint %s", why[0],
                    offer->path[0]);
    if (why[1][0])
        sl_log_warn("train", "%s; this previous checkpoint is left unused", why[1]);
    if (missing[0] && offer->steps.count > 0)
        sl_log_warn("train", "%s is missing (a save was interrupted); resuming from %s", paths[0],
                    offer->path[0]);
    return SL_OK;
}

int
sl_resume_holds(const sl_resume_steps_t *o, long step)
{
    if (!o->resume)
        return 0;
    for (int i = 0; i < o->count; i++)
        if (o->step[i] == step)
            return 1;
    return 0;
}

static int
same_offer(const sl_resume_steps_t *a, const sl_resume_steps_t *b)
{
    if (a->resume != b->resume || a->count != b->count)
        return 0;
    for (int i = 0; i < a->count; i++)
        if (a->step[i] != b->step[i])
            return 0;
    return 1;
}

/* Appends to buf (size bytes, NUL-terminated) as snprintf; a full buffer stays full. */
static void append(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
append(char *buf, size_t size, const char *fmt, ...)
{
    size_t len = strlen(buf);
    va_list ap;

    if (len + 1 >= size)
        return;
    va_start(ap, fmt);
    vsnprintf(buf + len, size - len, fmt, ap);
    va_end(ap);
}

/* "node 0 has steps 200,100", "nodes 1-2 have step 300", "node 3 has none", "node 4
 * starts over (--no-resume)" for nodes first .. last, which offer o. */
static void
describe(char *buf, size_t size, int first, int last, const sl_resume_steps_t *o)
{
    int many = last > first;

    if (many)
        append(buf, size, "nodes %d-%d ", first, last);
    else
        append(buf, size, "node %d ", first);
    if (!o->resume) {
        append(buf, size, "%s over (--no-resume)", many ? "start" : "starts");
        return;
    }
    if (o->count == 0) {
        append(buf, size, "%s none", many ? "have" : "has");
        return;
    }
    append(buf, size, "%s step%s ", many ? "have" : "has", o->count > 1 ? "s" : "");
    for (int i = 0; i < o->count; i++)
        append(buf, size, "%s%ld", i ? "," : "", o->step[i]);
}

/* Every node's offer into buf, "node 0 has steps 200,100; nodes 1-2 have step 300",
 * consecutive equal offers together. */
static void
describe_all(char *buf, size_t size, const sl_resume_steps_t *all, int n)
{
    for (int k = 0; k < n;) {
        int last = k;
        while (last + 1 < n && same_offer(&all[last + 1], &all[k]))
            last++;
        if (k > 0)
            append(buf, size, "; ");
        describe(buf, size, k, last, &all[k]);
        k = last + 1;
    }
}

/* No step common to all, every node resuming: the newest step any node offers, from
 * the lowest-ranked node that holds it to the others (sl_resume.h). */
static void
plan_take(const sl_resume_steps_t *all, int size, sl_resume_plan_t *plan)
{
    int ntake = 0, first = 1;

    for (int k = 0; k < size; k++)
        for (int i = 0; i < all[k].count; i++)
            if (all[k].step[i] > plan->step)
                plan->step = all[k].step[i];
    for (int k = size - 1; k >= 0; k--) {
        if (sl_resume_holds(&all[k], plan->step))
            plan->donor = k;
        else
            ntake++;
    }
    snprintf(plan->note, sizeof plan->note, "resume: no common checkpoint (");
    describe_all(plan->note, sizeof plan->note, all, size);
    append(plan->note, sizeof plan->note, "): node%s ", ntake > 1 ? "s" : "");
    for (int k = 0; k < size;) { /* the takers, runs of consecutive ranks as "2-4" */
        int last = k;
        if (sl_resume_holds(&all[k], plan->step)) {
            k++;
            continue;
        }
        while (last + 1 < size && !sl_resume_holds(&all[last + 1], plan->step))
            last++;
        append(plan->note, sizeof plan->note, first ? "%d" : ",%d", k);
        if (last > k)
            append(plan->note, sizeof plan->note, "-%d", last);
        first = 0;
        k = last + 1;
    }
    append(plan->note, sizeof plan->note,
           " take%s step %ld from node %d (parameters and sync state), as %s that come%s "
           "back do%s",
           ntake > 1 ? "" : "s", plan->step, plan->donor, ntake > 1 ? "nodes" : "a node",
           ntake > 1 ? "" : "s", ntake > 1 ? "" : "es");
}

sl_status_t
sl_resume_choose(const sl_resume_steps_t *all, int size, sl_resume_plan_t *plan)
{
    char msg[1024] = "resume: no common checkpoint: ";
    int any = 0, off = 0;

    memset(plan, 0, sizeof *plan);
    plan->step = -1;
    plan->donor = -1;
    for (int k = 0; k < size; k++) {
        any |= all[k].resume && all[k].count > 0;
        off |= !all[k].resume;
    }
    if (!any)
        return SL_OK;
    /* node 0's steps, highest first, are the candidates: the first every node has */
    for (int i = 0; all[0].resume && i < all[0].count; i++) {
        int everyone = 1;
        for (int k = 1; k < size && everyone; k++)
            everyone = sl_resume_holds(&all[k], all[0].step[i]);
        if (everyone) {
            plan->step = all[0].step[i];
            return SL_OK;
        }
    }
    /* a node told to start over while another goes on: the operator must say which */
    if (!off) {
        plan_take(all, size, plan);
        return SL_OK;
    }
    describe_all(msg, sizeof msg, all, size);
    append(msg, sizeof msg,
           "; resume every node from one step or none (--no-resume on every node starts "
           "over)");
    return sl_err_set(SL_ERR_FORMAT, "%s", msg);
}

/* An offer as the allgather carries it: OFFER_WORDS little-endian u64 (steps as i64). */
static void
encode_offer(unsigned char *w, const sl_resume_steps_t *o)
{
    memset(w, 0, OFFER_WORDS * 8);
    sl_put_u64(w, (uint64_t)(o->resume != 0));
    sl_put_u64(w + 8, (uint64_t)o->count);
    for (int i = 0; i < o->count && i < SL_RESUME_GENERATIONS; i++)
        sl_put_u64(w + 16 + 8 * i, (uint64_t)(int64_t)o->step[i]);
}

/* A peer's offer, refused when it cannot be one (SL_ERR_INVALID naming the node). */
static sl_status_t
decode_offer(const unsigned char *w, int rank, sl_resume_steps_t *o)
{
    uint64_t resume = sl_get_u64(w), count = sl_get_u64(w + 8);

    if (resume > 1 || count > SL_RESUME_GENERATIONS || (!resume && count))
        return sl_err_set(SL_ERR_INVALID, "resume: node %d sent a bad offer", rank);
    o->resume = (int)resume;
    o->count = (int)count;
    for (int i = 0; i < SL_RESUME_GENERATIONS; i++) {
        o->step[i] = (long)(int64_t)sl_get_u64(w + 16 + 8 * i);
        if (i < o->count && o->step[i] < 0)
            return sl_err_set(SL_ERR_INVALID, "resume: node %d sent a bad offer", rank);
    }
    return SL_OK;
}

sl_status_t
sl_resume_agree(sl_transport_t *t, int rank, int size, int timeout_ms,
                const sl_resume_steps_t *mine, sl_resume_steps_t *all, sl_resume_plan_t *plan)
{
    sl_collective_opts_t o = {0};
    unsigned char *words = NULL;
    size_t *counts = NULL;
    sl_status_t rc;

    SL_ASSERT(size >= 1 && rank >= 0 && rank < size);
    o.timeout_ms = timeout_ms;
    SL_TRY_GOTO(SL_ALLOC(&words, (size_t)size * OFFER_WORDS * 8, "resume offers"), rc, out);
    SL_TRY_GOTO(SL_ALLOC(&counts, (size_t)size, "resume offers"), rc, out);
    for (int k = 0; k < size; k++)
        counts[k] = OFFER_FLOATS;
    encode_offer(words + (size_t)rank * OFFER_WORDS * 8, mine);
    /* the bytes travel as floats without arithmetic, as the sparse exchange's ids do */
    rc = sl_allgather(t, SL_RESUME_COMPONENT, 0,
                      (const float *)(const void *)(words + (size_t)rank * OFFER_WORDS * 8),
                      (float *)(void *)words, counts, &o);
    if (rc != SL_OK) {
        sl_err_prefix(rc, "resume: agreeing on a checkpoint step with the other nodes");
        goto out;
    }
    for (int k = 0; k < size; k++)
        SL_TRY_GOTO(decode_offer(words + (size_t)k * OFFER_WORDS * 8, k, &all[k]), rc, out);
    rc = sl_resume_choose(all, size, plan);
out:
    sl_free(counts);
    sl_free(words);
    return rc;
}
