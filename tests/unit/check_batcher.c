/* Unit tests of the batcher (src/data/sl_batcher.c): streams and batches worked by hand,
 * the ranks' shares tiling the tokens, a node that holds its share only reading the same
 * batches, and a share too short for one batch refused with its sizes. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_status.h"
#include "data/sl_data.h"

#include "test_tool.h"

/* Tokens 0..19, B = 3, T = 2: streams of L = 6 ([0..5], [6..11], [12..17]; 18 and 19
 * dropped), (6 - 1) / 2 = 2 batches. */
START_TEST(test_batcher_exact)
{
    int32_t ids[20], x[6], y[6];
    for (int i = 0; i < 20; i++)
        ids[i] = i;
    sl_tokens_t tok = {ids, 20};
    sl_batcher_t bt;
    ck_assert_int_eq(sl_batcher_init(&bt, &tok, 0, 1, 3, 2), SL_OK);
    ck_assert_int_eq(bt.stream_len, 6);
    ck_assert_int_eq(bt.batches_per_epoch, 2);
    ck_assert_uint_eq(bt.share_len, 20);

    static const int32_t x0[] = {0, 6, 12, 1, 7, 13}, y0[] = {1, 7, 13, 2, 8, 14};
    static const int32_t x1[] = {2, 8, 14, 3, 9, 15}, y1[] = {3, 9, 15, 4, 10, 16};
    sl_batcher_get(&bt, 0, x, y);
    ck_assert(memcmp(x, x0, sizeof x) == 0 && memcmp(y, y0, sizeof y) == 0);
    sl_batcher_get(&bt, 1, x, y);
    ck_assert(memcmp(x, x1, sizeof x) == 0 && memcmp(y, y1, sizeof y) == 0);
}
END_TEST

/* Ranks 0..3 of 4 over 103 tokens: shares [0,25) [25,51) [51,77) [77,103). */
START_TEST(test_batcher_shares)
{
    int32_t ids[103];
    for (int i = 0; i < 103; i++)
        ids[i] = i;
    sl_tokens_t tok = {ids, 103};
    static const size_t starts[] = {0, 25, 51, 77, 103};
    size_t covered = 0;
    for (int k = 0; k < 4; k++) {
        sl_batcher_t bt;
        int32_t x[2], y[2];
        ck_assert_int_eq(sl_batcher_init(&bt, &tok, k, 4, 2, 1), SL_OK);
        ck_assert_uint_eq((size_t)(bt.share - ids), starts[k]);
        ck_assert_uint_eq(bt.share_len, starts[k + 1] - starts[k]);
        ck_assert_uint_eq((size_t)(bt.share - ids), covered); /* starts where the last ended */
        covered += bt.share_len;
        /* the last batch of a stream stays inside the share */
        sl_batcher_get(&bt, bt.batches_per_epoch - 1, x, y);
        ck_assert_int_lt(y[1], (int32_t)starts[k + 1]);
        ck_assert_int_ge(x[0], (int32_t)starts[k]);
    }
    ck_assert_uint_eq(covered, 103);
}
END_TEST

/* A node that holds a part of the tokens only (sl_corpus_load_share): its share, or more
 * around it, given with where the part starts in the whole, reads the batches it reads
 * from the whole. */
START_TEST(test_batcher_init_at)
{
    int32_t all[1000], x[20], y[20], xo[20], yo[20];
    sl_tokens_t whole_tok = {all, 1000};

    for (int i = 0; i < 1000; i++)
        all[i] = i * 7 % 1009;
    for (int k = 0; k < 3; k++) {
        size_t lo = sl_batcher_share_start(1000, k, 3), hi = sl_batcher_share_start(1000, k + 1, 3);
        sl_batcher_t whole, share, wider;
        sl_tokens_t part = {all + lo, hi - lo};
        size_t from = lo > 5 ? lo - 5 : 0;
        sl_tokens_t around = {all + from, (hi + 5 < 1000 ? hi + 5 : 1000) - from};

        ck_assert_int_eq(sl_batcher_init(&whole, &whole_tok, k, 3, 4, 5), SL_OK);
        ck_assert_int_eq(sl_batcher_init_at(&share, &part, lo, 1000, k, 3, 4, 5), SL_OK);
        ck_assert_int_eq(sl_batcher_init_at(&wider, &around, from, 1000, k, 3, 4, 5), SL_OK);
        ck_assert_int_eq(share.batches_per_epoch, whole.batches_per_epoch);
        ck_assert_ptr_eq(share.share, whole.share);
        for (long i = 0; i < share.batches_per_epoch; i++) {
            sl_batcher_get(&whole, i, x, y);
            sl_batcher_get(&share, i, xo, yo);
            ck_assert(memcmp(x, xo, sizeof x) == 0 && memcmp(y, yo, sizeof y) == 0);
            sl_batcher_get(&wider, i, xo, yo);
            ck_assert(memcmp(x, xo, sizeof x) == 0 && memcmp(y, yo, sizeof y) == 0);
        }
    }
}
END_TEST

START_TEST(test_batcher_too_short)
{
    static int32_t ids[4608];
    sl_tokens_t tok = {ids, 1000};
    sl_batcher_t bt;
    ck_assert_int_eq(sl_batcher_init(&bt, &tok, 0, 4, 32, 35), SL_ERR_INVALID);
    ck_assert_str_eq(sl_err_msg(), "rank 0 of 4: a share of 250 tokens (of 1000) does not fit "
                                   "train.batch 32 x train.bptt 35, which needs at least 1152 "
                                   "(32 x 36)");
    /* 1152 a rank is exactly enough for one batch; one token less is not */
    tok.len = 4608;
    ck_assert_int_eq(sl_batcher_init(&bt, &tok, 3, 4, 32, 35), SL_OK);
    ck_assert_int_eq(bt.batches_per_epoch, 1);
    tok.len = 4607;
    ck_assert_int_eq(sl_batcher_init(&bt, &tok, 0, 4, 32, 35), SL_ERR_INVALID);
    ck_assert_int_eq(sl_batcher_init(&bt, &tok, 4, 4, 32, 35), SL_ERR_INVALID);
    ck_assert_int_eq(sl_batcher_init(&bt, &tok, 0, 1, 0, 35), SL_ERR_INVALID);
}
END_TEST

static Suite *
batcher_suite(void)
{
    Suite *s = suite_create("batcher");
    TCase *core = tcase_create("core");

    tcase_add_test(core, test_batcher_exact);
    tcase_add_test(core, test_batcher_shares);
    tcase_add_test(core, test_batcher_init_at);
    tcase_add_test(core, test_batcher_too_short);
    suite_add_tcase(s, core);
    return s;
}

int
main(void)
{
    return test_main(batcher_suite());
}
