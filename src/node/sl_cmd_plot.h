/* shoal plot: the perplexity curves of runs through gnuplot (sl_plot.h). Part of the
 * shoal program, like sl_main.c. */
#ifndef SL_CMD_PLOT_H
#define SL_CMD_PLOT_H

/* Runs "shoal plot ARGS" (argv: the arguments after "plot"); prints its errors as one
 * line "shoal: plot: ..." and returns the exit status (0, 1 runtime, 2 usage). */
int sl_cmd_plot(int argc, char **argv);

#endif
