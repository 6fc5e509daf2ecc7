// SPDX-License-Identifier: GPL-2.0-or-later
// fuzz-core's memory oracle: guest RAM the device has no right to write
// keeps its bytes. The harness names the pages the device may write (what
// the attacker's MRs with write access cover, its CQ and EQ rings, the
// command mailbox), takes a snapshot once the set-up is done, and mirrors
// its own later writes into the snapshot. Any other difference is a DMA
// write the device should have refused: into another tenant's memory, a
// WQE ring, a page no MR covers.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "fake_host.hh"

namespace pib::fuzz {

class MemoryWatch {
  public:
    explicit MemoryWatch(FakeHost &host)
        : host_(host), deviceMayWrite_(host.ram.size() / PIB_PAGE_SIZE, false) {}

    // The pages that hold [addr, addr + len) are the device's to write.
    void allowDeviceWrites(uint64_t addr, uint64_t len) {
        const uint64_t first = (addr - FakeHost::kRamBase) / PIB_PAGE_SIZE;
        const uint64_t last = (addr + len - 1 - FakeHost::kRamBase) / PIB_PAGE_SIZE;
        for (uint64_t page = first; page <= last; ++page)
            deviceMayWrite_.at(page) = true;
    }

    // From now on every other page must keep its bytes.
    void arm() {
        snapshot_.assign(host_.ram.begin(), host_.ram.end());
        armed_ = true;
    }
    bool armed() const { return armed_; }

    // Every write of the harness to guest RAM goes through here, so that
    // the snapshot holds what the guest itself wrote.
    void write(uint64_t addr, const void *bytes, size_t len) {
        if (len == 0)
            return;
        std::memcpy(host_.at(addr), bytes, len);
        if (armed_)
            std::memcpy(&snapshot_[addr - FakeHost::kRamBase], bytes, len);
    }
    template <class T> void poke(uint64_t addr, const T &value) {
        write(addr, &value, sizeof(value));
    }
    void zero(uint64_t addr, size_t len) {
        std::memset(host_.at(addr), 0, len);
        if (armed_)
            std::memset(&snapshot_[addr - FakeHost::kRamBase], 0, len);
    }

    // The guest address of the first page the device changed without the
    // right to; nullopt when there is none.
    std::optional<uint64_t> firstForbiddenChange() const {
        for (size_t page = 0; page < deviceMayWrite_.size(); ++page) {
            const size_t at = page * PIB_PAGE_SIZE;
            if (!deviceMayWrite_[page] &&
                std::memcmp(&host_.ram[at], &snapshot_[at], PIB_PAGE_SIZE) != 0)
                return FakeHost::kRamBase + at;
        }
        return std::nullopt;
    }

  private:
    FakeHost &host_;
    std::vector<bool> deviceMayWrite_; // per page of guest RAM
    // One buffer for every input, as FakeHost keeps guest RAM: fresh pages
    // for each would cost more than the input's work.
    static inline std::vector<uint8_t> buffer_;
    std::vector<uint8_t> &snapshot_ = buffer_;
    bool armed_ = false;
};

} // namespace pib::fuzz
