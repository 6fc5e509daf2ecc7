// SPDX-License-Identifier: GPL-2.0-or-later
// pib-hca's on-demand paging (docs/prm.md §6.9) as its unit tests drive
// it: on-demand regions whose pages the test maps as a driver would, the
// page faults a node's async EQ took, and resuming them.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "connected_fixture.hh"

namespace pib::testing {

inline constexpr uint64_t kIova = 0x7f0000100000;
inline constexpr uint64_t kPage = PIB_PAGE_SIZE;
inline constexpr uint64_t kRead = PIB_MTT_READ, kWrite = PIB_MTT_READ | PIB_MTT_WRITE;

// The context of an on-demand region of `count` 4 KiB pages at `iova` in
// PD `pdn`, through the MTT range at `mtt`, with every right; with
// `parent`, that implicit region's child (prm §6.10).
inline pib_mr_context onDemandContext(uint32_t pdn, uint64_t iova, uint32_t count, uint32_t mtt,
                                      uint32_t parent = 0) {
    pib_mr_context mr{};
    mr.iova = iova;
    mr.length = count * kPage;
    mr.pdn = pdn;
    mr.access = kAccessAll | PIB_ACCESS_FLUSH_GLOBAL;
    mr.mtt_index = mtt;
    mr.mtt_count = count;
    mr.log_page_size = 12;
    mr.flags = PIB_MR_ON_DEMAND;
    mr.parent_key = parent;
    return mr;
}

// An on-demand region of `count` pages from `iova` on node `n`, its
// entries absent, every right; and its pages, which the driver maps. With
// `parent`, the span of that implicit region it covers (prm §6.10).
struct OdpRegion {
    uint32_t key = 0, mtt = 0;
    std::vector<uint64_t> pages;

    OdpRegion(Node &n, uint32_t count, uint64_t iova = kIova, uint32_t parent = 0) {
        mtt = static_cast<uint32_t>(n.host.command(PIB_CMD_ALLOC_MTT, 0, count).result);
        for (uint32_t i = 0; i < count; ++i)
            pages.push_back(n.host.alloc(kPage));
        const FakeHost::Outcome o =
            n.host.commandIn(PIB_CMD_CREATE_MR, 0, onDemandContext(n.pd, iova, count, mtt, parent));
        REQUIRE(o.status == PIB_CMD_STATUS_OK);
        key = static_cast<uint32_t>(o.result);
    }
    // Every byte of its pages, in order, as node `n` holds them.
    std::vector<uint8_t> bytes(Node &n) const {
        std::vector<uint8_t> all;
        for (uint64_t page : pages)
            all.insert(all.end(), n.host.at(page), n.host.at(page) + kPage);
        return all;
    }
    // WRITE_MTT of page `i` with `bits` (0: absent); its status.
    uint8_t mapPage(Node &n, uint32_t i, uint64_t bits) {
        pib_mtt_write w{};
        w.count = 1;
        w.entries[0] = bits ? pages[i] | bits : 0;
        return n.host.commandIn(PIB_CMD_WRITE_MTT, mtt + i, w).status;
    }
    // WRITE_MTT of every page with `bits` (0: absent); its status.
    uint8_t map(Node &n, const std::vector<uint64_t> &bits) {
        pib_mtt_write w{};
        w.count = static_cast<uint32_t>(bits.size());
        for (size_t i = 0; i < bits.size(); ++i)
            w.entries[i] = bits[i] ? pages[i] | bits[i] : 0;
        return n.host.commandIn(PIB_CMD_WRITE_MTT, mtt, w).status;
    }
};

// The page faults node `n`'s async EQ took since the last call.
struct FaultReader {
    uint32_t next = 0;
    std::vector<pib_eqe> take(Node &n) {
        std::vector<pib_eqe> out;
        constexpr uint32_t kLog = 6; // the node's async EQ
        for (;; ++next) {
            const pib_eqe e =
                n.host.peek<pib_eqe>(n.eqPage + (next % (1u << kLog)) * sizeof(pib_eqe));
            if ((e.flags & PIB_EQE_PHASE) != (((next >> kLog) & 1) ^ 1))
                break;
            if (e.type == PIB_EQE_PAGE_FAULT)
                out.push_back(e);
        }
        return out;
    }
};

inline uint8_t resume(Node &n, uint64_t token, bool failed = false) {
    return n.host.command(PIB_CMD_PAGE_FAULT_RESUME, failed ? 1 : 0, token).status;
}

// The driver maps `r`'s pages (on `n`) with `bits` and resumes fault
// `token`; what a's send queue completed once any RNR wait is over.
inline std::vector<pib_cqe> mapAndResume(Pair &p, Node &n, OdpRegion &r,
                                         const std::vector<uint64_t> &bits, uint64_t token) {
    REQUIRE(r.map(n, bits) == PIB_CMD_STATUS_OK);
    REQUIRE(resume(n, token) == PIB_CMD_STATUS_OK);
    p.wire.advance(50'000'000);
    return p.a.poll();
}

// An RDMA WRITE of `length` bytes from `r`'s kIova on a to `remote` of b;
// the page faults a raised.
inline std::vector<pib_eqe> writeFromRegion(Pair &p, FaultReader &faults, const OdpRegion &r,
                                            uint32_t length, uint64_t remote) {
    p.a.postSend(1, {.opcode = PIB_WR_RDMA_WRITE,
                     .local = kIova,
                     .length = length,
                     .remote = remote,
                     .lkey = r.key});
    p.wire.run();
    return faults.take(p.a);
}

inline Node::Options patient() {
    Node::Options o;
    o.rnrRetry = 7; // for ever, as the kernel's ODP users set it
    return o;
}

} // namespace pib::testing
