/*
 * pib-hca: what the device's QOM glue (pib-hca.c) offers the monitor
 * commands (pib-hca-monitor.c).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef HW_PIB_HCA_H
#define HW_PIB_HCA_H

#include "qapi/error.h"

struct pib_core;

/*
 * The core of the pib-hca device `id` (its id or QOM path), or of the only
 * pib-hca device when `id` is NULL; NULL with errp set when there is none.
 */
struct pib_core *pib_hca_find_core(const char *id, Error **errp);

#endif
