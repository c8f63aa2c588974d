/* shoal export: a model file written as safetensors plus a JSON file of its vocabulary
 * and configuration (sl_export.h). Part of the shoal program, like sl_main.c. */
#ifndef SL_CMD_EXPORT_H
#define SL_CMD_EXPORT_H

/* Runs "shoal export ARGS" (argv: the arguments after "export"); prints its errors as
 * one line "shoal: export: ..." and returns the exit status (0, 1 runtime, 2 usage). */
int sl_cmd_export(int argc, char **argv);

#endif
