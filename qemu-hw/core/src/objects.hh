// SPDX-License-Identifier: GPL-2.0-or-later
// The device-side state of every object the command interface creates.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "connected.hh"
#include "core_operations.hh"
#include "dci_streams.hh"
#include "eq_ring.hh"
#include "indirect_key.hh"
#include "pib_hw.h"

namespace pib {

// The user context that made an object (ConnectX's uid, docs/mlx5.md
// §16): 0 for the kernel's, and every pib-hca object's.
using Owner = uint16_t;

// Objects that others point at count their users; a referenced object
// cannot be destroyed (PIB_CMD_STATUS_BUSY).
struct Referenced {
    uint32_t refs = 0;
    Owner owner = 0;
};

struct DoorbellPage : Referenced {};
struct ProtectionDomain : Referenced {};
// A counter set (ConnectX's Q counter): the transport counters of the QPs
// bound to it, counted beside their port's; it is held by each of them.
struct CounterSet : Referenced {
    pib_port_counters counts{};
};
// An XRC domain: its XRC SRQs take the messages its XRC TGT QPs receive.
struct XrcDomain : Referenced {};

// pib-hca's EQ: its context, and the ring every personality's EQ has.
struct EventQueue : Referenced, EqRing {
    pib_eq_context ctx{};
};

struct CompletionQueue : Referenced {
    pib_cq_context ctx{};
    uint32_t producer = 0;
    uint32_t consumer = 0; // as last read from the CI record
    uint8_t arm = 0;       // PIB_CQ_ARM_* or 0
    bool overrun = false;
    bool stopped = false;  // by the host (injection.hh): takes no CQEs
    uint8_t cqeFormat = 0; // the front end's CQE variant (ConnectX: cqe_sz)
    // The driver asked for no overrun detection (a ConnectX CQ's oi): the
    // device writes on, over CQEs not consumed, and never reports CQ_ERR.
    bool ignoreOverrun = false;
    // Moderation (cq_moderation.hh): CQEs whose event waits, and until when.
    uint32_t heldCqes = 0;
    uint64_t eventDue = 0; // host clock ns; 0: no event waits
};

// A key's own translation entry (MemoryRegion::ownPages): a page address,
// and in its low bits (ConnectX's MTT enables) the rights with which a
// key with present bits maps the page now.
namespace key_entry {
inline constexpr uint64_t kRead = 0x1;
inline constexpr uint64_t kWrite = 0x2;
inline constexpr uint64_t kFlags = 0x7;
} // namespace key_entry

// An entry of a KSM key's table (MemoryRegion::ksm): ConnectX's 16-byte
// mlx5_ksm as two of the key's own entries, big-endian words as the UMR
// QP loads them: the first's low 32 bits the key, the second the address.
namespace ksm_entry {
inline constexpr unsigned kWords = 2;
inline uint32_t key(uint64_t first) {
    return static_cast<uint32_t>(first);
}
} // namespace ksm_entry

struct MemoryRegion {
    pib_mr_context ctx{};
    uint32_t key = 0;
    Owner owner = 0;
    // A fast-registration region is free (no access through any key) until
    // a REG_MR WQE maps it, and again after an invalidation (IBA 10.6.1).
    bool valid = true;
    uint32_t windows = 0; // memory windows bound to it: it stays while any is
    // Whether a peer's SEND with Invalidate may free it: every pib-hca
    // fast-registration region; a ConnectX key only with en_rinval, from
    // CREATE_MKEY or the REG_MR that mapped it (docs/mlx5.md §10).
    bool remoteInvalidate = true;
    // Whether the driver's UMR QP loaded it (ConnectX: a user region of
    // mlx5_ib's MR cache, docs/mlx5.md §10.1). Such a key is the UMR QP's
    // alone: no other QP's REG_MR or invalidation may touch it, as no
    // kernel ULP's QP has any business with a process's region.
    bool umrQpOwned = false;
    // A ConnectX key keeps the pages a UMR maps with itself (the hardware's
    // ICM), not in the shared MTT: ctx.mtt_count is how many it may map,
    // ownPages those it maps now (budgeted by Mtt::takeKeyEntries).
    bool ownsPages = false;
    std::vector<uint64_t> ownPages;
    // Whether its entries keep present bits (bit 0 read, bit 1 write): the
    // ownPages of a key the UMR QP loads, as ConnectX's MTT has them, or
    // the MTT range of a pib-hca PIB_MR_ON_DEMAND region. Such a key maps
    // a page only while its entry says so, and a transfer that reaches
    // one it does not is a page fault (on-demand paging, page_faults.hh).
    // Any other key's entries are page addresses alone.
    bool pagedEntries = false;
    // A ConnectX indirect key (KLM, indirect_key.hh): its pieces of other
    // keys, which UMRs lay out; it has no pages of its own.
    std::optional<IndirectLayout> indirect;
    // A ConnectX KSM key (docs/mlx5.md §10.7): its range cut in spans of
    // 2^ctx.log_page_size bytes, span i reached through the key and
    // address its table's entry i names (ksm_entry). The table is its
    // ownPages, two words an entry, as the UMR QP loads it.
    bool ksm = false;
    // A pib-hca implicit on-demand region (PIB_MR_IMPLICIT, docs/prm.md
    // §6.10): the on-demand regions linked to it, each the span of
    // 2^ctx.log_page_size bytes it covers, by span number: the region's
    // index. A span with none faults on this region's key. A child names
    // its parent in ctx.parent_key, and leaves it when destroyed.
    std::map<uint64_t, uint32_t> children;

    bool fastReg() const { return ctx.flags & PIB_MR_FAST_REG; }
    bool implicit() const { return ctx.flags & PIB_MR_IMPLICIT; }
};

// A memory window: a range of a region, with its own R_Key and remote
// access, bound and unbound by WQEs (IBA 10.6.7).
struct MemoryWindow {
    pib_mw_context ctx{}; // ctx.bound and the binding, as QUERY_MW reports them
    uint32_t key = 0;
};

struct SharedReceiveQueue : Referenced {
    uint32_t number = 0; // the device's number for it
    pib_srq_context ctx{};
    uint32_t producer = 0;
    uint32_t consumer = 0;
    uint64_t record = 0; // ConnectX: the doorbell record with the driver's WQE counter
    uint32_t head = 0;   // ConnectX: the slot of the next WQE its free list gives
    bool basic = false;  // ConnectX: made by CREATE_SRQ, not CREATE_XRC_SRQ

    bool isXrc() const { return ctx.type == PIB_SRQT_XRC; }
};

// Producer and consumer counts of a work queue (from doorbells and the
// engine that consumes WQEs).
struct WorkQueue {
    uint32_t producer = 0;
    uint32_t consumer = 0;

    // The consumer passes a WQE of `slots` slots; never beyond the
    // producer, whatever a WQE the guest wrote claims.
    void consume(uint32_t slots) {
        const uint32_t step = slots ? slots : 1;
        consumer += step < producer - consumer ? step : producer - consumer;
    }
};

// What the DC transport adds to a QP (docs/mlx5.md §15). A DCI: the DCT
// it is connected to now (its attr.av and dest_qp_num are that DCT's
// path and number), the key, and the PSN that opened the connection. A
// DCT: its key. A DC connection, the hidden RC responder a DCT opens for
// each DCI that reaches it (dc_targets.hh): its DCT, and when it last
// took a request.
struct DcLink {
    uint64_t key = 0;
    uint32_t connectPsn = 0;        // DCI
    bool connected = false;         // DCI
    uint32_t serial = 0;            // DCI: its connection's; connection: its opener's
    uint32_t dct = 0;               // connection: its DCT's number
    uint64_t lastActive = 0;        // connection: host clock ns
    uint32_t keyViolations = 0;     // DCT: requests with another key, dropped
    bool keyViolationArmed = false; // DCT: the next one raises an event
};

struct QueuePair {
    uint32_t number = 0; // the device's number for it (QP0/QP1: 2 * (port - 1) + type)
    pib_qp_context ctx{};
    pib_qp_attr attr{}; // current attributes; attr.qp_state is the state
    Owner owner = 0;
    WorkQueue sq;
    WorkQueue rq;
    // ConnectX: the driver's UMR QP (service type 0xc), a core UC QP with no
    // PD that takes UMR WQEs only and sends nothing (docs/mlx5.md §10.1).
    bool umr = false;
    // ConnectX: the context's fre (fast registration enabled), which
    // mlx5_ib sets on the kernel's QPs only: a QP without it posts no UMR
    // (a user process's QP cannot map or free a key; docs/mlx5.md §10).
    bool fastRegEnabled = false;
    // ConnectX: DMA copies (MMO WQEs) enabled, by INIT2INIT's qpc_ext
    // (docs/mlx5.md §10.2).
    bool dmaCopy = false;
    // ConnectX: an SQ without a doorbell record (send_dbr_mode 1): its
    // doorbell carries the counter (docs/mlx5.md §10.3).
    bool sendDoorbellLess = false;
    uint32_t nextPsn = 0; // UD: the PSN of the next packet sent
    RequesterState req;   // RC, UC
    ResponderState resp;  // RC, UC
    uint64_t timerAt = 0; // this QP's entry in the data path's timer set
    // In the error state, with receives posted by a record: when the
    // record is read again for WQEs to flush, and the wait after that.
    uint64_t recordPollAt = 0;
    uint64_t recordPollNs = 0;
    bool lastWqeReached = false; // SRQ: the event was raised
    bool sqDrainPending = false; // SQD: SQ drained is raised once nothing is in flight
    bool postponed = false;      // waits in the ready list or a port's (scheduler.cc)
    bool acksAtEventEnd = false; // its ACKs wait for the end of the event (scheduler.cc)
    // ConnectX: the doorbell record (the RQ's WQE counter, then the SQ's),
    // where the QP's one buffer starts in its first MTT entry (a multiple
    // of 64 bytes and of the RQ's stride), and where the SQ starts in the
    // buffer, behind the RQ.
    uint64_t record = 0;
    uint32_t ringStart = 0;
    uint32_t sendOffset = 0;
    uint32_t counterSet = 0; // the counter set it counts into too (0: none)
    DcLink dc;               // DCI, DCT and DC connections only
    DciStreams streams;      // DCI: its streams, if created with them (dci_streams.hh)
};

// The datagram QP types: UD, and the special QPs QP0 and QP1.
inline bool isDatagramType(uint8_t type) {
    return type == PIB_QPT_UD || type == PIB_QPT_SMI || type == PIB_QPT_GSI;
}

// The QP types whose sends complete as they leave, with no answer from
// the responder: the datagram types and UC.
inline bool completesOnLeaving(uint8_t type) {
    return isDatagramType(type) || type == PIB_QPT_UC;
}

// The QP types of the reliable connected transports: RC, and XRC's two
// halves, which are RC's requester and responder (IBA A14).
inline bool isReliableType(uint8_t type) {
    return type == PIB_QPT_RC || type == PIB_QPT_XRC_INI || type == PIB_QPT_XRC_TGT;
}
inline bool isReliableRequester(uint8_t type) {
    return type == PIB_QPT_RC || type == PIB_QPT_XRC_INI || type == kQptDci;
}
inline bool isXrcType(uint8_t type) {
    return type == PIB_QPT_XRC_INI || type == PIB_QPT_XRC_TGT;
}
// What a QP of each type is built on: an XRC TGT QP has no queue, PD or
// CQ of its own (its messages go to XRC SRQs); an XRC INI QP no receive
// side.
// A DCI sends only; a DCT has no queue either (its connections take
// WQEs from its SRQ).
inline bool hasSendQueue(uint8_t type) {
    return type != PIB_QPT_XRC_TGT && type != kQptDct;
}
inline bool hasReceiveSide(uint8_t type) {
    return !isXrcType(type) && type != kQptDci && type != kQptDct;
}
// The hidden RC responder of a DCT, for one DCI.
inline bool isDcConnection(const QueuePair &qp) {
    return qp.dc.dct != 0;
}
// The number a completion or event of `qp` names: a DC connection's DCT.
inline uint32_t reportedQpn(const QueuePair &qp) {
    return isDcConnection(qp) ? qp.dc.dct : qp.number;
}

inline bool isSpecialQp(const QueuePair &qp) {
    return qp.ctx.type == PIB_QPT_SMI || qp.ctx.type == PIB_QPT_GSI;
}

// The port a QP sends on: QP0 and QP1 belong to one; others are modified
// to theirs.
inline unsigned sendPort(const QueuePair &qp) {
    return isSpecialQp(qp) ? qp.ctx.port : qp.attr.port_num;
}

} // namespace pib
