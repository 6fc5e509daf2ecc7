// SPDX-License-Identifier: GPL-2.0-or-later
// Packet capture to a pcap file that Wireshark and tshark read: link type
// LINKTYPE_INFINIBAND (247), each record a whole packet from the LRH to
// the VCRC, timestamped with the host's wall clock. Written through
// libpcap; every record is flushed, so the file can be read while the
// capture runs and nothing is lost when the process is killed.
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

    // Records one packet; false once the limit is reached (that packet and
    // any after it are not recorded) or a write failed.
    bool record(std::span<const uint8_t> packet);
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
