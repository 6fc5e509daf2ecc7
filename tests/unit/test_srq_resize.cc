// SPDX-License-Identifier: GPL-2.0-or-later
// RESIZE_SRQ (docs/prm.md §6.4): the driver copies the WQEs it has not seen
// completed to the new ring, the device renumbers from there, and
// receives go on taking the same WQEs in the same order.
#include <catch2/catch.hpp>

#include "connected_fixture.hh"

using namespace pib;
using namespace pib::testing;

namespace {

constexpr unsigned kStride = Srq::kStride;

} // namespace

TEST_CASE("RESIZE_SRQ moves the SRQ while its WQEs are being taken", "[srq]") {
    Node n(PIB_QPT_RC, 0x11);
    Srq srq = createSrq(n, 2); // 4 WQEs
    pib_dev_cap cap{};
    n.host.commandOut(PIB_CMD_QUERY_DEV_CAP, 0, &cap);
    CHECK(cap.device_cap_flags & PIB_DEV_CAP_RESIZE_SRQ);
    n.createQp(PIB_QPT_RC, srq.srqn);
    n.connect(n, PIB_QPT_RC, {.sqPsn = 100, .rqPsn = 100});
    const uint64_t out = n.host.alloc(4096), in = n.host.alloc(16 * 1024);

    for (uint64_t i = 0; i < 4; ++i)
        srq.post(100 + i, in + i * 1024);
    // Two SENDs take WQEs 0 and 1; the driver has seen only the first
    // complete, so it copies WQEs 1 .. 3 (1 already taken).
    n.fill(out, 200, 1);
    n.postSend(1, {.local = out, .length = 200});
    n.postSend(2, {.local = out, .length = 200});
    srq.ci = 1;

    uint64_t page = 0;
    pib_srq_context grow = ringOf(n, 4, &page); // 16
    for (uint32_t i = srq.ci; i != srq.pi; ++i)
        std::memcpy(n.host.at(page + (uint64_t{i - srq.ci} << kStride)), n.host.at(srq.slot(i)),
                    1u << kStride);

    // A base past a WQE the device has not taken, or too many for the ring.
    pib_srq_context bad = grow;
    bad.base = 3;
    CHECK(n.host.commandIn(PIB_CMD_RESIZE_SRQ, srq.srqn, bad).status == PIB_CMD_STATUS_BAD_STATE);
    uint64_t tinyPage = 0;
    bad = ringOf(n, 1, &tinyPage); // 2 WQEs, 3 from base 1
    bad.base = 1;
    CHECK(n.host.commandIn(PIB_CMD_RESIZE_SRQ, srq.srqn, bad).status == PIB_CMD_STATUS_BAD_PARAM);
    bad = grow;
    bad.log_wqe_stride = kStride + 1;
    CHECK(n.host.commandIn(PIB_CMD_RESIZE_SRQ, srq.srqn, bad).status == PIB_CMD_STATUS_BAD_PARAM);

    grow.base = srq.ci;
    REQUIRE(n.host.commandIn(PIB_CMD_RESIZE_SRQ, srq.srqn, grow).status == PIB_CMD_STATUS_OK);
    srq.page = page, srq.log = 4, srq.pi -= srq.ci, srq.ci = 0;
    pib_srq_context q{};
    n.host.commandOut(PIB_CMD_QUERY_SRQ, srq.srqn, &q);
    CHECK(q.log_wqe_count == 4);
    CHECK(q.wqe_count == 2); // WQEs 2 and 3, now 1 and 2

    // Ten more WQEs fit only in the new ring; twelve SENDs take them all.
    for (uint64_t i = 4; i < 14; ++i)
        srq.post(100 + i, in + i * 1024);
    for (uint64_t i = 3; i <= 14; ++i) {
        n.fill(out, 200, static_cast<uint8_t>(i));
        n.postSend(i, {.local = out, .length = 200});
    }
    std::vector<uint64_t> received;
    for (const pib_cqe &c : n.poll()) {
        REQUIRE(c.status == PIB_WC_SUCCESS);
        if (c.opcode & 0x80)
            received.push_back(c.wr_id);
    }
    std::vector<uint64_t> expected;
    for (uint64_t i = 0; i < 14; ++i)
        expected.push_back(100 + i);
    CHECK(received == expected);
    // Each message landed in its own WQE's buffer.
    for (uint32_t i = 2; i < 14; ++i)
        CHECK(n.host.at(in + i * 1024)[5] == static_cast<uint8_t>(i + 1 + 5 * 7));
}
