/* Unit tests of src/config: defaults, YAML loading, --set of every type, derived
 * defaults, the write/load round trip, the schema and doc/config.md, and every example
 * in conf/. Bad input, its exact error messages and the limits of numbers and text are
 * in check_config_errors.c. */
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

#include "test_tool.h"

/* Every key of the schema, written out here independently of sl_config_schema.c's table. */
static const char *const all_keys[] = {"run.name",
                                       "run.seed",
                                       "run.dir",
                                       "run.threads",
                                       "run.log_every",
                                       "run.checkpoint_every",
                                       "run.resume",
                                       "run.keep_best",
                                       "run.keep_checkpoints",
                                       "data.train",
                                       "data.valid",
                                       "data.test",
                                       "data.level",
                                       "data.vocab_size",
                                       "data.valid_fraction",
                                       "data.cache_dir",
                                       "data.max_tokens",
                                       "model.embedding",
                                       "model.layers",
                                       "model.dropout",
                                       "model.output.type",
                                       "model.output.samples",
                                       "model.init_range",
                                       "train.batch",
                                       "train.global_batch",
                                       "train.bptt",
                                       "train.epochs",
                                       "train.max_steps",
                                       "train.loss_scale.dynamic",
                                       "train.loss_scale.init",
                                       "train.loss_scale.growth_interval",
                                       "train.eval_every_epoch",
                                       "train.optimizer.type",
                                       "train.optimizer.lr",
                                       "train.optimizer.clip",
                                       "train.optimizer.beta1",
                                       "train.optimizer.beta2",
                                       "train.optimizer.eps",
                                       "train.optimizer.initial_accumulator",
                                       "train.schedule.type",
                                       "train.schedule.decay",
                                       "train.schedule.warmup_steps",
                                       "train.schedule.steps",
                                       "cluster.nodes",
                                       "cluster.transport",
                                       "cluster.master",
                                       "cluster.bind",
                                       "cluster.timeout_ms",
                                       "cluster.rendezvous_timeout_ms",
                                       "cluster.shared_memory",
                                       "cluster.io_threads",
                                       "cluster.stripes",
                                       "cluster.allreduce",
                                       "cluster.security",
                                       "cluster.key_file",
                                       "cluster.emulate.bandwidth",
                                       "cluster.emulate.latency_ms",
                                       "cluster.emulate.jitter_ms",
                                       "cluster.restart.max",
                                       "cluster.restart.delay_ms",
                                       "cluster.watchdog_timeouts",
                                       "topology.degree",
                                       "sync.algorithm",
                                       "sync.neighbours",
                                       "sync.block_momentum",
                                       "sync.block_lr",
                                       "sync.nesterov",
                                       "sync.block_reference",
                                       "sync.period",
                                       "sync.embedding_period",
                                       "sync.embedding_shards",
                                       "sync.periods",
                                       "sync.stagger",
                                       "sync.timeout_ms",
                                       "sync.keep_node_models",
                                       "sync.overlap_steps",
                                       "sync.overlap_dense",
                                       "sync.exchange",
                                       "sync.exchange_top",
                                       "sync.exchange_random",
                                       "sync.compression",
                                       "sync.compression_scale",
                                       "sync.quant_block",
                                       "sync.rounding",
                                       "sync.topk",
                                       "embedding.seed_groups",
                                       "device",
                                       "precision",
                                       "device_options.lstm",
                                       NULL};

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
    ck_assert_int_eq(a->train.schedule.steps, b->train.schedule.steps);
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
    ck_assert_int_eq(a->sync.stagger, b->sync.stagger);
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
    ck_assert_str_eq(a->device_options.lstm, b->device_options.lstm);
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
    ck_assert_int_eq(c.sync.stagger, 0);
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
    ck_assert_str_eq(c.device_options.lstm, "auto");
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
    test_config_set_ok(&c, "sync.block_momentum=auto");
    for (int i = 0; i < 3; i++) {
        c.cluster.nodes = nodes[i];
        sl_bmuf_opts_from_config(&o, &c);
        ck_assert_float_eq(o.eta, eta[i]);
    }
    text = yaml_of(&c);
    ck_assert_ptr_nonnull(strstr(text, "\n  block_momentum: auto\n"));
    free(text);
    test_config_set_ok(&c, "sync.block_momentum=0.5");
    sl_bmuf_opts_from_config(&o, &c);
    ck_assert_float_eq(o.eta, 0.5f);
    test_config_set_ok(&c, "sync={block_momentum: auto}");
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
    "       periods: [{match: \"embedding.*\", period: 128}, {period: 4, match: lstm.1}],\n"
    "       stagger: true}\n"
    "device: cuda:1\n"
    "precision: bf16\n"
    "device_options: {lstm: cudnn}\n";

START_TEST(test_full_file)
{
    sl_config_t c;

    sl_config_init(&c);
    test_config_load_ok(&c, full_yaml);
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
    ck_assert_int_eq(c.sync.stagger, 1);
    ck_assert_int_eq(c.sync.timeout_ms, 500);
    ck_assert_int_eq(c.sync.keep_node_models, 0);
    ck_assert_str_eq(c.device, "cuda:1");
    ck_assert_str_eq(c.precision, "bf16");
    ck_assert_str_eq(c.device_options.lstm, "cudnn");
    ck_assert_int_eq(sl_config_validate(&c), SL_OK);
    sl_config_fini(&c);
}
END_TEST

START_TEST(test_set_each_type)
{
    sl_config_t c;

    sl_config_init(&c);
    test_config_set_ok(&c, "run.name=exp1"); /* string */
    ck_assert_str_eq(c.run.name, "exp1");
    test_config_set_ok(&c, "train.batch=64"); /* int */
    ck_assert_int_eq(c.train.batch, 64);
    test_config_set_ok(&c, "data.max_tokens=5000000000"); /* long, over 32 bits */
    ck_assert_int_eq(c.data.max_tokens, 5000000000L);
    test_config_set_ok(&c, "run.seed=18446744073709551615"); /* uint64, the largest */
    ck_assert_uint_eq(c.run.seed, UINT64_MAX);
    test_config_set_ok(&c, "train.optimizer.lr=0.5"); /* double */
    ck_assert(c.train.optimizer.lr == 0.5);
    test_config_set_ok(&c, "train.optimizer.clip=3"); /* an integer is a number too */
    ck_assert(c.train.optimizer.clip == 3.0);
    test_config_set_ok(&c, "run.resume=no"); /* bools: true/false/yes/no */
    ck_assert_int_eq(c.run.resume, 0);
    test_config_set_ok(&c, "run.resume=True");
    ck_assert_int_eq(c.run.resume, 1);
    test_config_set_ok(&c, "train.eval_every_epoch=false");
    ck_assert_int_eq(c.train.eval_every_epoch, 0);
    test_config_set_ok(&c, "data.level=char"); /* enum */
    ck_assert_int_eq(c.data.level, SL_LEVEL_CHAR);
    test_config_set_ok(&c, "train.schedule.type=epoch_decay");
    ck_assert_int_eq(c.train.schedule.type, SL_SCHED_EPOCH_DECAY);
    test_config_set_ok(&c, "model.output.type=sampled"); /* maps to cfg->model.output */
    ck_assert_int_eq(c.model.output, SL_OUTPUT_SAMPLED);
    test_config_set_ok(&c, "model.output.samples=64"); /* maps to cfg->model.samples */
    ck_assert_int_eq(c.model.samples, 64);
    test_config_set_ok(&c, "model.layers=[{lstm: 64}]"); /* a flow list */
    ck_assert_int_eq(c.model.nlayers, 1);
    ck_assert_int_eq(c.model.layers[0].hidden, 64);
    ck_assert_int_eq(c.model.layers[0].projection, 0);
    test_config_set_ok(&c, "model.layers=[{lstm: 32, projection: 16}, {projection: 0, lstm: 8}]");
    ck_assert_int_eq(c.model.nlayers, 2);
    ck_assert_int_eq(c.model.layers[0].hidden, 32);
    ck_assert_int_eq(c.model.layers[0].projection, 16);
    ck_assert_int_eq(c.model.layers[1].hidden, 8);
    ck_assert_int_eq(c.model.layers[1].projection, 0);
    test_config_set_ok(&c, "sync.periods=[{match: \"lstm.*\", period: 4}]"); /* a list of rules */
    ck_assert_int_eq(c.sync.nperiod_rules, 1);
    ck_assert_str_eq(c.sync.period_rule[0].match, "lstm.*");
    ck_assert_int_eq(c.sync.period_rule[0].period, 4);
    test_config_set_ok(&c,
                       "sync={periods: [{match: softmax*, period: 2}, {match: '*', period: 3}]}");
    ck_assert_int_eq(c.sync.nperiod_rules, 2); /* replaced whole, not appended */
    ck_assert_str_eq(c.sync.period_rule[0].match, "softmax*");
    ck_assert_str_eq(c.sync.period_rule[1].match, "*");
    ck_assert_int_eq(c.sync.period_rule[1].period, 3);
    test_config_set_ok(&c, "sync.periods=[]");
    ck_assert_int_eq(c.sync.nperiod_rules, 0);
    ck_assert_ptr_null(c.sync.period_rule[0].match);
    test_config_set_ok(&c, "device=cuda:3");
    ck_assert_str_eq(c.device, "cuda:3");
    test_config_set_ok(&c, "data.valid="); /* empty value: "" */
    ck_assert_str_eq(c.data.valid, "");
    test_config_set_ok(&c, "data.train=a b.txt"); /* spaces inside a plain scalar */
    ck_assert_str_eq(c.data.train, "a b.txt");
    test_config_set_ok(&c, "data.test='x: y'"); /* quoting keeps ': ' */
    ck_assert_str_eq(c.data.test, "x: y");
    test_config_set_ok(&c, " train.bptt = 70 "); /* spaces around key and value */
    ck_assert_int_eq(c.train.bptt, 70);
    test_config_set_ok(&c, "train.schedule={decay: 0.5, warmup_steps: 10}"); /* a whole section */
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
    test_config_load_ok(&c, "run: {name: brown}\ntrain: {optimizer: {type: adagrad}}\n");
    ck_assert_str_eq(c.run.dir, "runs/brown");
    ck_assert(c.train.optimizer.lr == 0.01);
    ck_assert(c.train.optimizer.eps == 1e-10);
    test_config_set_ok(&c, "run.name=b2");
    ck_assert_str_eq(c.run.dir, "runs/b2");
    test_config_set_ok(&c, "train.optimizer.type=adam");
    ck_assert(c.train.optimizer.lr == 0.001);
    ck_assert(c.train.optimizer.eps == 1e-8);
    /* given values stay, whatever the order in the file */
    test_config_load_ok(&c, "run: {dir: runs/b2, name: other}\n"
                            "train: {optimizer: {lr: 0.001, type: sgd}}\n");
    ck_assert_str_eq(c.run.dir, "runs/b2");
    ck_assert(c.train.optimizer.lr == 0.001);
    ck_assert(c.train.optimizer.eps == 1e-8);
    /* a value that no longer matches the default stays when the other key changes */
    test_config_set_ok(&c, "run.name=third");
    ck_assert_str_eq(c.run.dir, "runs/b2");
    test_config_set_ok(&c, "train.optimizer.type=adagrad");
    ck_assert(c.train.optimizer.lr == 0.001);
    ck_assert(c.train.optimizer.eps == 1e-10);
    sl_config_fini(&c);
}
END_TEST

/* train.batch is train.global_batch over cluster.nodes, and moves with either of them
 * while it is not given; a count of nodes not known yet (auto) splits nothing. */
START_TEST(test_global_batch)
{
    static const struct {
        const char *set;
        int batch;
    } steps[] = {
        {"cluster.nodes=4", 32}, /* no global batch: the node's own default */
        {"train.global_batch=32", 8},
        {"cluster.nodes=8", 4},
        {"cluster.nodes=auto", 32},
        {"cluster.nodes=2", 16},
        {"train.global_batch=64", 32},
        {"train.global_batch=0", 32},
        /* a given train.batch stays; sl_config_validate says when the two disagree */
        {"train.batch=5", 5},
        {"train.global_batch=64", 5},
    };
    sl_config_t c;

    sl_config_init(&c);
    ck_assert_int_eq(c.train.global_batch, 0);
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        test_config_set_ok(&c, steps[i].set);
        ck_assert_msg(c.train.batch == steps[i].batch, "after %s: batch %d, want %d", steps[i].set,
                      c.train.batch, steps[i].batch);
    }
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
    test_config_load_ok(&a, full_yaml);
    test_config_set_ok(&a, "run.name='odd: name # with \"quotes\", \\\\ and\ttab'");
    test_config_set_ok(&a, "data.valid=null");  /* plain null: the empty string */
    test_config_set_ok(&a, "data.test='null'"); /* quoted: the word null */
    test_config_set_ok(&a, "data.cache_dir=-dash");
    test_config_set_ok(&a, "train.optimizer.lr=0.1");
    test_config_set_ok(&a, "run.seed=18446744073709551615");
    test_config_set_ok(&a,
                       "model.layers=[{lstm: 7, projection: 3}, {lstm: 1}, {lstm: 2}, {lstm: 3}, "
                       "{lstm: 4}, {lstm: 5}, {lstm: 6}, {lstm: 9, projection: 9}]");
    ck_assert_str_eq(a.run.name, "odd: name # with \"quotes\", \\\\ and\ttab");
    ck_assert_str_eq(a.data.valid, "");
    ck_assert_str_eq(a.data.test, "null");
    /* characters libyaml reads only escaped: C0 and C1 controls (NEL too), U+FFFE/F;
       U+00A0 and U+2028 are printable (found by tests/fuzz/fuzz_config) */
    test_config_set_ok(&a, "data.train=\"\\x01\\u0085\\u009f\\uFFFE\\uFFFF\\u00a0\\u2028\"");
    ck_assert_str_eq(a.data.train,
                     "\x01\xc2\x85\xc2\x9f\xef\xbf\xbe\xef\xbf\xbf\xc2\xa0\xe2\x80\xa8");

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
    ck_assert_ptr_nonnull(
        strstr(text, "\n  periods:\n    - {match: \"embedding.*\", period: 128}\n"
                     "    - {match: lstm.1, period: 4}\n  stagger: true\n  timeout_ms:"));
    ck_assert_ptr_nonnull(strstr(text, "\ndevice: cuda:1\nprecision: bf16\ndevice_options:\n"
                                       "  lstm: "));
    ck_assert_ptr_nonnull(
        strstr(text, "\n  train: \"\\x01\\x85\\x9f\\uFFFE\\uFFFF\xc2\xa0\xe2\x80\xa8\"\n"));
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
    test_config_set_ok(&b, "run.name=elsewhere");
    test_config_load_ok(&b, text);
    assert_config_equal(&d, &b);
    free(text);
    sl_config_fini(&a);
    sl_config_fini(&b);
    sl_config_fini(&d);
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
    tcase_add_test(core, test_global_batch);
    tcase_add_test(core, test_write_round_trip);
    tcase_add_test(core, test_schema_and_doc);
    tcase_add_test(core, test_examples);
    suite_add_tcase(s, core);
    return s;
}

int
main(void)
{
    return test_main(config_suite());
}
