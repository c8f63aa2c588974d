/* Tests of shoal export and shoal train --init (src/node/sl_export.c,
 * src/common/sl_safetensors.c, src/model/sl_model_tensors.c): the safetensors file
 * taken apart here, without the library's reader (header length, names, dtypes, shapes,
 * offsets tiling the data, the values the model file holds), and its JSON file; export
 * then --init gives the same parameters, bit for bit, through the library and through
 * the command line; a version 4 model file is exported from its own metadata, from
 * another directory with the corpus and run gone, into the same two files as through
 * its configuration and corpus, and an older one through its configuration; bad and
 * truncated files are refused with one line that names them.
 * A tiny LSTMP model on a slice of Brown. */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <check.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sl_endian.h"
#include "common/sl_log.h"
#include "common/sl_safetensors.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "kernels/sl_backend.h"
#include "model/sl_model.h"
#include "node/sl_export.h"
#include "node/sl_train.h"

#include "test_tool.h"

static char tmp_root[] = "/tmp/shoal-check-export-XXXXXX";
static char data_dir[PATH_MAX];

enum { V = 502, E = 16, H0 = 16, P0 = 8, H1 = 12 };

/* The expected tensors of the tiny model, in file order. */
static const struct {
    const char *name;
    int ndim;
    uint64_t shape[2];
} want[] = {
    {"encoder.weight", 2, {V, E}},
    {"rnns.0.weight_ih_l0", 2, {4 * H0, E}},
    {"rnns.0.weight_hh_l0", 2, {4 * H0, P0}},
    {"rnns.0.bias_ih_l0", 1, {4 * H0}},
    {"rnns.0.bias_hh_l0", 1, {4 * H0}},
    {"rnns.0.weight_hr_l0", 2, {P0, H0}},
    {"rnns.1.weight_ih_l0", 2, {4 * H1, P0}},
    {"rnns.1.weight_hh_l0", 2, {4 * H1, H1}},
    {"rnns.1.bias_ih_l0", 1, {4 * H1}},
    {"rnns.1.bias_hh_l0", 1, {4 * H1}},
    {"decoder.weight", 2, {V, H1}},
    {"decoder.bias", 1, {V}},
};
#define NWANT ((int)(sizeof want / sizeof want[0]))

/* A trained tiny LSTMP model (layers 16/8 and 12) in <root>/<run>/model.bin. */
static void
trained(sl_config_t *cfg, const char *run, sl_train_result_t *res)
{
    test_tiny_config(cfg, tmp_root, data_dir, run,
                     "model.layers=[{lstm: 16, projection: 8}, "
                     "{lstm: 12}]",
                     "train.max_steps=30", NULL);
    test_train_ok(cfg, 0, res);
}

/* shoal ARGS..., its stdout and stderr, log lines from level (SHOAL_LOG) on; returns
 * the exit status. */
static int
shoal_log(const char *level, char *out, size_t out_cap, char *err, size_t err_cap,
          const char *const *args)
{
    char bin[PATH_MAX];

    ck_assert_msg(test_shoal_find(bin, sizeof bin), "shoal is not built");
    setenv("SHOAL_LOG", level, 1);
    return test_tool_run(bin, out, out_cap, err, err_cap, NULL, args);
}

/* shoal ARGS... with warnings and errors only. */
static int
shoal(char *out, size_t out_cap, char *err, size_t err_cap, const char *const *args)
{
    return shoal_log("warn", out, out_cap, err, err_cap, args);
}

/* The export of res's model by the command line, config found beside the model. */
static void
export_cli(const sl_train_result_t *res, const char *out)
{
    char o[4096], e[4096];
    const char *args[] = {"export", res->model, "--format", "safetensors", out, NULL};
    int rc = shoal(o, sizeof o, e, sizeof e, args);

    ck_assert_msg(rc == 0, "shoal export: exit %d: %s", rc, e);
    ck_assert_msg(strstr(o, "12 tensors") != NULL, "%s", o);
}

/* "name":{"dtype":"F32","shape":[...],"data_offsets":[b,e]} in the header text. */
static void
parse_entry(const char *header, const char *name, char *dtype, uint64_t *shape, int *ndim,
            uint64_t *b, uint64_t *e)
{
    char key[96];
    const char *p;
    int used;

    snprintf(key, sizeof key, "\"%s\":{\"dtype\":\"", name);
    p = strstr(header, key);
    ck_assert_msg(p != NULL, "no tensor %s in the header", name);
    p += strlen(key);
    ck_assert_int_eq(sscanf(p, "%15[^\"]\",\"shape\":[%n", dtype, &used), 1);
    p += used;
    *ndim = 0;
    while (*p != ']') {
        ck_assert_int_lt(*ndim, 2);
        shape[(*ndim)++] = strtoull(p, (char **)&p, 10);
        if (*p == ',')
            p++;
    }
    ck_assert_int_eq(sscanf(p, "],\"data_offsets\":[%" SCNu64 ",%" SCNu64 "]}", b, e), 2);
}

START_TEST(test_export_header)
{
    sl_config_t cfg;
    sl_train_result_t res;
    char out[PATH_MAX], json_path[PATH_MAX], *file, *json, *header;
    size_t len, nparams, at = 0;
    uint64_t hlen, next = 0;
    float *params;

    trained(&cfg, "hdr", &res);
    snprintf(out, sizeof out, "%s/tiny.safetensors", tmp_root);
    export_cli(&res, out);
    file = test_read_file(out, &len);
    ck_assert_ptr_nonnull(file);
    params = test_model_params(res.model, &nparams);

    /* 8-byte little-endian length, a JSON object padded to 8 bytes, then the data */
    ck_assert_uint_ge(len, 8);
    hlen = sl_get_u64((const unsigned char *)file);
    ck_assert_uint_le(8 + hlen, len);
    ck_assert_uint_eq(hlen % 8, 0);
    header = strndup(file + 8, hlen);
    ck_assert(header[0] == '{');
    ck_assert(strstr(header, "\"__metadata__\":{\"format\":\"pt\"") != NULL);
    for (int i = 0; i < NWANT; i++) {
        char dtype[16];
        uint64_t shape[2], b, e, count;
        int ndim;
        const float *from;

        parse_entry(header, want[i].name, dtype, shape, &ndim, &b, &e);
        ck_assert_str_eq(dtype, "F32");
        ck_assert_int_eq(ndim, want[i].ndim);
        ck_assert_uint_eq(shape[0], want[i].shape[0]);
        if (ndim == 2)
            ck_assert_uint_eq(shape[1], want[i].shape[1]);
        count = ndim == 2 ? shape[0] * shape[1] : shape[0];
        /* in file order, each tensor where the one before ended */
        ck_assert_uint_eq(b, next);
        ck_assert_uint_eq(e - b, 4 * count);
        next = e;
        /* the values: the model file's parameters in its own order, but for bias_hh */
        from = (const float *)(const void *)(file + 8 + hlen + b);
        if (strstr(want[i].name, "bias_hh")) {
            for (uint64_t k = 0; k < count; k++)
                ck_assert_msg(from[k] == 0.0f, "%s[%" PRIu64 "] is not 0", want[i].name, k);
        } else {
            ck_assert_uint_le(at + count, nparams);
            ck_assert_msg(memcmp(from, params + at, 4 * count) == 0, "%s: other values",
                          want[i].name);
            at += count;
        }
    }
    ck_assert_uint_eq(at, nparams);          /* every parameter, once */
    ck_assert_uint_eq(8 + hlen + next, len); /* nothing after the last tensor */

    /* the JSON file: vocabulary in id order, settings, how shoal evaluates */
    ck_assert_int_eq(sl_export_json_path(out, json_path, sizeof json_path), SL_OK);
    json = test_read_file(json_path, NULL);
    ck_assert_ptr_nonnull(json);
    ck_assert(strstr(json, "\"weights\": \"tiny.safetensors\"") != NULL);
    ck_assert(strstr(json, "\"layers\": [{\"lstm\": 16, \"projection\": 8}, {\"lstm\": 12, "
                           "\"projection\": 0}]") != NULL);
    ck_assert(strstr(json, "\"level\": \"word\"") != NULL);
    ck_assert(strstr(json, "\"eval\": {\"streams\": 10, \"bptt\": 8}") != NULL);
    ck_assert_int_eq((int)test_json_num(json, "vocab"), V);
    ck_assert_int_eq((int)test_json_num(json, "step"), 30);
    ck_assert(strstr(json, "\"vocab\": [\n    \"<unk>\",\n    \"the\",\n") != NULL);
    {
        int words = 0;
        for (const char *p = strstr(json, "\"vocab\": ["); (p = strstr(p + 1, "\n    \""));)
            words++;
        ck_assert_int_eq(words, V);
    }
    free(json);
    free(header);
    free(params);
    free(file);
    sl_config_fini(&cfg);
}
END_TEST

/* The parameters of a model built for cfg (vocab V) after importing path. */
static sl_status_t
imported(const sl_config_t *cfg, const char *path, float **host, size_t *n)
{
    sl_backend_t *be = NULL;
    sl_lm_t *lm = NULL;
    sl_status_t st;

    ck_assert_int_eq(sl_backend_cpu_new(&be, 1), SL_OK);
    ck_assert_int_eq(sl_lm_new(&lm, cfg, V, 1, 1, be), SL_OK);
    st = sl_import_safetensors(path, cfg, V, be, lm);
    if (st == SL_OK && host) {
        *n = sl_lm_nparams(lm);
        *host = malloc(*n * sizeof **host);
        ck_assert_int_eq(be->ops->to_host(be->ctx, *host, sl_lm_params(lm), *n * 4), SL_OK);
    }
    sl_lm_destroy(&lm);
    sl_backend_destroy(&be);
    return st;
}

START_TEST(test_init_round_trip)
{
    sl_config_t cfg;
    sl_train_result_t res;
    char out[PATH_MAX], conf[PATH_MAX], dir_set[PATH_MAX + 16], model2[PATH_MAX];
    char o[8192], e[8192];
    size_t n, m, k;
    float *got, *orig, *again;
    int rc;

    trained(&cfg, "trip", &res);
    snprintf(out, sizeof out, "%s/trip.safetensors", tmp_root);
    export_cli(&res, out);
    orig = test_model_params(res.model, &n);
    ck_assert_msg(imported(&cfg, out, &got, &m) == SL_OK, "%s", sl_err_msg());
    ck_assert_uint_eq(m, n);
    ck_assert_msg(memcmp(got, orig, n * 4) == 0, "import of the export: other parameters");

    /* shoal train --init: a step so small that no weight moves (lr 1e-30) leaves the
     * run's model.bin equal to the one exported */
    snprintf(conf, sizeof conf, "%s/config.yaml", res.run_dir);
    snprintf(dir_set, sizeof dir_set, "run.dir=%s/trip2", tmp_root);
    {
        const char *args[] = {"train",   conf,
                              "--init",  out,
                              "--set",   dir_set,
                              "--set",   "train.max_steps=1",
                              "--set",   "train.optimizer.lr=1e-30",
                              "--quiet", NULL};
        rc = shoal(o, sizeof o, e, sizeof e, args);
        ck_assert_msg(rc == 0, "shoal train --init: exit %d: %s", rc, e);
    }
    snprintf(model2, sizeof model2, "%s/trip2/model.bin", tmp_root);
    again = test_model_params(model2, &k);
    ck_assert_uint_eq(k, n);
    ck_assert_msg(memcmp(again, orig, n * 4) == 0, "shoal train --init: other parameters");
    /* and without --init the same run starts elsewhere (the check above means something) */
    {
        const char *args[] = {"train",       conf,
                              "--set",       dir_set,
                              "--set",       "train.max_steps=1",
                              "--set",       "train.optimizer.lr=1e-30",
                              "--no-resume", "--quiet",
                              NULL};
        ck_assert_int_eq(shoal(o, sizeof o, e, sizeof e, args), 0);
        free(again);
        again = test_model_params(model2, &k);
        ck_assert(memcmp(again, orig, n * 4) != 0);
    }
    free(again);
    free(got);
    free(orig);
    sl_config_fini(&cfg);
}
END_TEST

/* <root>/<dir>/ made, and <root>/<dir>/<name> into buf. */
static void
path_in(char *buf, size_t cap, const char *dir, const char *name)
{
    snprintf(buf, cap, "%s/%s", tmp_root, dir);
    mkdir(buf, 0755);
    snprintf(buf, cap, "%s/%s/%s", tmp_root, dir, name);
}

static void
copy_file(const char *from, const char *to)
{
    size_t len;
    char *data = test_read_file(from, &len);

    ck_assert_msg(data != NULL, "cannot read %s", from);
    test_write_file(to, data, len);
    free(data);
}

/* The two files of the export at out are those at ref, byte for byte. */
static void
assert_same_export(const char *out, const char *ref)
{
    char json[PATH_MAX], json_ref[PATH_MAX], *a, *b;
    size_t alen, blen;

    a = test_read_file(out, &alen);
    b = test_read_file(ref, &blen);
    ck_assert_msg(a && b, "%s or %s is missing", out, ref);
    ck_assert_msg(alen == blen && memcmp(a, b, alen) == 0, "%s differs from %s", out, ref);
    free(a);
    free(b);
    ck_assert_int_eq(sl_export_json_path(out, json, sizeof json), SL_OK);
    ck_assert_int_eq(sl_export_json_path(ref, json_ref, sizeof json_ref), SL_OK);
    a = test_read_file(json, &alen);
    b = test_read_file(json_ref, &blen);
    ck_assert_msg(a && b, "%s or %s is missing", json, json_ref);
    ck_assert_msg(alen == blen && memcmp(a, b, alen) == 0, "%s:\n%s\ndiffers from %s:\n%.2000s",
                  json, a, json_ref, b);
    free(a);
    free(b);
}

/* A version 4 model file needs neither configuration nor corpus: exported from another
 * directory with the corpus, the token cache and the run directory removed, it gives
 * the bytes of the export through its configuration and corpus (the path of older
 * files); --config is then not used, with a warning. A version 1 file of the same
 * weights goes through the configuration, saying so, into the same files again, and
 * fails in one line once the corpus is gone. */
START_TEST(test_export_without_corpus)
{
    sl_config_t cfg;
    sl_train_result_t res;
    sl_export_result_t er;
    char corpus[PATH_MAX], from[PATH_MAX], to[PATH_MAX], cache[PATH_MAX + 16], model[PATH_MAX];
    char conf[PATH_MAX], v1[PATH_MAX], ref[PATH_MAX], out[PATH_MAX], o[8192], e[8192];
    static const char *const split[] = {"train", "valid", "test"};
    unsigned char *data, *old;
    size_t len, oldlen;

    /* a private copy of the corpus and cache, to take away */
    for (int i = 0; i < 3; i++) {
        snprintf(from, sizeof from, "%s/brown/%s.txt", data_dir, split[i]);
        path_in(to, sizeof to, "corpus", "brown");
        mkdir(to, 0755);
        snprintf(to, sizeof to, "%s/corpus/brown/%s.txt", tmp_root, split[i]);
        copy_file(from, to);
    }
    snprintf(corpus, sizeof corpus, "%s/corpus", tmp_root);
    snprintf(cache, sizeof cache, "data.cache_dir=%s/own-cache", tmp_root);
    test_tiny_config(&cfg, tmp_root, corpus, "own",
                     "model.layers=[{lstm: 16, projection: 8}, {lstm: 12}]", "train.max_steps=30",
                     cache, NULL);
    test_train_ok(&cfg, 0, &res);
    path_in(model, sizeof model, "kept", "model.bin");
    copy_file(res.model, model);
    snprintf(conf, sizeof conf, "%s/config.yaml", res.run_dir);

    /* through the configuration and corpus, as for a file without metadata */
    path_in(ref, sizeof ref, "ref", "m.safetensors");
    ck_assert_msg(sl_export_safetensors(&cfg, model, ref, PACKAGE_VERSION, &er) == SL_OK, "%s",
                  sl_err_msg());
    ck_assert_int_eq(er.tensors, NWANT);
    /* the command line with them all there, --config given: the file's own, a warning */
    path_in(out, sizeof out, "with", "m.safetensors");
    {
        const char *args[] = {"export",   model, "--format", "safetensors",
                              "--config", conf,  out,        NULL};
        ck_assert_msg(shoal(o, sizeof o, e, sizeof e, args) == 0, "%s", e);
        ck_assert_msg(strstr(e, "carries its own vocabulary and configuration: --config is not "
                                "used") != NULL,
                      "%s", e);
    }
    assert_same_export(out, ref);

    /* a version 1 file of the same weights: through config.yaml, in one info line */
    data = (unsigned char *)test_read_file(model, &len);
    old = test_ckpt_to_version1(data, len, &oldlen);
    path_in(v1, sizeof v1, "v1", "model.bin");
    test_write_file(v1, old, oldlen);
    free(old);
    free(data);
    path_in(out, sizeof out, "old", "m.safetensors");
    {
        const char *args[] = {"export", v1, "--format", "safetensors", "--config", conf, out, NULL};
        ck_assert_msg(shoal_log("info", o, sizeof o, e, sizeof e, args) == 0, "%s", e);
    }
    snprintf(from, sizeof from,
             "export: info: %s has no metadata (format version 1): vocabulary from the corpus of "
             "%s\n",
             v1, conf);
    ck_assert_msg(strstr(e, from) != NULL, "want '%s' in:\n%s", from, e);
    /* the JSON names the file it came from: give the old one the new one's name */
    copy_file(v1, model);
    {
        const char *args[] = {"export",   model, "--format", "safetensors",
                              "--config", conf,  out,        NULL};
        ck_assert_msg(shoal(o, sizeof o, e, sizeof e, args) == 0, "%s", e);
    }
    assert_same_export(out, ref);
    copy_file(res.model, model);

    /* no corpus, no cache, no run directory; another working directory */
    test_remove_tree(corpus);
    snprintf(from, sizeof from, "%s/own-cache", tmp_root);
    test_remove_tree(from);
    test_remove_tree(res.run_dir);
    path_in(from, sizeof from, "elsewhere", "");
    ck_assert_int_eq(chdir(from), 0);
    path_in(out, sizeof out, "without", "m.safetensors");
    {
        const char *args[] = {"export", model, "--format", "safetensors", out, NULL};
        ck_assert_msg(shoal(o, sizeof o, e, sizeof e, args) == 0, "%s", e);
        ck_assert_str_eq(e, "");
        ck_assert_msg(strstr(o, "(step 30): 12 tensors") != NULL, "%s", o);
    }
    assert_same_export(out, ref);
    /* and the old file cannot be exported any more: its vocabulary was the corpus's */
    {
        const char *args[] = {"export", v1, "--format", "safetensors", "--config", conf, out, NULL};
        ck_assert_int_eq(shoal(o, sizeof o, e, sizeof e, args), 2);
        ck_assert_msg(strncmp(e, "shoal: export: ", 15) == 0 && strstr(e, conf) &&
                          strchr(e, '\n') == e + strlen(e) - 1,
                      "%s", e);
    }
    {
        const char *args[] = {"export", v1, "--format", "safetensors", out, NULL};
        ck_assert_int_eq(shoal(o, sizeof o, e, sizeof e, args), 2);
        ck_assert_msg(strstr(e, "has no metadata (format version 1) and there is no config.yaml "
                                "beside it or one folder up: give --config CONF.yaml") &&
                          strchr(e, '\n') == e + strlen(e) - 1,
                      "%s", e);
    }
    sl_config_fini(&cfg);
}
END_TEST

/* data (len bytes) with the first from in its header replaced by to (same length). */
static char *
mutated(const char *data, size_t len, const char *from, const char *to)
{
    char *copy = malloc(len), *p;
    uint64_t hlen = sl_get_u64((const unsigned char *)data);

    ck_assert_uint_eq(strlen(from), strlen(to));
    memcpy(copy, data, len);
    p = memmem(copy + 8, hlen, from, strlen(from));
    ck_assert_msg(p != NULL, "no %s in the header", from);
    memcpy(p, to, strlen(to));
    return copy;
}

/* Writes len bytes of data to <root>/bad.safetensors, imports it into a model of cfg:
 * refused with one line that starts with the file's name and holds what. */
static void
assert_refused(const sl_config_t *cfg, const void *data, size_t len, const char *what)
{
    char path[PATH_MAX];
    const char *msg;

    snprintf(path, sizeof path, "%s/bad.safetensors", tmp_root);
    test_write_file(path, data, len);
    ck_assert_msg(imported(cfg, path, NULL, NULL) != SL_OK, "accepted (%s)", what);
    msg = sl_err_msg();
    ck_assert_msg(strchr(msg, '\n') == NULL, "not one line: %s", msg);
    ck_assert_msg(strncmp(msg, path, strlen(path)) == 0, "does not name the file: %s", msg);
    ck_assert_msg(strstr(msg, what) != NULL, "'%s' is not '%s'", msg, what);
}

START_TEST(test_bad_files)
{
    sl_config_t cfg, other;
    sl_train_result_t res;
    char out[PATH_MAX], *good, *bad, *ckpt;
    size_t len, clen;
    uint64_t hlen;
    unsigned char huge[16];

    trained(&cfg, "bad", &res);
    snprintf(out, sizeof out, "%s/good.safetensors", tmp_root);
    export_cli(&res, out);
    good = test_read_file(out, &len);
    ck_assert_ptr_nonnull(good);
    hlen = sl_get_u64((const unsigned char *)good);
    ck_assert_msg(imported(&cfg, out, NULL, NULL) == SL_OK, "%s", sl_err_msg());

    /* truncated anywhere */
    assert_refused(&cfg, good, 0, "truncated: 0 bytes");
    assert_refused(&cfg, good, 5, "truncated: 5 bytes");
    assert_refused(&cfg, good, 8 + hlen / 2, "is beyond the file's");
    assert_refused(&cfg, good, 8 + hlen, "ends at byte");
    assert_refused(&cfg, good, len - 1, "(file truncated?)");
    /* too long, or a length that is no length */
    bad = malloc(len + 1);
    memcpy(bad, good, len);
    bad[len] = 0;
    assert_refused(&cfg, bad, len + 1, "1 bytes of data after the last tensor");
    free(bad);
    memcpy(huge, good, 16);
    sl_put_u64(huge, (uint64_t)1 << 40);
    assert_refused(&cfg, huge, sizeof huge, "100 MiB limit");
    snprintf(out, sizeof out, "%s", res.model); /* a model.bin is not safetensors */
    ckpt = test_read_file(out, &clen);
    assert_refused(&cfg, ckpt, clen, "header length");
    free(ckpt);

    /* a broken header */
    bad = mutated(good, len, "\"data_offsets\"", "\"data_offsetz\"");
    assert_refused(&cfg, bad, len, "unexpected or repeated key 'data_offsetz'");
    free(bad);
    bad = mutated(good, len, "\"shape\":[", "\"shape\":(");
    assert_refused(&cfg, bad, len, "expected '['");
    free(bad);
    bad = mutated(good, len, "rnns.1.bias_hh_l0", "rnns.1.bias_ih_l0");
    assert_refused(&cfg, bad, len, "tensor 'rnns.1.bias_ih_l0' given twice");
    free(bad);
    bad = mutated(good, len, "\"dtype\":\"F32\"", "\"dtype\":\"F16\"");
    assert_refused(&cfg, bad, len, "its dtype and shape need");
    free(bad);
    bad = mutated(good, len, "\"dtype\":\"F32\"", "\"dtype\":\"X32\"");
    assert_refused(&cfg, bad, len, "unknown dtype 'X32'");
    free(bad);

    bad = mutated(good, len, "\"decoder.bias\"", "\"decode\\nbias\"");
    assert_refused(&cfg, bad, len, "control character in a name");
    free(bad);

    /* sound files that do not fit the model */
    bad = mutated(good, len, "\"dtype\":\"F32\"", "\"dtype\":\"I32\"");
    assert_refused(&cfg, bad, len, "tensor 'encoder.weight' is I32; shoal imports F32 only");
    free(bad);
    bad = mutated(good, len, "\"decoder.bias\"", "\"decoder.bixs\"");
    assert_refused(&cfg, bad, len, "no tensor 'decoder.bias'");
    free(bad);
    test_tiny_config(&other, tmp_root, data_dir, "bad", "model.embedding=32",
                     "model.layers=[{lstm: 16, projection: 8}, {lstm: 12}]", NULL);
    assert_refused(&other, good, len,
                   "tensor 'encoder.weight' has shape [502, 16]; the config's model needs "
                   "[502, 32]");
    sl_config_fini(&other);
    free(good);
    sl_config_fini(&cfg);
}
END_TEST

/* Whatever a file holds, the reader says no in one line that names it, or takes a file
 * that checks out: cut at every length, bytes of the header set at random. */
START_TEST(test_damaged_files)
{
    sl_config_t cfg;
    sl_train_result_t res;
    sl_st_file_t f;
    char out[PATH_MAX], path[PATH_MAX], *good, *bad;
    size_t len;
    uint64_t hlen;
    int taken = 0;

    trained(&cfg, "damaged", &res);
    snprintf(out, sizeof out, "%s/damaged.safetensors", tmp_root);
    export_cli(&res, out);
    good = test_read_file(out, &len);
    ck_assert_ptr_nonnull(good);
    hlen = sl_get_u64((const unsigned char *)good);
    snprintf(path, sizeof path, "%s/damaged-copy.safetensors", tmp_root);
    for (size_t cut = 0; cut < len; cut += cut < 8 + hlen ? 1 : 997) {
        test_write_file(path, good, cut);
        ck_assert_msg(sl_st_read(path, &f) != SL_OK, "a file cut at %zu bytes taken", cut);
        ck_assert_msg(strchr(sl_err_msg(), '\n') == NULL && strstr(sl_err_msg(), path),
                      "cut at %zu: %s", cut, sl_err_msg());
    }
    bad = malloc(len);
    srand(7);
    for (int i = 0; i < 3000; i++) {
        memcpy(bad, good, len);
        for (int k = 1 + rand() % 3; k > 0; k--)
            bad[8 + (size_t)rand() % hlen] = (char)(rand() % 256);
        test_write_file(path, bad, len);
        if (sl_st_read(path, &f) == SL_OK) {
            taken++; /* e.g. a digit of a value for another, or padding */
            sl_st_fini(&f);
            continue;
        }
        ck_assert_msg(strchr(sl_err_msg(), '\n') == NULL &&
                          strncmp(sl_err_msg(), path, strlen(path)) == 0,
                      "not one line naming the file: %s", sl_err_msg());
    }
    ck_assert_int_lt(taken, 3000);
    free(bad);
    free(good);
    sl_config_fini(&cfg);
}
END_TEST

/* The command line: a bad --init file, a bad export; each one line and an exit status. */
START_TEST(test_bad_files_cli)
{
    sl_config_t cfg;
    sl_train_result_t res;
    char conf[PATH_MAX], bad[PATH_MAX], dir_set[PATH_MAX + 16], o[4096], e[4096];
    int rc;

    trained(&cfg, "cli", &res);
    snprintf(conf, sizeof conf, "%s/config.yaml", res.run_dir);
    snprintf(bad, sizeof bad, "%s/short.safetensors", tmp_root);
    test_write_file(bad, "\x10\0\0\0\0\0\0\0{\"a\":", 13);
    snprintf(dir_set, sizeof dir_set, "run.dir=%s/cli2", tmp_root);
    {
        const char *args[] = {"train", conf, "--init", bad, "--set", dir_set, "--quiet", NULL};
        rc = shoal(o, sizeof o, e, sizeof e, args);
    }
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strncmp(e, "shoal: ", 7) == 0 && strchr(e, '\n') == e + strlen(e) - 1,
                  "not one line: %s", e);
    ck_assert_msg(strstr(e, bad) && strstr(e, "beyond the file's 13 bytes"), "%s", e);
    {
        const char *args[] = {"export", res.model, bad, NULL};
        ck_assert_int_eq(shoal(o, sizeof o, e, sizeof e, args), 2);
        ck_assert_msg(strstr(e, "missing --format safetensors") != NULL, "%s", e);
    }
    {
        const char *args[] = {"export", res.model, "--format", "onnx", bad, NULL};
        ck_assert_int_eq(shoal(o, sizeof o, e, sizeof e, args), 2);
        ck_assert_msg(strstr(e, "--format must be safetensors, not onnx") != NULL, "%s", e);
    }
    {
        const char *args[] = {"export",   bad,  "--format",      "safetensors",
                              "--config", conf, "x.safetensors", NULL};
        ck_assert_int_eq(shoal(o, sizeof o, e, sizeof e, args), 1);
        ck_assert_msg(strchr(e, '\n') == e + strlen(e) - 1 && strstr(e, "bad magic"), "%s", e);
    }
    sl_config_fini(&cfg);
}
END_TEST

/* Files in dir whose names hold ".tmp." (what an interrupted atomic write leaves). */
static int
count_temps(const char *dir)
{
    char cmd[PATH_MAX + 64];

    snprintf(cmd, sizeof cmd, "exit $(ls -a '%s' | grep -c '[.]tmp[.]')", dir);
    return WEXITSTATUS(system(cmd));
}

/* path holds expect (len bytes). */
static void
assert_file_is(const char *path, const char *expect, size_t len)
{
    size_t got;
    char *data = test_read_file(path, &got);

    ck_assert_msg(data && got == len && memcmp(data, expect, len) == 0, "%s changed", path);
    free(data);
}

/* A failed export changes nothing: writes that fail (the file size limited, as a full
 * disk would: SIGXFSZ ignored, so write says EFBIG) or a directory where the JSON file
 * goes leave the earlier pair (stand-ins here) byte for byte, and no temp file; an OUT
 * that is the model file itself is refused. */
START_TEST(test_failed_export_keeps_files)
{
    static const char old_w[] = "earlier weights", old_j[] = "earlier json";
    sl_config_t cfg;
    sl_train_result_t res;
    char out[PATH_MAX], json[PATH_MAX], bin[PATH_MAX], limit[128], o[4096], e[4096], *model;
    size_t mlen;
    struct stat sb;

    trained(&cfg, "kept", &res);
    path_in(out, sizeof out, "pair", "kept.safetensors");
    path_in(json, sizeof json, "pair", "kept.json");
    export_cli(&res, out);
    ck_assert(stat(out, &sb) == 0 && sb.st_size > 4096);
    test_write_file(out, old_w, strlen(old_w));
    test_write_file(json, old_j, strlen(old_j));
    model = test_read_file(res.model, &mlen);
    ck_assert(model && test_shoal_find(bin, sizeof bin));
    /* in blocks of 512 (dash) or 1024 bytes (bash): below the weights' size either way */
    snprintf(limit, sizeof limit, "trap '' XFSZ; ulimit -f %ld; exec \"$0\" \"$@\"",
             (long)sb.st_size / 4096);
    {
        const char *args[] = {"-c",       limit,         bin, "export", res.model,
                              "--format", "safetensors", out, NULL};
        ck_assert_int_eq(test_tool_run("/bin/sh", o, sizeof o, e, sizeof e, NULL, args), 1);
        ck_assert_msg(strstr(e, "File too large") && strchr(e, '\n') == e + strlen(e) - 1, "%s", e);
    }
    assert_file_is(out, old_w, strlen(old_w));
    assert_file_is(json, old_j, strlen(old_j));
    ck_assert_int_eq(unlink(json), 0);
    ck_assert_int_eq(mkdir(json, 0700), 0);
    {
        const char *args[] = {"export", res.model, "--format", "safetensors", out, NULL};
        ck_assert_int_eq(shoal(o, sizeof o, e, sizeof e, args), 1);
        ck_assert_msg(strstr(e, "kept.json: is a directory, not a regular file"), "%s", e);
    }
    assert_file_is(out, old_w, strlen(old_w));
    ck_assert_int_eq(rmdir(json), 0);
    {
        const char *args[] = {"export", res.model, "--format", "safetensors", res.model, NULL};
        ck_assert_int_eq(shoal(o, sizeof o, e, sizeof e, args), 1);
        ck_assert_msg(strstr(e, "is the model file"), "%s", e);
    }
    assert_file_is(res.model, model, mlen);
    path_in(out, sizeof out, "pair", "");
    ck_assert_int_eq(count_temps(out), 0);
    ck_assert_int_eq(count_temps(res.run_dir), 0);
    free(model);
    sl_config_fini(&cfg);
}
END_TEST

static Suite *
export_suite(void)
{
    Suite *s = suite_create("export");
    TCase *core = tcase_create("core");
    TCase *limits = tcase_create("limits");

    tcase_set_timeout(core, 300);
    tcase_set_timeout(limits, 300);
    tcase_add_test(core, test_export_header);
    tcase_add_test(core, test_init_round_trip);
    tcase_add_test(core, test_export_without_corpus);
    tcase_add_test(limits, test_bad_files);
    tcase_add_test(limits, test_bad_files_cli);
    tcase_add_test(limits, test_damaged_files);
    tcase_add_test(limits, test_failed_export_keeps_files);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    test_data_dir_absolute(data_dir, sizeof data_dir);
    sl_log_set_level(SL_LOG_WARN);
    return test_main_in_tmp(export_suite(), tmp_root, "check_export");
}
