// SPDX-License-Identifier: GPL-2.0-or-later
// The device fuzz-core drives, set up as a driver would, and that driver's
// side of it: an ACTIVE port; the attacker's QPs (RC, UC, RC on an SRQ,
// XRC TGT and INI, UD, QP0, QP1) with separate send and receive CQs, an
// SRQ, an XRC SRQ with a CQ of its own, MRs (a DMA region over its data
// area, one through the MTT, a fast-registration one) and two windows; and
// a second tenant the attacker must never reach. The helpers post WQEs,
// poll CQs, resize queues and bring QPs back from the error state, all
// through a mailbox of their own and never allocating guest RAM once the
// set-up is done.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <array>
#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>
#include <vector>

#include "connected_fixture.hh"
#include "fuzz_core_ledger.hh"
#include "fuzz_core_memory.hh"
#include "fuzz_core_paging.hh"
#include "ring_switch.hh"

namespace pib::fuzz {

inline constexpr uint16_t kLid = 0x11, kPeerLid = 0x22;
inline constexpr uint32_t kPeerQpn = 0x50; // the peer's QPs: kPeerQpn + index of ours
inline constexpr uint16_t kMlid = 0xc001;
inline constexpr uint32_t kQkey = 0x11111111;
inline constexpr uint64_t kMttIova = 0x40000000;
inline constexpr uint64_t kDataSize = 64 << 10;
inline constexpr uint64_t kTenantBytes = 16 << 10; // the second tenant's buffer
inline constexpr unsigned kLogSq = 6, kSqStride = 128, kLogRq = 6, kRecvStride = 64;
inline constexpr unsigned kMaxCqLog = 9;  // the CQ rings have room for 2^9 CQEs
inline constexpr unsigned kMaxSrqLog = 7; // the SRQ rings for 2^7 WQEs

// A memory key with its low byte, the variant, replaced.
inline uint32_t withVariant(uint32_t key, uint8_t variant) {
    return (key & ~0xffu) | variant;
}

// A CQ and the spare ring RESIZE_CQ moves it to (and back).
struct Cq {
    uint32_t cqn = 0;
    unsigned log = 0;
    unsigned current = 0; // which of the two rings
    std::array<pib_buf_desc, 2> buf{};
    std::array<uint64_t, 2> ring{}, ciRecord{};
    uint32_t ci = 0; // CQEs consumed since creation or the last resize
};

// An SRQ of the attacker's, with a spare ring for RESIZE_SRQ.
struct Srq {
    uint32_t srqn = 0;
    Queue queue{};
    unsigned log = 0;
    unsigned current = 0;
    std::array<pib_buf_desc, 2> buf{};
    std::array<uint64_t, 2> ring{};
};

// The attributes a connected QP was (re)connected with.
struct Link {
    uint32_t sqPsn = 100, rqPsn = 200;
    uint8_t mtu = 3; // 1024 bytes
    uint8_t timeout = 10, retryCnt = 3, rnrRetry = 2, minRnrTimer = 1;
    uint8_t maxRdAtomic = 4, maxDestRdAtomic = 4;
    uint32_t access = PIB_ACCESS_REMOTE_WRITE | PIB_ACCESS_REMOTE_READ | PIB_ACCESS_REMOTE_ATOMIC |
                      PIB_ACCESS_FLUSH_GLOBAL;
};

// What the peer owes a requester of ours: an ACK, a READ's responses or
// an atomic's answer, for the request at `psn`.
struct Owed {
    enum class Kind : uint8_t { kAck, kRead, kAtomic } kind = Kind::kAck;
    uint32_t psn = 0;
    uint32_t length = 0; // kRead
};

// One QP of the attacker's, as its driver and its peer know it.
struct Qp {
    const char *name = "";
    uint8_t type = 0;
    uint32_t qpn = 0;
    uint64_t sqRing = 0, rqRing = 0;
    std::optional<Queue> sq, rq;
    Srq *srq = nullptr;   // a QP on an SRQ
    bool suspect = false; // it may have left RTS: look before using it
    // Connected QPs: the peer's QP, the attributes, and what the peer
    // believes of the transport's state.
    uint16_t peerLid = kPeerLid;
    uint32_t peerQpn = 0;
    Link link;
    uint32_t expectedPsn = 0;                    // the PSN the responder takes next
    uint32_t lastRequestPsn = 0;                 // the last request PSN the requester sent
    std::deque<Owed> owed;                       // answers the requester waits for, oldest first
    std::deque<std::vector<iba::Packet>> recent; // the last messages the peer sent it
    std::vector<iba::Packet> rest;               // what the peer holds back of a message

    bool connected() const { return type >= PIB_QPT_RC && type != PIB_QPT_UD; }
    bool reliable() const { return connected() && type != PIB_QPT_UC; }
    bool hasSendQueue() const { return type != PIB_QPT_XRC_TGT; }
    uint32_t mtu() const { return 128u << link.mtu; }
};

// The memory keys of the attacker's PD as the harness last made them: its
// guesses of which are valid, for the keys the input names.
struct Keys {
    uint32_t data = 0;    // the DMA region over the data area
    uint32_t mtt = 0;     // four pages through the MTT at kMttIova
    uint32_t fastReg = 0; // with the variant of its last registration
    bool fastRegValid = false;
    uint64_t fastRegIova = 0;
    uint32_t odp = 0;      // kOdpPages on demand at Paging::kOdpIova
    uint32_t implicit = 0; // the whole address space on demand
    struct Window {
        uint32_t key = 0;
        bool bound = false;
        uint32_t qpn = 0; // type 2: the QP it is bound to
    };
    std::array<Window, 2> windows{}; // type 1, type 2
};

// A REG_MR, LOCAL_INV or BIND_MW the harness posted: what it changes in
// Keys once it completes successfully.
struct KeyChange {
    enum class Kind : uint8_t { kRegister, kInvalidate, kBind } kind = Kind::kRegister;
    uint32_t key = 0;
    unsigned window = 0; // kBind
    uint32_t qpn = 0;    // kBind
    bool unbinds = false;
};

// The second tenant: its own doorbell page, PD, XRC domain, CQ, MR, a
// type 1 window bound to the MR and an XRC SRQ with WQEs posted.
struct Tenant {
    uint32_t uar = 0, pd = 0, xrcd = 0, cqn = 0, mrKey = 0, windowKey = 0, srqn = 0;
    uint64_t buf = 0, cqRing = 0;
    uint32_t srqWqes = 0;
};

// The send WQE a driver would build from a work request (docs/prm.md §7.2).
struct WorkRequest {
    uint8_t opcode = PIB_WR_SEND;
    uint8_t flags = PIB_WQE_SIGNALED;
    uint32_t imm = 0;
    uint32_t remoteSrqn = 0; // XRC INI
    std::optional<pib_wqe_raddr> raddr;
    std::optional<pib_wqe_atomic> atomic;
    std::optional<pib_wqe_ud> ud;
    std::optional<pib_wqe_reg_mr> reg;
    std::optional<pib_wqe_bind_mw> bind;
    std::optional<pib_wqe_flush> flush;
    std::vector<pib_wqe_data> sges;
    std::optional<std::vector<uint8_t>> inlineData;
};

class Target {
  public:
    static constexpr uint64_t kRamSize = 768 << 10; // the set-up takes some 660 KiB

    // `privileged`: the input also acts as the driver itself (any command,
    // register, doorbell page, reset); the oracles that assume a driver
    // keeping to the rules are then off.
    explicit Target(bool privileged);

    testing::Node node{PIB_QPT_RC, kLid, kRamSize};
    FakeHost &host = node.host;
    const bool privileged;
    MemoryWatch memory{host};
    Ledger ledger;
    // The switch port, when the input cabled a ring cable: the peer's
    // packets then go through the ring, the device's come out of it, and
    // the input may write anything into the shared memory.
    std::unique_ptr<testing::RingSwitch> rings;
    bool ringScribbled = false; // the input wrote into the device's ring: it may read as broken
    bool ringsUp() const { return rings && rings->mapped() && host.watchedFd[1] >= 0; }

    Cq sendCq, recvCq, xrcCq;
    Srq srq, xrcSrq;
    Qp rc, uc, srqQp, xrcTgt, xrcIni, ud, smi, gsi;
    std::array<Qp *, 8> qps{&rc, &uc, &srqQp, &xrcTgt, &xrcIni, &ud, &smi, &gsi};
    std::array<Cq *, 3> cqs{&sendCq, &recvCq, &xrcCq};
    Keys keys;
    Paging paging;
    std::array<uint32_t, 2> windowNumbers{}; // the windows' keys as created
    Tenant tenant;
    uint64_t data = 0;     // kDataSize of guest RAM the input reads and writes
    uint64_t mttPages = 0; // the MTT region's four pages
    uint64_t pageList = 0; // the driver's page for REG_MR page lists
    uint64_t mailbox = 0;  // two pages: command input and output mailboxes
    std::unordered_map<uint64_t, KeyChange> keyChanges; // by wr_id

    // ---- commands ----
    template <class T> FakeHost::Outcome commandIn(uint16_t op, uint32_t modifier, const T &in) {
        std::memset(host.at(mailbox), 0, PIB_MAILBOX_SIZE);
        std::memcpy(host.at(mailbox), &in, sizeof(in));
        return command(op, modifier, mailbox, mailbox);
    }
    template <class T> bool commandOut(uint16_t op, uint32_t modifier, T *out) {
        std::memset(host.at(mailbox), 0, PIB_MAILBOX_SIZE);
        if (command(op, modifier, 0, mailbox).status != PIB_CMD_STATUS_OK)
            return false;
        std::memcpy(out, host.at(mailbox), sizeof(*out));
        return true;
    }
    FakeHost::Outcome command(uint16_t op, uint32_t modifier, uint64_t in, uint64_t out);
    // The subnet manager's part: the port ARMED, then ACTIVE, as after
    // the link trained.
    void activatePort();

    // ---- QP states ----
    bool modifyQp(Qp &q, const pib_qp_attr &a);
    bool moveQp(Qp &q, uint8_t state);
    std::optional<uint8_t> qpState(const Qp &q);
    // RESET -> INIT -> RTR -> RTS, with `l`.
    bool bringUp(Qp &q, const Link &l);
    // A QP that went to the error state: flushed, reset and brought up
    // again with `l` (its queues start from slot 0).
    bool reconnect(Qp &q, const Link &l);
    // The QP goes to RESET straight from its state: WQEs it held go
    // without completions (IBA 10.3.1).
    bool resetDirectly(Qp &q);

    // ---- work queues ----
    // Posts `wr` on q's send queue and rings its doorbell: its wr_id, or
    // nullopt when the ring is full.
    std::optional<uint64_t> postSend(Qp &q, const WorkRequest &wr);
    // The same with a slot's bytes of the input's choosing (wr_id aside).
    std::optional<uint64_t> postRawSend(Qp &q, std::array<uint8_t, kSqStride> slot);
    // A receive WQE of `sges` into q's RQ or into `s`.
    bool postRecv(Qp &q, const std::vector<pib_wqe_data> &sges);
    bool postSrqRecv(Srq &s, const std::vector<pib_wqe_data> &sges);

    // ---- completions ----
    void poll(Cq &cq);
    void pollAll();
    bool resizeCq(Cq &cq, unsigned log);
    // ibv_modify_cq's moderation, and the CQ armed for its next CQE, so
    // that the input's CQEs are held and its clock lets them go.
    void moderateCq(Cq &cq, uint16_t count, uint16_t periodUs);
    bool resizeSrq(Srq &s, unsigned log);
    bool recreateXrcSrq();
    std::optional<uint32_t> srqWqeCount(uint32_t srqn);

    // ---- the input's choices among the target's objects ----
    uint64_t pickAddress(FuzzedDataProvider &in) const;
    uint32_t pickKey(FuzzedDataProvider &in) const;
    uint32_t pickLength(FuzzedDataProvider &in) const;
    pib_wqe_data pickSge(FuzzedDataProvider &in) const;
    // `length` bytes of the on-demand region or of the implicit region's
    // spans (fuzz_core_paging.cc), under their key: they may fault.
    pib_wqe_data pickPagedBuffer(FuzzedDataProvider &in, uint32_t length) const;
    Link pickLink(FuzzedDataProvider &in) const;
    Qp &pickConnected(FuzzedDataProvider &in);

    // ---- on-demand paging (fuzz_core_paging.cc) ----
    // The driver takes the EQEs its EQ holds and answers each page fault
    // as the input says, or invalidates pages.
    void servePageFaults(FuzzedDataProvider &in);

  private:
    void require(bool ok, const char *what);
    uint32_t created(const FakeHost::Outcome &o, const char *what);
    Cq createCq(unsigned log);
    pib_srq_context srqContext(const Srq &s) const;
    Srq createSrq(Queue queue, unsigned log);
    Qp createQp(const char *name, uint8_t type, Srq *onSrq = nullptr);
    void openQueues(Qp &q, Queue send, std::optional<Queue> recv);
    void restartRings(Qp &q);
    uint32_t createDmaMr(uint64_t addr, uint64_t length, uint32_t pd, uint32_t access);
    bool toRtsDatagram(Qp &q);
    void setUpMemory();
    void setUpPaging();
    void serveFault(FuzzedDataProvider &in, const pib_eqe &fault);
    bool mapPages(uint32_t mtt, uint32_t first, uint32_t count, uint64_t bits);
    void invalidatePages(FuzzedDataProvider &in);
    void setUpQps();
    void setUpTenant();
    void bindTenantWindow();
    void setUpReceives();
    void allowDeviceWrites();
    void noteCompletion(const pib_cqe &cqe);
    void applyKeyChange(const KeyChange &change);
    Qp *findQp(uint32_t qpn);
    void doorbell(uint32_t uar, uint32_t offset, uint32_t number, uint32_t count);
};

// The bytes of `wr` in a send WQE slot (`xrc`: with the XRC segment).
std::array<uint8_t, kSqStride> encodeSendWqe(const WorkRequest &wr, bool xrc);

} // namespace pib::fuzz
