// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_user_memories.hh"

#include <cinttypes>
#include <cstdarg>
#include <string>

#include "mlx5_ifc.hh"
#include "mlx5_page_list.hh"
#include "state_tables.hh"
#include "trace.hh"

namespace pib::mlx5 {

// Named, not anonymous: the QEMU build compiles the core as one unit.
namespace umem {
// create_umem_in's umem context, and create_umem_out's id.
constexpr Field kAts = field(0x100, 1);         // ifc: create_umem_in.umem.ats
constexpr Field kLogPageSize = field(0x11b, 5); // ifc: create_umem_in.umem.log_page_size
constexpr Field kPageOffset = field(0x120, 32); // ifc: create_umem_in.umem.page_offset
constexpr Field kCount = field(0x140, 64);      // ifc: create_umem_in.umem.num_of_mtt
constexpr uint32_t kEntries = 0x30;             // the mtt entries, 8 bytes each
constexpr uint64_t kWrite = 0x2, kRead = 0x1;   // an entry's wr_en and rd_en
constexpr uint64_t kEntryFlags = 0xff;          // below the address (ptag: bits 63:8)
constexpr uint32_t kTag = stateTag("M5UM");
constexpr uint32_t kHoldersTag = stateTag("M5UH");
} // namespace umem

const err::Condition *UserMemories::refuse(const err::Condition &why, const char *fmt, ...) const {
    va_list args;
    va_start(args, fmt);
    host_.vguestError(why, fmt, args);
    va_end(args);
    return &why;
}

const err::Condition *UserMemories::create(std::span<const uint8_t> in, uint32_t *id) {
    const uint64_t logPage = get(in, umem::kLogPageSize), count = get(in, umem::kCount);
    const uint64_t offset = get(in, umem::kPageOffset);
    if (get(in, umem::kAts) || logPage > PageList::kMaxLogPageSize)
        return refuse(err::kMlx5UmemBad, "CREATE_UMEM: ATS, or pages of 2^%" PRIu64 " KiB * 4",
                      logPage);
    const uint32_t shift = PageList::kAdapterPageShift + static_cast<uint32_t>(logPage);
    if (count == 0 || offset >> shift)
        return refuse(err::kMlx5UmemBad, "CREATE_UMEM of %" PRIu64 " pages from offset %" PRIu64,
                      count, offset);
    if (count > kMaxPages - pages_ || table_.size() == table_.capacity())
        return refuse(err::kMlx5CmdNoResources,
                      "CREATE_UMEM of %" PRIu64 " pages: the device holds %" PRIu64 " of %" PRIu64
                      " in %zu UMEMs",
                      count, pages_, kMaxPages, table_.size());
    if (in.size() < umem::kEntries + 8 * count)
        return refuse(err::kMlx5CmdShortInput, "CREATE_UMEM: %zu bytes for %" PRIu64 " pages",
                      in.size(), count);
    auto made = std::make_unique<UserMemory>();
    made->shift = shift;
    made->offset = static_cast<uint32_t>(offset);
    made->owner = static_cast<Owner>(get(in, kUid));
    made->pages.resize(count);
    const uint64_t pageBytes = uint64_t{1} << shift;
    for (uint64_t i = 0; i < count; ++i) {
        const uint64_t entry = readBe64(in.data() + umem::kEntries + 8 * i);
        const bool writable = entry & umem::kWrite;
        if (!(entry & umem::kRead) || (i && writable != made->writable))
            return refuse(err::kMlx5UmemBad, "CREATE_UMEM: page %" PRIu64 " has rights 0x%" PRIx64,
                          i, entry & umem::kEntryFlags);
        made->writable = writable;
        made->pages[i] = entry & ~umem::kEntryFlags;
        uint64_t probe;
        if (made->pages[i] % pageBytes || !host_.dmaRead(made->pages[i], probe) ||
            !host_.dmaRead(made->pages[i] + pageBytes - sizeof(probe), probe))
            return refuse(err::kMlx5UmemBad,
                          "CREATE_UMEM: page %" PRIu64 " at 0x%" PRIx64 " is not %" PRIu64
                          "-byte aligned guest RAM",
                          i, made->pages[i], pageBytes);
    }
    const UserMemory &kept = *made;
    *id = *table_.insert(std::move(made)); // there is room: checked above
    pages_ += count;
    trace::mlx5_umem(host_, "registered", *id, static_cast<unsigned>(count), shift, kept.owner);
    return nullptr;
}

const err::Condition *UserMemories::destroy(uint32_t id) {
    const UserMemory *m = table_.find(id);
    if (!m)
        return refuse(err::kMlx5CmdBadResource, "DESTROY_UMEM of UMEM %u, which does not exist",
                      id);
    if (m->refs)
        return refuse(err::kMlx5CmdInUse, "DESTROY_UMEM of UMEM %u, which %u objects hold", id,
                      m->refs);
    pages_ -= m->pages.size();
    trace::mlx5_umem(host_, "ended", id, static_cast<unsigned>(m->pages.size()), m->shift,
                     m->owner);
    table_.erase(id);
    return nullptr;
}

void UserMemories::hold(char kind, uint32_t number, const UmemHold &held) {
    if (!held.ring && !held.record)
        return;
    for (uint32_t id : {held.ring, held.record})
        if (UserMemory *m = table_.find(id))
            ++m->refs;
    holders_[{kind, number}] = held;
}

void UserMemories::release(char kind, uint32_t number) {
    const auto it = holders_.find({kind, number});
    if (it == holders_.end())
        return;
    for (uint32_t id : {it->second.ring, it->second.record})
        if (UserMemory *m = table_.find(id))
            --m->refs;
    holders_.erase(it);
}

void UserMemories::reset() {
    table_.clear();
    holders_.clear();
    pages_ = 0;
}

std::vector<uint8_t> UserMemories::createInput(const UserMemory &m) const {
    std::vector<uint8_t> in(umem::kEntries + 8 * m.pages.size());
    set(in, kUid, m.owner);
    set(in, umem::kLogPageSize, m.shift - PageList::kAdapterPageShift);
    set(in, umem::kPageOffset, m.offset);
    set(in, umem::kCount, m.pages.size());
    for (size_t i = 0; i < m.pages.size(); ++i)
        writeBe64(in.data() + umem::kEntries + 8 * i,
                  m.pages[i] | umem::kRead | (m.writable ? umem::kWrite : 0));
    return in;
}

void UserMemories::save(StateWriter &w) const {
    saveTable(w, umem::kTag, table_, [&](const UserMemory &m) { w.bytes(createInput(m)); });
    w.beginSection(umem::kHoldersTag);
    w.u32(static_cast<uint32_t>(holders_.size()));
    for (const auto &[object, held] : holders_) {
        w.u8(static_cast<uint8_t>(object.first));
        w.u32(object.second);
        w.u32(held.ring);
        w.u32(held.record);
    }
    w.endSection();
}

void UserMemories::load(StateReader &r) {
    reset();
    loadTable(r, umem::kTag, "UMEMs", table_, 4 + umem::kEntries, [&](uint32_t id) {
        const std::vector<uint8_t> in =
            r.bytes(umem::kEntries + 8 * kMaxPages, "a CREATE_UMEM input");
        uint32_t made = 0;
        restoreAt(r, host_, "UMEM", table_, id, [&] { return r.ok() && !create(in, &made); });
    });
    r.enterSection(umem::kHoldersTag, "the UMEMs' holders");
    const uint32_t count = r.count(kMaxUmems * 2, 13, "UMEM holders");
    for (uint32_t i = 0; i < count && r.ok(); ++i) {
        const char kind = static_cast<char>(r.u8());
        const uint32_t number = r.u32();
        const UmemHold held{r.u32(), r.u32()};
        const bool known =
            (kind == 'c' || kind == 'q' || kind == 'k') && !holders_.contains({kind, number});
        const auto exists = [&](uint32_t id) { return id == 0 || table_.find(id); };
        if (r.ok() &&
            (!known || !exists(held.ring) || !exists(held.record) || (!held.ring && !held.record)))
            r.fail("a UMEM holder that is no object's, or of UMEMs that do not exist");
        else if (r.ok())
            hold(kind, number, held);
    }
    r.leaveSection("the UMEMs' holders");
}

} // namespace pib::mlx5
