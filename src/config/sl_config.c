/* The run configuration: one schema table (key path, type, field, default, bounds, doc)
 * drives the defaults, YAML loading (libyaml's document loader), --set overrides,
 * validation, sl_config_write_yaml and the printed schema. */
#include "config/sl_config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "common/sl_file.h"
#include "config/sl_config_paths.h"
#include "config/sl_config_quant.h"
#include "config/sl_config_where.h"

/* ---- enum names: the one place where strings and enum values meet ---- */

static const char *const level_names[] = {"word", "char", NULL};
static const char *const output_names[] = {"full", "sampled", NULL};
static const char *const opt_names[] = {"sgd", "adagrad", "adam", NULL};
static const char *const sched_names[] = {"constant", "epoch_decay", "linear", NULL};
static const char *const precision_names[] = {"fp32", "bf16", "fp16", NULL};
static const char *const transport_names[] = {"ipc", "tcp", NULL};
static const char *const security_names[] = {"curve", "mac", "none", NULL};
static const char *const sync_names[] = {"none",       "allreduce",  "ma",        "bmuf",
                                         "local-ma",   "local-bmuf", "gossip-ma", "gossip-bmuf",
                                         NULL};
static const char *const block_ref_names[] = {"blockstart", "omega", NULL};
static const char *const exchange_names[] = {"dense", "unique", "allgather", NULL};
static const char *const compress_names[] = {"fp32", "fp16", "bf16", "int8", "int4", NULL};
static const char *const rounding_names[] = {"nearest", "stochastic", NULL};

/* Defaults that depend on train.optimizer.type, indexed by sl_opt_kind_t: SGD's lr is
 * the PyTorch word_language_model one, Adagrad's and Adam's lr and eps are PyTorch's. */
static const double opt_default_lr[] = {20.0, 0.01, 0.001};
static const double opt_default_eps[] = {1e-8, 1e-10, 1e-8};

_Static_assert(sizeof(sl_level_t) == sizeof(int) && sizeof(sl_output_kind_t) == sizeof(int) &&
                   sizeof(sl_opt_kind_t) == sizeof(int) && sizeof(sl_sched_kind_t) == sizeof(int) &&
                   sizeof(sl_cluster_transport_t) == sizeof(int) &&
                   sizeof(sl_security_t) == sizeof(int) &&
                   sizeof(sl_exchange_t) == sizeof(int) && sizeof(sl_compress_t) == sizeof(int) &&
                   sizeof(sl_rounding_t) == sizeof(int),
               "enum fields are stored as int");

static int
count_names(const char *const *names)
{
    int n = 0;

    while (names[n])
        n++;
    return n;
}

static const char *
enum_name(const char *const *names, int v)
{
    return v >= 0 && v < count_names(names) ? names[v] : "?";
}

const char *
sl_level_name(sl_level_t v)
{
    return enum_name(level_names, (int)v);
}

const char *
sl_output_name(sl_output_kind_t v)
{
    return enum_name(output_names, (int)v);
}

const char *
sl_opt_name(sl_opt_kind_t v)
{
    return enum_name(opt_names, (int)v);
}

const char *
sl_sched_name(sl_sched_kind_t v)
{
    return enum_name(sched_names, (int)v);
}

const char *
sl_cluster_transport_name(sl_cluster_transport_t v)
{
    return enum_name(transport_names, (int)v);
}

const char *
sl_security_name(sl_security_t v)
{
    return enum_name(security_names, (int)v);
}

const char *
sl_sync_algorithm_name(sl_sync_algorithm_t v)
{
    return enum_name(sync_names, (int)v);
}

const char *
sl_block_ref_name(sl_block_ref_t v)
{
    return enum_name(block_ref_names, (int)v);
}

const char *
sl_exchange_name(sl_exchange_t v)
{
    return enum_name(exchange_names, (int)v);
}

const char *
sl_compress_name(sl_compress_t v)
{
    return enum_name(compress_names, (int)v);
}

const char *
sl_rounding_name(sl_rounding_t v)
{
    return enum_name(rounding_names, (int)v);
}

/* Index of s (len bytes) in names, -1 if absent. */
static int
find_name(const char *const *names, const char *s, size_t len)
{
    for (int i = 0; names[i]; i++)
        if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0)
            return i;
    return -1;
}

/* "a, b, c" */
static void
join_names(const char *const *names, const char *sep, char *buf, size_t n)
{
    size_t used = 0;

    buf[0] = '\0';
    for (int i = 0; names[i] && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? sep : "", names[i]);
}

/* ---- the schema ---- */

/* T_LAYERS (model.layers) and T_PERIODS (sync.periods) are lists of mappings, each
 * read, checked and written by its own code rather than by the scalar paths. */
typedef enum {
    T_STR, T_INT, T_LONG, T_U64, T_DOUBLE, T_BOOL, T_ENUM, T_LAYERS, T_PERIODS
} key_type_t;
typedef enum { NO_BOUND, CLOSED, OPEN } bound_t;

/* Keys whose default follows another key: run.dir is runs/<run.name>; lr and eps
 * depend on the optimizer. While such a key still holds the default of the other
 * key's old value, a later layer (file, --set) that changes that key moves it along. */
typedef enum { D_NONE, D_DIR, D_LR, D_EPS } derive_t;

typedef struct {
    const char *key;           /* dotted path, e.g. "train.optimizer.lr" */
    key_type_t type;
    size_t off, size;          /* the field in sl_config_t */
    const char *def;           /* default as YAML text; NULL when derived */
    derive_t derive;
    double lo, hi;             /* bounds (integers: closed bounds only) */
    bound_t lo_kind, hi_kind;
    const char *const *names;  /* T_ENUM: the names; T_STR: the accepted values */
    int nonempty;              /* T_STR: "" is not allowed */
    int (*valid)(const char *s); /* T_STR: extra syntax check, described by expect */
    const char *expect;
    const char *shape;         /* T_STR with valid: the type column, e.g. "cpu|cuda|cuda:N" */
    int auto_ok;               /* "auto" is allowed: SL_CONFIG_AUTO (T_DOUBLE) or
                                  SL_CONFIG_AUTO_INT (T_INT) */
    const char *doc;
} entry_t;

#define K(k, t, field)                                                                  \
    .key = (k), .type = (t), .off = offsetof(sl_config_t, field),                     \
    .size = sizeof(((sl_config_t *)0)->field)
#define AT_LEAST(x) .lo = (x), .lo_kind = CLOSED
#define ABOVE(x) .lo = (x), .lo_kind = OPEN
#define AT_MOST(x) .hi = (x), .hi_kind = CLOSED
#define BELOW(x) .hi = (x), .hi_kind = OPEN

/* cpu, cuda (the node's local-rank GPU) or cuda:N. */
static int
valid_device(const char *s)
{
    size_t digits;

    if (strcmp(s, "cpu") == 0 || strcmp(s, "cuda") == 0)
        return 1;
    if (strncmp(s, "cuda:", 5) != 0)
        return 0;
    digits = strspn(s + 5, "0123456789");
    return digits >= 1 && digits <= 4 && s[5 + digits] == '\0';
}

/* "" (no master given) or HOST:PORT: a host name or IPv4 address, port 1..65535. */
static int
valid_master(const char *s)
{
    const char *colon = strrchr(s, ':');
    size_t host = colon ? (size_t)(colon - s) : 0, digits;

    if (!*s)
        return 1;
    if (!colon || host == 0 || strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                          "0123456789.-_") != host)
        return 0;
    digits = strspn(colon + 1, "0123456789");
    if (digits < 1 || digits > 5 || colon[1 + digits] != '\0')
        return 0;
    return atoi(colon + 1) >= 1 && atoi(colon + 1) <= 65535;
}

/* What ZeroMQ binds tcp on: an IPv4 address, an interface name (eth0), or * for every
 * interface; no scheme, no port. */
static int
valid_bind(const char *s)
{
    if (strcmp(s, "*") == 0)
        return 1;
    return *s && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-_") ==
                     strlen(s);
}

double
sl_config_bits_per_s(const char *s)
{
    static const char *const units[] = {"bit", "kbit", "mbit", "gbit", "tbit", NULL};
    char *end;
    double v, scale = 1;
    int u;

    if (!s || !((*s >= '0' && *s <= '9') || *s == '.'))
        return -1; /* no sign, no inf or nan */
    v = strtod(s, &end);
    if (end == s || !isfinite(v))
        return -1;
    if (*end == '\0')
        return v == 0 ? 0 : -1; /* a rate without a unit could be bits or bytes */
    u = find_name(units, end, strlen(end));
    if (u < 0)
        return -1;
    for (int i = 0; i < u; i++)
        scale *= 1000;
    return isfinite(v * scale) ? v * scale : -1;
}

static int
valid_bandwidth(const char *s)
{
    return sl_config_bits_per_s(s) >= 0;
}

/* per-node, one, zipf, log2 or a group count N >= 1. */
static int
valid_seed_groups(const char *s)
{
    size_t digits = strspn(s, "0123456789");

    if (strcmp(s, "per-node") == 0 || strcmp(s, "one") == 0 || strcmp(s, "zipf") == 0 ||
        strcmp(s, "log2") == 0)
        return 1;
    return digits >= 1 && digits <= 6 && s[digits] == '\0' && atoi(s) >= 1;
}

/* Sections must be contiguous (write_yaml emits each header once). */
static const entry_t schema[] = {
    {K("run.name", T_STR, run.name), .def = "shoal", .nonempty = 1,
     .doc = "run name, used in logs and in the default run.dir"},
    {K("run.seed", T_U64, run.seed), .def = "1234",
     .doc = "seed of every random stream (initialisation, dropout, sampling)"},
    {K("run.dir", T_STR, run.dir), .derive = D_DIR, .nonempty = 1,
     .doc = "run directory: resolved config, metrics, checkpoints, final model"},
    {K("run.threads", T_INT, run.threads), .def = "1", AT_LEAST(0),
     .doc = "compute threads per node (0 = all cores)"},
    {K("run.log_every", T_INT, run.log_every), .def = "20", AT_LEAST(1),
     .doc = "steps between progress and metrics lines"},
    {K("run.checkpoint_every", T_INT, run.checkpoint_every), .def = "500", AT_LEAST(0),
     .doc = "steps between checkpoints (0 = only at the end)"},
    {K("run.resume", T_BOOL, run.resume), .def = "true",
     .doc = "continue from the run directory's checkpoint when there is one"},
    {K("run.keep_best", T_BOOL, run.keep_best), .def = "false",
     .doc = "keep the model of the best validation perplexity as best.bin (and best.json)"},
    {K("run.keep_checkpoints", T_INT, run.keep_checkpoints), .def = "0", AT_LEAST(0),
     .doc = "keep the last K checkpoints as checkpoint-<step>.bin (0 = none)"},

    {K("data.train", T_STR, data.train), .def = "",
     .doc = "training text (required)"},
    {K("data.valid", T_STR, data.valid), .def = "",
     .doc = "validation text (\"\" = none, or see data.valid_fraction)"},
    {K("data.test", T_STR, data.test), .def = "",
     .doc = "test text (\"\" = none)"},
    {K("data.level", T_ENUM, data.level), .def = "word", .names = level_names,
     .doc = "tokens: whitespace-separated words, or UTF-8 characters"},
    {K("data.vocab_size", T_INT, data.vocab_size), .def = "10000", AT_LEAST(0),
     .doc = "word: the top N training words (+ <unk>, <eos>); char: 0 = every character"},
    {K("data.valid_fraction", T_DOUBLE, data.valid_fraction), .def = "0", AT_LEAST(0),
     BELOW(1), .doc = "without data.valid: hold out this tail fraction of train"},
    {K("data.cache_dir", T_STR, data.cache_dir), .def = "",
     .doc = "token cache directory (\"\" = $XDG_CACHE_HOME/shoal or ~/.cache/shoal)"},
    {K("data.max_tokens", T_LONG, data.max_tokens), .def = "0", AT_LEAST(0),
     .doc = "use only the first N training tokens (0 = all)"},

    {K("model.embedding", T_INT, model.embedding), .def = "256", AT_LEAST(1),
     .doc = "embedding size E"},
    {K("model.layers", T_LAYERS, model.layers), .def = "[{lstm: 256}, {lstm: 256}]",
     .doc = "LSTM stack, bottom first: {lstm: H, projection: P (0 = none)}, 1 to 8"},
    {K("model.dropout", T_DOUBLE, model.dropout), .def = "0", AT_LEAST(0), BELOW(1),
     .doc = "dropout probability on the embeddings, between layers and on the top (0 = off)"},
    {K("model.output.type", T_ENUM, model.output), .def = "full", .names = output_names,
     .doc = "output layer: full softmax, or sampled softmax"},
    {K("model.output.samples", T_INT, model.samples), .def = "1024", AT_LEAST(0),
     .doc = "sampled softmax: negatives S drawn per step"},
    {K("model.init_range", T_DOUBLE, model.init_range), .def = "0.1", ABOVE(0),
     .doc = "weights start uniform in [-r, r], biases at 0"},

    {K("train.batch", T_INT, train.batch), .def = "32", AT_LEAST(1),
     .doc = "B: parallel token streams per node"},
    {K("train.bptt", T_INT, train.bptt), .def = "35", AT_LEAST(1),
     .doc = "T: steps of back-propagation through time"},
    {K("train.epochs", T_INT, train.epochs), .def = "1", AT_LEAST(1),
     .doc = "passes over the training data"},
    {K("train.max_steps", T_LONG, train.max_steps), .def = "0", AT_LEAST(0),
     .doc = "stop after this many steps (0 = train.epochs decides)"},
    {K("train.loss_scale.dynamic", T_BOOL, train.loss_scale.dynamic), .def = "true",
     .doc = "fp16/bf16: halve the loss scale on overflow, double it after a good run"},
    {K("train.loss_scale.init", T_DOUBLE, train.loss_scale.init), .def = "65536", ABOVE(0),
     .doc = "fp16/bf16: starting (or, not dynamic, fixed) loss scale"},
    {K("train.loss_scale.growth_interval", T_INT, train.loss_scale.growth_interval),
     .def = "2000", AT_LEAST(1), .doc = "fp16/bf16: good steps before the scale doubles"},
    {K("train.eval_every_epoch", T_BOOL, train.eval_every_epoch), .def = "true",
     .doc = "evaluate on the validation text after each epoch"},
    {K("train.optimizer.type", T_ENUM, train.optimizer.type), .def = "sgd",
     .names = opt_names, .doc = "optimizer (lr and eps defaults follow it)"},
    {K("train.optimizer.lr", T_DOUBLE, train.optimizer.lr), .derive = D_LR, ABOVE(0),
     .doc = "learning rate (the peak rate under a schedule)"},
    {K("train.optimizer.clip", T_DOUBLE, train.optimizer.clip), .def = "0.25", AT_LEAST(0),
     .doc = "clip gradients to this global L2 norm (0 = off)"},
    {K("train.optimizer.beta1", T_DOUBLE, train.optimizer.beta1), .def = "0.9",
     AT_LEAST(0), BELOW(1), .doc = "adam: decay of the gradient average"},
    {K("train.optimizer.beta2", T_DOUBLE, train.optimizer.beta2), .def = "0.999",
     AT_LEAST(0), BELOW(1), .doc = "adam: decay of the squared-gradient average"},
    {K("train.optimizer.eps", T_DOUBLE, train.optimizer.eps), .derive = D_EPS, ABOVE(0),
     .doc = "adam, adagrad: added to the denominator"},
    {K("train.optimizer.initial_accumulator", T_DOUBLE, train.optimizer.initial_accumulator),
     .def = "0", AT_LEAST(0), .doc = "adagrad: starting value of the squared-gradient sums"},
    {K("train.schedule.type", T_ENUM, train.schedule.type), .def = "constant",
     .names = sched_names,
     .doc = "lr schedule: constant, lr * decay^epoch, or linear down to 0 at the end"},
    {K("train.schedule.decay", T_DOUBLE, train.schedule.decay), .def = "0.9", ABOVE(0),
     AT_MOST(1), .doc = "epoch_decay: factor applied after each epoch"},
    {K("train.schedule.warmup_steps", T_LONG, train.schedule.warmup_steps), .def = "0",
     AT_LEAST(0), .doc = "linear warm-up from 0 over the first N steps"},

    {K("cluster.nodes", T_INT, cluster.nodes), .def = "1", AT_LEAST(1), .auto_ok = 1,
     .doc = "number of nodes n (processes) of the run (auto = the launcher's)"},
    {K("cluster.transport", T_ENUM, cluster.transport), .def = "ipc", .names = transport_names,
     .doc = "how nodes talk: ipc (Unix sockets, one machine) or tcp"},
    {K("cluster.master", T_STR, cluster.master), .def = "", .valid = valid_master,
     .expect = "HOST:PORT (port 1 to 65535) or empty", .shape = "HOST:PORT",
     .doc = "rank 0's rendezvous address for shoal node (\"\" = SHOAL_MASTER_ADDR/PORT)"},
    {K("cluster.bind", T_STR, cluster.bind), .def = "127.0.0.1", .nonempty = 1,
     .valid = valid_bind, .expect = "an IPv4 address, an interface name or *",
     .shape = "address", .doc = "address or interface nodes listen on for tcp (* = all)"},
    {K("cluster.timeout_ms", T_INT, cluster.timeout_ms), .def = "30000", AT_LEAST(1),
     .doc = "how long one exchange with a peer may take (ms)"},
    {K("cluster.rendezvous_timeout_ms", T_INT, cluster.rendezvous_timeout_ms),
     .def = "120000", AT_LEAST(1), .doc = "how long nodes wait for each other at start (ms)"},
    {K("cluster.shared_memory", T_BOOL, cluster.shared_memory), .def = "true",
     .doc = "large frames to nodes on the same machine go through shared memory"},
    {K("cluster.io_threads", T_INT, cluster.io_threads), .def = "0", AT_LEAST(0),
     AT_MOST(64),
     .doc = "ZeroMQ I/O threads per node; with 2 or more, receiving and sending run on "
            "different ones (0 = from the machine's cores: 2 from 8 cores on, else 1)"},
    {K("cluster.security", T_ENUM, cluster.security), .def = "curve", .names = security_names,
     .doc = "curve: only holders of the run's secret join, every connection encrypted; "
            "mac: the same admission, then frames authenticated but not encrypted (trusted "
            "fabrics); none: anyone who reaches a port can join (trusted networks only)"},
    {K("cluster.key_file", T_STR, cluster.key_file), .def = "",
     .doc = "the run's secret for shoal node (made by shoal keygen FILE, mode 0600); "
            "shoal run makes one when empty"},
    {K("cluster.emulate.bandwidth", T_STR, cluster.emulate.bandwidth), .def = "0",
     .valid = valid_bandwidth,
     .expect = "a rate such as 1gbit, 2.5gbit or 100mbit (bit, kbit, mbit, gbit, tbit: "
               "powers of 1000), or 0 for no limit",
     .shape = "RATE", .doc = "emulation: each directed link's rate (0 = no limit)"},
    {K("cluster.emulate.latency_ms", T_DOUBLE, cluster.emulate.latency_ms), .def = "0",
     AT_LEAST(0), AT_MOST(60000),
     .doc = "emulation: a frame arrives this long after it has left (ms)"},
    {K("cluster.emulate.jitter_ms", T_DOUBLE, cluster.emulate.jitter_ms), .def = "0",
     AT_LEAST(0), AT_MOST(60000),
     .doc = "emulation: up to this much more latency, keeping each link's order (ms)"},
    {K("cluster.restart.max", T_INT, cluster.restart.max), .def = "0", AT_LEAST(0),
     AT_MOST(1000), .doc = "shoal run: restarts of each node process that died (0 = none)"},
    {K("cluster.restart.delay_ms", T_INT, cluster.restart.delay_ms), .def = "5000",
     AT_LEAST(0), AT_MOST(3600000), .doc = "shoal run: wait before each restart (ms)"},
    {K("cluster.watchdog_timeouts", T_INT, cluster.watchdog_timeouts), .def = "10",
     AT_LEAST(0), AT_MOST(1000),
     .doc = "shoal run: kill a node that shows no progress for this many sync timeouts "
            "(0 = off)"},

    {K("topology.degree", T_INT, topology.degree), .def = "0", AT_LEAST(0),
     .doc = "k of the k-symmetric ring (0 = max(1, floor(log2 n) - 1))"},

    {K("sync.algorithm", T_ENUM, sync.algorithm), .def = "none", .names = sync_names,
     .doc = "how nodes keep their models together (see doc/config.md)"},
    {K("sync.neighbours", T_INT, sync.neighbours), .def = "1", AT_LEAST(1),
     .doc = "gossip-*: q neighbours each node averages with per round"},
    {K("sync.block_momentum", T_DOUBLE, sync.block_momentum), .def = "0.9", AT_LEAST(0),
     BELOW(1), .auto_ok = 1, .doc = "*bmuf: block momentum eta (auto = 1 - 1/n)"},
    {K("sync.block_lr", T_DOUBLE, sync.block_lr), .def = "1", ABOVE(0),
     .doc = "*bmuf: block learning rate zeta"},
    {K("sync.nesterov", T_BOOL, sync.nesterov), .def = "true",
     .doc = "*bmuf: Nesterov block momentum (theta = omega + eta * Delta)"},
    {K("sync.block_reference", T_ENUM, sync.block_reference), .def = "blockstart",
     .names = block_ref_names,
     .doc = "*bmuf: block gradient against the block start (paper) or omega (classic)"},
    {K("sync.period", T_INT, sync.period), .def = "16", AT_LEAST(1),
     .doc = "H: steps between syncs of each component"},
    {K("sync.embedding_period", T_INT, sync.embedding_period), .def = "0", AT_LEAST(0),
     .doc = "H of the embedding and softmax row shards (0 = sync.period)"},
    {K("sync.embedding_shards", T_INT, sync.embedding_shards), .def = "1", AT_LEAST(1),
     AT_MOST(1024), .doc = "row shards per embedding (each one component)"},
    {K("sync.periods", T_PERIODS, sync.period_rule), .def = "[]",
     .doc = "H per component by name: [{match: GLOB, period: H}], the first match wins"},
    {K("sync.stagger", T_BOOL, sync.stagger), .def = "false",
     .doc = "stagger the sync points: the components of one period H sync at phases spread "
            "over 0..H-1, not all at the same step"},
    {K("sync.timeout_ms", T_INT, sync.timeout_ms), .def = "0", AT_LEAST(0),
     .doc = "wait for one exchange (ms; 0 = cluster.timeout_ms)"},
    {K("sync.keep_node_models", T_BOOL, sync.keep_node_models), .def = "true",
     .doc = "keep each node's own model.bin beside the run's averaged one"},
    {K("sync.overlap_steps", T_INT, sync.overlap_steps), .def = "0", AT_LEAST(0),
     .doc = "tau: apply a block's update tau steps after its sync, the exchange overlapped "
            "(< every period)"},
    {K("sync.overlap_dense", T_BOOL, sync.overlap_dense), .def = "false",
     .doc = "tau > 0: overlap the dense components (LSTM, projections, biases) too; false: "
            "only the embedding and softmax row shards overlap"},
    {K("sync.exchange", T_ENUM, sync.exchange), .def = "dense", .names = exchange_names,
     .doc = "embedding and softmax rows: dense, unique (touched rows) or allgather"},
    {K("sync.exchange_top", T_DOUBLE, sync.exchange_top), .def = "0", AT_LEAST(0),
     AT_MOST(100), .doc = "unique: also send the top p% most frequent rows"},
    {K("sync.exchange_random", T_DOUBLE, sync.exchange_random), .def = "0", AT_LEAST(0),
     AT_MOST(100), .doc = "unique: also send a random q% of the rows"},
    {K("sync.compression", T_ENUM, sync.compression), .def = "fp32", .names = compress_names,
     .doc = "encoding of exchanged values: fp32, fp16, bf16, or int8 / int4 deltas "
            "(gossip-*, local-* only)"},
    {K("sync.compression_scale", T_DOUBLE, sync.compression_scale), .def = "0", AT_LEAST(0),
     .doc = "F: values times F before the down-cast (0 = automatic, no overflow)"},
    {K("sync.quant_block", T_INT, sync.quant_block), .def = "256", AT_LEAST(1),
     AT_MOST(65536), .doc = "int8 / int4: values per fp32 scale"},
    {K("sync.rounding", T_ENUM, sync.rounding), .def = "nearest", .names = rounding_names,
     .doc = "int8 / int4: nearest or stochastic rounding (from run.seed)"},
    {K("sync.topk", T_DOUBLE, sync.topk), .def = "0", AT_LEAST(0), AT_MOST(1),
     .doc = "int8 / int4: send only this fraction of a delta's entries, the largest "
            "(0 = all); the rest waits in the error feedback"},

    {K("embedding.seed_groups", T_STR, embedding.seed_groups), .def = "zipf", .nonempty = 1,
     .valid = valid_seed_groups, .expect = "per-node, one, zipf, log2 or a count N >= 1",
     .shape = "per-node|one|zipf|log2|N",
     .doc = "nodes sharing sampled-softmax negatives: groups of contiguous ranks"},

    {K("device", T_STR, device), .def = "cpu", .nonempty = 1, .valid = valid_device,
     .expect = "cpu, cuda or cuda:N", .shape = "cpu|cuda|cuda:N",
     .doc = "cpu, cuda (the node's local-rank GPU) or cuda:N"},
    {K("precision", T_STR, precision), .def = "fp32", .names = precision_names,
     .doc = "compute precision; bf16 and fp16 need the CUDA backend"},
};

#define NKEYS (sizeof schema / sizeof schema[0])

/* The keys of one model.layers entry. */
static const entry_t layer_keys[] = {
    {.key = "lstm", .type = T_INT, AT_LEAST(1), .doc = "LSTM cell size H"},
    {.key = "projection", .type = T_INT, AT_LEAST(0), .doc = "LSTMP output size P (0 = none)"},
};
static const char *const layer_key_names[] = {"lstm", "projection", NULL};

/* The keys of one sync.periods rule. */
static const entry_t rule_keys[] = {
    {.key = "match", .type = T_STR, .nonempty = 1, .doc = "glob on component names"},
    {.key = "period", .type = T_INT, AT_LEAST(1), .doc = "H of the components it matches"},
};
static const char *const rule_key_names[] = {"match", "period", NULL};

static const entry_t *
find_entry(const char *path)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(schema[i].key, path) == 0)
            return &schema[i];
    return NULL;
}

/* The key path below parent ("" = top level) that name starts, or NULL: the next
 * component of a schema key. */
static const char *
child_start(const entry_t *e, const char *parent)
{
    size_t plen = strlen(parent);

    if (plen == 0)
        return e->key;
    if (strncmp(e->key, parent, plen) != 0 || e->key[plen] != '.')
        return NULL;
    return e->key + plen + 1;
}

/* Whether name (len bytes, from YAML: may hold anything) is a key below parent. */
static int
has_child(const char *parent, const char *name, size_t len)
{
    if (len == 0 || memchr(name, '.', len) || memchr(name, '\0', len))
        return 0;
    for (size_t i = 0; i < NKEYS; i++) {
        const char *k = child_start(&schema[i], parent);
        if (k && strncmp(k, name, len) == 0 && (k[len] == '\0' || k[len] == '.'))
            return 1;
    }
    return 0;
}

/* The distinct key names directly below parent, in schema order, NULL-terminated. */
static void
children(const char *parent, const char **names, size_t *lens, size_t max)
{
    size_t n = 0;

    for (size_t i = 0; i < NKEYS && n + 1 < max; i++) {
        const char *k = child_start(&schema[i], parent);
        size_t len, j;
        if (!k)
            continue;
        len = strcspn(k, ".");
        for (j = 0; j < n; j++)
            if (lens[j] == len && strncmp(names[j], k, len) == 0)
                break;
        if (j == n) {
            names[n] = k;
            lens[n++] = len;
        }
    }
    names[n] = NULL;
}

/* ---- values ---- */

typedef struct {
    long long i; /* T_INT, T_LONG, T_BOOL, T_ENUM */
    uint64_t u;  /* T_U64 */
    double d;    /* T_DOUBLE */
    char *s;     /* T_STR: malloc'd when parsed, borrowed when fetched */
} value_t;

static void *
slot(const sl_config_t *cfg, const entry_t *e)
{
    return (char *)cfg + e->off;
}

/* Moves v into the field (a string is taken over, the old one freed). */
static void
store(sl_config_t *cfg, const entry_t *e, value_t *v)
{
    void *p = slot(cfg, e);

    switch (e->type) {
    case T_STR: {
        char **sp = p;
        SL_ASSERT(e->size == sizeof(char *));
        free(*sp);
        *sp = v->s;
        v->s = NULL;
        break;
    }
    case T_INT:
    case T_BOOL:
    case T_ENUM: {
        int x = (int)v->i;
        SL_ASSERT(e->size == sizeof x);
        memcpy(p, &x, sizeof x);
        break;
    }
    case T_LONG: {
        long x = (long)v->i;
        SL_ASSERT(e->size == sizeof x);
        memcpy(p, &x, sizeof x);
        break;
    }
    case T_U64:
        SL_ASSERT(e->size == sizeof v->u);
        memcpy(p, &v->u, sizeof v->u);
        break;
    case T_DOUBLE:
        SL_ASSERT(e->size == sizeof v->d);
        memcpy(p, &v->d, sizeof v->d);
        break;
    case T_LAYERS:
    case T_PERIODS:
        SL_ASSERT(!"lists are stored by apply_layers and apply_periods");
    }
}

/* The field's value (a string is borrowed). */
static value_t
fetch(const sl_config_t *cfg, const entry_t *e)
{
    const void *p = slot(cfg, e);
    value_t v = {0};

    switch (e->type) {
    case T_STR:
        memcpy(&v.s, p, sizeof v.s);
        break;
    case T_INT:
    case T_BOOL:
    case T_ENUM: {
        int x;
        memcpy(&x, p, sizeof x);
        v.i = x;
        break;
    }
    case T_LONG: {
        long x;
        memcpy(&x, p, sizeof x);
        v.i = x;
        break;
    }
    case T_U64:
        memcpy(&v.u, p, sizeof v.u);
        break;
    case T_DOUBLE:
        memcpy(&v.d, p, sizeof v.d);
        break;
    case T_LAYERS:
    case T_PERIODS:
        SL_ASSERT(!"lists have no scalar value");
    }
    return v;
}

static int
values_equal(const entry_t *e, const value_t *a, const value_t *b)
{
    switch (e->type) {
    case T_STR:
        return a->s && b->s && strcmp(a->s, b->s) == 0;
    case T_U64:
        return a->u == b->u;
    case T_DOUBLE:
        return a->d == b->d;
    default:
        return a->i == b->i;
    }
}

/* The shortest %g text that reads back as the same double. */
static void
format_double(double d, char *buf, size_t n)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, d);
        if (strtod(buf, NULL) == d)
            return;
    }
}

/* The value as text (strings raw, unquoted). */
static void
format_value(const entry_t *e, const value_t *v, char *buf, size_t n)
{
    switch (e->type) {
    case T_STR:
        snprintf(buf, n, "%s", v->s ? v->s : "");
        break;
    case T_INT:
    case T_LONG:
        if (e->auto_ok && v->i == SL_CONFIG_AUTO_INT)
            snprintf(buf, n, "auto");
        else
            snprintf(buf, n, "%lld", v->i);
        break;
    case T_U64:
        snprintf(buf, n, "%" PRIu64, v->u);
        break;
    case T_DOUBLE:
        if (e->auto_ok && v->d == SL_CONFIG_AUTO)
            snprintf(buf, n, "auto");
        else
            format_double(v->d, buf, n);
        break;
    case T_BOOL:
        snprintf(buf, n, "%s", v->i ? "true" : "false");
        break;
    case T_ENUM:
        if (v->i >= 0 && v->i < count_names(e->names))
            snprintf(buf, n, "%s", e->names[v->i]);
        else
            snprintf(buf, n, "%lld", v->i);
        break;
    case T_LAYERS:
    case T_PERIODS:
        SL_ASSERT(!"lists are formatted by sl_config_write_yaml");
    }
}

/* The default of a derived key for the config as it is now. */
static sl_status_t
derived_value(const sl_config_t *cfg, const entry_t *e, value_t *v)
{
    int t = (int)cfg->train.optimizer.type;

    if (t < 0 || t >= count_names(opt_names))
        t = SL_OPT_SGD;
    switch (e->derive) {
    case D_DIR: {
        size_t n = strlen(cfg->run.name) + 6;
        v->s = malloc(n);
        if (!v->s)
            return sl_err_set(SL_ERR_NOMEM, "config: out of memory");
        snprintf(v->s, n, "runs/%s", cfg->run.name);
        return SL_OK;
    }
    case D_LR:
        v->d = opt_default_lr[t];
        return SL_OK;
    case D_EPS:
        v->d = opt_default_eps[t];
        return SL_OK;
    case D_NONE:
        break;
    }
    SL_ASSERT(!"derived_value on a key without a derived default");
    return SL_ERR_INVALID;
}

/* Checks a parsed or stored value against the entry's type range, bounds and accepted
 * names. On failure writes what is wrong ("must be at least 1, got 0") into why and
 * returns 1; shown is the value as the user wrote it. overflow is +1/-1 when an integer
 * did not even fit in 64 bits. */
static int
bad_value(const entry_t *e, const value_t *v, int overflow, const char *shown, char *why,
          size_t n)
{
    char list[160], b[40];

    switch (e->type) {
    case T_STR:
        if (!v->s) {
            snprintf(why, n, "is not set");
            return 1;
        }
        if (e->nonempty && !v->s[0]) {
            snprintf(why, n, "must not be empty");
            return 1;
        }
        if (e->names && find_name(e->names, v->s, strlen(v->s)) < 0) {
            join_names(e->names, ", ", list, sizeof list);
            snprintf(why, n, "must be one of: %s (got '%s')", list, shown);
            return 1;
        }
        if (e->valid && !e->valid(v->s)) {
            snprintf(why, n, "must be %s (got '%s')", e->expect, shown);
            return 1;
        }
        return 0;
    case T_ENUM:
        if (v->i < 0 || v->i >= count_names(e->names)) {
            join_names(e->names, ", ", list, sizeof list);
            snprintf(why, n, "must be one of: %s (got '%s')", list, shown);
            return 1;
        }
        return 0;
    case T_INT:
    case T_LONG: {
        long long lo = e->type == T_INT ? INT_MIN : LONG_MIN;
        long long hi = e->type == T_INT ? INT_MAX : LONG_MAX;
        if (e->lo_kind != NO_BOUND)
            lo = (long long)e->lo;
        if (e->hi_kind != NO_BOUND)
            hi = (long long)e->hi;
        if (e->auto_ok && !overflow && v->i == SL_CONFIG_AUTO_INT)
            return 0;
        if (overflow < 0 || v->i < lo) {
            snprintf(why, n, "must be at least %lld, got %s", lo, shown);
            return 1;
        }
        if (overflow > 0 || v->i > hi) {
            snprintf(why, n, "must be at most %lld, got %s", hi, shown);
            return 1;
        }
        return 0;
    }
    case T_U64:
        if (overflow) {
            snprintf(why, n, "must be at most %" PRIu64 ", got %s", UINT64_MAX, shown);
            return 1;
        }
        return 0;
    case T_DOUBLE:
        if (e->auto_ok && v->d == SL_CONFIG_AUTO)
            return 0;
        if (!isfinite(v->d)) {
            snprintf(why, n, "must be a finite number, got %s", shown);
            return 1;
        }
        if ((e->lo_kind == CLOSED && v->d < e->lo) || (e->lo_kind == OPEN && v->d <= e->lo)) {
            format_double(e->lo, b, sizeof b);
            snprintf(why, n, "must be %s %s, got %s",
                     e->lo_kind == CLOSED ? "at least" : "greater than", b, shown);
            return 1;
        }
        if ((e->hi_kind == CLOSED && v->d > e->hi) || (e->hi_kind == OPEN && v->d >= e->hi)) {
            format_double(e->hi, b, sizeof b);
            snprintf(why, n, "must be %s %s, got %s",
                     e->hi_kind == CLOSED ? "at most" : "less than", b, shown);
            return 1;
        }
        return 0;
    case T_BOOL:
        return 0;
    case T_LAYERS:
    case T_PERIODS:
        break;
    }
    SL_ASSERT(!"bad_value on a list");
    return 1;
}

/* ---- loading ---- */

typedef struct {
    sl_config_t *cfg;          /* the working copy being filled */
    const char *name;          /* file name, or "--set KEY", for messages */
    size_t col_offset;         /* added to columns on line 1 (--set: "KEY=") */
    yaml_document_t *doc;
    unsigned char given[NKEYS]; /* keys this file or --set assigned */
    int note_where;            /* record where keys are set (not for the defaults) */
} load_t;

static sl_status_t
err_at(const load_t *ld, yaml_mark_t m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records "NAME:LINE:COL: message" with libyaml's 0-based mark made 1-based. */
static sl_status_t
err_at(const load_t *ld, yaml_mark_t m, const char *fmt, ...)
{
    char msg[768];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sl_err_set(SL_ERR_CONFIG, "%s:%zu:%zu: %s", ld->name, m.line + 1,
                      m.column + 1 + (m.line == 0 ? ld->col_offset : 0), msg);
}

/* The escape of the character at p (left bytes) when a message or a YAML file cannot
 * hold it as it is: C0 and C1 controls, DEL, and U+FFFE and U+FFFF, which libyaml's
 * reader refuses. Writes "\n", "\t", "\xNN" or "\uFFFE" (YAML double-quote escapes) to e
 * and returns its length, *take the bytes it stands for; 0 for a printable byte. */
static size_t
control_escape(const unsigned char *p, size_t left, char e[8], size_t *take)
{
    *take = 1;
    if (*p == '\n' || *p == '\t')
        return (size_t)snprintf(e, 8, "\\%c", *p == '\n' ? 'n' : 't');
    if (*p < 0x20 || *p == 0x7f)
        return (size_t)snprintf(e, 8, "\\x%02x", *p);
    if (left >= 2 && p[0] == 0xc2 && p[1] >= 0x80 && p[1] < 0xa0) { /* U+0080..U+009F */
        *take = 2;
        return (size_t)snprintf(e, 8, "\\x%02x", p[1]);
    }
    if (left >= 3 && p[0] == 0xef && p[1] == 0xbf && p[2] >= 0xbe) {
        *take = 3;
        return (size_t)snprintf(e, 8, "\\uFFF%c", p[2] == 0xbe ? 'E' : 'F');
    }
    return 0;
}

/* Writes s (len bytes) into buf (n bytes, NUL-terminated) as message text, with
 * control characters escaped (control_escape) so that a message stays on one line.
 * Stops before an escape or a UTF-8 character that does not fit; returns the bytes of
 * s written. */
static size_t
escape_text(const char *s, size_t len, char *buf, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, used = 0;

    while (i < len) {
        char e[8];
        size_t take, plen = control_escape(u + i, len - i, e, &take);
        const char *piece = e;

        if (plen == 0) {
            while (take < 4 && i + take < len && (u[i + take] & 0xc0) == 0x80)
                take++; /* a character's continuation bytes */
            piece = s + i;
            plen = take;
        }
        if (used + plen + 1 > n)
            break;
        memcpy(buf + used, piece, plen);
        used += plen;
        i += take;
    }
    buf[used] = '\0';
    return i;
}

/* Text from the input for a message (buf: at least 61 bytes), escaped: at most 60
 * bytes, "..." when cut. */
static const char *
clip(const char *s, size_t len, char *buf, size_t n)
{
    SL_ASSERT(n >= 61);
    if (escape_text(s, len, buf, 61) < len) {
        escape_text(s, len, buf, 58);
        strcat(buf, "...");
    }
    return buf;
}

/* Plain scalars that YAML reads as null: nothing, ~, null. */
static int
is_null(const yaml_node_t *n)
{
    const char *s = (const char *)n->data.scalar.value;

    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
           !strcmp(s, "NULL");
}

/* "'text'", "nothing", "a mapping" or "a list", for "must be X, got ..." messages. */
static const char *
describe(const yaml_node_t *n, char *buf, size_t size)
{
    char t[72];

    if (n->type == YAML_MAPPING_NODE)
        return "a mapping";
    if (n->type == YAML_SEQUENCE_NODE)
        return "a list";
    if (n->data.scalar.length == 0)
        return "nothing";
    snprintf(buf, size, "'%s'",
             clip((const char *)n->data.scalar.value, n->data.scalar.length, t, sizeof t));
    return buf;
}

static const char *
type_phrase(const entry_t *e)
{
    switch (e->type) {
    case T_STR: return "a string";
    case T_INT:
    case T_LONG: return e->auto_ok ? "an integer or auto" : "an integer";
    case T_U64: return "a non-negative integer";
    case T_DOUBLE: return e->auto_ok ? "a number or auto" : "a number";
    case T_BOOL: return "true or false";
    case T_ENUM: return "a name";
    case T_LAYERS:
    case T_PERIODS: return "a list";
    }
    return "?";
}

/* Optimal string alignment distance (Levenshtein plus adjacent swaps); names over 63
 * bytes count as far from everything. */
static size_t
edit_distance(const char *a, size_t n, const char *b, size_t m)
{
    size_t d[64][64];

    if (n >= 64 || m >= 64)
        return SIZE_MAX;
    for (size_t i = 0; i <= n; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[n][m];
}

/* "did you mean": the closest candidate within edit distance 2 (and less than the
 * typed name's length, so 'x' suggests nothing), else one that the typed name
 * (3 bytes or more) begins. */
static int
suggest(const char *s, size_t len, const char *const *names, const size_t *lens)
{
    size_t best_d = SIZE_MAX;
    int best = -1;

    for (int i = 0; names[i]; i++) {
        size_t d = edit_distance(s, len, names[i], lens[i]);
        if (d <= 2 && d < len && d < best_d) {
            best_d = d;
            best = i;
        }
    }
    for (int i = 0; best < 0 && len >= 3 && names[i]; i++)
        if (lens[i] > len && strncmp(names[i], s, len) == 0)
            best = i;
    return best;
}

/* "unknown key 'x' in 'where' (did you mean 'y'?)", or the list of keys when nothing
 * is close. */
static sl_status_t
unknown_key(const load_t *ld, yaml_mark_t m, const char *where, const char *s, size_t len,
            const char *const *names, const size_t *lens)
{
    char k[72], in[96], list[512];
    size_t used = 0;
    int best = suggest(s, len, names, lens);

    clip(s, len, k, sizeof k);
    if (*where)
        snprintf(in, sizeof in, " in '%s'", where);
    else
        snprintf(in, sizeof in, " at top level");
    if (best >= 0)
        return err_at(ld, m, "unknown key '%s'%s (did you mean '%.*s'?)", k, in,
                      (int)lens[best], names[best]);
    list[0] = '\0';
    for (int i = 0; names[i] && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%.*s", i ? ", " : "",
                                 (int)lens[i], names[i]);
    return err_at(ld, m, "unknown key '%s'%s (expected one of: %s)", k, in, list);
}

static sl_status_t
unknown_schema_key(const load_t *ld, yaml_mark_t m, const char *parent, const char *s,
                   size_t len)
{
    const char *names[NKEYS + 1];
    size_t lens[NKEYS + 1];

    children(parent, names, lens, NKEYS + 1);
    return unknown_key(ld, m, parent, s, len, names, lens);
}

/* Key i of a mapping: must be a scalar and must not repeat an earlier key. */
static sl_status_t
pair_key(const load_t *ld, const yaml_node_t *map, const yaml_node_pair_t *pair,
         const yaml_node_t **key)
{
    const yaml_node_t *k = yaml_document_get_node(ld->doc, pair->key);
    char buf[96];

    if (k->type != YAML_SCALAR_NODE)
        return err_at(ld, k->start_mark, "keys must be names, got %s",
                      describe(k, buf, sizeof buf));
    for (const yaml_node_pair_t *q = map->data.mapping.pairs.start; q < pair; q++) {
        const yaml_node_t *o = yaml_document_get_node(ld->doc, q->key);
        if (o->type == YAML_SCALAR_NODE && o->data.scalar.length == k->data.scalar.length &&
            memcmp(o->data.scalar.value, k->data.scalar.value, k->data.scalar.length) == 0)
            return err_at(ld, k->start_mark, "duplicate key '%s'",
                          clip((const char *)k->data.scalar.value, k->data.scalar.length,
                               buf, sizeof buf));
    }
    *key = k;
    return SL_OK;
}

/* Decimal integers only: an optional sign then digits (no fractions, exponents, hex).
 * Sets *overflow to +1/-1 when the number does not fit in 64 bits. */
static int
parse_integer(const char *s, int is_unsigned, value_t *v, int *overflow)
{
    const char *p = s + (*s == '+' || *s == '-');
    char *end;

    *overflow = 0;
    if (!*p || strspn(p, "0123456789") != strlen(p) || (is_unsigned && *s == '-'))
        return 0;
    errno = 0;
    if (is_unsigned)
        v->u = strtoull(s, &end, 10);
    else
        v->i = strtoll(s, &end, 10);
    if (errno == ERANGE)
        *overflow = *s == '-' ? -1 : 1;
    return 1;
}

/* Decimal numbers as strtod reads them, without its inf, nan and hex forms. */
static int
parse_double(const char *s, double *d)
{
    char *end;

    if (!*s || strspn(s, "0123456789+-.eE") != strlen(s) || !strpbrk(s, "0123456789"))
        return 0;
    *d = strtod(s, &end);
    return *end == '\0';
}

/* Reads a scalar node as the entry's type into v, checking bounds and names; path
 * names the key in messages. */
static sl_status_t
convert(const load_t *ld, const entry_t *e, const char *path, const yaml_node_t *n,
        value_t *v)
{
    char got[96], why[512], t[72];
    const char *s;
    size_t len;
    int overflow = 0, ok = 1;

    if (e->type == T_ENUM && n->type != YAML_SCALAR_NODE) {
        join_names(e->names, ", ", why, sizeof why);
        return err_at(ld, n->start_mark, "'%s' must be one of: %s (got %s)", path, why,
                      describe(n, got, sizeof got));
    }
    if (n->type != YAML_SCALAR_NODE)
        return err_at(ld, n->start_mark, "'%s' must be %s, got %s", path, type_phrase(e),
                      describe(n, got, sizeof got));
    s = (const char *)n->data.scalar.value;
    len = n->data.scalar.length;
    if (memchr(s, '\0', len))
        return err_at(ld, n->start_mark, "'%s' must not contain a NUL character", path);
    clip(s, len, t, sizeof t);
    switch (e->type) {
    case T_STR:
        v->s = is_null(n) ? strdup("") : strdup(s);
        if (!v->s)
            return sl_err_set(SL_ERR_NOMEM, "%s: out of memory", ld->name);
        break;
    case T_INT:
    case T_LONG:
        if (e->auto_ok && strcmp(s, "auto") == 0)
            v->i = SL_CONFIG_AUTO_INT;
        else if ((ok = parse_integer(s, 0, v, &overflow)) && e->auto_ok &&
                 v->i == SL_CONFIG_AUTO_INT)
            overflow = -1; /* the number itself is below the bound, not auto */
        break;
    case T_U64:
        ok = parse_integer(s, 1, v, &overflow);
        break;
    case T_DOUBLE:
        if (e->auto_ok && strcmp(s, "auto") == 0)
            v->d = SL_CONFIG_AUTO;
        else
            ok = parse_double(s, &v->d);
        break;
    case T_BOOL:
        if (!strcasecmp(s, "true") || !strcasecmp(s, "yes"))
            v->i = 1;
        else if (!strcasecmp(s, "false") || !strcasecmp(s, "no"))
            v->i = 0;
        else
            ok = 0;
        break;
    case T_ENUM:
        v->i = find_name(e->names, s, len);
        break;
    case T_LAYERS:
    case T_PERIODS:
        SL_ASSERT(!"convert on a list");
    }
    if (!ok)
        return err_at(ld, n->start_mark, "'%s' must be %s, got %s", path, type_phrase(e),
                      describe(n, got, sizeof got));
    if (bad_value(e, v, overflow, t, why, sizeof why)) {
        free(v->s);
        v->s = NULL;
        return err_at(ld, n->start_mark, "'%s' %s", path, why);
    }
    return SL_OK;
}

/* One key: value pair of a list item's mapping (model.layers, sync.periods), path the
 * item's ("model.layers[1]"): *which is the key's index in names (keys[*which] its
 * entry) and *v its value, converted and checked. An unknown key is an error that
 * names the item and the keys it takes. */
static sl_status_t
item_value(const load_t *ld, const yaml_node_t *item, const yaml_node_pair_t *pr, const char *path,
           const entry_t *keys, const char *const *names, const size_t *lens, int *which,
           value_t *v)
{
    const yaml_node_t *k, *val = yaml_document_get_node(ld->doc, pr->value);
    char sub[96];

    SL_TRY(pair_key(ld, item, pr, &k));
    *which = find_name(names, (const char *)k->data.scalar.value, k->data.scalar.length);
    if (*which < 0)
        return unknown_key(ld, k->start_mark, path, (const char *)k->data.scalar.value,
                           k->data.scalar.length, names, lens);
    snprintf(sub, sizeof sub, "%s.%s", path, keys[*which].key);
    return convert(ld, &keys[*which], sub, val, v);
}

/* model.layers: a list of 1..SL_MAX_LAYERS mappings {lstm: H, projection: P}. */
static sl_status_t
apply_layers(load_t *ld, const entry_t *e, const yaml_node_t *n)
{
    sl_layer_config_t layers[SL_MAX_LAYERS];
    size_t lens[3] = {strlen(layer_key_names[0]), strlen(layer_key_names[1]), 0};
    char got[96], path[64];
    long count;

    if (n->type != YAML_SEQUENCE_NODE)
        return err_at(ld, n->start_mark, "'%s' must be a list like [{lstm: 256}], got %s",
                      e->key, describe(n, got, sizeof got));
    count = n->data.sequence.items.top - n->data.sequence.items.start;
    if (count < 1 || count > SL_MAX_LAYERS)
        return err_at(ld, n->start_mark, "'%s' must have 1 to %d layers, got %ld", e->key,
                      SL_MAX_LAYERS, count);
    memset(layers, 0, sizeof layers);
    for (long i = 0; i < count; i++) {
        const yaml_node_t *item =
            yaml_document_get_node(ld->doc, n->data.sequence.items.start[i]);
        int have_lstm = 0;

        snprintf(path, sizeof path, "%s[%ld]", e->key, i);
        if (item->type != YAML_MAPPING_NODE)
            return err_at(ld, item->start_mark, "'%s' must be a mapping like {lstm: 256}, got %s",
                          path, describe(item, got, sizeof got));
        for (const yaml_node_pair_t *pr = item->data.mapping.pairs.start;
             pr < item->data.mapping.pairs.top; pr++) {
            value_t v = {0};
            int which;

            SL_TRY(item_value(ld, item, pr, path, layer_keys, layer_key_names, lens, &which, &v));
            if (which == 0) {
                layers[i].hidden = (int)v.i;
                have_lstm = 1;
            } else {
                layers[i].projection = (int)v.i;
            }
        }
        if (!have_lstm)
            return err_at(ld, item->start_mark, "'%s' needs 'lstm' (the cell size H)", path);
    }
    ld->cfg->model.nlayers = (int)count;
    memcpy(ld->cfg->model.layers, layers, sizeof layers);
    return SL_OK;
}

/* Frees the globs of rules[0..n) and empties the slots. */
static void
free_rules(sl_period_rule_t *rules, int n)
{
    for (int i = 0; i < n; i++) {
        free(rules[i].match);
        rules[i].match = NULL;
        rules[i].period = 0;
    }
}

/* One sync.periods entry (path "sync.periods[i]"): {match: GLOB, period: H}, both
 * required. The glob is stored in *r (malloc'd) even when a later key fails. */
static sl_status_t
apply_rule(load_t *ld, const char *path, const yaml_node_t *item, sl_period_rule_t *r)
{
    size_t lens[3] = {strlen(rule_key_names[0]), strlen(rule_key_names[1]), 0};
    char got[96];
    int have_period = 0;

    if (item->type != YAML_MAPPING_NODE)
        return err_at(ld, item->start_mark,
                      "'%s' must be a mapping like {match: \"lstm.*\", period: 4}, got %s", path,
                      describe(item, got, sizeof got));
    for (const yaml_node_pair_t *pr = item->data.mapping.pairs.start;
         pr < item->data.mapping.pairs.top; pr++) {
        value_t v = {0};
        int which;

        SL_TRY(item_value(ld, item, pr, path, rule_keys, rule_key_names, lens, &which, &v));
        if (which == 0) {
            r->match = v.s; /* pair_key refused a second 'match' */
        } else {
            r->period = (int)v.i;
            have_period = 1;
        }
    }
    if (!r->match)
        return err_at(ld, item->start_mark, "'%s' needs 'match' (a glob on component names)",
                      path);
    if (!have_period)
        return err_at(ld, item->start_mark,
                      "'%s' needs 'period' (steps between syncs of what it matches)", path);
    return SL_OK;
}

/* sync.periods: a list of 0..SL_MAX_PERIOD_RULES rules; replaces the whole list. */
static sl_status_t
apply_periods(load_t *ld, const entry_t *e, const yaml_node_t *n)
{
    sl_period_rule_t rules[SL_MAX_PERIOD_RULES];
    char got[96], path[64];
    long count;
    sl_status_t st = SL_OK;

    if (n->type != YAML_SEQUENCE_NODE)
        return err_at(ld, n->start_mark,
                      "'%s' must be a list like [{match: \"lstm.*\", period: 4}], got %s", e->key,
                      describe(n, got, sizeof got));
    count = n->data.sequence.items.top - n->data.sequence.items.start;
    if (count > SL_MAX_PERIOD_RULES)
        return err_at(ld, n->start_mark, "'%s' must have at most %d rules, got %ld", e->key,
                      SL_MAX_PERIOD_RULES, count);
    memset(rules, 0, sizeof rules);
    for (long i = 0; i < count && st == SL_OK; i++) {
        snprintf(path, sizeof path, "%s[%ld]", e->key, i);
        st = apply_rule(ld, path,
                        yaml_document_get_node(ld->doc, n->data.sequence.items.start[i]),
                        &rules[i]);
    }
    if (st != SL_OK) {
        free_rules(rules, (int)count);
        return st;
    }
    free_rules(ld->cfg->sync.period_rule, SL_MAX_PERIOD_RULES);
    memcpy(ld->cfg->sync.period_rule, rules, sizeof rules);
    ld->cfg->sync.nperiod_rules = (int)count;
    return SL_OK;
}

/* Applies node n at key path ("" = top level): a leaf key takes a value, a section a
 * mapping of its keys (or nothing). */
/* Records "NAME:LINE:COL" of the value just stored for key, as err_at would write it. */
static sl_status_t
note_where(const load_t *ld, const char *key, yaml_mark_t m)
{
    char at[320];

    snprintf(at, sizeof at, "%s:%zu:%zu", ld->name, m.line + 1,
             m.column + 1 + (m.line == 0 ? ld->col_offset : 0));
    return sl_config_where_note(&ld->cfg->where, key, at);
}

static sl_status_t
apply_node(load_t *ld, const char *path, const yaml_node_t *n)
{
    const entry_t *e = find_entry(path);
    char got[96];

    if (e) {
        if (e->type == T_LAYERS) {
            SL_TRY(apply_layers(ld, e, n));
        } else if (e->type == T_PERIODS) {
            SL_TRY(apply_periods(ld, e, n));
        } else {
            value_t v = {0};
            SL_TRY(convert(ld, e, path, n, &v));
            store(ld->cfg, e, &v);
        }
        ld->given[e - schema] = 1;
        return ld->note_where ? note_where(ld, e->key, n->start_mark) : SL_OK;
    }
    if (*path && is_null(n))
        return SL_OK;
    if (n->type != YAML_MAPPING_NODE) {
        if (!*path)
            return err_at(ld, n->start_mark, "top level must be a mapping");
        return err_at(ld, n->start_mark, "'%s' must be a mapping, got %s", path,
                      describe(n, got, sizeof got));
    }
    for (const yaml_node_pair_t *pr = n->data.mapping.pairs.start;
         pr < n->data.mapping.pairs.top; pr++) {
        const yaml_node_t *k;
        const char *name;
        size_t len;
        char child[256];

        SL_TRY(pair_key(ld, n, pr, &k));
        name = (const char *)k->data.scalar.value;
        len = k->data.scalar.length;
        if (!has_child(path, name, len))
            return unknown_schema_key(ld, k->start_mark, path, name, len);
        snprintf(child, sizeof child, "%s%s%s", path, *path ? "." : "", name);
        SL_TRY(apply_node(ld, child, yaml_document_get_node(ld->doc, pr->value)));
    }
    return SL_OK;
}

/* Bytes of the YAML line break at p (left bytes: \r\n, \r, \n, NEL, LS or PS), else 0. */
static size_t
line_break_bytes(const unsigned char *p, size_t left)
{
    if (*p == '\n')
        return 1;
    if (*p == '\r')
        return left >= 2 && p[1] == '\n' ? 2 : 1;
    if (left >= 2 && p[0] == 0xc2 && p[1] == 0x85)
        return 2;
    if (left >= 3 && p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9))
        return 3;
    return 0;
}

/* Line and column (0-based) of a byte offset, for libyaml's reader errors, which
 * report only the offset: counted as libyaml counts its marks, lines broken by every
 * YAML line break, columns in characters. */
static yaml_mark_t
mark_of_offset(const char *text, size_t len, size_t offset)
{
    const unsigned char *u = (const unsigned char *)text;
    yaml_mark_t m = {offset, 0, 0};

    for (size_t i = 0; i < offset && i < len;) {
        size_t brk = line_break_bytes(u + i, len - i);
        if (brk) {
            m.line++;
            m.column = 0;
            i += brk;
        } else {
            m.column += (u[i] & 0xc0) != 0x80; /* not a continuation byte */
            i++;
        }
    }
    return m;
}

/* libyaml's problem as "YAML syntax error: ..." at its place; a problem found at the end
 * of input without a final newline is put at the end of the last line, not on a line
 * that does not exist (--set values have no newline). */
static sl_status_t
yaml_error(const load_t *ld, const yaml_parser_t *p, const char *text, size_t len)
{
    yaml_mark_t m = p->problem_mark, end = mark_of_offset(text, len, len);

    if (p->error == YAML_MEMORY_ERROR)
        return sl_err_set(SL_ERR_NOMEM, "%s: out of memory while reading YAML", ld->name);
    if (p->error == YAML_READER_ERROR)
        m = mark_of_offset(text, len, p->problem_offset);
    if (m.line > end.line)
        m = end;
    return err_at(ld, m, "YAML syntax error: %s", p->problem);
}

/* Parses text as one YAML document (a second document is an error, not ignored). */
static sl_status_t
parse_yaml(const load_t *ld, const char *text, size_t len, yaml_document_t *doc)
{
    yaml_parser_t p;
    yaml_document_t extra;
    sl_status_t st = SL_OK;

    if (!yaml_parser_initialize(&p))
        return sl_err_set(SL_ERR_NOMEM, "%s: out of memory", ld->name);
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    if (!yaml_parser_load(&p, doc)) {
        st = yaml_error(ld, &p, text, len);
        yaml_parser_delete(&p);
        return st;
    }
    if (!yaml_parser_load(&p, &extra)) {
        st = yaml_error(ld, &p, text, len);
    } else {
        const yaml_node_t *root = yaml_document_get_root_node(&extra);
        if (root)
            st = err_at(ld, root->start_mark, "only one YAML document is allowed");
        yaml_document_delete(&extra);
    }
    if (st != SL_OK)
        yaml_document_delete(doc);
    yaml_parser_delete(&p);
    return st;
}

/* Parses text and applies it at path. An empty document sets nothing at top level and
 * is an empty value below it (--set run.name= gives ""). */
static sl_status_t
apply_text(load_t *ld, const char *text, size_t len, const char *path)
{
    yaml_document_t doc;
    const yaml_node_t *root;
    yaml_node_t empty;
    sl_status_t st;

    SL_TRY(parse_yaml(ld, text, len, &doc));
    ld->doc = &doc;
    root = yaml_document_get_root_node(&doc);
    if (!root && *path) {
        memset(&empty, 0, sizeof empty);
        empty.type = YAML_SCALAR_NODE;
        empty.data.scalar.value = (yaml_char_t *)"";
        empty.data.scalar.style = YAML_PLAIN_SCALAR_STYLE;
        root = &empty;
    }
    st = root ? apply_node(ld, path, root) : SL_OK;
    ld->doc = NULL;
    yaml_document_delete(&doc);
    return st;
}

/* ---- layers of settings: init, file, --set ---- */

static sl_status_t
replace_string(char **dst, const char *s)
{
    char *c = strdup(s);

    if (!c)
        return sl_err_set(SL_ERR_NOMEM, "config: out of memory");
    free(*dst);
    *dst = c;
    return SL_OK;
}

/* Deep copy (the strings are duplicated). */
static sl_status_t
config_copy(sl_config_t *dst, const sl_config_t *src)
{
    *dst = *src;
    dst->source = NULL;
    dst->where = NULL;
    for (size_t i = 0; i < NKEYS; i++)
        if (schema[i].type == T_STR)
            *(char **)slot(dst, &schema[i]) = NULL;
    for (int i = 0; i < SL_MAX_PERIOD_RULES; i++)
        dst->sync.period_rule[i].match = NULL;
    if (replace_string(&dst->source, src->source ? src->source : "<defaults>") != SL_OK ||
        sl_config_where_copy(&dst->where, src->where) != SL_OK)
        goto fail;
    for (size_t i = 0; i < NKEYS; i++) {
        const char *s;
        if (schema[i].type != T_STR)
            continue;
        s = fetch(src, &schema[i]).s;
        if (replace_string((char **)slot(dst, &schema[i]), s ? s : "") != SL_OK)
            goto fail;
    }
    for (int i = 0; i < SL_MAX_PERIOD_RULES; i++)
        if (src->sync.period_rule[i].match &&
            replace_string(&dst->sync.period_rule[i].match, src->sync.period_rule[i].match) !=
                SL_OK)
            goto fail;
    return SL_OK;
fail:
    sl_config_fini(dst);
    return SL_ERR_NOMEM;
}

sl_status_t
sl_config_copy(sl_config_t *dst, const sl_config_t *src)
{
    if (config_copy(dst, src) != SL_OK)
        return sl_err_set(SL_ERR_NOMEM, "config: out of memory");
    return SL_OK;
}

/* Moves derived keys along: each one this layer did not set, and that still held the
 * default computed from the config before the layer, gets the new default. */
static sl_status_t
follow_defaults(sl_config_t *cfg, const sl_config_t *before, const unsigned char *given)
{
    for (size_t i = 0; i < NKEYS; i++) {
        const entry_t *e = &schema[i];
        value_t old = {0}, now = {0}, cur;
        int follows;

        if (e->derive == D_NONE || given[i])
            continue;
        SL_TRY(derived_value(before, e, &old));
        cur = fetch(before, e);
        follows = values_equal(e, &cur, &old);
        free(old.s);
        if (!follows)
            continue;
        SL_TRY(derived_value(cfg, e, &now));
        store(cfg, e, &now);
    }
    return SL_OK;
}

/* Every file and --set is applied to a copy that replaces cfg only when all of it was
 * good, so a failed override leaves the config as it was. */
static sl_status_t
layer_begin(load_t *ld, sl_config_t *work, const sl_config_t *cfg, const char *name)
{
    memset(ld, 0, sizeof *ld);
    ld->cfg = work;
    ld->name = name;
    ld->note_where = 1;
    return config_copy(work, cfg);
}

static sl_status_t
layer_end(load_t *ld, sl_config_t *cfg, sl_status_t st)
{
    if (st == SL_OK)
        st = follow_defaults(ld->cfg, cfg, ld->given);
    if (st != SL_OK) {
        sl_config_fini(ld->cfg);
        return st;
    }
    sl_config_fini(cfg);
    *cfg = *ld->cfg;
    return SL_OK;
}

/* init cannot return a status: a default that does not parse is a bug in the table
 * (the tests load every default), and running out of memory this early is fatal. */
void
sl_config_init(sl_config_t *cfg)
{
    load_t ld;
    sl_status_t st;

    memset(cfg, 0, sizeof *cfg);
    memset(&ld, 0, sizeof ld);
    ld.cfg = cfg;
    ld.name = "<defaults>";
    st = replace_string(&cfg->source, "<defaults>");
    for (size_t i = 0; i < NKEYS && st == SL_OK; i++)
        if (schema[i].def)
            st = apply_text(&ld, schema[i].def, strlen(schema[i].def), schema[i].key);
    for (size_t i = 0; i < NKEYS && st == SL_OK; i++) {
        value_t v = {0};
        if (schema[i].derive != D_NONE) {
            st = derived_value(cfg, &schema[i], &v);
            if (st == SL_OK)
                store(cfg, &schema[i], &v);
        }
    }
    SL_ASSERT(st == SL_OK);
}

void
sl_config_fini(sl_config_t *cfg)
{
    free(cfg->source);
    cfg->source = NULL;
    sl_config_where_destroy(&cfg->where);
    for (size_t i = 0; i < NKEYS; i++) {
        if (schema[i].type == T_STR) {
            char **sp = slot(cfg, &schema[i]);
            free(*sp);
            *sp = NULL;
        }
    }
    free_rules(cfg->sync.period_rule, SL_MAX_PERIOD_RULES);
    cfg->sync.nperiod_rules = 0;
}

sl_status_t
sl_config_load_buffer(sl_config_t *cfg, const char *text, size_t len, const char *name)
{
    load_t ld;
    sl_config_t work;
    sl_status_t st;

    SL_TRY(layer_begin(&ld, &work, cfg, name));
    st = apply_text(&ld, text, len, "");
    if (st == SL_OK)
        st = replace_string(&work.source, name);
    return layer_end(&ld, cfg, st);
}

sl_status_t
sl_config_load_string(sl_config_t *cfg, const char *yaml, const char *name)
{
    return sl_config_load_buffer(cfg, yaml, strlen(yaml), name);
}

sl_status_t
sl_config_load_file(sl_config_t *cfg, const char *path)
{
    char *text;
    size_t len;
    sl_status_t st;

    SL_TRY(sl_file_read_all(path, &text, &len));
    st = sl_config_load_buffer(cfg, text, len, path);
    free(text);
    return st == SL_OK ? sl_config_resolve_data_paths(cfg, path) : st;
}

/* Checks each component of a --set key path, pointing at the first bad one. */
static sl_status_t
check_key_path(const load_t *ld, char *key, size_t key_col)
{
    size_t i = 0;

    for (;;) {
        size_t j = i + strcspn(key + i, ".");
        yaml_mark_t m = {0, 0, key_col + i};
        char shown[72];
        int ok, leaf;
        char saved = key[j];

        if (j == i)
            return err_at(ld, m, "empty key name in '%s'", clip(key, strlen(key), shown,
                                                                  sizeof shown));
        if (i > 0)
            key[i - 1] = '\0'; /* key is now the parent path */
        ok = has_child(i > 0 ? key : "", key + i, j - i);
        if (!ok) {
            sl_status_t st = unknown_schema_key(ld, m, i > 0 ? key : "", key + i, j - i);
            if (i > 0)
                key[i - 1] = '.';
            return st;
        }
        if (i > 0)
            key[i - 1] = '.';
        key[j] = '\0';
        leaf = find_entry(key) != NULL;
        if (saved == '\0')
            return SL_OK;
        if (leaf) {
            sl_status_t st;
            m.column = key_col + j + 1;
            st = err_at(ld, m, "'%s' has no sub-keys", key);
            key[j] = saved;
            return st;
        }
        key[j] = saved;
        i = j + 1;
    }
}

sl_status_t
sl_config_set(sl_config_t *cfg, const char *assignment)
{
    const char *eq = strchr(assignment, '=');
    size_t end = eq ? (size_t)(eq - assignment) : strlen(assignment), a = 0, b = end;
    char *key, shown[64], name[72];
    load_t ld;
    sl_config_t work;
    sl_status_t st;

    while (a < b && isspace((unsigned char)assignment[a]))
        a++;
    while (b > a && isspace((unsigned char)assignment[b - 1]))
        b--;
    key = strndup(assignment + a, b - a);
    if (!key)
        return sl_err_set(SL_ERR_NOMEM, "--set: out of memory");
    /* "--set KEY" escaped and clipped like any input text: every key of the schema fits,
       and a message about a long one keeps its place and its text */
    snprintf(name, sizeof name, "--set%s%s", b > a ? " " : "", clip(key, b - a, shown,
                                                                   sizeof shown));
    st = layer_begin(&ld, &work, cfg, name);
    if (st != SL_OK)
        goto out;
    if (!eq) {
        yaml_mark_t m = {0, 0, end};
        st = err_at(&ld, m, "missing '=' (expected KEY=VALUE, e.g. train.optimizer.lr=0.5)");
    } else if (a == b) {
        yaml_mark_t m = {0, 0, a};
        st = err_at(&ld, m, "missing key before '=' (expected KEY=VALUE)");
    } else {
        st = check_key_path(&ld, key, a);
        ld.col_offset = end + 1;
        if (st == SL_OK)
            st = apply_text(&ld, eq + 1, strlen(eq + 1), key);
    }
    st = layer_end(&ld, cfg, st);
out:
    free(key);
    return st;
}

/* ---- validation ---- */

/* sync.overlap_steps tau: a model-averaging algorithm, and below every period that a
 * component can get, so that a block's update is applied before its next sync point. */
static sl_status_t
check_overlap(const sl_config_t *cfg, const char *src)
{
    int tau = cfg->sync.overlap_steps;

    if (tau == 0)
        return SL_OK;
    if (cfg->sync.algorithm == SL_SYNC_ALLREDUCE)
        return sl_err_set(SL_ERR_CONFIG,
                          "%s: 'sync.overlap_steps' is %d, but allreduce averages the gradients "
                          "within each step: there is no block to overlap (use 0)",
                          src, tau);
    if (tau >= cfg->sync.period)
        return sl_err_set(SL_ERR_CONFIG,
                          "%s: 'sync.overlap_steps' (%d) must be less than 'sync.period' (%d)", src,
                          tau, cfg->sync.period);
    if (cfg->sync.embedding_period > 0 && tau >= cfg->sync.embedding_period)
        return sl_err_set(SL_ERR_CONFIG,
                          "%s: 'sync.overlap_steps' (%d) must be less than "
                          "'sync.embedding_period' (%d)",
                          src, tau, cfg->sync.embedding_period);
    for (int i = 0; i < cfg->sync.nperiod_rules; i++)
        if (tau >= cfg->sync.period_rule[i].period)
            return sl_err_set(SL_ERR_CONFIG,
                              "%s: 'sync.overlap_steps' (%d) must be less than "
                              "'sync.periods[%d].period' (%d)",
                              src, tau, i, cfg->sync.period_rule[i].period);
    return SL_OK;
}

sl_status_t
sl_config_validate(const sl_config_t *cfg)
{
    const char *src = cfg->source ? cfg->source : "<defaults>";
    char shown[512], why[768];

    for (size_t i = 0; i < NKEYS; i++) {
        const entry_t *e = &schema[i];
        value_t v;
        if (e->type == T_LAYERS || e->type == T_PERIODS)
            continue;
        v = fetch(cfg, e);
        format_value(e, &v, shown, sizeof shown);
        if (bad_value(e, &v, 0, shown, why, sizeof why))
            return sl_err_set(SL_ERR_CONFIG, "%s: '%s' %s", src, e->key, why);
    }
    if (cfg->model.nlayers < 1 || cfg->model.nlayers > SL_MAX_LAYERS)
        return sl_err_set(SL_ERR_CONFIG, "%s: 'model.layers' must have 1 to %d layers, got %d",
                          src, SL_MAX_LAYERS, cfg->model.nlayers);
    for (int i = 0; i < cfg->model.nlayers; i++) {
        if (cfg->model.layers[i].hidden < 1)
            return sl_err_set(SL_ERR_CONFIG, "%s: 'model.layers[%d].lstm' must be at least 1, "
                              "got %d", src, i, cfg->model.layers[i].hidden);
        if (cfg->model.layers[i].projection < 0)
            return sl_err_set(SL_ERR_CONFIG, "%s: 'model.layers[%d].projection' must be at "
                              "least 0, got %d", src, i, cfg->model.layers[i].projection);
    }
    if (cfg->sync.nperiod_rules < 0 || cfg->sync.nperiod_rules > SL_MAX_PERIOD_RULES)
        return sl_err_set(SL_ERR_CONFIG, "%s: 'sync.periods' must have at most %d rules, got %d",
                          src, SL_MAX_PERIOD_RULES, cfg->sync.nperiod_rules);
    for (int i = 0; i < cfg->sync.nperiod_rules; i++) {
        const sl_period_rule_t *r = &cfg->sync.period_rule[i];
        if (!r->match || !r->match[0])
            return sl_err_set(SL_ERR_CONFIG, "%s: 'sync.periods[%d].match' must not be empty",
                              src, i);
        if (r->period < 1)
            return sl_err_set(SL_ERR_CONFIG, "%s: 'sync.periods[%d].period' must be at least 1, "
                              "got %d", src, i, r->period);
    }
    SL_TRY(check_overlap(cfg, src));
    SL_TRY(sl_config_check_quant(cfg, src));
    if (!cfg->data.train[0])
        return sl_err_set(SL_ERR_CONFIG, "%s: 'data.train' is required", src);
    if (cfg->data.valid[0] && cfg->data.valid_fraction > 0)
        return sl_err_set(SL_ERR_CONFIG, "%s: 'data.valid' and 'data.valid_fraction' both "
                          "give a validation set; use one", src);
    if (cfg->data.level == SL_LEVEL_WORD && cfg->data.vocab_size < 1)
        return sl_err_set(SL_ERR_CONFIG, "%s: 'data.vocab_size' must be at least 1 at word "
                          "level (0 = every character is for char level)", src);
    if (cfg->model.output == SL_OUTPUT_SAMPLED && cfg->model.samples < 1)
        return sl_err_set(SL_ERR_CONFIG, "%s: 'model.output.samples' must be at least 1 with "
                          "the sampled softmax, got %d", src, cfg->model.samples);
    if (cfg->train.max_steps > 0 && cfg->train.schedule.warmup_steps > cfg->train.max_steps)
        return sl_err_set(SL_ERR_CONFIG, "%s: 'train.schedule.warmup_steps' (%ld) is longer "
                          "than 'train.max_steps' (%ld)", src, cfg->train.schedule.warmup_steps,
                          cfg->train.max_steps);
    return SL_OK;
}

/* ---- writing ---- */

/* Whether s can be written as a plain YAML scalar that reads back as the same string:
 * a conservative character set, not a null word, no leading indicator. */
static int
plain_ok(const char *s)
{
    size_t len = strlen(s);

    if (!len || s[0] == '-' || s[0] == ':' || s[len - 1] == ':')
        return 0;
    if (!strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL"))
        return 0;
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("_./+-:", *p))
            return 0;
    return 1;
}

static void
write_string(FILE *out, const char *s)
{
    if (plain_ok(s)) {
        fputs(s, out);
        return;
    }
    fputc('"', out);
    for (size_t i = 0, len = strlen(s); i < len;) {
        const unsigned char *p = (const unsigned char *)s + i;
        char e[8];
        size_t take, elen = control_escape(p, len - i, e, &take);

        if (elen)
            fwrite(e, 1, elen, out);
        else if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else
            fputc(*p, out);
        i += take;
    }
    fputc('"', out);
}

/* Number of leading dotted components two key paths share, not counting the last
 * component of either (the leaf). */
static int
common_sections(const char *a, const char *b)
{
    int n = 0;

    for (;;) {
        size_t la = strcspn(a, "."), lb = strcspn(b, ".");
        if (!a[la] || !b[lb] || la != lb || strncmp(a, b, la) != 0)
            return n;
        n++;
        a += la + 1;
        b += lb + 1;
    }
}

sl_status_t
sl_config_write_yaml(const sl_config_t *cfg, FILE *out)
{
    const char *prev = "";
    char buf[512];

    fputs("# shoal configuration, every key resolved (see doc/config.md)\n", out);
    for (size_t i = 0; i < NKEYS; i++) {
        const entry_t *e = &schema[i];
        const char *k = e->key;
        int shared = common_sections(prev, k), depth = 0;

        /* open the sections this key needs beyond those of the previous key */
        for (;;) {
            size_t len = strcspn(k, ".");
            if (!k[len])
                break;
            if (depth >= shared)
                fprintf(out, "%*s%.*s:\n", 2 * depth, "", (int)len, k);
            depth++;
            k += len + 1;
        }
        fprintf(out, "%*s%s:", 2 * depth, "", k);
        if (e->type == T_LAYERS) {
            fputc('\n', out);
            for (int l = 0; l < cfg->model.nlayers; l++)
                fprintf(out, "%*s- {lstm: %d, projection: %d}\n", 2 * depth + 2, "",
                        cfg->model.layers[l].hidden, cfg->model.layers[l].projection);
        } else if (e->type == T_PERIODS) {
            fputs(cfg->sync.nperiod_rules > 0 ? "\n" : " []\n", out);
            for (int r = 0; r < cfg->sync.nperiod_rules; r++) {
                const char *m = cfg->sync.period_rule[r].match;
                fprintf(out, "%*s- {match: ", 2 * depth + 2, "");
                write_string(out, m ? m : "");
                fprintf(out, ", period: %d}\n", cfg->sync.period_rule[r].period);
            }
        } else {
            value_t v = fetch(cfg, e);
            fputc(' ', out);
            if (e->type == T_STR) {
                write_string(out, v.s ? v.s : "");
            } else {
                format_value(e, &v, buf, sizeof buf);
                fputs(buf, out);
            }
            fputc('\n', out);
        }
        prev = e->key;
    }
    if (fflush(out) != 0 || ferror(out))
        return sl_err_set(SL_ERR_IO, "writing the config: %s", strerror(errno));
    return SL_OK;
}

/* "integer >= 1", "number in [0, 1)", "word|char", ... */
static void
type_text(const entry_t *e, char *buf, size_t n)
{
    char lo[32], hi[32];
    const char *base = "number";

    switch (e->type) {
    case T_STR:
        if (e->names)
            join_names(e->names, "|", buf, n);
        else
            snprintf(buf, n, "%s", e->shape ? e->shape : "string");
        return;
    case T_ENUM:
        join_names(e->names, "|", buf, n);
        return;
    case T_BOOL:
        snprintf(buf, n, "bool");
        return;
    case T_LAYERS:
    case T_PERIODS:
        snprintf(buf, n, "list");
        return;
    case T_U64:
        snprintf(buf, n, "integer >= 0");
        return;
    case T_INT:
    case T_LONG:
        base = "integer";
        break;
    case T_DOUBLE:
        break;
    }
    format_double(e->lo, lo, sizeof lo);
    format_double(e->hi, hi, sizeof hi);
    if (e->lo_kind != NO_BOUND && e->hi_kind != NO_BOUND)
        snprintf(buf, n, "%s in %c%s, %s%c", base, e->lo_kind == CLOSED ? '[' : '(', lo, hi,
                 e->hi_kind == CLOSED ? ']' : ')');
    else if (e->lo_kind != NO_BOUND)
        snprintf(buf, n, "%s %s %s", base, e->lo_kind == CLOSED ? ">=" : ">", lo);
    else if (e->hi_kind != NO_BOUND)
        snprintf(buf, n, "%s %s %s", base, e->hi_kind == CLOSED ? "<=" : "<", hi);
    else
        snprintf(buf, n, "%s", base);
    if (e->auto_ok) {
        size_t used = strlen(buf);

        snprintf(buf + used, n - used, " or auto");
    }
}

static void
default_text(const entry_t *e, char *buf, size_t n)
{
    const double *per_opt = e->derive == D_LR ? opt_default_lr : opt_default_eps;
    size_t used = 0;
    char d[32];

    if (e->derive == D_DIR) {
        snprintf(buf, n, "runs/<run.name>");
    } else if (e->derive != D_NONE) {
        buf[0] = '\0';
        for (int i = 0; opt_names[i] && used < n; i++) {
            format_double(per_opt[i], d, sizeof d);
            used += (size_t)snprintf(buf + used, n - used, "%s%s (%s)", i ? ", " : "", d,
                                     opt_names[i]);
        }
    } else {
        snprintf(buf, n, "%s", e->def[0] ? e->def : "\"\"");
    }
}

/* --help-config fits a terminal of this many columns. */
#define SCHEMA_COLUMNS 100

/* text at an indent of `indent` columns, broken at spaces (or after '|' in a list of
 * names) so that no line is longer than SCHEMA_COLUMNS; the first line continues a line
 * already `col` columns long. */
static void
print_wrapped(FILE *out, const char *text, int col, int indent)
{
    while (*text) {
        size_t room = (size_t)(SCHEMA_COLUMNS - col), len = strlen(text), cut = len;

        if (len > room) {
            cut = 0;
            for (size_t i = 1; i <= room; i++)
                if (text[i] == ' ' || text[i - 1] == '|')
                    cut = i;
            if (cut == 0) /* one word longer than a line: leave it whole */
                cut = strcspn(text, " ");
        }
        fprintf(out, "%.*s\n", (int)cut, text);
        text += cut;
        while (*text == ' ')
            text++;
        if (*text)
            fprintf(out, "%*s", indent, "");
        col = indent;
    }
}

void
sl_config_print_schema(FILE *out)
{
    char t[256], d[128], head[512];

    fputs("Configuration keys: defaults, then the YAML file, then --set KEY=VALUE.\n"
          "Sections nest in YAML (train: {optimizer: {lr: 0.5}}); --set uses dotted keys.\n\n",
          out);
    fputs("KEY (TYPE; default DEFAULT)\n    MEANING\n", out);
    for (size_t i = 0; i < NKEYS; i++) {
        type_text(&schema[i], t, sizeof t);
        default_text(&schema[i], d, sizeof d);
        snprintf(head, sizeof head, "%s (%s; default %s)", schema[i].key, t, d);
        print_wrapped(out, head, 0, 4);
        fputs("    ", out);
        print_wrapped(out, schema[i].doc, 4, 4);
    }
    fputs("\n", out);
    print_wrapped(out,
                  "model.layers entries: {lstm: H (integer >= 1, the LSTM cell size), "
                  "projection: P (integer >= 0, LSTMP output size; 0 = none)}",
                  0, 2);
    snprintf(head, sizeof head,
             "sync.periods entries (at most %d): {match: GLOB (fnmatch(3) on component names: "
             "embedding.S, lstm.L, proj.L, softmax.S, softmax_bias), period: H (integer >= 1)}; "
             "the first rule that matches a component gives its H; the others keep "
             "sync.embedding_period (row shards) or sync.period. allreduce has no periods",
             SL_MAX_PERIOD_RULES);
    print_wrapped(out, head, 0, 2);
}
