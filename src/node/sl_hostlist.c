/* Slurm host lists (sl_hostlist.h): checked as a whole, one host picked by index. */
#define _POSIX_C_SOURCE 200809L
#include "node/sl_hostlist.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_cli.h"

#define MAX_BRACKETS 16 /* per item */
#define MAX_DIGITS 9    /* a number in brackets; keeps the arithmetic in a long */
#define NAME_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-_"

typedef struct {
    const char *list, *what; /* for messages */
    char why[160];
    char shown[SL_CLI_SHOWN + 1], ch[8];
} scan_t;

/* The list for a message (one line: a list comes from outside). */
static const char *
shown(scan_t *sc)
{
    return sl_cli_shown(sc->list, sc->shown);
}

/* The character c for a message, quoted: 'x', or '\xNN' when it is not printable. */
static const char *
quoted(scan_t *sc, char c)
{
    char one[2] = {c, '\0'}, e[SL_CLI_SHOWN + 1];

    snprintf(sc->ch, sizeof sc->ch, "'%s'", sl_cli_shown(one, e));
    return sc->ch;
}

static sl_status_t bad(scan_t *sc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static sl_status_t
bad(scan_t *sc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(sc->why, sizeof sc->why, fmt, ap);
    va_end(ap);
    return sl_err_set(SL_ERR_CONFIG, "%s '%s' is not a Slurm host list: %s", sc->what, shown(sc),
                      sc->why);
}

/* A number of at most MAX_DIGITS digits at *p (advanced past it): its value and width. */
static int
number(const char **p, long *value, int *width)
{
    size_t n = strspn(*p, "0123456789");

    if (n == 0 || n > MAX_DIGITS)
        return 0;
    *value = strtol(*p, NULL, 10);
    *width = (int)n;
    *p += n;
    return 1;
}

/* The bracket whose '[' is at open: how many numbers it holds (*count) and, when
 * pick >= 0, the pick-th of them as text into num (zero-padded to its range's width).
 * *close receives the ']'. */
static sl_status_t
bracket(scan_t *sc, const char *open, long pick, char *num, size_t size, long *count,
        const char **close)
{
    const char *p = open + 1;
    long total = 0;

    for (;;) {
        const char *at = p;
        long lo, hi;
        int width, hi_width;

        if (!number(&p, &lo, &width))
            return strspn(p, "0123456789") > MAX_DIGITS
                       ? bad(sc, "the number at byte %d is too long", (int)(p - sc->list) + 1)
                       : bad(sc, "%s at byte %d: a range in brackets is N or N-M",
                             quoted(sc, *p ? *p : '?'), (int)(p - sc->list) + 1);
        hi = lo;
        if (*p == '-') {
            p++;
            if (!number(&p, &hi, &hi_width))
                return strspn(p, "0123456789") > MAX_DIGITS
                           ? bad(sc, "the number at byte %d is too long", (int)(p - sc->list) + 1)
                           : bad(sc, "the range at byte %d has no end", (int)(at - sc->list) + 1);
            if (hi < lo)
                return bad(sc, "the range %ld-%ld at byte %d runs backwards", lo, hi,
                           (int)(at - sc->list) + 1);
        }
        if (pick >= 0 && pick <= hi - lo)
            snprintf(num, size, "%0*ld", width, lo + pick);
        pick -= hi - lo + 1;
        total += hi - lo + 1;
        if (total > SL_HOSTLIST_MAX_HOSTS)
            return bad(sc, "more than %ld hosts", SL_HOSTLIST_MAX_HOSTS);
        if (*p == ']')
            break;
        if (*p != ',')
            return *p ? bad(sc, "%s at byte %d: a range in brackets is N or N-M", quoted(sc, *p),
                            (int)(p - sc->list) + 1)
                      : bad(sc, "'[' at byte %d is not closed", (int)(open - sc->list) + 1);
        p++;
    }
    *count = total;
    *close = p;
    return SL_OK;
}

/* One item (len bytes at s, a host or a pattern): its number of hosts, and when
 * pick >= 0 the pick-th host into host. */
static sl_status_t
item(scan_t *sc, const char *s, size_t len, long pick, char *host, size_t size, long *count)
{
    const char *open[MAX_BRACKETS], *close;
    long sizes[MAX_BRACKETS], picks[MAX_BRACKETS], n = 1;
    int nb = 0;
    char num[MAX_DIGITS + 1];
    size_t used = 0;

    if (len == 0)
        return bad(sc, "an empty host name at byte %d", (int)(s - sc->list) + 1);
    for (const char *p = s; p < s + len; p++) {
        if (*p == '[') {
            if (nb == MAX_BRACKETS)
                return bad(sc, "more than %d brackets in one host name", MAX_BRACKETS);
            open[nb] = p;
            SL_TRY(bracket(sc, p, -1, num, sizeof num, &sizes[nb], &close));
            n *= sizes[nb++];
            if (n > SL_HOSTLIST_MAX_HOSTS)
                return bad(sc, "more than %ld hosts", SL_HOSTLIST_MAX_HOSTS);
            p = close;
        } else if (*p == ']') {
            return bad(sc, "']' at byte %d has no '['", (int)(p - sc->list) + 1);
        } else if (!strchr(NAME_CHARS, *p)) {
            return bad(sc, "%s at byte %d is not a host name character", quoted(sc, *p),
                       (int)(p - sc->list) + 1);
        }
    }
    *count = n;
    if (pick < 0)
        return SL_OK;
    for (int b = nb - 1; b >= 0; b--) { /* the last bracket varies fastest */
        picks[b] = pick % sizes[b];
        pick /= sizes[b];
    }
    for (const char *p = s; p < s + len; p++) {
        const char *text = p;
        size_t tl = 1;
        int b;

        for (b = 0; b < nb && open[b] != p; b++)
            ;
        if (b < nb) {
            bracket(sc, p, picks[b], num, sizeof num, &sizes[b], &close);
            text = num;
            tl = strlen(num);
            p = close;
        }
        if (used + tl >= size)
            return sl_err_set(SL_ERR_CONFIG, "%s: a host name of '%s' is longer than %zu bytes",
                              sc->what, shown(sc), size - 1);
        memcpy(host + used, text, tl);
        used += tl;
    }
    host[used] = '\0';
    return SL_OK;
}

sl_status_t
sl_hostlist_host(const char *list, const char *what, long index, char *host, size_t size,
                 long *count)
{
    scan_t sc = {list, what, "", "", ""};
    const char *s = list;
    long total = 0, found = 0;

    if (!*list)
        return bad(&sc, "it is empty");
    for (;;) {
        const char *p = s;
        long n;
        int depth = 0;

        for (; *p && (*p != ',' || depth); p++) {
            if (*p == '[' && depth++)
                return bad(&sc, "'[' at byte %d is inside brackets", (int)(p - list) + 1);
            if (*p == ']' && depth)
                depth--;
        }
        if (depth)
            return bad(&sc, "'[' at byte %d is not closed", (int)(strrchr(s, '[') - list) + 1);
        SL_TRY(item(&sc, s, (size_t)(p - s), -1, NULL, 0, &n));
        if (host && !found && index >= total && index < total + n) {
            SL_TRY(item(&sc, s, (size_t)(p - s), index - total, host, size, &n));
            found = 1;
        }
        total += n;
        if (total > SL_HOSTLIST_MAX_HOSTS)
            return bad(&sc, "more than %ld hosts", SL_HOSTLIST_MAX_HOSTS);
        if (!*p)
            break;
        s = p + 1;
    }
    if (host && !found) /* index + 1 in unsigned long: index may be LONG_MAX */
        return sl_err_set(SL_ERR_CONFIG, "%s '%s' has %ld host%s, no host %s%lu", what, shown(&sc),
                          total, total == 1 ? "" : "s", index < -1 ? "-" : "",
                          index < -1 ? -(unsigned long)index - 1 : (unsigned long)index + 1);
    if (count)
        *count = total;
    return SL_OK;
}
