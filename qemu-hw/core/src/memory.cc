// SPDX-License-Identifier: GPL-2.0-or-later
#include "memory.hh"

#include <algorithm>

namespace pib {

// Returns PIB_WC_SUCCESS, or the completion status of the violation.
uint8_t MemoryAccess::translate(uint32_t key, uint32_t pdn, uint64_t addr, uint64_t len,
                                uint32_t access, std::vector<Segment> &out) const {
    const MemoryRegion *mr = mrs_.find(PIB_KEY_INDEX(key));
    if (!mr || !mr->valid || mr->key != key || mr->ctx.pdn != pdn ||
        (mr->ctx.access & access) != access)
        return PIB_WC_LOC_PROT_ERR;
    return mapRegion(*mr, addr, len, out);
}

uint8_t MemoryAccess::translateRemote(uint32_t rkey, uint32_t pdn, uint32_t qpn, uint64_t addr,
                                      uint64_t len, uint32_t access,
                                      std::vector<Segment> &out) const {
    const MemoryWindow *mw = mws_.find(PIB_KEY_INDEX(rkey));
    if (!mw)
        return translate(rkey, pdn, addr, len, access, out);
    // IBA 10.6.7.3: the window's own rights and range, then the region's
    // pages (its remote rights do not matter: the window grants them).
    const pib_mw_context &w = mw->ctx;
    if (mw->key != rkey || !w.bound || w.pdn != pdn || (w.access & access) != access ||
        (w.type == PIB_MW_TYPE_2 && w.qpn != qpn))
        return PIB_WC_LOC_PROT_ERR;
    if (len == 0)
        return PIB_WC_SUCCESS;
    if (addr < w.addr || addr + len < addr || addr + len - w.addr > w.length)
        return PIB_WC_LOC_PROT_ERR;
    const MemoryRegion *mr = mrs_.find(PIB_KEY_INDEX(w.mr_key));
    if (!mr || !mr->valid || mr->key != w.mr_key)
        return PIB_WC_LOC_PROT_ERR;
    return mapRegion(*mr, addr, len, out);
}

// The segments of [addr, addr + len) of `mr`, within its range.
uint8_t MemoryAccess::mapRegion(const MemoryRegion &mr, uint64_t addr, uint64_t len,
                                std::vector<Segment> &out) const {
    const pib_mr_context &c = mr.ctx;
    if (len == 0)
        return PIB_WC_SUCCESS;
    if (addr < c.iova || addr + len < addr || addr + len - c.iova > c.length)
        return PIB_WC_LOC_PROT_ERR;
    if (c.flags & PIB_MR_PHYSICAL) {
        out.push_back({addr, len});
        return PIB_WC_SUCCESS;
    }
    const unsigned shift = c.log_page_size;
    const uint64_t pageSize = uint64_t{1} << shift;
    const uint64_t base = c.iova & ~(pageSize - 1);
    while (len) {
        const uint64_t offset = addr - base;
        const uint64_t page = offset >> shift;
        const uint64_t within = offset & (pageSize - 1);
        const uint64_t chunk = std::min(len, pageSize - within);
        if (page >= (mr.ownsPages ? mr.ownPages.size() : c.mtt_count))
            return PIB_WC_LOC_PROT_ERR;
        const uint64_t entry = mr.ownsPages ? mr.ownPages[page]
                                            : mtt_.entry(static_cast<uint32_t>(c.mtt_index + page));
        if (!out.empty() && out.back().addr + out.back().len == entry + within)
            out.back().len += chunk; // physically contiguous: one DMA
        else
            out.push_back({entry + within, chunk});
        addr += chunk;
        len -= chunk;
    }
    return PIB_WC_SUCCESS;
}

// Reads the whole of the buffers `sges` describe into `out`, which grows
// by their total length: at most `maxLength` bytes, else nothing is read
// and the WQE fails with a length error.
uint8_t MemoryAccess::gather(uint32_t pdn, std::span<const pib_wqe_data> sges, uint64_t maxLength,
                             std::vector<uint8_t> &out) {
    uint64_t total = 0;
    for (const pib_wqe_data &sge : sges) {
        total += sge.byte_count; // at most 2^32 SGEs of 2^32 - 1: no wrap
        if (total > maxLength)
            return PIB_WC_LOC_LEN_ERR;
    }
    const size_t at = out.size();
    out.resize(at + total);
    return gatherInto(pdn, sges, 0, std::span(out).subspan(at));
}

// Hands `take` the guest memory segments that hold bytes [offset,
// offset + len) of the buffers `sges` describe, in order; take returns
// false when it cannot reach one.
uint8_t MemoryAccess::forEachSegment(uint32_t pdn, std::span<const pib_wqe_data> sges,
                                     uint64_t offset, uint64_t len,
                                     const std::function<bool(const Segment &)> &take) {
    std::vector<Segment> &segments = gatherSegments_;
    for (const pib_wqe_data &sge : sges) {
        if (!len)
            break;
        if (offset >= sge.byte_count) {
            offset -= sge.byte_count;
            continue;
        }
        const uint64_t part = std::min<uint64_t>(len, sge.byte_count - offset);
        segments.clear();
        const uint8_t status = translate(sge.lkey, pdn, sge.addr + offset, part, 0, segments);
        if (status != PIB_WC_SUCCESS)
            return status;
        for (const Segment &s : segments)
            if (!take(s))
                return PIB_WC_LOC_ACCESS_ERR;
        len -= part;
        offset = 0;
    }
    return len ? PIB_WC_LOC_LEN_ERR : PIB_WC_SUCCESS;
}

// Reads bytes [offset, offset + dest.size()) of the buffers `sges`
// describe into `dest`.
uint8_t MemoryAccess::gatherInto(uint32_t pdn, std::span<const pib_wqe_data> sges, uint64_t offset,
                                 std::span<uint8_t> dest) {
    return forEachSegment(pdn, sges, offset, dest.size(), [&](const Segment &s) {
        if (!host_.dmaRead(s.addr, dest.data(), s.len))
            return false;
        dest = dest.subspan(s.len);
        return true;
    });
}

// The same into a packet's payload.
uint8_t MemoryAccess::gatherInto(uint32_t pdn, std::span<const pib_wqe_data> sges, uint64_t offset,
                                 uint64_t len, iba::PacketWriter &packet) {
    return forEachSegment(pdn, sges, offset, len,
                          [&](const Segment &s) { return readIntoPacket(s, packet); });
}

// Appends a segment of guest memory to a packet's payload. Guest RAM the
// host lets the device read in place is copied and checksummed in one
// pass; anything else is read by DMA.
bool MemoryAccess::readIntoPacket(const Segment &s, iba::PacketWriter &packet) {
    if (const uint8_t *ram = host_.mapForRead(s.addr, s.len)) {
        packet.append(ram, s.len);
        host_.unmapForRead(ram, s.len);
        return true;
    }
    return host_.dmaRead(s.addr, packet.appendRoom(s.len).data(), s.len);
}

// Writes `data` into the buffers `sges` describe, after skipping `skip`
// bytes of them (the GRH room of a UD receive).
uint8_t MemoryAccess::scatter(uint32_t pdn, std::span<const pib_wqe_data> sges,
                              std::span<const uint8_t> data, uint64_t skip) {
    std::vector<Segment> &segments = scatterSegments_;
    for (const pib_wqe_data &sge : sges) {
        if (data.empty())
            break;
        uint64_t addr = sge.addr;
        uint64_t room = sge.byte_count;
        const uint64_t skipped = std::min(skip, room);
        addr += skipped;
        room -= skipped;
        skip -= skipped;
        const uint64_t len = std::min<uint64_t>(room, data.size());
        if (!len)
            continue;
        segments.clear();
        const uint8_t status =
            translate(sge.lkey, pdn, addr, len, PIB_ACCESS_LOCAL_WRITE, segments);
        if (status != PIB_WC_SUCCESS)
            return status;
        for (const Segment &s : segments) {
            if (!host_.dmaWrite(s.addr, data.data(), s.len))
                return PIB_WC_LOC_ACCESS_ERR;
            data = data.subspan(s.len);
        }
    }
    return data.empty() ? PIB_WC_SUCCESS : PIB_WC_LOC_LEN_ERR;
}

} // namespace pib
