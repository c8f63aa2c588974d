/* summary.json's "wire" object and the run's last line about bytes (sl_wire_report.h). */
#include "node/sl_wire_report.h"

#include <math.h>
#include <string.h>

#include "common/sl_log.h"
#include "node/sl_metrics.h"
#include "transport/sl_wire.h"

static double
per_step(const sl_wire_report_t *w, uint64_t bytes)
{
    return w->steps > 0 ? (double)bytes / (double)w->steps : NAN; /* nothing trained here */
}

static double
ratio(const sl_wire_report_t *w, double bytes_per_step)
{
    double ref = sl_sync_wire_allreduce_fp32(w->nodes, w->nparams);
    return ref > 0 ? bytes_per_step / ref : NAN;
}

void
sl_wire_report_json(FILE *f, const sl_wire_report_t *w)
{
    sl_sync_wire_count_t t;
    double bps;
    int first = 1;

    sl_sync_wire_total(w->tr, w->algo, w->ncomps, &t);
    bps = per_step(w, sl_sync_wire_bytes(&t));
    fputs(",\n  \"wire\": {\"bytes_per_step\": ", f);
    sl_json_number(f, bps);
    fputs(", \"payload_bytes_per_step\": ", f);
    sl_json_number(f, per_step(w, t.payload_bytes));
    fprintf(f, ", \"frames\": %llu, \"steps\": %ld, \"by_encoding\": {",
            (unsigned long long)t.frames, w->steps);
    for (int e = 1; e < SL_WIRE_NENCODINGS; e++) {
        if (!t.enc_bytes[e])
            continue;
        fputs(first ? "" : ", ", f);
        sl_json_string(f, sl_wire_encoding_name((unsigned)e));
        fputs(": ", f);
        sl_json_number(f, per_step(w, t.enc_bytes[e]));
        first = 0;
    }
    fputs("}, \"by_component\": {", f);
    for (int c = 0; c <= w->ncomps; c++) {
        sl_sync_wire_count_t k;
        sl_sync_wire_component(w->tr, w->algo, w->ncomps, c, &k);
        if (c == w->ncomps && !k.frames)
            break; /* allreduce's whole gradient only */
        fputs(c ? ", " : "", f);
        sl_json_string(f, c < w->ncomps ? w->comps[c].name : "gradients");
        fputs(": ", f);
        sl_json_number(f, per_step(w, sl_sync_wire_bytes(&k)));
    }
    fputs("}, \"allreduce_fp32_bytes_per_step\": ", f);
    sl_json_number(f, sl_sync_wire_allreduce_fp32(w->nodes, w->nparams));
    fputs(", \"ratio_to_allreduce_fp32\": ", f);
    sl_json_number(f, ratio(w, bps));
    fputs("}", f);
}

void
sl_wire_report_log(const sl_wire_report_t *w)
{
    sl_sync_wire_count_t t;
    char encs[128] = "";
    size_t at = 0;
    double bps;

    if (!w->tr || w->nodes < 2)
        return;
    sl_sync_wire_total(w->tr, w->algo, w->ncomps, &t);
    bps = per_step(w, sl_sync_wire_bytes(&t));
    for (int e = 1; e < SL_WIRE_NENCODINGS && at < sizeof encs; e++)
        if (t.enc_bytes[e])
            at += (size_t)snprintf(encs + at, sizeof encs - at, "%s%s", at ? ", " : "",
                                   sl_wire_encoding_name((unsigned)e));
    sl_log_info("sync",
                "wire: %.0f bytes per step sent by this node (%s; %llu frames in %ld steps), "
                "%.4g x allreduce fp32's %.0f at n = %d",
                bps, at ? encs : "nothing", (unsigned long long)t.frames, w->steps, ratio(w, bps),
                sl_sync_wire_allreduce_fp32(w->nodes, w->nparams), w->nodes);
}
