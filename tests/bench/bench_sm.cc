// SPDX-License-Identifier: GPL-2.0-or-later
#include "bench_sm.hh"

#include <chrono>
#include <stdexcept>
#include <thread>

#include "mad.hh"
#include "packet.hh"
#include "smp.hh"
#include "smp_packets.hh"

namespace pib::bench {

namespace {

constexpr int kAnswerMs = 5000; // a switch answers an SMP at once; this is a hang
// A switch dials its neighbour again 1 s, then 2 s after a failed try.
constexpr int kLinkMs = 10000;
constexpr uint64_t kSmGuid = 0x0250494200005300;

} // namespace

BenchSm::BenchSm(const std::string &path) : cable_(path) {
    pib_wire_hello hello{};
    hello.node_guid = kSmGuid;
    hello.port_guid = kSmGuid + 1;
    hello.node_type = PIB_WIRE_NODE_CA;
    hello.port = 1;
    send(wire::encode(PIB_WIRE_HELLO,
                      std::span(reinterpret_cast<const uint8_t *>(&hello), sizeof(hello))));
}

void BenchSm::send(const std::vector<uint8_t> &bytes) {
    size_t offset = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kAnswerMs);
    while (offset < bytes.size()) {
        if (std::chrono::steady_clock::now() > deadline)
            throw std::runtime_error("the switch takes no SMP");
        cable_.write(bytes, &offset);
        if (offset < bytes.size())
            waitFor(cable_.fd(), true, 10);
    }
}

std::vector<uint8_t> BenchSm::awaitResponse(uint64_t tid) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kAnswerMs);
    while (std::chrono::steady_clock::now() < deadline) {
        waitFor(cable_.fd(), false, 10);
        reader_.feed(cable_.read());
        wire::FrameReader::Error error;
        while (auto frame = reader_.next(&error)) {
            if (frame->type != PIB_WIRE_PACKET)
                continue; // the switch's HELLO
            iba::ParseError parseError;
            auto packet = iba::parse(frame->payload, &parseError);
            if (!packet || packet->payload.size() != iba::kMadSize)
                continue;
            const iba::Mad mad(packet->payload);
            if (mad.get8(3) == iba::kGetResp && mad.get64(8) == tid)
                return std::move(packet->payload);
        }
        if (error != wire::FrameReader::Error::kNone)
            throw std::runtime_error("the switch's stream is corrupt");
    }
    throw std::runtime_error("a switch did not answer an SMP");
}

std::vector<uint8_t> BenchSm::request(uint8_t method, const std::vector<uint8_t> &path,
                                      uint16_t attr, uint32_t mod,
                                      const std::vector<uint8_t> &data) {
    const uint64_t tid = tid_++;
    std::vector<uint8_t> mad = testing::drSmpMad(method, attr, mod, path, tid);
    std::copy(data.begin(), data.end(), mad.begin() + iba::Mad::kSmpData);
    send(wire::encode(PIB_WIRE_PACKET, testing::drPacket(std::move(mad))));
    std::vector<uint8_t> response = awaitResponse(tid);
    // Bit 15 of a DR SMP's status is its direction, not an error.
    if (const uint16_t status = iba::Mad(response).get16(4) & 0x7fff)
        throw std::runtime_error("a switch refused attribute " + std::to_string(attr) +
                                 " with status " + std::to_string(status));
    return response;
}

void BenchSm::awaitLinks(const std::vector<uint8_t> &path, const std::vector<uint8_t> &ports) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kLinkMs);
    for (uint8_t port : ports)
        for (;;) {
            std::vector<uint8_t> info = request(iba::kGet, path, iba::kAttrPortInfo, port);
            if ((iba::Mad(info).get8(iba::Mad::kSmpData + 32) & 0xf) >= iba::kPortStateInit)
                break;
            if (std::chrono::steady_clock::now() > deadline)
                throw std::runtime_error("switch port " + std::to_string(port) +
                                         ": its link did not come up");
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
}

void BenchSm::configureSwitch(const std::vector<uint8_t> &path,
                              const std::vector<std::pair<uint16_t, uint8_t>> &routes,
                              const std::vector<uint8_t> &ports) {
    std::vector<uint8_t> block(64, 0xff); // LIDs 0..63, no route but those given
    for (const auto &[lid, port] : routes)
        block.at(lid) = port;
    awaitLinks(path, ports);
    request(iba::kSet, path, iba::kAttrLinearForwardingTable, 0, block);
    for (uint8_t state : {iba::kPortStateArmed, iba::kPortStateActive})
        for (uint8_t port : ports) {
            iba::PortInfo info{};
            info.portState = state;
            info.neighborMtu = 5; // 4096, as the devices' ports
            std::vector<uint8_t> mad(iba::kMadSize);
            iba::Mad m(mad);
            iba::writePortInfo(m, info);
            request(iba::kSet, path, iba::kAttrPortInfo, port,
                    {mad.begin() + iba::Mad::kSmpData,
                     mad.begin() + iba::Mad::kSmpData + iba::Mad::kSmpDataSize});
        }
}

} // namespace pib::bench
