/* Command-line helpers shared by the programs. */
#include "common/sl_cli.h"

#include <string.h>

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
