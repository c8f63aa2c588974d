/* Unit tests of the pieces of self-contained model files (issue 19) that need no
 * training: the metadata section (round trip, every truncation, lengths and ids that
 * lie, records of later versions skipped) and the token picker of generation (greedy,
 * temperature, top-k, top-p) against allowed sets worked out here. The files end to end
 * are check_model_file.c's. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_endian.h"
#include "common/sl_rng.h"
#include "config/sl_config.h"
#include "data/sl_data.h"
#include "model/sl_model_meta.h"
#include "model/sl_token_pick.h"

#include "test_tool.h"

/* ------------------------------------------------------- metadata section */

static sl_vocab_t *
small_vocab(void)
{
    static const char *const words[] = {"the", "<unk>", "<eos>", "jury", "said"};
    sl_vocab_t *v;

    ck_assert_int_eq(sl_vocab_begin(&v, 5), SL_OK);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(sl_vocab_append(v, words[i], strlen(words[i])), SL_OK);
    ck_assert_int_eq(sl_vocab_end(v, SL_LEVEL_WORD), SL_OK);
    return v;
}

static void
assert_refused(const unsigned char *p, size_t len, const char *fragment)
{
    sl_model_meta_t m;

    ck_assert_int_eq(sl_model_meta_decode(&m, "x.bin", p, len), SL_ERR_FORMAT);
    ck_assert_msg(strncmp(sl_err_msg(), "x.bin: model metadata: ", 23) == 0 &&
                      strstr(sl_err_msg(), fragment) && !strchr(sl_err_msg(), '\n'),
                  "'%s' for '%s'", sl_err_msg(), fragment);
    ck_assert_ptr_null(m.vocab);
}

/* m, encoded as it stands, is refused with fragment in the message. */
static void
assert_encoded_refused(const sl_model_meta_t *m, const char *fragment)
{
    unsigned char *enc;
    size_t len;

    ck_assert_int_eq(sl_model_meta_encode(m, &enc, &len), SL_OK);
    assert_refused(enc, len, fragment);
    free(enc);
}

START_TEST(test_meta_round_trip_and_damage)
{
    sl_config_t cfg;
    sl_model_meta_t m, back;
    sl_vocab_t *v = small_vocab();
    unsigned char *enc, *bad;
    size_t len, rec;

    sl_config_init(&cfg);
    test_config_set_ok(&cfg, "model.layers=[{lstm: 12, projection: 4}, {lstm: 8}]");
    test_config_set_ok(&cfg, "run.name=meta-test");
    sl_model_meta_init(&m, &cfg, v);
    m.steps = 40;
    m.valid_loss = 4.25;
    m.valid_step = 40;
    m.models_averaged = 3;
    m.train_sha256[31] = 0xab;
    ck_assert_int_eq(sl_model_meta_encode(&m, &enc, &len), SL_OK);

    ck_assert_msg(sl_model_meta_decode(&back, "x.bin", enc, len) == SL_OK, "%s", sl_err_msg());
    ck_assert_int_eq(sl_vocab_size(back.vocab), 5);
    for (int i = 0; i < 5; i++)
        ck_assert_str_eq(sl_vocab_word(back.vocab, i), sl_vocab_word(v, i));
    ck_assert_int_eq(back.unk, 1);
    ck_assert_int_eq(back.eos, 2);
    ck_assert_int_eq(back.level, SL_LEVEL_WORD);
    ck_assert_int_eq(back.nlayers, 2);
    ck_assert_int_eq(back.layers[0].hidden, 12);
    ck_assert_int_eq(back.layers[0].projection, 4);
    ck_assert_int_eq(back.layers[1].hidden, 8);
    ck_assert_int_eq(back.bptt, cfg.train.bptt);
    ck_assert_str_eq(back.run_name, "meta-test");
    ck_assert_str_eq(back.version, PACKAGE_VERSION);
    ck_assert(back.valid_loss == 4.25 && back.valid_step == 40 && isnan(back.test_loss));
    ck_assert_int_eq(back.models_averaged, 3);
    ck_assert_int_eq(back.train_sha256[31], 0xab);
    sl_model_meta_fini(&back);

    /* every truncation: a one-line error, never a read past the end (the copy is exactly
     * as long as the cut, for valgrind and ASan) */
    for (size_t cut = 0; cut < len; cut++) {
        bad = malloc(cut ? cut : 1);
        memcpy(bad, enc, cut);
        assert_refused(bad, cut, "");
        free(bad);
    }
    bad = malloc(len + 16);
    /* a vocabulary entry longer than its record */
    memcpy(bad, enc, len);
    rec = test_meta_record(bad, 0, "VOCB");
    sl_put_u32(bad + rec + 12 + 4, 0xfffffff0u);
    assert_refused(bad, len, "entry 0 of 5 (4294967280 bytes) is bad in the record VOCB");
    /* a record longer than the section */
    memcpy(bad, enc, len);
    sl_put_u64(bad + rec + 4, (uint64_t)len);
    assert_refused(bad, len, "record 1 of 4 runs past the section");
    /* a word twice: entry 4 "said" made "jury" (entries: count, then "the", "<unk>",
     * "<eos>", "jury", "said", each after its u32 length) */
    memcpy(bad, enc, len);
    memcpy(bad + rec + 12 + 4 + (4 + 3) + 2 * (4 + 5) + (4 + 4) + 4, "jury", 4);
    assert_refused(bad, len, "duplicate word at id 4 (the same as id 3)");
    /* special ids that do not name <unk> */
    memcpy(bad, enc, len);
    sl_put_u32(bad + test_meta_record(bad, 0, "DATA") + 12 + 4, 0);
    assert_refused(bad, len, "the special token ids do not name <unk> and <eos>");
    /* an unknown section version, bytes after the last record */
    memcpy(bad, enc, len);
    sl_put_u32(bad, 9);
    assert_refused(bad, len, "section version 9 (this shoal reads 1)");
    memcpy(bad, enc, len);
    memset(bad + len, 0, 16);
    assert_refused(bad, len + 16, "bytes after the last record");
    /* a missing record: three records said, the fourth's bytes left over */
    memcpy(bad, enc, len);
    sl_put_u32(bad + 4, 3);
    assert_refused(bad, len, "bytes after the last record");
    /* an unknown record is skipped */
    memcpy(bad, enc, len);
    memcpy(bad + test_meta_record(bad, 0, "MODL"), "XTRA", 4);
    assert_refused(bad, len, "no MODL record");
    free(bad);
    /* train.bptt up to SL_MAX_BPTT: shoal score's and sample's buffers follow it (found
     * by tests/fuzz/fuzz_model: a 1 KB file that asked for 5 GB) */
    m.bptt = SL_MAX_BPTT + 1;
    assert_encoded_refused(&m, "train.bptt 10001 above 10000 in the record MODL");
    m.bptt = SL_MAX_BPTT;
    ck_assert_int_eq(sl_model_meta_encode(&m, &bad, &len), SL_OK);
    ck_assert_msg(sl_model_meta_decode(&back, "x.bin", bad, len) == SL_OK, "%s", sl_err_msg());
    ck_assert_int_eq(back.bptt, SL_MAX_BPTT);
    sl_model_meta_fini(&back);
    free(bad);
    /* settings in the ranges of their configuration keys: shoal export wrote an
     * infinite init range as "inf" into its JSON file */
    m.bptt = 35;
    m.init_range = INFINITY;
    assert_encoded_refused(&m, "dropout or init range out of range in the record MODL");
    m.init_range = 0.1;
    m.dropout = 1.0;
    assert_encoded_refused(&m, "dropout or init range out of range in the record MODL");
    m.dropout = 0.0;
    m.valid_fraction = NAN;
    assert_encoded_refused(&m, "settings out of range in the record DATA");
    m.valid_fraction = 0.0;
    m.vocab_limit = -1;
    assert_encoded_refused(&m, "settings out of range in the record DATA");
    free(enc);
    sl_vocab_destroy(&v);
    sl_config_fini(&cfg);
}
END_TEST

/* ----------------------------------------------------------------- picker */

START_TEST(test_picker_allowed_sets)
{
    enum { V = 50 };
    static const int ks[] = {0, 1, 2, 5, 50};
    static const double ps[] = {1.0, 0.9, 0.3, 0.05};
    static const double ts[] = {0.5, 1.0, 2.0};
    float logit[V];
    int ids[V], seen[V];
    sl_picker_t pk;
    sl_pick_opts_t o;

    ck_assert_int_eq(sl_picker_init(&pk, V), SL_OK);
    for (int trial = 0; trial < 20; trial++) {
        for (int i = 0; i < V; i++) /* ties on purpose: values on a coarse grid */
            logit[i] = (float)((int)(sl_rng_float_at(77, (uint64_t)(trial * V + i)) * 12.0f)) / 2;
        o.temperature = 0;
        o.top_k = 0;
        o.top_p = 1;
        test_pick_allowed(logit, V, 0, 1, 1, ids);
        ck_assert_int_eq(sl_picker_allowed(&pk, logit, &o), 1);
        ck_assert_int_eq(pk.order[0], ids[0]); /* greedy: the most likely, lowest id */
        for (size_t a = 0; a < sizeof ks / sizeof ks[0]; a++)
            for (size_t b = 0; b < sizeof ps / sizeof ps[0]; b++)
                for (size_t c = 0; c < sizeof ts / sizeof ts[0]; c++) {
                    int n = test_pick_allowed(logit, V, ks[a], ps[b], ts[c], ids);
                    sl_rng_t rng;
                    o.temperature = ts[c];
                    o.top_k = ks[a];
                    o.top_p = ps[b];
                    ck_assert_int_eq(sl_picker_allowed(&pk, logit, &o), n);
                    memset(seen, 0, sizeof seen);
                    for (int j = 0; j < n; j++)
                        seen[ids[j]] = 1;
                    sl_rng_init(&rng, (uint64_t)(trial * 1000 + a * 100 + b * 10 + c));
                    for (int d = 0; d < 200; d++) {
                        int id = sl_picker_pick(&pk, logit, &o, &rng);
                        ck_assert_msg(id >= 0 && id < V && seen[id],
                                      "k %d p %g t %g: %d is not allowed", ks[a], ps[b], ts[c], id);
                    }
                }
    }
    /* options out of range */
    o.temperature = -1;
    o.top_k = 0;
    o.top_p = 1;
    ck_assert_int_eq(sl_pick_opts_check(&o), SL_ERR_INVALID);
    o.temperature = 1;
    o.top_p = 0;
    ck_assert_int_eq(sl_pick_opts_check(&o), SL_ERR_INVALID);
    sl_picker_fini(&pk);
}
END_TEST

static Suite *
model_meta_suite(void)
{
    Suite *s = suite_create("model_meta");
    TCase *core = tcase_create("core");
    TCase *limits = tcase_create("limits");

    tcase_add_test(core, test_picker_allowed_sets);
    tcase_add_test(limits, test_meta_round_trip_and_damage);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(model_meta_suite());
}
