/* One node's rendezvous exchange on a thread of the test process (test_exchange.h). */
#define _POSIX_C_SOURCE 200809L
#include "test_exchange.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

static void *
exchange_main(void *arg)
{
    test_exchange_t *x = arg;

    x->st = sl_rendezvous_exchange(x->r, 0x5eed, x->endpoint, x->session, &x->t);
    snprintf(x->msg, sizeof x->msg, "%s", x->st == SL_OK ? "" : sl_err_msg());
    atomic_store(&x->done, 1);
    return NULL;
}

void
test_exchange_open(test_exchange_t *x, int rank, const char *master, const sl_secret_t *secret,
                   unsigned char fill, volatile sig_atomic_t *stop)
{
    sl_rendezvous_opts_t o = {rank, 3, master, NULL, 20000, stop, secret, 1};

    memset(x, 0, sizeof *x);
    atomic_init(&x->done, 0);
    ck_assert_msg(sl_rendezvous_new(&x->r, &o) == SL_OK, "%s", sl_err_msg());
    snprintf(x->endpoint, sizeof x->endpoint, "ipc:///tmp/x/rank-%d-%d", rank, fill);
    memset(x->session, fill, sizeof x->session);
}

void
test_exchange_go(test_exchange_t *x)
{
    ck_assert_int_eq(pthread_create(&x->thread, NULL, exchange_main, x), 0);
}

void
test_exchange_end(test_exchange_t *x)
{
    ck_assert_int_eq(pthread_join(x->thread, NULL), 0);
    sl_rendezvous_table_fini(&x->t);
    sl_rendezvous_destroy(&x->r);
}
