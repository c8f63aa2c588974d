/* Command-line helpers shared by the programs (shoal, shoal-topo): options, and values
 * from outside quoted in messages. */
#ifndef SL_CLI_H
#define SL_CLI_H

/* The value of option name at argv[*i], given as "--opt VALUE" (then *i moves past the
 * value) or "--opt=VALUE". Returns NULL with *matched clear when argv[*i] is another
 * argument, NULL with *matched set when the option has no value, else the value. */
const char *sl_cli_option_value(int argc, char **argv, int *i, const char *name, int *matched);

#define SL_CLI_SHOWN 60 /* bytes of a value from outside that a message quotes */

/* s, a value from outside (an environment variable, a host list), for a message, into
 * buf: each byte that is not printable ASCII written \xNN, cut at SL_CLI_SHOWN bytes with
 * "...", so that the message stays one plain line. Returns buf. */
const char *sl_cli_shown(const char *s, char buf[SL_CLI_SHOWN + 1]);

#endif
