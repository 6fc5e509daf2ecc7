// SPDX-License-Identifier: GPL-2.0-or-later
// A fake host whose device has the ConnectX personality, with what a
// driver does to run commands: the command queue in a guest page, the
// mailbox chains, the doorbell and the polling of the ownership bit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "fake_host.hh"
#include "mlx5/mlx5_ifc.hh"

class Mlx5Host : public FakeHost {
  public:
    static pib_core_config mlx5Config() {
        pib_core_config config = defaultConfig();
        config.personality = PIB_PERSONALITY_MLX5;
        return config;
    }

    // With the queue's address written when `withQueue`.
    explicit Mlx5Host(bool withQueue = true) : FakeHost(mlx5Config()) {
        queue = alloc(PIB_PAGE_SIZE);
        if (withQueue) {
            isegWrite(pib::mlx5::iseg::kCmdqAddrHigh, static_cast<uint32_t>(queue >> 32));
            isegWrite(pib::mlx5::iseg::kCmdqAddrLowSize, static_cast<uint32_t>(queue));
        }
    }

    // The initialization segment's dwords as the driver reads and writes
    // them (ioread32be, iowrite32be).
    uint32_t isegRead(uint32_t offset) { return __builtin_bswap32(read32(PIB_BAR_REGS, offset)); }
    void isegWrite(uint32_t offset, uint32_t value) {
        write32(PIB_BAR_REGS, offset, __builtin_bswap32(value));
    }

    struct Reply {
        uint8_t statusOwn = 0xff; // as the slot holds it after the doorbell
        std::vector<uint8_t> out;
        uint8_t delivery() const { return statusOwn >> 1; }
        bool owned() const { return statusOwn & 1; } // still the device's
        uint8_t status() const { return static_cast<uint8_t>(get(pib::mlx5::kStatus)); }
        uint32_t syndrome() const { return static_cast<uint32_t>(get(pib::mlx5::kSyndrome)); }
        uint64_t get(pib::mlx5::Field f) const { return pib::mlx5::get(out, f); }
    };

    // An input of `bytes` (at least the header) for `opcode`.
    static std::vector<uint8_t> input(uint16_t opcode, uint16_t opMod = 0, size_t bytes = 0x10) {
        std::vector<uint8_t> in(bytes);
        pib::mlx5::set(in, pib::mlx5::kOpcode, opcode);
        pib::mlx5::set(in, pib::mlx5::kOpMod, opMod);
        return in;
    }

    // Runs a command in `slot` and returns what the device wrote back.
    Reply run(const std::vector<uint8_t> &in, uint32_t outBytes, unsigned slot = 0) {
        using namespace pib::mlx5;
        const uint64_t entry = queue + slot * cmdq::kEntryBytes;
        std::vector<uint8_t> layout(cmdq::kEntryBytes);
        layout[cmdq::kType] = cmdq::kTransportPci;
        writeBe32(&layout[cmdq::kInLength], static_cast<uint32_t>(in.size()));
        writeBe32(&layout[cmdq::kOutLength], outBytes);
        std::copy_n(in.begin(), std::min<size_t>(in.size(), cmdq::kInlineBytes),
                    &layout[cmdq::kInInline]);
        const auto inBlocks = mailboxes(in.size() > 16 ? in.size() - 16 : 0);
        const auto outBlocks = mailboxes(outBytes > 16 ? outBytes - 16 : 0);
        for (size_t i = 0; i < inBlocks.size(); ++i) {
            const size_t from = 16 + i * cmdq::kBlockData;
            std::copy_n(in.begin() + from, std::min<size_t>(in.size() - from, cmdq::kBlockData),
                        at(inBlocks[i]));
        }
        writeBe64(&layout[cmdq::kInPointer], inBlocks.empty() ? 0 : inBlocks[0]);
        writeBe64(&layout[cmdq::kOutPointer], outBlocks.empty() ? 0 : outBlocks[0]);
        layout[cmdq::kStatusOwn] = 1;
        std::copy(layout.begin(), layout.end(), at(entry));
        isegWrite(iseg::kCmdDoorbell, 1u << slot);
        Reply reply;
        reply.statusOwn = *at(entry + cmdq::kStatusOwn);
        reply.out.assign(at(entry + cmdq::kOutInline), at(entry + cmdq::kOutInline) + 16);
        for (size_t i = 0; i < outBlocks.size(); ++i) {
            const size_t n =
                std::min<size_t>(outBytes - 16 - i * cmdq::kBlockData, cmdq::kBlockData);
            reply.out.insert(reply.out.end(), at(outBlocks[i]), at(outBlocks[i]) + n);
        }
        reply.out.resize(std::max<uint32_t>(outBytes, 16));
        return reply;
    }

    // A chain of mailboxes for `bytes` of data, numbered and linked.
    std::vector<uint64_t> mailboxes(size_t bytes) {
        using namespace pib::mlx5;
        std::vector<uint64_t> blocks;
        for (size_t n = 0; n * cmdq::kBlockData < bytes; ++n)
            blocks.push_back(alloc(1024, 1024));
        for (size_t i = 0; i < blocks.size(); ++i) {
            writeBe64(at(blocks[i] + cmdq::kBlockNext), i + 1 < blocks.size() ? blocks[i + 1] : 0);
            writeBe32(at(blocks[i] + cmdq::kBlockNumber), static_cast<uint32_t>(i));
        }
        return blocks;
    }

    // ENABLE_HCA then INIT_HCA; true when both succeed.
    // ENABLE_HCA, then what mlx5_core's handle_hca_cap_odp asks for (the
    // memory scheme's page faults: mem_page_fault set in the current ODP
    // page), then INIT_HCA.
    bool bringUp() {
        if (run(input(0x104), 16).status() != 0)
            return false;
        const Reply odp = run(input(0x100, 2 << 1 | 1), 0x10 + 4096);
        std::vector<uint8_t> set = input(0x109, 2 << 1, 0x10 + 4096);
        std::copy(odp.out.begin() + 0x10, odp.out.end(), set.begin() + 0x10);
        set[0x10 + 0xc0] |= 0x80; // mem_page_fault
        return odp.status() == 0 && run(set, 16).status() == 0 &&
               run(input(0x102), 16).status() == 0;
    }

    // UAR page `uar`'s doorbell at `offset`, as the driver writes it
    // (a big-endian dword).
    void uarWrite(uint32_t uar, uint32_t offset, uint32_t value) {
        write32(PIB_BAR_REGS, uint64_t{uar} * 4096 + offset, __builtin_bswap32(value));
    }

    // ALLOC_UAR's page (the command must succeed).
    uint32_t allocUar() {
        const Reply r = run(input(0x802), 16);
        if (r.status() != 0)
            throw std::runtime_error("ALLOC_UAR failed");
        return static_cast<uint32_t>(r.get(pib::mlx5::field(0x48, 24)));
    }

    // A CREATE_EQ input for 2^logSize EQEs in fresh contiguous 4 KiB
    // pages (their first at *ring), taking event types `types` (of the
    // first mask word), signalling `vector`, with its doorbell on `uar`.
    std::vector<uint8_t> eqInput(uint32_t logSize, uint64_t types, uint32_t vector, uint32_t uar,
                                 uint64_t *ring) {
        using namespace pib::mlx5;
        const uint64_t bytes = uint64_t{64} << logSize;
        const uint64_t pages = (bytes + 4095) / 4096;
        *ring = alloc(pages * 4096);
        std::fill(at(*ring), at(*ring) + pages * 4096, 0x01); // owner 1, as the driver does
        std::vector<uint8_t> in = input(0x301, 0, 0x110 + 8 * pages);
        set(in, field(0xe3, 5), logSize);
        set(in, field(0xe8, 24), uar);
        set(in, field(0x134, 12), vector);
        writeBe64(&in[0x58], types);
        for (uint64_t i = 0; i < pages; ++i)
            writeBe64(&in[0x110 + 8 * i], *ring + 4096 * i);
        return in;
    }

    // A CREATE_CQ input for 2^logSize CQEs in fresh 4 KiB pages (the first
    // at *ring, every owner bit 1 as the driver leaves them) reporting to
    // `eqn`, armed through `uar`, with its doorbell record at *record.
    // A CQ of 2^logSize CQEs of 64 bytes, or 128 (`cqeSize` 1), each
    // initialised as libmlx5 does: the 64-byte CQE (a 128-byte one's second
    // half) invalid, owner bit 1.
    std::vector<uint8_t> cqInput(uint32_t logSize, uint32_t eqn, uint32_t uar, uint64_t *ring,
                                 uint64_t *record, uint32_t cqeSize = 0) {
        using namespace pib::mlx5;
        const uint64_t cqeBytes = uint64_t{64} << cqeSize;
        const uint64_t pages = ((cqeBytes << logSize) + 4095) / 4096;
        *ring = alloc(pages * 4096);
        for (uint64_t i = 0; i < pages * 4096 / cqeBytes; ++i)
            at(*ring + cqeBytes * i + cqeBytes - 64)[0x3f] = 0xf1; // MLX5_CQE_INVALID, owner 1
        *record = alloc(64, 64);
        std::vector<uint8_t> in = input(0x400, 0, 0x110 + 8 * pages);
        set(in, field(0x80 + 0x08, 3), cqeSize);
        set(in, field(0x80 + 0x63, 5), logSize);
        set(in, field(0x80 + 0x68, 24), uar);
        set(in, field(0x80 + 0xa0, 32), eqn);
        set(in, field(0x80 + 0x1c0, 64), *record);
        for (uint64_t i = 0; i < pages; ++i)
            writeBe64(&in[0x110 + 8 * i], *ring + 4096 * i);
        return in;
    }

    uint64_t queue = 0;
};
