/* libFuzzer target: the config parser on arbitrary bytes, the way shoal train uses it.
 * The input is a YAML file, then --set assignments, each after a line "--set":
 *     run: {name: x}
 *     --set
 *     train.epochs=3
 * The file is loaded over the defaults (sl_config_load_buffer), each assignment applied
 * in order (sl_config_set), then the config validated. What the parser promises is
 * checked: a failure is SL_ERR_CONFIG with a one-line message (no control characters)
 * that starts with the file or "--set" and its line and column, and leaves the config
 * as it was; validation passes or says why on one line; the resolved config, written
 * out (sl_config_write_yaml), reads back as the same config with the same verdict.
 * A broken promise prints what broke and aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_status.h"
#include "config/sl_config.h"

#define FILE_NAME "fuzz.yaml"
#define SEPARATOR "\n--set\n"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
broken(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_config: %s: %s\n", what, detail);
    abort();
}

/* The config as YAML text (malloc'd). */
static char *
written(const sl_config_t *cfg)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    if (!f)
        abort();
    if (sl_config_write_yaml(cfg, f) != SL_OK)
        broken("sl_config_write_yaml failed", sl_err_msg());
    fclose(f);
    return text;
}

/* Whether p starts ":LINE:COL: text" with LINE in 1..max_line, COL >= 1, text non-empty. */
static int
located_at(const char *p, unsigned long max_line)
{
    unsigned long line, col;
    int used = 0;

    return sscanf(p, ":%lu:%lu: %n", &line, &col, &used) == 2 && used > 0 && line >= 1 &&
           line <= max_line && col >= 1 && p[used] != '\0';
}

/* Whether msg would print as one plain line: no newline, no control character. */
static int
one_line(const char *msg)
{
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return 0;
    return 1;
}

/* One line, "NAME:LINE:COL: text". name NULL: a --set, named "--set KEY" where the key
 * is the user's text, so some ':' after "--set" must start the location. */
static void
check_located(const char *msg, const char *name, unsigned long max_line)
{
    int ok = 0;

    if (!one_line(msg))
        broken("message not on one plain line", msg);
    if (name) {
        size_t n = strlen(name);
        ok = strncmp(msg, name, n) == 0 && located_at(msg + n, max_line);
    } else if (strncmp(msg, "--set", 5) == 0) {
        for (const char *q = strchr(msg + 5, ':'); q && !ok; q = strchr(q + 1, ':'))
            ok = located_at(q, max_line);
    }
    if (!ok)
        broken("message without NAME:LINE:COL: in the input", msg);
}

/* A failed load or --set: SL_ERR_CONFIG, a located message, and cfg unchanged. */
static void
check_failure(sl_status_t st, const sl_config_t *cfg, const char *before, const char *name,
              unsigned long max_line)
{
    char *after;

    if (st != SL_ERR_CONFIG)
        broken("a load failed with another status than SL_ERR_CONFIG", sl_err_msg());
    check_located(sl_err_msg(), name, max_line);
    after = written(cfg);
    if (strcmp(before, after) != 0)
        broken("a failed load changed the config", sl_err_msg());
    free(after);
}

/* Lines of YAML text as YAML counts them: broken by \r\n, \r, \n, NEL, LS or PS. */
static unsigned long
count_lines(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    unsigned long n = 1;

    for (size_t i = 0; i < len; i++) {
        if (u[i] == '\r' && i + 1 < len && u[i + 1] == '\n')
            i++;
        if (u[i] == '\n' || u[i] == '\r')
            n++;
        else if (i + 1 < len && u[i] == 0xc2 && u[i + 1] == 0x85)
            n++;
        else if (i + 2 < len && u[i] == 0xe2 && u[i + 1] == 0x80 && (u[i + 2] & 0xfe) == 0xa8)
            n++;
    }
    return n;
}

/* Validation: SL_OK, or SL_ERR_CONFIG with one line "SOURCE: text". */
static sl_status_t
check_validate(const sl_config_t *cfg)
{
    sl_status_t st = sl_config_validate(cfg);
    const char *msg = sl_err_msg();
    size_t n = strlen(cfg->source);

    if (st == SL_OK)
        return st;
    if (st != SL_ERR_CONFIG)
        broken("validation failed with another status than SL_ERR_CONFIG", msg);
    if (!one_line(msg))
        broken("validation message not on one plain line", msg);
    if (strncmp(msg, cfg->source, n) != 0 || strncmp(msg + n, ": ", 2) != 0 || !msg[n + 2])
        broken("validation message does not start with 'SOURCE: '", msg);
    return st;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data, *end = text + size;
    const char *sep = memmem(text, size, SEPARATOR, strlen(SEPARATOR));
    size_t file_len = sep ? (size_t)(sep - text) : size;
    sl_config_t cfg, back;
    sl_status_t st, valid;
    char *before, *out, *again;

    sl_config_init(&cfg);
    before = written(&cfg);
    st = sl_config_load_buffer(&cfg, text, file_len, FILE_NAME);
    if (st != SL_OK)
        check_failure(st, &cfg, before, FILE_NAME, count_lines(text, file_len));
    free(before);
    while (sep) {
        const char *a = sep + strlen(SEPARATOR);
        char *assignment;

        sep = memmem(a, (size_t)(end - a), SEPARATOR, strlen(SEPARATOR));
        assignment = strndup(a, (size_t)((sep ? sep : end) - a)); /* a NUL ends it early */
        if (!assignment)
            abort();
        before = written(&cfg);
        st = sl_config_set(&cfg, assignment);
        if (st != SL_OK)
            check_failure(st, &cfg, before, NULL, count_lines(assignment, strlen(assignment)));
        free(before);
        free(assignment);
    }
    valid = check_validate(&cfg);

    /* the resolved config reads back the same */
    out = written(&cfg);
    sl_config_init(&back);
    if (sl_config_load_buffer(&back, out, strlen(out), "written.yaml") != SL_OK)
        broken("the written config does not load", sl_err_msg());
    again = written(&back);
    if (strcmp(out, again) != 0)
        broken("the written config reads back different", again);
    if ((check_validate(&back) == SL_OK) != (valid == SL_OK))
        broken("the written config validates differently", sl_err_msg());
    free(again);
    free(out);
    sl_config_fini(&back);
    sl_config_fini(&cfg);
    return 0;
}
