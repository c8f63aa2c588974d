/* Command-line helpers shared by the programs (shoal, shoal-topo). */
#ifndef SL_CLI_H
#define SL_CLI_H

/* The value of option name at argv[*i], given as "--opt VALUE" (then *i moves past the
 * value) or "--opt=VALUE". Returns NULL with *matched clear when argv[*i] is another
 * argument, NULL with *matched set when the option has no value, else the value. */
const char *sl_cli_option_value(int argc, char **argv, int *i, const char *name, int *matched);

#endif
