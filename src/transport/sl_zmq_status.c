/* ZeroMQ error numbers to statuses with zmq_strerror's text (sl_zmq_status.h). */
#include "transport/sl_zmq_status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <zmq.h>

sl_status_t
sl_zmq_status(int e)
{
    return e == EAGAIN                ? SL_ERR_TIMEOUT
           : e == ETERM || e == EINTR ? SL_ERR_SHUTDOWN
                                      : SL_ERR_TRANSPORT;
}

sl_status_t
sl_zmq_fail(const char *fmt, ...)
{
    int e = zmq_errno();
    char what[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return sl_err_set(sl_zmq_status(e), "%s: %s", what, zmq_strerror(e));
}
