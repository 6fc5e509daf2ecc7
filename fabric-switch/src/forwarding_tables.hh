// SPDX-License-Identifier: GPL-2.0-or-later
// A switch's forwarding tables (IBA 18.2.4.3): the LFT, an output port
// per unicast LID, and the MFT, a mask of ports per multicast LID. Each
// holds the blocks up to the last one the SM wrote, not its whole
// capacity: a simulated fabric of a thousand switches whose SM routes ten
// thousand LIDs keeps 10,000 LFT entries a switch, not 49,152, and the
// MFT blocks of the groups in use.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace pib::fabric {

class ForwardingTables {
  public:
    static constexpr unsigned kLftCap = 49152; // unicast LIDs
    static constexpr unsigned kLftBlock = 64;  // entries a LinearForwardingTable block holds
    static constexpr unsigned kMftCap = 1024;  // multicast LIDs from 0xc000
    static constexpr unsigned kMftBlock = 32;  // entries a MulticastForwardingTable block holds
    static constexpr uint8_t kNoPort = 0xff;   // an LFT entry the SM did not write
    using Masks = std::array<uint16_t, 16>;    // ports 0-255, 16 a position

    // The output port of unicast `lid`; kNoPort for one with no entry.
    uint8_t port(unsigned lid) const { return lid < lft_.size() ? lft_[lid] : kNoPort; }
    // LFT block `block` (< kLftCap / kLftBlock): its entries, kNoPort for
    // those never written.
    std::array<uint8_t, kLftBlock> lftBlock(unsigned block) const {
        std::array<uint8_t, kLftBlock> entries;
        entries.fill(kNoPort);
        const size_t at = size_t{block} * kLftBlock;
        if (at < lft_.size())
            std::copy_n(lft_.begin() + static_cast<long>(at), kLftBlock, entries.begin());
        return entries;
    }
    void setLftBlock(unsigned block, std::span<const uint8_t, kLftBlock> entries) {
        const size_t at = size_t{block} * kLftBlock;
        if (at >= lft_.size())
            grow(lft_, at + kLftBlock, kNoPort);
        std::copy(entries.begin(), entries.end(), lft_.begin() + static_cast<long>(at));
    }

    // The ports of multicast LID 0xc000 + `index` (< kMftCap); none for
    // one never written.
    Masks masks(unsigned index) const { return index < mft_.size() ? mft_[index] : Masks{}; }
    void setMask(unsigned index, unsigned position, uint16_t mask) {
        if (index >= mft_.size())
            grow(mft_, (index / kMftBlock + 1) * size_t{kMftBlock}, Masks{});
        mft_[index][position] = mask;
    }

    // What the tables hold now, in entries (what a switch pays for them).
    size_t lftEntries() const { return lft_.size(); }
    size_t mftEntries() const { return mft_.size(); }

    // The tables as they are held, as a switch's saved state holds them:
    // whole blocks, up to the last one written.
    std::span<const uint8_t> lft() const { return lft_; }
    std::span<const Masks> mft() const { return mft_; }
    // Takes tables of whole blocks (at most their capacity: the caller
    // checks), keeping the blocks up to the last one that holds an entry.
    void load(std::vector<uint8_t> lft, std::vector<Masks> mft) {
        size_t lftEnd = lft.size();
        while (lftEnd && lft[lftEnd - 1] == kNoPort)
            --lftEnd;
        lft.resize((lftEnd + kLftBlock - 1) / kLftBlock * kLftBlock);
        size_t mftEnd = mft.size();
        while (mftEnd && mft[mftEnd - 1] == Masks{})
            --mftEnd;
        mft.resize((mftEnd + kMftBlock - 1) / kMftBlock * kMftBlock);
        lft.shrink_to_fit();
        mft.shrink_to_fit();
        lft_ = std::move(lft);
        mft_ = std::move(mft);
    }

  private:
    // An SM writes the blocks in order: a quarter more room at a time
    // keeps both the copies and the room left over small.
    template <typename T> static void grow(std::vector<T> &table, size_t size, const T &fill) {
        if (size > table.capacity())
            table.reserve(std::max(size, table.capacity() + table.capacity() / 4));
        table.resize(size, fill);
    }

    std::vector<uint8_t> lft_; // whole blocks, kNoPort where unwritten
    std::vector<Masks> mft_;   // whole blocks, no ports where unwritten
};

} // namespace pib::fabric
