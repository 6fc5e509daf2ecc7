// SPDX-License-Identifier: GPL-2.0-or-later
// The UMR WQEs of indirect keys (docs/mlx5.md §10.4), as libmlx5 posts
// them from a process's QP: mlx5dv_wr_mkey_configure with its access and
// layout setters (and mlx5dv_wr_mr_list and _interleaved, made of them),
// and ibv_post_send's LOCAL_INV. The layout is inline after the key
// segment: a list of KLM entries, or a repeat block. And mlx5_ib's own
// fast registration of a KLM key (an IB_MR_TYPE_SG_GAPS region), whose
// list may be behind a pointer.
#include <algorithm>

#include "limits.hh"
#include "mlx5_ifc.hh"
#include "mlx5_umr.hh"
#include "mlx5_umr_segments.hh"

namespace pib::mlx5::umr {

namespace {

using namespace segments;

// The fields a UMR of an indirect key may set: its range, key, rights,
// remote invalidation and free state; never its page size (it has no
// pages), PD or signature.
constexpr uint64_t kIndirectFields = mask::kLength | mask::kStartAddress | mask::kKey | mask::kQpn |
                                     mask::kRemoteInvalidate | mask::kRights | mask::kAtomic |
                                     mask::kFree;
constexpr uint64_t kInvalidationFields = mask::kFree | mask::kKey | mask::kQpn;
constexpr uint8_t kIndirectFlags =
    control::kInline | control::kOffsetEnable | control::kCheckFree | control::kCheckQpn;

constexpr size_t kEntryBytes = 16;
// A KLM entry: byte count, key, address (struct mlx5_wqe_umr_klm_seg).
// A repeat block's header: its block's bytes, the op that marks it, the
// repeat count and the entry count (mlx5_wqe_umr_repeat_block_seg); its
// entries: stride, byte count, key, address (mlx5_wqe_umr_repeat_ent_seg).
constexpr uint32_t kRepeatBlockOp = 0x400;

// Rights named by the mask (LR is always there: local read is).
uint32_t accessMaskOf(uint64_t fields) {
    return (fields & (1u << 18) ? PIB_ACCESS_LOCAL_WRITE : 0) |
           (fields & (1u << 19) ? PIB_ACCESS_REMOTE_READ : 0) |
           (fields & (1u << 20) ? PIB_ACCESS_REMOTE_WRITE : 0) |
           (fields & mask::kAtomic ? PIB_ACCESS_REMOTE_ATOMIC : 0);
}

// A KLM list, entries in order until they cover `length`; the rest of
// the table is padding.
const char *readList(const uint8_t *p, uint32_t octowords, uint64_t length, IndirectLayout &l) {
    uint64_t covered = 0;
    for (uint32_t i = 0; i < octowords && covered < length; ++i, p += kEntryBytes) {
        const IndirectEntry e{.addr = readBe64(p + 8),
                              .key = readBe32(p + 4),
                              .bytes = readBe32(p),
                              .offset = covered};
        if (e.bytes == 0)
            return "an entry of 0 bytes";
        l.entries.push_back(e);
        covered += e.bytes;
    }
    return covered < length ? "entries that cover less than the length" : nullptr;
}

// A repeat block, if the first octoword is a consistent header for
// `length` bytes: its op, one entry or more within the table, the
// entries' bytes its block's, as many blocks as the length holds.
// (A KLM entry naming key 0x400 has the op where the header has it;
// only a header that adds up is taken for one.)
bool isRepeatBlock(const uint8_t *p, uint32_t octowords, uint64_t length) {
    const uint32_t numEntries = readBe16(p + 14);
    if (readBe32(p + 4) != kRepeatBlockOp || numEntries == 0 || numEntries + 1u > octowords)
        return false;
    uint64_t block = 0;
    for (uint32_t i = 1; i <= numEntries; ++i)
        block += readBe16(p + i * kEntryBytes + 2);
    const uint64_t repeats = readBe32(p + 8);
    return block && block == readBe32(p) && length % block == 0 && length / block == repeats;
}

void readRepeatBlock(const uint8_t *p, IndirectLayout &l) {
    l.repeats = readBe32(p + 8);
    const uint32_t numEntries = readBe16(p + 14);
    uint64_t offset = 0;
    for (uint32_t i = 1; i <= numEntries; ++i) {
        const uint8_t *q = p + i * kEntryBytes;
        const IndirectEntry e{.addr = readBe64(q + 8),
                              .key = readBe32(q + 4),
                              .bytes = readBe16(q + 2),
                              .stride = readBe16(q),
                              .offset = offset};
        l.entries.push_back(e);
        offset += e.bytes;
    }
}

// The fields of a configure WQE: what its mask names, from the key
// segment.
void configureFields(const uint8_t *c, const uint8_t *k, IndirectUpdate &u) {
    const uint64_t fields = readBe64(c + control::kMkeyMask);
    u.before = c[control::kFlags] & control::kCheckFree ? IndirectUpdate::Before::kFree
                                                        : IndirectUpdate::Before::kAnything;
    u.setsLength = fields & mask::kLength;
    u.setsStart = fields & mask::kStartAddress;
    u.setsVariant = fields & mask::kKey;
    u.setsFree = fields & mask::kFree;
    u.setsRemoteInvalidate = fields & mask::kRemoteInvalidate;
    u.accessMask = accessMaskOf(fields);
    u.start = readBe64(k + mkey::kStartAddress);
    u.length = readBe64(k + mkey::kLength);
    u.access = accessOf(k[mkey::kFlags]);
    u.variant = k[mkey::kVariant];
    u.free = k[mkey::kStatus] & mkey::kStatusFree;
    u.remoteInvalidate = k[mkey::kRemoteInvalidate] & mkey::kRemoteInvalidateBit;
    u.octowords = readBe16(c + control::kXltOctowords);
}

// A layout of `octowords` entries at `p` for u.length bytes: a repeat
// block or a list.
const char *layoutAt(const uint8_t *p, uint32_t octowords, IndirectUpdate &u) {
    IndirectLayout &l = u.layout.emplace();
    if (isRepeatBlock(p, octowords, u.length))
        readRepeatBlock(p, l);
    else if (const char *why = readList(p, octowords, u.length, l))
        return why;
    return l.invalid();
}

// The configure WQE's layout, inline after the key segment.
const char *readLayout(std::span<const uint8_t> wqe, size_t used, uint8_t flags,
                       IndirectUpdate &u) {
    if (!(flags & control::kInline))
        return "a layout behind a pointer (the device reads a process's layout inline)";
    if (!u.setsLength)
        return "a layout without the length it covers";
    if (kTranslations + size_t{u.octowords} * kEntryBytes > used)
        return "fewer inline entries than its octowords";
    if (u.length == 0)
        return "a layout of no bytes";
    return layoutAt(wqe.data() + kTranslations, u.octowords, u);
}

// mlx5_ib's IB_WR_REG_MR of a KLM key: its fields, and its list inline
// or where its data segment points (into out.sges, for the requester to
// read through the segment's L_Key).
const char *kernelIndirectOf(std::span<const uint8_t> wqe, size_t used, Wqe &out,
                             IndirectUpdate &u) {
    constexpr uint64_t kFields = mask::kRegistration | mask::kRemoteInvalidate | mask::kRights |
                                 mask::kAtomic | mask::kSmallFence;
    const uint8_t *c = wqe.data() + kControl;
    const uint8_t *k = wqe.data() + kMkey;
    const uint8_t flags = c[control::kFlags];
    const uint64_t fields = readBe64(c + control::kMkeyMask);
    if (flags & ~(control::kInline | control::kCheckFree))
        return "control flags the device does not know for a fast registration";
    if (fields & ~kFields || k[mkey::kLength64] & 0x80)
        return "a mask setting fields a KLM key does not have, or length64";
    configureFields(c, k, u);
    if (u.octowords == 0 || u.octowords > limits::kMaxIndirectEntries || u.length == 0)
        return "no entries, more than a key's table holds, or a length of 0";
    if (flags & control::kInline)
        return readLayout(wqe, used, flags, u);
    if (kTranslations + kDataSegment > used)
        return "no data segment for the entries";
    const uint8_t *data = wqe.data() + kTranslations;
    const uint32_t bytes = std::min<uint32_t>(readBe32(data), u.octowords * kEntryBytes);
    if (bytes < kEntryBytes)
        return "a data segment shorter than one entry";
    out.sges.push_back({bytes, readBe32(data + 4), readBe64(data + 8)});
    return nullptr;
}

const char *indirectOf(std::span<const uint8_t> wqe, size_t used, IndirectUpdate &u) {
    const uint8_t *c = wqe.data() + kControl;
    const uint8_t *k = wqe.data() + kMkey;
    const uint8_t flags = c[control::kFlags];
    const uint64_t fields = readBe64(c + control::kMkeyMask);
    if (flags & ~kIndirectFlags)
        return "control flags the device does not know for an indirect key";
    if (flags & control::kOffsetEnable &&
        (readBe16(c + control::kXltOffset) || readBe32(c + control::kXltOffsetHigh)))
        return "a translation offset (an indirect key is laid out whole)";
    if (k[mkey::kStatus] & mkey::kStatusFree && fields & mask::kFree &&
        !(fields & ~kInvalidationFields)) {
        if (readBe16(c + control::kXltOctowords))
            return "an invalidation with a layout";
        u.invalidation = u.setsFree = u.free = true;
        return nullptr;
    }
    if (fields & ~kIndirectFields)
        return "a mask naming fields an indirect key does not have (page size, PD, signature)";
    if (fields & mask::kLength && k[mkey::kLength64] & 0x80)
        return "length64: a key over all addresses";
    configureFields(c, k, u);
    return u.octowords ? readLayout(wqe, used, flags, u) : nullptr;
}

} // namespace

const char *indirectEntries(std::span<const uint8_t> bytes, IndirectUpdate &u) {
    return layoutAt(bytes.data(), static_cast<uint32_t>(bytes.size() / kEntryBytes), u);
}

uint8_t decodeKernelIndirect(const Host &host, uint32_t qpn, uint32_t index,
                             std::span<const uint8_t> wqe, size_t used, Wqe &out) {
    IndirectUpdate u;
    if (const char *why = kernelIndirectOf(wqe, used, out, u)) {
        host.guestError(err::kWqeFastReg, "QP %u UMR WQE %u: a KLM registration: %s", qpn, index,
                        why);
        return PIB_WC_LOC_PROT_ERR;
    }
    out.ctrl.opcode = PIB_WR_REG_MR;
    out.indirect = std::move(u);
    return PIB_WC_SUCCESS;
}

uint8_t decodeIndirect(const Host &host, uint32_t qpn, uint32_t index, std::span<const uint8_t> wqe,
                       size_t used, Wqe &out) {
    IndirectUpdate u;
    if (const char *why = indirectOf(wqe, used, u)) {
        host.guestError(err::kWqeBad, "QP %u UMR WQE %u: %s", qpn, index, why);
        return PIB_WC_LOC_QP_OP_ERR;
    }
    out.ctrl.opcode = PIB_WR_REG_MR;
    out.indirect = std::move(u);
    return PIB_WC_SUCCESS;
}

} // namespace pib::mlx5::umr
