/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Compiled as C11 with -Werror: proves the shared headers are valid C. */
#include "pib_core.h"
#include "pib_hw.h"

int pib_header_check(void);
int pib_header_check(void) {
    return PIB_ID_MAGIC != 0 && PIB_IF_VERSION_MAJOR(PIB_IF_VERSION_CURRENT) < 256;
}
