/* Unit tests of src/config: defaults, YAML loading, --set, exact error messages,
 * validation, the write/load round trip, the schema and every example in conf/. */
#include <check.h>
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sl_file.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "sync/sl_bmuf.h"

/* Every key of the schema, written out here independently of sl_config.c's table. */
static const char *const all_keys[] = {
    "run.name", "run.seed", "run.dir", "run.threads", "run.log_every",
    "run.checkpoint_every", "run.resume", "data.train", "data.valid", "data.test",
    "data.level", "data.vocab_size", "data.valid_fraction", "data.cache_dir",
    "data.max_tokens", "model.embedding", "model.layers", "model.dropout",
    "model.output.type", "model.output.samples", "model.init_range", "train.batch",
    "train.bptt", "train.epochs", "train.max_steps", "train.loss_scale.dynamic",
    "train.loss_scale.init", "train.loss_scale.growth_interval", "train.eval_every_epoch",
    "train.optimizer.type", "train.optimizer.lr", "train.optimizer.clip",
    "train.optimizer.beta1", "train.optimizer.beta2", "train.optimizer.eps",
    "train.optimizer.initial_accumulator", "train.schedule.type", "train.schedule.decay",
    "train.schedule.warmup_steps", "cluster.nodes", "cluster.transport", "cluster.master",
    "cluster.bind", "cluster.timeout_ms", "cluster.rendezvous_timeout_ms",
    "cluster.shared_memory", "topology.degree",
    "sync.algorithm", "sync.neighbours", "sync.block_momentum", "sync.block_lr",
    "sync.nesterov", "sync.block_reference", "sync.period", "sync.embedding_period",
    "sync.embedding_shards", "sync.periods", "sync.timeout_ms", "sync.keep_node_models", "sync.exchange",
    "sync.exchange_top", "sync.exchange_random", "sync.compression", "sync.compression_scale",
    "embedding.seed_groups", "device", "precision", NULL};

static void
load_ok(sl_config_t *c, const char *yaml)
{
    sl_status_t st = sl_config_load_string(c, yaml, "t.yaml");
    ck_assert_msg(st == SL_OK, "load failed: %s", sl_err_msg());
}

static void
set_ok(sl_config_t *c, const char *assignment)
{
    sl_status_t st = sl_config_set(c, assignment);
    ck_assert_msg(st == SL_OK, "--set %s failed: %s", assignment, sl_err_msg());
}

/* Field-by-field equality (source excepted), written without the schema table. */
static void
assert_config_equal(const sl_config_t *a, const sl_config_t *b)
{
    ck_assert_str_eq(a->run.name, b->run.name);
    ck_assert_uint_eq(a->run.seed, b->run.seed);
    ck_assert_str_eq(a->run.dir, b->run.dir);
    ck_assert_int_eq(a->run.threads, b->run.threads);
    ck_assert_int_eq(a->run.log_every, b->run.log_every);
    ck_assert_int_eq(a->run.checkpoint_every, b->run.checkpoint_every);
    ck_assert_int_eq(a->run.resume, b->run.resume);
    ck_assert_str_eq(a->data.train, b->data.train);
    ck_assert_str_eq(a->data.valid, b->data.valid);
    ck_assert_str_eq(a->data.test, b->data.test);
    ck_assert_int_eq(a->data.level, b->data.level);
    ck_assert_int_eq(a->data.vocab_size, b->data.vocab_size);
    ck_assert(a->data.valid_fraction == b->data.valid_fraction);
    ck_assert_str_eq(a->data.cache_dir, b->data.cache_dir);
    ck_assert_int_eq(a->data.max_tokens, b->data.max_tokens);
    ck_assert_int_eq(a->model.embedding, b->model.embedding);
    ck_assert_int_eq(a->model.nlayers, b->model.nlayers);
    for (int i = 0; i < a->model.nlayers; i++) {
        ck_assert_int_eq(a->model.layers[i].hidden, b->model.layers[i].hidden);
        ck_assert_int_eq(a->model.layers[i].projection, b->model.layers[i].projection);
    }
    ck_assert(a->model.dropout == b->model.dropout);
    ck_assert_int_eq(a->model.output, b->model.output);
    ck_assert_int_eq(a->model.samples, b->model.samples);
    ck_assert(a->model.init_range == b->model.init_range);
    ck_assert_int_eq(a->train.batch, b->train.batch);
    ck_assert_int_eq(a->train.bptt, b->train.bptt);
    ck_assert_int_eq(a->train.epochs, b->train.epochs);
    ck_assert_int_eq(a->train.max_steps, b->train.max_steps);
    ck_assert_int_eq(a->train.eval_every_epoch, b->train.eval_every_epoch);
    ck_assert_int_eq(a->train.optimizer.type, b->train.optimizer.type);
    ck_assert(a->train.optimizer.lr == b->train.optimizer.lr);
    ck_assert(a->train.optimizer.clip == b->train.optimizer.clip);
    ck_assert(a->train.optimizer.beta1 == b->train.optimizer.beta1);
    ck_assert(a->train.optimizer.beta2 == b->train.optimizer.beta2);
    ck_assert(a->train.optimizer.eps == b->train.optimizer.eps);
    ck_assert(a->train.optimizer.initial_accumulator == b->train.optimizer.initial_accumulator);
    ck_assert_int_eq(a->train.schedule.type, b->train.schedule.type);
    ck_assert(a->train.schedule.decay == b->train.schedule.decay);
    ck_assert_int_eq(a->train.schedule.warmup_steps, b->train.schedule.warmup_steps);
    ck_assert_int_eq(a->sync.algorithm, b->sync.algorithm);
    ck_assert_int_eq(a->sync.neighbours, b->sync.neighbours);
    ck_assert(a->sync.block_momentum == b->sync.block_momentum);
    ck_assert(a->sync.block_lr == b->sync.block_lr);
    ck_assert_int_eq(a->sync.nesterov, b->sync.nesterov);
    ck_assert_int_eq(a->sync.block_reference, b->sync.block_reference);
    ck_assert_int_eq(a->sync.period, b->sync.period);
    ck_assert_int_eq(a->sync.embedding_period, b->sync.embedding_period);
    ck_assert_int_eq(a->sync.embedding_shards, b->sync.embedding_shards);
    ck_assert_int_eq(a->sync.nperiod_rules, b->sync.nperiod_rules);
    for (int i = 0; i < a->sync.nperiod_rules; i++) {
        ck_assert_str_eq(a->sync.period_rule[i].match, b->sync.period_rule[i].match);
        ck_assert_int_eq(a->sync.period_rule[i].period, b->sync.period_rule[i].period);
    }
    ck_assert_int_eq(a->sync.timeout_ms, b->sync.timeout_ms);
    ck_assert_int_eq(a->sync.keep_node_models, b->sync.keep_node_models);
    ck_assert_int_eq(a->sync.exchange, b->sync.exchange);
    ck_assert(a->sync.exchange_top == b->sync.exchange_top);
    ck_assert(a->sync.exchange_random == b->sync.exchange_random);
    ck_assert_int_eq(a->sync.compression, b->sync.compression);
    ck_assert(a->sync.compression_scale == b->sync.compression_scale);
    ck_assert_int_eq(a->train.loss_scale.dynamic, b->train.loss_scale.dynamic);
    ck_assert(a->train.loss_scale.init == b->train.loss_scale.init);
    ck_assert_int_eq(a->train.loss_scale.growth_interval, b->train.loss_scale.growth_interval);
    ck_assert_str_eq(a->embedding.seed_groups, b->embedding.seed_groups);
    ck_assert_str_eq(a->device, b->device);
    ck_assert_str_eq(a->precision, b->precision);
}

/* The written YAML of c, malloc'd. */
static char *
yaml_of(const sl_config_t *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(sl_config_write_yaml(c, f), SL_OK);
    fclose(f);
    return buf;
}

START_TEST(test_defaults)
{
    sl_config_t c;

    sl_config_init(&c);
    ck_assert_str_eq(c.source, "<defaults>");
    ck_assert_str_eq(c.run.name, "shoal");
    ck_assert_uint_eq(c.run.seed, 1234);
    ck_assert_str_eq(c.run.dir, "runs/shoal");
    ck_assert_int_eq(c.run.threads, 1);
    ck_assert_int_eq(c.run.log_every, 20);
    ck_assert_int_eq(c.run.checkpoint_every, 500);
    ck_assert_int_eq(c.run.resume, 1);
    ck_assert_str_eq(c.data.train, "");
    ck_assert_str_eq(c.data.valid, "");
    ck_assert_str_eq(c.data.test, "");
    ck_assert_int_eq(c.data.level, SL_LEVEL_WORD);
    ck_assert_int_eq(c.data.vocab_size, 10000);
    ck_assert(c.data.valid_fraction == 0.0);
    ck_assert_str_eq(c.data.cache_dir, "");
    ck_assert_int_eq(c.data.max_tokens, 0);
    ck_assert_int_eq(c.model.embedding, 256);
    ck_assert_int_eq(c.model.nlayers, 2);
    ck_assert_int_eq(c.model.layers[0].hidden, 256);
    ck_assert_int_eq(c.model.layers[0].projection, 0);
    ck_assert_int_eq(c.model.layers[1].hidden, 256);
    ck_assert_int_eq(c.model.layers[1].projection, 0);
    ck_assert(c.model.dropout == 0.0);
    ck_assert_int_eq(c.model.output, SL_OUTPUT_FULL);
    ck_assert_int_eq(c.model.samples, 1024);
    ck_assert(c.model.init_range == 0.1);
    ck_assert_int_eq(c.train.batch, 32);
    ck_assert_int_eq(c.train.bptt, 35);
    ck_assert_int_eq(c.train.epochs, 1);
    ck_assert_int_eq(c.train.max_steps, 0);
    ck_assert_int_eq(c.train.eval_every_epoch, 1);
    ck_assert_int_eq(c.train.optimizer.type, SL_OPT_SGD);
    ck_assert(c.train.optimizer.lr == 20.0);
    ck_assert(c.train.optimizer.clip == 0.25);
    ck_assert(c.train.optimizer.beta1 == 0.9);
    ck_assert(c.train.optimizer.beta2 == 0.999);
    ck_assert(c.train.optimizer.eps == 1e-8);
    ck_assert(c.train.optimizer.initial_accumulator == 0.0);
    ck_assert_int_eq(c.train.schedule.type, SL_SCHED_CONSTANT);
    ck_assert(c.train.schedule.decay == 0.9);
    ck_assert_int_eq(c.train.schedule.warmup_steps, 0);
    ck_assert_int_eq(c.sync.algorithm, SL_SYNC_NONE);
    ck_assert_int_eq(c.sync.neighbours, 1);
    ck_assert(c.sync.block_momentum == 0.9);
    ck_assert(c.sync.block_lr == 1.0);
    ck_assert_int_eq(c.sync.nesterov, 1);
    ck_assert_int_eq(c.sync.block_reference, SL_BLOCK_REF_BLOCKSTART);
    ck_assert_int_eq(c.sync.period, 16);
    ck_assert_int_eq(c.sync.embedding_period, 0);
    ck_assert_int_eq(c.sync.embedding_shards, 1);
    ck_assert_int_eq(c.sync.nperiod_rules, 0);
    ck_assert_ptr_null(c.sync.period_rule[0].match);
    ck_assert_int_eq(c.sync.timeout_ms, 0);
    ck_assert_int_eq(c.sync.keep_node_models, 1);
    ck_assert_int_eq(c.sync.exchange, SL_EXCHANGE_DENSE);
    ck_assert_int_eq(c.sync.compression, SL_COMPRESS_FP32);
    ck_assert(c.sync.compression_scale == 0);
    ck_assert_str_eq(c.embedding.seed_groups, "zipf");
    ck_assert_int_eq(c.train.loss_scale.dynamic, 1);
    ck_assert(c.train.loss_scale.init == 65536);
    ck_assert_int_eq(c.train.loss_scale.growth_interval, 2000);
    ck_assert_str_eq(c.device, "cpu");
    ck_assert_str_eq(c.precision, "fp32");
    /* defaults alone do not validate: there is no training text */
    ck_assert_int_eq(sl_config_validate(&c), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "<defaults>: 'data.train' is required");
    sl_config_fini(&c);
    ck_assert_ptr_null(c.run.name);
    sl_config_fini(&c); /* twice is harmless */
}
END_TEST

/* block_momentum auto is 1 - 1/n (BMUF's rule), and stays auto when written out; a
 * number is taken as it is. */
START_TEST(test_block_momentum_auto)
{
    const int nodes[3] = {1, 4, 16};
    const float eta[3] = {0.0f, 0.75f, 0.9375f};
    sl_bmuf_opts_t o;
    sl_config_t c;
    char *text;

    sl_config_init(&c);
    set_ok(&c, "sync.block_momentum=auto");
    for (int i = 0; i < 3; i++) {
        c.cluster.nodes = nodes[i];
        sl_bmuf_opts_from_config(&o, &c);
        ck_assert_float_eq(o.eta, eta[i]);
    }
    text = yaml_of(&c);
    ck_assert_ptr_nonnull(strstr(text, "\n  block_momentum: auto\n"));
    free(text);
    set_ok(&c, "sync.block_momentum=0.5");
    sl_bmuf_opts_from_config(&o, &c);
    ck_assert_float_eq(o.eta, 0.5f);
    set_ok(&c, "sync={block_momentum: auto}");
    ck_assert(c.sync.block_momentum == SL_CONFIG_AUTO);
    sl_config_fini(&c);
}
END_TEST

START_TEST(test_enum_names)
{
    ck_assert_str_eq(sl_level_name(SL_LEVEL_WORD), "word");
    ck_assert_str_eq(sl_level_name(SL_LEVEL_CHAR), "char");
    ck_assert_str_eq(sl_output_name(SL_OUTPUT_FULL), "full");
    ck_assert_str_eq(sl_output_name(SL_OUTPUT_SAMPLED), "sampled");
    ck_assert_str_eq(sl_opt_name(SL_OPT_SGD), "sgd");
    ck_assert_str_eq(sl_opt_name(SL_OPT_ADAGRAD), "adagrad");
    ck_assert_str_eq(sl_opt_name(SL_OPT_ADAM), "adam");
    ck_assert_str_eq(sl_sched_name(SL_SCHED_CONSTANT), "constant");
    ck_assert_str_eq(sl_sched_name(SL_SCHED_EPOCH_DECAY), "epoch_decay");
    ck_assert_str_eq(sl_sched_name(SL_SCHED_LINEAR), "linear");
    ck_assert_str_eq(sl_sync_algorithm_name(SL_SYNC_NONE), "none");
    ck_assert_str_eq(sl_sync_algorithm_name(SL_SYNC_ALLREDUCE), "allreduce");
    ck_assert_str_eq(sl_sync_algorithm_name(SL_SYNC_MA), "ma");
    ck_assert_str_eq(sl_sync_algorithm_name(SL_SYNC_BMUF), "bmuf");
    ck_assert_str_eq(sl_sync_algorithm_name(SL_SYNC_LOCAL_MA), "local-ma");
    ck_assert_str_eq(sl_sync_algorithm_name(SL_SYNC_LOCAL_BMUF), "local-bmuf");
    ck_assert_str_eq(sl_sync_algorithm_name(SL_SYNC_GOSSIP_MA), "gossip-ma");
    ck_assert_str_eq(sl_sync_algorithm_name(SL_SYNC_GOSSIP_BMUF), "gossip-bmuf");
    ck_assert_str_eq(sl_block_ref_name(SL_BLOCK_REF_BLOCKSTART), "blockstart");
    ck_assert_str_eq(sl_block_ref_name(SL_BLOCK_REF_OMEGA), "omega");
    ck_assert_str_eq(sl_opt_name((sl_opt_kind_t)3), "?");
    ck_assert_str_eq(sl_level_name((sl_level_t)-1), "?");
}
END_TEST

static const char full_yaml[] =
    "# every key, none at its default\n"
    "run:   {name: brown, seed: 99, dir: runs/b2, threads: 4, log_every: 5,\n"
    "        checkpoint_every: 0, resume: no}\n"
    "data:  {train: ../shared/data/brown/train.txt, valid: ../shared/data/brown/valid.txt,\n"
    "        test: ../shared/data/brown/test.txt, level: word, vocab_size: 5000,\n"
    "        valid_fraction: 0.0, cache_dir: \"/tmp/shoal cache\", max_tokens: 123456789012}\n"
    "model: {embedding: 128, layers: [{lstm: 256}, {lstm: 512, projection: 128}],\n"
    "        dropout: 0.25, output: {type: sampled, samples: 512}, init_range: 0.05}\n"
    "train:\n"
    "  batch: 16\n"
    "  bptt: 20\n"
    "  epochs: 3\n"
    "  max_steps: 1000\n"
    "  eval_every_epoch: false\n"
    "  optimizer:\n"
    "    type: adam\n"
    "    lr: 2e-3\n"
    "    clip: 5\n"
    "    beta1: 0.8\n"
    "    beta2: 0.99\n"
    "    eps: 1e-7\n"
    "    initial_accumulator: 0.1\n"
    "  schedule: {type: linear, decay: 0.5, warmup_steps: 100}\n"
    "sync: {algorithm: gossip-bmuf, neighbours: 2, block_momentum: 0.5, block_lr: 0.75,\n"
    "       nesterov: false, block_reference: omega, period: 8, embedding_period: 64,\n"
    "       embedding_shards: 4, timeout_ms: 500, keep_node_models: false,\n"
    "       periods: [{match: \"embedding.*\", period: 128}, {period: 4, match: lstm.1}]}\n"
    "device: cuda:1\n"
    "precision: bf16\n";

START_TEST(test_full_file)
{
    sl_config_t c;

    sl_config_init(&c);
    load_ok(&c, full_yaml);
    ck_assert_str_eq(c.source, "t.yaml");
    ck_assert_str_eq(c.run.name, "brown");
    ck_assert_uint_eq(c.run.seed, 99);
    ck_assert_str_eq(c.run.dir, "runs/b2");
    ck_assert_int_eq(c.run.threads, 4);
    ck_assert_int_eq(c.run.log_every, 5);
    ck_assert_int_eq(c.run.checkpoint_every, 0);
    ck_assert_int_eq(c.run.resume, 0);
    ck_assert_str_eq(c.data.train, "../shared/data/brown/train.txt");
    ck_assert_str_eq(c.data.valid, "../shared/data/brown/valid.txt");
    ck_assert_str_eq(c.data.test, "../shared/data/brown/test.txt");
    ck_assert_int_eq(c.data.level, SL_LEVEL_WORD);
    ck_assert_int_eq(c.data.vocab_size, 5000);
    ck_assert(c.data.valid_fraction == 0.0);
    ck_assert_str_eq(c.data.cache_dir, "/tmp/shoal cache");
    ck_assert_int_eq(c.data.max_tokens, 123456789012L);
    ck_assert_int_eq(c.model.embedding, 128);
    ck_assert_int_eq(c.model.nlayers, 2);
    ck_assert_int_eq(c.model.layers[0].hidden, 256);
    ck_assert_int_eq(c.model.layers[0].projection, 0);
    ck_assert_int_eq(c.model.layers[1].hidden, 512);
    ck_assert_int_eq(c.model.layers[1].projection, 128);
    ck_assert(c.model.dropout == 0.25);
    ck_assert_int_eq(c.model.output, SL_OUTPUT_SAMPLED);
    ck_assert_int_eq(c.model.samples, 512);
    ck_assert(c.model.init_range == 0.05);
    ck_assert_int_eq(c.train.batch, 16);
    ck_assert_int_eq(c.train.bptt, 20);
    ck_assert_int_eq(c.train.epochs, 3);
    ck_assert_int_eq(c.train.max_steps, 1000);
    ck_assert_int_eq(c.train.eval_every_epoch, 0);
    ck_assert_int_eq(c.train.optimizer.type, SL_OPT_ADAM);
    ck_assert(c.train.optimizer.lr == 2e-3);
    ck_assert(c.train.optimizer.clip == 5.0);
    ck_assert(c.train.optimizer.beta1 == 0.8);
    ck_assert(c.train.optimizer.beta2 == 0.99);
    ck_assert(c.train.optimizer.eps == 1e-7);
    ck_assert(c.train.optimizer.initial_accumulator == 0.1);
    ck_assert_int_eq(c.train.schedule.type, SL_SCHED_LINEAR);
    ck_assert(c.train.schedule.decay == 0.5);
    ck_assert_int_eq(c.train.schedule.warmup_steps, 100);
    ck_assert_int_eq(c.sync.algorithm, SL_SYNC_GOSSIP_BMUF);
    ck_assert_int_eq(c.sync.neighbours, 2);
    ck_assert(c.sync.block_momentum == 0.5);
    ck_assert(c.sync.block_lr == 0.75);
    ck_assert_int_eq(c.sync.nesterov, 0);
    ck_assert_int_eq(c.sync.block_reference, SL_BLOCK_REF_OMEGA);
    ck_assert_int_eq(c.sync.period, 8);
    ck_assert_int_eq(c.sync.embedding_period, 64);
    ck_assert_int_eq(c.sync.embedding_shards, 4);
    ck_assert_int_eq(c.sync.nperiod_rules, 2);
    ck_assert_str_eq(c.sync.period_rule[0].match, "embedding.*");
    ck_assert_int_eq(c.sync.period_rule[0].period, 128);
    ck_assert_str_eq(c.sync.period_rule[1].match, "lstm.1");
    ck_assert_int_eq(c.sync.period_rule[1].period, 4);
    ck_assert_ptr_null(c.sync.period_rule[2].match);
    ck_assert_int_eq(c.sync.timeout_ms, 500);
    ck_assert_int_eq(c.sync.keep_node_models, 0);
    ck_assert_str_eq(c.device, "cuda:1");
    ck_assert_str_eq(c.precision, "bf16");
    ck_assert_int_eq(sl_config_validate(&c), SL_OK);
    sl_config_fini(&c);
}
END_TEST

START_TEST(test_set_each_type)
{
    sl_config_t c;

    sl_config_init(&c);
    set_ok(&c, "run.name=exp1");                  /* string */
    ck_assert_str_eq(c.run.name, "exp1");
    set_ok(&c, "train.batch=64");                 /* int */
    ck_assert_int_eq(c.train.batch, 64);
    set_ok(&c, "data.max_tokens=5000000000");     /* long, over 32 bits */
    ck_assert_int_eq(c.data.max_tokens, 5000000000L);
    set_ok(&c, "run.seed=18446744073709551615");  /* uint64, the largest */
    ck_assert_uint_eq(c.run.seed, UINT64_MAX);
    set_ok(&c, "train.optimizer.lr=0.5");         /* double */
    ck_assert(c.train.optimizer.lr == 0.5);
    set_ok(&c, "train.optimizer.clip=3");         /* an integer is a number too */
    ck_assert(c.train.optimizer.clip == 3.0);
    set_ok(&c, "run.resume=no");                  /* bools: true/false/yes/no */
    ck_assert_int_eq(c.run.resume, 0);
    set_ok(&c, "run.resume=True");
    ck_assert_int_eq(c.run.resume, 1);
    set_ok(&c, "train.eval_every_epoch=false");
    ck_assert_int_eq(c.train.eval_every_epoch, 0);
    set_ok(&c, "data.level=char");                /* enum */
    ck_assert_int_eq(c.data.level, SL_LEVEL_CHAR);
    set_ok(&c, "train.schedule.type=epoch_decay");
    ck_assert_int_eq(c.train.schedule.type, SL_SCHED_EPOCH_DECAY);
    set_ok(&c, "model.output.type=sampled");      /* maps to cfg->model.output */
    ck_assert_int_eq(c.model.output, SL_OUTPUT_SAMPLED);
    set_ok(&c, "model.output.samples=64");        /* maps to cfg->model.samples */
    ck_assert_int_eq(c.model.samples, 64);
    set_ok(&c, "model.layers=[{lstm: 64}]");      /* a flow list */
    ck_assert_int_eq(c.model.nlayers, 1);
    ck_assert_int_eq(c.model.layers[0].hidden, 64);
    ck_assert_int_eq(c.model.layers[0].projection, 0);
    set_ok(&c, "model.layers=[{lstm: 32, projection: 16}, {projection: 0, lstm: 8}]");
    ck_assert_int_eq(c.model.nlayers, 2);
    ck_assert_int_eq(c.model.layers[0].hidden, 32);
    ck_assert_int_eq(c.model.layers[0].projection, 16);
    ck_assert_int_eq(c.model.layers[1].hidden, 8);
    ck_assert_int_eq(c.model.layers[1].projection, 0);
    set_ok(&c, "sync.periods=[{match: \"lstm.*\", period: 4}]"); /* a list of rules */
    ck_assert_int_eq(c.sync.nperiod_rules, 1);
    ck_assert_str_eq(c.sync.period_rule[0].match, "lstm.*");
    ck_assert_int_eq(c.sync.period_rule[0].period, 4);
    set_ok(&c, "sync={periods: [{match: softmax*, period: 2}, {match: '*', period: 3}]}");
    ck_assert_int_eq(c.sync.nperiod_rules, 2); /* replaced whole, not appended */
    ck_assert_str_eq(c.sync.period_rule[0].match, "softmax*");
    ck_assert_str_eq(c.sync.period_rule[1].match, "*");
    ck_assert_int_eq(c.sync.period_rule[1].period, 3);
    set_ok(&c, "sync.periods=[]");
    ck_assert_int_eq(c.sync.nperiod_rules, 0);
    ck_assert_ptr_null(c.sync.period_rule[0].match);
    set_ok(&c, "device=cuda:3");
    ck_assert_str_eq(c.device, "cuda:3");
    set_ok(&c, "data.valid=");                     /* empty value: "" */
    ck_assert_str_eq(c.data.valid, "");
    set_ok(&c, "data.train=a b.txt");             /* spaces inside a plain scalar */
    ck_assert_str_eq(c.data.train, "a b.txt");
    set_ok(&c, "data.test='x: y'");                /* quoting keeps ': ' */
    ck_assert_str_eq(c.data.test, "x: y");
    set_ok(&c, " train.bptt = 70 ");               /* spaces around key and value */
    ck_assert_int_eq(c.train.bptt, 70);
    set_ok(&c, "train.schedule={decay: 0.5, warmup_steps: 10}"); /* a whole section */
    ck_assert(c.train.schedule.decay == 0.5);
    ck_assert_int_eq(c.train.schedule.warmup_steps, 10);
    ck_assert_int_eq(c.train.schedule.type, SL_SCHED_EPOCH_DECAY); /* untouched */
    ck_assert_str_eq(c.source, "<defaults>"); /* --set does not change the source */
    sl_config_fini(&c);
}
END_TEST

/* run.dir follows run.name, lr and eps follow the optimizer, unless given. */
START_TEST(test_derived_defaults)
{
    sl_config_t c;

    sl_config_init(&c);
    load_ok(&c, "run: {name: brown}\ntrain: {optimizer: {type: adagrad}}\n");
    ck_assert_str_eq(c.run.dir, "runs/brown");
    ck_assert(c.train.optimizer.lr == 0.01);
    ck_assert(c.train.optimizer.eps == 1e-10);
    set_ok(&c, "run.name=b2");
    ck_assert_str_eq(c.run.dir, "runs/b2");
    set_ok(&c, "train.optimizer.type=adam");
    ck_assert(c.train.optimizer.lr == 0.001);
    ck_assert(c.train.optimizer.eps == 1e-8);
    /* given values stay, whatever the order in the file */
    load_ok(&c, "run: {dir: runs/b2, name: other}\n"
                "train: {optimizer: {lr: 0.001, type: sgd}}\n");
    ck_assert_str_eq(c.run.dir, "runs/b2");
    ck_assert(c.train.optimizer.lr == 0.001);
    ck_assert(c.train.optimizer.eps == 1e-8);
    /* a value that no longer matches the default stays when the other key changes */
    set_ok(&c, "run.name=third");
    ck_assert_str_eq(c.run.dir, "runs/b2");
    set_ok(&c, "train.optimizer.type=adagrad");
    ck_assert(c.train.optimizer.lr == 0.001);
    ck_assert(c.train.optimizer.eps == 1e-10);
    sl_config_fini(&c);
}
END_TEST

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
    {"trian:\n  batch: 1\n", "x.yaml:1:1: unknown key 'trian' at top level (did you mean 'train'?)"},
    {"train: {optimizer: {init: 0}}",
     "x.yaml:1:21: unknown key 'init' in 'train.optimizer' (did you mean 'initial_accumulator'?)"},
    {"model: {outptu: {type: full}}",
     "x.yaml:1:9: unknown key 'outptu' in 'model' (did you mean 'output'?)"},
    {"train.batch: 5",
     "x.yaml:1:1: unknown key 'train.batch' at top level (expected one of: run, data, model, "
     "train, cluster, topology, sync, embedding, device, precision)"},
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
    {"train: {bptt: 2147483648}", "x.yaml:1:15: 'train.bptt' must be at most 2147483647, got 2147483648"},
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
    /* syntax and shape */
    {"run:\n  name: [x\n", "x.yaml:3:1: YAML syntax error: did not find expected ',' or ']'"},
    {"run:\n\tname: x\n",
     "x.yaml:2:1: YAML syntax error: found character that cannot start any token"},
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
    {"model: {layers: [{lstm: 0}]}", "x.yaml:1:25: 'model.layers[0].lstm' must be at least 1, got 0"},
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
    load_ok(&c, "run: {name: kept}\ntrain: {batch: 8}\n");
    ck_assert_int_eq(sl_config_load_string(&c, "run: {name: lost}\ntrain: {batch: 9, bptt: x}\n",
                                           "bad.yaml"),
                     SL_ERR_CONFIG);
    ck_assert_str_eq(c.run.name, "kept");
    ck_assert_str_eq(c.run.dir, "runs/kept");
    ck_assert_int_eq(c.train.batch, 8);
    ck_assert_str_eq(c.source, "t.yaml");
    ck_assert_int_eq(sl_config_set(&c, "train.optimizer={type: adam, lr: -1}"), SL_ERR_CONFIG);
    ck_assert_int_eq(c.train.optimizer.type, SL_OPT_SGD);
    ck_assert(c.train.optimizer.lr == 20.0);
    /* a rule list half read (its first rule's glob already copied) keeps the old one */
    set_ok(&c, "sync.periods=[{match: lstm.0, period: 2}]");
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
};

START_TEST(test_validate)
{
    sl_config_t c;

    for (size_t i = 0; i < sizeof validate_cases / sizeof validate_cases[0]; i++) {
        const validate_case_t *vc = &validate_cases[i];
        sl_config_init(&c);
        for (int j = 0; j < 4 && vc->sets[j]; j++)
            set_ok(&c, vc->sets[j]);
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
    load_ok(&c, "data: {train: t.txt}");
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
    set_ok(&c, "sync.periods=[{match: lstm.0, period: 2}, {match: lstm.1, period: 3}]");
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

START_TEST(test_write_round_trip)
{
    char dir[] = "/tmp/shoal-check-config-XXXXXX", path[128];
    sl_config_t a, b, d;
    char *text, *again;
    FILE *f;

    /* every key away from its default, strings that need quoting */
    sl_config_init(&a);
    load_ok(&a, full_yaml);
    set_ok(&a, "run.name='odd: name # with \"quotes\", \\\\ and\ttab'");
    set_ok(&a, "data.valid=null");   /* plain null: the empty string */
    set_ok(&a, "data.test='null'");  /* quoted: the word null */
    set_ok(&a, "data.cache_dir=-dash");
    set_ok(&a, "train.optimizer.lr=0.1");
    set_ok(&a, "run.seed=18446744073709551615");
    set_ok(&a, "model.layers=[{lstm: 7, projection: 3}, {lstm: 1}, {lstm: 2}, {lstm: 3}, "
               "{lstm: 4}, {lstm: 5}, {lstm: 6}, {lstm: 9, projection: 9}]");
    ck_assert_str_eq(a.run.name, "odd: name # with \"quotes\", \\\\ and\ttab");
    ck_assert_str_eq(a.data.valid, "");
    ck_assert_str_eq(a.data.test, "null");

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/resolved.yaml", dir);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(sl_config_write_yaml(&a, f), SL_OK);
    fclose(f);
    sl_config_init(&b);
    ck_assert_msg(sl_config_load_file(&b, path) == SL_OK, "%s", sl_err_msg());
    assert_config_equal(&a, &b);
    ck_assert_str_eq(b.source, path);
    /* writing the loaded copy gives the same text */
    text = yaml_of(&a);
    again = yaml_of(&b);
    ck_assert_str_eq(text, again);
    /* block style, nested sections, every key */
    ck_assert_ptr_nonnull(strstr(text, "\ntrain:\n  batch: 16\n"));
    ck_assert_ptr_nonnull(strstr(text, "\n  optimizer:\n    type: adam\n    lr: 0.1\n"));
    ck_assert_ptr_nonnull(strstr(text, "\n  layers:\n    - {lstm: 7, projection: 3}\n"));
    ck_assert_ptr_nonnull(strstr(text, "\n  periods:\n    - {match: \"embedding.*\", period: 128}\n"
                                       "    - {match: lstm.1, period: 4}\n  timeout_ms:"));
    ck_assert_ptr_nonnull(strstr(text, "\ndevice: cuda:1\nprecision: bf16\n"));
    for (int i = 0; all_keys[i]; i++) {
        const char *leaf = strrchr(all_keys[i], '.');
        int depth = 0;
        char needle[64];
        for (const char *p = all_keys[i]; *p; p++)
            depth += *p == '.';
        snprintf(needle, sizeof needle, "\n%*s%s:", 2 * depth, "", leaf ? leaf + 1 : all_keys[i]);
        ck_assert_msg(strstr(text, needle) != NULL, "key %s not written", all_keys[i]);
    }
    free(text);
    free(again);
    unlink(path);
    rmdir(dir);

    /* the defaults round-trip as well */
    sl_config_init(&d);
    text = yaml_of(&d);
    ck_assert_ptr_nonnull(strstr(text, "\n  periods: []\n"));
    sl_config_fini(&b);
    sl_config_init(&b);
    set_ok(&b, "run.name=elsewhere");
    load_ok(&b, text);
    assert_config_equal(&d, &b);
    free(text);
    sl_config_fini(&a);
    sl_config_fini(&b);
    sl_config_fini(&d);
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

/* The schema printout and doc/config.md both cover every key. */
START_TEST(test_schema_and_doc)
{
    const char *srcdir = getenv("SHOAL_SRCDIR");
    char *buf = NULL, *doc, path[1024];
    size_t len = 0, doclen;
    FILE *f = open_memstream(&buf, &len);
    int lines = 0;

    ck_assert_ptr_nonnull(f);
    sl_config_print_schema(f);
    fclose(f);
    ck_assert_msg(srcdir != NULL, "SHOAL_SRCDIR is not set");
    snprintf(path, sizeof path, "%s/doc/config.md", srcdir);
    ck_assert_msg(sl_file_read_all(path, &doc, &doclen) == SL_OK, "%s", sl_err_msg());
    for (int i = 0; all_keys[i]; i++) {
        char needle[80];
        snprintf(needle, sizeof needle, "\n%s ", all_keys[i]);
        ck_assert_msg(strstr(buf, needle) != NULL, "schema lacks %s", all_keys[i]);
        snprintf(needle, sizeof needle, "`%s`", all_keys[i]);
        ck_assert_msg(strstr(doc, needle) != NULL, "doc/config.md lacks %s", all_keys[i]);
    }
    /* and nothing else: between the header and the first blank line, one line starts
     * with a key name per key (long defaults push the meaning onto an indented line) */
    for (char *p = strstr(buf, "\nKEY ") + 1; (p = strchr(p, '\n')) != NULL && p[1] != '\n'; p++)
        if (p[1] != ' ')
            lines++;
    ck_assert_int_eq(lines, (int)(sizeof all_keys / sizeof all_keys[0]) - 1);
    ck_assert_ptr_nonnull(strstr(buf, "20 (sgd), 0.01 (adagrad), 0.001 (adam)"));
    ck_assert_ptr_nonnull(strstr(buf, "runs/<run.name>"));
    free(buf);
    free(doc);
}
END_TEST

/* Every YAML file in conf/ loads and validates, and the four reference ones say what their
 * comments say. */
START_TEST(test_examples)
{
    const char *srcdir = getenv("SHOAL_SRCDIR");
    char pattern[1024];
    glob_t g;
    int seen = 0;

    ck_assert_msg(srcdir != NULL, "SHOAL_SRCDIR is not set");
    snprintf(pattern, sizeof pattern, "%s/conf/*.yaml", srcdir);
    ck_assert_int_eq(glob(pattern, 0, NULL, &g), 0);
    ck_assert_uint_ge(g.gl_pathc, 4);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *p = g.gl_pathv[i], *base = strrchr(p, '/') + 1;
        sl_config_t c;
        sl_config_init(&c);
        ck_assert_msg(sl_config_load_file(&c, p) == SL_OK, "%s", sl_err_msg());
        ck_assert_msg(sl_config_validate(&c) == SL_OK, "%s", sl_err_msg());
        if (!strcmp(base, "brown-word.yaml")) {
            ck_assert_str_eq(c.data.train, "../shared/data/brown/train.txt");
            ck_assert_str_eq(c.data.valid, "../shared/data/brown/valid.txt");
            ck_assert_str_eq(c.data.test, "../shared/data/brown/test.txt");
            ck_assert_int_eq(c.data.vocab_size, 10000);
            ck_assert_int_eq(c.model.embedding, 256);
            ck_assert_int_eq(c.model.nlayers, 2);
            ck_assert_int_eq(c.model.layers[1].hidden, 256);
            ck_assert_int_eq(c.model.output, SL_OUTPUT_FULL);
            ck_assert_int_eq(c.train.batch, 32);
            ck_assert_int_eq(c.train.bptt, 35);
            ck_assert_int_eq(c.train.optimizer.type, SL_OPT_SGD);
            ck_assert(c.train.optimizer.lr == 20.0 && c.train.optimizer.clip == 0.25);
            ck_assert_int_eq(c.train.epochs, 1);
            seen++;
        } else if (!strcmp(base, "brown-sampled.yaml")) {
            ck_assert_int_eq(c.model.output, SL_OUTPUT_SAMPLED);
            ck_assert_int_eq(c.model.samples, 1024);
            ck_assert_int_eq(c.model.nlayers, 2);
            ck_assert(c.train.optimizer.lr == 20.0 && c.train.optimizer.clip == 0.25);
            seen++;
        } else if (!strcmp(base, "shakespeare-char.yaml")) {
            ck_assert_str_eq(c.data.train, "../shared/data/tinyshakespeare/input.txt");
            ck_assert_str_eq(c.data.valid, "");
            ck_assert(c.data.valid_fraction == 0.1);
            ck_assert_int_eq(c.data.level, SL_LEVEL_CHAR);
            ck_assert_int_eq(c.model.embedding, 64);
            ck_assert_int_eq(c.model.nlayers, 1);
            ck_assert_int_eq(c.model.layers[0].hidden, 512);
            ck_assert_int_eq(c.train.bptt, 100);
            ck_assert_int_eq(c.train.optimizer.type, SL_OPT_ADAM);
            ck_assert(c.train.optimizer.lr == 2e-3 && c.train.optimizer.clip == 5.0);
            ck_assert_int_eq(c.model.output, SL_OUTPUT_FULL);
            seen++;
        } else if (!strcmp(base, "brown-lstmp.yaml")) {
            ck_assert_int_eq(c.model.embedding, 512);
            ck_assert_int_eq(c.model.nlayers, 1);
            ck_assert_int_eq(c.model.layers[0].hidden, 2048);
            ck_assert_int_eq(c.model.layers[0].projection, 512);
            ck_assert_int_eq(c.model.output, SL_OUTPUT_SAMPLED);
            ck_assert_int_eq(c.train.optimizer.type, SL_OPT_ADAGRAD);
            ck_assert(c.train.optimizer.lr == 0.1 && c.train.optimizer.clip == 10.0);
            ck_assert(c.train.optimizer.eps == 1e-10);
            ck_assert_int_eq(c.train.schedule.type, SL_SCHED_EPOCH_DECAY);
            ck_assert(c.train.schedule.decay == 0.9);
            seen++;
        }
        sl_config_fini(&c);
    }
    globfree(&g);
    ck_assert_int_eq(seen, 4);
}
END_TEST

START_TEST(test_number_limits)
{
    sl_config_t c;

    sl_config_init(&c);
    set_ok(&c, "train.batch=2147483647");
    ck_assert_int_eq(c.train.batch, 2147483647);
    set_ok(&c, "train.max_steps=9223372036854775807");
    ck_assert_int_eq(c.train.max_steps, 9223372036854775807L);
    set_ok(&c, "run.seed=0");
    ck_assert_uint_eq(c.run.seed, 0);
    set_ok(&c, "train.optimizer.eps=1e-300");
    ck_assert(c.train.optimizer.eps == 1e-300);
    set_ok(&c, "model.dropout=0.999999999999");
    ck_assert(c.model.dropout == 0.999999999999);
    set_ok(&c, "train.batch=+12");
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
    ck_assert_int_eq(sl_config_load_string(&c, "run:\n  name: ab\xff\n", "x.yaml"),
                     SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "x.yaml:2:11: YAML syntax error: invalid leading UTF-8 octet");
    /* UTF-8 names, anchors and aliases, null sections, explicit document markers */
    load_ok(&c, "---\nrun: {name: &n \"caf\xc3\xa9\", dir: *n}\ntrain:\ndata: ~\n...\n");
    ck_assert_str_eq(c.run.name, "caf\xc3\xa9");
    ck_assert_str_eq(c.run.dir, "caf\xc3\xa9");
    ck_assert_int_eq(c.train.batch, 32);
    /* yes/no in any case, bools only */
    load_ok(&c, "run: {resume: NO}\ntrain: {eval_every_epoch: Yes}\n");
    ck_assert_int_eq(c.run.resume, 0);
    ck_assert_int_eq(c.train.eval_every_epoch, 1);
    ck_assert_int_eq(sl_config_load_string(&c, "run: {resume: 1}", "x.yaml"), SL_ERR_CONFIG);
    ck_assert_str_eq(sl_err_msg(), "x.yaml:1:15: 'run.resume' must be true or false, got '1'");
    sl_config_fini(&c);
}
END_TEST

static Suite *
config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *core = tcase_create("core");
    tcase_add_test(core, test_defaults);
    tcase_add_test(core, test_block_momentum_auto);
    tcase_add_test(core, test_enum_names);
    tcase_add_test(core, test_full_file);
    tcase_add_test(core, test_set_each_type);
    tcase_add_test(core, test_derived_defaults);
    tcase_add_test(core, test_bad_yaml);
    tcase_add_test(core, test_bad_set);
    tcase_add_test(core, test_failure_changes_nothing);
    tcase_add_test(core, test_validate);
    tcase_add_test(core, test_write_round_trip);
    tcase_add_test(core, test_file_errors);
    tcase_add_test(core, test_schema_and_doc);
    tcase_add_test(core, test_examples);
    suite_add_tcase(s, core);
    TCase *limits = tcase_create("limits");
    tcase_add_test(limits, test_number_limits);
    tcase_add_test(limits, test_text_limits);
    suite_add_tcase(s, limits);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(config_suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
