/* One node's rendezvous exchange on a thread of the test process, for the tests of the
 * rendezvous protocol itself (check_launch.c, check_launch_late.c): several ranks of a
 * run meet, die and come back inside one test process. Test code only. */
#ifndef TEST_EXCHANGE_H
#define TEST_EXCHANGE_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#include "common/sl_status.h"
#include "node/sl_rendezvous.h"
#include "transport/sl_secret.h"

typedef struct {
    sl_rendezvous_t *r;
    char endpoint[64];
    unsigned char session[SL_RDV_SESSION_BYTES];
    sl_rendezvous_table_t t;
    sl_status_t st;  /* the exchange's status, once done */
    char msg[512];   /* its message when it failed */
    atomic_int done; /* set after st and msg: who reads it 1 may read them */
    pthread_t thread;
} test_exchange_t;

/* Rank rank of 3 at master, a rendezvous timeout of 20 s, under CURVE with secret and
 * relaying session keys (cluster.security: mac), stopped when *stop is set (may be
 * NULL); its session key all bytes fill, its endpoint ipc:///tmp/x/rank-RANK-FILL (its
 * generation: now). Its exchange (run id 0x5eed) not started yet. */
void test_exchange_open(test_exchange_t *x, int rank, const char *master, const sl_secret_t *secret,
                        unsigned char fill, volatile sig_atomic_t *stop);
/* Starts the exchange on a thread of its own. */
void test_exchange_go(test_exchange_t *x);
/* Joins the thread, frees the table and the rendezvous. */
void test_exchange_end(test_exchange_t *x);

#endif
