/* Unit tests of src/config/sl_config_quant.c: the keys of the quantized delta exchange
 * (defaults, ranges) and where int8 / int4 and top-k are refused, with the exact
 * messages. */
#include <check.h>
#include <string.h>

#include "common/sl_status.h"
#include "config/sl_config.h"
#include "config/sl_config_quant.h"

#include "test_tool.h"

START_TEST(test_quant_keys)
{
    sl_config_t c;

    sl_config_init(&c);
    ck_assert_int_eq(c.sync.quant_block, 256);
    ck_assert_int_eq(c.sync.rounding, SL_ROUNDING_NEAREST);
    ck_assert(c.sync.topk == 0);
    ck_assert(!sl_compress_is_quant(c.sync.compression));
    test_config_load_ok(&c, "data: {train: t.txt}\n"
                            "sync: {algorithm: gossip-bmuf, compression: int4, quant_block: 32,\n"
                            "       rounding: stochastic, topk: 0.05}\n");
    ck_assert_int_eq(c.sync.compression, SL_COMPRESS_INT4);
    ck_assert_str_eq(sl_compress_name(c.sync.compression), "int4");
    ck_assert_int_eq(c.sync.quant_block, 32);
    ck_assert_str_eq(sl_rounding_name(c.sync.rounding), "stochastic");
    ck_assert(c.sync.topk == 0.05);
    ck_assert_int_eq(sl_config_validate(&c), SL_OK);
    sl_config_fini(&c);
}
END_TEST

typedef struct {
    const char *sets[4];
    const char *message; /* NULL: valid */
} case_t;

static const case_t cases[] = {
    {{"data.train=t.txt", "sync.algorithm=gossip-ma", "sync.compression=int8"}, NULL},
    {{"data.train=t.txt", "sync.algorithm=local-bmuf", "sync.compression=int4"}, NULL},
    {{"data.train=t.txt", "sync.compression=int8"}, NULL}, /* none: nothing exchanged */
    {{"data.train=t.txt", "sync.algorithm=allreduce", "sync.compression=int8"},
     "<defaults>: 'sync.compression' is int8, but 'sync.algorithm' allreduce sums over a ring "
     "allreduce, which would re-quantize partial sums at every hop: use int8 / int4 with "
     "gossip-* or local-*, or fp16 / bf16 here"},
    {{"data.train=t.txt", "sync.algorithm=ma", "sync.compression=int4"},
     "<defaults>: 'sync.compression' is int4, but 'sync.algorithm' ma sums over a ring "
     "allreduce, which would re-quantize partial sums at every hop: use int8 / int4 with "
     "gossip-* or local-*, or fp16 / bf16 here"},
    {{"data.train=t.txt", "sync.algorithm=bmuf", "sync.compression=int8"},
     "<defaults>: 'sync.compression' is int8, but 'sync.algorithm' bmuf sums over a ring "
     "allreduce, which would re-quantize partial sums at every hop: use int8 / int4 with "
     "gossip-* or local-*, or fp16 / bf16 here"},
    {{"data.train=t.txt", "sync.algorithm=gossip-bmuf", "sync.compression=int8",
      "sync.exchange=unique"},
     "<defaults>: 'sync.compression' is int8, but 'sync.exchange' unique sends the rows' "
     "weights, not deltas: use sync.exchange dense, or fp16 / bf16"},
    {{"data.train=t.txt", "sync.algorithm=gossip-bmuf", "sync.topk=0.1"},
     "<defaults>: 'sync.topk' is 0.1, but 'sync.compression' is fp32: top-k needs the int8 "
     "or int4 delta exchange"},
};

START_TEST(test_quant_refused)
{
    sl_config_t c;

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_config_init(&c);
        for (int j = 0; j < 4 && cases[i].sets[j]; j++)
            test_config_set_ok(&c, cases[i].sets[j]);
        if (!cases[i].message) {
            ck_assert_msg(sl_config_validate(&c) == SL_OK, "case %zu: %s", i, sl_err_msg());
        } else {
            ck_assert_int_eq(sl_config_validate(&c), SL_ERR_CONFIG);
            ck_assert_msg(strcmp(sl_err_msg(), cases[i].message) == 0,
                          "case %zu:\n  got:      %s\n  expected: %s", i, sl_err_msg(),
                          cases[i].message);
        }
        sl_config_fini(&c);
    }
}
END_TEST

START_TEST(test_quant_ranges)
{
    static const char *const bad[] = {"sync.quant_block=0", "sync.quant_block=65537",
                                      "sync.topk=1.5",      "sync.topk=-0.1",
                                      "sync.rounding=up",   "sync.compression=int2"};
    sl_config_t c;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sl_config_init(&c);
        ck_assert_msg(sl_config_set(&c, bad[i]) != SL_OK, "%s accepted", bad[i]);
        ck_assert_msg(strstr(sl_err_msg(), "sync.") != NULL, "%s: %s", bad[i], sl_err_msg());
        sl_config_fini(&c);
    }
}
END_TEST

static Suite *
config_quant_suite(void)
{
    Suite *s = suite_create("config_quant");
    TCase *core = tcase_create("core");
    TCase *limits = tcase_create("limits");

    tcase_add_test(core, test_quant_keys);
    tcase_add_test(limits, test_quant_refused);
    tcase_add_test(limits, test_quant_ranges);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(config_quant_suite());
}
