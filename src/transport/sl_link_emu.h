/* The emulated link (sl_link.h): a network of a given rate and latency between the
 * nodes, for figures of latency and scale on one machine without root (cluster.emulate).
 * Emulation only: what it measures is this model of a link, never a real network's.
 *
 * Each directed link (this node to one peer) sends one frame at a time: a frame of B
 * bytes (header and payload) sent at t leaves when the link is free, at
 * d = max(t, free), occupies it B * 8 / rate seconds, and arrives latency (plus a
 * jitter drawn uniform in [0, jitter) from a stream seeded by run, sender and
 * receiver) after it has left, but never before the frame sent before it on that link:
 * frames keep their order per link, and none is lost. A thread hands each frame to the
 * ZeroMQ base link at its arrival time, so the receiver sees it then; CURVE and frame
 * MACs are the base's as ever. Payloads are copied, or lent (SL_SEND_LEND) until the
 * base has given them back. A link holds at most SL_LINK_EMU_QUEUE_FRAMES frames not
 * yet handed on (like ZeroMQ's high-water mark): a send waits up to its wait_ms for
 * room. Serves every peer while sl_transport_opts_t.emulate_* is set (then the
 * transport has no shared-memory lanes), none otherwise. */
#ifndef SL_LINK_EMU_H
#define SL_LINK_EMU_H

#include "transport/sl_link.h"

#define SL_LINK_EMU_QUEUE_FRAMES 1000u

extern const sl_link_ops_t sl_link_emu_ops;

#endif
