/* shoal-topo: inspect a gossip topology (the k-symmetric ring, one round's push/pull
 * schedule, degree balance, the mixing matrix's spectral gap) as text, JSON or
 * Graphviz DOT, and render it to PNG with `dot`. Errors are one line
 * "shoal-topo: <message>" on stderr; exit 2 for usage, 1 for runtime failures. */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_cli.h"
#include "common/sl_status.h"
#include "common/sl_tool_pipe.h"
#include "config/sl_config.h"
#include "topology/sl_mixing.h"
#include "topology/sl_ring.h"
#include "topology/sl_schedule.h"
#include "tools/sl_tool_args.h"

enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

/* n x links x rounds walk steps above this are refused: about ten seconds of work */
#define MAX_WORK 2e9

static const char help_text[] =
    "Usage: shoal-topo --nodes N [--degree K] [--neighbours Q | --local] [--seed S]\n"
    "                  [--round R] [--component C] [--rounds R_STATS]\n"
    "                  [--config CONF.yaml] [--format text|json|dot] [--png FILE]\n"
    "       shoal-topo --help | --version\n"
    "\n"
    "Show the gossip topology of N nodes: each node's neighbours on the k-symmetric\n"
    "ring (i-K..i-1 and i+1..i+K mod N), which Q neighbours every node pulls from at\n"
    "round R of component C and so whom it pushes its snapshot to, how evenly the\n"
    "pushes spread over R_STATS rounds, and how fast gossip averaging reaches\n"
    "consensus: the spectral gap 1 - |lambda_2| of the expected mixing matrix and the\n"
    "rounds needed to shrink the disagreement between nodes 10x,\n"
    "ceil(ln 10 / -ln |lambda_2|).\n"
    "\n"
    "Options:\n"
    "  --nodes N          number of nodes, 1..1048576 (default cluster.nodes of\n"
    "                     --config; required without it)\n"
    "  --degree K         symmetric degree of the ring (default topology.degree of\n"
    "                     --config when not 0, else max(1, floor(log2 N) - 1), the\n"
    "                     gossip-BMUF paper's p = log2(n) - 1)\n"
    "  --neighbours Q     neighbours each node averages with per round (default 1);\n"
    "                     capped at the node's links, min(2K, N-1)\n"
    "  --local            every neighbour, Q = 2K (local-MA / local-BMUF)\n"
    "  --seed S           run seed the schedule is drawn from (default run.seed of\n"
    "                     --config, else 1234)\n"
    "  --round R          round whose schedule is shown; the balance counts from it\n"
    "                     (default 0)\n"
    "  --component C      model component (default 0)\n"
    "  --rounds R_STATS   rounds the degree balance covers (default 1000)\n"
    "  --config CONF.yaml take the defaults of --nodes, --degree and --seed from a run\n"
    "                     configuration (cluster.nodes, topology.degree, run.seed)\n"
    "  --format FORMAT    text (default), json, or dot (Graphviz: ring links grey,\n"
    "                     the round's pushes as blue arrows)\n"
    "  --png FILE         also render the DOT graph to FILE with Graphviz 'dot'\n"
    "  -h, --help         show this help and exit\n"
    "      --version      show the version and exit\n"
    "\n"
    "The spectral gap is computed for N <= 1024 (Jacobi rotations, O(N^3): about half\n"
    "a minute for N = 1024).\n"
    "\n"
    "Examples:\n"
    "  shoal-topo --nodes 8\n"
    "  shoal-topo --nodes 16 --degree 3 --neighbours 2 --round 7 --format json\n"
    "  shoal-topo --nodes 8 --local --png ring8.png\n"
    "  shoal-topo --config conf/brown-4nodes.yaml\n"
    "\n"
    "Exit status:\n"
    "  0    success\n"
    "  1    runtime error (output, Graphviz missing or failing)\n"
    "  2    usage or configuration error\n"
    "\n"
    "See shoal-topo(1) for details.\n";

typedef enum { FORMAT_TEXT, FORMAT_JSON, FORMAT_DOT } format_t;

typedef struct {
    int nodes, degree, neighbours, local, component, rounds;
    uint64_t seed, round;
    int has_nodes, has_degree, has_neighbours, has_seed;
    format_t format;
    const char *png;
    const char *config;
    int help, version;
} args_t;

/* Everything the outputs print, computed once. */
typedef struct {
    sl_schedule_t s;
    sl_schedule_stats_t stats;
    sl_mixing_t mix;
    int has_mix;
    uint64_t round;
    int component;
    int *buf; /* (links + 1) one list at a time */
} topo_t;

/* "shoal-topo: --nodes: 'x' is not an integer (see shoal-topo --help)"; returns 2. */
#define usage_error(...) sl_tool_usage_error("shoal-topo", __VA_ARGS__)

/* A whole decimal integer in [lo, hi]; returns -1 when fine, else prints and returns 2. */
static int
parse_int(const char *opt, const char *v, long lo, long hi, int *out)
{
    long x;
    int ex = sl_tool_parse_long("shoal-topo", opt, v, lo, hi, &x);

    if (ex < 0)
        *out = (int)x;
    return ex;
}

static int
parse_u64(const char *opt, const char *v, uint64_t *out)
{
    char *end;
    unsigned long long x;

    errno = 0;
    x = strtoull(v, &end, 10);
    if (end == v || *end != '\0' || errno == ERANGE || strchr(v, '-'))
        return usage_error("%s: '%s' is not an unsigned 64-bit integer", opt, v);
    *out = (uint64_t)x;
    return -1;
}

/* Parses argv; returns -1 when fine, else the exit status (the error already printed).
 * Numeric ranges that the library checks (nodes, degree, neighbours) are left to it,
 * so there is one message for each. */
static int
parse_args(int argc, char **argv, args_t *a)
{
    static const char *const int_opts[] = {"--nodes",     "--degree", "--neighbours",
                                           "--component", "--rounds", NULL};

    memset(a, 0, sizeof *a);
    a->seed = 1234;
    a->rounds = 1000;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *v;
        int m = 0, ex = -1, done = 0;

        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            a->help = 1;
            return -1;
        }
        if (strcmp(arg, "--version") == 0) {
            a->version = 1;
            return -1;
        }
        if (strcmp(arg, "--local") == 0) {
            a->local = 1;
            continue;
        }
        for (int o = 0; int_opts[o] && !done; o++) {
            if (!(v = sl_cli_option_value(argc, argv, &i, int_opts[o], &m)) && !m)
                continue;
            done = 1;
            if (!v)
                return usage_error("option '%s' needs a number", int_opts[o]);
            switch (o) {
            case 0:
                ex = parse_int("--nodes", v, -2147483647L, 2147483647L, &a->nodes);
                a->has_nodes = 1;
                break;
            case 1:
                ex = parse_int("--degree", v, -2147483647L, 2147483647L, &a->degree);
                a->has_degree = 1;
                break;
            case 2:
                ex = parse_int("--neighbours", v, -2147483647L, 2147483647L, &a->neighbours);
                a->has_neighbours = 1;
                break;
            case 3:
                ex = parse_int("--component", v, 0, 2147483647L, &a->component);
                break;
            default:
                ex = parse_int("--rounds", v, 1, 2147483647L, &a->rounds);
                break;
            }
        }
        if (done) {
            if (ex >= 0)
                return ex;
            continue;
        }
        if ((v = sl_cli_option_value(argc, argv, &i, "--seed", &m)) || m) {
            if (!v)
                return usage_error("option '--seed' needs a number");
            if ((ex = parse_u64("--seed", v, &a->seed)) >= 0)
                return ex;
            a->has_seed = 1;
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--round", &m)) || m) {
            if (!v)
                return usage_error("option '--round' needs a number");
            if ((ex = parse_u64("--round", v, &a->round)) >= 0)
                return ex;
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--format", &m)) || m) {
            if (!v)
                return usage_error("option '--format' needs text, json or dot");
            if (strcmp(v, "text") == 0)
                a->format = FORMAT_TEXT;
            else if (strcmp(v, "json") == 0)
                a->format = FORMAT_JSON;
            else if (strcmp(v, "dot") == 0)
                a->format = FORMAT_DOT;
            else
                return usage_error("--format must be text, json or dot, not '%s'", v);
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--png", &m)) || m) {
            if (!v || !*v)
                return usage_error("option '--png' needs a FILE");
            a->png = v;
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--config", &m)) || m) {
            if (!v || !*v)
                return usage_error("option '--config' needs a CONF.yaml");
            a->config = v;
        } else if (arg[0] == '-') {
            return usage_error("unknown option '%s'", arg);
        } else {
            return usage_error("unexpected argument '%s'", arg);
        }
    }
    if (a->local && a->has_neighbours)
        return usage_error("--local and --neighbours exclude each other");
    if (!a->has_nodes && !a->config)
        return usage_error("missing --nodes N (or --config CONF.yaml)");
    return -1;
}

/* cluster.nodes, topology.degree (unless 0, "the default for n") and run.seed from the
 * configuration, for the flags not given. sync.neighbours will join them when the
 * schema has it. */
static int
apply_config(args_t *a)
{
    sl_config_t cfg;

    if (!a->config)
        return -1;
    sl_config_init(&cfg);
    if (sl_config_load_file(&cfg, a->config) != SL_OK) {
        fprintf(stderr, "shoal-topo: %s\n", sl_err_msg());
        sl_config_fini(&cfg);
        return EXIT_USAGE;
    }
    if (!a->has_seed)
        a->seed = cfg.run.seed;
    if (!a->has_nodes && cfg.cluster.nodes == SL_CONFIG_AUTO_INT) {
        sl_config_fini(&cfg);
        return usage_error("%s: cluster.nodes is auto (the launcher's): give --nodes N", a->config);
    }
    if (!a->has_nodes) {
        a->nodes = cfg.cluster.nodes;
        a->has_nodes = 1;
    }
    if (!a->has_degree && cfg.topology.degree > 0) {
        a->degree = cfg.topology.degree;
        a->has_degree = 1;
    }
    sl_config_fini(&cfg);
    return -1;
}

static int
compute(const args_t *a, topo_t *t)
{
    int k = a->has_degree ? a->degree : sl_ring_default_degree(a->nodes);
    int q = a->has_neighbours ? a->neighbours : 1;
    sl_status_t rc;

    memset(t, 0, sizeof *t);
    if (a->local && k >= 1)
        q = k > 1073741823 ? 2147483647 : 2 * k;
    if (sl_schedule_init(&t->s, a->nodes, k, q, a->seed) != SL_OK) {
        fprintf(stderr, "shoal-topo: %s\n", sl_err_msg());
        return EXIT_USAGE;
    }
    if ((double)t->s.nodes * (t->s.links + 1) * a->rounds > MAX_WORK)
        return usage_error("%d nodes x %d links x %d rounds is too much work; lower --rounds",
                           t->s.nodes, t->s.links, a->rounds);
    t->round = a->round;
    t->component = a->component;
    t->buf = malloc(((size_t)t->s.links + 1) * sizeof *t->buf);
    if (!t->buf) {
        fprintf(stderr, "shoal-topo: out of memory\n");
        return EXIT_RUNTIME;
    }
    rc = sl_schedule_stats(&t->s, a->component, a->round, a->rounds, &t->stats);
    if (rc == SL_OK && t->s.nodes <= SL_MIXING_MAX_NODES) {
        rc = sl_mixing_analyse(&t->s, &t->mix);
        t->has_mix = rc == SL_OK;
    }
    if (rc != SL_OK) {
        fprintf(stderr, "shoal-topo: %s\n", sl_err_msg());
        return EXIT_RUNTIME;
    }
    return -1;
}

/* One of node i's lists into t->buf (arguments were checked by compute()). */
enum { LIST_NEIGHBOURS, LIST_CHOSEN, LIST_PULLERS };

static int
list(topo_t *t, int which, int i)
{
    int count = 0;
    sl_status_t rc;

    if (which == LIST_NEIGHBOURS)
        rc = sl_ring_neighbours(t->s.nodes, t->s.degree, i, t->buf, t->s.links + 1, &count);
    else if (which == LIST_CHOSEN)
        rc = sl_schedule_chosen(&t->s, t->round, t->component, i, t->buf, t->s.links + 1, &count);
    else
        rc = sl_schedule_pullers(&t->s, t->round, t->component, i, t->buf, t->s.links + 1, &count);
    SL_ASSERT(rc == SL_OK);
    return count;
}

/* "1 2 6 7", "(none)" when empty; sep between items; JSON arrays use ", ". */
static void
print_list(FILE *out, const int *v, int count, const char *sep, const char *empty)
{
    if (count == 0)
        fputs(empty, out);
    for (int m = 0; m < count; m++)
        fprintf(out, "%s%d", m ? sep : "", v[m]);
}

static double
self_weight(const topo_t *t)
{
    return 1.0 / (t->s.picks + 1);
}

static double
neighbour_weight(const topo_t *t)
{
    return t->s.links ? (double)t->s.picks / t->s.links / (t->s.picks + 1) : 0.0;
}

static void
print_text(FILE *out, topo_t *t)
{
    const sl_schedule_t *s = &t->s;
    const sl_schedule_stats_t *st = &t->stats;

    fprintf(out,
            "topology: %d node%s, %d-symmetric ring (%d link%s per node), q = %d "
            "(pulls from %d per round), seed %" PRIu64 "\n",
            s->nodes, s->nodes == 1 ? "" : "s", s->degree, s->links, s->links == 1 ? "" : "s",
            s->neighbours, s->picks, s->seed);
    if (s->degree == 1)
        fprintf(out, "\nneighbours (i-1 and i+1 mod %d", s->nodes);
    else
        fprintf(out, "\nneighbours (i-%d..i-1 and i+1..i+%d mod %d", s->degree, s->degree,
                s->nodes);
    fputs(s->links == s->nodes - 1 && s->nodes > 1 ? ": every other node):\n" : "):\n", out);
    for (int i = 0; i < s->nodes; i++) {
        int c = list(t, LIST_NEIGHBOURS, i);

        fprintf(out, "  node %d: ", i);
        print_list(out, t->buf, c, " ", "(none)");
        fputc('\n', out);
    }
    fprintf(out,
            "\nschedule of round %" PRIu64 ", component %d (node pulls from the nodes it chose,\n"
            "pushes its snapshot to the nodes that chose it):\n",
            t->round, t->component);
    for (int i = 0; i < s->nodes; i++) {
        int c = list(t, LIST_CHOSEN, i);

        fprintf(out, "  node %d: pulls from ", i);
        print_list(out, t->buf, c, " ", "(none)");
        c = list(t, LIST_PULLERS, i);
        fputs("; pushes to ", out);
        print_list(out, t->buf, c, " ", "(none)");
        fputc('\n', out);
    }
    fprintf(out, "\ndegree balance over rounds %" PRIu64 "..%" PRIu64 " of component %d:\n",
            t->round, t->round + (uint64_t)st->rounds - 1, t->component);
    fprintf(out, "  pulls per node and round (out-degree): %d\n", st->out_degree);
    fprintf(out, "  pullers per node and round (in-degree): min %d, mean %.3f, max %d\n",
            st->in_min, st->in_mean, st->in_max);
    fprintf(out, "  pushes per node over the %d rounds: min %ld, mean %.1f, max %ld\n", st->rounds,
            st->total_min, st->total_mean, st->total_max);
    fprintf(out, "\nmixing (expected W: W_ii = 1/(%d+1) = %.6g", s->picks, self_weight(t));
    if (s->links)
        fprintf(out, ", W_ij = %d/%d * 1/(%d+1) = %.6g per neighbour", s->picks, s->links, s->picks,
                neighbour_weight(t));
    fputs("):\n", out);
    if (!t->has_mix) {
        fprintf(out, "  not computed: more than %d nodes\n", SL_MIXING_MAX_NODES);
        return;
    }
    fprintf(out, "  second-largest eigenvalue modulus |lambda_2| = %.9f\n", t->mix.lambda2);
    fprintf(out, "  spectral gap 1 - |lambda_2| = %.9f\n", t->mix.gap);
    fprintf(out, "  rounds to shrink disagreement 10x, ceil(ln 10 / -ln |lambda_2|): %d\n",
            t->mix.rounds_10x);
}

static void
print_json(FILE *out, topo_t *t)
{
    const sl_schedule_t *s = &t->s;
    const sl_schedule_stats_t *st = &t->stats;

    fprintf(out,
            "{\"nodes\": %d, \"degree\": %d, \"neighbours\": %d, \"links\": %d, "
            "\"pulls_per_round\": %d, \"seed\": %" PRIu64 ",\n \"neighbour_lists\": [",
            s->nodes, s->degree, s->neighbours, s->links, s->picks, s->seed);
    for (int i = 0; i < s->nodes; i++) {
        int c = list(t, LIST_NEIGHBOURS, i);

        fputs(i ? ", [" : "[", out);
        print_list(out, t->buf, c, ", ", "");
        fputc(']', out);
    }
    fprintf(out, "],\n \"schedule\": {\"round\": %" PRIu64 ", \"component\": %d, \"nodes\": [",
            t->round, t->component);
    for (int i = 0; i < s->nodes; i++) {
        int c = list(t, LIST_CHOSEN, i);

        fprintf(out, "%s\n  {\"node\": %d, \"pulls_from\": [", i ? "," : "", i);
        print_list(out, t->buf, c, ", ", "");
        c = list(t, LIST_PULLERS, i);
        fputs("], \"pushes_to\": [", out);
        print_list(out, t->buf, c, ", ", "");
        fputs("]}", out);
    }
    fprintf(out,
            "]},\n \"balance\": {\"first_round\": %" PRIu64 ", \"rounds\": %d, \"out_degree\": %d, "
            "\"in_min\": %d, \"in_mean\": %.17g, \"in_max\": %d, \"pushes_min\": %ld, "
            "\"pushes_mean\": %.17g, \"pushes_max\": %ld},\n \"mixing\": ",
            t->round, st->rounds, st->out_degree, st->in_min, st->in_mean, st->in_max,
            st->total_min, st->total_mean, st->total_max);
    if (t->has_mix)
        fprintf(out,
                "{\"self_weight\": %.17g, \"neighbour_weight\": %.17g, \"lambda2\": %.17g, "
                "\"spectral_gap\": %.17g, \"rounds_10x\": %d}}\n",
                self_weight(t), neighbour_weight(t), t->mix.lambda2, t->mix.gap, t->mix.rounds_10x);
    else
        fputs("null}\n", out);
}

/* Ring links undirected and grey; this round's snapshot pushes as blue arrows
 * j -> i (i pulls from j). Every node is pinned on a circle in ring order, clockwise
 * from the top (neato keeps pinned positions; circo would reorder the nodes to shorten
 * the gossip arrows, and the ring would no longer read as one). */
static void
print_dot(FILE *out, topo_t *t)
{
    const sl_schedule_t *s = &t->s;

    fprintf(out, "digraph shoal_topology {\n");
    fprintf(out,
            "    label = \"%d nodes, %d-symmetric ring, q = %d, seed %" PRIu64
            ": pushes of round %" PRIu64 ", component %d\";\n",
            s->nodes, s->degree, s->neighbours, s->seed, t->round, t->component);
    fprintf(out, "    layout = neato;\n    node [shape = circle];\n");
    for (int i = 0; i < s->nodes; i++) {
        /* neato reads pos in inches: about 1.25 in between neighbours */
        double radius = s->nodes < 6 ? 1.25 : 0.2 * s->nodes, a = 2 * M_PI * i / s->nodes;
        fprintf(out, "    %d [pos = \"%.3f,%.3f!\"];\n", i, radius * sin(a) + 0.0,
                radius * cos(a) + 0.0); /* + 0.0: no "-0.0" */
    }
    fprintf(out, "    edge [dir = none, color = gray70];\n");
    for (int i = 0; i < s->nodes; i++) {
        int c = list(t, LIST_NEIGHBOURS, i);

        for (int m = 0; m < c; m++)
            if (t->buf[m] > i)
                fprintf(out, "    %d -> %d;\n", i, t->buf[m]);
    }
    fprintf(out, "    edge [dir = forward, color = blue];\n");
    for (int i = 0; i < s->nodes; i++) {
        int c = list(t, LIST_CHOSEN, i);

        for (int m = 0; m < c; m++)
            fprintf(out, "    %d -> %d;\n", t->buf[m], i);
    }
    fprintf(out, "}\n");
}

static void
write_dot(FILE *to, void *ctx)
{
    print_dot(to, ctx);
}

/* Pipes the DOT graph into `dot -Tpng`, its output into png. */
static int
render_png(topo_t *t, const char *png)
{
    if (!sl_tool_on_path("dot")) {
        fprintf(stderr,
                "shoal-topo: Graphviz 'dot' is not on PATH: install graphviz to "
                "write %s, or use --format dot\n",
                png);
        return EXIT_RUNTIME;
    }
    static const char *const argv[] = {"dot", "-Tpng", NULL};
    return sl_tool_pipe("shoal-topo", argv, png, write_dot, t) == 0 ? EXIT_OK : EXIT_RUNTIME;
}

int
main(int argc, char **argv)
{
    args_t a;
    topo_t t;
    int ex;

    memset(&t, 0, sizeof t);
    ex = parse_args(argc, argv, &a);
    if (ex >= 0)
        return ex;
    if (a.help) {
        fputs(help_text, stdout);
        return EXIT_OK;
    }
    if (a.version) {
        printf("shoal-topo (shoal) %s\n", PACKAGE_VERSION);
        return EXIT_OK;
    }
    if ((ex = apply_config(&a)) >= 0 || (ex = compute(&a, &t)) >= 0) {
        free(t.buf);
        return ex;
    }
    if (a.format == FORMAT_JSON)
        print_json(stdout, &t);
    else if (a.format == FORMAT_DOT)
        print_dot(stdout, &t);
    else
        print_text(stdout, &t);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "shoal-topo: writing the output: %s\n", strerror(errno));
        ex = EXIT_RUNTIME;
    } else {
        ex = a.png ? render_png(&t, a.png) : EXIT_OK;
    }
    free(t.buf);
    return ex;
}
