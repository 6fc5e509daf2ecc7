// SPDX-License-Identifier: GPL-2.0-or-later
// pib-hca's implicit on-demand paging (docs/prm.md §6.10): a PIB_MR_IMPLICIT
// region over the whole address space, a span without a linked on-demand
// region faulting on the implicit key, the child CREATE_MR links for it
// faulting on its own key for the pages it does not map, and what the
// device refuses. Every byte that moves is checked.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "pib_odp_fixture.hh"

using namespace pib::testing;

namespace {

constexpr unsigned kLogSpan = PIB_IMPLICIT_MIN_LOG_SPAN;
constexpr uint64_t kSpan = uint64_t{1} << kLogSpan;
constexpr uint32_t kSpanPages = kSpan / kPage;
constexpr uint64_t kSpanBase = kIova & ~(kSpan - 1); // kIova's span
constexpr uint32_t kRights = kAccessAll | PIB_ACCESS_FLUSH_GLOBAL;

pib_mr_context implicitContext(uint32_t pdn) {
    pib_mr_context mr{};
    mr.length = UINT64_MAX;
    mr.pdn = pdn;
    mr.access = kRights;
    mr.log_page_size = kLogSpan;
    mr.flags = PIB_MR_IMPLICIT;
    return mr;
}

// An implicit region of node `n`'s PD: its key.
uint32_t createImplicit(Node &n) {
    const FakeHost::Outcome o = n.host.commandIn(PIB_CMD_CREATE_MR, 0, implicitContext(n.pd));
    REQUIRE(o.status == PIB_CMD_STATUS_OK);
    return static_cast<uint32_t>(o.result);
}

// The child of `parent` for the span at `base`, none of its pages mapped.
OdpRegion child(Node &n, uint32_t parent, uint64_t base = kSpanBase) {
    return OdpRegion(n, kSpanPages, base, parent);
}

// Bytes [at, at + len) of the address space, as `r`'s pages on node `n`
// hold them.
std::vector<uint8_t> bytesAt(Node &n, const OdpRegion &r, uint64_t base, uint64_t at,
                             uint64_t len) {
    const std::vector<uint8_t> all = r.bytes(n);
    return {all.begin() + static_cast<long>(at - base),
            all.begin() + static_cast<long>(at - base + len)};
}

uint8_t createStatus(Node &n, const pib_mr_context &mr) {
    return n.host.commandIn(PIB_CMD_CREATE_MR, 0, mr).status;
}

uint8_t destroyStatus(Node &n, uint32_t key) {
    return n.host.command(PIB_CMD_DESTROY_MR, key).status;
}

// An RDMA WRITE of `length` bytes from a's `source` to b's `remote`
// through `rkey`, as far as the wire takes it; the page faults b raised.
std::vector<pib_eqe> writeTo(Pair &p, FaultReader &faults, uint64_t wrId, uint64_t source,
                             uint32_t length, uint64_t remote, uint32_t rkey) {
    p.a.postSend(wrId, {.opcode = PIB_WR_RDMA_WRITE,
                        .local = source,
                        .length = length,
                        .remote = remote,
                        .rkey = rkey});
    p.wire.run();
    return faults.take(p.b);
}

} // namespace

TEST_CASE("pib implicit ODP: a WRITE to a span no region covers faults on the implicit key; "
          "the child linked for it lands the resend, and faults on its own key after",
          "[odp][implicit]") {
    Pair p(PIB_QPT_RC, patient());
    const uint32_t parent = createImplicit(p.b);
    FaultReader faults;
    const uint64_t source = p.a.host.allocRandom(8192, 61);
    auto raised = writeTo(p, faults, 1, source, 8192, kIova + 2048, parent);
    CHECK(p.a.poll().empty());
    REQUIRE(raised.size() == 1);
    CHECK(raised[0].subtype == PIB_PAGE_FAULT_WRITE);
    CHECK(raised[0].data.page_fault.key == parent);
    CHECK(raised[0].data.page_fault.va == kIova + 2048);
    CHECK(raised[0].data.page_fault.length == 8192);

    // The driver links a child for the span and maps the three pages.
    OdpRegion c = child(p.b, parent);
    const uint32_t first = static_cast<uint32_t>((kIova - kSpanBase) / kPage);
    for (uint32_t i = first; i < first + 3; ++i)
        REQUIRE(c.mapPage(p.b, i, kWrite) == PIB_CMD_STATUS_OK);
    REQUIRE(resume(p.b, raised[0].data.page_fault.token) == PIB_CMD_STATUS_OK);
    p.wire.advance(50'000'000);
    auto done = p.a.poll();
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    CHECK(bytesAt(p.b, c, kSpanBase, kIova + 2048, 8192) ==
          std::vector<uint8_t>(p.a.host.at(source), p.a.host.at(source) + 8192));

    // A page of the span the child does not map faults on the child.
    raised = writeTo(p, faults, 2, source, 4096, kSpanBase, parent);
    REQUIRE(raised.size() == 1);
    CHECK(raised[0].data.page_fault.key == c.key);
    CHECK(raised[0].data.page_fault.va == kSpanBase);
    REQUIRE(c.mapPage(p.b, 0, kWrite) == PIB_CMD_STATUS_OK);
    REQUIRE(resume(p.b, raised[0].data.page_fault.token) == PIB_CMD_STATUS_OK);
    p.wire.advance(50'000'000);
    done = p.a.poll();
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    CHECK(bytesAt(p.b, c, kSpanBase, kSpanBase, 4096) ==
          std::vector<uint8_t>(p.a.host.at(source), p.a.host.at(source) + 4096));

    // A WRITE across the span's end: the next span has no child, and the
    // fault there is the implicit key's, for the rest of the WRITE.
    REQUIRE(c.mapPage(p.b, kSpanPages - 1, kWrite) == PIB_CMD_STATUS_OK);
    raised = writeTo(p, faults, 3, source, 4096, kSpanBase + kSpan - 1024, parent);
    REQUIRE(raised.size() == 1);
    CHECK(raised[0].data.page_fault.key == parent);
    CHECK(raised[0].data.page_fault.va == kSpanBase + kSpan);
    CHECK(raised[0].data.page_fault.length == 3072);
    OdpRegion next = child(p.b, parent, kSpanBase + kSpan);
    REQUIRE(next.mapPage(p.b, 0, kWrite) == PIB_CMD_STATUS_OK);
    REQUIRE(resume(p.b, raised[0].data.page_fault.token) == PIB_CMD_STATUS_OK);
    p.wire.advance(50'000'000);
    done = p.a.poll();
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    std::vector<uint8_t> landed = bytesAt(p.b, c, kSpanBase, kSpanBase + kSpan - 1024, 1024);
    const std::vector<uint8_t> after =
        bytesAt(p.b, next, kSpanBase + kSpan, kSpanBase + kSpan, 3072);
    landed.insert(landed.end(), after.begin(), after.end());
    CHECK(landed == std::vector<uint8_t>(p.a.host.at(source), p.a.host.at(source) + 4096));

    // A child destroyed leaves its span to the implicit key again.
    REQUIRE(destroyStatus(p.b, next.key) == PIB_CMD_STATUS_OK);
    raised = writeTo(p, faults, 4, source, 64, kSpanBase + kSpan, parent);
    REQUIRE(raised.size() == 1);
    CHECK(raised[0].data.page_fault.key == parent);
    CHECK(p.b.host.guestErrors() == 0);
}

TEST_CASE("pib implicit ODP: a SEND through the implicit key waits for its child and pages, "
          "then moves every byte",
          "[odp][implicit]") {
    Pair p(PIB_QPT_RC, patient());
    const uint32_t parent = createImplicit(p.a);
    FaultReader faults;
    const uint64_t sink = p.b.host.alloc(8192);
    p.b.postRecv(7, sink, 8192);
    p.a.postSend(2, {.opcode = PIB_WR_SEND, .local = kIova + 100, .length = 5000, .lkey = parent});
    p.wire.run();
    CHECK(p.a.poll().empty());
    auto raised = faults.take(p.a);
    REQUIRE(raised.size() == 1);
    CHECK(raised[0].subtype == 0);
    CHECK(raised[0].data.page_fault.key == parent);
    CHECK(raised[0].data.page_fault.va == kIova + 100);

    OdpRegion c = child(p.a, parent);
    const uint32_t first = static_cast<uint32_t>((kIova - kSpanBase) / kPage);
    p.a.fill(c.pages[first], kPage, 5);
    p.a.fill(c.pages[first + 1], kPage, 6);
    REQUIRE(c.mapPage(p.a, first, kRead) == PIB_CMD_STATUS_OK);
    REQUIRE(c.mapPage(p.a, first + 1, kRead) == PIB_CMD_STATUS_OK);
    REQUIRE(resume(p.a, raised[0].data.page_fault.token) == PIB_CMD_STATUS_OK);
    p.wire.advance(50'000'000);
    const auto sent = p.a.poll();
    const auto received = p.b.poll();
    REQUIRE(sent.size() == 1);
    REQUIRE(received.size() == 1);
    CHECK(sent[0].status == PIB_WC_SUCCESS);
    CHECK(received[0].status == PIB_WC_SUCCESS);
    CHECK(bytesAt(p.a, c, kSpanBase, kIova + 100, 5000) ==
          std::vector<uint8_t>(p.b.host.at(sink), p.b.host.at(sink) + 5000));
    CHECK(faults.take(p.a).empty());
}

TEST_CASE("pib implicit ODP: what CREATE_MR, DESTROY_MR and REREG_MR refuse of implicit regions "
          "and their children; the capability",
          "[odp][implicit]") {
    Node n(PIB_QPT_RC, 0x11);
    CHECK(n.host.caps().device_cap_flags & PIB_DEV_CAP_IMPLICIT_ON_DEMAND);
    const pib_mr_context good = implicitContext(n.pd);
    pib_mr_context bad = good;
    bad.iova = kSpan;
    CHECK(createStatus(n, bad) == PIB_CMD_STATUS_BAD_PARAM);
    bad = good;
    bad.length = kSpan;
    CHECK(createStatus(n, bad) == PIB_CMD_STATUS_BAD_PARAM);
    bad = good;
    bad.mtt_count = 1;
    CHECK(createStatus(n, bad) == PIB_CMD_STATUS_BAD_PARAM);
    bad = good;
    bad.log_page_size = PIB_IMPLICIT_MIN_LOG_SPAN - 1;
    CHECK(createStatus(n, bad) == PIB_CMD_STATUS_BAD_PARAM);
    bad.log_page_size = PIB_IMPLICIT_MAX_LOG_SPAN + 1;
    CHECK(createStatus(n, bad) == PIB_CMD_STATUS_BAD_PARAM);
    bad = good;
    bad.access = PIB_ACCESS_REMOTE_WRITE; // without local write
    CHECK(createStatus(n, bad) == PIB_CMD_STATUS_BAD_PARAM);
    const uint32_t parent = createImplicit(n);
    bad = good;
    bad.parent_key = parent; // an implicit region is nobody's child
    CHECK(createStatus(n, bad) == PIB_CMD_STATUS_BAD_PARAM);
    CHECK(n.host.guestErrors("cmd-bad-param") == 7);

    // Children: the parent's span exactly, its PD and rights, once.
    const uint32_t mtt =
        static_cast<uint32_t>(n.host.command(PIB_CMD_ALLOC_MTT, 0, kSpanPages * 2).result);
    const pib_mr_context c = onDemandContext(n.pd, kSpanBase, kSpanPages, mtt, parent);
    pib_mr_context wrong = c;
    wrong.parent_key = n.key; // a region, not an implicit one
    CHECK(createStatus(n, wrong) == PIB_CMD_STATUS_BAD_PARAM);
    wrong = c;
    wrong.parent_key = parent + 1; // a stale variant
    CHECK(createStatus(n, wrong) == PIB_CMD_STATUS_BAD_PARAM);
    wrong = c;
    wrong.pdn = static_cast<uint32_t>(n.host.command(PIB_CMD_ALLOC_PD).result);
    CHECK(createStatus(n, wrong) == PIB_CMD_STATUS_BAD_PARAM);
    wrong = c;
    wrong.access = PIB_ACCESS_LOCAL_WRITE;
    CHECK(createStatus(n, wrong) == PIB_CMD_STATUS_BAD_PARAM);
    wrong = c;
    wrong.iova = kSpanBase + kPage;
    CHECK(createStatus(n, wrong) == PIB_CMD_STATUS_BAD_PARAM);
    wrong = c;
    wrong.length = kSpan * 2;
    wrong.mtt_count = kSpanPages * 2;
    CHECK(createStatus(n, wrong) == PIB_CMD_STATUS_BAD_PARAM);
    wrong = c;
    wrong.flags = 0; // a pinned region has no parent
    CHECK(createStatus(n, wrong) == PIB_CMD_STATUS_BAD_PARAM);
    // Nor has a fast-registration or a physical one, whatever it names.
    for (const uint32_t named : {parent, n.key, 0xdead00u}) {
        pib_mr_context fast{};
        fast.pdn = n.pd;
        fast.flags = PIB_MR_FAST_REG;
        fast.mtt_index = mtt;
        fast.mtt_count = 4;
        fast.parent_key = named;
        CHECK(createStatus(n, fast) == PIB_CMD_STATUS_BAD_PARAM);
    }
    pib_mr_context physical{};
    physical.length = kSpan;
    physical.pdn = n.pd;
    physical.flags = PIB_MR_PHYSICAL;
    physical.parent_key = parent;
    CHECK(createStatus(n, physical) == PIB_CMD_STATUS_BAD_PARAM);
    const FakeHost::Outcome made = n.host.commandIn(PIB_CMD_CREATE_MR, 0, c);
    REQUIRE(made.status == PIB_CMD_STATUS_OK);
    wrong = c;
    wrong.mtt_index = mtt + kSpanPages; // the same span twice
    CHECK(createStatus(n, wrong) == PIB_CMD_STATUS_BAD_PARAM);
    CHECK(n.host.guestErrors("cmd-bad-param") == 19);

    // The parent stays while a child is linked; neither is reregistered.
    CHECK(destroyStatus(n, parent) == PIB_CMD_STATUS_BUSY);
    CHECK(n.host.commandIn(PIB_CMD_REREG_MR, parent, good).status == PIB_CMD_STATUS_BAD_INDEX);
    const uint32_t childKey = static_cast<uint32_t>(made.result);
    pib_mr_context plain = c;
    plain.flags = 0;
    plain.parent_key = 0;
    CHECK(n.host.commandIn(PIB_CMD_REREG_MR, childKey, plain).status == PIB_CMD_STATUS_BAD_INDEX);
    CHECK(destroyStatus(n, childKey) == PIB_CMD_STATUS_OK);
    CHECK(destroyStatus(n, parent) == PIB_CMD_STATUS_OK);
}

TEST_CASE("pib implicit ODP: a child numbered below its parent moves with it (saved state) and "
          "is linked again where it loads",
          "[odp][implicit][device-state]") {
    Pair p(PIB_QPT_RC, patient());
    // The child takes the number a region freed before the parent's.
    const uint32_t mtt = static_cast<uint32_t>(p.b.host.command(PIB_CMD_ALLOC_MTT, 0, 1).result);
    const uint32_t earlyKey = static_cast<uint32_t>(
        p.b.host.commandIn(PIB_CMD_CREATE_MR, 0, onDemandContext(p.b.pd, kIova, 1, mtt)).result);
    const uint32_t parent = createImplicit(p.b);
    REQUIRE(destroyStatus(p.b, earlyKey) == PIB_CMD_STATUS_OK);
    OdpRegion c = child(p.b, parent);
    REQUIRE(PIB_KEY_INDEX(c.key) < PIB_KEY_INDEX(parent));
    const uint32_t first = static_cast<uint32_t>((kIova - kSpanBase) / kPage);
    REQUIRE(c.mapPage(p.b, first, kWrite) == PIB_CMD_STATUS_OK);

    REQUIRE(p.b.host.move() == "");
    FaultReader faults;
    const uint64_t source = p.a.host.allocRandom(4096, 62);
    CHECK(writeTo(p, faults, 1, source, 4096, kIova, parent).empty());
    const auto done = p.a.poll();
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    CHECK(bytesAt(p.b, c, kSpanBase, kIova, 4096) ==
          std::vector<uint8_t>(p.a.host.at(source), p.a.host.at(source) + 4096));
    CHECK(destroyStatus(p.b, parent) == PIB_CMD_STATUS_BUSY);
    CHECK(destroyStatus(p.b, c.key) == PIB_CMD_STATUS_OK);
    CHECK(destroyStatus(p.b, parent) == PIB_CMD_STATUS_OK);
}
