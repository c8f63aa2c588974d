/* Unit tests of src/config's errors: every bad YAML file and --set rejected with its
 * exact message (file:line:column, "did you mean"), a failure that changes nothing,
 * validation across keys, file errors, and the limits of numbers and of text (long
 * values cut, invalid UTF-8 placed, anchors, aliases, yes/no). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sl_status.h"
#include "config/sl_config.h"

#include "test_tool.h"

typedef struct {
    const char *text;
    const char *message;
} bad_case_t;

static const bad_case_t bad_yaml[] = {
    /* unknown keys, with and without a suggestion */
    {"train: {optimiser: {lr: 1}}",
     "x.yaml:1:9: unknown key 'optimiser' in 'train' (did you mean 'optimizer'?)"},
    {"train:\n  optimizer:\n    lr: 1\n    momentum: 0.9\n",
     "x.yaml:4:5: unknown key 'momentum' in 'train.optimizer' (expected one of: type, lr, "
     "clip, beta1, beta2, eps, initial_accumulator)"},
    {"trian:\n  batch: 1\n",
     "x.yaml:1:1: unknown key 'trian' at top level (did you mean 'train'?)"},
    {"train: {optimizer: {init: 0}}",
     "x.yaml:1:21: unknown key 'init' in 'train.optimizer' (did you mean 'initial_accumulator'?)"},
    {"model: {outptu: {type: full}}",
     "x.yaml:1:9: unknown key 'outptu' in 'model' (did you mean 'output'?)"},
    {"train.batch: 5",
     "x.yaml:1:1: unknown key 'train.batch' at top level (expected one of: run, data, model, "
     "train, cluster, topology, sync, embedding, device, precision, device_options)"},
    /* wrong types */
    {"run:\n  name: x\ntrain:\n  batch: lots\n",
     "x.yaml:4:10: 'train.batch' must be an integer, got 'lots'"},
    {"train: {batch: {a: 1}}", "x.yaml:1:16: 'train.batch' must be an integer, got a mapping"},
    {"train:\n  batch:\n", "x.yaml:2:9: 'train.batch' must be an integer, got nothing"},
    {"train: {epochs: 1.5}", "x.yaml:1:17: 'train.epochs' must be an integer, got '1.5'"},
    {"train: {epochs: 1e3}", "x.yaml:1:17: 'train.epochs' must be an integer, got '1e3'"},
    {"run: {seed: -1}", "x.yaml:1:13: 'run.seed' must be a non-negative integer, got '-1'"},
    {"model: {dropout: .inf}", "x.yaml:1:18: 'model.dropout' must be a number, got '.inf'"},
    {"sync: {block_momentum: Auto}",
     "x.yaml:1:24: 'sync.block_momentum' must be a number or auto, got 'Auto'"},
    {"model: {dropout: auto}", "x.yaml:1:18: 'model.dropout' must be a number, got 'auto'"},
    {"run: {resume: maybe}", "x.yaml:1:15: 'run.resume' must be true or false, got 'maybe'"},
    {"run: {name: [a, b]}", "x.yaml:1:13: 'run.name' must be a string, got a list"},
    {"train: 5", "x.yaml:1:8: 'train' must be a mapping, got '5'"},
    {"train: {optimizer: sgd}", "x.yaml:1:20: 'train.optimizer' must be a mapping, got 'sgd'"},
    /* out of range */
    {"train: {batch: 0}", "x.yaml:1:16: 'train.batch' must be at least 1, got 0"},
    {"train: {batch: 2147483648}",
     "x.yaml:1:16: 'train.batch' must be at most 2147483647, got 2147483648"},
    {"train: {bptt: 10001}", "x.yaml:1:15: 'train.bptt' must be at most 10000, got 10001"},
    {"model: {dropout: 1.0}", "x.yaml:1:18: 'model.dropout' must be less than 1, got 1.0"},
    {"model: {init_range: 0}", "x.yaml:1:21: 'model.init_range' must be greater than 0, got 0"},
    {"data: {valid_fraction: -0.1}",
     "x.yaml:1:24: 'data.valid_fraction' must be at least 0, got -0.1"},
    {"train: {schedule: {decay: 1.5}}",
     "x.yaml:1:27: 'train.schedule.decay' must be at most 1, got 1.5"},
    {"run: {name: \"\"}", "x.yaml:1:13: 'run.name' must not be empty"},
    /* enums and fixed choices */
    {"data:\n  level: byte\n", "x.yaml:2:10: 'data.level' must be one of: word, char (got 'byte')"},
    {"train: {optimizer: {type: rmsprop}}",
     "x.yaml:1:27: 'train.optimizer.type' must be one of: sgd, adagrad, adam (got 'rmsprop')"},
    {"model: {output: {type: [full]}}",
     "x.yaml:1:24: 'model.output.type' must be one of: full, sampled (got a list)"},
    {"device: gpu", "x.yaml:1:9: 'device' must be cpu, cuda or cuda:N (got 'gpu')"},
    {"device: cuda:x", "x.yaml:1:9: 'device' must be cpu, cuda or cuda:N (got 'cuda:x')"},
    {"precision: fp8", "x.yaml:1:12: 'precision' must be one of: fp32, bf16, fp16 (got 'fp8')"},
    {"device_options: {lstm: cuDNN}",
     "x.yaml:1:24: 'device_options.lstm' must be one of: auto, cudnn, fused (got 'cuDNN')"},
    /* syntax and shape */
    {"run:\n  name: [x\n", "x.yaml:3:1: YAML syntax error: did not find expected ',' or ']'"},
    {"run:\n\tname: x\n",
     "x.yaml:2:1: YAML syntax error: found character that cannot start any token (a tab: YAML "
     "indents with spaces only)"},
    {"run: {name: x}\n@", "x.yaml:2:1: YAML syntax error: found character that cannot start any "
                          "token"},
    {"run: {name: *nowhere}", "x.yaml:1:13: YAML syntax error: found undefined alias"},
    {"- a\n- b\n", "x.yaml:1:1: top level must be a mapping"},
    {"just text", "x.yaml:1:1: top level must be a mapping"},
    {"run: {seed: 1}\n---\nrun: {seed: 2}\n", "x.yaml:3:1: only one YAML document is allowed"},
    {"{[a]: 1}", "x.yaml:1:2: keys must be names, got a list"},
    /* duplicates */
    {"train:\n  batch: 1\n  bptt: 2\n  batch: 3\n", "x.yaml:4:3: duplicate key 'batch'"},
    {"run: {seed: 1}\nrun: {seed: 2}\n", "x.yaml:2:1: duplicate key 'run'"},
    /* model.layers */
    {"model: {layers: []}", "x.yaml:1:17: 'model.layers' must have 1 to 8 layers, got 0"},
    {"model:\n  layers: [{lstm: 8}, {lstm: 8}, {lstm: 8}, {lstm: 8}, {lstm: 8}, {lstm: 8},\n"
     "           {lstm: 8}, {lstm: 8}, {lstm: 8}]\n",
     "x.yaml:2:11: 'model.layers' must have 1 to 8 layers, got 9"},
    {"model: {layers: {lstm: 8}}",
     "x.yaml:1:17: 'model.layers' must be a list like [{lstm: 256}], got a mapping"},
    {"model: {layers: [256]}",
     "x.yaml:1:18: 'model.layers[0]' must be a mapping like {lstm: 256}, got '256'"},
    {"model: {layers: [{lstm: 8}, {projection: 4}]}",
     "x.yaml:1:29: 'model.layers[1]' needs 'lstm' (the cell size H)"},
    {"model:\n  layers:\n    - {lstm: 8, projektion: 4}\n",
     "x.yaml:3:17: unknown key 'projektion' in 'model.layers[0]' (did you mean 'projection'?)"},
    {"model: {layers: [{lstm: 0}]}",
     "x.yaml:1:25: 'model.layers[0].lstm' must be at least 1, got 0"},
    {"model: {layers: [{lstm: 8, lstm: 9}]}", "x.yaml:1:28: duplicate key 'lstm'"},
    {"model: {layers: [{lstm: 8, projection: -1}]}",
     "x.yaml:1:40: 'model.layers[0].projection' must be at least 0, got -1"},
    /* sync.periods */
    {"sync: {periods: {match: lstm.0, period: 4}}",
     "x.yaml:1:17: 'sync.periods' must be a list like [{match: \"lstm.*\", period: 4}], got a "
     "mapping"},
    {"sync: {periods: lstm.0}",
     "x.yaml:1:17: 'sync.periods' must be a list like [{match: \"lstm.*\", period: 4}], got "
     "'lstm.0'"},
    {"sync: {periods: [lstm.0]}",
     "x.yaml:1:18: 'sync.periods[0]' must be a mapping like {match: \"lstm.*\", period: 4}, got "
     "'lstm.0'"},
    {"sync:\n  periods:\n    - {match: lstm.0, period: 4}\n    - {match: lstm.1, priod: 4}\n",
     "x.yaml:4:23: unknown key 'priod' in 'sync.periods[1]' (did you mean 'period'?)"},
    {"sync: {periods: [{match: lstm.0, every: 4}]}",
     "x.yaml:1:34: unknown key 'every' in 'sync.periods[0]' (expected one of: match, period)"},
    {"sync: {periods: [{match: lstm.0}]}",
     "x.yaml:1:18: 'sync.periods[0]' needs 'period' (steps between syncs of what it matches)"},
    {"sync: {periods: [{match: lstm.0, period: 2}, {period: 4}]}",
     "x.yaml:1:46: 'sync.periods[1]' needs 'match' (a glob on component names)"},
    {"sync: {periods: [{match: lstm.0, period: 0}]}",
     "x.yaml:1:42: 'sync.periods[0].period' must be at least 1, got 0"},
    {"sync: {periods: [{match: lstm.0, period: 1.5}]}",
     "x.yaml:1:42: 'sync.periods[0].period' must be an integer, got '1.5'"},
    {"sync: {periods: [{match: \"\", period: 4}]}",
     "x.yaml:1:26: 'sync.periods[0].match' must not be empty"},
    {"sync: {periods: [{match: , period: 4}]}",
     "x.yaml:1:26: 'sync.periods[0].match' must not be empty"},
    {"sync: {periods: [{match: [lstm.0], period: 4}]}",
     "x.yaml:1:26: 'sync.periods[0].match' must be a string, got a list"},
    {"sync: {periods: [{match: a, period: 4, match: b}]}", "x.yaml:1:40: duplicate key 'match'"},
    {"sync:\n  periods: [{match: a, period: 1}, {match: a, period: 1}, {match: a, period: 1},\n"
     "    {match: a, period: 1}, {match: a, period: 1}, {match: a, period: 1},\n"
     "    {match: a, period: 1}, {match: a, period: 1}, {match: a, period: 1},\n"
     "    {match: a, period: 1}, {match: a, period: 1}, {match: a, period: 1},\n"
     "    {match: a, period: 1}, {match: a, period: 1}, {match: a, period: 1},\n"
     "    {match: a, period: 1}, {match: a, period: 1}, {match: a, period: 1},\n"
     "    {match: a, period: 1}, {match: a, period: 1}, {match: a, period: 1},\n"
     "    {match: a, period: 1}, {match: a, period: 1}, {match: a, period: 1},\n"
     "    {match: a, period: 1}, {match: a, period: 1}, {match: a, period: 1},\n"
     "    {match: a, period: 1}, {match: a, period: 1}, {match: a, period: 1},\n"
     "    {match: a, period: 1}, {match: a, period: 1}, {match: a, period: 1}]\n",
     "x.yaml:2:12: 'sync.periods' must have at most 32 rules, got 33"},
};

START_TEST(test_bad_yaml)
{
    for (size_t i = 0; i < sizeof bad_yaml / sizeof bad_yaml[0]; i++) {
        sl_config_t c;
        sl_config_init(&c);
        sl_err_clear();
        ck_assert_msg(sl_config_load_string(&c, bad_yaml[i].text, "x.yaml") == SL_ERR_CONFIG,
                      "case %zu loaded: %s", i, bad_yaml[i].text);
        ck_assert_msg(strcmp(sl_err_msg(), bad_yaml[i].message) == 0,
                      "case %zu:\n  got:      %s\n  expected: %s", i, sl_err_msg(),
                      bad_yaml[i].message);
        sl_config_fini(&c);
    }
}
END_TEST

static const bad_case_t bad_set[] = {
    {"train.batch", "--set train.batch:1:12: missing '=' (expected KEY=VALUE, e.g. "
                    "train.optimizer.lr=0.5)"},
    {"=5", "--set:1:1: missing key before '=' (expected KEY=VALUE)"},
    {"train.optimiser.lr=0.5",
     "--set train.optimiser.lr:1:7: unknown key 'optimiser' in 'train' (did you mean "
     "'optimizer'?)"},
    {"trian.batch=5", "--set trian.batch:1:1: unknown key 'trian' at top level (did you mean "
                      "'train'?)"},
    {"train.batch=lots", "--set train.batch:1:13: 'train.batch' must be an integer, got 'lots'"},
    {"train.batch=0", "--set train.batch:1:13: 'train.batch' must be at least 1, got 0"},
    {" train.batch = 7x", "--set train.batch:1:16: 'train.batch' must be an integer, got '7x'"},
    {"train.batch.x=1", "--set train.batch.x:1:13: 'train.batch' has no sub-keys"},
    {"train..batch=1", "--set train..batch:1:7: empty key name in 'train..batch'"},
    {"train.=1", "--set train.:1:7: empty key name in 'train.'"},
    {"model.layers=[]", "--set model.layers:1:14: 'model.layers' must have 1 to 8 layers, got 0"},
    {"model.layers=[{lstm: 64}",
     "--set model.layers:1:25: YAML syntax error: did not find expected ',' or ']'"},
    /* YAML's key 'lstm:64': a value needs a space after the colon */
    {"model.layers=[{lstm:64}]",
     "--set model.layers:1:16: unknown key 'lstm:64' in 'model.layers[0]' (YAML wants a space "
     "after the colon: 'lstm: 64')"},
    {"model.layers=[{lstm: 64, proj: 32}]",
     "--set model.layers:1:26: unknown key 'proj' in 'model.layers[0]' (did you mean "
     "'projection'?)"},
    {"model.output.type=sample",
     "--set model.output.type:1:19: 'model.output.type' must be one of: full, sampled "
     "(got 'sample')"},
    {"data.level=byte", "--set data.level:1:12: 'data.level' must be one of: word, char "
                        "(got 'byte')"},
    {"train=5", "--set train:1:7: 'train' must be a mapping, got '5'"},
    {"run.name=", "--set run.name:1:10: 'run.name' must not be empty"},
    {"train.optimizer={tpye: adam}",
     "--set train.optimizer:1:18: unknown key 'tpye' in 'train.optimizer' (did you mean "
     "'type'?)"},
    {"run.seed=1\n---\n2", "--set run.seed:3:1: only one YAML document is allowed"},
    {"sync.periods=[{match: \"lstm.*\", period: 0}]",
     "--set sync.periods:1:41: 'sync.periods[0].period' must be at least 1, got 0"},
    {"sync.periods=", "--set sync.periods:1:14: 'sync.periods' must be a list like "
                      "[{match: \"lstm.*\", period: 4}], got nothing"},
    {"sync.periods.match=lstm.0", "--set sync.periods.match:1:14: 'sync.periods' has no "
                                  "sub-keys"},
};

START_TEST(test_bad_set)
{
    for (size_t i = 0; i < sizeof bad_set / sizeof bad_set[0]; i++) {
        sl_config_t c;
        sl_config_init(&c);
        sl_err_clear();
        ck_assert_msg(sl_config_set(&c, bad_set[i].text) == SL_ERR_CONFIG,
                      "case %zu was accepted: %s", i, bad_set[i].text);
        ck_assert_msg(strcmp(sl_err_msg(), bad_set[i].message) == 0,
                      "case %zu:\n  got:      %s\n  expected: %s", i, sl_err_msg(),
                      bad_set[i].message);
        sl_config_fini(&c);
    }
}
END_TEST

/* A file or --set that fails half-way changes nothing. */
START_TEST(test_failure_changes_nothing)
{
    sl_config_t c;

    sl_config_init(&c);
    test_config_load_ok(&c, "run: {name: kept}\ntrain: {batch: 8}\n");
    ck_assert_int_eq(
        sl_config_load_string(&c, "run: {name: lost}\ntrain: {batch: 9, bptt: x}\n", "bad.yaml"),
        SL_ERR_CONFIG);
    ck_assert_str_eq(c.run.name, "kept");
    ck_assert_str_eq(c.run.dir, "runs/kept");
    ck_assert_int_eq(c.train.batch, 8);
    ck_assert_str_eq(c.source, "t.yaml");
    ck_assert_int_eq(sl_config_set(&c, "train.optimizer={type: adam, lr: -1}"), SL_ERR_CONFIG);
    ck_assert_int_eq(c.train.optimizer.type, SL_OPT_SGD);
    ck_assert(c.train.optimizer.lr == 20.0);
    /* a rule list half read (its first rule's glob already copied) keeps the old one */
    test_config_set_ok(&c, "sync.periods=[{match: lstm.0, period: 2}]");
    ck_assert_int_eq(sl_config_set(&c, "sync.periods=[{match: a, period: 1}, {match: b}]"),
                     SL_ERR_CONFIG);
    ck_assert_int_eq(c.sync.nperiod_rules, 1);
    ck_assert_str_eq(c.sync.period_rule[0].match, "lstm.0");
    ck_assert_int_eq(c.sync.period_rule[0].period, 2);
    sl_config_fini(&c);
}
END_TEST

typedef struct {
    const char *sets[4];
    const char *message; /* NULL: valid */
} validate_case_t;

static const validate_case_t validate_cases[] = {
    {{"data.train=t.txt"}, NULL},
    {{"data.train=t.txt", "model.output.type=sampled", "model.output.samples=0"},
     "<defaults>: 'model.output.samples' must be at least 1 with the sampled softmax, got 0"},
    {{"data.train=t.txt", "model.output.samples=0"}, NULL}, /* unused with full softmax */
    {{"data.train=t.txt", "data.vocab_size=0"},
     "<defaults>: 'data.vocab_size' must be at least 1 at word level (0 = every character is "
     "for char level)"},
    {{"data.train=t.txt", "data.vocab_size=0", "data.level=char"}, NULL},
    {{"data.train=t.txt", "data.valid=v.txt", "data.valid_fraction=0.1"},
     "<defaults>: 'data.valid' and 'data.valid_fraction' both give a validation set; use one"},
    {{"data.train=t.txt", "data.valid_fraction=0.1"}, NULL},
    {{"data.train=t.txt", "train.max_steps=10", "train.schedule.warmup_steps=11"},
     "<defaults>: 'train.schedule.warmup_steps' (11) is longer than 'train.max_steps' (10)"},
    {{"data.train=t.txt", "train.schedule.warmup_steps=11"}, NULL},
    {{"data.train=t.txt", "cluster.nodes=4", "train.global_batch=30"},
     "<defaults>: 'train.global_batch' 30 does not split over 4 nodes (cluster.nodes); give a "
     "multiple of 4"},
    {{"data.train=t.txt", "cluster.nodes=4", "train.batch=16", "train.global_batch=32"},
     "<defaults>: 'train.batch' 16 on 4 nodes is not 'train.global_batch' 32 (8 a node); leave "
     "train.batch out, or set train.global_batch to 0"},
    {{"data.train=t.txt", "cluster.nodes=4", "train.batch=8", "train.global_batch=32"}, NULL},
    {{"data.train=t.txt", "cluster.nodes=auto", "train.global_batch=30"}, NULL},
};

START_TEST(test_validate)
{
    sl_config_t c;

    for (size_t i = 0; i < sizeof validate_cases / sizeof validate_cases[0]; i++) {
        const validate_case_t *vc = &validate_cases[i];
        sl_config_init(&c);
        for (int j = 0; j < 4 && vc->sets[j]; j++)
            test_config_set_ok(&c, vc->sets[j]);
        if (!vc->message) {
            ck_assert_msg(sl_config_validate(&c) == SL_OK, "case %zu: %s", i, sl_err_msg());
        } else {
            ck_assert_int_eq(sl_config_validate(&c), SL_ERR_CONFIG);
            ck_assert_msg(strcmp(sl_err_msg(), vc->message) == 0,
                          "case %zu:\n  got:      %s\n  expected: %s", i, sl_err_msg(),
                          vc->message);
        }
        sl_config_fini(&c);
    }
    /* fields set directly by a caller are checked too; messages name the source */
    sl_config_init(&c);
    test_config_load_ok(&c, "data: {train: t.txt}");
    c.train.batch = 0;
    ck_assert_int_eq(sl_config_validate(&c), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "t.yaml: 'train.batch' must be at least 1, got 0");
    c.train.batch = 1;
    c.data.level = (sl_level_t)7;
    ck_assert_int_eq(sl_config_validate(&c), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "t.yaml: 'data.level' must be one of: word, char (got '7')");
    c.data.level = SL_LEVEL_WORD;
    c.model.nlayers = SL_MAX_LAYERS + 1;
    ck_assert_int_eq(sl_config_validate(&c), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "t.yaml: 'model.layers' must have 1 to 8 layers, got 9");
    c.model.nlayers = 1;
    c.model.layers[0].hidden = 0;
    ck_assert_int_eq(sl_config_validate(&c), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "t.yaml: 'model.layers[0].lstm' must be at least 1, got 0");
    c.model.layers[0].hidden = 4;
    ck_assert_int_eq(sl_config_validate(&c), SL_OK);
    test_config_set_ok(&c, "sync.periods=[{match: lstm.0, period: 2}, {match: lstm.1, period: 3}]");
    c.sync.period_rule[1].period = 0;
    ck_assert_int_eq(sl_config_validate(&c), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "t.yaml: 'sync.periods[1].period' must be at least 1, got 0");
    c.sync.period_rule[1].period = 3;
    c.sync.period_rule[0].match[0] = '\0';
    ck_assert_int_eq(sl_config_validate(&c), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "t.yaml: 'sync.periods[0].match' must not be empty");
    c.sync.period_rule[0].match[0] = 'l';
    c.sync.nperiod_rules = SL_MAX_PERIOD_RULES + 1;
    ck_assert_int_eq(sl_config_validate(&c), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "t.yaml: 'sync.periods' must have at most 32 rules, got 33");
    c.sync.nperiod_rules = 2;
    ck_assert_int_eq(sl_config_validate(&c), SL_OK);
    sl_config_fini(&c);
}
END_TEST

START_TEST(test_file_errors)
{
    sl_config_t c;
    char dir[] = "/tmp/shoal-check-config-XXXXXX", path[128];
    FILE *f;

    sl_config_init(&c);
    ck_assert_int_eq(sl_config_load_file(&c, "/nonexistent/x.yaml"), SL_ERR_IO);
    ck_assert_str_eq(sl_err_msg(), "/nonexistent/x.yaml: No such file or directory");
    /* a device whose bytes never end is refused, not read until memory runs out */
    ck_assert_int_eq(sl_config_load_file(&c, "/dev/zero"), SL_ERR_IO);
    ck_assert_str_eq(sl_err_msg(), "/dev/zero: a device, not a file or a pipe");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/bad.yaml", dir);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("# comment\ntrain:\n  bacth: 3\n", f);
    fclose(f);
    ck_assert_int_eq(sl_config_load_file(&c, path), SL_ERR_CONFIG);
    {
        char expect[256];
        snprintf(expect, sizeof expect,
                 "%s:3:3: unknown key 'bacth' in 'train' (did you mean 'batch'?)", path);
        ck_assert_str_eq(sl_err_msg(), expect);
    }
    /* an empty file (or only comments) sets nothing */
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("# nothing here\n", f);
    fclose(f);
    ck_assert_int_eq(sl_config_load_file(&c, path), SL_OK);
    ck_assert_int_eq(c.train.batch, 32);
    ck_assert_str_eq(c.source, path);
    unlink(path);
    rmdir(dir);
    sl_config_fini(&c);
}
END_TEST

START_TEST(test_number_limits)
{
    sl_config_t c;

    sl_config_init(&c);
    test_config_set_ok(&c, "train.batch=2147483647");
    ck_assert_int_eq(c.train.batch, 2147483647);
    test_config_set_ok(&c, "train.max_steps=9223372036854775807");
    ck_assert_int_eq(c.train.max_steps, 9223372036854775807L);
    test_config_set_ok(&c, "run.seed=0");
    ck_assert_uint_eq(c.run.seed, 0);
    test_config_set_ok(&c, "train.optimizer.eps=1e-300");
    ck_assert(c.train.optimizer.eps == 1e-300);
    test_config_set_ok(&c, "model.dropout=0.999999999999");
    ck_assert(c.model.dropout == 0.999999999999);
    test_config_set_ok(&c, "train.batch=+12");
    ck_assert_int_eq(c.train.batch, 12);
    ck_assert_int_eq(sl_config_set(&c, "train.max_steps=9223372036854775808"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "--set train.max_steps:1:17: 'train.max_steps' must be at "
                                   "most 9223372036854775807, got 9223372036854775808");
    ck_assert_int_eq(sl_config_set(&c, "train.max_steps=-99999999999999999999"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "--set train.max_steps:1:17: 'train.max_steps' must be at "
                                   "least 0, got -99999999999999999999");
    ck_assert_int_eq(sl_config_set(&c, "run.seed=18446744073709551616"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "--set run.seed:1:10: 'run.seed' must be at most "
                                   "18446744073709551615, got 18446744073709551616");
    ck_assert_int_eq(sl_config_set(&c, "model.dropout=1e999"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "--set model.dropout:1:15: 'model.dropout' must be a "
                                   "finite number, got 1e999");
    ck_assert_int_eq(sl_config_set(&c, "model.dropout=nan"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "--set model.dropout:1:15: 'model.dropout' must be a "
                                   "number, got 'nan'");
    ck_assert_int_eq(sl_config_set(&c, "train.batch=0x10"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "--set train.batch:1:13: 'train.batch' must be an integer, "
                                   "got '0x10'");
    ck_assert_int_eq(c.train.batch, 12);
    /* ZeroMQ I/O threads: 0 (from the cores) to 64 */
    test_config_set_ok(&c, "cluster.io_threads=64");
    ck_assert_int_eq(c.cluster.io_threads, 64);
    ck_assert_int_eq(sl_config_set(&c, "cluster.io_threads=65"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "--set cluster.io_threads:1:20: 'cluster.io_threads' must be "
                                   "at most 64, got 65");
    ck_assert_int_eq(sl_config_set(&c, "cluster.io_threads=-1"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "--set cluster.io_threads:1:20: 'cluster.io_threads' must be "
                                   "at least 0, got -1");
    ck_assert_int_eq(c.cluster.io_threads, 64);
    /* connections per peer: 0 (from the I/O threads) to 16 */
    ck_assert_int_eq(c.cluster.stripes, 0);
    test_config_set_ok(&c, "cluster.stripes=16");
    ck_assert_int_eq(c.cluster.stripes, 16);
    ck_assert_int_eq(sl_config_set(&c, "cluster.stripes=17"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "--set cluster.stripes:1:17: 'cluster.stripes' must be "
                                   "at most 16, got 17");
    ck_assert_int_eq(c.cluster.stripes, 16);
    /* how allreduces move: auto (halving where it can) or ring */
    ck_assert_int_eq(c.cluster.allreduce, SL_ALLREDUCE_AUTO);
    test_config_set_ok(&c, "cluster.allreduce=ring");
    ck_assert_int_eq(c.cluster.allreduce, SL_ALLREDUCE_RING);
    ck_assert_int_eq(sl_config_set(&c, "cluster.allreduce=halving"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "--set cluster.allreduce:1:19: 'cluster.allreduce' must be "
                                   "one of: auto, ring (got 'halving')");
    ck_assert_int_eq(c.cluster.allreduce, SL_ALLREDUCE_RING);
    /* shoal run's restarts and watchdog */
    ck_assert_int_eq(c.cluster.restart.max, 0);
    ck_assert_int_eq(c.cluster.restart.delay_ms, 5000);
    ck_assert_int_eq(c.cluster.watchdog_timeouts, 10);
    test_config_set_ok(&c, "cluster.restart={max: 3, delay_ms: 0}");
    ck_assert_int_eq(c.cluster.restart.max, 3);
    ck_assert_int_eq(c.cluster.restart.delay_ms, 0);
    ck_assert_int_eq(sl_config_set(&c, "cluster.restart.max=-1"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "--set cluster.restart.max:1:21: 'cluster.restart.max' must "
                                   "be at least 0, got -1");
    ck_assert_int_eq(sl_config_set(&c, "cluster.restart.delay_ms=3600001"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "--set cluster.restart.delay_ms:1:26: "
                                   "'cluster.restart.delay_ms' must be at most 3600000, got "
                                   "3600001");
    ck_assert_int_eq(sl_config_set(&c, "cluster.watchdog_timeouts=2.5"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "--set cluster.watchdog_timeouts:1:27: "
                                   "'cluster.watchdog_timeouts' must be an integer, got '2.5'");
    ck_assert_int_eq(
        sl_config_load_string(&c, "cluster:\n  restart: {max: 2, delai_ms: 1}\n", "r.yaml"),
        SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "r.yaml:2:21: unknown key 'delai_ms' in 'cluster.restart' "
                                   "(did you mean 'delay_ms'?)");
    ck_assert_int_eq(c.cluster.restart.max, 3);
    sl_config_fini(&c);
}
END_TEST

START_TEST(test_text_limits)
{
    sl_config_t c;
    char yaml[512], expect[512];

    sl_config_init(&c);
    /* long values are cut in messages */
    snprintf(yaml, sizeof yaml, "data: {level: %0100d}", 7);
    ck_assert_int_eq(sl_config_load_string(&c, yaml, "x.yaml"), SL_ERR_CONFIG);
    snprintf(expect, sizeof expect,
             "x.yaml:1:15: 'data.level' must be one of: word, char (got '%057d...')", 0);
    ck_assert_str_eq(sl_err_msg(), expect);
    /* invalid UTF-8 is placed by line and column */
    ck_assert_int_eq(sl_config_load_string(&c, "run:\n  name: ab\xff\n", "x.yaml"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "x.yaml:2:11: YAML syntax error: invalid leading UTF-8 octet");
    /* lines broken as YAML breaks them (\r, \r\n, NEL), columns in characters, as in
       libyaml's own marks (found by tests/fuzz/fuzz_config) */
    ck_assert_int_eq(sl_config_load_string(&c, "run:\r  name: x\r  dir: ab\xff\r", "x.yaml"),
                     SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "x.yaml:3:10: YAML syntax error: invalid leading UTF-8 octet");
    ck_assert_int_eq(sl_config_load_string(&c, "run:\xc2\x85  name: caf\xc3\xa9\xff\r\n", "x.yaml"),
                     SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "x.yaml:2:13: YAML syntax error: invalid leading UTF-8 octet");
    ck_assert_int_eq(sl_config_load_string(&c, "run: [a,\rb,\r", "x.yaml"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(),
                     "x.yaml:3:1: YAML syntax error: did not find expected node content");
    /* UTF-8 names, anchors and aliases, null sections, explicit document markers */
    test_config_load_ok(&c,
                        "---\nrun: {name: &n \"caf\xc3\xa9\", dir: *n}\ntrain:\ndata: ~\n...\n");
    ck_assert_str_eq(c.run.name, "caf\xc3\xa9");
    ck_assert_str_eq(c.run.dir, "caf\xc3\xa9");
    ck_assert_int_eq(c.train.batch, 32);
    /* yes/no in any case, bools only */
    test_config_load_ok(&c, "run: {resume: NO}\ntrain: {eval_every_epoch: Yes}\n");
    ck_assert_int_eq(c.run.resume, 0);
    ck_assert_int_eq(c.train.eval_every_epoch, 1);
    ck_assert_int_eq(sl_config_load_string(&c, "run: {resume: 1}", "x.yaml"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "x.yaml:1:15: 'run.resume' must be true or false, got '1'");
    sl_config_fini(&c);
}
END_TEST

/* Text from the input is escaped and cut in messages, so that each stays one line
 * with its location (found by tests/fuzz/fuzz_config: a tab or a newline in a key or
 * a value, a --set key longer than the message). */
START_TEST(test_control_characters)
{
    sl_config_t c;
    char yaml[256], expect[512], long_set[2003];

    sl_config_init(&c);
    ck_assert_int_eq(sl_config_load_string(&c, "run: {threads: \"a\\nb\\x1b\"}", "x.yaml"),
                     SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "x.yaml:1:16: 'run.threads' must be an integer, got "
                                   "'a\\nb\\x1b'");
    ck_assert_int_eq(sl_config_load_string(&c, "run: {\"na\\tme\": x}", "x.yaml"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "x.yaml:1:7: unknown key 'na\\tme' in 'run' (did you mean "
                                   "'name'?)");
    ck_assert_int_eq(sl_config_load_string(&c, "device: \"cu\\0da\"", "x.yaml"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "x.yaml:1:9: 'device' must not contain a NUL character");
    ck_assert_int_eq(sl_config_set(&c, "run.na\nme=1"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "--set run.na\\nme:1:5: unknown key 'na\\nme' in 'run' "
                                   "(did you mean 'name'?)");
    ck_assert_int_eq(sl_config_set(&c, "run.\x7f.\x01=1"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "--set run.\\x7f.\\x01:1:5: unknown key '\\x7f' in 'run' "
                                   "(expected one of: name, seed, dir, threads, log_every, "
                                   "checkpoint_every, resume, keep_best, keep_checkpoints)");
    ck_assert_int_eq(sl_config_set(&c, "run..\x02=1"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "--set run..\\x02:1:5: empty key name in 'run..\\x02'");
    /* escapes count in the 60 bytes shown and are never cut; nor is a UTF-8 character */
    snprintf(yaml, sizeof yaml, "data: {level: \"%055d\\n\\n\\n\"}", 7);
    ck_assert_int_eq(sl_config_load_string(&c, yaml, "x.yaml"), SL_ERR_CONFIG);
    snprintf(expect, sizeof expect,
             "x.yaml:1:15: 'data.level' must be one of: word, char (got '%055d\\n...')", 7);
    ck_assert_str_eq(sl_err_msg(), expect);
    snprintf(yaml, sizeof yaml, "data: {level: %056d\xc3\xa9%010d}", 7, 0);
    ck_assert_int_eq(sl_config_load_string(&c, yaml, "x.yaml"), SL_ERR_CONFIG);
    snprintf(expect, sizeof expect,
             "x.yaml:1:15: 'data.level' must be one of: word, char (got '%056d...')", 7);
    ck_assert_str_eq(sl_err_msg(), expect);
    /* a long --set key is cut in the name too: the message keeps its place and text */
    memset(long_set, 'k', 2000);
    strcpy(long_set + 2000, "=1");
    ck_assert_int_eq(sl_config_set(&c, long_set), SL_ERR_CONFIG);
    snprintf(expect, sizeof expect,
             "--set %.57s...:1:1: unknown key '%.57s...' at top level "
             "(expected one of: run, data, model, train, cluster, topology, sync, embedding, "
             "device, precision, device_options)",
             long_set, long_set);
    ck_assert_str_eq(sl_err_msg(), expect);
    ck_assert_int_eq(c.run.threads, 1);
    sl_config_fini(&c);
}
END_TEST

static Suite *
config_errors_suite(void)
{
    Suite *s = suite_create("config_errors");
    TCase *core = tcase_create("core");
    tcase_add_test(core, test_bad_yaml);
    tcase_add_test(core, test_bad_set);
    tcase_add_test(core, test_failure_changes_nothing);
    tcase_add_test(core, test_validate);
    tcase_add_test(core, test_file_errors);
    suite_add_tcase(s, core);
    TCase *limits = tcase_create("limits");
    tcase_add_test(limits, test_number_limits);
    tcase_add_test(limits, test_text_limits);
    tcase_add_test(limits, test_control_characters);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    return test_main(config_errors_suite());
}
