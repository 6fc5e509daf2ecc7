// SPDX-License-Identifier: GPL-2.0-or-later
// A ConnectX function as mlx5_ib sets one up before its QPs (a UAR page,
// an EQ, a CQ, a PD, a physical memory key, an ACTIVE port), and what the
// driver then does with QPs: CREATE_QP inputs, state changes, receive
// WQEs posted through the doorbell record, send WQEs rung through a
// blue-flame register, CQEs read back. For the unit tests and fuzz-mlx5:
// a step the device refuses returns false (or nullopt) rather than
// asserting.
#pragma once

#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "frame.hh"
#include "mad.hh"
#include "mlx5_host.hh"
#include "smp.hh"

namespace pib::testing {

namespace mlx5qp {
using pib::mlx5::Field;
using pib::mlx5::field;
// The commands.
constexpr uint16_t kCreateQp = 0x500, kDestroyQp = 0x501, kRst2Init = 0x502, kInit2Rtr = 0x503,
                   kRtr2Rts = 0x504, kRts2Rts = 0x505, kToErr = 0x507, kToRst = 0x50a,
                   kQueryQp = 0x50b;
constexpr Field kHeld = field(0x48, 24); // what an ALLOC or CREATE gives; the QP a command names
// The QP context at byte 0x18 of create_qp_in, of the state changes'
// inputs and of query_qp_out (mlx5_ifc.h), its fields by their bit in
// the command.
constexpr uint32_t kQpc = 0xc0;
constexpr Field kState = field(kQpc + 0x00, 4);
constexpr Field kSt = field(kQpc + 0x08, 8);
constexpr Field kPmState = field(kQpc + 0x13, 2);
constexpr Field kWqSignature = field(kQpc + 0x20, 1);
constexpr Field kPd = field(kQpc + 0x28, 24);
constexpr Field kMtu = field(kQpc + 0x40, 3);
constexpr Field kLogRqSize = field(kQpc + 0x49, 4);
constexpr Field kLogRqStride = field(kQpc + 0x4d, 3);
constexpr Field kNoSq = field(kQpc + 0x50, 1);
constexpr Field kLogSqSize = field(kQpc + 0x51, 4);
constexpr Field kOptParamMask = field(0x80, 32);
constexpr Field kCounterSetId = field(kQpc + 0x60, 8);
constexpr Field kUarPage = field(kQpc + 0x68, 24);
constexpr Field kLogPageSize = field(kQpc + 0xa3, 5);
constexpr Field kRemoteQpn = field(kQpc + 0xa8, 24);
constexpr Field kRlid = field(kQpc + 0xc0 + 0x30, 16);
constexpr Field kVhcaPort = field(kQpc + 0xc0 + 0x128, 8);
constexpr Field kAckTimeout = field(kQpc + 0xc0 + 0x40, 5);
constexpr Field kRetryCount = field(kQpc + 0x38d, 3);
constexpr Field kRnrRetry = field(kQpc + 0x390, 3);
constexpr Field kFre = field(kQpc + 0x394, 1); // fast registration enabled
constexpr Field kNextSendPsn = field(kQpc + 0x3c8, 24);
constexpr Field kCqnSnd = field(kQpc + 0x3e8, 24);
constexpr Field kRre = field(kQpc + 0x490, 1);
constexpr Field kRwe = field(kQpc + 0x491, 1);
constexpr Field kRae = field(kQpc + 0x492, 1);
constexpr Field kPageOffset = field(kQpc + 0x494, 6);
constexpr Field kNextRcvPsn = field(kQpc + 0x4a8, 24);
constexpr Field kCqnRcv = field(kQpc + 0x4e8, 24);
constexpr Field kDbrAddr = field(kQpc + 0x500, 64);
constexpr Field kQkey = field(kQpc + 0x540, 32);
constexpr Field kRqType = field(kQpc + 0x565, 3);
constexpr Field kSrqn = field(kQpc + 0x568, 24);
constexpr Field kXrcd = field(kQpc + 0x4c8, 24);
constexpr Field kHwSqCounter = field(kQpc + 0x5a0, 16);
constexpr Field kHwRqCounter = field(kQpc + 0x5c0, 32);
// Service types.
constexpr uint8_t kRc = 0, kUc = 1, kUd = 2, kQp0 = 7, kQp1 = 8;
// The send opcodes of the control segment.
constexpr uint8_t kRdmaWrite = 0x08, kSend = 0x0a, kRdmaRead = 0x10;
// The LID the port is given.
constexpr uint16_t kLid = 0x21;
} // namespace mlx5qp

using pib::mlx5::readBe16;
using pib::mlx5::set;
using pib::mlx5::writeBe16;
using pib::mlx5::writeBe32;
using pib::mlx5::writeBe64;

// How a state change's context connects a QP, beyond port 1, the Q_Key
// and PSNs of 0x123.
struct Mlx5Peer {
    uint32_t qpn = 0;
    uint16_t lid = mlx5qp::kLid;
    uint8_t mtu = 3;         // 1024 bytes
    uint32_t counterSet = 0; // the Q counter it counts into (0: none)
    uint32_t optional = 0;   // opt_param_mask
    uint8_t ackTimeout = 0;  // 0: none (IBA's infinite)
    uint8_t retries = 0;     // retry_count
    uint8_t rnrRetries = 0;  // rnr_retry (7: for ever)
    bool atomics = false;    // rae: the QP answers atomics
};

// What a send WQE says beyond its control segment.
struct Mlx5Send {
    uint8_t opcode = mlx5qp::kSend;
    uint32_t remoteQpn = 0; // UD: the QP behind the function's LID
    uint64_t addr = 0;
    uint32_t length = 0;
    uint64_t remoteAddr = 0; // RDMA
    uint32_t rkey = 0;       // RDMA: 0 for the function's own key
    uint32_t lkey = 0;       // 0: the function's own key
    uint16_t stream = 0;     // DCI: its stream (dci_stream_channel_id)
};

// A test's own host, made before the Mlx5Function built on it (a base
// class of the test's fixture, listed first).
struct OwnedMlx5Host {
    Mlx5Host owned;
};

class Mlx5Function {
  public:
    using Peer = Mlx5Peer;
    using Send = Mlx5Send;
    static constexpr uint32_t kQkeyValue = 0x11110000;
    static constexpr uint16_t kLid = mlx5qp::kLid;
    static constexpr uint32_t kLogCq = 4;

    explicit Mlx5Function(Mlx5Host &host) : host(host) {}

    // The UAR page, EQ, CQ, PD and memory key; false if one is refused.
    bool setUp() {
        using namespace mlx5qp;
        if (!host.bringUp())
            return false;
        uar = host.allocUar();
        auto r = host.run(host.eqInput(3, 0, 1, uar, &eqRing), 16);
        eqn = static_cast<uint32_t>(r.get(field(0x58, 8)));
        r = host.run(host.cqInput(kLogCq, eqn, uar, &cqRing, &cqRecord), 16);
        if (r.status() != 0)
            return false;
        cqn = static_cast<uint32_t>(r.get(kHeld));
        r = host.run(Mlx5Host::input(0x800), 16);
        pd = static_cast<uint32_t>(r.get(kHeld));
        // CREATE_MKEY as mlx5_ib_get_dma_mr asks: PA, all of memory.
        auto in = Mlx5Host::input(0x200, 0, 0x110);
        set(in, field(0x91, 5), dmaKeyRights); // a rw rr lw lr
        set(in, field(0xa0, 24), 0xffffff);    // no QP
        set(in, field(0xb8, 8), 0x5a);         // variant
        set(in, field(0xe0, 1), 1);            // length64
        set(in, field(0xe8, 24), pd);
        r = host.run(in, 16);
        lkey = static_cast<uint32_t>(r.get(kHeld)) << 8 | 0x5a;
        return r.status() == 0;
    }

    // Trains port 1's link; MAD_IFC's PortInfo Sets then make it ACTIVE
    // with LID kLid, as an SM would.
    bool activatePort() {
        pib_core_port_connected(host.core, 1, 1);
        pib_wire_hello hello{};
        const auto frame = wire::encode(
            PIB_WIRE_HELLO, std::span(reinterpret_cast<const uint8_t *>(&hello), sizeof(hello)));
        pib_core_port_receive(host.core, 1, frame.data(), frame.size());
        for (uint8_t state : {PIB_PORT_ARMED, PIB_PORT_ACTIVE}) {
            auto in = Mlx5Host::input(0x50d, 1, 0x110); // MAD_IFC, M_Key not checked
            set(in, mlx5qp::field(0x58, 8), 1);
            iba::Mad m(std::span<uint8_t>(in).subspan(0x10, 256));
            m.set8(0, 1);
            m.set8(1, iba::kClassSmpLid);
            m.set8(2, 1);
            m.set8(3, iba::kSet);
            m.set16(16, iba::kAttrPortInfo);
            m.set32(20, 1);
            iba::writePortInfo(m, {.lid = kLid, .portState = state, .neighborMtu = PIB_MTU_4096});
            if (host.run(in, 0x110).status() != 0)
                return false;
        }
        host.portOutput[1].clear();
        return true;
    }

    // A QP's queues as CREATE_QP was given them, and the driver's counters.
    struct Qp {
        uint32_t qpn = 0;
        uint64_t buffer = 0, record = 0;
        uint32_t rqStride = 0, rqSlots = 0, sqBlocks = 0;
        uint32_t rqPosted = 0, sqPosted = 0;
        // A ring given as 4 KiB pages that need not be contiguous, starting
        // `start` bytes into the first; else the ring is `buffer` onwards.
        std::vector<uint64_t> pages;
        uint64_t start = 0;
        // The guest address of byte `at` of the ring.
        uint64_t address(uint64_t at) const {
            if (pages.empty())
                return buffer + at;
            at += start;
            return pages.at(at / 4096) + at % 4096;
        }
        uint64_t sqByte(uint32_t block) const {
            return address(uint64_t{rqStride} * rqSlots + 64u * (block % sqBlocks));
        }
    };

    // A CREATE_QP input of service type `st` as mlx5_ib makes one for the
    // kernel (fre set: it may post UMRs): an RQ of 2^logRq WQEs of
    // 16 << logStride bytes (none when logStride is nullopt), an SQ of
    // 2^logSq basic blocks, in one fresh buffer.
    std::vector<uint8_t> qpInput(uint8_t st, std::optional<uint32_t> logStride, uint32_t logRq,
                                 uint32_t logSq, Qp &qp) {
        using namespace mlx5qp;
        qp.rqStride = logStride ? 16u << *logStride : 0;
        qp.rqSlots = logStride ? 1u << logRq : 0;
        qp.sqBlocks = 1u << logSq;
        const uint64_t bytes = uint64_t{qp.rqStride} * qp.rqSlots + 64u * qp.sqBlocks;
        const uint64_t pages = (bytes + 4095) / 4096;
        qp.buffer = host.alloc(pages * 4096);
        qp.record = host.alloc(64, 64);
        auto in = Mlx5Host::input(kCreateQp, 0, 0x110 + 8 * pages);
        set(in, kSt, st);
        set(in, kPmState, 3); // migrated
        set(in, kFre, 1);
        set(in, kPd, pd);
        if (logStride) {
            set(in, kLogRqSize, logRq);
            set(in, kLogRqStride, *logStride);
        } else {
            set(in, kRqType, 3); // zero-length RQ
        }
        set(in, kLogSqSize, logSq);
        set(in, kUarPage, uar);
        set(in, kCqnSnd, cqn);
        set(in, kCqnRcv, cqn);
        set(in, kDbrAddr, qp.record);
        for (uint64_t i = 0; i < pages; ++i)
            writeBe64(&in[0x110 + 8 * i], qp.buffer + 4096 * i);
        return in;
    }
    // `sendDbrMode` 1: an SQ without a doorbell record (docs/mlx5.md §10.3).
    std::optional<Qp> createQp(uint8_t st, std::optional<uint32_t> logStride = 0,
                               uint32_t logRq = 2, uint32_t logSq = 2, uint64_t sendDbrMode = 0) {
        Qp qp;
        auto in = qpInput(st, logStride, logRq, logSq, qp);
        set(in, pib::mlx5::field(mlx5qp::kQpc + 0x80, 2), sendDbrMode);
        const auto r = host.run(in, 16);
        if (r.status() != 0)
            return std::nullopt;
        qp.qpn = static_cast<uint32_t>(r.get(mlx5qp::kHeld));
        return qp;
    }

    // An SRQ of 2^logSize 32-byte WQEs as mlx5_ib makes one, its free list
    // linked in `order` (a permutation of the slots), and the driver's
    // state of it: by CREATE_SRQ in a fresh XRC domain, or by `opcode`
    // (CREATE_XRC_SRQ) in `xrcd`.
    struct Srq {
        uint32_t srqn = 0;
        uint64_t ring = 0, record = 0;
        uint32_t head = 0, posted = 0;
    };
    std::optional<Srq> createSrq(uint32_t logSize, const std::vector<uint16_t> &order,
                                 uint16_t opcode = 0x700, std::optional<uint32_t> xrcd = {}) {
        Srq s;
        s.ring = host.alloc(4096);
        s.record = host.alloc(64, 64);
        for (size_t i = 0; i < order.size(); ++i)
            writeBe16(host.at(s.ring + 32 * order[i] + 2), order[(i + 1) % order.size()]);
        s.head = order.front();
        const auto domain = host.run(Mlx5Host::input(0x80e), 16); // ALLOC_XRCD
        auto in = Mlx5Host::input(opcode, 0, 0x118);
        using pib::mlx5::field;
        set(in, field(0x80 + 0x04, 4), logSize);
        set(in, field(0x80 + 0x25, 3), 1); // 32-byte WQEs
        set(in, field(0x80 + 0x28, 24), xrcd ? *xrcd : domain.get(mlx5qp::kHeld));
        set(in, field(0x80 + 0x48, 24), cqn);
        set(in, field(0x80 + 0xc8, 24), pd);
        set(in, field(0x80 + 0x140, 64), s.record);
        writeBe64(&in[0x110], s.ring);
        const auto r = host.run(in, 16);
        if (domain.status() != 0 || r.status() != 0)
            return std::nullopt;
        s.srqn = static_cast<uint32_t>(r.get(mlx5qp::kHeld));
        return s;
    }
    // What mlx5_ib_post_srq_recv does: a data segment in the head WQE, the
    // head on to the next, the counter in the doorbell record.
    void postSrq(Srq &s, uint64_t addr, uint32_t length) {
        uint8_t *wqe = host.at(s.ring + 32 * s.head);
        writeBe32(wqe + 16, length);
        writeBe32(wqe + 20, lkey);
        writeBe64(wqe + 24, addr);
        s.head = readBe16(wqe + 2);
        writeBe32(host.at(s.record), ++s.posted);
    }
    // A QP of service type `st` that receives on SRQ `srqn` (rq_type 1).
    std::optional<Qp> createQpOnSrq(uint8_t st, uint32_t srqn, uint32_t logSq = 2) {
        Qp qp;
        auto in = qpInput(st, std::nullopt, 0, logSq, qp);
        set(in, mlx5qp::kRqType, 1);
        set(in, mlx5qp::kSrqn, srqn);
        const auto r = host.run(in, 16);
        if (r.status() != 0)
            return std::nullopt;
        qp.qpn = static_cast<uint32_t>(r.get(mlx5qp::kHeld));
        return qp;
    }

    // DC (docs/mlx5.md §15). CREATE_DCT as mlx5_ib sends it at RTR, on
    // SRQ `srqn` with access key `key`: every remote access, 8-byte
    // atomics, MTU 1024, port 1.
    std::vector<uint8_t> dctInput(uint32_t srqn, uint64_t key) {
        using pib::mlx5::field;
        constexpr uint32_t kDctc = 0x80;
        auto in = Mlx5Host::input(0x710, 0, 0x80);
        set(in, field(kDctc + 0x48, 24), cqn);
        set(in, field(kDctc + 0x68, 4), 1); // atomic_mode: IB's
        set(in, field(kDctc + 0x6c, 3), 7); // rre rwe rae
        set(in, field(kDctc + 0x93, 5), 12);
        set(in, field(kDctc + 0xa8, 24), srqn);
        set(in, field(kDctc + 0xc8, 24), pd);
        set(in, field(kDctc + 0x100, 64), key);
        set(in, field(kDctc + 0x145, 3), 3);
        set(in, field(kDctc + 0x148, 8), 1);
        return in;
    }
    // A DCI as mlx5_ib's create_dci makes it: rq_type SRQ (the driver's
    // own `srqn`, which a DCI never uses), an SQ of 2^logSq blocks.
    // With 2^logStreams streams, failing at 2^logErrored in error
    // (docs/mlx5.md §15.4), if those are not 0.
    std::optional<Qp> createDci(uint32_t srqn, uint32_t logSq = 5, uint32_t logStreams = 0,
                                uint32_t logErrored = 0) {
        using pib::mlx5::field;
        Qp qp;
        auto in = qpInput(0x5, std::nullopt, 0, logSq, qp);
        set(in, mlx5qp::kRqType, 1);
        set(in, mlx5qp::kSrqn, srqn);
        set(in, field(mlx5qp::kQpc + 0x3e3, 5), logStreams);
        set(in, field(mlx5qp::kQpc + 0x403, 5), logErrored);
        const auto r = host.run(in, 16);
        if (r.status() != 0)
            return std::nullopt;
        qp.qpn = static_cast<uint32_t>(r.get(mlx5qp::kHeld));
        return qp;
    }
    // A DCI's send WQE: the datagram segment with the DCT's key and
    // number, then RDMA's (`s.remoteAddr`, the function's key) or an
    // atomic's segments (fetch-and-add of `add`) and one data segment.
    uint64_t writeDcSend(Qp &qp, uint32_t dctn, uint64_t key, const Send &s, uint64_t add = 0) {
        constexpr uint8_t kFetchAdd = 0x12;
        std::vector<uint8_t> wqe(16 + 48);
        wqe[3] = s.opcode;
        writeBe16(&wqe[9], s.stream);
        writeBe64(&wqe[16], key);
        writeBe32(&wqe[24], 0x80000000u | dctn); // an extended address vector
        writeBe16(&wqe[30], kLid);
        const auto grow = [&wqe](size_t bytes) {
            wqe.resize(wqe.size() + bytes);
            return wqe.data() + wqe.size() - bytes;
        };
        if (s.opcode != mlx5qp::kSend) {
            uint8_t *raddr = grow(16);
            writeBe64(raddr, s.remoteAddr);
            writeBe32(raddr + 8, s.rkey ? s.rkey : lkey);
        }
        if (s.opcode == kFetchAdd)
            writeBe64(grow(16), add);
        uint8_t *data = grow(16);
        writeBe32(data, s.length);
        writeBe32(data + 4, s.lkey ? s.lkey : lkey);
        writeBe64(data + 8, s.addr);
        return postWqe(qp, wqe);
    }

    Mlx5Host::Reply change(uint16_t opcode, uint32_t qpn, uint8_t port = 1, const Peer &peer = {}) {
        using namespace mlx5qp;
        const bool context = opcode != kToErr && opcode != kToRst;
        auto in = Mlx5Host::input(opcode, 0, context ? 0x100 : 0x10);
        set(in, kHeld, qpn);
        if (context) {
            set(in, kVhcaPort, port);
            set(in, kQkey, kQkeyValue);
            set(in, kNextSendPsn, 0x123);
            set(in, kNextRcvPsn, 0x123);
            set(in, kRemoteQpn, peer.qpn);
            set(in, kRlid, peer.lid);
            set(in, kMtu, peer.mtu);
            set(in, kRre, 1);
            set(in, kRwe, 1);
            set(in, kRae, peer.atomics);
            set(in, kCounterSetId, peer.counterSet);
            set(in, kOptParamMask, peer.optional);
            set(in, kAckTimeout, peer.ackTimeout);
            set(in, kRetryCount, peer.retries);
            set(in, kRnrRetry, peer.rnrRetries);
        }
        return host.run(in, 16);
    }
    // RESET to RTS; false if a change is refused.
    bool toRts(uint32_t qpn, const Peer &peer = {}) {
        using namespace mlx5qp;
        for (uint16_t opcode : {kRst2Init, kInit2Rtr, kRtr2Rts})
            if (change(opcode, qpn, 1, peer).status() != 0)
                return false;
        return true;
    }
    Mlx5Host::Reply query(uint32_t qpn) {
        auto in = Mlx5Host::input(mlx5qp::kQueryQp);
        set(in, mlx5qp::kHeld, qpn);
        return host.run(in, 0x100);
    }
    Mlx5Host::Reply destroy(uint16_t opcode, uint32_t number) {
        auto in = Mlx5Host::input(opcode);
        set(in, mlx5qp::kHeld, number);
        return host.run(in, 16);
    }

    // A receive WQE of one data segment for `length` bytes at `addr`, the
    // RQ counter in the doorbell record (what mlx5_ib_post_recv does).
    void postReceive(Qp &qp, uint64_t addr, uint32_t length, uint32_t key = 0) {
        uint8_t *wqe = host.at(qp.address(uint64_t{qp.rqStride} * (qp.rqPosted % qp.rqSlots)));
        writeBe32(wqe, length);
        writeBe32(wqe + 4, key ? key : lkey);
        writeBe64(wqe + 8, addr);
        if (qp.rqStride > 16)
            writeBe32(wqe + 16 + 4, 0x100); // the terminate key ends the list
        writeBe32(host.at(qp.record), ++qp.rqPosted);
    }

    // Writes a send WQE into `qp`'s SQ and its counter into the doorbell
    // record; returns its first 8 bytes, what the driver writes to the
    // blue-flame register. A UD QP's WQE has a datagram segment.
    uint64_t writeSend(Qp &qp, bool ud, const Send &s) {
        std::vector<uint8_t> wqe(16);
        wqe[3] = s.opcode;
        const auto grow = [&wqe](size_t bytes) {
            wqe.resize(wqe.size() + bytes);
            return wqe.data() + wqe.size() - bytes;
        };
        if (ud) {
            uint8_t *av = grow(48);
            writeBe32(av, kQkeyValue);
            writeBe32(av + 8, 0x80000000u | s.remoteQpn); // an extended UD address vector
            writeBe16(av + 14, kLid);
        }
        if (s.opcode == mlx5qp::kRdmaWrite || s.opcode == mlx5qp::kRdmaRead) {
            uint8_t *raddr = grow(16);
            writeBe64(raddr, s.remoteAddr);
            writeBe32(raddr + 8, s.rkey ? s.rkey : lkey);
        }
        uint8_t *data = grow(16);
        writeBe32(data, s.length);
        writeBe32(data + 4, s.lkey ? s.lkey : lkey);
        writeBe64(data + 8, s.addr);
        return postWqe(qp, wqe);
    }
    // Writes `wqe` (its control segment's opcode and key or immediate
    // filled in; the WQE counter, QP, DS count and CQE request are added
    // here) into `qp`'s SQ, padded to basic blocks, and the SQ counter
    // into the doorbell record; returns the first 8 bytes.
    uint64_t postWqe(Qp &qp, std::vector<uint8_t> wqe) {
        const uint32_t index = qp.sqPosted;
        const auto ds = static_cast<uint32_t>((wqe.size() + 15) / 16);
        const uint32_t blocks = (ds + 3) / 4;
        wqe.resize(size_t{blocks} * 64);
        wqe[1] = static_cast<uint8_t>(index >> 8);
        wqe[2] = static_cast<uint8_t>(index);
        writeBe32(wqe.data() + 4, qp.qpn << 8 | ds);
        wqe[11] |= 0x08; // a CQE
        for (uint32_t block = 0; block < blocks; ++block)
            std::memcpy(host.at(qp.sqByte(index + block)), wqe.data() + 64 * block, 64);
        qp.sqPosted += blocks;
        writeBe32(host.at(qp.record + 4), qp.sqPosted);
        uint64_t first8 = 0;
        std::memcpy(&first8, wqe.data(), sizeof(first8));
        return first8;
    }
    // The driver's write of those 8 bytes at `offset` of UAR page `page`;
    // then the host's main loop runs what the core scheduled.
    void blueFlame(uint64_t first8, uint32_t page, uint32_t offset = 0x800) {
        pib_core_bar_write(host.core, PIB_BAR_REGS, uint64_t{page} * 4096 + offset, first8, 8);
        host.runScheduled();
    }

    // The CQEs the device has written from the driver's counter `*next`
    // on, in order; the counter moves past them.
    std::vector<const uint8_t *> cqes(uint32_t *next) { return cqesOf(cqRing, cqRecord, next); }
    // The same for any CQ of 2^kLogCq 64-byte CQEs that cqInput made: its
    // ring at `ring`, its doorbell record at `record`.
    std::vector<const uint8_t *> cqesOf(uint64_t ring, uint64_t record, uint32_t *next) {
        std::vector<const uint8_t *> out;
        constexpr uint32_t kSize = 1u << kLogCq;
        for (;; ++*next) {
            const uint8_t *cqe = host.at(ring + 64 * (*next % kSize));
            if ((cqe[0x3f] & 1) != ((*next / kSize) & 1) || cqe[0x3f] >> 4 == 0xf)
                break;
            out.push_back(cqe);
        }
        writeBe32(host.at(record), *next & 0xffffff); // the consumer counter
        return out;
    }
    // The same, letting the host's main loop run until `want` CQEs came
    // (bounded: fewer when they never do).
    std::vector<const uint8_t *> completions(uint32_t *next, size_t want) {
        std::vector<const uint8_t *> got;
        for (int poll = 0; poll < 100 && got.size() < want; ++poll) {
            host.runScheduled();
            const auto more = cqes(next);
            got.insert(got.end(), more.begin(), more.end());
        }
        return got;
    }
    // Rings `first8` (a send WQE's, as writeSend or postWqe return it) on
    // the function's UAR page and takes the one CQE it makes: its opcode
    // (the top nibble of byte 0x3f) and syndrome; nothing when not exactly
    // one came.
    std::optional<std::pair<uint8_t, uint8_t>> completeOne(uint64_t first8, uint32_t *next) {
        blueFlame(first8, uar);
        const auto done = completions(next, 1);
        if (done.size() != 1)
            return std::nullopt;
        return std::pair{static_cast<uint8_t>(done[0][0x3f] >> 4), done[0][0x37]};
    }
    // An RDMA operation (`opcode`) of `length` bytes between `local` (the
    // function's key) and `remote` through `rkey`, rung and completed:
    // its CQE's opcode and syndrome (completeOne).
    std::optional<std::pair<uint8_t, uint8_t>> rdmaOne(Qp &qp, uint8_t opcode, uint64_t local,
                                                       uint32_t length, uint64_t remote,
                                                       uint32_t rkey, uint32_t *next) {
        return completeOne(writeSend(qp, false,
                                     {.opcode = opcode,
                                      .addr = local,
                                      .length = length,
                                      .remoteAddr = remote,
                                      .rkey = rkey}),
                           next);
    }

    Mlx5Host &host;
    uint32_t uar = 0, eqn = 0, cqn = 0, pd = 0, lkey = 0;
    // The rights of the physical key setUp() makes (the mkc's a, rw, rr,
    // lw, lr): all, as an unsafe global rkey; 0x3 for ib_core's local DMA
    // key, which no peer may use.
    uint8_t dmaKeyRights = 0x1f;
    uint64_t eqRing = 0, cqRing = 0, cqRecord = 0;
};

} // namespace pib::testing
