/* shoal --version: the version and how this build was made (part of the shoal program). */
#ifndef SL_VERSION_H
#define SL_VERSION_H

#include <stdio.h>

#include "common/sl_status.h"

/* Writes the version line and one line each for the commit, the CBLAS, the CPU loops a
 * run would use, the CUDA module (with its GPU code) and whether cuDNN was found to out.
 * SL_ERR_INVALID (nothing written) when SHOAL_CPU_ISA names no build this CPU runs. */
sl_status_t sl_version_print(FILE *out);

#endif
