/* safetensors: writing float32 tensors, and reading a file with a small JSON parser
 * that accepts exactly the header's shape (sl_safetensors.h) and checks every offset
 * before the data is touched. */
#define _POSIX_C_SOURCE 200809L
#include "common/sl_safetensors.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_endian.h"

#define MAX_TENSORS 65536

/* ---- writing ---- */

static uint64_t
elements(const uint64_t *shape, int ndim)
{
    uint64_t n = 1;

    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}

/* The header JSON, padded with spaces to a multiple of 8 bytes; malloc'd. */
static sl_status_t
build_header(const sl_st_out_t *t, int n, const char *const *meta, char **out, size_t *len)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *fp = open_memstream(&buf, &size);
    uint64_t off = 0;
    const char *sep = "";

    if (!fp)
        return sl_err_set(SL_ERR_NOMEM, "safetensors: out of memory for the header");
    fputc('{', fp);
    if (meta && meta[0]) {
        fputs("\"__metadata__\":{", fp);
        for (int i = 0; meta[i] && meta[i + 1]; i += 2)
            fprintf(fp, "%s\"%s\":\"%s\"", i ? "," : "", meta[i], meta[i + 1]);
        fputc('}', fp);
        sep = ",";
    }
    for (int i = 0; i < n; i++) {
        uint64_t bytes = 4 * elements(t[i].shape, t[i].ndim);
        fprintf(fp, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[", sep, t[i].name);
        for (int d = 0; d < t[i].ndim; d++)
            fprintf(fp, "%s%" PRIu64, d ? "," : "", t[i].shape[d]);
        fprintf(fp, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + bytes);
        off += bytes;
        sep = ",";
    }
    fputc('}', fp);
    while ((ftell(fp) % 8) != 0)
        fputc(' ', fp);
    if (fclose(fp) != 0 || !buf) {
        free(buf);
        return sl_err_set(SL_ERR_NOMEM, "safetensors: out of memory for the header");
    }
    *out = buf;
    *len = size;
    return SL_OK;
}

/* n floats as little-endian bytes, through a bounded buffer. */
static sl_status_t
write_floats(sl_atomic_file_t *f, const float *x, uint64_t n)
{
    unsigned char chunk[4096];
    size_t used = 0;

    for (uint64_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], 4);
        sl_put_u32(chunk + used, bits);
        used += 4;
        if (used == sizeof chunk) {
            SL_TRY(sl_atomic_write(f, chunk, used));
            used = 0;
        }
    }
    return used ? sl_atomic_write(f, chunk, used) : SL_OK;
}

sl_status_t
sl_st_write_temp(sl_atomic_file_t *f, const char *path, const sl_st_out_t *t, int n,
                 const char *const *meta)
{
    unsigned char len8[8];
    char *header = NULL;
    size_t hlen = 0;
    sl_status_t st;

    SL_TRY(build_header(t, n, meta, &header, &hlen));
    st = sl_atomic_open(f, path);
    if (st != SL_OK) {
        free(header);
        return st;
    }
    sl_put_u64(len8, hlen);
    st = sl_atomic_write(f, len8, sizeof len8);
    if (st == SL_OK)
        st = sl_atomic_write(f, header, hlen);
    for (int i = 0; st == SL_OK && i < n; i++)
        st = write_floats(f, t[i].data, elements(t[i].shape, t[i].ndim));
    free(header);
    if (st != SL_OK)
        sl_atomic_abort(f);
    return st;
}

/* ---- reading ---- */

typedef struct {
    const char *path;
    const char *s; /* the header */
    size_t len, pos;
} parser_t;

/* "FILE: bad safetensors header at byte N: what" (N counts from the file's start). */
static sl_status_t
bad(const parser_t *p, const char *what)
{
    return sl_err_set(SL_ERR_FORMAT, "%s: bad safetensors header at byte %zu: %s", p->path,
                      8 + p->pos, what);
}

static void
skip_ws(parser_t *p)
{
    while (p->pos < p->len && strchr(" \t\r\n", p->s[p->pos]) && p->s[p->pos])
        p->pos++;
}

static int
peek(parser_t *p)
{
    skip_ws(p);
    return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1;
}

static sl_status_t
expect(parser_t *p, char c)
{
    char what[32];

    if (peek(p) != (unsigned char)c) {
        snprintf(what, sizeof what, "expected '%c'", c);
        return bad(p, what);
    }
    p->pos++;
    return SL_OK;
}

static int
hex4(const char *s, unsigned *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return 0;
        *v = *v * 16 + (unsigned)d;
    }
    return 1;
}

/* Code point cp (below 0x10000) as UTF-8 at out + *n, within cap bytes. */
static int
put_utf8(char *out, size_t *n, size_t cap, unsigned cp)
{
    int len = cp < 0x80 ? 1 : cp < 0x800 ? 2 : 3;

    if (*n + (size_t)len >= cap)
        return 0;
    if (len == 1) {
        out[(*n)++] = (char)cp;
    } else if (len == 2) {
        out[(*n)++] = (char)(0xc0 | cp >> 6);
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        out[(*n)++] = (char)(0xe0 | cp >> 12);
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    }
    return 1;
}

/* A JSON string into out (cap bytes, NUL-terminated), escapes decoded to UTF-8. A
 * name (ctrl_ok 0) may not decode to control characters: it goes into one-line
 * messages. */
static sl_status_t
parse_string(parser_t *p, char *out, size_t cap, int ctrl_ok)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    size_t n = 0;

    SL_TRY(expect(p, '"'));
    for (;;) {
        unsigned cp;
        const char *e;

        if (p->pos >= p->len)
            return bad(p, "unterminated string");
        cp = (unsigned char)p->s[p->pos++];
        if (cp == '"')
            break;
        if (cp < 0x20)
            return bad(p, "control character in a string");
        if (cp == 0x7f && !ctrl_ok) /* DEL: JSON takes it, a one-line message does not */
            return bad(p, "control character in a name");
        if (cp == '\\') {
            cp = p->pos < p->len ? (unsigned char)p->s[p->pos++] : 0;
            if (cp == 'u') {
                if (p->pos + 4 > p->len || !hex4(p->s + p->pos, &cp) || cp == 0 ||
                    (cp >= 0xd800 && cp <= 0xdfff))
                    return bad(p, "bad \\u escape (surrogates and NUL are not accepted)");
                p->pos += 4;
            } else if (cp && (e = strchr(from, (int)cp)) != NULL) {
                cp = (unsigned char)to[e - from];
            } else {
                return bad(p, "bad escape in a string");
            }
            if ((cp < 0x20 || cp == 0x7f) && !ctrl_ok)
                return bad(p, "control character in a name");
            if (!put_utf8(out, &n, cap, cp))
                return bad(p, "string too long");
            continue;
        }
        if (n + 1 >= cap) /* a byte as it is: the header is UTF-8 already */
            return bad(p, "string too long");
        out[n++] = (char)cp;
    }
    out[n] = '\0';
    return SL_OK;
}

/* A non-negative integer without sign, fraction or exponent, below 2^63. */
static sl_status_t
parse_uint(parser_t *p, uint64_t *v)
{
    size_t start;

    skip_ws(p);
    start = p->pos;
    *v = 0;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        if (*v > (UINT64_MAX / 2 - 9) / 10)
            return bad(p, "number too large");
        *v = *v * 10 + (uint64_t)(p->s[p->pos++] - '0');
    }
    if (p->pos == start)
        return bad(p, "expected a non-negative integer");
    if (p->pos < p->len && strchr(".eE-+", p->s[p->pos]) && p->s[p->pos])
        return bad(p, "expected an integer");
    return SL_OK;
}

/* [n, n, ...] with at most cap numbers. */
static sl_status_t
parse_uints(parser_t *p, uint64_t *v, int cap, int *count, const char *what)
{
    char msg[96];

    *count = 0;
    SL_TRY(expect(p, '['));
    if (peek(p) == ']') {
        p->pos++;
        return SL_OK;
    }
    for (;;) {
        if (*count == cap) {
            snprintf(msg, sizeof msg, "%s has more than %d numbers", what, cap);
            return bad(p, msg);
        }
        SL_TRY(parse_uint(p, &v[(*count)++]));
        if (peek(p) == ']') {
            p->pos++;
            return SL_OK;
        }
        SL_TRY(expect(p, ','));
    }
}

/* {"k": "v", ...}: the metadata, read and dropped. */
static sl_status_t
skip_metadata(parser_t *p)
{
    char s[1024];

    SL_TRY(expect(p, '{'));
    if (peek(p) == '}') {
        p->pos++;
        return SL_OK;
    }
    for (;;) {
        SL_TRY(parse_string(p, s, sizeof s, 0));
        SL_TRY(expect(p, ':'));
        if (peek(p) != '"')
            return bad(p, "__metadata__ values must be strings");
        SL_TRY(parse_string(p, s, sizeof s, 1));
        if (peek(p) == '}') {
            p->pos++;
            return SL_OK;
        }
        SL_TRY(expect(p, ','));
    }
}

static int
dtype_bytes(const char *d)
{
    static const struct {
        const char *name;
        int bytes;
    } types[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
                 {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
                 {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};

    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(d, types[i].name) == 0)
            return types[i].bytes;
    return 0;
}

/* {"dtype": ..., "shape": [...], "data_offsets": [b, e]}, each key once. */
static sl_status_t
parse_tensor(parser_t *p, sl_st_tensor_t *t)
{
    int have_dtype = 0, have_shape = 0, have_offsets = 0;
    char key[32], msg[160];

    SL_TRY(expect(p, '{'));
    for (;;) {
        SL_TRY(parse_string(p, key, sizeof key, 0));
        SL_TRY(expect(p, ':'));
        if (strcmp(key, "dtype") == 0 && !have_dtype) {
            SL_TRY(parse_string(p, t->dtype, sizeof t->dtype, 0));
            have_dtype = 1;
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            SL_TRY(parse_uints(p, t->shape, SL_ST_MAX_DIMS, &t->ndim, "shape"));
            have_shape = 1;
        } else if (strcmp(key, "data_offsets") == 0 && !have_offsets) {
            uint64_t o[2];
            int n;
            SL_TRY(parse_uints(p, o, 2, &n, "data_offsets"));
            if (n != 2)
                return bad(p, "data_offsets must be [begin, end]");
            t->begin = o[0];
            t->end = o[1];
            have_offsets = 1;
        } else {
            snprintf(msg, sizeof msg, "tensor '%s': unexpected or repeated key '%s'", t->name, key);
            return bad(p, msg);
        }
        if (peek(p) == '}')
            break;
        SL_TRY(expect(p, ','));
    }
    p->pos++;
    if (!have_dtype || !have_shape || !have_offsets) {
        snprintf(msg, sizeof msg, "tensor '%s' lacks %s", t->name,
                 !have_dtype   ? "its dtype"
                 : !have_shape ? "its shape"
                               : "its data_offsets");
        return bad(p, msg);
    }
    return SL_OK;
}

/* The header: one object of tensors (and __metadata__), nothing but spaces after it. */
static sl_status_t
parse_header(parser_t *p, sl_st_file_t *f)
{
    int cap = 0;

    SL_TRY(expect(p, '{'));
    if (peek(p) == '}') {
        p->pos++;
    } else {
        for (;;) {
            char name[SL_ST_NAME_MAX];
            SL_TRY(parse_string(p, name, sizeof name, 0));
            SL_TRY(expect(p, ':'));
            if (strcmp(name, "__metadata__") == 0) {
                SL_TRY(skip_metadata(p));
            } else {
                if (sl_st_find(f, name)) {
                    char msg[SL_ST_NAME_MAX + 32];
                    snprintf(msg, sizeof msg, "tensor '%s' given twice", name);
                    return bad(p, msg);
                }
                if (f->n == MAX_TENSORS)
                    return bad(p, "too many tensors");
                if (f->n == cap) {
                    sl_st_tensor_t *g =
                        realloc(f->t, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *g);
                    if (!g)
                        return sl_err_set(SL_ERR_NOMEM, "%s: out of memory", p->path);
                    f->t = g;
                }
                memset(&f->t[f->n], 0, sizeof f->t[f->n]);
                memcpy(f->t[f->n].name, name, sizeof name);
                SL_TRY(parse_tensor(p, &f->t[f->n]));
                f->n++;
            }
            if (peek(p) == '}') {
                p->pos++;
                break;
            }
            SL_TRY(expect(p, ','));
        }
    }
    if (peek(p) != -1)
        return bad(p, "text after the header's object");
    return SL_OK;
}

static int
cmp_begin(const void *a, const void *b)
{
    const sl_st_tensor_t *x = *(const sl_st_tensor_t *const *)a;
    const sl_st_tensor_t *y = *(const sl_st_tensor_t *const *)b;
    return x->begin < y->begin   ? -1
           : x->begin > y->begin ? 1
                                 : (x->end > y->end) - (x->end < y->end);
}

/* Each tensor's size agrees with its dtype and shape, and together they tile the data
 * section: sorted by offset, each begins where the one before ends. */
static sl_status_t
check_offsets(const char *path, sl_st_file_t *f)
{
    const sl_st_tensor_t **order;
    uint64_t at = 0;
    sl_status_t st = SL_OK;

    for (int i = 0; i < f->n; i++) {
        const sl_st_tensor_t *t = &f->t[i];
        int esize = dtype_bytes(t->dtype);
        uint64_t bytes = (uint64_t)esize;
        if (!esize)
            return sl_err_set(SL_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%s'", path, t->name,
                              t->dtype);
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] != 0 && bytes > UINT64_MAX / 2 / t->shape[d])
                return sl_err_set(SL_ERR_FORMAT, "%s: tensor '%s': shape too large", path, t->name);
            bytes *= t->shape[d];
        }
        if (t->end < t->begin || t->end - t->begin != bytes)
            return sl_err_set(SL_ERR_FORMAT,
                              "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                              "] hold %s bytes, its dtype and shape need %" PRIu64,
                              path, t->name, t->begin, t->end,
                              t->end < t->begin ? "negative" : "other", bytes);
        if (t->end > f->data_len)
            return sl_err_set(SL_ERR_FORMAT,
                              "%s: tensor '%s' ends at byte %" PRIu64
                              " of a data section of %" PRIu64 " (file truncated?)",
                              path, t->name, t->end, f->data_len);
    }
    order = malloc((f->n > 0 ? (size_t)f->n : 1) * sizeof *order);
    if (!order)
        return sl_err_set(SL_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < f->n; i++)
        order[i] = &f->t[i];
    qsort(order, (size_t)f->n, sizeof *order, cmp_begin);
    for (int i = 0; i < f->n && st == SL_OK; i++) {
        if (order[i]->begin != at)
            st = sl_err_set(SL_ERR_FORMAT,
                            "%s: tensor '%s' begins at byte %" PRIu64 " of the data, "
                            "expected %" PRIu64 " (%s)",
                            path, order[i]->name, order[i]->begin, at,
                            order[i]->begin > at ? "a hole" : "an overlap");
        at = order[i]->end;
    }
    free(order);
    if (st == SL_OK && at != f->data_len)
        st = sl_err_set(SL_ERR_FORMAT,
                        "%s: %" PRIu64 " bytes of data after the last tensor (the file is "
                        "longer than its header says)",
                        path, f->data_len - at);
    return st;
}

sl_status_t
sl_st_read(const char *path, sl_st_file_t *f)
{
    parser_t p;
    uint64_t hlen;
    sl_status_t st;

    memset(f, 0, sizeof *f);
    SL_TRY(sl_file_read_all(path, &f->bytes, &f->len));
    if (f->len < 8) {
        st = sl_err_set(SL_ERR_FORMAT, "%s: truncated: %zu bytes, not even the header's length",
                        path, f->len);
        goto fail;
    }
    hlen = sl_get_u64((const unsigned char *)f->bytes);
    if (hlen > SL_ST_MAX_HEADER || hlen > f->len - 8) {
        st = sl_err_set(SL_ERR_FORMAT,
                        "%s: header length %" PRIu64 " is beyond the file's %zu bytes%s", path,
                        hlen, f->len, hlen > SL_ST_MAX_HEADER ? " or the 100 MiB limit" : "");
        goto fail;
    }
    if (memchr(f->bytes + 8, '\0', (size_t)hlen)) {
        st = sl_err_set(SL_ERR_FORMAT, "%s: a NUL byte in the header (not a safetensors file?)",
                        path);
        goto fail;
    }
    p.path = path;
    p.s = f->bytes + 8;
    p.len = (size_t)hlen;
    p.pos = 0;
    f->data = (const unsigned char *)f->bytes + 8 + hlen;
    f->data_len = f->len - 8 - hlen;
    SL_TRY_GOTO(parse_header(&p, f), st, fail);
    SL_TRY_GOTO(check_offsets(path, f), st, fail);
    return SL_OK;
fail:
    sl_st_fini(f);
    return st;
}

void
sl_st_fini(sl_st_file_t *f)
{
    free(f->bytes);
    free(f->t);
    memset(f, 0, sizeof *f);
}

const sl_st_tensor_t *
sl_st_find(const sl_st_file_t *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    return NULL;
}

void
sl_st_get_f32(const sl_st_file_t *f, const sl_st_tensor_t *t, float *out)
{
    const unsigned char *p = f->data + t->begin;
    uint64_t n = (t->end - t->begin) / 4;

    for (uint64_t i = 0; i < n; i++) {
        uint32_t bits = sl_get_u32(p + 4 * i);
        memcpy(&out[i], &bits, 4);
    }
}

void
sl_st_shape_text(const uint64_t *shape, int ndim, char *buf, size_t size)
{
    size_t used = 0;

    if (size == 0)
        return;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, "%s%" PRIu64, d ? ", " : "", shape[d]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
}
