/* Slurm's compressed host lists (SLURM_JOB_NODELIST): "node[01-04,07]",
 * "a1,b[2-3]", "rack[1-2]-gpu[01-02]". Items are separated by commas outside brackets;
 * a bracket holds numbers and ranges "lo-hi" whose width, when lo has leading zeros,
 * pads every number of the range ("[08-10]" is 08, 09, 10); an item with several
 * brackets is their product, the first bracket varying slowest, as Slurm expands it. */
#ifndef SL_HOSTLIST_H
#define SL_HOSTLIST_H

#include <stddef.h>

#include "common/sl_status.h"

#define SL_HOSTLIST_MAX_HOSTS 1000000L /* more than any cluster; bounds the arithmetic */

/* Checks the whole list, then writes host number index (0-based, in Slurm's order) into
 * host (size bytes) and the number of hosts into *count (both may be NULL: a check
 * only). what names the list in messages (a variable's name). Errors, one line, with
 * the message set:
 *   SL_ERR_CONFIG  "SLURM_JOB_NODELIST 'node[01-' is not a Slurm host list: '[' at
 *                  byte 5 is not closed"; index beyond the list; a host longer than
 *                  size - 1 bytes */
sl_status_t sl_hostlist_host(const char *list, const char *what, long index, char *host,
                             size_t size, long *count);

#endif
