// SPDX-License-Identifier: GPL-2.0-or-later
// libFuzzer harness of the device state loader (pib_core_load,
// docs/migration.md): a migration stream is untrusted input like a packet.
// Any bytes go to the loader of a device configured as the one that saved
// the checked-in seeds: a pib-hca, or a ConnectX when the header names
// that personality. A state it takes must save back to the same bytes
// (it took nothing it would not carry on) and leave a device that still
// answers its driver; one it refuses must say why and leave the device as
// after reset (a ConnectX: its initialization segment as after reset).
// Neither may crash, hang or size anything from an unchecked
// field (ASan, UBSan and libFuzzer's malloc limit watch that).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fake_host.hh"
#include "mlx5_host.hh"

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
    std::vector<uint8_t> bytes = host.saveState();
    check(!bytes.empty(), "a loaded device cannot save");
    return bytes;
}

// The personality the state's header names (device_state.cc: the section's
// tag and length, the version, then the personality).
bool namesConnectX(const uint8_t *data, size_t size) {
    constexpr size_t kAt = 12;
    if (size < kAt + 4)
        return false;
    const uint32_t personality = uint32_t{data[kAt]} | uint32_t{data[kAt + 1]} << 8 |
                                 uint32_t{data[kAt + 2]} << 16 | uint32_t{data[kAt + 3]} << 24;
    return personality == PIB_PERSONALITY_MLX5;
}

// What a ConnectX driver reads first: the firmware revision, and where
// its command queue is (0 after reset).
uint64_t initSegment(FakeHost &host) {
    return pib_core_bar_read(host.core, PIB_BAR_REGS, 0, 8) ^
           pib_core_bar_read(host.core, PIB_BAR_REGS, 0x10, 8) << 1;
}

// The device answers its driver: pib-hca's QUERY_PORT, a ConnectX's
// initialization segment.
uint64_t answer(FakeHost &host, bool connectX) {
    if (connectX)
        return initSegment(host);
    const pib_port_info port = queryPort(host);
    uint64_t sum = 0;
    for (size_t i = 0; i < sizeof(port); ++i)
        sum = sum * 131 + reinterpret_cast<const uint8_t *>(&port)[i];
    return sum;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // One device of each personality for every input: a load starts with
    // a reset, and a refused one ends with one.
    static FakeHost pib;
    static Mlx5Host connectX(false);
    static const uint64_t fresh[] = {answer(pib, false), answer(connectX, true)};
    const bool mlx5 = namesConnectX(data, size);
    FakeHost &host = mlx5 ? connectX : pib;
    host.clear(); // the traces and reports of the inputs before
    char *error = nullptr;
    const int loaded = pib_core_load(host.core, data, size, &error);
    check(error != nullptr, "pib_core_load gave no answer");
    if (loaded != 0) {
        check(error[0] != '\0', "a refused state without a reason");
        check(answer(host, mlx5) == fresh[mlx5], "a refused state left the device changed");
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
        answer(host, mlx5); // the driver is still answered
        pib_core_reset(host.core);
    }
    std::free(error);
    return 0;
}
