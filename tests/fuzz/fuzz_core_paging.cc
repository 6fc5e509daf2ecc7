// SPDX-License-Identifier: GPL-2.0-or-later
#include <algorithm>

#include "fuzz_core_check.hh"
#include "fuzz_core_target.hh"

namespace pib::fuzz {

namespace {

constexpr uint64_t kRead = PIB_MTT_READ, kWrite = PIB_MTT_READ | PIB_MTT_WRITE;
constexpr uint32_t kAccess = testing::kAccessAll | PIB_ACCESS_FLUSH_GLOBAL;
constexpr unsigned kLogEq = 6; // the node's async EQ (connected_fixture.hh)

// An on-demand region of `pages` pages at `iova` in PD `pdn`, through the
// MTT range at `mtt`; with `parent`, that implicit region's child.
pib_mr_context onDemand(uint64_t iova, uint32_t pages, uint32_t pdn, uint32_t mtt,
                        uint32_t parent = 0) {
    pib_mr_context mr{};
    mr.iova = iova;
    mr.length = uint64_t{pages} * PIB_PAGE_SIZE;
    mr.pdn = pdn;
    mr.access = kAccess;
    mr.mtt_index = mtt;
    mr.mtt_count = pages;
    mr.log_page_size = 12;
    mr.flags = PIB_MR_ON_DEMAND;
    mr.parent_key = parent;
    return mr;
}

} // namespace

// An on-demand region of four pages, all absent; an implicit region with
// no child yet, and the MTT ranges its two children will have.
void Target::setUpPaging() {
    paging.odpMtt = created(command(PIB_CMD_ALLOC_MTT, 0, Paging::kOdpPages, 0), "ALLOC_MTT");
    keys.odp =
        created(commandIn(PIB_CMD_CREATE_MR, 0,
                          onDemand(Paging::kOdpIova, Paging::kOdpPages, node.pd, paging.odpMtt)),
                "CREATE_MR on demand");
    pib_mr_context implicit{};
    implicit.length = UINT64_MAX;
    implicit.pdn = node.pd;
    implicit.access = kAccess;
    implicit.log_page_size = Paging::kLogSpan;
    implicit.flags = PIB_MR_IMPLICIT;
    keys.implicit = created(commandIn(PIB_CMD_CREATE_MR, 0, implicit), "CREATE_MR implicit");
    for (Paging::Child &c : paging.children)
        c.mtt = created(command(PIB_CMD_ALLOC_MTT, 0, Paging::kSpanPages, 0), "ALLOC_MTT");
}

pib_wqe_data Target::pickPagedBuffer(FuzzedDataProvider &in, uint32_t length) const {
    if (in.ConsumeBool()) {
        const uint64_t room = Paging::kOdpPages * PIB_PAGE_SIZE;
        const uint64_t offset = in.ConsumeIntegralInRange<uint64_t>(0, room - 1);
        return {static_cast<uint32_t>(std::min<uint64_t>(length, room - offset)), keys.odp,
                Paging::kOdpIova + offset};
    }
    // Mostly within the spans the driver serves; sometimes across their
    // end, into a span it will fail.
    const uint64_t spans = uint64_t{Paging::kSpans} << Paging::kLogSpan;
    const uint64_t offset = in.ConsumeIntegralInRange<uint64_t>(0, spans - 1);
    return {in.ConsumeIntegralInRange(0, 7)
                ? static_cast<uint32_t>(std::min<uint64_t>(length, spans - offset))
                : length,
            keys.implicit, Paging::kImplicitBase + offset};
}

// Entries [first, first + count) of the MTT range at `mtt` map pages of
// the data area, with `bits` (0: absent).
bool Target::mapPages(uint32_t mtt, uint32_t first, uint32_t count, uint64_t bits) {
    constexpr uint32_t kDataPages = kDataSize / PIB_PAGE_SIZE;
    while (count) {
        pib_mtt_write w{};
        w.count = std::min<uint32_t>(count, PIB_MTT_WRITE_MAX);
        for (uint32_t i = 0; i < w.count; ++i)
            w.entries[i] = bits ? (data + ((first + i) % kDataPages) * PIB_PAGE_SIZE) | bits : 0;
        if (commandIn(PIB_CMD_WRITE_MTT, mtt + first, w).status != PIB_CMD_STATUS_OK)
            return false;
        first += w.count;
        count -= w.count;
    }
    return true;
}

// One page fault, as the input's driver answers it: the pages of its
// range that the key's region (or the implicit region's child, made if
// need be) covers, mapped for reads or writes, then resumed; or failed,
// or left to wait. A fault it cannot place it fails.
void Target::serveFault(FuzzedDataProvider &in, const pib_eqe &fault) {
    const auto &f = fault.data.page_fault;
    const int answer = in.ConsumeIntegralInRange(0, 7);
    if (answer == 0)
        return; // the driver is slow: the device's wait bounds it
    uint32_t mtt = 0;
    uint64_t base = 0, pages = 0;
    if (f.key == keys.odp) {
        mtt = paging.odpMtt;
        base = Paging::kOdpIova;
        pages = Paging::kOdpPages;
    } else {
        const uint64_t span = (f.va - Paging::kImplicitBase) >> Paging::kLogSpan;
        if (f.va >= Paging::kImplicitBase && span < Paging::kSpans) {
            Paging::Child &c = paging.children[span];
            if (!c.key && f.key == keys.implicit) {
                const FakeHost::Outcome made =
                    commandIn(PIB_CMD_CREATE_MR, 0,
                              onDemand(Paging::kImplicitBase + (span << Paging::kLogSpan),
                                       Paging::kSpanPages, node.pd, c.mtt, keys.implicit));
                // A privileged input may have taken the implicit region.
                check(made.status == PIB_CMD_STATUS_OK || privileged,
                      "CREATE_MR of the implicit region's child failed");
                if (made.status == PIB_CMD_STATUS_OK)
                    c.key = static_cast<uint32_t>(made.result);
            }
            if (c.key && (f.key == c.key || f.key == keys.implicit)) {
                mtt = c.mtt;
                base = Paging::kImplicitBase + (span << Paging::kLogSpan);
                pages = Paging::kSpanPages;
            }
        }
    }
    bool mapped = false;
    if (mtt && answer > 1 && f.va >= base) {
        const uint64_t first = (f.va - base) / PIB_PAGE_SIZE;
        const uint64_t last = std::min(
            (f.va + std::max<uint64_t>(f.length, 1) - 1 - base) / PIB_PAGE_SIZE, pages - 1);
        const bool write = fault.subtype & PIB_PAGE_FAULT_WRITE || in.ConsumeBool();
        mapped = first < pages &&
                 mapPages(mtt, static_cast<uint32_t>(first),
                          static_cast<uint32_t>(last - first + 1), write ? kWrite : kRead);
    }
    command(PIB_CMD_PAGE_FAULT_RESUME, mapped ? 0 : 1, f.token, 0);
}

// The kernel unmaps pages: some of the on-demand region's or a child's
// entries go absent (or read-only), as an invalidation writes them.
void Target::invalidatePages(FuzzedDataProvider &in) {
    const unsigned which = in.ConsumeIntegralInRange(0u, Paging::kSpans);
    const bool odp = which == Paging::kSpans;
    if (!odp && !paging.children[which].key)
        return;
    const uint32_t pages = odp ? Paging::kOdpPages : Paging::kSpanPages;
    const uint32_t first = in.ConsumeIntegralInRange<uint32_t>(0, pages - 1);
    const uint32_t count = in.ConsumeIntegralInRange<uint32_t>(1, pages - first);
    mapPages(odp ? paging.odpMtt : paging.children[which].mtt, first, count,
             in.ConsumeIntegralInRange(0, 3) ? 0 : kRead);
}

void Target::servePageFaults(FuzzedDataProvider &in) {
    if (in.ConsumeIntegralInRange(0, 3) == 0) {
        invalidatePages(in);
        return;
    }
    for (unsigned taken = 0; taken < (1u << kLogEq); ++taken) {
        const uint32_t next = paging.eqConsumed;
        const auto e = host.peek<pib_eqe>(node.eqPage + (next % (1u << kLogEq)) * sizeof(pib_eqe));
        if ((e.flags & PIB_EQE_PHASE) != (((next >> kLogEq) & 1) ^ 1))
            break;
        ++paging.eqConsumed;
        if (e.type == PIB_EQE_PAGE_FAULT)
            serveFault(in, e);
    }
    host.write32(PIB_BAR_REGS, PIB_REG_EQ_DB(node.eqn) + PIB_EQ_DB_CI, paging.eqConsumed);
}

} // namespace pib::fuzz
