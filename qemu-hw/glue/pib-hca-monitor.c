/*
 * pib-hca: the monitor's view of the device and its test facilities.
 *
 * QMP: x-pib-query (the state as JSON), x-pib-capture (pcap on a port),
 * x-pib-inject (test facilities). HMP: `info pib [ID] [OBJECT N]`,
 * `pib_capture [ID] PORT FILE [COUNT]`, `pib_capture [ID] PORT stop` and
 * `pib_inject [ID] INJECTION`. The core does the work (pib_core_inspect,
 * pib_core_capture, pib_core_inject); this file parses and prints.
 * docs/user-guide.md, "Inspecting a device" and "Packet capture";
 * docs/prm.md §10, "Test facilities".
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/cutils.h"
#include "qapi/error.h"
#include "qapi/qapi-commands-pib.h"
#include "qobject/qdict.h"
#include "qobject/qjson.h"
#include "monitor/hmp.h"
#include "monitor/monitor.h"

#include "pib_core.h"
#include "pib-hca.h"

/* Hands the core's answer to errp when the core said no; frees it. */
static char *pib_hca_answer(int rc, char *answer, Error **errp)
{
    if (rc == 0 && answer) {
        return answer;
    }
    error_setg(errp, "%s", answer ? answer : "out of memory");
    free(answer);
    return NULL;
}

/* The core's answer as a PibAnswer, or NULL with errp set. */
static PibAnswer *pib_hca_message(int rc, char *answer, Error **errp)
{
    PibAnswer *result;

    answer = pib_hca_answer(rc, answer, errp);
    if (!answer) {
        return NULL;
    }
    result = g_new0(PibAnswer, 1);
    result->message = g_strdup(answer);
    free(answer);
    return result;
}

PibState *qmp_x_pib_query(const char *id, const char *object, Error **errp)
{
    struct pib_core *core = pib_hca_find_core(id, errp);
    char *answer = NULL;
    QObject *state;
    PibState *result;
    int rc;

    if (!core) {
        return NULL;
    }
    rc = pib_core_inspect(core, object, 1, &answer);
    answer = pib_hca_answer(rc, answer, errp);
    if (!answer) {
        return NULL;
    }
    state = qobject_from_json(answer, errp);
    free(answer);
    if (!state) {
        return NULL;
    }
    result = g_new0(PibState, 1);
    result->state = state;
    return result;
}

PibAnswer *qmp_x_pib_capture(const char *id, uint32_t port, const char *file,
                             bool has_count, uint64_t count, Error **errp)
{
    struct pib_core *core = pib_hca_find_core(id, errp);
    char *answer = NULL;
    int rc;

    if (!core) {
        return NULL;
    }
    rc = pib_core_capture(core, port, file, has_count ? count : 0, &answer);
    return pib_hca_message(rc, answer, errp);
}

/*
 * HMP arguments are one line of words. A device id comes first when the
 * rest would be ambiguous without it (see each command).
 */
static char **pib_hca_words(const QDict *qdict, unsigned *count)
{
    char **words =
        g_strsplit_set(qdict_get_try_str(qdict, "args") ?: "", " \t", -1);
    unsigned n = 0;

    for (unsigned i = 0; words[i]; i++) {
        if (words[i][0]) {
            words[n++] = words[i];
        } else {
            g_free(words[i]);
        }
    }
    words[n] = NULL;
    *count = n;
    return words;
}

/* info pib [ID] [OBJECT N]: an object is always two words. */
void hmp_info_pib(Monitor *mon, const QDict *qdict)
{
    unsigned n;
    g_auto(GStrv) words = pib_hca_words(qdict, &n);
    const char *id = n % 2 ? words[0] : NULL;
    g_autofree char *object =
        n >= 2 ? g_strjoin(" ", words[n - 2], words[n - 1], NULL) : NULL;
    Error *err = NULL;
    struct pib_core *core;
    char *answer = NULL;

    if (n > 3) {
        monitor_printf(mon, "usage: info pib [ID] [OBJECT N]\n");
        return;
    }
    core = pib_hca_find_core(id, &err);
    if (core) {
        int rc = pib_core_inspect(core, object, 0, &answer);

        answer = pib_hca_answer(rc, answer, &err);
    }
    if (hmp_handle_error(mon, err)) {
        return;
    }
    monitor_puts(mon, answer);
    free(answer);
}

/* pib_capture [ID] PORT FILE [COUNT] | pib_capture [ID] PORT stop */
void hmp_pib_capture(Monitor *mon, const QDict *qdict)
{
    unsigned n, at = 0;
    g_auto(GStrv) words = pib_hca_words(qdict, &n);
    const char *id = NULL;
    uint64_t port = 0, count = 0;
    Error *err = NULL;
    PibAnswer *answer;

    if (n && qemu_strtou64(words[0], NULL, 10, &port) < 0) {
        id = words[at++];
    }
    if (n - at < 2 || n - at > 3 ||
        qemu_strtou64(words[at], NULL, 10, &port) < 0 || port > UINT32_MAX ||
        (n - at == 3 && qemu_strtou64(words[at + 2], NULL, 0, &count) < 0)) {
        monitor_printf(mon, "usage: pib_capture [ID] PORT FILE [COUNT] | "
                            "pib_capture [ID] PORT stop\n");
        return;
    }
    answer = qmp_x_pib_capture(
        id, port, strcmp(words[at + 1], "stop") ? words[at + 1] : NULL,
        n - at == 3, count, &err);
    if (hmp_handle_error(mon, err)) {
        return;
    }
    monitor_printf(mon, "%s\n", answer->message);
    qapi_free_PibAnswer(answer);
}

PibAnswer *qmp_x_pib_inject(const char *id, const char *injection, Error **errp)
{
    struct pib_core *core = pib_hca_find_core(id, errp);
    char *answer = NULL;
    int rc;

    if (!core) {
        return NULL;
    }
    rc = pib_core_inject(core, injection, &answer);
    return pib_hca_message(rc, answer, errp);
}

/*
 * pib_inject [ID] INJECTION: an injection starts with one of a few
 * keywords, so a first word that is none of them is the device's id.
 */
void hmp_pib_inject(Monitor *mon, const QDict *qdict)
{
    static const char *const keywords[] = {
        "command", "wqe",    "drop",  "corrupt", "event",
        "stop",    "resume", "fatal", "clear",
    };
    const char *line = qdict_get_try_str(qdict, "args") ?: "";
    g_autofree char *id = NULL;
    const char *space;
    Error *err = NULL;
    PibAnswer *answer;
    bool keyword = false;

    line += strspn(line, " \t");
    space = line + strcspn(line, " \t");
    for (size_t i = 0; i < ARRAY_SIZE(keywords); i++) {
        keyword |= strlen(keywords[i]) == (size_t) (space - line) &&
                   !strncmp(line, keywords[i], space - line);
    }
    if (!keyword && *line) {
        id = g_strndup(line, space - line);
        line = space;
    }
    answer = qmp_x_pib_inject(id, line, &err);
    if (hmp_handle_error(mon, err)) {
        return;
    }
    monitor_printf(mon, "%s\n", answer->message);
    qapi_free_PibAnswer(answer);
}
