/* The count of lent payloads and the wait for them (sl_lent.h). */
#include "transport/sl_lent.h"

#include <errno.h>
#include <time.h>

void
sl_lent_init(sl_lent_t *l)
{
    pthread_condattr_t ca;

    pthread_mutex_init(&l->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->back, &ca);
    pthread_condattr_destroy(&ca);
    l->out = 0;
}

void
sl_lent_fini(sl_lent_t *l)
{
    pthread_cond_destroy(&l->back);
    pthread_mutex_destroy(&l->lock);
}

void
sl_lent_take(sl_lent_t *l)
{
    pthread_mutex_lock(&l->lock);
    l->out++;
    pthread_mutex_unlock(&l->lock);
}

void
sl_lent_give_back(sl_lent_t *l)
{
    pthread_mutex_lock(&l->lock);
    if (--l->out == 0)
        pthread_cond_broadcast(&l->back);
    pthread_mutex_unlock(&l->lock);
}

uint64_t
sl_lent_wait(sl_lent_t *l, int timeout_ms)
{
    struct timespec until;
    uint64_t left;
    int rc = 0;

    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&l->lock);
    while (l->out > 0 && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&l->back, &l->lock, &until);
    left = l->out;
    pthread_mutex_unlock(&l->lock);
    return left;
}
