/* libFuzzer target: the sync state a checkpoint carries and a node that rejoins
 * receives from the network, loaded by sl_sync_state_view_load (sl_sync_state.h).
 *
 * The input's first bytes shape the view the state is loaded into, the rest is the
 * state (every buffer is allocated at its exact size, so ASan sees overreads):
 *   byte 0   bits 0-2: the algorithm (sl_sync_algorithm_t); bit 3: no row set array
 *            (NULL, as allreduce passes); bit 4: fit, the state is cut or zero-padded
 *            to the view's length; bit 5: reseal, the view's own header is written
 *            over the state's first 24 bytes (so the checks behind it are reached);
 *            bit 6: overlap, ncorr is the components' counts summed (else 0)
 *   byte 1   components: byte % 5
 *   bytes 2-3  n, floats of each BMUF array: u16 le % 1025 (0: none)
 *   3 bytes a component: rows of its touched-row set, u16 le % 600 (0: none), and its
 *            count of floats in the correction buffer, u8 (offsets: the counts before it,
 *            so the components tile ncorr)
 * The view's arrays start with pseudo-random values (row sets only within their rows,
 * due >= -1), so that a change is seen. The load must give the verdict a plain reference
 * reader gives (length, header, every BMUF value finite, no bit at or beyond a set's
 * rows, due >= -1, the corrections of a pending update finite). On SL_OK:
 * the contract holds in the view, the state saved again is the input (the corrections
 * of a component with nothing pending are 0 there), and loading that gives the same
 * arrays; the state one byte shorter and one byte longer is refused (and saving into
 * one byte more is SL_ERR_INVALID, writing nothing). On an error: it is
 * SL_ERR_FORMAT with a one-line message starting "sync: ", and nothing in the view
 * changed. A broken promise prints what broke and aborts. With FUZZ_SYNC_STATE_LOG set
 * each input's outcome is printed (to see what a seed reaches). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_endian.h"
#include "common/sl_status.h"
#include "sync/sl_sync_state.h"

#define MAX_COMPS 4
#define MAX_N 1024
#define MAX_ROWS 599
#define HEADER_BYTES 24 /* sl_sync_state.c's STATE_HEADER_BYTES */

enum { F_NO_SETS = 8, F_FIT = 16, F_RESEAL = 32, F_OVERLAP = 64 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The view and everything it points at, each at its exact size. */
typedef struct {
    sl_sync_state_view_t v;
    sl_component_t *comps;
    sl_rowset_t *sets;
    size_t words[MAX_COMPS]; /* of each set; 0: no set */
} shape_t;

static void
broken(const char *what)
{
    fprintf(stderr, "fuzz_sync_state: %s\n", what);
    abort();
}

static void *
exact(size_t bytes)
{
    void *p = malloc(bytes);

    if (!p && bytes)
        broken("out of memory");
    return p;
}

static uint64_t
next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void
fill_floats(float *x, size_t n, uint64_t *s)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t bits = (uint32_t)next(s);
        memcpy(&x[i], &bits, sizeof bits);
    }
}

static void
fill(shape_t *sh)
{
    uint64_t s = 0x5eed5eed12345678ULL;
    sl_sync_state_view_t *v = &sh->v;

    fill_floats(v->omega, v->n, &s);
    fill_floats(v->delta, v->n, &s);
    fill_floats(v->start, v->n, &s);
    fill_floats(v->corr, v->ncorr, &s);
    for (int c = 0; c < v->ncomps; c++) {
        if (v->ncorr)
            v->due[c] = (int64_t)(next(&s) % 4) - 1;
        for (size_t w = 0; w < sh->words[c]; w++)
            sh->sets[c].bits[w] = next(&s);
        if (sh->words[c] && sh->sets[c].rows % 64)
            sh->sets[c].bits[sh->words[c] - 1] &= ((uint64_t)1 << sh->sets[c].rows % 64) - 1;
    }
}

/* The view the shape bytes describe; returns the bytes they took, 0 when too short. */
static size_t
make_shape(shape_t *sh, const uint8_t *d, size_t size)
{
    sl_sync_state_view_t *v = &sh->v;
    size_t used, ncorr = 0;
    int ncomps;

    if (size < 4)
        return 0;
    ncomps = d[1] % (MAX_COMPS + 1);
    used = 4 + 3 * (size_t)ncomps;
    if (size < used)
        return 0;
    memset(sh, 0, sizeof *sh);
    v->algo = (sl_sync_algorithm_t)(d[0] & 7);
    v->n = (size_t)sl_get_u16(d + 2) % (MAX_N + 1);
    if (v->n) {
        v->omega = exact(4 * v->n);
        v->delta = exact(4 * v->n);
        v->start = exact(4 * v->n);
    }
    v->ncomps = ncomps;
    sh->comps = exact(sizeof *sh->comps * (size_t)ncomps);
    if (!(d[0] & F_NO_SETS))
        sh->sets = exact(sizeof *sh->sets * (size_t)ncomps);
    for (int c = 0; c < ncomps; c++) {
        const uint8_t *e = d + 4 + 3 * c;
        long rows = sl_get_u16(e) % (MAX_ROWS + 1);
        sl_component_t *cp = &sh->comps[c];

        memset(cp, 0, sizeof *cp);
        snprintf(cp->name, sizeof cp->name, "component.%d", c);
        cp->offset = ncorr;
        cp->count = e[2];
        ncorr += cp->count;
        if (rows) {
            cp->sparse = 1;
            cp->rows = rows;
            cp->row_len = 1;
        }
        if (!sh->sets)
            continue;
        sh->sets[c].rows = rows ? rows : 1;
        sh->sets[c].bits = NULL;
        if (rows) {
            sh->words[c] = ((size_t)rows + 63) / 64;
            sh->sets[c].bits = exact(8 * sh->words[c]);
        }
    }
    v->comps = sh->comps;
    v->touched = sh->sets;
    if ((d[0] & F_OVERLAP) && ncorr) {
        v->ncorr = ncorr;
        v->due = exact(8 * (size_t)ncomps);
        v->corr = exact(4 * ncorr);
    }
    fill(sh);
    return used;
}

static void
free_shape(shape_t *sh)
{
    free(sh->v.omega);
    free(sh->v.delta);
    free(sh->v.start);
    free(sh->v.due);
    free(sh->v.corr);
    for (int c = 0; sh->sets && c < sh->v.ncomps; c++)
        free(sh->sets[c].bits);
    free(sh->sets);
    free(sh->comps);
}

/* Everything the view holds, one array after the other: as many bytes as the state's
 * body (its length less the header). */
static size_t
snapshot_bytes(const shape_t *sh)
{
    size_t b = 12 * sh->v.n + 4 * sh->v.ncorr + (sh->v.ncorr ? 8 * (size_t)sh->v.ncomps : 0);

    for (int c = 0; c < sh->v.ncomps; c++)
        b += 8 * sh->words[c];
    return b;
}

static unsigned char *
take(unsigned char *p, const void *x, size_t bytes)
{
    if (bytes)
        memcpy(p, x, bytes);
    return p + bytes;
}

static void
snapshot(const shape_t *sh, unsigned char *p)
{
    const sl_sync_state_view_t *v = &sh->v;

    p = take(p, v->omega, 4 * v->n);
    p = take(p, v->delta, 4 * v->n);
    p = take(p, v->start, 4 * v->n);
    for (int c = 0; c < v->ncomps; c++)
        if (sh->words[c])
            p = take(p, sh->sets[c].bits, 8 * sh->words[c]);
    if (v->ncorr) {
        p = take(p, v->due, 8 * (size_t)v->ncomps);
        take(p, v->corr, 4 * v->ncorr);
    }
}

/* The view's own header, as the format (sl_sync.h) says: u32 algorithm, u32 row sets,
 * u64 n, u64 bitmap words. Returns the state's length, 0 when it keeps nothing. */
static size_t
ref_header(const shape_t *sh, unsigned char *h)
{
    uint32_t nsets = 0;
    uint64_t words = 0;

    for (int c = 0; c < sh->v.ncomps; c++)
        if (sh->words[c]) {
            nsets++;
            words += sh->words[c];
        }
    sl_put_u32(h, (uint32_t)sh->v.algo);
    sl_put_u32(h + 4, nsets);
    sl_put_u64(h + 8, sh->v.n);
    sl_put_u64(h + 16, words);
    if (!nsets && !sh->v.n && !sh->v.ncorr)
        return 0;
    return HEADER_BYTES + 12 * sh->v.n + 8 * words +
           (sh->v.ncorr ? 8 * (size_t)sh->v.ncomps + 4 * sh->v.ncorr : 0);
}

/* The reference reader's verdict: 1 when buf is a state this view takes. */
/* The float at p (little-endian) is finite: a plain isfinite, not the reader's test. */
static int
ref_finite(const unsigned char *p)
{
    uint32_t bits = sl_get_u32(p);
    float x;

    memcpy(&x, &bits, sizeof x);
    return isfinite(x);
}

static int
ref_accepts(const shape_t *sh, const unsigned char *buf, size_t len)
{
    unsigned char h[HEADER_BYTES];
    size_t want = ref_header(sh, h);
    const unsigned char *p;

    if (len != want)
        return 0;
    if (want == 0)
        return 1;
    if (memcmp(buf, h, HEADER_BYTES) != 0)
        return 0;
    for (size_t i = 0; i < 3 * sh->v.n; i++)
        if (!ref_finite(buf + HEADER_BYTES + 4 * i))
            return 0;
    p = buf + HEADER_BYTES + 12 * sh->v.n;
    for (int c = 0; c < sh->v.ncomps; c++)
        for (size_t w = 0; w < sh->words[c]; w++, p += 8)
            for (long r = 64 * (long)w; r < 64 * (long)w + 64; r++)
                if (r >= sh->sets[c].rows && (sl_get_u64(p) >> (r - 64 * (long)w) & 1))
                    return 0;
    for (int c = 0; sh->v.ncorr && c < sh->v.ncomps; c++) {
        const unsigned char *corr = p + 8 * (size_t)sh->v.ncomps + 4 * sh->v.comps[c].offset;
        int64_t due = (int64_t)sl_get_u64(p + 8 * (size_t)c);

        if (due < -1)
            return 0;
        for (size_t i = 0; due >= 0 && i < sh->v.comps[c].count; i++)
            if (!ref_finite(corr + 4 * i))
                return 0;
    }
    return 1;
}

/* The view after a successful load: no bit at or beyond a set's rows, due >= -1, every
 * BMUF value and pending correction finite. */
static void
check_view(const shape_t *sh)
{
    for (int c = 0; c < sh->v.ncomps; c++) {
        for (long r = sh->sets ? sh->sets[c].rows : 0; r < 64 * (long)sh->words[c]; r++)
            if (sh->sets[c].bits[r / 64] >> (r % 64) & 1)
                broken("a touched row at or beyond its set's rows");
        if (sh->v.ncorr && sh->v.due[c] < -1)
            broken("a pending update due before step -1");
        for (size_t i = 0; sh->v.ncorr && sh->v.due[c] >= 0 && i < sh->v.comps[c].count; i++)
            if (!isfinite(sh->v.corr[sh->v.comps[c].offset + i]))
                broken("a pending correction not finite");
    }
    for (size_t i = 0; i < sh->v.n; i++)
        if (!isfinite(sh->v.omega[i]) || !isfinite(sh->v.delta[i]) || !isfinite(sh->v.start[i]))
            broken("a BMUF value not finite");
}

/* Loads len bytes of src (an exact-size copy) where load must refuse them: SL_ERR_FORMAT
 * "sync: ..." on one line, and nothing changed. */
static void
load_refused(shape_t *sh, const unsigned char *src, size_t len, const char *what)
{
    size_t nsnap = snapshot_bytes(sh);
    unsigned char *before = exact(nsnap), *after = exact(nsnap), *buf = exact(len);
    sl_status_t st;
    const char *msg;

    if (len)
        memcpy(buf, src, len);
    snapshot(sh, before);
    sl_err_clear();
    st = sl_sync_state_view_load(&sh->v, buf, len);
    msg = sl_err_msg();
    if (st != SL_ERR_FORMAT) {
        fprintf(stderr, "fuzz_sync_state: %s: status %d\n", what, st);
        broken("a refused state is not SL_ERR_FORMAT");
    }
    if (strncmp(msg, "sync: ", 6) != 0 || !msg[6] || strchr(msg, '\n'))
        broken("a refusal's message is not one line starting \"sync: \"");
    snapshot(sh, after);
    if (memcmp(before, after, nsnap) != 0)
        broken("a refused state changed the view");
    free(before);
    free(after);
    free(buf);
}

/* Saving the view into len bytes that are not its length: SL_ERR_INVALID "sync: ...",
 * and nothing written. */
static void
save_refused(const shape_t *sh, size_t len)
{
    unsigned char *buf = exact(len), *was = exact(len);

    memset(buf, 0xa5, len);
    memset(was, 0xa5, len);
    sl_err_clear();
    if (sl_sync_state_view_save(&sh->v, buf, len) != SL_ERR_INVALID ||
        strncmp(sl_err_msg(), "sync: ", 6) != 0)
        broken("a save into the wrong length is not SL_ERR_INVALID \"sync: ...\"");
    if (len && memcmp(buf, was, len) != 0)
        broken("a refused save wrote");
    free(buf);
    free(was);
}

/* A state the view took: saved again it is buf (corrections of the components with
 * nothing pending zeroed), and that loads back to the same arrays. */
static void
round_trip(shape_t *sh, const unsigned char *buf, size_t len)
{
    size_t nsnap = snapshot_bytes(sh);
    unsigned char *before = exact(nsnap), *after = exact(nsnap);
    unsigned char *again = exact(len), *want = exact(len);

    if (sl_sync_state_view_bytes(&sh->v) != len)
        broken("a state taken is not the view's length");
    if (sl_sync_state_view_save(&sh->v, again, len) != SL_OK)
        broken("the view does not save");
    if (len)
        memcpy(want, buf, len);
    if (sh->v.ncorr) {
        unsigned char *corr = want + len - 4 * sh->v.ncorr;
        for (int c = 0; c < sh->v.ncomps; c++)
            if (sh->v.due[c] < 0)
                memset(corr + 4 * sh->comps[c].offset, 0, 4 * sh->comps[c].count);
    }
    if (len && memcmp(again, want, len) != 0)
        broken("the state saved again differs from the one loaded");
    snapshot(sh, before);
    if (sl_sync_state_view_load(&sh->v, again, len) != SL_OK)
        broken("the state saved again does not load");
    snapshot(sh, after);
    if (memcmp(before, after, nsnap) != 0)
        broken("the state saved again loads to other arrays");
    free(before);
    free(after);
    free(again);
    free(want);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int verbose = -1;
    shape_t sh;
    size_t used = make_shape(&sh, data, size), len, want;
    unsigned char h[HEADER_BYTES], *buf;
    sl_status_t st;
    int accept, flags = size ? data[0] : 0;

    if (verbose < 0)
        verbose = getenv("FUZZ_SYNC_STATE_LOG") != NULL;
    if (!used)
        return 0;
    data += used;
    size -= used;
    want = ref_header(&sh, h);
    len = (flags & F_FIT) ? want : size;
    buf = exact(len);
    memset(buf, 0, len);
    memcpy(buf, data, len < size ? len : size);
    if ((flags & F_RESEAL) && len >= HEADER_BYTES)
        memcpy(buf, h, HEADER_BYTES);
    accept = ref_accepts(&sh, buf, len);
    if (!accept) {
        load_refused(&sh, buf, len, "state");
    } else {
        unsigned char *longer = exact(len + 1);
        sl_err_clear();
        st = sl_sync_state_view_load(&sh.v, buf, len);
        if (st != SL_OK) {
            fprintf(stderr, "fuzz_sync_state: %d: %s\n", st, sl_err_msg());
            broken("a good state refused");
        }
        check_view(&sh);
        round_trip(&sh, buf, len);
        if (len)
            load_refused(&sh, buf, len - 1, "one byte short");
        memcpy(longer, buf, len);
        longer[len] = 0;
        load_refused(&sh, longer, len + 1, "one byte more");
        save_refused(&sh, len + 1);
        free(longer);
    }
    if (verbose)
        fprintf(stderr, "fuzz_sync_state: %s, %d components, n %zu, ncorr %zu: %zu bytes %s\n",
                sl_sync_algorithm_name(sh.v.algo), sh.v.ncomps, sh.v.n, sh.v.ncorr, len,
                accept ? "loaded" : sl_err_msg());
    free(buf);
    free_shape(&sh);
    return 0;
}
