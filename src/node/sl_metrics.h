/* Run metrics: <dir>/metrics.jsonl, one JSON object per line, flushed per line, kept
 * across resumes; plus the small JSON writers summary.json uses. */
#ifndef SL_METRICS_H
#define SL_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "common/sl_status.h"

/* One training report; loss and grad_norm are means over the steps since the last one. */
typedef struct {
    long step;           /* steps done */
    int epoch;           /* 1-based epoch of the last step */
    double epoch_frac;   /* epochs done as a real number (step / batches per epoch) */
    uint64_t tokens;     /* training tokens seen */
    double tokens_per_s; /* since the last report */
    double loss;         /* nats per token */
    double lr;
    double grad_norm; /* before clipping */
    double time_s;    /* training time so far, eval excluded */
} sl_metrics_step_t;

typedef struct {
    FILE *fp;
    char *path;
} sl_metrics_t;

/* Opens path for appending. Lines about steps after keep_through_step (written after
 * the checkpoint a run resumes from, or by a run started over) and a partial last line
 * are dropped first, by an atomic rewrite; so a fresh run passes 0. SL_ERR_IO. */
sl_status_t sl_metrics_open(sl_metrics_t *m, const char *path, long keep_through_step);
/* {"step","epoch","epoch_frac","tokens","tokens_per_s","loss","ppl","lr","grad_norm","time_s",
 *  "version","wall_time"}; every record of the file ends with "wall_time" (ISO 8601, UTC,
 *  when it was written) */
sl_status_t sl_metrics_step(sl_metrics_t *m, const sl_metrics_step_t *r);
/* {"event":"eval","split","step","loss","ppl","bpc"} */
sl_status_t sl_metrics_eval(sl_metrics_t *m, const char *split, long step, double loss);
/* {"event":"membership","step","rank","members","epoch","change","why"}: at step (steps
 * done) rank left (change "left") or came back ("joined") as this node sees it: the
 * member set of a collective algorithm, or the dead set of a gossip or local one (epoch
 * 0); members nodes then. */
sl_status_t sl_metrics_membership(sl_metrics_t *m, long step, int rank, int members, uint32_t epoch,
                                  int joined, const char *why);
void sl_metrics_close(sl_metrics_t *m);

/* A JSON number (%.6g; null when not finite, which JSON cannot say). */
void sl_json_number(FILE *out, double v);
/* A JSON string with quotes and escapes; NULL as null. */
void sl_json_string(FILE *out, const char *s);
/* ,"wall_time":"2026-11-27T10:15:07.123Z" (now, UTC): the last field of every record. */
void sl_json_wall_time(FILE *out);
/* The number after the first "key": in text (one record or a small file shoal wrote);
 * 0, *v unchanged, when it is absent or not a finite number (null, nan, 1e999), else 1
 * and *v. */
int sl_json_number_at(const char *text, const char *key, double *v);

#endif
