// SPDX-License-Identifier: GPL-2.0-or-later
// libFuzzer harness of the device core, through its C interface with the
// unit tests' fake host. Each input starts from a device that a driver set
// up as docs/prm.md says: an ACTIVE port, RC and UC QPs connected to a
// peer behind LID 0x22, an RC QP on an SRQ, a UD QP in a multicast group,
// QP0 and QP1, a physical MR and one through the MTT. The input then
// drives it the way a hostile guest and a hostile peer would: register and
// doorbell writes, commands with mailboxes from the input, WQEs, packets
// from the fabric (CRC-valid and addressed to the QPs, some corrupted or
// split across reads), raw stream bytes, timer expiries, link flaps,
// resets, a host queue that fills up, and DMA aimed at the device's own
// BAR0. Built with ASan and UBSan: any memory error or undefined behaviour
// is a finding; so is a broken invariant checked below.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "connected.hh"
#include "connected_fixture.hh"
#include "frame.hh"
#include "limits.hh"
#include "packet.hh"

using namespace pib;
using namespace pib::testing;

namespace {

constexpr uint16_t kLid = 0x11, kPeerLid = 0x22;
constexpr uint32_t kPeerQpn = 0x50;
constexpr uint16_t kMlid = 0xc001;
constexpr uint64_t kRamSize = 512 << 10;
constexpr uint64_t kMttIova = 0x40000000;

void check(bool ok, const char *what) {
    if (!ok) {
        std::fprintf(stderr, "fuzz-core: invariant broken: %s\n", what);
        std::abort();
    }
}

// The device and the objects the set-up made, as the harness drives them.
struct Target {
    Node node{PIB_QPT_RC, kLid, kRamSize};
    Node::Qp rc{}, uc{}, ud{}, srqQp{}, smi{}, gsi{}, xrcTgt{};
    uint32_t srqn = 0, xrcSrqn = 0, mttKey = 0, fastRegKey = 0, windowKeys[2] = {};
    uint64_t srqPage = 0;
    uint32_t srqPi = 0;
    uint64_t data = 0;                         // 64 KiB of guest RAM the input writes
    // What the peer sends next: RC, UC, SRQ QP, XRC TGT QP.
    uint32_t expectedPsn[4] = {200, 200, 200, 200};
    uint32_t peerPsn = 100;                    // RC: what the peer answers

    Target() {
        FakeHost &h = node.host;
        rc = node.current();
        node.connectTo(kPeerLid, kPeerQpn, PIB_QPT_RC, {});
        uc = node.createQp(PIB_QPT_UC);
        node.connectTo(kPeerLid, kPeerQpn + 1, PIB_QPT_UC, {});
        srqn = createSrq();
        srqQp = node.createQp(PIB_QPT_RC, srqn);
        node.connectTo(kPeerLid, kPeerQpn + 2, PIB_QPT_RC, {});
        // An XRC TGT QP, and an XRC SRQ of its domain with WQEs posted.
        xrcTgt = node.createQp(PIB_QPT_XRC_TGT);
        node.connectTo(kPeerLid, kPeerQpn + 3, PIB_QPT_XRC_TGT, {});
        Srq xrc = testing::createSrq(node, 4, XrcSrq{node.xrcd, node.cqn});
        for (uint64_t i = 0; i < 8; ++i)
            xrc.post(i, h.alloc(4096), 4096);
        xrcSrqn = xrc.srqn;
        ud = node.createQp(PIB_QPT_UD);
        toRtsDatagram(PIB_QPT_UD);
        pib_mcast m{};
        m.gid[0] = 0xff;
        m.gid[15] = 1;
        m.mlid = kMlid;
        h.commandIn(PIB_CMD_ATTACH_MCAST, ud.qpn, m);
        smi = node.createQp(PIB_QPT_SMI);
        toRtsDatagram(PIB_QPT_SMI);
        gsi = node.createQp(PIB_QPT_GSI);
        toRtsDatagram(PIB_QPT_GSI);
        mttKey = createMttMr();
        fastRegKey = node.createFastRegMr(4);
        for (uint8_t type : {PIB_MW_TYPE_1, PIB_MW_TYPE_2}) {
            pib_mw_context mw{};
            mw.pdn = node.pd;
            mw.type = type;
            windowKeys[type - 1] =
                static_cast<uint32_t>(h.commandIn(PIB_CMD_CREATE_MW, 0, mw).result);
        }
        data = h.alloc(64 << 10);
        node.use(rc);
        h.portOutput[1].clear();
        h.clear();
    }

    uint32_t createSrq() {
        FakeHost &h = node.host;
        std::vector<uint64_t> pages;
        pib_srq_context srq{};
        srq.buf = h.ring(1, &pages);
        srqPage = pages.front();
        srq.pdn = node.pd;
        srq.uar_page = node.uar;
        srq.log_wqe_count = 6;
        srq.log_wqe_stride = 6;
        srq.limit = 2;
        return static_cast<uint32_t>(h.commandIn(PIB_CMD_CREATE_SRQ, 0, srq).result);
    }

    void toRtsDatagram(uint8_t type) { node.host.datagramToRts(node.qpn, type, 0x11111111); }

    // Four 4 KiB pages of guest RAM through the MTT, at I/O address kMttIova.
    uint32_t createMttMr() {
        FakeHost &h = node.host;
        const pib_buf_desc pages = h.ring(4);
        pib_mr_context mr{};
        mr.iova = kMttIova;
        mr.length = 4 * PIB_PAGE_SIZE;
        mr.pdn = node.pd;
        mr.access = kAccessAll | PIB_ACCESS_MW_BIND;
        mr.mtt_index = pages.mtt_index;
        mr.mtt_count = 4;
        mr.log_page_size = 12;
        return static_cast<uint32_t>(h.commandIn(PIB_CMD_CREATE_MR, 0, mr).result);
    }
};

// An address a WQE or packet names: mostly the data area, sometimes the
// MTT region, the device's own BAR0, or anything at all.
uint64_t pickAddress(FuzzedDataProvider &in, const Target &t) {
    switch (in.ConsumeIntegralInRange(0, 7)) {
    case 0:
        return FakeHost::kBar0Base + in.ConsumeIntegralInRange<uint64_t>(0, PIB_REGS_SIZE - 1);
    case 1:
        return kMttIova + in.ConsumeIntegralInRange<uint64_t>(0, 4 * PIB_PAGE_SIZE);
    case 2:
        return in.ConsumeIntegral<uint64_t>();
    default:
        return t.data + in.ConsumeIntegralInRange<uint64_t>(0, 64 << 10);
    }
}

uint32_t pickKey(FuzzedDataProvider &in, const Target &t) {
    switch (in.ConsumeIntegralInRange(0, 6)) {
    case 0:
        return t.mttKey;
    case 1:
        return in.ConsumeIntegral<uint32_t>();
    case 2: // the fast-registration MR or a window, with any variant
        return ((in.ConsumeBool() ? t.fastRegKey : t.windowKeys[in.ConsumeBool()]) & ~0xffu) |
               in.ConsumeIntegral<uint8_t>();
    default:
        return t.node.key;
    }
}

uint32_t pickLength(FuzzedDataProvider &in) {
    switch (in.ConsumeIntegralInRange(0, 7)) {
    case 0:
        return in.ConsumeIntegral<uint32_t>();
    case 1:
        return in.ConsumeIntegralInRange<uint32_t>(0, 1 << 20);
    default:
        return in.ConsumeIntegralInRange<uint32_t>(0, 5000);
    }
}

const Node::Qp &pickQp(FuzzedDataProvider &in, const Target &t) {
    const Node::Qp *qps[] = {&t.rc, &t.uc, &t.srqQp, &t.ud, &t.smi, &t.gsi};
    return *qps[in.ConsumeIntegralInRange<size_t>(0, std::size(qps) - 1)];
}

// A send WQE of fields from the input in the QP's next slot, then (mostly)
// the doorbell that posts it.
void postSend(FuzzedDataProvider &in, Target &t) {
    Node &n = t.node;
    n.use(pickQp(in, t));
    const uint64_t slot = n.sqPage + (n.sqPi % (1u << Node::kLogSq)) * 128;
    std::vector<uint8_t> wqe(128, 0);
    pib_wqe_ctrl ctrl{};
    ctrl.wr_id = n.sqPi;
    ctrl.opcode = in.ConsumeIntegralInRange<uint8_t>(0, 12);
    ctrl.flags = in.ConsumeIntegral<uint8_t>();
    ctrl.num_ds = in.ConsumeIntegralInRange<uint8_t>(0, 9);
    ctrl.imm = in.ConsumeIntegral<uint32_t>();
    std::memcpy(wqe.data(), &ctrl, sizeof(ctrl));
    size_t dataAt = 32; // where data segments start
    if (ctrl.opcode == PIB_WR_REG_MR && in.ConsumeBool()) {
        // A plausible fast registration of the page list in the data area.
        pib_wqe_reg_mr reg{};
        reg.iova = pickAddress(in, t);
        reg.length = in.ConsumeIntegralInRange<uint64_t>(0, 5 * PIB_PAGE_SIZE);
        reg.page_list = in.ConsumeIntegralInRange(0, 7) ? t.data : pickAddress(in, t);
        reg.key = pickKey(in, t);
        reg.access = in.ConsumeIntegralInRange<uint32_t>(0, 16);
        reg.page_count = in.ConsumeIntegralInRange<uint32_t>(0, 6);
        reg.log_page_size = in.ConsumeIntegralInRange<uint8_t>(11, 13);
        for (uint32_t i = 0; i < reg.page_count; ++i) {
            const uint64_t page = in.ConsumeBool() ? t.data + i * PIB_PAGE_SIZE : pickAddress(in, t);
            std::memcpy(t.node.host.at(t.data) + i * 8, &page, 8);
        }
        std::memcpy(wqe.data() + 16, &reg, sizeof(reg));
        dataAt = 16 + sizeof(reg);
    } else if (ctrl.opcode == PIB_WR_BIND_MW && in.ConsumeBool()) {
        // A plausible bind of a window to the MTT region (which allows it).
        pib_wqe_bind_mw bind{};
        bind.addr = pickAddress(in, t);
        bind.length = in.ConsumeIntegralInRange<uint64_t>(0, 5 * PIB_PAGE_SIZE);
        bind.mw_key = pickKey(in, t);
        bind.new_rkey = pickKey(in, t);
        bind.mr_key = pickKey(in, t);
        bind.access = in.ConsumeIntegralInRange<uint32_t>(0, 16);
        std::memcpy(wqe.data() + 16, &bind, sizeof(bind));
        dataAt = 16 + sizeof(bind);
    } else if (in.ConsumeBool()) { // UD: an address vector and the peer's QP
        pib_wqe_ud ud{};
        ud.av.dlid = in.ConsumeBool() ? kPeerLid : in.ConsumeIntegral<uint16_t>();
        ud.av.port = 1;
        ud.av.flags = in.ConsumeBool() ? PIB_AV_GRH : 0;
        ud.remote_qpn = in.ConsumeIntegral<uint32_t>();
        ud.remote_qkey = in.ConsumeIntegral<uint32_t>();
        std::memcpy(wqe.data() + 16, &ud, sizeof(ud));
    } else { // connected: a remote address, maybe atomic operands
        pib_wqe_raddr r{pickAddress(in, t), pickKey(in, t), 0};
        std::memcpy(wqe.data() + 16, &r, sizeof(r));
    }
    for (size_t at = dataAt; at + 16 <= 128; at += 16) {
        if (ctrl.flags & PIB_WQE_INLINE && at == dataAt) {
            const uint32_t count = in.ConsumeIntegralInRange<uint32_t>(0, 2000) | PIB_INLINE_FLAG;
            std::memcpy(wqe.data() + at, &count, 4);
            continue;
        }
        pib_wqe_data d{pickLength(in), pickKey(in, t), pickAddress(in, t)};
        std::memcpy(wqe.data() + at, &d, sizeof(d));
    }
    std::memcpy(n.host.at(slot), wqe.data(), wqe.size());
    ++n.sqPi;
    const uint32_t pi = in.ConsumeIntegralInRange(0, 15) ? n.sqPi : in.ConsumeIntegral<uint32_t>();
    n.ring(PIB_DB_SQ, pi);
}

void postRecv(FuzzedDataProvider &in, Target &t) {
    Node &n = t.node;
    if (in.ConsumeBool()) { // into the SRQ
        const uint64_t slot = t.srqPage + (t.srqPi % 64) * 64;
        n.host.writeRecvWqe(slot, t.srqPi, pickKey(in, t), pickAddress(in, t), pickLength(in));
        ++t.srqPi;
        pib_core_bar_write(n.host.core, PIB_BAR_DOORBELL,
                           uint64_t{n.uar} * PIB_PAGE_SIZE + PIB_DB_SRQ,
                           uint64_t{t.srqPi} << 32 | t.srqn, 8);
        return;
    }
    const Node::Qp *qps[] = {&t.rc, &t.uc, &t.ud, &t.smi, &t.gsi};
    n.use(*qps[in.ConsumeIntegralInRange<size_t>(0, std::size(qps) - 1)]);
    const uint64_t slot = n.rqPage + (n.rqPi % (1u << Node::kLogRq)) * 64;
    n.host.writeRecvWqe(slot, n.rqPi, pickKey(in, t), pickAddress(in, t), pickLength(in));
    ++n.rqPi;
    n.ring(PIB_DB_RQ, n.rqPi);
}

// A packet from the peer: valid headers for one of the QPs (or not quite),
// built with correct CRCs, then maybe corrupted or cut across two reads.
void receivePacket(FuzzedDataProvider &in, Target &t) {
    iba::Packet p;
    p.lrh.slid = in.ConsumeIntegralInRange(0, 7) ? kPeerLid : in.ConsumeIntegral<uint16_t>();
    p.lrh.sl = in.ConsumeIntegralInRange<uint8_t>(0, 15);
    const unsigned target = in.ConsumeIntegralInRange(0, 6);
    static constexpr uint8_t kConnectedOps[] = {
        iba::kSendFirst,         iba::kSendMiddle,         iba::kSendLast,
        iba::kSendLastImm,       iba::kSendOnly,           iba::kSendOnlyImm,
        iba::kWriteFirst,        iba::kWriteMiddle,        iba::kWriteLast,
        iba::kWriteLastImm,      iba::kWriteOnly,          iba::kWriteOnlyImm,
        iba::kReadRequest,       iba::kReadResponseFirst,  iba::kAcknowledge,
        iba::kReadResponseOnly,  iba::kCompareSwap,        iba::kFetchAdd,
        iba::kAtomicAcknowledge, iba::kReadResponseMiddle, iba::kReadResponseLast,
        iba::kSendLastInv,       iba::kSendOnlyInv};
    uint8_t op = kConnectedOps[in.ConsumeIntegralInRange<size_t>(0, std::size(kConnectedOps) - 1)];
    unsigned psnSlot = 0;
    switch (target) {
    case 0: // RC
    case 1: // UC
    case 2: // RC on the SRQ
        psnSlot = target;
        p.lrh.dlid = kLid;
        p.bth.destQp = (target == 0 ? t.rc : target == 1 ? t.uc : t.srqQp).qpn;
        p.bth.opcode =
            static_cast<uint8_t>((target == 1 ? iba::kTransportUc : iba::kTransportRc) | op);
        break;
    case 5: // the XRC TGT QP, mostly to its domain's XRC SRQ
        psnSlot = 3;
        p.lrh.dlid = kLid;
        p.bth.destQp = t.xrcTgt.qpn;
        p.bth.opcode = static_cast<uint8_t>(iba::kTransportXrc | op);
        p.xrceth = in.ConsumeIntegralInRange(0, 3)   ? t.xrcSrqn
                   : in.ConsumeBool()                ? t.srqn
                                                     : in.ConsumeIntegralInRange(0u, 0xffffffu);
        break;
    case 3: // UD, unicast or to the multicast group
        p.lrh.dlid = in.ConsumeBool() ? kLid : kMlid;
        p.bth.destQp = p.lrh.dlid == kMlid ? iba::kMulticastQpn : t.ud.qpn;
        p.bth.opcode = in.ConsumeBool() ? iba::kUdSendOnly : iba::kUdSendOnlyImm;
        break;
    case 4: // QP0 or QP1
        p.lrh.dlid = in.ConsumeBool() ? kLid : iba::kPermissiveLid;
        p.bth.destQp = in.ConsumeIntegralInRange(0, 1);
        p.lrh.vl = p.bth.destQp == 0 ? 15 : 0;
        p.bth.opcode = iba::kUdSendOnly;
        break;
    default: // anything
        p.lrh.dlid = in.ConsumeIntegral<uint16_t>();
        p.lrh.vl = in.ConsumeIntegralInRange<uint8_t>(0, 15);
        p.bth.destQp = in.ConsumeIntegralInRange<uint32_t>(0, 0xffffff);
        p.bth.opcode = in.ConsumeIntegral<uint8_t>();
        break;
    }
    const iba::Layout layout = iba::layoutOf(p.bth.opcode);
    if (!layout.valid)
        p.bth.opcode = iba::kUdSendOnly; // build() needs a layout it knows
    const iba::Layout l = iba::layoutOf(p.bth.opcode);
    p.bth.pkey = in.ConsumeIntegralInRange(0, 7) ? 0xffff : in.ConsumeIntegral<uint16_t>();
    p.bth.ackReq = in.ConsumeBool();
    p.bth.solicited = in.ConsumeBool();
    // Mostly the PSN the QP expects, sometimes near it, sometimes anything.
    const int delta = in.ConsumeIntegralInRange(-3, 3);
    const bool response = (p.bth.opcode & 0x1f) >= iba::kReadResponseFirst &&
                          (p.bth.opcode & 0x1f) <= iba::kAtomicAcknowledge;
    uint32_t &base = response ? t.peerPsn : t.expectedPsn[psnSlot];
    p.bth.psn = in.ConsumeIntegralInRange(0, 15) ? psnAdd(base, static_cast<uint32_t>(delta))
                                                 : in.ConsumeIntegralInRange(0u, 0xffffffu);
    if (delta == 0)
        base = psnAdd(base, 1);
    if (in.ConsumeIntegralInRange(0, 7) == 0) {
        iba::Grh g;
        g.hopLimit = in.ConsumeIntegral<uint8_t>();
        g.dgid[0] = 0xff;
        g.dgid[15] = in.ConsumeIntegralInRange<uint8_t>(0, 2);
        p.grh = g;
        p.lrh.lnh = iba::kLnhIbaGlobal;
    }
    if (l.deth)
        p.deth = iba::Deth{in.ConsumeBool() ? 0x11111111u : in.ConsumeIntegral<uint32_t>(),
                           in.ConsumeIntegralInRange<uint32_t>(0, 0xffffff)};
    if (l.reth)
        p.reth = iba::Reth{pickAddress(in, t), pickKey(in, t), pickLength(in)};
    if (l.aeth)
        p.aeth = iba::Aeth{in.ConsumeIntegral<uint8_t>(), in.ConsumeIntegralInRange(0u, 0xffffffu)};
    if (l.atomicEth)
        p.atomicEth =
            iba::AtomicEth{pickAddress(in, t), pickKey(in, t), in.ConsumeIntegral<uint64_t>(),
                           in.ConsumeIntegral<uint64_t>()};
    if (l.atomicAckEth)
        p.atomicAck = in.ConsumeIntegral<uint64_t>();
    if (l.imm)
        p.imm = in.ConsumeIntegral<uint32_t>();
    if (l.ieth)
        p.ieth = pickKey(in, t);
    if (l.payload) {
        const size_t len = in.ConsumeIntegralInRange<size_t>(0, 4096);
        p.payload = in.ConsumeBytes<uint8_t>(len);
        p.payload.resize(len);
    }
    std::vector<uint8_t> bytes = iba::build(p);
    if (in.ConsumeIntegralInRange(0, 15) == 0 && !bytes.empty()) // a bit flipped on the wire
        bytes[in.ConsumeIntegralInRange<size_t>(0, bytes.size() - 1)] ^=
            static_cast<uint8_t>(1u << in.ConsumeIntegralInRange(0, 7));
    const std::vector<uint8_t> frame = wire::encode(PIB_WIRE_PACKET, bytes);
    const size_t cut =
        in.ConsumeBool() ? frame.size() : in.ConsumeIntegralInRange<size_t>(0, frame.size());
    pib_core_port_receive(t.node.host.core, 1, frame.data(), cut);
    pib_core_port_receive(t.node.host.core, 1, frame.data() + cut, frame.size() - cut);
}

void linkFlap(FuzzedDataProvider &in, Target &t) {
    pib_core *core = t.node.host.core;
    pib_core_port_connected(core, 1, 0);
    if (in.ConsumeBool())
        return; // stays down for a while
    pib_core_port_connected(core, 1, 1);
    pib_wire_hello hello{};
    const auto frame = wire::encode(
        PIB_WIRE_HELLO, std::span(reinterpret_cast<const uint8_t *>(&hello), sizeof(hello)));
    pib_core_port_receive(core, 1, frame.data(), frame.size());
}

// A command whose mailbox the input writes (over a valid-looking start
// taken from a real object's number, mostly).
void command(FuzzedDataProvider &in, Target &t) {
    FakeHost &h = t.node.host;
    const uint16_t op =
        kCommandOpcodes[in.ConsumeIntegralInRange<size_t>(0, std::size(kCommandOpcodes) - 1)];
    const uint64_t box = t.data + (60 << 10);
    const std::vector<uint8_t> bytes = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange(0, 256));
    std::fill_n(h.at(box), 4096, 0);
    std::copy(bytes.begin(), bytes.end(), h.at(box));
    const uint32_t modifier = in.ConsumeBool() ? in.ConsumeIntegralInRange<uint32_t>(0, 40)
                                               : in.ConsumeIntegral<uint32_t>();
    const uint64_t inAddr = in.ConsumeIntegralInRange(0, 7) ? box : pickAddress(in, t);
    const uint64_t outAddr = in.ConsumeIntegralInRange(0, 7) ? box : pickAddress(in, t);
    h.command(op, modifier, inAddr, outAddr, in.ConsumeBool() ? PIB_CMD_CTRL_EVENT : 0);
}

// The host's view of the device, in any state it is in: it must answer,
// and the JSON must parse.
void inspect(FuzzedDataProvider &in, FakeHost &h) {
    static constexpr const char *kKinds[] = {"port", "eq", "cq", "qp", "srq", "mr"};
    std::string what;
    if (in.ConsumeBool())
        what = std::string(kKinds[in.ConsumeIntegralInRange<size_t>(0, std::size(kKinds) - 1)]) +
               " " + std::to_string(in.ConsumeIntegralInRange<uint32_t>(0, 300));
    char *answer = nullptr;
    const int rc = pib_core_inspect(h.core, what.c_str(), in.ConsumeBool(), &answer);
    check(answer != nullptr, "an inspection gave no answer");
    check(rc == 0 || !what.empty(), "the whole device could not be inspected");
    std::free(answer);
}

// The host's test facilities, on the objects the target has.
void inject(FuzzedDataProvider &in, Target &t) {
    const std::string qp = std::to_string(t.node.qpn);
    const std::string lines[] = {
        "drop " + qp + " " + std::to_string(in.ConsumeIntegralInRange(1, 5)),
        "corrupt " + qp + " " + std::to_string(in.ConsumeIntegralInRange(1, 5)),
        "wqe " + qp + " REM_ACCESS_ERR 0x42",
        "command " + std::to_string(in.ConsumeIntegralInRange(0, 0x50)) + " BUSY",
        "stop cq " + std::to_string(t.node.cqn),
        "resume cq " + std::to_string(t.node.cqn),
        "stop eq " + std::to_string(t.node.eqn),
        "resume eq " + std::to_string(t.node.eqn),
        "event qp-fatal " + qp,
        "clear",
    };
    char *answer = nullptr;
    pib_core_inject(t.node.host.core,
                    lines[in.ConsumeIntegralInRange<size_t>(0, std::size(lines) - 1)].c_str(),
                    &answer);
    std::free(answer);
}

void step(FuzzedDataProvider &in, Target &t) {
    FakeHost &h = t.node.host;
    switch (in.ConsumeIntegralInRange(0, 15)) {
    case 0:
    case 1:
        postSend(in, t);
        break;
    case 2:
        postRecv(in, t);
        break;
    case 3:
    case 4:
    case 5:
        receivePacket(in, t);
        break;
    case 6: { // raw stream bytes
        const auto bytes = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange(0, 512));
        pib_core_port_receive(h.core, 1, bytes.data(), bytes.size());
        break;
    }
    case 7:
        command(in, t);
        break;
    case 8: // a register
        pib_core_bar_write(h.core, PIB_BAR_REGS, in.ConsumeIntegralInRange(0u, PIB_REGS_SIZE + 16),
                           in.ConsumeIntegral<uint64_t>(), 1u << in.ConsumeIntegralInRange(0, 3));
        break;
    case 9: // a doorbell, anywhere in BAR2
        pib_core_bar_write(h.core, PIB_BAR_DOORBELL,
                           in.ConsumeIntegralInRange(0u, 20 * PIB_PAGE_SIZE),
                           in.ConsumeIntegral<uint64_t>(), in.ConsumeBool() ? 8 : 4);
        break;
    case 10:
        pib_core_bar_read(h.core, in.ConsumeBool() ? PIB_BAR_REGS : PIB_BAR_DOORBELL,
                          in.ConsumeIntegralInRange(0u, 0x2000u),
                          1u << in.ConsumeIntegralInRange(0, 3));
        break;
    case 11: // time passes: retransmissions, RNR waits
        h.advance(in.ConsumeIntegralInRange<uint64_t>(0, 200'000'000));
        break;
    case 12:
        linkFlap(in, t);
        break;
    case 13: // the host's queue fills, or drains
        h.portQueueLimit =
            in.ConsumeBool() ? SIZE_MAX : in.ConsumeIntegralInRange<size_t>(0, 65536);
        h.portOutput[1].clear();
        pib_core_port_writable(h.core, 1);
        break;
    case 14:
        h.runScheduled();
        break;
    default: { // guest RAM the input writes (WQEs, buffers, rings), or the host acts
        const int pick = in.ConsumeIntegralInRange(0, 63);
        if (pick == 0) {
            pib_core_reset(h.core);
        } else if (pick == 1) { // the host looks at whatever state the device is in
            inspect(in, h);
        } else if (pick == 2) { // and arms its test facilities
            inject(in, t);
        } else {
            const uint64_t at = t.data + in.ConsumeIntegralInRange<uint64_t>(0, (64 << 10) - 256);
            const auto bytes = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange(0, 256));
            std::copy(bytes.begin(), bytes.end(), h.at(at));
        }
        break;
    }
    }
    check(h.mappings == 0, "the core returned with guest RAM still mapped");
    // Nothing a guest or a peer sends may break the core inside: an
    // exception there makes the device FATAL (docs/prm.md §2.2).
    if (pib_core_bar_read(h.core, PIB_BAR_REGS, PIB_REG_STATUS, 4) & PIB_STATUS_FATAL) {
        for (const auto &line : h.traceLines)
            if (line.what == "fatal")
                std::fprintf(stderr, "fuzz-core: %s\n", line.detail.c_str());
        check(false, "an internal error made the device FATAL");
    }
    // What one event may send: its packet budget, plus the answers it owes
    // to a chunk of received bytes; the harness drains the port each step.
    check(h.portOutput[1].size() < (8u << 20), "one event sent more than 8 MiB");
    h.portOutput[1].clear();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzedDataProvider in(data, size);
    Target t;
    for (int steps = 0; steps < 200 && in.remaining_bytes(); ++steps)
        step(in, t);
    // Some of the postponed work (each run is one bounded event; a 2 GiB
    // READ takes thousands, which would only slow the fuzzer down).
    for (int runs = 0; runs < 64 && t.node.host.runScheduled(); ++runs)
        t.node.host.portOutput[1].clear();
    return 0;
}
