// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_event_queues.hh"

#include <algorithm>
#include <cinttypes>

#include "limits.hh"
#include "mlx5_ifc.hh"
#include "pib_hw.h"
#include "trace.hh"

namespace pib::mlx5 {

namespace {

// create_eq_in: the EQ context (eqc) at byte 0x10, the event types, then
// the page list (mlx5_ifc.h).
// ifc fields: create_eq_in.eq_context_entry
constexpr Field kEqcPageOffset = field(0xd4, 6); // ifc: page_offset
constexpr Field kLogEqSize = field(0xe3, 5);
constexpr Field kEqcUarPage = field(0xe8, 24); // ifc: uar_page
constexpr Field kIntr = field(0x134, 12);
constexpr Field kEqcLogPageSize = field(0x143, 5); // ifc: log_page_size
constexpr uint32_t kEventBitmask = 0x58;           // four big-endian 64-bit words
constexpr uint32_t kEqPageList = 0x110;

constexpr uint32_t kOwnerByte = 0x3f;

} // namespace

// mlx5_ib's consumer counter for an EQ is 24 bits (eq_update_ci).
static const EqEngine::Rules kRules{err::kMlx5EqOverrun, err::kMlx5EqDma, err::kMlx5EqDoorbell,
                                    kMask24};

EventQueues::EventQueues(const Host &host, const Uars &uars, uint32_t vectors)
    : host_(host), uars_(uars), vectors_(vectors), eqs_(limits::kMaxEq), engine_(host, kRules) {}

const err::Condition *EventQueues::create(std::span<const uint8_t> in, uint32_t &eqn) {
    if (eqs_.size() == eqs_.capacity()) {
        host_.guestError(err::kMlx5CmdNoResources, "CREATE_EQ: all %u EQs exist", limits::kMaxEq);
        return &err::kMlx5CmdNoResources;
    }
    auto eq = std::make_unique<Eq>();
    eq->logSize = static_cast<uint32_t>(get(in, kLogEqSize));
    eq->ring.shift = PageList::kAdapterPageShift + static_cast<uint32_t>(get(in, kEqcLogPageSize));
    eq->uar = static_cast<uint32_t>(get(in, kEqcUarPage));
    eq->vector = static_cast<uint32_t>(get(in, kIntr));
    const char *bad = eq->logSize > limits::kLogMaxEqe ? "log_eq_size beyond log_max_eq_sz"
                      : eq->ring.shift > PageList::kAdapterPageShift + PageList::kMaxLogPageSize
                          ? "log_page_size"
                      : get(in, kEqcPageOffset) != 0 ? "page_offset: EQs start on a page"
                      : eq->vector >= vectors_       ? "intr: no such MSI-X vector"
                      : !uars_.given(eq->uar)        ? "uar_page: not given by ALLOC_UAR"
                                                     : nullptr;
    if (bad) {
        host_.guestError(err::kMlx5EqBadContext, "CREATE_EQ: %s", bad);
        return &err::kMlx5EqBadContext;
    }
    for (size_t i = 0; i < eq->types.size(); ++i)
        eq->types[i] = readBe64(in.data() + kEventBitmask + 8 * i);
    const uint64_t bytes = uint64_t{kEqeBytes} << eq->logSize;
    if (const err::Condition *why =
            eq->ring.load(host_, in, kEqPageList, bytes, "CREATE_EQ", err::kMlx5EqBadPages))
        return why;
    const Eq &made = *eq; // the table owns it from here; it has room
    eqn = *eqs_.insert(std::move(eq));
    trace::mlx5_eq_create(host_, eqn, made.logSize, made.vector, made.uar, made.types[0]);
    return nullptr;
}

// The CREATE_EQ input that makes `eq` as it is (the device's state).
std::vector<uint8_t> EventQueues::createInput(const Eq &eq) const {
    std::vector<uint8_t> in(kEqPageList + sizeof(uint64_t) * eq.ring.pages.size());
    set(in, kLogEqSize, eq.logSize);
    set(in, kEqcLogPageSize, eq.ring.shift - PageList::kAdapterPageShift);
    set(in, kEqcUarPage, eq.uar);
    set(in, kIntr, eq.vector);
    for (size_t i = 0; i < eq.types.size(); ++i)
        writeBe64(in.data() + kEventBitmask + 8 * i, eq.types[i]);
    for (size_t i = 0; i < eq.ring.pages.size(); ++i)
        writeBe64(in.data() + kEqPageList + 8 * i, eq.ring.pages[i]);
    return in;
}

bool EventQueues::destroy(uint32_t eqn) {
    if (!eqs_.erase(eqn))
        return false;
    trace::mlx5_eq_destroy(host_, eqn);
    return true;
}

bool EventQueues::usesUar(uint32_t uar) const {
    bool found = false;
    eqs_.forEach([&](uint32_t, const Eq &eq) { found |= eq.uar == uar; });
    return found;
}

bool EventQueues::takes(uint8_t type) const {
    bool found = false;
    eqs_.forEach([&](uint32_t, const Eq &eq) { found |= eq.takes(type); });
    return found;
}

void EventQueues::doorbell(uint32_t uar, uint32_t value, bool arm) {
    const uint32_t eqn = value >> 24;
    const uint32_t consumer = value & kMask24;
    Eq *eq = eqs_.find(eqn);
    trace::mlx5_eq_doorbell(host_, uar, eqn, consumer, arm);
    if (!eq || eq->uar != uar) {
        host_.guestError(err::kMlx5EqDoorbell, "UAR %u: doorbell of EQ %u, %s", uar, eqn,
                         eq ? "which is on another UAR page" : "which does not exist");
        return;
    }
    engine_.doorbell(eqn, *eq, eq->vector, consumer, arm);
}

void EventQueues::post(uint8_t type, uint8_t subType, const Data &data, uint32_t about) {
    uint32_t target = 0;
    Eq *eq = nullptr;
    eqs_.forEach([&](uint32_t eqn, Eq &candidate) {
        if (!eq && candidate.takes(type)) {
            target = eqn;
            eq = &candidate;
        }
    });
    if (eq)
        write(target, *eq, type, subType, data, about);
}

// The memory scheme's page fault EQE (mlx5_eqe_page_fault's memory
// part): the key and IOVA that faulted, the 4 KiB pages from there that
// the transfer needs (in bits 31:12 of their word), no prefetch, and LAST:
// the driver resumes the fault once it has mapped them.
bool EventQueues::postPageFault(const PageFaultReport &f) {
    if (!memoryPageFaults_ || !takes(event::kPageFault))
        return false;
    constexpr uint64_t kPage = 4096;
    constexpr uint64_t kMostPages = 1024; // 4 MiB a fault: the rest faults again
    constexpr uint8_t kLast = 0x80;
    const uint64_t pages =
        std::min(kMostPages, ((f.site.va & (kPage - 1)) + f.site.length + kPage - 1) / kPage);
    Data data{};
    data[0x00] = kLast;
    writeBe16(data.data() + 0x06, static_cast<uint16_t>(f.token >> 32));
    writeBe32(data.data() + 0x08, static_cast<uint32_t>(f.token));
    writeBe32(data.data() + 0x0c, static_cast<uint32_t>(pages << 12));
    writeBe32(data.data() + 0x10, f.site.key);
    writeBe64(data.data() + 0x14, f.site.va);
    post(event::kPageFault, event::kMemoryPageFault, data, f.qpn);
    return true;
}

void EventQueues::postTo(uint32_t eqn, uint8_t type, uint8_t subType, const Data &data,
                         uint32_t about) {
    if (Eq *eq = eqs_.find(eqn))
        write(eqn, *eq, type, subType, data, about);
}

void EventQueues::write(uint32_t eqn, Eq &eq, uint8_t type, uint8_t subType, const Data &data,
                        uint32_t about) {
    if (!engine_.hasRoom(eqn, eq, eq.logSize))
        return;
    const uint32_t index = eq.producer & ((1u << eq.logSize) - 1);
    std::array<uint8_t, kEqeBytes> eqe{};
    eqe[1] = type;
    eqe[3] = subType;
    std::copy(data.begin(), data.end(), eqe.begin() + 0x20);
    // The owner bit is 0 on the ring's first pass, and flips on each.
    eqe[kOwnerByte] = (eq.producer >> eq.logSize) & 1;
    engine_.write(eqn, eq, eq.vector, eq.ring.address(uint64_t{index} * kEqeBytes), eqe, kOwnerByte,
                  {type, subType, about});
}

void EventQueues::forEachView(const std::function<void(const EqView &)> &each) const {
    eqs_.forEach([&](uint32_t eqn, const Eq &eq) {
        // The driver's counter is 24 bits; the view counts as the
        // producer does.
        const uint32_t consumer = eq.producer - ((eq.producer - eq.consumer) & kMask24);
        const bool async = (eq.types[0] & ~uint64_t{1} << event::kCompletion) || eq.types[1] ||
                           eq.types[2] || eq.types[3];
        each(EqView{.eqn = eqn,
                    .vector = eq.vector,
                    .size = 1u << eq.logSize,
                    .producer = eq.producer,
                    .consumer = consumer,
                    .async = async,
                    .armed = eq.armed,
                    .overrun = eq.overrun,
                    .stopped = eq.stopped});
    });
}

bool EventQueues::stop(uint32_t eqn, bool stop) {
    Eq *eq = eqs_.find(eqn);
    if (eq)
        eq->stopped = stop;
    return eq != nullptr;
}

bool EventQueues::anyStopped() const {
    bool any = false;
    eqs_.forEach([&](uint32_t, const Eq &eq) { any |= eq.stopped; });
    return any;
}

namespace {

// Async events as ConnectX reports them (device.h: MLX5_EVENT_TYPE_* and
// the port change sub-types); kind says where the object's number goes.
enum class Kind : uint8_t { kNone, kCq, kQp, kSrq, kDct, kPort };
struct AsyncEvent {
    uint8_t type;
    uint8_t subType;
    Kind kind;
};

AsyncEvent mlx5Event(uint8_t event) {
    switch (event) {
    case PIB_ASYNC_CQ_ERR:
        return {0x04, 0, Kind::kCq};
    case PIB_ASYNC_QP_FATAL:
        return {0x05, 0, Kind::kQp}; // WQ_CATAS_ERROR
    case PIB_ASYNC_QP_REQ_ERR:
        return {0x10, 0, Kind::kQp}; // WQ_INVAL_REQ_ERROR
    case PIB_ASYNC_QP_ACCESS_ERR:
        return {0x11, 0, Kind::kQp}; // WQ_ACCESS_ERROR
    case PIB_ASYNC_COMM_EST:
        return {0x02, 0, Kind::kQp};
    case PIB_ASYNC_SQ_DRAINED:
        return {0x03, 0, Kind::kQp};
    case PIB_ASYNC_QP_LAST_WQE_REACHED:
        return {0x13, 0, Kind::kQp};
    case PIB_ASYNC_SRQ_LIMIT:
        return {0x14, 0, Kind::kSrq};
    case PIB_ASYNC_SRQ_ERR:
        return {0x12, 0, Kind::kSrq}; // SRQ_CATAS_ERROR
    case PIB_ASYNC_PATH_MIG:
        return {0x01, 0, Kind::kQp};
    case kAsyncDctKeyViolation:
        return {0x1d, 0, Kind::kDct}; // DCT_KEY_VIOLATION
    case PIB_ASYNC_PATH_MIG_ERR:
        return {0x07, 0, Kind::kQp};
    case PIB_ASYNC_PORT_ACTIVE:
        return {event::kPortChange, 0x4, Kind::kPort};
    case PIB_ASYNC_PORT_ERR:
        return {event::kPortChange, 0x1, Kind::kPort};
    // A new SM is a new LID to reach it by: mlx5_ib has no sub-type of
    // its own for it, and both make ib_sa find the SM again.
    case PIB_ASYNC_LID_CHANGE:
    case PIB_ASYNC_SM_CHANGE:
        return {event::kPortChange, 0x6, Kind::kPort};
    case PIB_ASYNC_PKEY_CHANGE:
        return {event::kPortChange, 0x7, Kind::kPort};
    case PIB_ASYNC_GID_CHANGE:
        return {event::kPortChange, 0x8, Kind::kPort};
    case PIB_ASYNC_CLIENT_REREGISTER:
        return {event::kPortChange, 0x9, Kind::kPort};
    default:
        // DEVICE_FATAL: a ConnectX says so in its health buffer (§2).
        return {0, 0, Kind::kNone};
    }
}

} // namespace

void EventQueues::postAsync(uint8_t event, uint32_t number) {
    const AsyncEvent e = mlx5Event(event);
    EventQueues::Data data{};
    switch (e.kind) {
    case Kind::kNone:
        return;
    case Kind::kCq:
        writeBe32(data.data(), number); // cq_err.cqn
        data[0x0b] = 0x01;              // its syndrome: CQ overrun
        break;
    case Kind::kQp:
    case Kind::kSrq:
        data[0x14] = e.kind == Kind::kSrq ? 1 : 0; // qp_srq.type
        writeBe32(data.data() + 0x18, number);     // qp_srq.qp_srq_n
        break;
    case Kind::kDct:
        writeBe32(data.data() + 0x18, number); // dct.dctn
        break;
    case Kind::kPort:
        data[0x08] = static_cast<uint8_t>(number << 4); // port.port
        break;
    }
    post(e.type, e.subType, data, number);
}

} // namespace pib::mlx5
