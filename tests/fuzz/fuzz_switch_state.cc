// SPDX-License-Identifier: GPL-2.0-or-later
// libFuzzer harness of the switch's state loader (switch_state.cc,
// server_state.cc; docs/migration.md, "The switch's state"): a state file
// of a snapshot is untrusted input like a packet. Any bytes go to
// Server::restoreState of a switch configured as the one that saved the
// checked-in seeds, before it opens a socket. A state it takes must save
// back to the same bytes (it took nothing it would not carry on) and
// leave a switch that still answers an SMP; one it refuses must say why
// and leave the switch as it was. Neither may crash, hang or size
// anything from an unchecked field.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "server.hh"
#include "smp_packets.hh"
#include "state_archive.hh"
#include "switch.hh"

using namespace pib;
using namespace pib::fabric;

namespace {

// The switch the seeds are of (tests/unit/test_switch_state_seeds.cc).
constexpr uint64_t kGuid = 0x0250494253570001ull;
constexpr unsigned kPorts = 4;

void check(bool ok, const char *what) {
    if (!ok) {
        std::fprintf(stderr, "fuzz-switch-state: invariant broken: %s\n", what);
        std::abort();
    }
}

std::vector<PortEndpoint> endpoints() {
    std::vector<PortEndpoint> e(kPorts + 1);
    for (unsigned p = 1; p <= kPorts; ++p)
        e[p] = {PortEndpoint::Kind::kUnixListen, "/nonexistent/port" + std::to_string(p)};
    return e;
}

// Whether the switch answers a NodeInfo query one hop away on port 1.
bool answers(Switch &sw) {
    const auto out = sw.receive(1, testing::drSmp(iba::kGet, iba::kAttrNodeInfo, 0, {1}));
    return out.size() == 1 && out[0].port == 1;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setLogging(false);
    Switch sw(SwitchConfig{kGuid, kPorts, "fuzzed switch"});
    Server server(sw, endpoints());
    const std::vector<uint8_t> fresh = server.saveState();
    bool taken = true;
    try {
        server.restoreState(std::span(data, size), 1'000'000'000);
    } catch (const std::runtime_error &e) {
        check(e.what()[0] != '\0', "a refused state without a reason");
        check(server.saveState() == fresh, "a refused state changed the switch");
        taken = false;
    }
    if (taken) {
        // What it took, it saves whole (the lease left may differ by the
        // time passed: a state with a running lease saves another number).
        const std::vector<uint8_t> again = server.saveState();
        Switch other(SwitchConfig{kGuid, kPorts, "fuzzed switch"});
        Server second(other, endpoints());
        try {
            second.restoreState(again, 1'000'000'000);
        } catch (const std::runtime_error &) {
            check(false, "a state the switch took saved to one it refuses");
        }
        if (!sw.mkey().leaseRunning())
            check(second.saveState() == again, "a loaded state saved to other bytes");
    }
    // A port set DOWN with its link up trains again, as the server has it
    // do (its peer reconnects).
    const bool downWithLink = sw.port(1).linkUp && sw.port(1).state == iba::kPortStateDown;
    const std::vector<unsigned> resets = sw.takeLinkResets();
    check(downWithLink == (std::find(resets.begin(), resets.end(), 1u) != resets.end()),
          "a port DOWN with its link up is not trained again, or one is that is not");
    if (downWithLink) {
        sw.linkChanged(1, false);
        sw.linkChanged(1, true);
    }
    // Its SMA answers a Get that no M_Key it holds refuses, on a port whose
    // link is up.
    if (sw.port(1).linkUp && (sw.mkey().key() == 0 || sw.mkey().protectBits() < 2))
        check(answers(sw), "the loaded switch does not answer a NodeInfo Get");
    return 0;
}
