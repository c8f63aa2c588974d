/* shoal plot RUN_DIR... [-o FILE] [--x AXES] [--script]: perplexity curves through
 * gnuplot, one panel per x axis. */
#define _POSIX_C_SOURCE 200809L
#include "node/sl_cmd.h"
#include "node/sl_cmd_plot.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sl_cli.h"
#include "common/sl_file.h"
#include "common/sl_tool_pipe.h"
#include "node/sl_help.h"
#include "node/sl_plot.h"

typedef struct {
    const sl_plot_run_t *runs;
    int n;
    const char *png;
    const sl_plot_x_t *axes;
    int naxes;
} plot_job_t;

static void
plot_writer(FILE *to, void *ctx)
{
    const plot_job_t *job = ctx;

    sl_plot_script(to, job->runs, job->n, NULL, job->axes, job->naxes);
}

/* The runs read: the script on stdout, or the PNG through gnuplot; the exit status. */
static int
draw(plot_job_t *job, int script)
{
    static const char *const gnuplot[] = {"gnuplot", NULL};

    if (job->n == 0)
        return sl_cmd_usage("plot", "missing RUN_DIR");
    if (sl_plot_check_axes(job->runs, job->n, job->axes, job->naxes) != SL_OK) {
        fprintf(stderr, "shoal: plot: %s\n", sl_err_msg());
        return SL_EXIT_RUNTIME;
    }
    if (script) {
        sl_plot_script(stdout, job->runs, job->n, job->png, job->axes, job->naxes);
        return SL_EXIT_OK;
    }
    for (int i = 0; i < job->n; i++)
        if (sl_file_same(job->runs[i].path, job->png)) {
            fprintf(stderr, "shoal: plot: %s is the metrics file %s reads: give another -o\n",
                    job->png, job->runs[i].path);
            return SL_EXIT_RUNTIME;
        }
    if (!sl_tool_on_path("gnuplot")) {
        fprintf(stderr,
                "shoal: plot: gnuplot is not on PATH: install it (Debian: gnuplot-nox, "
                "RHEL/Rocky: gnuplot) to draw %s, or write its script with --script\n",
                job->png);
        return SL_EXIT_RUNTIME;
    }
    if (sl_tool_pipe("shoal: plot", gnuplot, job->png, plot_writer, job) != 0)
        return SL_EXIT_RUNTIME;
    printf("shoal: plot: wrote %s (%d run%s)\n", job->png, job->n, job->n == 1 ? "" : "s");
    return SL_EXIT_OK;
}

int
sl_cmd_plot(int argc, char **argv)
{
    sl_plot_run_t *runs = calloc((size_t)argc + 1, sizeof *runs);
    sl_plot_x_t axes[SL_PLOT_MAX_AXES] = {SL_PLOT_X_STEPS, SL_PLOT_X_TIME};
    plot_job_t job = {runs, 0, "perplexity.png", axes, 2};
    int script = 0, help = 0, ex = SL_EXIT_OK;

    if (!runs) {
        fprintf(stderr, "shoal: out of memory\n");
        return SL_EXIT_RUNTIME;
    }
    for (int i = 0; i < argc && ex == SL_EXIT_OK; i++) {
        const char *v;
        int m;

        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            help = 1;
            break;
        }
        if (((v = sl_cli_option_value(argc, argv, &i, "-o", &m)) || m) ||
            ((v = sl_cli_option_value(argc, argv, &i, "--output", &m)) || m)) {
            if (!v || !*v)
                ex = sl_cmd_usage("plot", "option '%s' needs a FILE", argv[i]);
            else
                job.png = v;
        } else if ((v = sl_cli_option_value(argc, argv, &i, "--x", &m)) || m) {
            if (!v)
                ex = sl_cmd_usage(
                    "plot", "option '--x' needs steps, time or wall (or several: steps,wall)");
            else if (sl_plot_parse_axes(v, axes, &job.naxes) != SL_OK)
                ex = sl_cmd_usage("plot", "%s", sl_err_msg());
        } else if (strcmp(argv[i], "--script") == 0) {
            script = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            ex = sl_cmd_usage("plot", "unknown option '%s'", argv[i]);
        } else if (sl_plot_read(&runs[job.n], argv[i]) != SL_OK) {
            fprintf(stderr, "shoal: plot: %s\n", sl_err_msg());
            ex = SL_EXIT_RUNTIME;
        } else {
            job.n++;
        }
    }
    if (ex == SL_EXIT_OK && help)
        fputs(sl_help_text("plot"), stdout);
    else if (ex == SL_EXIT_OK)
        ex = draw(&job, script);
    for (int i = 0; i < job.n; i++)
        sl_plot_run_fini(&runs[i]);
    free(runs);
    return ex;
}
