/* The link emulator (sl_link_emu.h, cluster.emulate): a frame arrives no earlier than
 * latency + size / rate after it was sent, back-to-back frames queue behind each other,
 * and loosely not much later; frames of mixed sizes under jitter keep their order per
 * link and none is lost; a lent payload is held until it has left; and training runs
 * (gossip-BMUF, allreduce) over emulated links write the same model, bit for bit, as
 * without. Limits: the
 * bandwidth syntax and the transport's refusal of bad options. Two transports of one
 * process (the emulator's thread does the sending), or `shoal run`. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sl_clock.h"
#include "common/sl_rng.h"
#include "config/sl_config.h"
#include "transport/sl_transport.h"
#include "test_tool.h"
#include "test_util.h"

#define RUN 0xe3e3e3e3ull
/* How late a frame may arrive beyond the link model before it counts as wrong: loose,
 * a loaded machine's scheduling, but well under the model's own times below. */
#define LATE_S 1.0

static char tmp_root[] = "/tmp/shoal-check-emulate-XXXXXX";

/* Two transports, rank 0 with link emulation (bits per second, latency, jitter). */
static void
pair_new(sl_transport_t *t[2], double bits_per_s, double latency_ms, double jitter_ms)
{
    const char *eps[2];

    for (uint32_t r = 0; r < 2; r++) {
        sl_transport_opts_t o;
        sl_transport_opts_default(&o);
        o.run_id = RUN;
        o.rank = r;
        o.size = 2;
        o.timeout_ms = TEST_WAIT_MS;
        o.linger_ms = 0;
        if (r == 0) {
            o.emulate_bits_per_s = bits_per_s;
            o.emulate_latency_ms = latency_ms;
            o.emulate_jitter_ms = jitter_ms;
        }
        ck_assert_msg(sl_transport_new(&t[r], &o) == SL_OK, "%s", sl_err_msg());
    }
    eps[0] = sl_transport_endpoint(t[0]);
    eps[1] = sl_transport_endpoint(t[1]);
    ck_assert_int_eq(sl_transport_connect(t[0], eps), SL_OK);
    ck_assert_int_eq(sl_transport_connect(t[1], eps), SL_OK);
}

static void
pair_destroy(sl_transport_t *t[2])
{
    sl_transport_destroy(&t[0]);
    sl_transport_destroy(&t[1]);
}

/* Byte j of frame seq's payload. */
static unsigned char
pattern(uint32_t seq, size_t j)
{
    return (unsigned char)(sl_rng_at(seq, j / 8) >> (8 * (j % 8)));
}

static const struct {
    double bits_per_s, latency_ms;
} timings[] = {
    {50e6, 200}, /* rate and latency: 2.5 MB take 0.4 s to leave */
    {0, 150},    /* latency only */
};

/* Frames of known sizes sent back to back: frame i leaves once i-1 has (or when sent),
 * takes B * 8 / rate, arrives latency later; never earlier, and not much later. */
START_TEST(test_delivery_time)
{
    static const size_t sizes[] = {1000000, 0, 64, 500000, 1000000, 20000};
    enum { N = sizeof sizes / sizeof sizes[0] };
    double rate = timings[_i].bits_per_s, lat = timings[_i].latency_ms / 1000.0;
    double before[N], after[N], lo_free = 0, hi_free = 0;
    unsigned char *buf = malloc(1000000), *back = malloc(1000000);
    sl_transport_t *t[2];

    pair_new(t, rate, timings[_i].latency_ms, 0);
    memset(buf, 7, 1000000);
    for (uint32_t i = 0; i < N; i++) {
        sl_wire_key_t k = {0, 0, i, 1, SL_WIRE_DATA};
        before[i] = sl_clock_now();
        ck_assert_msg(sl_transport_send(t[0], &k, buf, (uint32_t)sizes[i], SL_WIRE_BYTES, 1.0f, 0,
                                        -1) == SL_OK,
                      "%s", sl_err_msg());
        after[i] = sl_clock_now();
    }
    for (uint32_t i = 0; i < N; i++) {
        sl_wire_key_t k = {0, 0, i, 0, SL_WIRE_DATA};
        double tx = rate > 0 ? (SL_WIRE_HEADER_BYTES + sizes[i]) * 8.0 / rate : 0, got_at;
        size_t got;

        ck_assert_msg(sl_transport_recv(t[1], &k, back, 1000000, &got, TEST_WAIT_MS) == SL_OK, "%s",
                      sl_err_msg());
        got_at = sl_clock_now();
        ck_assert_uint_eq(got, sizes[i]);
        ck_assert(got == 0 || (back[0] == 7 && back[got - 1] == 7));
        /* the earliest and latest it can have left, by the model */
        lo_free = (before[i] > lo_free ? before[i] : lo_free) + tx;
        hi_free = (after[i] > hi_free ? after[i] : hi_free) + tx;
        ck_assert_msg(got_at >= lo_free + lat,
                      "frame %u (%zu bytes) came %.4f s after it was sent, before its time "
                      "%.4f s",
                      i, sizes[i], got_at - before[i], lo_free + lat - before[i]);
        ck_assert_msg(got_at <= hi_free + lat + LATE_S,
                      "frame %u (%zu bytes) came %.4f s after it was sent, its time was "
                      "%.4f s",
                      i, sizes[i], got_at - before[i], hi_free + lat - before[i]);
    }
    pair_destroy(t);
    free(buf);
    free(back);
}
END_TEST

/* Size of frame i: small, medium and large ones mixed. */
static size_t
mixed_size(uint32_t i)
{
    uint64_t r = sl_rng_at(RUN, i);

    switch (r % 3) {
    case 0:
        return (size_t)(r >> 8) % 100;
    case 1:
        return 1000 + (size_t)(r >> 8) % 20000;
    default:
        return 65536 + (size_t)(r >> 8) % 200000;
    }
}

/* Many frames of mixed sizes under a jitter much larger than their time to leave: each
 * arrives after the one sent before it (when it is asked for, no later frame is
 * waiting), intact, and all arrive. Large ones are lent. Batches stay under the
 * link's queue, since this thread also receives. */
START_TEST(test_order_kept)
{
    enum { N = 1500, BATCH = 500, BIG = 265536 };
    unsigned char *lent = malloc((size_t)BATCH * BIG), *buf = malloc(BIG), *back = malloc(BIG);
    sl_transport_t *t[2];

    pair_new(t, 1e9, 1, 20);
    for (uint32_t b = 0; b < N; b += BATCH) {
        for (uint32_t i = b; i < b + BATCH; i++) {
            size_t n = mixed_size(i);
            unsigned char *p = n >= 65536 ? lent + (size_t)(i - b) * BIG : buf;
            sl_wire_key_t k = {0, 0, i, 1, SL_WIRE_DATA};
            for (size_t j = 0; j < n; j++)
                p[j] = pattern(i, j);
            ck_assert_msg(sl_transport_send(t[0], &k, p, (uint32_t)n, SL_WIRE_BYTES, 1.0f,
                                            SL_SEND_LEND, -1) == SL_OK,
                          "frame %u: %s", i, sl_err_msg());
        }
        for (uint32_t i = b; i < b + BATCH; i++) {
            sl_wire_key_t k = {0, 0, i, 0, SL_WIRE_DATA};
            size_t got, n = mixed_size(i), bad = 0;
            ck_assert_msg(sl_transport_recv(t[1], &k, back, BIG, &got, TEST_WAIT_MS) == SL_OK,
                          "frame %u: %s", i, sl_err_msg());
            ck_assert_msg(sl_transport_pending(t[1]) == 0,
                          "frame %u: a later frame of the link came before it", i);
            ck_assert_uint_eq(got, n);
            for (size_t j = 0; j < n; j++)
                bad += back[j] != pattern(i, j); /* one check per frame: each is a write */
            ck_assert_msg(bad == 0, "frame %u: %zu bytes changed", i, bad);
        }
        ck_assert_msg(sl_transport_wait_sent(t[0], TEST_WAIT_MS) == SL_OK, "%s", sl_err_msg());
    }
    for (unsigned r = 1; r < SL_DROP_NREASONS; r++)
        ck_assert_uint_eq(sl_transport_dropped(t[1], r), 0);
    pair_destroy(t);
    free(lent);
    free(buf);
    free(back);
}
END_TEST

/* A lent payload is the caller's again only once its frame has left the emulated link:
 * wait_sent returns after its arrival time, and changing it then changes nothing. */
START_TEST(test_lent_held)
{
    enum { N = 1 << 20 };
    unsigned char *p = malloc(N), *back = malloc(N);
    sl_wire_key_t k = {0, 0, 0, 1, SL_WIRE_DATA}, rk = {0, 0, 0, 0, SL_WIRE_DATA};
    sl_transport_t *t[2];
    double before;
    size_t got;

    pair_new(t, 1e9, 100, 0);
    memset(p, 3, N);
    before = sl_clock_now();
    ck_assert_int_eq(sl_transport_send(t[0], &k, p, N, SL_WIRE_BYTES, 1.0f, SL_SEND_LEND, -1),
                     SL_OK);
    ck_assert_msg(sl_transport_wait_sent(t[0], TEST_WAIT_MS) == SL_OK, "%s", sl_err_msg());
    ck_assert_msg(sl_clock_now() >= before + 0.1 + (N + SL_WIRE_HEADER_BYTES) * 8.0 / 1e9,
                  "a lent payload given back %.4f s after the send, before its frame left",
                  sl_clock_now() - before);
    memset(p, 9, N);
    ck_assert_msg(sl_transport_recv(t[1], &rk, back, N, &got, TEST_WAIT_MS) == SL_OK, "%s",
                  sl_err_msg());
    ck_assert_uint_eq(got, N);
    ck_assert(back[0] == 3 && back[N - 1] == 3);
    pair_destroy(t);
    free(p);
    free(back);
}
END_TEST

/* The runs compared, emulated and not: an algorithm and its sync.overlap_steps (an
 * overlapped exchange is applied at a fixed step, whatever the link's speed). */
static const struct {
    const char *algorithm;
    int overlap;
} variants[] = {{"gossip-bmuf", 0}, {"allreduce", 0}, {"gossip-bmuf", 2}};

/* The parameters of the final model of a 2-node run of algorithm with overlap (*n of
 * them), emulated or not (extra: NULL-terminated --set words, or NULL). */
static float *
run_model(const char *bin, const char *data, const char *algorithm, int overlap, const char *run,
          const char *const *extra, size_t *n)
{
    char conf[700], dir[700], yaml[2048], path[800], out[4096], err[16384];
    const char *args[16];
    int nargs = 0, rc;
    float *model;

    snprintf(conf, sizeof conf, "%s/%s.yaml", tmp_root, run);
    snprintf(dir, sizeof dir, "%s/%s", tmp_root, run);
    snprintf(yaml, sizeof yaml,
             "run: {name: %s, dir: %s, log_every: 10, checkpoint_every: 0}\n"
             "data: {train: %s/brown/train.txt, vocab_size: 300, max_tokens: 8000,\n"
             "       cache_dir: %s/cache}\n"
             "model: {embedding: 8, layers: [{lstm: 8}]}\n"
             "train: {batch: 4, bptt: 8, max_steps: 24, eval_every_epoch: false,\n"
             "        optimizer: {type: adam, lr: 0.01, clip: 1}}\n"
             "sync: {algorithm: %s, period: 4, overlap_steps: %d}\n"
             "cluster: {rendezvous_timeout_ms: 20000}\n",
             run, dir, data, tmp_root, algorithm, overlap);
    test_write_file(conf, yaml, strlen(yaml));
    args[nargs++] = "run";
    args[nargs++] = conf;
    args[nargs++] = "-n";
    args[nargs++] = "2";
    args[nargs++] = "--quiet";
    for (int i = 0; extra && extra[i]; i++) {
        args[nargs++] = "--set";
        args[nargs++] = extra[i];
    }
    args[nargs] = NULL;
    rc = test_tool_run(bin, out, sizeof out, err, sizeof err, NULL, args);
    ck_assert_msg(rc == 0, "shoal run %s: exit %d: %s", run, rc, err);
    ck_assert_msg((strstr(err, "cluster.emulate is on") != NULL) == (extra != NULL),
                  "%s: the emulation warning %s", run, extra ? "is missing" : "without emulation");
    snprintf(path, sizeof path, "%s/model.bin", dir);
    model = test_model_params(path, n);
    ck_assert_msg(model != NULL, "%s is missing", path);
    return model;
}

START_TEST(test_run_same_bits)
{
    const char *const emulate[] = {"cluster.emulate.bandwidth=200mbit",
                                   "cluster.emulate.latency_ms=2", "cluster.emulate.jitter_ms=5",
                                   NULL};
    char bin[1024], data[1024], path[1100], plain[64], emulated[64];
    float *a, *b;
    size_t na, nb;

    if (!test_shoal_find(bin, sizeof bin))
        return;
    test_data_dir(data, sizeof data);
    snprintf(path, sizeof path, "%s/brown/train.txt", data);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "check_emulate: no %s; skipping the run\n", path);
        return;
    }
    snprintf(plain, sizeof plain, "plain-%s-%d", variants[_i].algorithm, variants[_i].overlap);
    snprintf(emulated, sizeof emulated, "emulated-%s-%d", variants[_i].algorithm,
             variants[_i].overlap);
    a = run_model(bin, data, variants[_i].algorithm, variants[_i].overlap, plain, NULL, &na);
    b = run_model(bin, data, variants[_i].algorithm, variants[_i].overlap, emulated, emulate, &nb);
    ck_assert_uint_eq(na, nb);
    ck_assert_uint_gt(na, 1000);
    ck_assert_msg(memcmp(a, b, na * sizeof *a) == 0,
                  "%s, overlap %d: the emulated run's model "
                  "differs",
                  variants[_i].algorithm, variants[_i].overlap);
    free(a);
    free(b);
}
END_TEST

START_TEST(test_bandwidth_syntax)
{
    static const struct {
        const char *s;
        double bits;
    } rates[] = {{"0", 0},         {"1gbit", 1e9},    {"2.5gbit", 2.5e9}, {"100mbit", 1e8},
                 {"800kbit", 8e5}, {"1000bit", 1000}, {"1tbit", 1e12},    {"0mbit", 0},
                 {"100", -1},      {"1gb", -1},       {"-1gbit", -1},     {"1 gbit", -1},
                 {"inf", -1},      {"gbit", -1},      {"", -1},           {"1Gbit", -1}};
    sl_config_t c;

    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
        ck_assert_msg(sl_config_bits_per_s(rates[i].s) == rates[i].bits, "'%s': %g, not %g",
                      rates[i].s, sl_config_bits_per_s(rates[i].s), rates[i].bits);
    sl_config_init(&c);
    ck_assert_int_eq(sl_config_set(&c, "cluster.emulate.bandwidth=10gb"), SL_ERR_CONFIG);
    ck_assert_msg(strstr(sl_err_msg(), "cluster.emulate.bandwidth") &&
                      strstr(sl_err_msg(), "1gbit") && strstr(sl_err_msg(), "10gb"),
                  "%s", sl_err_msg());
    ck_assert_int_eq(sl_config_set(&c, "cluster.emulate.latency_ms=-1"), SL_ERR_CONFIG);
    ck_assert_int_eq(sl_config_set(&c, "cluster.emulate.bandwidth=1gbit"), SL_OK);
    ck_assert_int_eq(sl_config_set(&c, "cluster.emulate.jitter_ms=2.5"), SL_OK);
    ck_assert(c.cluster.emulate.jitter_ms == 2.5);
    sl_config_fini(&c);
}
END_TEST

START_TEST(test_bad_options)
{
    sl_transport_opts_t o;
    sl_transport_t *t = NULL;

    sl_transport_opts_default(&o);
    ck_assert(o.emulate_bits_per_s == 0 && o.emulate_latency_ms == 0 &&
              o.emulate_jitter_ms == 0); /* off by default */
    o.size = 2;
    o.emulate_latency_ms = -1;
    ck_assert_int_eq(sl_transport_new(&t, &o), SL_ERR_INVALID);
    ck_assert_ptr_null(t);
    o.emulate_latency_ms = 0;
    o.emulate_bits_per_s = 1.0 / 0.0;
    ck_assert_int_eq(sl_transport_new(&t, &o), SL_ERR_INVALID);
    ck_assert(strstr(sl_err_msg(), "emulation") != NULL);
}
END_TEST

static Suite *
emulate_suite(void)
{
    Suite *s = suite_create("emulate");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");

    tcase_set_timeout(core, 300); /* a hang guard */
    tcase_add_loop_test(core, test_delivery_time, 0, (int)(sizeof timings / sizeof timings[0]));
    tcase_add_test(core, test_order_kept);
    tcase_add_test(core, test_lent_held);
    tcase_add_loop_test(core, test_run_same_bits, 0, (int)(sizeof variants / sizeof variants[0]));
    suite_add_tcase(s, core);
    tcase_add_test(limits, test_bandwidth_syntax);
    tcase_add_test(limits, test_bad_options);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main_in_tmp(emulate_suite(), tmp_root, "check_emulate");
}
