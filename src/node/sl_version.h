/* shoal --version: the version and how this build was made (part of the shoal program). */
#ifndef SL_VERSION_H
#define SL_VERSION_H

#include <stdio.h>

/* Writes the version line and one line each for the commit, the CBLAS, the CPU loops
 * and the CUDA module (with its GPU code and whether cuDNN was found) to out. */
void sl_version_print(FILE *out);

#endif
