// SPDX-License-Identifier: GPL-2.0-or-later
// libFuzzer harness of the device state loader (pib_core_load,
// docs/migration.md): a migration stream is untrusted input like a packet.
// Any bytes go to the loader of a device configured as the one that saved
// the checked-in seeds. A state it takes must save back to the same bytes
// (it took nothing it would not carry on) and leave a device that still
// answers its driver; one it refuses must say why and leave the device as
// after reset. Neither may crash, hang or size anything from an unchecked
// field (ASan, UBSan and libFuzzer's malloc limit watch that).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fake_host.hh"

namespace {

void check(bool ok, const char *what) {
    if (!ok) {
        std::fprintf(stderr, "fuzz-state: invariant broken: %s\n", what);
        std::abort();
    }
}

// Port 1 as QUERY_PORT gives it, through one mailbox for every input (the
// fake host's RAM would run out).
pib_port_info queryPort(FakeHost &host) {
    static const uint64_t mailbox = host.alloc(PIB_MAILBOX_SIZE);
    host.command(PIB_CMD_QUERY_PORT, 1, 0, mailbox);
    return host.peek<pib_port_info>(mailbox);
}

std::vector<uint8_t> save(FakeHost &host) {
    void *state = nullptr;
    size_t len = 0;
    char *why = nullptr;
    check(pib_core_save(host.core, &state, &len, &why) == 0, "a loaded device cannot save");
    std::vector<uint8_t> bytes(static_cast<uint8_t *>(state), static_cast<uint8_t *>(state) + len);
    std::free(state);
    std::free(why);
    return bytes;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // One device for every input: a load starts with a reset, and a
    // refused one ends with one.
    static FakeHost host;
    static const pib_port_info fresh = queryPort(host);
    host.clear(); // the traces and reports of the inputs before
    char *error = nullptr;
    const int loaded = pib_core_load(host.core, data, size, &error);
    check(error != nullptr, "pib_core_load gave no answer");
    if (loaded != 0) {
        check(error[0] != '\0', "a refused state without a reason");
        const pib_port_info now = queryPort(host);
        check(std::memcmp(&now, &fresh, sizeof(now)) == 0, "a refused state changed the port");
    } else {
        // What it took it carries on: saved again it is a state that
        // loads, and saves to the same bytes once more. (The first save
        // may differ from the input: what the device fixes itself, such
        // as its GUIDs and table sizes, is its own, not the stream's.)
        const std::vector<uint8_t> once = save(host);
        char *why = nullptr;
        check(pib_core_load(host.core, once.data(), once.size(), &why) == 0,
              "a loaded device saved a state it refuses");
        std::free(why);
        check(save(host) == once, "a state saves to other bytes each time");
        queryPort(host); // the driver is still answered
        pib_core_reset(host.core);
    }
    std::free(error);
    return 0;
}
