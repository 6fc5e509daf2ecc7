// SPDX-License-Identifier: GPL-2.0-or-later
#include "bench_device.hh"

#include <cstring>
#include <stdexcept>
#include <thread>
#include <unistd.h>

#include "ring_cable.hh"
#include "smp.hh"

namespace pib::bench {

namespace {

// The core says its port is full past this much unsent output, as QEMU's
// glue does, and starts no new work on it until the socket took it.
constexpr size_t kPortQueueBytes = 1 << 20;
constexpr int kTrainMs = 5000; // the switch answers HELLO at once

} // namespace

BenchDevice::BenchDevice(uint16_t lid, const std::string &switchPort, bool rings)
    : node_(PIB_QPT_RC, lid, kRamSize), cable_(switchPort), rings_(rings) {
    FakeHost &host = node_.host;
    host.portQueueLimit = kPortQueueBytes;
    // The core offers the switch a ring cable if its host passes descriptors.
    host.passesDescriptors = rings;
    // The fixture trained the link with a HELLO of its own: unplug that
    // cable, and train the one to the switch.
    pib_core_port_connected(host.core, 1, 0);
    host.portOutput[1].clear();
    pib_core_port_connected(host.core, 1, 1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTrainMs);
    while (portState() != iba::kPortStateInit || (rings_ && !ringsUp())) {
        if (std::chrono::steady_clock::now() > deadline)
            throw std::runtime_error(rings_ && !ringsUp() ? "the switch took no ring cable"
                                                          : "the link to the switch did not train");
        pump(10);
    }
    for (uint8_t state : {iba::kPortStateArmed, iba::kPortStateActive})
        node_.portInfoSet([&](iba::Mad &m) {
            m.set16(iba::Mad::kSmpData + 16, lid);
            m.set8(iba::Mad::kSmpData + 32, state);
            m.set8(iba::Mad::kSmpData + 36, 5 << 4); // NeighborMTU 4096
        });
    if (portState() != iba::kPortStateActive)
        throw std::runtime_error("the port did not become ACTIVE");
}

uint8_t BenchDevice::portState() {
    pib_mad_ifc response{};
    node_.host.mad(iba::kClassSmpLid, iba::kGet, iba::kAttrPortInfo, 1, nullptr, &response);
    return iba::Mad(response.mad).get8(iba::Mad::kSmpData + 32) & 0xf;
}

void BenchDevice::advanceClock() {
    const auto now = std::chrono::steady_clock::now();
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - clock_).count();
    clock_ = now;
    node_.host.advance(static_cast<uint64_t>(ns));
}

void BenchDevice::pump(int waitMs) {
    FakeHost &host = node_.host;
    const bool busy = host.scheduled || host.portOutput[1].size() != sent_;
    if (!busy && waitMs > 0)
        waitFor(cable_.fd(), false, waitMs, host.watchedFd[1]);
    advanceClock();
    receive();
    host.runScheduled();
    transmit();
}

// What came on the stream, then (a ring cable whose doorbell rang) what
// came in the ring, as QEMU's main loop calls the glue's handlers.
void BenchDevice::receive() {
    pib_core *core = node_.host.core;
    for (std::span<const uint8_t> in = cable_.read(); !in.empty(); in = cable_.read())
        pib_core_port_receive(core, 1, in.data(), in.size());
    if (ringsUp() && readable(node_.host.watchedFd[1]))
        pib_core_port_bell(core, 1);
}

// The port's stream output; the ring offer's frame goes with its
// descriptors, after everything before it.
void BenchDevice::transmit() {
    FakeHost &host = node_.host;
    std::vector<uint8_t> &output = host.portOutput[1];
    auto &passed = host.passedFds[1];
    for (;;) {
        const size_t end = passed.empty() ? output.size() : passed.front().at;
        cable_.write(output, &sent_, end);
        if (sent_ < end || passed.empty())
            break;
        uint32_t length;
        std::memcpy(&length, output.data() + sent_ + 8, sizeof(length)); // the core's own frame
        const std::span offer(output.data() + sent_, wire::kHeaderSize + length);
        if (!wire::sendWithFds(cable_.fd(), offer, passed.front().fds))
            throw std::runtime_error("the ring offer did not go");
        for (int fd : passed.front().fds)
            close(fd);
        passed.erase(passed.begin());
        sent_ += offer.size();
    }
    if (sent_ == output.size()) {
        sent_ = 0;
        host.portDrained(1); // clears it, and says so if the core was told it is full
    }
}

} // namespace pib::bench
