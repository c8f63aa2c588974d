/* shoal-scale: predict a run's throughput on n = 4 .. 1024 nodes by replaying its sync
 * schedule (tools/sl_scale.h) with a per-step compute time and a link model. A table,
 * or JSON. Errors are one line "shoal-scale: <message>" on stderr; exit 2 for usage and
 * configuration errors, 1 for runtime failures. */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_alloc.h"
#include "common/sl_cli.h"
#include "common/sl_status.h"
#include "config/sl_config.h"
#include "tools/sl_scale.h"
#include "transport/sl_collective.h"
#include "transport/sl_wire.h"
#include "tools/sl_tool_args.h"

enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

#define MAX_COUNTS 64
#define MAX_SETS 64
#define DEFAULT_UNIQUE_FRACTION 0.25
#define DEFAULT_ZIPF 0.64

static const char help_text[] =
    "Usage: shoal-scale --config CONF.yaml (--step-ms T | --tokens-per-s R)\n"
    "                   [--nodes N,N,...] [--bandwidth RATE] [--latency-ms L]\n"
    "                   [--uplink per-link|shared]\n"
    "                   [--overlap TAU] [--steps N] [--vocab V] [--unique-rows R]\n"
    "                   [--zipf-exponent B] [--set KEY=VALUE]... [--json]\n"
    "       shoal-scale --help | --version\n"
    "\n"
    "Predict the throughput of the run CONF.yaml describes on N nodes: a discrete-event\n"
    "replay of its sync schedule (sync.algorithm, the components' periods, the gossip\n"
    "schedule on the k-symmetric ring) in which every node computes steps of T ms and\n"
    "every exchange occupies directed links that send B bytes in B*8/RATE and deliver\n"
    "them L ms later. Prints per N the aggregate tokens/s, the speed-up over one node,\n"
    "the compute utilization (compute time / wall time), bytes sent per node and\n"
    "step (frame headers included), and the wait for sync per step. A model, not a\n"
    "measurement: see shoal-scale(1) for what it assumes.\n"
    "\n"
    "Options:\n"
    "  --config CONF.yaml  the run (model, batch x bptt, sync.*, topology.degree,\n"
    "                      cluster.emulate.*)\n"
    "  --step-ms T         compute time of one step on one node, in ms\n"
    "  --tokens-per-s R    or one node's tokens/s: T = batch * bptt / R\n"
    "  --nodes LIST        node counts, comma-separated, each 1..4096\n"
    "                      (default 4,8,16,32,64,128,256,512,1024)\n"
    "  --bandwidth RATE    each directed link's rate: 10gbit, 1gbit, 100mbit, ... or 0\n"
    "                      for no limit (default cluster.emulate.bandwidth)\n"
    "  --latency-ms L      link latency (default cluster.emulate.latency_ms)\n"
    "  --uplink MODE       per-link (default): each directed link has RATE, as in the\n"
    "                      emulated link; shared: a node's frames to all its peers\n"
    "                      queue on one uplink of RATE (a host's NIC)\n"
    "  --overlap TAU       steps between handing an exchange to the sync worker and\n"
    "                      waiting for it, 0..10000 (default sync.overlap_steps)\n"
    "  --steps N           steps replayed (default 4 x the longest period, at least 64)\n"
    "  --vocab V           vocabulary size with the specials (default data.vocab_size\n"
    "                      + 2 at word level, + 1 at char level; required when\n"
    "                      data.vocab_size is 0)\n"
    "  --unique-rows R     with sync.exchange unique: rows of each embedding a node\n"
    "                      touches between two syncs (default 0.25 V)\n"
    "  --zipf-exponent B   U ~ N^B: the union of m nodes' row sets is R m^B rows\n"
    "                      (default 0.64, the Baidu paper's)\n"
    "  --set KEY=VALUE     override a configuration key, as shoal train does\n"
    "  --json              one JSON object instead of the table\n"
    "  -h, --help          show this help and exit\n"
    "      --version       show the version and exit\n"
    "\n"
    "Examples:\n"
    "  shoal-scale --config conf/brown-4nodes-bmuf.yaml --step-ms 20 --bandwidth 1gbit\n"
    "              --latency-ms 10\n"
    "  shoal-scale --config conf/brown-4nodes-gossip-bmuf.yaml --tokens-per-s 50000\n"
    "              --nodes 16,64 --bandwidth 100mbit --latency-ms 50 --overlap 2 --json\n"
    "\n"
    "Exit status:\n"
    "  0    success\n"
    "  1    runtime error\n"
    "  2    usage or configuration error\n"
    "\n"
    "See shoal-scale(1) for what is modelled and what is not.\n";

typedef struct {
    const char *config;
    const char *sets[MAX_SETS];
    int nsets;
    int counts[MAX_COUNTS];
    int ncounts;
    double step_ms, tokens_per_s, latency_ms, unique_rows, zipf;
    const char *bandwidth;
    int has_latency, has_unique, has_overlap, overlap, vocab, shared_uplink, json, help, version;
    long steps;
} args_t;

#define usage_error(...) sl_tool_usage_error("shoal-scale", __VA_ARGS__)

/* A finite number in [lo, hi]; -1 when fine, else 2 after the message. */
static int
parse_double(const char *opt, const char *v, double lo, double hi, double *out)
{
    char *end;
    double x;

    errno = 0;
    x = strtod(v, &end);
    if (end == v || *end != '\0' || errno == ERANGE || !isfinite(x))
        return usage_error("%s: '%s' is not a number", opt, v);
    if (x < lo || x > hi)
        return usage_error("%s: %g is out of range %g..%g", opt, x, lo, hi);
    *out = x;
    return -1;
}

#define parse_long(...) sl_tool_parse_long("shoal-scale", __VA_ARGS__)

/* "4,8,16" into a->counts. */
static int
parse_nodes(const char *v, args_t *a)
{
    char buf[1024], *save = NULL;
    int ex;

    if (strlen(v) >= sizeof buf)
        return usage_error("--nodes: list too long");
    strcpy(buf, v);
    a->ncounts = 0;
    if (!*v || v[strlen(v) - 1] == ',' || v[0] == ',' || strstr(v, ",,"))
        return usage_error("--nodes: '%s' is not a comma-separated list of node counts", v);
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        long x;

        if (a->ncounts == MAX_COUNTS)
            return usage_error("--nodes: more than %d node counts", MAX_COUNTS);
        if ((ex = parse_long("--nodes", t, 1, 4096, &x)) >= 0)
            return ex;
        a->counts[a->ncounts++] = (int)x;
    }
    return -1;
}

static int
parse_args(int argc, char **argv, args_t *a)
{
    static const int defaults[] = {4, 8, 16, 32, 64, 128, 256, 512, 1024};

    memset(a, 0, sizeof *a);
    a->zipf = DEFAULT_ZIPF;
    for (size_t d = 0; d < sizeof defaults / sizeof *defaults; d++)
        a->counts[a->ncounts++] = defaults[d];
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *v;
        int m = 0, ex = -1;
        long x;

#define OPTION(name) ((v = sl_cli_option_value(argc, argv, &i, (name), &m)) || m)
#define NEEDS(name, what)                                                                          \
    do {                                                                                           \
        if (!v || !*v)                                                                             \
            return usage_error("option '%s' needs %s", (name), (what));                            \
    } while (0)
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            a->help = 1;
            return -1;
        } else if (strcmp(arg, "--version") == 0) {
            a->version = 1;
            return -1;
        } else if (strcmp(arg, "--json") == 0) {
            a->json = 1;
        } else if (OPTION("--config")) {
            NEEDS("--config", "a CONF.yaml");
            a->config = v;
        } else if (OPTION("--set")) {
            NEEDS("--set", "KEY=VALUE");
            if (a->nsets == MAX_SETS)
                return usage_error("more than %d --set options", MAX_SETS);
            a->sets[a->nsets++] = v;
        } else if (OPTION("--nodes")) {
            NEEDS("--nodes", "a list of node counts");
            ex = parse_nodes(v, a);
        } else if (OPTION("--step-ms")) {
            NEEDS("--step-ms", "a time in ms");
            ex = parse_double("--step-ms", v, 1e-6, 1e9, &a->step_ms);
        } else if (OPTION("--tokens-per-s")) {
            NEEDS("--tokens-per-s", "a rate");
            ex = parse_double("--tokens-per-s", v, 1e-6, 1e15, &a->tokens_per_s);
        } else if (OPTION("--bandwidth")) {
            NEEDS("--bandwidth", "a RATE such as 1gbit");
            if (sl_config_bits_per_s(v) < 0)
                return usage_error("--bandwidth: '%s' is not a rate such as 10gbit, 100mbit "
                                   "or 0",
                                   v);
            a->bandwidth = v;
        } else if (OPTION("--uplink")) {
            NEEDS("--uplink", "per-link or shared");
            if (strcmp(v, "shared") == 0)
                a->shared_uplink = 1;
            else if (strcmp(v, "per-link") == 0)
                a->shared_uplink = 0;
            else
                return usage_error("--uplink must be per-link or shared, not '%s'", v);
        } else if (OPTION("--latency-ms")) {
            NEEDS("--latency-ms", "a time in ms");
            ex = parse_double("--latency-ms", v, 0, 1e9, &a->latency_ms);
            a->has_latency = 1;
        } else if (OPTION("--overlap")) {
            NEEDS("--overlap", "a number of steps");
            ex = parse_long("--overlap", v, 0, 10000, &x);
            a->overlap = (int)x;
            a->has_overlap = 1;
        } else if (OPTION("--steps")) {
            NEEDS("--steps", "a number of steps");
            ex = parse_long("--steps", v, 1, 100000000, &a->steps);
        } else if (OPTION("--vocab")) {
            NEEDS("--vocab", "a vocabulary size");
            ex = parse_long("--vocab", v, 2, 2147483647L, &x);
            a->vocab = (int)x;
        } else if (OPTION("--unique-rows")) {
            NEEDS("--unique-rows", "a number of rows");
            ex = parse_double("--unique-rows", v, 0, 1e12, &a->unique_rows);
            a->has_unique = 1;
        } else if (OPTION("--zipf-exponent")) {
            NEEDS("--zipf-exponent", "a number in (0, 1]");
            ex = parse_double("--zipf-exponent", v, 1e-9, 1, &a->zipf);
        } else if (arg[0] == '-') {
            return usage_error("unknown option '%s'", arg);
        } else {
            return usage_error("unexpected argument '%s'", arg);
        }
#undef OPTION
#undef NEEDS
        if (ex >= 0)
            return ex;
    }
    if (!a->config)
        return usage_error("missing --config CONF.yaml");
    if ((a->step_ms > 0) == (a->tokens_per_s > 0))
        return usage_error("give exactly one of --step-ms T and --tokens-per-s R");
    return -1;
}

/* Everything the outputs print. */
typedef struct {
    sl_config_t cfg;
    sl_scale_component_t *comps;
    int ncomps, vocab, overlap;
    size_t nparams;
    double bits_per_s, latency_ms, step_ms, tokens_per_step, unique_rows;
    long steps;
    sl_scale_result_t res[MAX_COUNTS];
} scale_t;

static int
load(const args_t *a, scale_t *s)
{
    sl_config_t *cfg = &s->cfg;
    int longest = 1;

    if (sl_config_load_file(cfg, a->config) != SL_OK)
        goto config_error;
    for (int i = 0; i < a->nsets; i++)
        if (sl_config_set(cfg, a->sets[i]) != SL_OK)
            goto config_error;
    if (sl_config_validate(cfg) != SL_OK)
        goto config_error;
    s->vocab = a->vocab;
    if (!s->vocab && cfg->data.vocab_size == 0)
        return usage_error("%s: data.vocab_size is 0 (every type of the corpus): give --vocab V",
                           a->config);
    if (!s->vocab)
        s->vocab = cfg->data.vocab_size + (cfg->data.level == SL_LEVEL_WORD ? 2 : 1);
    s->unique_rows = a->has_unique ? a->unique_rows : DEFAULT_UNIQUE_FRACTION * s->vocab;
    if (sl_scale_components(cfg, s->vocab, s->unique_rows, &s->comps, &s->ncomps) != SL_OK) {
        fprintf(stderr, "shoal-scale: %s: %s\n", a->config, sl_err_msg());
        return EXIT_USAGE;
    }
    for (int c = 0; c < s->ncomps; c++) {
        s->nparams += s->comps[c].count;
        if (s->comps[c].period > longest)
            longest = s->comps[c].period;
    }
    s->bits_per_s =
        sl_config_bits_per_s(a->bandwidth ? a->bandwidth : cfg->cluster.emulate.bandwidth);
    s->latency_ms = a->has_latency ? a->latency_ms : cfg->cluster.emulate.latency_ms;
    s->overlap = a->has_overlap ? a->overlap : cfg->sync.overlap_steps;
    s->tokens_per_step = (double)cfg->train.batch * cfg->train.bptt;
    s->step_ms = a->step_ms > 0 ? a->step_ms : s->tokens_per_step / a->tokens_per_s * 1000.0;
    s->steps = a->steps > 0 ? a->steps : (4L * longest > 64 ? 4L * longest : 64);
    return -1;

config_error:
    fprintf(stderr, "shoal-scale: %s\n", sl_err_msg());
    return EXIT_USAGE;
}

static int
replay(const args_t *a, scale_t *s)
{
    const sl_config_t *cfg = &s->cfg;

    for (int i = 0; i < a->ncounts; i++) {
        sl_scale_params_t p = {
            .nodes = a->counts[i],
            .degree = cfg->topology.degree,
            .neighbours = cfg->sync.neighbours,
            .algorithm = cfg->sync.algorithm,
            .exchange = cfg->sync.exchange,
            .value_bytes = cfg->sync.compression == SL_COMPRESS_FP32 ? 4 : 2,
            .zipf_exponent = a->zipf,
            .step_ms = s->step_ms,
            .bits_per_s = s->bits_per_s,
            .latency_ms = s->latency_ms,
            .chunk_values = SL_COLLECTIVE_CHUNK_ELEMS,
            .allreduce_chunk_auto = 1,
            .allreduce_ring = cfg->cluster.allreduce == SL_ALLREDUCE_RING,
            .header_bytes = SL_WIRE_HEADER_BYTES,
            .shared_uplink = a->shared_uplink,
            .overlap = s->overlap,
            .steps = s->steps,
            .seed = cfg->run.seed,
            .ncomps = s->ncomps,
            .comps = s->comps,
        };
        sl_status_t st = sl_scale_run(&p, &s->res[i]);

        if (st == SL_ERR_INVALID) {
            fprintf(stderr, "shoal-scale: %s\n", sl_err_msg());
            return EXIT_USAGE;
        }
        if (st != SL_OK) {
            fprintf(stderr, "shoal-scale: %s\n", sl_err_msg());
            return EXIT_RUNTIME;
        }
    }
    return -1;
}

static double
tokens_per_s(const scale_t *s, const sl_scale_result_t *r)
{
    return r->speedup * s->tokens_per_step / (s->step_ms / 1000.0);
}

static void
print_text(FILE *out, const args_t *a, const scale_t *s)
{
    const sl_config_t *cfg = &s->cfg;

    fprintf(out,
            "model: %zu parameters in %d components, vocabulary %d; %s, compression %s, "
            "exchange %s\n",
            s->nparams, s->ncomps, s->vocab, sl_sync_algorithm_name(cfg->sync.algorithm),
            sl_compress_name(cfg->sync.compression), sl_exchange_name(cfg->sync.exchange));
    fprintf(out,
            "step: %.6g ms for %.0f tokens (%.6g tokens/s on one node); %ld steps "
            "replayed, overlap %d\n",
            s->step_ms, s->tokens_per_step, s->tokens_per_step / (s->step_ms / 1000.0), s->steps,
            s->overlap);
    if (s->bits_per_s > 0)
        fprintf(out, "link: %.6g Gbit/s, %.6g ms latency, %s\n", s->bits_per_s / 1e9, s->latency_ms,
                a->shared_uplink ? "one uplink per node" : "per directed link");
    else
        fprintf(out, "link: no bandwidth limit, %.6g ms latency\n", s->latency_ms);
    fprintf(out, "\n%6s %3s %3s %14s %9s %6s %14s %12s\n", "nodes", "k", "q", "tokens/s",
            "speed-up", "util", "MB/node/step", "wait ms/step");
    for (int i = 0; i < a->ncounts; i++) {
        const sl_scale_result_t *r = &s->res[i];

        fprintf(out, "%6d %3d %3d %14.0f %9.2f %6.3f %14.3f %12.3f\n", r->nodes, r->degree,
                r->picks, tokens_per_s(s, r), r->speedup, r->utilization,
                r->bytes_per_node_step / 1e6, r->wait_ms_per_step);
    }
}

static void
print_json(FILE *out, const args_t *a, const scale_t *s)
{
    const sl_config_t *cfg = &s->cfg;

    fprintf(out,
            "{\"algorithm\": \"%s\", \"parameters\": %zu, \"components\": %d, \"vocab\": %d, "
            "\"compression\": \"%s\", \"exchange\": \"%s\", \"unique_rows\": %.17g,\n"
            " \"step_ms\": %.17g, \"tokens_per_step\": %.17g, \"bits_per_s\": %.17g, "
            "\"latency_ms\": %.17g, \"uplink\": \"%s\", \"overlap\": %d, \"steps\": %ld,\n"
            " \"predictions\": [",
            sl_sync_algorithm_name(cfg->sync.algorithm), s->nparams, s->ncomps, s->vocab,
            sl_compress_name(cfg->sync.compression), sl_exchange_name(cfg->sync.exchange),
            s->unique_rows, s->step_ms, s->tokens_per_step, s->bits_per_s, s->latency_ms,
            a->shared_uplink ? "shared" : "per-link", s->overlap, s->steps);
    for (int i = 0; i < a->ncounts; i++) {
        const sl_scale_result_t *r = &s->res[i];

        fprintf(out,
                "%s\n  {\"nodes\": %d, \"degree\": %d, \"neighbours\": %d, \"tokens_per_s\": "
                "%.17g, \"speedup\": %.17g, \"utilization\": %.17g, \"bytes_per_node_step\": "
                "%.17g, \"wait_ms_per_step\": %.17g, \"wall_ms\": %.17g}",
                i ? "," : "", r->nodes, r->degree, r->picks, tokens_per_s(s, r), r->speedup,
                r->utilization, r->bytes_per_node_step, r->wait_ms_per_step, r->wall_ms);
    }
    fputs("]}\n", out);
}

int
main(int argc, char **argv)
{
    args_t a;
    scale_t s;
    int ex;

    memset(&s, 0, sizeof s);
    ex = parse_args(argc, argv, &a);
    if (ex >= 0)
        return ex;
    if (a.help) {
        fputs(help_text, stdout);
        return EXIT_OK;
    }
    if (a.version) {
        printf("shoal-scale (shoal) %s\n", PACKAGE_VERSION);
        return EXIT_OK;
    }
    sl_config_init(&s.cfg);
    if ((ex = load(&a, &s)) < 0 && (ex = replay(&a, &s)) < 0) {
        if (a.json)
            print_json(stdout, &a, &s);
        else
            print_text(stdout, &a, &s);
        ex = EXIT_OK;
        if (fflush(stdout) != 0 || ferror(stdout)) {
            fprintf(stderr, "shoal-scale: writing the output: %s\n", strerror(errno));
            ex = EXIT_RUNTIME;
        }
    }
    sl_free(s.comps);
    sl_config_fini(&s.cfg);
    return ex;
}
