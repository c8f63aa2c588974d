/* The connection watch (sl_zmq_watch.h): zmq_socket_monitor's events for connected and
 * disconnected, read off an in-process PAIR without waiting. */
#include "transport/sl_zmq_watch.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "transport/sl_zmq_status.h"

sl_status_t
sl_zmq_watch_start(void *ctx, void *s, const char *tag, void **pair)
{
    char name[128];
    int no_linger = 0;
    void *p;

    *pair = NULL;
    snprintf(name, sizeof name, "inproc://shoal-watch-%s", tag);
    if (zmq_socket_monitor(s, name, ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) != 0)
        return sl_zmq_fail("transport: watching the connection %s", tag);
    p = zmq_socket(ctx, ZMQ_PAIR);
    if (!p || zmq_setsockopt(p, ZMQ_LINGER, &no_linger, sizeof no_linger) != 0 ||
        zmq_connect(p, name) != 0) {
        sl_status_t st = sl_zmq_fail("transport: reading the watch of %s", tag);
        if (p)
            zmq_close(p);
        zmq_socket_monitor(s, NULL, 0);
        return st;
    }
    *pair = p;
    return SL_OK;
}

/* An event is two parts: 6 bytes (u16 event, u32 value, host order), then the
 * endpoint. */
sl_zmq_watch_news_t
sl_zmq_watch_read(void *pair)
{
    sl_zmq_watch_news_t news = SL_ZMQ_WATCH_QUIET;
    zmq_msg_t part;

    for (;;) {
        uint16_t event = 0;
        int more;

        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, pair, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&part);
            return news;
        }
        if (zmq_msg_size(&part) >= sizeof event)
            memcpy(&event, zmq_msg_data(&part), sizeof event);
        more = zmq_msg_more(&part);
        zmq_msg_close(&part);
        while (more) { /* the endpoint */
            zmq_msg_init(&part);
            if (zmq_msg_recv(&part, pair, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&part);
                break;
            }
            more = zmq_msg_more(&part);
            zmq_msg_close(&part);
        }
        if (event == ZMQ_EVENT_DISCONNECTED)
            news = SL_ZMQ_WATCH_LOST;
        else if (event == ZMQ_EVENT_CONNECTED)
            news = SL_ZMQ_WATCH_UP;
    }
}

void
sl_zmq_watch_stop(void *s, void **pair)
{
    if (!pair || !*pair)
        return;
    zmq_socket_monitor(s, NULL, 0);
    zmq_close(*pair);
    *pair = NULL;
}
