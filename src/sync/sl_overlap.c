/* The worker of overlapped sync (sl_overlap.h): a job per component (at most one in
 * flight each, since tau < H_c), a queue in hand-over order, and the snapshot and
 * correction buffers. Symbols: theta_c (the training thread's copy), the snapshot
 * theta_c(t), theta_new (the averaged block after MA or BMUF), tau. One mutex guards
 * the job states and the queue; the buffers of a job belong to the worker from
 * hand-over until it marks the job done, then to the training thread. */
#include "sync/sl_overlap.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_clock.h"

typedef enum { JOB_NONE, JOB_QUEUED, JOB_DONE } job_state_t;

typedef struct {
    job_state_t state;
    uint64_t round;
    long due;            /* step of application */
    int end_step;        /* the last hand-over of its step */
    sl_rowset_t touched; /* U_k handed over (swapped with the caller's); rows 0: none */
    sl_sync_stat_t stat; /* the component's statistics, updated by the worker */
    int has_stat;        /* 0 for an update restored from a checkpoint (no statistics) */
    sl_status_t st;
    char msg[512]; /* the worker's message when st != SL_OK */
} job_t;

struct sl_overlap {
    sl_sync_env_t env;
    sl_sync_average_t *avg; /* borrowed */
    sl_liveness_t *lv;      /* borrowed */
    float *snap;            /* (nparams) theta_c at hand-over, at c's offset */
    float *corr;            /* (nparams) the worker's theta_new, then theta_new - snapshot */
    job_t *job;             /* (ncomps) */
    int *queue;             /* (ncomps) ring of queued components, in hand-over order */
    int head, nqueued, running, stop;
    sl_status_t failed; /* the first failure: later queued jobs fail with it */
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_t thread;
    int started;
};

/* One exchange, on the worker, the transport its own: the average of the snapshot as a
 * sync without overlap computes it, into corr, then corr -= snapshot. */
static sl_status_t
run_job(sl_overlap_t *o, int c, job_t *j)
{
    const sl_component_t *cp = &o->env.comps[c];
    float *nw = o->corr + cp->offset;
    const float *snap = o->snap + cp->offset;
    double t0 = sl_clock_now();

    SL_TRY(sl_sync_average_component(o->avg, o->corr, c, j->round,
                                     j->touched.bits ? &j->touched : NULL, &j->stat));
    for (size_t k = 0; k < cp->count; k++)
        nw[k] -= snap[k];
    j->stat.rounds++;
    sl_sync_fill_bytes(&j->stat, o->env.tr, (uint32_t)c);
    j->stat.time_s += sl_clock_now() - t0;
    return SL_OK;
}

static void *
worker_main(void *arg)
{
    sl_overlap_t *o = arg;

    pthread_mutex_lock(&o->mu);
    for (;;) {
        int c;
        job_t *j;
        sl_status_t st;

        while (o->nqueued == 0 && !o->stop)
            pthread_cond_wait(&o->work, &o->mu);
        if (o->nqueued == 0)
            break;
        c = o->queue[o->head];
        o->head = (o->head + 1) % o->env.ncomps;
        o->nqueued--;
        o->running = 1;
        j = &o->job[c];
        st = o->failed;
        pthread_mutex_unlock(&o->mu);
        if (st == SL_OK) {
            st = run_job(o, c, j);
            if (j->end_step && st == SL_OK)
                sl_liveness_end_step(o->lv);
        }
        if (st != SL_OK)
            snprintf(j->msg, sizeof j->msg, "%s", sl_err_msg());
        pthread_mutex_lock(&o->mu);
        j->st = st;
        j->state = JOB_DONE;
        if (st != SL_OK && o->failed == SL_OK)
            o->failed = st;
        o->running = 0;
        pthread_cond_broadcast(&o->done);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

sl_status_t
sl_overlap_new(sl_overlap_t **out, const sl_sync_env_t *env, sl_sync_average_t *avg,
               sl_liveness_t *lv, const sl_rowset_t *touched)
{
    sl_overlap_t *o;
    sigset_t all, old;
    sl_status_t st;
    int rc;

    *out = NULL;
    SL_TRY(SL_CALLOC(&o, 1, "sync overlap"));
    o->env = *env;
    o->avg = avg;
    o->lv = lv;
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->work, NULL);
    pthread_cond_init(&o->done, NULL);
    SL_TRY_GOTO(SL_ALLOC(&o->snap, env->nparams, "sync overlap snapshot"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&o->corr, env->nparams, "sync overlap correction"), st, fail);
    SL_TRY_GOTO(SL_CALLOC(&o->job, (size_t)env->ncomps, "sync overlap jobs"), st, fail);
    SL_TRY_GOTO(SL_ALLOC(&o->queue, (size_t)env->ncomps, "sync overlap jobs"), st, fail);
    for (int c = 0; touched && c < env->ncomps; c++)
        if (touched[c].bits)
            SL_TRY_GOTO(sl_rowset_init(&o->job[c].touched, touched[c].rows), st, fail);
    /* the worker inherits a mask that blocks every signal: they go to the training
     * thread, which finishes its step and checkpoints */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&o->thread, NULL, worker_main, o);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        st = sl_err_set(SL_ERR_NOMEM, "sync: cannot start the overlap worker thread: %s",
                        strerror(rc));
        goto fail;
    }
    o->started = 1;
    *out = o;
    return SL_OK;
fail:
    sl_overlap_destroy(&o);
    return st;
}

void
sl_overlap_destroy(sl_overlap_t **op)
{
    sl_overlap_t *o = op ? *op : NULL;

    if (!o)
        return;
    if (o->started) {
        pthread_mutex_lock(&o->mu);
        o->stop = 1;
        pthread_cond_signal(&o->work);
        pthread_mutex_unlock(&o->mu);
        pthread_join(o->thread, NULL);
    }
    for (int c = 0; o->job && c < o->env.ncomps; c++)
        sl_rowset_fini(&o->job[c].touched);
    pthread_cond_destroy(&o->done);
    pthread_cond_destroy(&o->work);
    pthread_mutex_destroy(&o->mu);
    sl_free(o->job);
    sl_free(o->queue);
    sl_free(o->snap);
    sl_free(o->corr);
    sl_free(o);
    *op = NULL;
}

void
sl_overlap_hand(sl_overlap_t *o, const float *params, int c, uint64_t round, long apply_step,
                int end_step, sl_rowset_t *touched, const sl_sync_stat_t *stat)
{
    const sl_component_t *cp = &o->env.comps[c];
    job_t *j = &o->job[c];

    /* no lock needed for the job's fields: the worker only reads a job once queued */
    SL_ASSERT(j->state == JOB_NONE);
    memcpy(o->snap + cp->offset, params + cp->offset, cp->count * sizeof *params);
    memcpy(o->corr + cp->offset, params + cp->offset, cp->count * sizeof *params);
    if (touched && j->touched.bits) {
        sl_rowset_t t = *touched;
        /* the worker's set was emptied by its last exchange, but for the rows it could
         * not sync (no copy came): those go with this block's */
        for (long w = 0; w < (t.rows + 63) / 64; w++)
            t.bits[w] |= j->touched.bits[w];
        sl_rowset_clear(&j->touched);
        *touched = j->touched;
        j->touched = t;
    }
    j->round = round;
    j->due = apply_step;
    j->end_step = end_step;
    j->stat = *stat;
    j->has_stat = 1;
    j->st = SL_OK;
    pthread_mutex_lock(&o->mu);
    j->state = JOB_QUEUED;
    o->queue[(o->head + o->nqueued) % o->env.ncomps] = c;
    o->nqueued++;
    pthread_cond_signal(&o->work);
    pthread_mutex_unlock(&o->mu);
}

long
sl_overlap_due(sl_overlap_t *o, int c)
{
    long due;

    pthread_mutex_lock(&o->mu);
    due = o->job[c].state == JOB_NONE ? -1 : o->job[c].due;
    pthread_mutex_unlock(&o->mu);
    return due;
}

sl_status_t
sl_overlap_apply(sl_overlap_t *o, float *params, int c, sl_sync_stat_t *stat)
{
    const sl_component_t *cp = &o->env.comps[c];
    const float *corr = o->corr + cp->offset;
    float *theta = params + cp->offset;
    job_t *j = &o->job[c];

    pthread_mutex_lock(&o->mu);
    while (j->state == JOB_QUEUED)
        pthread_cond_wait(&o->done, &o->mu);
    pthread_mutex_unlock(&o->mu);
    SL_ASSERT(j->state == JOB_DONE);
    j->state = JOB_NONE;
    if (j->st != SL_OK)
        return sl_err_set(j->st, "%s", j->msg);
    for (size_t k = 0; k < cp->count; k++)
        theta[k] += corr[k];
    if (j->has_stat)
        *stat = j->stat;
    return SL_OK;
}

void
sl_overlap_wait(sl_overlap_t *o)
{
    pthread_mutex_lock(&o->mu);
    while (o->nqueued > 0 || o->running)
        pthread_cond_wait(&o->done, &o->mu);
    pthread_mutex_unlock(&o->mu);
}

int
sl_overlap_idle(sl_overlap_t *o)
{
    int idle;

    pthread_mutex_lock(&o->mu);
    idle = o->nqueued == 0 && !o->running;
    pthread_mutex_unlock(&o->mu);
    return idle;
}

void
sl_overlap_pending(sl_overlap_t *o, int64_t *due)
{
    for (int c = 0; c < o->env.ncomps; c++) {
        const job_t *j = &o->job[c];
        SL_ASSERT(j->state != JOB_QUEUED);
        due[c] = j->state == JOB_DONE && j->st == SL_OK ? (int64_t)j->due : -1;
    }
}

float *
sl_overlap_corr(sl_overlap_t *o)
{
    return o->corr;
}

void
sl_overlap_restore(sl_overlap_t *o, const int64_t *due)
{
    for (int c = 0; c < o->env.ncomps; c++) {
        job_t *j = &o->job[c];

        SL_ASSERT(j->state != JOB_QUEUED);
        j->state = due[c] >= 0 ? JOB_DONE : JOB_NONE;
        j->st = SL_OK;
        j->has_stat = 0;
        j->due = (long)due[c];
    }
}
