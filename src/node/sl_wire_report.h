/* The bytes on the wire per node per step in the run summary (issue 18): summary.json's
 * "wire" object and the log line at the end of a run, from src/sync/sl_sync_wire.h's
 * counts. Writes only; owns nothing. */
#ifndef SL_WIRE_REPORT_H
#define SL_WIRE_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "model/sl_model.h"
#include "sync/sl_sync_wire.h"

/* What the report is about, every pointer borrowed. */
typedef struct {
    const sl_transport_t *tr;    /* NULL: a single node, nothing sent */
    sl_sync_algorithm_t algo;    /* in force */
    const sl_component_t *comps; /* (ncomps) */
    int ncomps;
    size_t nparams;
    int nodes;  /* n of the run */
    long steps; /* steps this process trained: the counters' span */
} sl_wire_report_t;

/* Writes `,\n  "wire": {...}` into a JSON object being written at f: bytes_per_step
 * (frames: payload and headers), payload_bytes_per_step, frames, by_encoding (payload
 * bytes per step), by_component (frame bytes per step), allreduce_fp32_bytes_per_step
 * and ratio_to_allreduce_fp32 (null for one node). */
void sl_wire_report_json(FILE *f, const sl_wire_report_t *w);

/* One info line: this node's bytes per step, the encodings used, the ratio. */
void sl_wire_report_log(const sl_wire_report_t *w);

#endif
