// SPDX-License-Identifier: GPL-2.0-or-later
#include "pcap.hh"

#include <pcap/pcap.h>
#include <sys/time.h>

#include "pib_wire.h"

namespace pib::wire {

namespace {

// pcap's number for "InfiniBand, from the LRH", which Wireshark dissects.
constexpr int kLinkTypeInfiniband = 247;

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
    handles->pcap = pcap_open_dead(kLinkTypeInfiniband, PIB_WIRE_MAX_PACKET);
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

bool PacketCapture::record(std::span<const uint8_t> packet) {
    if (finished_)
        return false;
    if (limit_ != 0 && packets_ >= limit_) {
        finished_ = true;
        return false;
    }
    pcap_pkthdr header{};
    gettimeofday(&header.ts, nullptr);
    header.caplen = header.len = static_cast<bpf_u_int32>(packet.size());
    pcap_dump(reinterpret_cast<u_char *>(handles_->dumper), &header, packet.data());
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
