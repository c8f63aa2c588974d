/* libFuzzer target: what a batch launcher hands shoal node, from outside: Slurm's
 * compressed host lists (sl_hostlist.h) and the launchers' environment variables
 * (sl_launcher_env.h). No variable of the process's environment is read or set: the
 * parsers take the input's environment as an argument, and for sl_launcher_local_rank,
 * which reads environ, environ points at it for the call.
 *
 * The input's byte 0 chooses:
 *   bit 0     0: a host list, 1: an environment
 *   bits 1-3  the host buffer's size: 1, 2, 4, 8, 16, 32, 64 or 256 bytes
 *   bits 4-5  the index asked besides every host's: -1, LONG_MAX, LONG_MIN, none
 * A host list is the rest of the input (cut at a NUL). An environment is the rest cut
 * into lines at '\n': a line's first byte names a variable of the table below (% its
 * size; the last entry takes the line's rest as it is, "NAME=VALUE" or not) and the rest
 * is its value.
 *
 * A host list is expanded by a reference expander written here, from sl_hostlist.h's
 * description (items split at commas outside brackets, ranges N or N-M padded to the
 * width of N, several brackets a product with the first varying slowest), and
 * sl_hostlist_host must agree: the same count, each host the same bytes (the first
 * MAX_CHECKED hosts, then the last), an error for an index beyond the end, for a host
 * longer than the buffer's size - 1 and for every list the reference refuses. An
 * environment's launcher, rank, size and local rank must be those of a reference
 * reading of sl_launcher_env.h's table; its rendezvous host non-empty and within the
 * buffer, MASTER_ADDR's or the first host of the Slurm list; its port a port; the local
 * rank for the GPU choice (sl_launcher_local_rank, environ pointed at the input's
 * environment for the call) that of the first row whose rank is this node's. Every
 * error is one line of printable text starting with the name of what was wrong; a
 * broken promise prints what broke and aborts. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_status.h"
#include "node/sl_hostlist.h"
#include "node/sl_launcher_env.h"

#define WHAT "SLURM_JOB_NODELIST"
#define MAX_CHECKED 2000    /* hosts compared one by one */
#define MAX_EXPANDED 4096   /* hosts the reference writes out */
#define REF_MAX_BRACKETS 16 /* sl_hostlist.c's limit per host name */
#define MAX_LINES 24

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

extern char **environ;

static const size_t buffer_sizes[] = {1, 2, 4, 8, 16, 32, 64, 256};

static void
broken(const char *what, const char *input)
{
    fprintf(stderr, "fuzz_hostlist: %s (input \"%s\", message \"%s\")\n", what, input,
            sl_err_msg());
    abort();
}

/* The message of a refusal: one non-empty line of printable ASCII starting with name
 * and then ' ' or ':'. */
static void
check_message(const char *name, const char *input)
{
    const char *m = sl_err_msg();
    size_t n = strlen(name);

    for (const char *c = m; *c; c++)
        if (*c < 0x20 || *c > 0x7e)
            broken("a message that is not one line of printable text", input);
    if (strncmp(m, name, n) != 0 || (m[n] != ' ' && m[n] != ':'))
        broken("a message that does not start with the variable's name", input);
}

/* --- the reference expander ------------------------------------------------------- */

typedef struct {
    long *lo, *hi; /* a bracket's ranges, nr of them, in the item's arrays */
    int *width, nr;
    long count;
} ref_bracket_t;

typedef struct {
    char **hosts; /* the first MAX_EXPANDED hosts */
    long count, kept;
} ref_list_t;

/* Digits at s (1 to 9 of them) into *v and *w; the bytes read, or 0. */
static size_t
ref_number(const char *s, long *v, int *w)
{
    size_t n = 0;

    *v = 0;
    while (s[n] >= '0' && s[n] <= '9') {
        if (n == 9)
            return 0;
        *v = *v * 10 + (s[n] - '0');
        n++;
    }
    *w = (int)n;
    return n;
}

/* The bracket whose content starts at s and ends before e (the ']'): 0, or -1. Its
 * arrays hold (e - s + 1) / 2 ranges or more. */
static int
ref_bracket(const char *s, const char *e, ref_bracket_t *b)
{
    b->nr = 0;
    b->count = 0;
    while (s < e) {
        long lo, hi;
        int w, w2;
        size_t n = ref_number(s, &lo, &w);

        if (!n)
            return -1;
        s += n;
        hi = lo;
        if (s < e && *s == '-') {
            s++;
            if (!(n = ref_number(s, &hi, &w2)) || hi < lo)
                return -1;
            s += n;
        }
        if (s < e && *s++ != ',')
            return -1;
        if (s == e && s[-1] == ',')
            return -1; /* "[1,]" */
        b->count += hi - lo + 1;
        if (b->count > SL_HOSTLIST_MAX_HOSTS)
            return -1;
        b->lo[b->nr] = lo;
        b->hi[b->nr] = hi;
        b->width[b->nr++] = w;
    }
    return b->count > 0 ? 0 : -1;
}

static int
name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == '_';
}

static void
ref_add(ref_list_t *r, const char *host, size_t len)
{
    if (r->kept < MAX_EXPANDED) {
        char *h = malloc(len + 1);
        if (!h)
            broken("out of memory", "");
        memcpy(h, host, len);
        h[len] = '\0';
        r->hosts[r->kept++] = h;
    }
}

/* The hosts of one item (s, len bytes) appended to r; 0, or -1 when it is none. Every
 * host of the item is written out by an odometer over its brackets, the last one
 * turning fastest, until the reference holds MAX_EXPANDED hosts. */
static int
ref_item(const char *s, size_t len, ref_list_t *r)
{
    ref_bracket_t br[REF_MAX_BRACKETS];
    const char *text[REF_MAX_BRACKETS + 1];
    size_t tlen[REF_MAX_BRACKETS + 1];
    long pos[REF_MAX_BRACKETS], n = 1;
    int nb = 0, ok = -1;
    const char *t = s, *end = s + len;
    /* a range takes 2 bytes or more: len / 2 + 1 ranges in all */
    long *lo = malloc((len / 2 + 1) * sizeof *lo), *hi = malloc((len / 2 + 1) * sizeof *hi);
    int *width = malloc((len / 2 + 1) * sizeof *width), used_ranges = 0;
    char *host = malloc(len + 1); /* a host is no longer than its item */

    if (!lo || !hi || !width || !host)
        broken("out of memory", "");
    if (len == 0)
        goto out;
    for (const char *p = s; p < end; p++) {
        if (*p == '[') {
            const char *q = memchr(p, ']', (size_t)(end - p));
            if (!q || nb == REF_MAX_BRACKETS || memchr(p + 1, '[', (size_t)(q - p - 1)))
                goto out;
            text[nb] = t;
            tlen[nb] = (size_t)(p - t);
            br[nb].lo = lo + used_ranges;
            br[nb].hi = hi + used_ranges;
            br[nb].width = width + used_ranges;
            if (ref_bracket(p + 1, q, &br[nb]) < 0)
                goto out;
            used_ranges += br[nb].nr;
            n *= br[nb].count;
            if (n > SL_HOSTLIST_MAX_HOSTS)
                goto out;
            nb++;
            p = q;
            t = q + 1;
        } else if (!name_char(*p)) {
            goto out;
        }
    }
    text[nb] = t;
    tlen[nb] = (size_t)(end - t);
    r->count += n;
    if (r->count > SL_HOSTLIST_MAX_HOSTS)
        goto out;
    for (int b = 0; b < nb; b++)
        pos[b] = 0;
    for (long k = 0; k < n && r->kept < MAX_EXPANDED; k++) {
        size_t used = 0;

        for (int b = 0; b < nb; b++) {
            long left = pos[b];
            int i = 0;
            memcpy(host + used, text[b], tlen[b]);
            used += tlen[b];
            while (left > br[b].hi[i] - br[b].lo[i]) {
                left -= br[b].hi[i] - br[b].lo[i] + 1;
                i++;
            }
            used += (size_t)snprintf(host + used, len + 1 - used, "%0*ld", br[b].width[i],
                                     br[b].lo[i] + left);
        }
        memcpy(host + used, text[nb], tlen[nb]);
        used += tlen[nb];
        ref_add(r, host, used);
        for (int b = nb - 1; b >= 0; b--) { /* the odometer */
            if (++pos[b] < br[b].count)
                break;
            pos[b] = 0;
        }
    }
    ok = 0;
out:
    free(lo);
    free(hi);
    free(width);
    free(host);
    return ok;
}

/* list expanded into r (r->count hosts, the first r->kept written); 0, or -1 when it
 * is not a host list. */
static int
ref_expand(const char *list, ref_list_t *r)
{
    const char *s = list;

    r->count = r->kept = 0;
    if (!*list)
        return -1;
    for (;;) {
        const char *p = s;
        int in = 0;

        for (; *p && (*p != ',' || in); p++) {
            if (*p == '[' && in++)
                return -1;
            if (*p == ']' && !in--)
                return -1;
        }
        if (in || ref_item(s, (size_t)(p - s), r) < 0)
            return -1;
        if (!*p)
            return 0;
        s = p + 1;
    }
}

static void
ref_free(ref_list_t *r)
{
    for (long i = 0; i < r->kept; i++)
        free(r->hosts[i]);
}

/* --- host lists --------------------------------------------------------------------- */

/* Host index of list into a buffer of exactly size bytes: an error where want is NULL
 * (no such host) or longer than size - 1, else want. */
static void
check_host(const char *list, long index, const char *want, size_t size)
{
    char *host = malloc(size);
    long count = -1;
    sl_status_t st;

    if (!host)
        broken("out of memory", list);
    st = sl_hostlist_host(list, WHAT, index, host, size, &count);
    if (!want || strlen(want) >= size) {
        if (st == SL_OK)
            broken(want ? "a host longer than its buffer taken" : "a host beyond the list", list);
        check_message(WHAT, list);
    } else if (st != SL_OK) {
        broken("a host of the list refused", list);
    } else if (strcmp(host, want) != 0) {
        fprintf(stderr, "fuzz_hostlist: host %ld is \"%s\", not \"%s\"\n", index, host, want);
        broken("a host unlike the reference's", list);
    }
    free(host);
}

static void
fuzz_list(const char *list, size_t size, int extra)
{
    static char *hosts[MAX_EXPANDED];
    static const long extras[] = {-1, LONG_MAX, LONG_MIN};
    ref_list_t r = {hosts, 0, 0};
    int valid = ref_expand(list, &r) == 0;
    long count = -1;
    sl_status_t st = sl_hostlist_host(list, WHAT, 0, NULL, 0, &count);

    if (!valid) {
        if (st == SL_OK)
            broken("a list the reference refuses taken", list);
        check_message(WHAT, list);
        check_host(list, 0, NULL, size);
        ref_free(&r);
        return;
    }
    if (st != SL_OK)
        broken("a list the reference takes refused", list);
    if (count != r.count) {
        fprintf(stderr, "fuzz_hostlist: %ld hosts, not %ld\n", count, r.count);
        broken("a count unlike the reference's", list);
    }
    for (long i = 0; i < r.kept && i < MAX_CHECKED; i++)
        check_host(list, i, r.hosts[i], size);
    if (r.kept == r.count && r.count > MAX_CHECKED)
        check_host(list, r.count - 1, r.hosts[r.count - 1], size);
    check_host(list, r.count, NULL, size);
    if (extra < 3)
        check_host(list, extras[extra], NULL, size);
    ref_free(&r);
}

/* --- environments ------------------------------------------------------------------- */

/* The variables an input's line can set; NULL: the line as it is. */
static const char *const names[] = {"RANK",
                                    "WORLD_SIZE",
                                    "LOCAL_RANK",
                                    "MASTER_ADDR",
                                    "MASTER_PORT",
                                    "TORCHELASTIC_USE_AGENT_STORE",
                                    "OMPI_COMM_WORLD_RANK",
                                    "OMPI_COMM_WORLD_SIZE",
                                    "OMPI_COMM_WORLD_LOCAL_RANK",
                                    "PMI_RANK",
                                    "PMI_SIZE",
                                    "MPI_LOCALRANKID",
                                    "SLURM_PROCID",
                                    "SLURM_NTASKS",
                                    "SLURM_LOCALID",
                                    "SLURM_JOB_ID",
                                    "SLURM_STEP_ID",
                                    "SLURM_JOB_NODELIST",
                                    "SLURM_STEP_NODELIST",
                                    "SLURM_NODELIST",
                                    "SHOAL_MASTER_ADDR",
                                    "SHOAL_MASTER_PORT",
                                    NULL};
#define NNAMES (sizeof names / sizeof names[0])

/* sl_launcher_env.h's table: rank, size, local rank; innermost first. */
static const char *const rows[][3] = {
    {"RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

/* The first value of name in env, as getenv finds it, or NULL. */
static const char *
ref_get(char *const *env, const char *name)
{
    size_t n = strlen(name);

    for (; *env; env++)
        if (!strncmp(*env, name, n) && (*env)[n] == '=')
            return *env + n + 1;
    return NULL;
}

/* A decimal number of 1 to 9 digits and nothing else, in [lo, hi]; else -1. */
static long
ref_decimal(const char *s, long lo, long hi)
{
    long v = 0;
    size_t n = 0;

    for (; s[n]; n++) {
        if (s[n] < '0' || s[n] > '9' || n == 9)
            return -1;
        v = v * 10 + (s[n] - '0');
    }
    return n && v >= lo && v <= hi ? v : -1;
}

static void
check_master(char *const *env, const sl_launcher_env_t *e, size_t size, const char *input)
{
    char *host = malloc(size), from[96];
    int found = -1, port = -1;
    sl_status_t st;
    const char *addr = ref_get(env, "MASTER_ADDR");

    if (!host)
        broken("out of memory", input);
    st = sl_launcher_env_master((const char *const *)env, e->launcher, &found, host, size, &port,
                                from, sizeof from);
    if (st != SL_OK) {
        const char *m = sl_err_msg();
        size_t n = strcspn(m, " :");
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(n < 63 ? n : 63), m);
        for (size_t i = 0; i + 1 < NNAMES && name[0]; i++)
            if (!strcmp(name, names[i])) {
                check_message(name, input);
                free(host);
                return;
            }
        broken("a rendezvous refused without a variable's name", input);
    }
    if (found) {
        if (!*host || strlen(host) >= size || port < 1 || port > 65535)
            broken("a rendezvous that is no host and port", input);
        for (const char *c = from; *c; c++)
            if (*c < 0x20 || *c > 0x7e)
                broken("a rendezvous from unprintable names", input);
        if (!strncmp(from, "MASTER_ADDR", 11) && strcmp(host, addr ? addr : "") != 0)
            broken("a torchrun rendezvous that is not MASTER_ADDR", input);
        if (!strncmp(from, "SLURM_", 6)) { /* "SLURM_JOB_NODELIST and SLURM_JOB_ID" */
            static char *first[MAX_EXPANDED];
            ref_list_t r = {first, 0, 0};
            char var[32];
            const char *list;
            snprintf(var, sizeof var, "%.*s", (int)strcspn(from, " "), from);
            list = ref_get(env, var);
            if (!list || ref_expand(list, &r) < 0 || strcmp(host, r.hosts[0]) != 0)
                broken("a Slurm rendezvous that is not the list's first host", input);
            ref_free(&r);
        }
    }
    free(host);
}

/* sl_launcher_local_rank, which reads environ: env is environ for the call. The
 * reference: the local rank of the first row whose local rank and rank are numbers
 * below SL_LAUNCHER_MAX_SIZE and whose rank is rank; else rank, "node rank". */
static void
check_local_rank(char **env, int rank, const char *input)
{
    char **saved = environ;
    const char *from = NULL, *want_from = "node rank";
    long want = rank;
    int got;

    for (int row = 0; row < 4; row++) {
        const char *l = ref_get(env, rows[row][2]), *g = ref_get(env, rows[row][0]);
        long lv = l ? ref_decimal(l, 0, SL_LAUNCHER_MAX_SIZE - 1) : -1;

        if (lv >= 0 && g && ref_decimal(g, 0, SL_LAUNCHER_MAX_SIZE - 1) == rank) {
            want = lv;
            want_from = rows[row][2];
            break;
        }
    }
    environ = env;
    got = sl_launcher_local_rank(rank, &from);
    environ = saved;
    if (got != want || !from || strcmp(from, want_from) != 0)
        broken("a local rank unlike the reference's", input);
}

static void
fuzz_env(const uint8_t *data, size_t len, size_t size)
{
    char *env[MAX_LINES + 1], *input = malloc(len + 1);
    int n = 0, row;
    size_t start = 0;
    sl_launcher_env_t e;
    sl_status_t st;
    long want[3];

    if (!input)
        broken("out of memory", "");
    memcpy(input, data, len);
    input[len] = '\0';
    for (size_t i = 0; i <= len && n < MAX_LINES; i++) {
        if (i < len && data[i] != '\n')
            continue;
        if (i > start) {
            const char *name = names[data[start] % NNAMES];
            size_t vlen = i - start - 1, nlen = name ? strlen(name) + 1 : 0;
            char *line = malloc(nlen + vlen + 1);
            if (!line)
                broken("out of memory", "");
            if (name)
                memcpy(line, name, nlen - 1), line[nlen - 1] = '=';
            memcpy(line + nlen, data + start + 1, vlen);
            line[nlen + vlen] = '\0'; /* a NUL in the value cuts it, as in environ */
            env[n++] = line;
        }
        start = i + 1;
    }
    env[n] = NULL;
    for (size_t i = 0; i < len; i++) /* for messages */
        if (input[i] == '\0')
            input[i] = ' ';

    for (row = 0; row < 4; row++)
        if (ref_get(env, rows[row][0]) && ref_get(env, rows[row][1]))
            break;
    st = sl_launcher_env_parse((const char *const *)env, &e);
    if (row == 4) {
        if (st != SL_OK || e.launcher != SL_LAUNCHER_NONE || e.rank != -1 || e.size != -1 ||
            e.local_rank != -1)
            broken("a launcher where none is set", input);
    } else {
        const char *local = ref_get(env, rows[row][2]);
        const char *bad = NULL;

        want[1] = ref_decimal(ref_get(env, rows[row][1]), 1, SL_LAUNCHER_MAX_SIZE);
        want[0] = want[1] < 0 ? -1 : ref_decimal(ref_get(env, rows[row][0]), 0, want[1] - 1);
        want[2] = !local || want[0] < 0 ? -1 : ref_decimal(local, 0, want[1] - 1);
        if (want[1] < 0)
            bad = rows[row][1];
        else if (want[0] < 0)
            bad = rows[row][0];
        else if (local && want[2] < 0)
            bad = rows[row][2];
        if (bad) {
            if (st == SL_OK)
                broken("a launcher's bad variable taken", input);
            check_message(bad, input);
        } else if (st != SL_OK) {
            broken("a launcher's good variables refused", input);
        } else if ((int)e.launcher != row + 1 || !e.name[0] || e.rank != want[0] ||
                   e.size != want[1] || e.local_rank != (local ? want[2] : -1) ||
                   e.rank >= e.size || strcmp(e.rank_var, rows[row][0]) != 0) {
            broken("a launcher unlike the reference's", input);
        }
    }
    if (st == SL_OK)
        check_master(env, &e, size, input);
    check_local_rank(env, st == SL_OK && e.rank >= 0 ? e.rank : (int)(len % 4), input);
    for (int i = 0; i < n; i++)
        free(env[i]);
    free(input);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t host_size;
    char *list;

    if (size < 1)
        return 0;
    host_size = buffer_sizes[data[0] >> 1 & 7];
    if (data[0] & 1) {
        fuzz_env(data + 1, size - 1, host_size);
        return 0;
    }
    list = malloc(size);
    if (!list)
        broken("out of memory", "");
    memcpy(list, data + 1, size - 1);
    list[size - 1] = '\0';
    fuzz_list(list, host_size, data[0] >> 4 & 3);
    free(list);
    return 0;
}
