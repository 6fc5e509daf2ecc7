// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_command_queue.hh"

#include <algorithm>
#include <array>
#include <cinttypes>
#include <type_traits>

#include "mlx5_ifc.hh"

namespace pib::mlx5 {

uint32_t CommandQueue::ring(uint64_t queue, uint32_t slots) {
    uint32_t completed = 0;
    for (unsigned slot = 0; slot < cmdq::kSlots; ++slot)
        if (slots >> slot & 1 && runSlot(slot, queue + uint64_t{slot} * cmdq::kEntryBytes))
            completed |= 1u << slot;
    return completed;
}

bool CommandQueue::runSlot(unsigned slot, uint64_t layoutAddress) {
    std::array<uint8_t, cmdq::kEntryBytes> layout;
    if (!host_.dmaRead(layoutAddress, layout.data(), layout.size())) {
        host_.guestError(err::kMlx5CmdqDma, "command slot %u at 0x%" PRIx64 " (docs/mlx5.md §3)",
                         slot, layoutAddress);
        return false;
    }
    if (!(layout[cmdq::kStatusOwn] & 1)) {
        host_.guestError(err::kMlx5CmdqNotOwned, "doorbell for command slot %u", slot);
        return false;
    }
    if (layout[cmdq::kType] != cmdq::kTransportPci) {
        host_.guestError(err::kMlx5CmdqBadLayout, "command slot %u: transport type %u, not %u",
                         slot, layout[cmdq::kType], cmdq::kTransportPci);
        complete(layoutAddress, cmdq::kDeliveryDescriptor);
        return true;
    }
    const uint32_t inLength = readBe32(&layout[cmdq::kInLength]);
    const uint32_t outLength = readBe32(&layout[cmdq::kOutLength]);
    if (inLength > kMaxMessageBytes || outLength > kMaxMessageBytes) {
        host_.guestError(err::kMlx5CmdqBadLength,
                         "command slot %u: %u bytes in, %u out; the device takes %u each", slot,
                         inLength, outLength, kMaxMessageBytes);
        complete(layoutAddress,
                 inLength > kMaxMessageBytes ? cmdq::kDeliveryInLength : cmdq::kDeliveryOutLength);
        return true;
    }
    const uint32_t inBeyond = inLength > cmdq::kInlineBytes ? inLength - cmdq::kInlineBytes : 0;
    const uint32_t outBeyond = outLength > cmdq::kInlineBytes ? outLength - cmdq::kInlineBytes : 0;
    std::vector<uint64_t> inBlocks, outBlocks;
    uint8_t delivery = chain(readBe64(&layout[cmdq::kInPointer]), inBeyond, true, &inBlocks);
    if (delivery == cmdq::kDeliveryOk)
        delivery = chain(readBe64(&layout[cmdq::kOutPointer]), outBeyond, false, &outBlocks);
    std::vector<uint8_t> in(std::max(inLength, cmdq::kInlineBytes));
    std::copy_n(&layout[cmdq::kInInline], cmdq::kInlineBytes, in.begin());
    if (delivery == cmdq::kDeliveryOk &&
        !copyData(inBlocks, std::span(in).subspan(cmdq::kInlineBytes)))
        delivery = cmdq::kDeliveryDescriptor;
    if (delivery != cmdq::kDeliveryOk) {
        complete(layoutAddress, delivery);
        return true;
    }
    in.resize(inLength);
    std::vector<uint8_t> out(std::max(outLength, cmdq::kInlineBytes));
    execute_(slot, in, out);
    // The first 16 bytes go back in the slot, the rest to the mailboxes.
    if (!host_.dmaWrite(layoutAddress + cmdq::kOutInline, out.data(), cmdq::kInlineBytes) ||
        !copyData(outBlocks, std::span<const uint8_t>(out).subspan(cmdq::kInlineBytes, outBeyond)))
        delivery = cmdq::kDeliveryDescriptor;
    complete(layoutAddress, delivery);
    return true;
}

uint8_t CommandQueue::chain(uint64_t first, uint32_t bytes, bool input,
                            std::vector<uint64_t> *blocks) {
    const char *which = input ? "input" : "output";
    uint64_t block = first;
    for (uint32_t number = 0; number * cmdq::kBlockData < bytes; ++number) {
        if (block == 0 || block % 8) {
            host_.guestError(err::kMlx5CmdqBadLayout,
                             "%s mailbox %u at 0x%" PRIx64 ": %s (docs/mlx5.md §3)", which, number,
                             block, block ? "not 8-byte aligned" : "the chain ends early");
            return block ? (input ? cmdq::kDeliveryInPointerAlign : cmdq::kDeliveryOutPointerAlign)
                         : (input ? cmdq::kDeliveryInLength : cmdq::kDeliveryOutLength);
        }
        std::array<uint8_t, cmdq::kBlockBytes - cmdq::kBlockNext> tail;
        if (!host_.dmaRead(block + cmdq::kBlockNext, tail.data(), tail.size())) {
            host_.guestError(err::kMlx5CmdqDma, "%s mailbox %u at 0x%" PRIx64, which, number,
                             block);
            return cmdq::kDeliveryDescriptor;
        }
        const uint32_t claimed = readBe32(&tail[cmdq::kBlockNumber - cmdq::kBlockNext]);
        if (claimed != number) {
            host_.guestError(err::kMlx5CmdqBadLayout, "%s mailbox %u says it is block %u", which,
                             number, claimed);
            return cmdq::kDeliveryBadBlockNumber;
        }
        blocks->push_back(block);
        block = readBe64(tail.data());
    }
    return cmdq::kDeliveryOk;
}

// The data areas of `blocks`, 512 bytes each, to or from `bytes`.
template <class Bytes> bool CommandQueue::copyData(std::span<const uint64_t> blocks, Bytes bytes) {
    constexpr bool toDevice = !std::is_const_v<typename Bytes::element_type>;
    for (size_t i = 0; i < blocks.size(); ++i) {
        const auto part = bytes.subspan(i * cmdq::kBlockData);
        const size_t n = std::min<size_t>(part.size(), cmdq::kBlockData);
        bool ok;
        if constexpr (toDevice)
            ok = host_.dmaRead(blocks[i], part.data(), n);
        else
            ok = host_.dmaWrite(blocks[i], part.data(), n);
        if (!ok) {
            host_.guestError(err::kMlx5CmdqDma, "%s mailbox %zu at 0x%" PRIx64,
                             toDevice ? "input" : "output", i, blocks[i]);
            return false;
        }
    }
    return true;
}

// The slot goes back to the driver: ownership clear, the delivery status
// above it, written after everything else the command wrote.
void CommandQueue::complete(uint64_t layoutAddress, uint8_t delivery) {
    const uint8_t statusOwn = static_cast<uint8_t>(delivery << 1);
    if (!host_.dmaWrite(layoutAddress + cmdq::kStatusOwn, &statusOwn, 1))
        host_.guestError(err::kMlx5CmdqDma, "command slot at 0x%" PRIx64 " became unwritable",
                         layoutAddress);
}

} // namespace pib::mlx5
