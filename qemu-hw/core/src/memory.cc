// SPDX-License-Identifier: GPL-2.0-or-later
#include "memory.hh"

#include <algorithm>

#include "limits.hh"

namespace pib {

// Whether an access with `access` rights writes the memory it reaches (a
// receive, a WRITE's target, a READ's or atomic's destination).
static bool writes(uint32_t access) {
    return access & (PIB_ACCESS_LOCAL_WRITE | PIB_ACCESS_REMOTE_WRITE | PIB_ACCESS_REMOTE_ATOMIC);
}

// Returns PIB_WC_SUCCESS, or the completion status of the violation.
uint8_t MemoryAccess::translate(uint32_t key, uint32_t pdn, uint64_t addr, uint64_t len,
                                uint32_t access, std::vector<Segment> &out) const {
    return reach(key, pdn, addr, len, access, &out);
}

uint8_t MemoryAccess::translateRemote(uint32_t rkey, uint32_t pdn, uint32_t qpn, uint64_t addr,
                                      uint64_t len, uint32_t access,
                                      std::vector<Segment> &out) const {
    return reachRemote(rkey, pdn, qpn, addr, len, access, &out);
}

uint8_t MemoryAccess::check(uint32_t key, uint32_t pdn, uint64_t addr, uint64_t len,
                            uint32_t access) const {
    return reach(key, pdn, addr, len, access, nullptr);
}

uint8_t MemoryAccess::checkRemote(uint32_t rkey, uint32_t pdn, uint32_t qpn, uint64_t addr,
                                  uint64_t len, uint32_t access) const {
    return reachRemote(rkey, pdn, qpn, addr, len, access, nullptr);
}

uint8_t MemoryAccess::reach(uint32_t key, uint32_t pdn, uint64_t addr, uint64_t len,
                            uint32_t access, std::vector<Segment> *out) const {
    fault_.reset();
    const MemoryRegion *mr = mrs_.find(PIB_KEY_INDEX(key));
    if (!mr || !mr->valid || mr->key != key || mr->ctx.pdn != pdn ||
        (mr->ctx.access & access) != access)
        return PIB_WC_LOC_PROT_ERR;
    return mapRegion(*mr, addr, len, access, out);
}

uint8_t MemoryAccess::reachRemote(uint32_t rkey, uint32_t pdn, uint32_t qpn, uint64_t addr,
                                  uint64_t len, uint32_t access, std::vector<Segment> *out) const {
    fault_.reset();
    const MemoryWindow *mw = mws_.find(PIB_KEY_INDEX(rkey));
    if (!mw)
        return reach(rkey, pdn, addr, len, access, out);
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
    // The region as it is now: a ConnectX key may have been revoked and
    // given to another PD, or lost local write, since the bind (mlx5_ib's
    // MR cache, which IBA's bind-time checks do not see).
    constexpr uint32_t kWrites = PIB_ACCESS_REMOTE_WRITE | PIB_ACCESS_REMOTE_ATOMIC;
    const MemoryRegion *mr = mrs_.find(PIB_KEY_INDEX(w.mr_key));
    if (!mr || !mr->valid || mr->key != w.mr_key || mr->ctx.pdn != w.pdn ||
        (access & kWrites && !(mr->ctx.access & PIB_ACCESS_LOCAL_WRITE)))
        return PIB_WC_LOC_PROT_ERR;
    return mapRegion(*mr, addr, len, access, out);
}

// The segments of [addr, addr + len) of `mr`, within its range; only
// the check when `out` is null.
uint8_t MemoryAccess::mapRegion(const MemoryRegion &mr, uint64_t addr, uint64_t len,
                                uint32_t access, std::vector<Segment> *out) const {
    const pib_mr_context &c = mr.ctx;
    if (len == 0)
        return PIB_WC_SUCCESS;
    if (addr < c.iova || addr + len < addr || addr + len - c.iova > c.length)
        return PIB_WC_LOC_PROT_ERR;
    return mr.indirect     ? mapIndirect(mr, addr, len, access, out)
           : mr.ksm        ? mapKsm(mr, addr, len, access, out)
           : mr.implicit() ? mapImplicit(mr, addr, len, access, out)
                           : mapDirect(mr, addr, len, access, out);
}

// Page `page` of a direct region's translations, as its table holds it.
uint64_t MemoryAccess::entryOf(const MemoryRegion &mr, uint64_t page) const {
    return mr.ownsPages ? mr.ownPages[page]
                        : mtt_.entry(static_cast<uint32_t>(mr.ctx.mtt_index + page));
}

// Whether a key with present bits (MemoryRegion::pagedEntries) maps every
// page of [addr, addr + len), which the caller checked lies in its
// entries, with the right `access` needs: else fault_ says where it
// stopped. Work bounded by the key's entries.
bool MemoryAccess::pagesPresent(const MemoryRegion &mr, uint64_t addr, uint64_t len,
                                uint32_t access) const {
    const bool write = writes(access);
    const uint64_t needed = write ? key_entry::kWrite : key_entry::kRead;
    const unsigned shift = mr.ctx.log_page_size;
    const uint64_t base = mr.ctx.iova & ~((uint64_t{1} << shift) - 1);
    const uint64_t first = (addr - base) >> shift, last = (addr + len - 1 - base) >> shift;
    for (uint64_t page = first; page <= last; ++page) {
        if (entryOf(mr, page) & needed)
            continue;
        const uint64_t at = page == first ? addr : base + (page << shift);
        fault_ = FaultSite{mr.key, at, addr + len - at, write};
        return false;
    }
    return true;
}

// A region with pages: its own, or its MTT range's; guest physical
// addresses for a physical one.
uint8_t MemoryAccess::mapDirect(const MemoryRegion &mr, uint64_t addr, uint64_t len,
                                uint32_t access, std::vector<Segment> *out) const {
    const pib_mr_context &c = mr.ctx;
    if (c.flags & PIB_MR_PHYSICAL) { // its page size means nothing
        if (out)
            out->push_back({addr, len});
        return PIB_WC_SUCCESS;
    }
    const unsigned shift = c.log_page_size;
    const uint64_t pageSize = uint64_t{1} << shift;
    const uint64_t base = c.iova & ~(pageSize - 1);
    const uint64_t pages = mr.ownsPages ? mr.ownPages.size() : c.mtt_count;
    if (((addr + len - 1 - base) >> shift) >= pages) // the pages held are the range's first
        return PIB_WC_LOC_PROT_ERR;
    if (mr.pagedEntries && !pagesPresent(mr, addr, len, access))
        return PIB_WC_LOC_PROT_ERR;
    while (out && len) {
        const uint64_t offset = addr - base;
        const uint64_t within = offset & (pageSize - 1);
        const uint64_t chunk = std::min(len, pageSize - within);
        const uint64_t page = offset >> shift;
        // Present bits are not address; nor are any a guest wrote into a
        // range an on-demand region shares with this one.
        const uint64_t entry = entryOf(mr, page) & ~key_entry::kFlags;
        if (!out->empty() && out->back().addr + out->back().len == entry + within)
            out->back().len += chunk; // physically contiguous: one DMA
        else
            out->push_back({entry + within, chunk});
        addr += chunk;
        len -= chunk;
    }
    return PIB_WC_SUCCESS;
}

// An indirect key's range, through its entries' keys as they are now
// (indirect_key.hh): each a direct key of the key's PD, valid, with local
// write when the access writes. Remote rights are the indirect key's
// alone, as the kernel's own KLM keys (over its PD's local DMA key) show.
// A check takes one span per entry, so a long range costs no more than
// a short one.
uint8_t MemoryAccess::mapIndirect(const MemoryRegion &mr, uint64_t addr, uint64_t len,
                                  uint32_t access, std::vector<Segment> *out) const {
    const uint32_t entryAccess = writes(access) ? PIB_ACCESS_LOCAL_WRITE : 0;
    uint32_t pieces = 0;
    const auto through = [&](const IndirectEntry &e, uint64_t at, uint64_t n) {
        if (out && ++pieces > limits::kMaxIndirectPieces)
            return false;
        return reachesEntry(mr, e.key, entryAccess) &&
               mapRegion(*mrs_.find(PIB_KEY_INDEX(e.key)), at, n, entryAccess, out) ==
                   PIB_WC_SUCCESS;
    };
    const uint64_t offset = addr - mr.ctx.iova;
    const bool reached = out ? mr.indirect->forEachPiece(offset, len, through)
                             : mr.indirect->forEachHull(offset, len, through);
    return reached ? PIB_WC_SUCCESS : PIB_WC_LOC_PROT_ERR;
}

// Whether an indirect key `mr` may reach memory through its entry's key
// `key` now: a direct key of its PD, valid, with the local write an
// access that writes needs.
bool MemoryAccess::reachesEntry(const MemoryRegion &mr, uint32_t key, uint32_t entryAccess) const {
    const MemoryRegion *entry = mrs_.find(PIB_KEY_INDEX(key));
    return entry && entry->valid && entry->key == key && !entry->indirect && !entry->ksm &&
           !entry->implicit() && entry->ctx.pdn == mr.ctx.pdn &&
           (entry->ctx.access & entryAccess) == entryAccess;
}

// A KSM key's range (docs/mlx5.md §10.7): span by span, each through its
// entry's key and address as they are now, checked as an indirect key's
// entries are. A page an entry's key does not map now faults there
// (fault_ names that key and address: an implicit region's null key or
// child). Work is one entry per span of 2^log_page_size bytes, at most
// kMaxIndirectPieces spans.
uint8_t MemoryAccess::mapKsm(const MemoryRegion &mr, uint64_t addr, uint64_t len, uint32_t access,
                             std::vector<Segment> *out) const {
    const uint32_t entryAccess = writes(access) ? PIB_ACCESS_LOCAL_WRITE : 0;
    const unsigned shift = mr.ctx.log_page_size;
    const uint64_t span = uint64_t{1} << shift;
    uint64_t offset = addr - mr.ctx.iova;
    for (uint32_t pieces = 0; len; ++pieces) {
        const uint64_t index = offset >> shift;
        if (index >= mr.ownPages.size() / ksm_entry::kWords || pieces >= limits::kMaxIndirectPieces)
            return PIB_WC_LOC_PROT_ERR;
        const uint32_t key = ksm_entry::key(mr.ownPages[index * ksm_entry::kWords]);
        const uint64_t at = mr.ownPages[index * ksm_entry::kWords + 1] + (offset & (span - 1));
        const uint64_t n = std::min(len, span - (offset & (span - 1)));
        if (!reachesEntry(mr, key, entryAccess))
            return PIB_WC_LOC_PROT_ERR;
        const MemoryRegion &entry = *mrs_.find(PIB_KEY_INDEX(key));
        if (const uint8_t status = mapRegion(entry, at, n, entryAccess, out)) {
            if (fault_) { // the span's key faulted: say which span of ours
                fault_->region = mr.key;
                fault_->regionVa = mr.ctx.iova + offset + (fault_->va - at);
            }
            return status;
        }
        offset += n;
        len -= n;
    }
    return PIB_WC_SUCCESS;
}

// A pib-hca implicit region's range (docs/prm.md §6.10): span by span,
// each through the on-demand region linked for it, whose pages fault as
// its own; a span with none faults on the implicit key there, for the
// rest of the range. The caller checked the implicit key's rights, which
// are its children's. Work is one lookup per span, at most
// kMaxIndirectPieces spans (a message of 2^31 bytes in spans of 2 MiB or
// more).
uint8_t MemoryAccess::mapImplicit(const MemoryRegion &mr, uint64_t addr, uint64_t len,
                                  uint32_t access, std::vector<Segment> *out) const {
    const unsigned shift = mr.ctx.log_page_size;
    const uint64_t span = uint64_t{1} << shift;
    for (uint32_t spans = 0; len; ++spans) {
        if (spans >= limits::kMaxIndirectPieces)
            return PIB_WC_LOC_PROT_ERR;
        const auto child = mr.children.find(addr >> shift);
        if (child == mr.children.end()) {
            fault_ = FaultSite{mr.key, addr, len, writes(access)};
            return PIB_WC_LOC_PROT_ERR;
        }
        const uint64_t n = std::min(len, span - (addr & (span - 1)));
        if (const uint8_t status = mapRegion(mrs_.at(child->second), addr, n, access, out))
            return status;
        addr += n;
        len -= n;
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
