// SPDX-License-Identifier: GPL-2.0-or-later
// Memory protection with MRs as drivers make them (IBA 10.6): through the
// MTT, over a few pages, starting and ending inside a page, with only the
// rights asked for. Each violation of an R_Key must NAK with "remote
// access error", complete the requester's WQE with REM_ACCESS_ERR and
// touch no byte of the pages, inside the region or around it; the exact
// ends of the region must work.
#include <catch2/catch.hpp>

#include "connected.hh"
#include "connected_fixture.hh"

using namespace pib;
using namespace pib::testing;

namespace {

constexpr uint64_t kIova = 0x70000100;       // 256 bytes into a page
constexpr uint64_t kLength = 2 * 4096 + 512; // ends inside its third page

// An MR of `n` through the MTT: kLength bytes at I/O address `iova` on
// fresh pages of 2^logPage bytes, listed in the MTT highest first (so
// that pages next to each other in the MR are not in guest memory).
struct Region {
    uint32_t key = 0;
    unsigned logPage = 12;
    uint64_t iova = kIova;
    std::vector<uint64_t> pages;

    uint64_t pageSize() const { return uint64_t{1} << logPage; }
    // Where I/O address `at` of the region is in guest memory.
    uint64_t guest(uint64_t at) const {
        const uint64_t offset = at - (iova & ~(pageSize() - 1));
        return pages[offset >> logPage] + (offset & (pageSize() - 1));
    }
};

Region mttMr(Node &n, uint32_t pd, uint32_t access, uint8_t variant = 0, unsigned logPage = 12,
             uint64_t iova = kIova) {
    FakeHost &h = n.host;
    Region r;
    r.logPage = logPage;
    r.iova = iova;
    const uint32_t count =
        static_cast<uint32_t>(((iova + kLength - 1) >> logPage) - (iova >> logPage) + 1);
    const FakeHost::Outcome mtt = h.command(PIB_CMD_ALLOC_MTT, 0, count);
    REQUIRE(mtt.status == PIB_CMD_STATUS_OK);
    pib_mtt_write w{};
    w.count = count;
    std::vector<uint64_t> fresh;
    for (uint32_t i = 0; i < count; ++i)
        fresh.push_back(h.alloc(r.pageSize(), r.pageSize()));
    r.pages.assign(fresh.rbegin(), fresh.rend());
    for (uint32_t i = 0; i < count; ++i) {
        w.entries[i] = r.pages[i];
        for (uint64_t b = 0; b < r.pageSize(); b += 4096) // a pattern to compare with
            std::memset(h.at(r.pages[i] + b), static_cast<int>(0x40 + i), 4096);
    }
    REQUIRE(h.commandIn(PIB_CMD_WRITE_MTT, static_cast<uint32_t>(mtt.result), w).status ==
            PIB_CMD_STATUS_OK);
    pib_mr_context mr{};
    mr.iova = iova;
    mr.length = kLength;
    mr.pdn = pd;
    mr.access = access;
    mr.mtt_index = static_cast<uint32_t>(mtt.result);
    mr.mtt_count = count;
    mr.log_page_size = static_cast<uint8_t>(logPage);
    mr.key_variant = variant;
    const FakeHost::Outcome o = h.commandIn(PIB_CMD_CREATE_MR, 0, mr);
    REQUIRE(o.status == PIB_CMD_STATUS_OK);
    r.key = static_cast<uint32_t>(o.result);
    return r;
}

// Every byte of the region's pages, in MR order.
std::vector<uint8_t> pagesOf(Node &n, const Region &r) {
    std::vector<uint8_t> all;
    for (uint64_t page : r.pages)
        all.insert(all.end(), n.host.at(page), n.host.at(page) + r.pageSize());
    return all;
}

constexpr uint32_t kRemoteAll = kAccessAll;

// A pair whose b side has an MTT region, and a's source and sink buffers.
struct Setup {
    Pair p{PIB_QPT_RC, {}, 16 << 20};
    uint64_t src = 0, dst = 0;
    Region region;

    explicit Setup(uint32_t access, unsigned logPage = 12, uint64_t iova = kIova) {
        src = p.a.host.alloc(kLength + 64);
        dst = p.a.host.alloc(kLength + 64);
        p.a.fill(src, kLength + 64, 5);
        region = mttMr(p.b, p.b.pd, access, 0, logPage, iova);
    }

    // One operation on the region; its completion status on a.
    uint8_t run(uint8_t opcode, uint64_t at, uint32_t length, uint32_t rkey = 0) {
        p.a.postSend(1, {.opcode = opcode,
                         .local = opcode == PIB_WR_RDMA_READ ? dst : src,
                         .length = length,
                         .remote = at,
                         .swapAdd = 7,
                         .rkey = rkey ? rkey : region.key});
        p.wire.run();
        auto done = p.a.poll();
        REQUIRE(done.size() == 1);
        return done[0].status;
    }

    // The requester was told "remote access error", both QPs are in error,
    // and b raised the access-violation event.
    void checkViolation(uint8_t status) {
        CHECK(status == PIB_WC_REM_ACCESS_ERR);
        const auto nak = std::find_if(p.wire.seen.rbegin(), p.wire.seen.rend(),
                                      [](const iba::Packet &k) { return k.aeth.has_value(); });
        REQUIRE(nak != p.wire.seen.rend());
        CHECK(nak->aeth->syndrome == aeth::syndrome(aeth::kNak, aeth::kRemoteAccess));
        CHECK(p.a.qpState() == PIB_QPS_ERR);
        CHECK(p.b.qpState() == PIB_QPS_ERR);
        const auto events = p.b.asyncEvents();
        CHECK(std::count(events.begin(), events.end(), PIB_ASYNC_QP_ACCESS_ERR) == 1);
    }
};

} // namespace

TEST_CASE("an MTT MR: its exact ends work, and a byte past either end is refused", "[mr]") {
    Setup s(kRemoteAll);
    const std::vector<uint8_t> before = pagesOf(s.p.b, s.region);
    SECTION("a WRITE of the whole region, exactly") {
        REQUIRE(s.run(PIB_WR_RDMA_WRITE, kIova, kLength) == PIB_WC_SUCCESS);
        std::vector<uint8_t> want = before;
        const uint64_t start = kIova & 4095; // the region's offset in its first page
        std::memcpy(want.data() + start, s.p.a.host.at(s.src), kLength);
        CHECK(pagesOf(s.p.b, s.region) == want); // and not a byte around it
    }
    SECTION("a READ of the whole region, exactly") {
        REQUIRE(s.run(PIB_WR_RDMA_READ, kIova, kLength) == PIB_WC_SUCCESS);
        CHECK(std::memcmp(s.p.a.host.at(s.dst), before.data() + (kIova & 4095), kLength) == 0);
    }
    SECTION("the first and the last byte") {
        REQUIRE(s.run(PIB_WR_RDMA_WRITE, kIova, 1) == PIB_WC_SUCCESS);
        REQUIRE(s.run(PIB_WR_RDMA_WRITE, kIova + kLength - 1, 1) == PIB_WC_SUCCESS);
        CHECK(*s.p.b.host.at(s.region.guest(kIova)) == *s.p.a.host.at(s.src));
        CHECK(*s.p.b.host.at(s.region.guest(kIova + kLength - 1)) == *s.p.a.host.at(s.src));
    }
    SECTION("a WRITE starting one byte below") {
        s.checkViolation(s.run(PIB_WR_RDMA_WRITE, kIova - 1, 16));
        CHECK(pagesOf(s.p.b, s.region) == before);
    }
    SECTION("a WRITE ending one byte past the end") {
        s.checkViolation(s.run(PIB_WR_RDMA_WRITE, kIova + kLength - 15, 16));
        CHECK(pagesOf(s.p.b, s.region) == before);
    }
    SECTION("a READ ending one byte past the end") {
        s.checkViolation(s.run(PIB_WR_RDMA_READ, kIova, kLength + 1));
    }
    SECTION("an atomic on the last 8 bytes, and one past them") {
        const uint64_t last = (kIova + kLength - 8) & ~uint64_t{7};
        REQUIRE(s.run(PIB_WR_ATOMIC_FETCH_AND_ADD, last, 8) == PIB_WC_SUCCESS);
        s.checkViolation(s.run(PIB_WR_ATOMIC_FETCH_AND_ADD, last + 8, 8));
    }
}

TEST_CASE("an MTT MR grants only the remote rights it was given", "[mr]") {
    const uint64_t aligned = (kIova + 4096) & ~uint64_t{7};
    SECTION("no REMOTE_WRITE: READs work, WRITEs are refused") {
        Setup s(PIB_ACCESS_LOCAL_WRITE | PIB_ACCESS_REMOTE_READ | PIB_ACCESS_REMOTE_ATOMIC);
        const std::vector<uint8_t> before = pagesOf(s.p.b, s.region);
        REQUIRE(s.run(PIB_WR_RDMA_READ, kIova, 100) == PIB_WC_SUCCESS);
        s.checkViolation(s.run(PIB_WR_RDMA_WRITE, kIova, 100));
        CHECK(pagesOf(s.p.b, s.region) == before);
    }
    SECTION("no REMOTE_READ") {
        Setup s(PIB_ACCESS_LOCAL_WRITE | PIB_ACCESS_REMOTE_WRITE);
        REQUIRE(s.run(PIB_WR_RDMA_WRITE, kIova, 100) == PIB_WC_SUCCESS);
        s.checkViolation(s.run(PIB_WR_RDMA_READ, kIova, 100));
    }
    SECTION("no REMOTE_ATOMIC") {
        Setup s(PIB_ACCESS_LOCAL_WRITE | PIB_ACCESS_REMOTE_WRITE | PIB_ACCESS_REMOTE_READ);
        const std::vector<uint8_t> before = pagesOf(s.p.b, s.region);
        s.checkViolation(s.run(PIB_WR_ATOMIC_FETCH_AND_ADD, aligned, 8));
        CHECK(pagesOf(s.p.b, s.region) == before);
    }
    SECTION("local rights only: nothing remote") {
        Setup s(PIB_ACCESS_LOCAL_WRITE);
        s.checkViolation(s.run(PIB_WR_RDMA_READ, kIova, 8));
    }
}

TEST_CASE("an R_Key of another PD, a deregistered MR or a stale variant is refused", "[mr]") {
    SECTION("an MR of another PD than the QP's") {
        Setup s(kRemoteAll);
        const uint32_t otherPd = static_cast<uint32_t>(s.p.b.host.command(PIB_CMD_ALLOC_PD).result);
        const Region other = mttMr(s.p.b, otherPd, kRemoteAll);
        const std::vector<uint8_t> before = pagesOf(s.p.b, other);
        s.checkViolation(s.run(PIB_WR_RDMA_WRITE, kIova, 64, other.key));
        CHECK(pagesOf(s.p.b, other) == before);
    }
    SECTION("a deregistered MR") {
        Setup s(kRemoteAll);
        const std::vector<uint8_t> before = pagesOf(s.p.b, s.region);
        REQUIRE(s.p.b.host.command(PIB_CMD_DESTROY_MR, s.region.key).status == PIB_CMD_STATUS_OK);
        s.checkViolation(s.run(PIB_WR_RDMA_WRITE, kIova, 64));
        CHECK(pagesOf(s.p.b, s.region) == before);
    }
    SECTION("a key whose MR was deregistered and its index reused with another variant") {
        Setup s(kRemoteAll);
        const uint32_t stale = s.region.key;
        REQUIRE(s.p.b.host.command(PIB_CMD_DESTROY_MR, stale).status == PIB_CMD_STATUS_OK);
        const Region fresh = mttMr(s.p.b, s.p.b.pd, kRemoteAll, (stale & 0xff) + 1);
        REQUIRE(PIB_KEY_INDEX(fresh.key) == PIB_KEY_INDEX(stale)); // the same MR slot
        REQUIRE(fresh.key != stale);
        const std::vector<uint8_t> before = pagesOf(s.p.b, fresh);
        s.checkViolation(s.run(PIB_WR_RDMA_WRITE, kIova, 64, stale));
        CHECK(pagesOf(s.p.b, fresh) == before);
    }
}

TEST_CASE("MRs of 2 MiB pages: translation across a page boundary, and the ends", "[mr]") {
    // 8.5 KiB that straddle two 2 MiB pages, listed in the MTT highest first.
    const uint64_t iova = 0x40000000 + (2 << 20) - 4096;
    Setup s(kRemoteAll, 21, iova);
    REQUIRE(s.region.pages.size() == 2);
    REQUIRE(s.region.pages[0] > s.region.pages[1]);
    const std::vector<uint8_t> before = pagesOf(s.p.b, s.region);
    REQUIRE(s.run(PIB_WR_RDMA_WRITE, iova, kLength) == PIB_WC_SUCCESS);
    std::vector<uint8_t> want = before;
    std::memcpy(want.data() + (iova & ((2 << 20) - 1)), s.p.a.host.at(s.src), kLength);
    CHECK(pagesOf(s.p.b, s.region) == want);
    REQUIRE(s.run(PIB_WR_RDMA_READ, iova, kLength) == PIB_WC_SUCCESS);
    CHECK(std::memcmp(s.p.a.host.at(s.dst), s.p.a.host.at(s.src), kLength) == 0);
    s.checkViolation(s.run(PIB_WR_RDMA_WRITE, iova + kLength, 1));
    CHECK(pagesOf(s.p.b, s.region) == want);
}

TEST_CASE("the device offers MR pages from 4 KiB to 1 GiB", "[mr]") {
    FakeHost h;
    pib_dev_cap caps{};
    REQUIRE(h.commandOut(PIB_CMD_QUERY_DEV_CAP, 0, &caps).status == PIB_CMD_STATUS_OK);
    for (unsigned shift = 12; shift <= 30; ++shift)
        CHECK(caps.page_size_cap & (uint64_t{1} << shift));
    CHECK_FALSE(caps.page_size_cap & (uint64_t{1} << 31));
    CHECK_FALSE(caps.page_size_cap & ((uint64_t{1} << 12) - 1));
}

TEST_CASE("a zero-length RDMA WRITE or READ names no memory: its R_Key and VA are not checked",
          "[mr]") {
    // IBA C9-88. ib_srpt posts a zero-length WRITE with no key at all to
    // learn that a connection is up; a NAK there closes every SRP login.
    Setup s(kRemoteAll);
    const std::vector<uint8_t> before = pagesOf(s.p.b, s.region);
    const uint32_t noKey = 0x00bad100;
    CHECK(s.run(PIB_WR_RDMA_WRITE, 0, 0, noKey) == PIB_WC_SUCCESS);
    CHECK(s.run(PIB_WR_RDMA_READ, 0xdead0000, 0, noKey) == PIB_WC_SUCCESS);
    CHECK(s.run(PIB_WR_RDMA_WRITE, kIova, 0, s.region.key) == PIB_WC_SUCCESS);
    CHECK(s.p.a.qpState() == PIB_QPS_RTS);
    CHECK(s.p.b.qpState() == PIB_QPS_RTS);
    const auto events = s.p.b.asyncEvents();
    CHECK(std::count(events.begin(), events.end(), PIB_ASYNC_QP_ACCESS_ERR) == 0);
    CHECK(pagesOf(s.p.b, s.region) == before);
    // One byte with the same key is checked as ever.
    s.checkViolation(s.run(PIB_WR_RDMA_WRITE, 0, 1, noKey));
}
