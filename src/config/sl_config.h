/* The run configuration: a typed struct filled from defaults, then a YAML file, then
 * --set key=value overrides, then validated. Every error message has the form
 * "FILE:LINE:COL: message" (for --set: "--set KEY:1:COL: message") on one line: text
 * quoted from the input is cut at 60 bytes and its control characters escaped. The
 * schema of keys, their types, defaults and documentation lives in one table in
 * sl_config_schema.c. */
#ifndef SL_CONFIG_H
#define SL_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "common/sl_status.h"

#define SL_MAX_LAYERS 8
/* train.bptt's most: the readers of a model file size its buffers by it */
#define SL_MAX_BPTT 10000
#define SL_MAX_PERIOD_RULES 32 /* entries of sync.periods */
/* A number key's value when the file says "auto": the key's documented rule decides. */
#define SL_CONFIG_AUTO (-1.0)
/* An integer key's (cluster.nodes) when the file says "auto". */
#define SL_CONFIG_AUTO_INT (-1)

typedef enum { SL_LEVEL_WORD, SL_LEVEL_CHAR } sl_level_t;
typedef enum { SL_OUTPUT_FULL, SL_OUTPUT_SAMPLED } sl_output_kind_t;
typedef enum { SL_OPT_SGD, SL_OPT_ADAGRAD, SL_OPT_ADAM } sl_opt_kind_t;
typedef enum {
    SL_SCHED_CONSTANT,    /* lr */
    SL_SCHED_EPOCH_DECAY, /* lr * decay^epoch */
    SL_SCHED_LINEAR       /* lr * (1 - step / total_steps), down to 0 */
} sl_sched_kind_t;
/* How the nodes of a run reach each other: Unix-domain sockets (one machine) or TCP. */
typedef enum { SL_CLUSTER_IPC, SL_CLUSTER_TCP } sl_cluster_transport_t;
typedef enum { SL_SECURITY_CURVE, SL_SECURITY_MAC, SL_SECURITY_NONE } sl_security_t;
/* How an allreduce moves its segments, and an allgather its blocks
 * (src/transport/sl_collective.h): halving and doubling, recursive doubling, where they
 * can, else around the ring; or always around the ring. */
typedef enum { SL_ALLREDUCE_AUTO, SL_ALLREDUCE_RING } sl_allreduce_t;
/* How the nodes' models are kept together (src/sync/sl_sync.h). */
typedef enum {
    SL_SYNC_NONE,       /* nodes train independently */
    SL_SYNC_ALLREDUCE,  /* gradients summed over all nodes every step */
    SL_SYNC_MA,         /* model averaging over all nodes every period */
    SL_SYNC_BMUF,       /* BMUF on the average over all nodes */
    SL_SYNC_LOCAL_MA,   /* average with every ring neighbour */
    SL_SYNC_LOCAL_BMUF, /* BMUF on the average with every ring neighbour */
    SL_SYNC_GOSSIP_MA,  /* average with q neighbours of the gossip schedule */
    SL_SYNC_GOSSIP_BMUF /* BMUF on the gossip average */
} sl_sync_algorithm_t;
/* Which model the BMUF block gradient G = theta_bar - ref is taken against. */
typedef enum { SL_BLOCK_REF_BLOCKSTART, SL_BLOCK_REF_OMEGA } sl_block_ref_t;
/* How the row-shard components (embedding, softmax) are exchanged (src/embed). */
typedef enum {
    SL_EXCHANGE_DENSE,    /* every row of the shard */
    SL_EXCHANGE_UNIQUE,   /* only the rows touched since the last sync (Zipf-unique) */
    SL_EXCHANGE_ALLGATHER /* allreduce mode: every node's K x D touched rows, gathered */
} sl_exchange_t;
/* Encoding of exchanged values on the wire. int8 and int4 are block-quantized deltas
 * (src/embed/sl_quant.h), for the neighbourhood algorithms only. */
typedef enum {
    SL_COMPRESS_FP32,
    SL_COMPRESS_FP16,
    SL_COMPRESS_BF16,
    SL_COMPRESS_INT8,
    SL_COMPRESS_INT4
} sl_compress_t;
/* Rounding of the int8 / int4 quantizers. */
typedef enum { SL_ROUNDING_NEAREST, SL_ROUNDING_STOCHASTIC } sl_rounding_t;

typedef struct {
    int hidden;     /* LSTM cell size H */
    int projection; /* LSTMP output size P; 0 = no projection (output is H) */
} sl_layer_config_t;

/* One sync.periods rule: the components whose name the glob matches (fnmatch(3), no
 * flags: '*' crosses dots) sync every period steps, unless an earlier rule matched. */
typedef struct {
    char *match; /* glob on component names (sl_model.h): embedding.S, lstm.L, proj.L,
                    softmax.S, softmax_bias; owned, non-empty */
    int period;  /* H_i >= 1 */
} sl_period_rule_t;

typedef struct {
    char *source; /* file the config came from ("<defaults>" if none); owned */
    struct sl_config_where *where; /* where each key that is not its default was set
                                      (sl_config_key_where); owned */

    struct {
        char *name;       /* run name, default "shoal" */
        uint64_t seed;    /* default 1234 */
        char *dir;        /* run directory, default "runs/<name>" */
        int threads;      /* compute threads per node, default 1 (0 = all cores) */
        int log_every;    /* steps between progress/metrics lines, default 20 */
        int checkpoint_every; /* steps between checkpoints, default 500 (0 = end only) */
        int resume;       /* continue from the run dir's checkpoint if present, default 1 */
        int keep_best;    /* keep the best-validation model as best.bin, default 0 */
        int keep_checkpoints; /* keep the last K checkpoints as checkpoint-<step>.bin,
                                 default 0 (none) */
    } run;

    struct {
        char *train;       /* required */
        char *valid;       /* optional; "" = none (see valid_fraction) */
        char *test;        /* optional */
        sl_level_t level;  /* word | char, default word */
        int vocab_size;    /* word: top V training words (+ <unk>, <eos>), default 10000;
                              char: 0 = every character of the training text */
        double valid_fraction; /* when valid is empty: hold out this tail fraction of
                                  train as validation (tinyshakespeare: 0.1), default 0 */
        char *cache_dir;   /* token cache; "" = $XDG_CACHE_HOME/shoal or ~/.cache/shoal */
        long max_tokens;   /* use only the first N training tokens (0 = all) */
    } data;

    struct {
        int embedding;                 /* E, default 256 */
        int nlayers;                   /* default 2 */
        sl_layer_config_t layers[SL_MAX_LAYERS]; /* default 2 x {256, 0} */
        double dropout;                /* default 0 */
        sl_output_kind_t output;       /* full | sampled, default full */
        int samples;                   /* sampled negatives S, default 1024 */
        double init_range;             /* uniform init bound, default 0.1 */
    } model;

    struct {
        int batch;  /* B per node, default 32, or global_batch / cluster.nodes */
        int global_batch; /* sequences a step over all nodes; 0 = train.batch decides */
        int bptt;   /* T, default 35 */
        int epochs; /* default 1 */
        long max_steps; /* stop after this many steps (0 = epochs decide) */
        struct {
            sl_opt_kind_t type; /* default sgd */
            double lr;          /* default 20 (sgd), see docs */
            double clip;        /* global-norm clip, 0 = off, default 0.25 */
            double beta1, beta2, eps; /* adam (0.9, 0.999, 1e-8); adagrad eps 1e-10 */
            double initial_accumulator; /* adagrad, default 0 */
        } optimizer;
        struct {
            sl_sched_kind_t type; /* default constant */
            double decay;         /* epoch_decay factor per epoch, default 0.9 */
            long warmup_steps;    /* linear warm-up from 0, default 0 */
            long steps;           /* linear: lr is 0 from this step; 0 (default): the run's last */
        } schedule;
        int eval_every_epoch; /* evaluate on valid after each epoch, default 1 */
        struct {                  /* precision fp16/bf16 (CUDA): loss scaling */
            int dynamic;          /* halve on overflow, double after growth_interval good
                                     steps, default 1 */
            double init;          /* starting (or static) scale, default 65536 */
            int growth_interval;  /* good steps before the scale doubles, default 2000 */
        } loss_scale;
    } train;

    struct {
        int nodes; /* n, default 1; SL_CONFIG_AUTO_INT: the launcher's (shoal node sets it) */
        sl_cluster_transport_t transport; /* ipc | tcp, default ipc */
        char *master;    /* "host:port" of rank 0's rendezvous; "" = none (shoal run picks
                            one; shoal node then needs SHOAL_MASTER_ADDR/PORT), default "" */
        char *bind;      /* address or interface nodes bind on for tcp, default 127.0.0.1 */
        int timeout_ms;  /* per-operation timeout, default 30000 */
        int rendezvous_timeout_ms; /* how long nodes wait for each other, default 120000 */
        int shared_memory; /* large frames to peers on the same machine through shared
                              memory (sl_shm_lane.h), default true */
        int io_threads;    /* ZeroMQ I/O threads per node, 0..64; 0 = from the machine's
                              cores (sl_transport_io_threads_auto), default 0 */
        int stripes;       /* ZeroMQ connections per peer, 0..16; 0 = one per sending I/O
                              thread (sl_transport_stripes_auto), default 0 */
        sl_allreduce_t allreduce; /* auto | ring, default auto */
        sl_security_t security; /* curve | mac | none, default curve */
        char *key_file; /* the run's secret (shoal keygen) for shoal node; shoal run makes
                           one when "", default "" */
        struct {                /* links emulated by the transport (sl_link_emu.h), off
                                   (all three 0) by default */
            char *bandwidth;    /* each directed link's rate, "1gbit", "100mbit", ...
                                   (sl_config_bits_per_s); "0" = no limit, default "0" */
            double latency_ms;  /* after a frame has left, default 0 */
            double jitter_ms;   /* up to this much more latency, default 0 */
        } emulate;
        struct {          /* shoal run: a node process that died is started again */
            int max;      /* restarts per node, default 0 (none) */
            int delay_ms; /* before each restart, default 5000 */
        } restart;
        int watchdog_timeouts; /* shoal run kills a node that shows no progress for this
                                  many sync timeouts; 0 = off, default 10 */
    } cluster;

    struct {
        int degree; /* k of the k-symmetric ring; 0 = max(1, floor(log2 n) - 1), default 0 */
    } topology;

    struct {
        sl_sync_algorithm_t algorithm; /* default none */
        int neighbours;          /* gossip-*: q neighbours pulled from per round, default 1 */
        double block_momentum;   /* BMUF eta, default 0.9; SL_CONFIG_AUTO: 1 - 1/n */
        double block_lr;         /* BMUF zeta, default 1.0 */
        int nesterov;            /* theta = omega + eta * Delta after a block, default 1 */
        sl_block_ref_t block_reference; /* G against the block start or omega, default
                                           blockstart */
        int period;              /* H: steps between syncs of a component, default 16 */
        int embedding_period;    /* H of embedding and softmax row shards; 0 = period */
        int embedding_shards;    /* row shards per embedding, default 1 */
        sl_period_rule_t period_rule[SL_MAX_PERIOD_RULES]; /* sync.periods, in order; the
                                    first that matches a component gives its H (else
                                    embedding_period / period); unused slots NULL */
        int nperiod_rules;       /* 0..SL_MAX_PERIOD_RULES, default 0 */
        int stagger;             /* staggered phases: component j of the m of one period H
                                    syncs at (t + floor(j H / m)) mod H = 0, default 0
                                    (src/sync/sl_sync_phase.h) */
        int timeout_ms;          /* wait for one exchange; 0 = cluster.timeout_ms */
        int keep_node_models;    /* keep node-R/model.bin beside the averaged one, default 1 */
        int overlap_steps;       /* tau: a block's update applied tau steps after its sync
                                    point, the exchange overlapped with them; default 0 */
        int overlap_dense;       /* tau > 0: the dense components overlap too (1), or sync
                                    at their sync point (0, default); row shards always do */
        sl_exchange_t exchange;  /* row-shard components: dense | unique | allgather,
                                    default dense */
        double exchange_top;     /* unique: also send the top p% most frequent rows, default 0 */
        double exchange_random;  /* unique: and a random q% of the rows, default 0 */
        sl_compress_t compression;  /* fp32 | fp16 | bf16 | int8 | int4, default fp32 */
        double compression_scale;   /* F, values * F before the down-cast; 0 = chosen
                                       automatically to avoid overflow, default 0 */
        int quant_block;            /* int8 / int4: values per fp32 scale, default 256 */
        sl_rounding_t rounding;     /* int8 / int4: nearest | stochastic, default nearest */
        double topk;                /* int8 / int4: fraction of a delta's entries sent
                                       (largest magnitude first); 0 or 1 = all, default 0 */
    } sync;

    struct {
        char *seed_groups; /* sampled-softmax seed groups: per-node | one | zipf
                              (ceil(n^0.64)) | log2 | N, default zipf */
    } embedding;

    char *device;    /* cpu | cuda | cuda:N, default cpu */
    char *precision; /* fp32 (bf16, fp16 with the CUDA backend), default fp32 */

    struct {
        char *lstm; /* the LSTM layers on a GPU: auto | cudnn | fused, default auto */
    } device_options;
} sl_config_t;

/* Fills every field with its default. Call sl_config_fini to free strings. */
void sl_config_init(sl_config_t *cfg);
void sl_config_fini(sl_config_t *cfg);

/* A deep copy of src into dst (dst need not be initialised; sl_config_fini it).
 * SL_ERR_NOMEM, dst then holding nothing to free. */
sl_status_t sl_config_copy(sl_config_t *dst, const sl_config_t *src);

/* Loads a YAML file over the current values. SL_ERR_CONFIG / SL_ERR_IO with
 * "FILE:LINE:COL: message": syntax errors, unknown keys (with "did you mean 'x'?"),
 * wrong types, values out of range, unknown enum names (listing the accepted ones). */
sl_status_t sl_config_load_file(sl_config_t *cfg, const char *path);
/* Loads YAML text (for tests); name is used in messages in place of a file name. */
sl_status_t sl_config_load_string(sl_config_t *cfg, const char *yaml, const char *name);
/* Loads len bytes of YAML text, which may hold NUL bytes (an error, as in a file): what
 * sl_config_load_file does with the file's contents (the fuzz target's entry). */
sl_status_t sl_config_load_buffer(sl_config_t *cfg, const char *text, size_t len,
                                  const char *name);
/* Applies one "a.b.c=value" override; the value is parsed as YAML (so lists work:
 * model.layers=[{lstm: 512}]). */
sl_status_t sl_config_set(sl_config_t *cfg, const char *assignment);
/* A cluster.emulate.bandwidth in bits per second: a number and a unit, bit, kbit,
 * mbit, gbit or tbit (powers of 1000, as tc writes them: "1gbit", "2.5gbit",
 * "100mbit"), or "0" for no limit; -1 when s is none of these. */
double sl_config_bits_per_s(const char *s);

/* Where key (a dotted path, "data.train") got its value: "FILE:LINE:COL" of the file or
 * the --set that set it last, for messages about it after loading; NULL while it holds
 * its default. Borrowed from cfg. (sl_config_where.c) */
const char *sl_config_key_where(const sl_config_t *cfg, const char *key);

/* Cross-field checks after all overrides (required keys, sizes that must agree). */
sl_status_t sl_config_validate(const sl_config_t *cfg);
/* 1 when value is one that the number key (a dotted path of an integer or number key,
 * "model.dropout") accepts in a configuration: for settings read from elsewhere (a model
 * file's), so that the schema stays the one place of every range. */
int sl_config_number_in_range(const char *key, double value);

/* Writes the resolved config as YAML that sl_config_load_file reads back equal. */
sl_status_t sl_config_write_yaml(const sl_config_t *cfg, FILE *out);
/* Prints the documented schema (key, type, default, meaning) for --help-config. */
void sl_config_print_schema(FILE *out);

/* Name <-> enum in one place. */
const char *sl_level_name(sl_level_t v);
const char *sl_output_name(sl_output_kind_t v);
const char *sl_opt_name(sl_opt_kind_t v);
const char *sl_sched_name(sl_sched_kind_t v);
const char *sl_cluster_transport_name(sl_cluster_transport_t v);
const char *sl_security_name(sl_security_t v);
const char *sl_sync_algorithm_name(sl_sync_algorithm_t v);
const char *sl_block_ref_name(sl_block_ref_t v);
const char *sl_exchange_name(sl_exchange_t v);
const char *sl_compress_name(sl_compress_t v);
const char *sl_rounding_name(sl_rounding_t v);

#endif
