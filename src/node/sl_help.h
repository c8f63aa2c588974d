/* The help texts of the shoal command line. */
#ifndef SL_HELP_H
#define SL_HELP_H

/* The help of command ("train", "eval", "run", "node", "help"; NULL: shoal's own), a
 * static string; NULL when there is no such command. */
const char *sl_help_text(const char *command);

#endif
