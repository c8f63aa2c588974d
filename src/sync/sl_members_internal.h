/* The member set's insides, shared by the agreement (sl_members.c) and the admission
 * of a rank that comes back (sl_members_admit.c); nothing else includes this. */
#ifndef SL_MEMBERS_INTERNAL_H
#define SL_MEMBERS_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "sync/sl_members.h"

/* Bytes of a view or of the set a newcomer enters, for size ranks (send_set). */
#define VIEW_BYTES(size) (12 + 16 * (size))

struct sl_members {
    sl_transport_t *tr; /* borrowed */
    uint32_t rank, size;
    int timeout_ms;
    uint32_t *ranks;         /* (size) the members, increasing: the first group.n */
    sl_group_t group;        /* over ranks */
    unsigned char *in, *got; /* (size) scratch of an agreement: still in; answered */
    unsigned char *view;     /* (VIEW_BYTES(size)) a proposal or ready word: u32 done,
                                then u32 ranks, little-endian; or the set a newcomer
                                enters (send_set) */
    sl_wire_key_t *keys;     /* (size) the proposals waited for */
    uint32_t *gone;          /* (size) the ranks an agreement dropped */
    uint32_t done;           /* collectives completed (sl_members_run) */
    uint32_t *their;         /* (size) each member's done, from its proposal */
    uint32_t giver;          /* after an agreement: the member that hands the last result
                                to those that missed its end; size when none does */
    int behind;              /* after an agreement: this node missed that end */
    float *last;             /* (last_cap) the last collective's result, for them */
    size_t last_count, last_cap;
    long *admit_at;       /* (size) the step each rank is to be admitted at, -1 none */
    int joined;           /* this node came back and was admitted (sl_members_join) */
    pthread_mutex_t lock; /* guards the events: read by the trainer's thread */
    sl_members_event_t *events;
    size_t nevents, taken, cap;
};

/* Records that rank left or joined (the set is already the new one), for
 * sl_members_next_event. */
void sl_members_add_event(sl_members_t *m, uint32_t rank, int joined, const char *why);

#endif
