// SPDX-License-Identifier: GPL-2.0-or-later
// Packet capture to a pcap file that Wireshark and tshark read as
// InfiniBand: each record a whole packet from the LRH to the VCRC,
// timestamped with the host's wall clock, behind an ERF record header of
// type InfiniBand (link type LINKTYPE_ERF, 197, as Mellanox's ibdump
// writes). Wireshark has no reader for LINKTYPE_INFINIBAND (247), which
// tcpdump.org only reserves. The ERF header's interface number says the
// direction: 0 received, 1 sent. Written through libpcap; every record is
// flushed, so the file can be read while the capture runs and nothing is
// lost when the process is killed.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace pib::wire {

class PacketCapture {
  public:
    // Opens (truncates) `path`. `limit` packets at most, 0 for no limit.
    // Null with the reason in `error` when the file cannot be written.
    static std::unique_ptr<PacketCapture> open(const std::string &path, uint64_t limit,
                                               std::string *error);
    ~PacketCapture();
    PacketCapture(const PacketCapture &) = delete;
    PacketCapture &operator=(const PacketCapture &) = delete;

    enum class Direction : uint8_t { kReceived = 0, kSent = 1 };
    // Records one packet; false once the limit is reached (that packet and
    // any after it are not recorded) or a write failed.
    bool record(std::span<const uint8_t> packet, Direction direction);
    bool finished() const { return finished_; }
    uint64_t packets() const { return packets_; }
    const std::string &path() const { return path_; }
    // "1234 packets to FILE" (and why it stopped, if it did).
    std::string describe() const;

  private:
    struct Handles;
    PacketCapture(std::unique_ptr<Handles> handles, std::string path, uint64_t limit);

    std::unique_ptr<Handles> handles_;
    std::string path_;
    uint64_t limit_;
    uint64_t packets_ = 0;
    bool finished_ = false;
    bool failed_ = false;
};

} // namespace pib::wire
