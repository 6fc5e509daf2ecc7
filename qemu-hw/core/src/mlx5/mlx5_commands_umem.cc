// SPDX-License-Identifier: GPL-2.0-or-later
// Rings and doorbell records in UMEMs (docs/mlx5.md §16.2): a CQ or QP a
// DEVX process makes names, instead of guest addresses, the UMEM and
// offset its ring is at and the UMEM its doorbell record is in (the
// record's offset in dbr_addr). The device turns them into the page list
// and the address the command would otherwise carry, from the pages the
// UMEM registered, and runs the command's own code on that: a process's
// queue lies in its own pinned pages and nowhere else. The object holds
// its UMEMs until it ends.
#include <algorithm>
#include <cinttypes>

#include "mlx5_commands.hh"
#include "mlx5_ifc.hh"
#include "mlx5_page_list.hh"

namespace pib::mlx5 {

// Named, not anonymous: the QEMU build compiles the core as one unit.
namespace umem_place {
// The fields Linux's mlx5_ifc.h leaves reserved are where the PRM (and
// UCX's copy of its layouts) has them.
constexpr Field kCqRingValid = field(0x2e0, 1);   // ifc: create_cq_in.cq_umem_valid
constexpr Field kCqRingId = field(0x2c0, 32);     // cq_umem_id
constexpr Field kCqRingOffset = field(0x280, 64); // cq_umem_offset
constexpr Field kCqRecordValid = field(0x86, 1);  // ifc: create_cq_in.cq_context.dbr_umem_valid
constexpr Field kCqRecordId = field(0xa0, 32);    // cq_context.dbr_umem_id
constexpr Field kCqRecord = field(0x240, 64);     // ifc: create_cq_in.cq_context.dbr_addr
constexpr Field kCqLogPageSize = field(0x143, 5); // ifc: create_cq_in.cq_context.log_page_size
constexpr Field kCqPageOffset = field(0xd4, 6);   // ifc: create_cq_in.cq_context.page_offset
constexpr Field kQpRingValid = field(0x860, 1);   // ifc: create_qp_in.wq_umem_valid
constexpr Field kQpRingId = field(0x840, 32);     // ifc: create_qp_in.wq_umem_id
constexpr Field kQpRingOffset = field(0x800, 64); // ifc: create_qp_in.wq_umem_offset
constexpr Field kQpRecordValid = field(0x743, 1); // ifc: create_qp_in.qpc.dbr_umem_valid
constexpr Field kQpRecordId = field(0x7e0, 32);   // qpc.dbr_umem_id
constexpr Field kQpRecord = field(0x5c0, 64);     // ifc: create_qp_in.qpc.dbr_addr
constexpr Field kQpLogPageSize = field(0x163, 5); // ifc: create_qp_in.qpc.log_page_size
constexpr Field kQpPageOffset = field(0x554, 6);  // ifc: create_qp_in.qpc.page_offset

constexpr uint32_t kPageList = 0x110; // create_cq_in's and create_qp_in's pas
constexpr uint64_t kGranule = uint64_t{1} << PageList::kAdapterPageShift;
// The most 4 KiB pages a ring in a UMEM is given: what the largest QP
// takes (an SQ of 2^15 basic blocks, an RQ of 2^14 WQEs of 2 KiB).
constexpr uint64_t kMaxRingPages = 512 + 8192 + 1;

} // namespace umem_place

const Commands::UmemFields Commands::kCqUmemFields{
    umem_place::kCqRingValid,   umem_place::kCqRingId,     umem_place::kCqRingOffset,
    umem_place::kCqRecordValid, umem_place::kCqRecordId,   umem_place::kCqRecord,
    umem_place::kCqLogPageSize, umem_place::kCqPageOffset, true};
const Commands::UmemFields Commands::kQpUmemFields{
    umem_place::kQpRingValid,   umem_place::kQpRingId,     umem_place::kQpRingOffset,
    umem_place::kQpRecordValid, umem_place::kQpRecordId,   umem_place::kQpRecord,
    umem_place::kQpLogPageSize, umem_place::kQpPageOffset, false};

// UMEM `id` of the command's input, which its uid may use.
const err::Condition *Commands::usableUmem(const Request &r, Field id, const char *what,
                                           const UserMemory **umem) const {
    const auto caller = static_cast<Owner>(get(r.in, kUid));
    const auto number = static_cast<uint32_t>(get(r.in, id));
    *umem = umems_.find(number);
    if (!*umem)
        return fail(err::kMlx5CmdBadResource, "%s: %s UMEM %u does not exist", name(r.opcode), what,
                    number);
    if (!controls(caller, (*umem)->owner))
        return fail(err::kMlx5CmdForeignObject, "%s with uid %u: %s UMEM %u is user context %u's",
                    name(r.opcode), caller, what, number, (*umem)->owner);
    return nullptr;
}

// `r`'s input with its UMEM places turned into guest addresses, into
// *placed, and the UMEMs it names into *held (ring, record; 0: none);
// nullptr, or the condition refusing it.
const err::Condition *Commands::placeInUmems(const Request &r, const UmemFields &f,
                                             std::vector<uint8_t> *placed, UmemHold *held) const {
    using umem_place::kGranule;
    placed->assign(r.in.begin(), r.in.end());
    *held = {};
    const UserMemory *m = nullptr;
    if (get(r.in, f.recordValid)) {
        if (const err::Condition *why = usableUmem(r, f.recordId, "the doorbell record's", &m))
            return why;
        held->record = static_cast<uint32_t>(get(r.in, f.recordId));
        const uint64_t at = get(r.in, f.record);
        if (at % 8 || at >= m->bytes() || m->bytes() - at < 8)
            return fail(err::kMlx5UmemBad, "%s: a doorbell record at %" PRIu64 " of UMEM %u",
                        name(r.opcode), at, held->record);
        set(*placed, f.recordValid, 0);
        set(*placed, f.record, m->address(at));
    }
    if (get(r.in, f.ringValid)) {
        if (const err::Condition *why = usableUmem(r, f.ringId, "the ring's", &m))
            return why;
        held->ring = static_cast<uint32_t>(get(r.in, f.ringId));
        const uint64_t at = get(r.in, f.ringOffset);
        const uint64_t from = m->offset + at; // from the start of its first page
        const uint64_t lead = from % kGranule;
        if (at >= m->bytes() || lead % 64)
            return fail(err::kMlx5UmemBad, "%s: a ring at %" PRIu64 " of UMEM %u", name(r.opcode),
                        at, held->ring);
        // The device writes a CQ's entries: never into pages the kernel
        // pinned for reading only (a read-only file's, say).
        if (f.deviceWritesRing && !m->writable)
            return fail(err::kMlx5UmemBad, "%s: a ring in UMEM %u, which is not writable",
                        name(r.opcode), held->ring);
        // Its 4 KiB pages from the one it starts in to the UMEM's end (the
        // command's code takes those its ring needs, and refuses a ring
        // longer than they are).
        const uint64_t pages =
            std::min((m->bytes() - at + lead + kGranule - 1) / kGranule, umem_place::kMaxRingPages);
        placed->resize(umem_place::kPageList + 8 * pages);
        for (uint64_t i = 0; i < pages; ++i)
            writeBe64(placed->data() + umem_place::kPageList + 8 * i,
                      m->pageAddress(from - lead + i * kGranule));
        set(*placed, f.ringValid, 0);
        set(*placed, f.logPageSize, 0);
        set(*placed, f.pageOffset, lead / 64);
    }
    return nullptr;
}

} // namespace pib::mlx5
