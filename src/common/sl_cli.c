/* Command-line helpers shared by the programs. */
#include "common/sl_cli.h"

#include <stdio.h>
#include <string.h>

/* s into buf (n + 1 bytes) with each byte that is not printable ASCII written \xNN, as
 * much as n bytes hold; returns the bytes of s written. */
static size_t
escape(const char *s, char *buf, size_t n)
{
    size_t used = 0, i = 0;

    for (; s[i]; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c >= 0x20 && c < 0x7f) {
            if (used + 1 > n)
                break;
            buf[used++] = (char)c;
        } else {
            if (used + 4 > n)
                break;
            snprintf(buf + used, 5, "\\x%02x", c);
            used += 4;
        }
    }
    buf[used] = '\0';
    return i;
}

const char *
sl_cli_shown(const char *s, char buf[SL_CLI_SHOWN + 1])
{
    if (s[escape(s, buf, SL_CLI_SHOWN)]) {
        escape(s, buf, SL_CLI_SHOWN - 3);
        strcat(buf, "...");
    }
    return buf;
}

const char *
sl_cli_option_value(int argc, char **argv, int *i, const char *name, int *matched)
{
    size_t n = strlen(name);

    *matched = 0;
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=') {
        *matched = 1;
        return argv[*i] + n + 1;
    }
    if (argv[*i][n] != '\0')
        return NULL;
    *matched = 1;
    if (*i + 1 >= argc)
        return NULL;
    return argv[++*i];
}
