/*
 * pib-hca: the QEMU interfaces that changed between the releases the
 * device builds against (10.0, the pinned one, to the newest in Debian).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef HW_PIB_HCA_COMPAT_H
#define HW_PIB_HCA_COMPAT_H

#define PIB_QEMU_AT_LEAST(major, minor)                                        \
    (QEMU_VERSION_MAJOR > (major) ||                                           \
     (QEMU_VERSION_MAJOR == (major) && QEMU_VERSION_MINOR >= (minor)))

/* 10.1: class_init gets its data const. */
#if PIB_QEMU_AT_LEAST(10, 1)
typedef const void PibClassData;
#else
typedef void PibClassData;
#endif

/*
 * 10.2: a device's end of a chardev is a CharFrontend (it was a
 * CharBackend, a name for what it is not).
 */
#if !PIB_QEMU_AT_LEAST(10, 2)
typedef CharBackend CharFrontend;
#endif

#endif
