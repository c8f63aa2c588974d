/* The schema: every key of the run configuration with its type, field, default,
 * bounds and documentation, and the lookups of keys and sections in it. The table
 * drives everything else in src/config. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "config/sl_config.h"
#include "config/sl_config_internal.h"

#define K(k, t, field)                                                                             \
    .key = (k), .type = (t), .off = offsetof(sl_config_t, field),                                  \
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
    if (!colon || host == 0 ||
        strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
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
    u = sl_config_find_name(units, end, strlen(end));
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

/* Defaults that depend on train.optimizer.type, indexed by sl_opt_kind_t: SGD's lr is
 * the PyTorch word_language_model one, Adagrad's and Adam's lr and eps are PyTorch's. */
const double sl_config_opt_default_lr[] = {20.0, 0.01, 0.001};
const double sl_config_opt_default_eps[] = {1e-8, 1e-10, 1e-8};

/* Sections must be contiguous (write_yaml emits each header once). */
const entry_t sl_config_schema[] = {
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

    {K("data.train", T_STR, data.train), .def = "", .doc = "training text (required)"},
    {K("data.valid", T_STR, data.valid), .def = "",
     .doc = "validation text (\"\" = none, or see data.valid_fraction)"},
    {K("data.test", T_STR, data.test), .def = "", .doc = "test text (\"\" = none)"},
    {K("data.level", T_ENUM, data.level), .def = "word", .names = sl_config_level_names,
     .doc = "tokens: words between spaces, tabs and line ends, or UTF-8 characters"},
    {K("data.vocab_size", T_INT, data.vocab_size), .def = "10000", AT_LEAST(0),
     .doc = "word: the top N training words (+ <unk>, <eos>); char: 0 = every character"},
    {K("data.valid_fraction", T_DOUBLE, data.valid_fraction), .def = "0", AT_LEAST(0), BELOW(1),
     .doc = "without data.valid: hold out this tail fraction of train"},
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
    {K("model.output.type", T_ENUM, model.output), .def = "full", .names = sl_config_output_names,
     .doc = "output layer: full softmax, or sampled softmax"},
    {K("model.output.samples", T_INT, model.samples), .def = "1024", AT_LEAST(0),
     .doc = "sampled softmax: negatives S drawn per step"},
    {K("model.init_range", T_DOUBLE, model.init_range), .def = "0.1", ABOVE(0),
     .doc = "weights start uniform in [-r, r], biases at 0"},

    {K("train.batch", T_INT, train.batch), .derive = D_BATCH, AT_LEAST(1),
     .doc = "B: parallel token streams per node"},
    {K("train.global_batch", T_INT, train.global_batch), .def = "0", AT_LEAST(0),
     .doc = "streams of one step over all nodes: each node takes global_batch / "
            "cluster.nodes (train.batch follows; 0 = train.batch decides)"},
    {K("train.bptt", T_INT, train.bptt), .def = "35", AT_LEAST(1), AT_MOST(SL_MAX_BPTT),
     .doc = "T: steps of back-propagation through time"},
    {K("train.epochs", T_INT, train.epochs), .def = "1", AT_LEAST(1),
     .doc = "passes over the training data"},
    {K("train.max_steps", T_LONG, train.max_steps), .def = "0", AT_LEAST(0),
     .doc = "stop after this many steps (0 = train.epochs decides)"},
    {K("train.loss_scale.dynamic", T_BOOL, train.loss_scale.dynamic), .def = "true",
     .doc = "fp16/bf16: halve the loss scale on overflow, double it after a good run"},
    {K("train.loss_scale.init", T_DOUBLE, train.loss_scale.init), .def = "65536", ABOVE(0),
     .doc = "fp16/bf16: starting (or, not dynamic, fixed) loss scale"},
    {K("train.loss_scale.growth_interval", T_INT, train.loss_scale.growth_interval), .def = "2000",
     AT_LEAST(1), .doc = "fp16/bf16: good steps before the scale doubles"},
    {K("train.eval_every_epoch", T_BOOL, train.eval_every_epoch), .def = "true",
     .doc = "evaluate on the validation text after each epoch"},
    {K("train.optimizer.type", T_ENUM, train.optimizer.type), .def = "sgd",
     .names = sl_config_opt_names, .doc = "optimizer (lr and eps defaults follow it)"},
    {K("train.optimizer.lr", T_DOUBLE, train.optimizer.lr), .derive = D_LR, ABOVE(0),
     .doc = "learning rate (the peak rate under a schedule)"},
    {K("train.optimizer.clip", T_DOUBLE, train.optimizer.clip), .def = "0.25", AT_LEAST(0),
     .doc = "clip gradients to this global L2 norm (0 = off)"},
    {K("train.optimizer.beta1", T_DOUBLE, train.optimizer.beta1), .def = "0.9", AT_LEAST(0),
     BELOW(1), .doc = "adam: decay of the gradient average"},
    {K("train.optimizer.beta2", T_DOUBLE, train.optimizer.beta2), .def = "0.999", AT_LEAST(0),
     BELOW(1), .doc = "adam: decay of the squared-gradient average"},
    {K("train.optimizer.eps", T_DOUBLE, train.optimizer.eps), .derive = D_EPS, ABOVE(0),
     .doc = "adam, adagrad: added to the denominator"},
    {K("train.optimizer.initial_accumulator", T_DOUBLE, train.optimizer.initial_accumulator),
     .def = "0", AT_LEAST(0), .doc = "adagrad: starting value of the squared-gradient sums"},
    {K("train.schedule.type", T_ENUM, train.schedule.type), .def = "constant",
     .names = sl_config_sched_names,
     .doc = "lr schedule: constant, lr * decay^epoch, or linear down to 0 at the end"},
    {K("train.schedule.decay", T_DOUBLE, train.schedule.decay), .def = "0.9", ABOVE(0), AT_MOST(1),
     .doc = "epoch_decay: factor applied after each epoch"},
    {K("train.schedule.warmup_steps", T_LONG, train.schedule.warmup_steps), .def = "0", AT_LEAST(0),
     .doc = "linear warm-up from 0 over the first N steps"},
    {K("train.schedule.steps", T_LONG, train.schedule.steps), .def = "0", AT_LEAST(0),
     .doc = "linear: the step at which lr reaches 0 (0 = the run's last step)"},

    {K("cluster.nodes", T_INT, cluster.nodes), .def = "1", AT_LEAST(1), .auto_ok = 1,
     .doc = "number of nodes n (processes) of the run (auto = the launcher's)"},
    {K("cluster.transport", T_ENUM, cluster.transport), .def = "ipc",
     .names = sl_config_transport_names,
     .doc = "how nodes talk: ipc (Unix sockets, one machine) or tcp"},
    {K("cluster.master", T_STR, cluster.master), .def = "", .valid = valid_master,
     .expect = "HOST:PORT (port 1 to 65535) or empty", .shape = "HOST:PORT",
     .doc = "rank 0's rendezvous address for shoal node (\"\" = SHOAL_MASTER_ADDR/PORT)"},
    {K("cluster.bind", T_STR, cluster.bind), .def = "127.0.0.1", .nonempty = 1, .valid = valid_bind,
     .expect = "an IPv4 address, an interface name or *", .shape = "address",
     .doc = "address or interface nodes listen on for tcp (* = all)"},
    {K("cluster.timeout_ms", T_INT, cluster.timeout_ms), .def = "30000", AT_LEAST(1),
     .doc = "how long one exchange with a peer may take (ms)"},
    {K("cluster.rendezvous_timeout_ms", T_INT, cluster.rendezvous_timeout_ms), .def = "120000",
     AT_LEAST(1), .doc = "how long nodes wait for each other at start (ms)"},
    {K("cluster.shared_memory", T_BOOL, cluster.shared_memory), .def = "true",
     .doc = "large frames to nodes on the same machine go through shared memory"},
    {K("cluster.io_threads", T_INT, cluster.io_threads), .def = "0", AT_LEAST(0), AT_MOST(64),
     .doc = "ZeroMQ I/O threads per node; with 2 or more, receiving and sending run on "
            "different ones (0 = from the machine's cores: 2 from 8 cores on, else 1; gossip-* "
            "and local-* runs 4 from 16 cores on)"},
    {K("cluster.stripes", T_INT, cluster.stripes), .def = "0", AT_LEAST(0), AT_MOST(16),
     .doc = "ZeroMQ connections per peer, each on its own sending I/O thread; gossip "
            "snapshots and other whole states sent to a peer of 128 KiB and more go in "
            "pieces over them, of 64 KiB and more in turn, a collective's chunks all on the "
            "first (0 = one per sending I/O thread: io_threads minus half of them rounded "
            "up, at least 1)"},
    {K("cluster.allreduce", T_ENUM, cluster.allreduce), .def = "auto",
     .names = sl_config_allreduce_names,
     .doc = "how an allreduce moves its segments: auto = by recursive halving and doubling "
            "when the nodes are even, 4 or more, and the frames fp32 (2 log2(n) steps for a "
            "power of two; on 2^L m nodes, m odd, with rings of m in the middle, 2(L+m-1): "
            "6 on 6 nodes), else around the ring (2(n-1) steps), the same bytes either way, "
            "and allgathers by recursive doubling where their blocks are of about one size; "
            "ring = always around the ring"},
    {K("cluster.security", T_ENUM, cluster.security), .def = "curve",
     .names = sl_config_security_names,
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
    {K("cluster.emulate.latency_ms", T_DOUBLE, cluster.emulate.latency_ms), .def = "0", AT_LEAST(0),
     AT_MOST(60000), .doc = "emulation: a frame arrives this long after it has left (ms)"},
    {K("cluster.emulate.jitter_ms", T_DOUBLE, cluster.emulate.jitter_ms), .def = "0", AT_LEAST(0),
     AT_MOST(60000),
     .doc = "emulation: up to this much more latency, keeping each link's order (ms)"},
    {K("cluster.restart.max", T_INT, cluster.restart.max), .def = "0", AT_LEAST(0), AT_MOST(1000),
     .doc = "shoal run: restarts of each node process that died (0 = none)"},
    {K("cluster.restart.delay_ms", T_INT, cluster.restart.delay_ms), .def = "5000", AT_LEAST(0),
     AT_MOST(3600000), .doc = "shoal run: wait before each restart (ms)"},
    {K("cluster.watchdog_timeouts", T_INT, cluster.watchdog_timeouts), .def = "10", AT_LEAST(0),
     AT_MOST(1000),
     .doc = "shoal run: kill a node that shows no progress for this many sync timeouts "
            "(0 = off)"},

    {K("topology.degree", T_INT, topology.degree), .def = "0", AT_LEAST(0),
     .doc = "k of the k-symmetric ring (0 = max(1, floor(log2 n) - 1))"},

    {K("sync.algorithm", T_ENUM, sync.algorithm), .def = "none", .names = sl_config_sync_names,
     .doc = "how nodes keep their models together (see doc/config.md)"},
    {K("sync.neighbours", T_INT, sync.neighbours), .def = "1", AT_LEAST(1),
     .doc = "gossip-*: q neighbours each node averages with per round"},
    {K("sync.block_momentum", T_DOUBLE, sync.block_momentum), .def = "0.9", AT_LEAST(0), BELOW(1),
     .auto_ok = 1,
     .doc = "*bmuf: block momentum eta (auto = 1 - 1/m for the m models an average takes: n, q + 1 "
            "in gossip)"},
    {K("sync.block_lr", T_DOUBLE, sync.block_lr), .def = "1", ABOVE(0),
     .doc = "*bmuf: block learning rate zeta"},
    {K("sync.nesterov", T_BOOL, sync.nesterov), .def = "true",
     .doc = "*bmuf: Nesterov block momentum (theta = omega + eta * Delta)"},
    {K("sync.block_reference", T_ENUM, sync.block_reference), .def = "blockstart",
     .names = sl_config_block_ref_names,
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
    {K("sync.exchange", T_ENUM, sync.exchange), .def = "dense", .names = sl_config_exchange_names,
     .doc = "embedding and softmax rows: dense, unique (touched rows) or allgather"},
    {K("sync.exchange_top", T_DOUBLE, sync.exchange_top), .def = "0", AT_LEAST(0), AT_MOST(100),
     .doc = "unique: also send the top p% most frequent rows"},
    {K("sync.exchange_random", T_DOUBLE, sync.exchange_random), .def = "0", AT_LEAST(0),
     AT_MOST(100), .doc = "unique: also send a random q% of the rows"},
    {K("sync.compression", T_ENUM, sync.compression), .def = "fp32",
     .names = sl_config_compress_names,
     .doc = "encoding of exchanged values: fp32, fp16, bf16, or int8 / int4 deltas "
            "(gossip-*, local-* only)"},
    {K("sync.compression_scale", T_DOUBLE, sync.compression_scale), .def = "0", AT_LEAST(0),
     .doc = "F: values times F before the down-cast (0 = automatic, no overflow)"},
    {K("sync.quant_block", T_INT, sync.quant_block), .def = "256", AT_LEAST(1), AT_MOST(65536),
     .doc = "int8 / int4: values per fp32 scale"},
    {K("sync.rounding", T_ENUM, sync.rounding), .def = "nearest", .names = sl_config_rounding_names,
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
    {K("precision", T_STR, precision), .def = "fp32", .names = sl_config_precision_names,
     .doc = "compute precision; bf16 and fp16 need the CUDA backend"},

    {K("device_options.lstm", T_STR, device_options.lstm), .def = "auto",
     .names = sl_config_lstm_names,
     .doc = "LSTM layers on a GPU: cuDNN's whole-layer RNN, shoal's fused cells, or the "
            "faster on the model's shapes (timed at the first training step)"},
};

const size_t sl_config_nkeys = sizeof sl_config_schema / sizeof sl_config_schema[0];
_Static_assert(sizeof sl_config_schema / sizeof sl_config_schema[0] <= SL_CONFIG_MAX_KEYS,
               "raise SL_CONFIG_MAX_KEYS in sl_config_internal.h");

/* The keys of one model.layers entry. */
const entry_t sl_config_layer_keys[] = {
    {.key = "lstm", .type = T_INT, AT_LEAST(1), .doc = "LSTM cell size H"},
    {.key = "projection", .type = T_INT, AT_LEAST(0), .doc = "LSTMP output size P (0 = none)"},
};
const char *const sl_config_layer_key_names[] = {"lstm", "projection", NULL};

/* The keys of one sync.periods rule. */
const entry_t sl_config_rule_keys[] = {
    {.key = "match", .type = T_STR, .nonempty = 1, .doc = "glob on component names"},
    {.key = "period", .type = T_INT, AT_LEAST(1), .doc = "H of the components it matches"},
};
const char *const sl_config_rule_key_names[] = {"match", "period", NULL};

const entry_t *
sl_config_find_entry(const char *path)
{
    for (size_t i = 0; i < sl_config_nkeys; i++)
        if (strcmp(sl_config_schema[i].key, path) == 0)
            return &sl_config_schema[i];
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
int
sl_config_has_child(const char *parent, const char *name, size_t len)
{
    if (len == 0 || memchr(name, '.', len) || memchr(name, '\0', len))
        return 0;
    for (size_t i = 0; i < sl_config_nkeys; i++) {
        const char *k = child_start(&sl_config_schema[i], parent);
        if (k && strncmp(k, name, len) == 0 && (k[len] == '\0' || k[len] == '.'))
            return 1;
    }
    return 0;
}

/* The distinct key names directly below parent, in schema order, NULL-terminated. */
void
sl_config_children(const char *parent, const char **names, size_t *lens, size_t max)
{
    size_t n = 0;

    for (size_t i = 0; i < sl_config_nkeys && n + 1 < max; i++) {
        const char *k = child_start(&sl_config_schema[i], parent);
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
