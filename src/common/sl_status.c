/* Thread-local error messages behind sl_err_set(). */
#include "common/sl_status.h"

#include <stdarg.h>
#include <string.h>

#define SL_ERR_MSG_MAX 1024

static _Thread_local char err_msg[SL_ERR_MSG_MAX];

sl_status_t
sl_err_set(sl_status_t code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
    return code;
}

sl_status_t
sl_err_prefix(sl_status_t code, const char *fmt, ...)
{
    char prefix[SL_ERR_MSG_MAX], old[SL_ERR_MSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err_msg, sizeof old);
    snprintf(err_msg, sizeof err_msg, "%s: %s", prefix, old[0] ? old : sl_status_str(code));
    return code;
}

const char *
sl_err_msg(void)
{
    return err_msg;
}

void
sl_err_clear(void)
{
    err_msg[0] = '\0';
}

const char *
sl_status_str(sl_status_t st)
{
    switch (st) {
    case SL_OK: return "ok";
    case SL_ERR_NOMEM: return "out of memory";
    case SL_ERR_INVALID: return "invalid input";
    case SL_ERR_IO: return "I/O error";
    case SL_ERR_FORMAT: return "bad file format";
    case SL_ERR_CONFIG: return "configuration error";
    case SL_ERR_TIMEOUT: return "timeout";
    case SL_ERR_SHUTDOWN: return "shut down";
    case SL_ERR_TRANSPORT: return "transport error";
    case SL_ERR_DEVICE: return "device error";
    case SL_ERR_UNSUPPORTED: return "unsupported";
    case SL_ERR_DROPPED: return "dropped";
    case SL_ERR_ENDED: return "run ended";
    }
    return "unknown error";
}
