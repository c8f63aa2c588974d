/* Running gnuplot or dot with generated text on their standard input (sl_tool_pipe.h). */
#define _POSIX_C_SOURCE 200809L
#include "common/sl_tool_pipe.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int
sl_tool_on_path(const char *name)
{
    const char *path = getenv("PATH");
    char file[4096];

    while (path && *path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);

        snprintf(file, sizeof file, "%.*s/%s", (int)len, len ? path : ".", name);
        if (access(file, X_OK) == 0)
            return 1;
        path = end ? end + 1 : NULL;
    }
    return 0;
}

int
sl_tool_pipe(const char *tool, const char *const *argv, const char *output,
             sl_tool_writer_fn writer, void *ctx)
{
    int fd[2], status;
    pid_t pid;
    FILE *to;

    if (pipe(fd) != 0) {
        fprintf(stderr, "%s: pipe: %s\n", tool, strerror(errno));
        return -1;
    }
    fflush(NULL); /* nothing buffered may be written twice */
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "%s: fork: %s\n", tool, strerror(errno));
        close(fd[0]);
        close(fd[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(fd[0], STDIN_FILENO);
        close(fd[0]);
        close(fd[1]);
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "%s: cannot run %s: %s\n", tool, argv[0], strerror(errno));
        _exit(127);
    }
    close(fd[0]);
    signal(SIGPIPE, SIG_IGN); /* the program dying early shows in its exit status */
    to = fdopen(fd[1], "w");
    if (to) {
        writer(to, ctx);
        fclose(to);
    } else {
        close(fd[1]);
    }
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "%s: %s failed to write %s\n", tool, argv[0], output);
        return -1;
    }
    return 0;
}
