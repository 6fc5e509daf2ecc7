// SPDX-License-Identifier: GPL-2.0-or-later
#include "pcap.hh"

#include <algorithm>

#include <pcap/pcap.h>
#include <sys/time.h>

#include "pib_wire.h"

namespace pib::wire {

namespace {

// pcap's link type for records with an Endace ERF header, and the ERF
// record type of an InfiniBand packet from the LRH on (no more header).
constexpr int kLinkTypeErf = 197;
constexpr uint8_t kErfTypeInfiniband = 21;
constexpr uint8_t kErfFlagVariableLength = 0x04;
constexpr size_t kErfHeaderSize = 16;
constexpr size_t kMaxRecord = kErfHeaderSize + PIB_WIRE_MAX_PACKET;

// The ERF record header: a little-endian 32.32 fixed-point timestamp, then
// type, flags (bits 1:0 the interface), and big-endian record length,
// loss counter and wire length.
void erfHeader(uint8_t *h, const timeval &ts, size_t packet, uint8_t interface) {
    const uint64_t stamp = (uint64_t(ts.tv_sec) << 32) + (uint64_t(ts.tv_usec) << 32) / 1000000;
    for (int i = 0; i < 8; ++i)
        h[i] = static_cast<uint8_t>(stamp >> (8 * i));
    h[8] = kErfTypeInfiniband;
    h[9] = static_cast<uint8_t>(kErfFlagVariableLength | (interface & 3));
    const size_t rlen = kErfHeaderSize + packet;
    h[10] = static_cast<uint8_t>(rlen >> 8), h[11] = static_cast<uint8_t>(rlen);
    h[12] = h[13] = 0;
    h[14] = static_cast<uint8_t>(packet >> 8), h[15] = static_cast<uint8_t>(packet);
}

} // namespace

struct PacketCapture::Handles {
    pcap_t *pcap = nullptr;
    pcap_dumper_t *dumper = nullptr;
    ~Handles() {
        if (dumper)
            pcap_dump_close(dumper);
        if (pcap)
            pcap_close(pcap);
    }
};

std::unique_ptr<PacketCapture> PacketCapture::open(const std::string &path, uint64_t limit,
                                                   std::string *error) {
    auto handles = std::make_unique<Handles>();
    handles->pcap = pcap_open_dead(kLinkTypeErf, kMaxRecord);
    if (!handles->pcap) {
        *error = "libpcap cannot make a capture handle";
        return nullptr;
    }
    handles->dumper = pcap_dump_open(handles->pcap, path.c_str());
    if (!handles->dumper) {
        *error = pcap_geterr(handles->pcap);
        return nullptr;
    }
    return std::unique_ptr<PacketCapture>(new PacketCapture(std::move(handles), path, limit));
}

PacketCapture::PacketCapture(std::unique_ptr<Handles> handles, std::string path, uint64_t limit)
    : handles_(std::move(handles)), path_(std::move(path)), limit_(limit) {}

PacketCapture::~PacketCapture() = default;

bool PacketCapture::record(std::span<const uint8_t> packet, Direction direction) {
    if (finished_)
        return false;
    if (limit_ != 0 && packets_ >= limit_) {
        finished_ = true;
        return false;
    }
    if (packet.size() > PIB_WIRE_MAX_PACKET)
        packet = packet.first(PIB_WIRE_MAX_PACKET); // never: frames are no longer
    uint8_t record[kMaxRecord];
    pcap_pkthdr header{};
    gettimeofday(&header.ts, nullptr);
    erfHeader(record, header.ts, packet.size(), static_cast<uint8_t>(direction));
    std::copy(packet.begin(), packet.end(), record + kErfHeaderSize);
    header.caplen = header.len = static_cast<bpf_u_int32>(kErfHeaderSize + packet.size());
    pcap_dump(reinterpret_cast<u_char *>(handles_->dumper), &header, record);
    if (pcap_dump_flush(handles_->dumper) != 0) {
        failed_ = finished_ = true;
        return false;
    }
    ++packets_;
    if (limit_ != 0 && packets_ >= limit_)
        finished_ = true;
    return true;
}

std::string PacketCapture::describe() const {
    std::string text =
        std::to_string(packets_) + (packets_ == 1 ? " packet" : " packets") + " to " + path_;
    if (failed_)
        text += " (stopped: the file cannot be written)";
    else if (finished_)
        text += " (stopped: the limit was reached)";
    return text;
}

} // namespace pib::wire
