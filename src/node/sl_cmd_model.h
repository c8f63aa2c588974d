/* The commands that use a trained model file without its corpus: shoal score and
 * shoal sample (their help texts are in sl_help.c). Each returns the exit status after
 * printing its results on stdout and any error as one line "shoal: ..." on stderr. */
#ifndef SL_CMD_MODEL_H
#define SL_CMD_MODEL_H

/* argv holds the arguments after the command's name. */
int sl_cmd_score(int argc, char **argv);
int sl_cmd_sample(int argc, char **argv);

#endif
