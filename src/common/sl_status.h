/* Status codes, the thread-local error message, and the SL_TRY / SL_ASSERT macros. */
#ifndef SL_STATUS_H
#define SL_STATUS_H

#include <stdio.h>
#include <stdlib.h>

typedef int sl_status_t;

enum {
    SL_OK = 0,
    SL_ERR_NOMEM = -1,       /* allocation failed */
    SL_ERR_INVALID = -2,     /* bad argument or bad input (corpus, flags) */
    SL_ERR_IO = -3,          /* open/read/write/fsync/rename failed */
    SL_ERR_FORMAT = -4,      /* malformed file: checkpoint, cache, UTF-8 */
    SL_ERR_CONFIG = -5,      /* YAML or --set error; message is file:line:col: ... */
    SL_ERR_TIMEOUT = -6,     /* a peer did not answer in time */
    SL_ERR_SHUTDOWN = -7,    /* interrupted, context terminated */
    SL_ERR_TRANSPORT = -8,   /* ZeroMQ failure */
    SL_ERR_DEVICE = -9,      /* CUDA / cuBLAS / cuDNN failure */
    SL_ERR_UNSUPPORTED = -10, /* feature not built in or not available */
    SL_ERR_DROPPED = -11,     /* the run's members dropped this node: it may come back */
    SL_ERR_ENDED = -12        /* the run this node would join had ended without it */
};

/* Records a formatted message for the calling thread and returns code, so that
 * `return sl_err_set(SL_ERR_IO, "%s: %s", path, strerror(errno));` reads naturally. */
sl_status_t sl_err_set(sl_status_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prefixes the current message with "prefix: " (adds context while propagating). */
sl_status_t sl_err_prefix(sl_status_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The last message set on this thread ("" when none); valid until the next sl_err_set. */
const char *sl_err_msg(void);
/* Clears the message of this thread. */
void sl_err_clear(void);
/* Short name of a code: "invalid input", "timeout", ... */
const char *sl_status_str(sl_status_t st);

#define SL_TRY(expr)                                                                    \
    do {                                                                                \
        sl_status_t sl_try_st_ = (expr);                                                \
        if (sl_try_st_ != SL_OK)                                                        \
            return sl_try_st_;                                                          \
    } while (0)

#define SL_TRY_GOTO(expr, st, label)                                                    \
    do {                                                                                \
        (st) = (expr);                                                                  \
        if ((st) != SL_OK)                                                              \
            goto label;                                                                 \
    } while (0)

/* Broken invariant of our own code: always compiled in, never for bad input. */
#define SL_ASSERT(cond)                                                                 \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "shoal: %s:%d: assertion failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                             \
            abort();                                                                    \
        }                                                                               \
    } while (0)

#endif
