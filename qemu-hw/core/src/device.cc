// SPDX-License-Identifier: GPL-2.0-or-later
#include "device.hh"
#include "trace.hh"

#include <cinttypes>
#include <cstdio>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "mlx5/mlx5_front_end.hh"
#include "pib/pib_front_end.hh"
#include "pib_hw.h"

namespace pib {

Device::Device(const pib_core_config &config, const pib_host_ops &ops, void *opaque)
    : config_(config), host_(ops, opaque), objects_(config_), ports_(config_),
      events_(host_, objects_.mtt, objects_.cqs),
      memory_(host_, objects_.mtt, objects_.mrs, objects_.mws),
      dataPath_(host_, objects_, ports_, events_, memory_, scheduler_, injections_, outstanding_),
      scheduler_(host_, objects_, ports_, dataPath_),
      agents_(config_, host_, ports_, events_, dataPath_), front_(makeFrontEnd()) {
    resetCore();
    for (uint32_t port = 1; port <= config_.num_ports; ++port)
        links_.push_back(
            std::make_unique<Link>(host_, port, config_.node_guid, config_.node_guid + port));
    scheduler_.setCables(&cables_);
    dataPath_.setOtherDeadline([this] {
        uint64_t first = 0;
        for (const auto &link : links_)
            if (const uint64_t due = link->pollingDeadline(); due && (!first || due < first))
                first = due;
        return first;
    });
}

// What either personality's commands act on; its steps are the device's
// one reset path (resetCore).
CoreParts Device::coreParts() {
    return CoreParts{objects_,
                     ports_,
                     agents_,
                     events_,
                     dataPath_,
                     injections_,
                     [this](uint32_t srqn) { dataPath_.forgetXrcSrq(srqn); },
                     [this] { endObjects(); },
                     [this] { resetPorts(); }};
}

std::unique_ptr<FrontEnd> Device::makeFrontEnd() {
    if (config_.personality == PIB_PERSONALITY_MLX5)
        return std::make_unique<mlx5::Mlx5FrontEnd>(config_, host_, coreParts());
    return std::make_unique<PibFrontEnd>(config_, host_, coreParts(),
                                         [this] { reset("guest wrote the reset register"); });
}

template <class Work> auto Device::event(Work &&work) {
    scheduler_.beginEvent();
    if constexpr (std::is_void_v<decltype(work())>) {
        work();
        scheduler_.endEvent();
    } else {
        auto result = work();
        scheduler_.endEvent();
        return result;
    }
}

// A fatal device still follows its links (so that a reset finds them as
// they are) but hands the components nothing.
void Device::portConnected(unsigned port, bool connected) {
    if (port < 1 || port > links_.size())
        return;
    event([&] {
        if (links_[port - 1]->connected(connected) == Link::Event::kDown && !fatal_)
            agents_.linkChanged(port, false);
        // Nothing queued survives a cable, a ring cable's backlog included:
        // work the full queue held back goes on (on a link that is down,
        // its packets are lost).
        if (!fatal_)
            scheduler_.portWritable(port);
        dataPath_.rearmTimer(); // a connected link polls
    });
}

void Device::portReceive(unsigned port, std::span<const uint8_t> bytes) {
    if (port < 1 || port > links_.size())
        return;
    event([&] {
        links_[port - 1]->receive(
            bytes, [&](Link::Event e) { linkEvent(port, e); },
            [&](std::span<const uint8_t> packet, std::span<const uint8_t> head) {
                packetReceived(port, packet, head);
            });
        dataPath_.rearmTimer(); // a HELLO ends Polling
    });
}

// A ring cable's doorbell: packets, or room for those that waited.
void Device::portBell(unsigned port) {
    if (port < 1 || port > links_.size())
        return;
    event([&] {
        const bool writable = links_[port - 1]->bell(
            [&](Link::Event e) { linkEvent(port, e); },
            [&](std::span<const uint8_t> packet, std::span<const uint8_t> head) {
                packetReceived(port, packet, head);
            });
        if (writable && !fatal_)
            scheduler_.portWritable(port);
    });
}

void Device::linkEvent(unsigned port, Link::Event e) {
    if (fatal_ || e == Link::Event::kNone)
        return;
    // A link that resumed after its device moved is the link the port's
    // state belongs to: its state stays, and its QPs say what the move
    // lost; so they do when the switch says it discarded packets to us.
    if (e == Link::Event::kResumed || e == Link::Event::kLost)
        dataPath_.resendWhatWasLost(port);
    else
        agents_.linkChanged(port, e == Link::Event::kUp);
}

// Each link says MOVING, and nothing else runs: the VM has stopped and its
// memory may be on its way already, so no work of the scheduler's (a
// loopback's, a deferred ACK's) may write it now. The host holds all other
// work until the VM runs (docs/migration.md).
void Device::moving() {
    for (auto &link : links_)
        link->moving();
    for (unsigned port = 1; port <= links_.size(); ++port)
        if (PortState *p = ports_.find(port))
            p->moved = true;
}

void Device::moveFailed() {
    event([&] {
        for (unsigned port = 1; port <= links_.size(); ++port)
            linkEvent(port, links_[port - 1]->moveFailed());
        // Work the silent links held back goes on.
        for (unsigned port = 1; port <= links_.size() && !fatal_; ++port)
            scheduler_.portWritable(port);
    });
}

void Device::packetReceived(unsigned port, std::span<const uint8_t> packet,
                            std::span<const uint8_t> head) {
    if (!fatal_)
        dataPath_.portReceive(port, packet, head);
}

void Device::timerExpired() {
    if (fatal_)
        return;
    event([&] {
        const uint64_t now = host_.clockNs();
        for (auto &link : links_)
            link->retryHello(now);
        dataPath_.timerExpired(); // arms the timer again, for the links too
    });
}

void Device::run() {
    // Ring cables that asked to come back are served first, as their
    // doorbells would have been.
    for (unsigned port = 1; port <= links_.size(); ++port)
        if (links_[port - 1]->wantsTurn())
            portBell(port);
    if (!fatal_)
        event([&] { scheduler_.run(); });
}

void Device::portWritable(unsigned port) {
    if (!fatal_)
        event([&] { scheduler_.portWritable(port); });
}

void Device::fatal(const char *reason) {
    if (fatal_)
        return;
    fatal_ = true;
    front_->setFatal();
    trace::fatal(host_, reason);
    // The event is the device's last act; if its state is what broke,
    // STATUS.FATAL alone tells the driver.
    try {
        events_.postAsyncEvent(PIB_ASYNC_DEVICE_FATAL, 0);
    } catch (...) {
    }
}

void Device::reset(const char *reason) {
    fatal_ = false;
    injections_.clear(); // as after power-on
    front_->reset();
    resetCore();
    trace::device_reset(host_, reason);
}

void Device::resetCore() {
    endObjects();
    resetPorts();
}

void Device::endObjects() {
    objects_.clear();
    dataPath_.reset();
}

void Device::resetPorts() {
    PortSet configured;
    for (uint32_t port = 1; port <= PIB_MAX_PORTS; ++port)
        if (const PortState *p = ports_.find(port); p && p->info.state >= PIB_PORT_ARMED)
            configured.set(port);
    ports_.reset();
    retrainLinks(configured);
}

// The ports were reset, with those the SM had configured (ARMED or
// ACTIVE) in `configured`. The cables stay plugged in. A link whose port
// the SM had configured trains again, as a real port's does when its
// function resets: it is DOWN/Polling until the peer answers the HELLO,
// then INIT, and the peer (a switch) tells the SM that the link went down
// and came up. A link the SM never used (the power-on link, at the
// driver's first reset) stays trained, as a real HCA's firmware keeps the
// link it trained at power-on through the driver's initialisation: the
// port is INIT again at once, and the switch counts no LinkDowned.
void Device::retrainLinks(const PortSet &configured) {
    for (unsigned port = 1; port <= links_.size(); ++port) {
        Link &link = *links_[port - 1];
        if (configured.test(port))
            link.retrain();
        else if (link.up())
            agents_.linkChanged(port, true);
    }
    dataPath_.rearmTimer(); // each retraining link polls
}

bool Device::capture(unsigned port, const char *path, uint64_t limit, std::string *answer) {
    if (port < 1 || port > links_.size()) {
        *answer = "the device has no port " + std::to_string(port);
        return false;
    }
    Link &link = *links_[port - 1];
    if (!path) {
        *answer = link.capture()
                      ? "port " + std::to_string(port) + ": captured " + link.stopCapture()
                      : "port " + std::to_string(port) + ": no capture";
        return true;
    }
    if (!link.startCapture(path, limit, answer))
        return false;
    *answer = "port " + std::to_string(port) + ": capturing to " + path;
    return true;
}

std::optional<Json> Device::inspect(std::string_view what, std::string *error) const {
    return inspector_.inspect(what, error);
}

bool Device::inject(std::string_view line, std::string *answer) {
    using Kind = Injection::Kind;
    const std::optional<Injection> in = parseInjection(line, front_->commandWords(), answer);
    if (!in)
        return false;
    const std::string what(line.substr(std::min(line.find_first_not_of(" \t"), line.size())));
    switch (in->kind) {
    case Kind::kFatal:
        fatal(in->reason.c_str());
        *answer = "the device is FATAL: " + in->reason;
        return true;
    case Kind::kClear:
        injections_.clear();
        *answer = "nothing armed";
        return true;
    case Kind::kEvent:
        return raiseEvent(*in, answer);
    case Kind::kStop:
    case Kind::kResume:
        return stopOrResume(*in, answer);
    default:
        break;
    }
    if (!injections_.arm(*in)) {
        *answer = "already " + std::to_string(ArmedInjections::kMaxArmed) + " of its kind armed";
        return false;
    }
    trace::inject_armed(host_, what.c_str());
    *answer = "armed: " + what;
    return true;
}

// An async event about an object that exists (or a port), at once.
bool Device::raiseEvent(const Injection &in, std::string *answer) {
    const uint8_t e = in.status;
    const uint32_t n = in.number;
    const bool exists =
        e == PIB_ASYNC_CQ_ERR                                ? objects_.cqs.find(n) != nullptr
        : e == PIB_ASYNC_SRQ_LIMIT || e == PIB_ASYNC_SRQ_ERR ? objects_.srqs.find(n) != nullptr
        : e >= PIB_ASYNC_QP_FATAL && e <= PIB_ASYNC_QP_LAST_WQE_REACHED
            ? objects_.findQp(n) != nullptr
        : e == PIB_ASYNC_PATH_MIG || e == PIB_ASYNC_PATH_MIG_ERR ? objects_.findQp(n) != nullptr
        : e == PIB_ASYNC_DEVICE_FATAL                            ? true
                                                                 : ports_.find(n) != nullptr;
    if (!exists) {
        *answer = "no object " + std::to_string(n) + " for that event";
        return false;
    }
    if (e == PIB_ASYNC_DEVICE_FATAL) {
        fatal("injected DEVICE_FATAL event");
    } else {
        event([&] { events_.postAsyncEvent(e, n); });
    }
    char text[64];
    std::snprintf(text, sizeof(text), "raised async event 0x%02x for %u", e, n);
    *answer = text;
    return true;
}

bool Device::stopOrResume(const Injection &in, std::string *answer) {
    const bool stop = in.kind == Injection::Kind::kStop;
    bool found = false;
    if (!in.cq) {
        found = front_->stopEq(in.number, stop);
    } else if (CompletionQueue *cq = objects_.cqs.find(in.number)) {
        cq->stopped = stop;
        found = true;
    }
    const std::string name = std::string(in.cq ? "CQ " : "EQ ") + std::to_string(in.number);
    if (!found) {
        *answer = "no " + name;
        return false;
    }
    *answer = name + (stop ? " stopped: it takes no entries" : " resumed");
    trace::inject_armed(host_, answer->c_str());
    return true;
}

uint64_t Device::barSize(int bar) const {
    return front_->barSize(bar);
}

static bool validWidth(unsigned size) {
    return size == 1 || size == 2 || size == 4 || size == 8;
}

uint64_t Device::barRead(int bar, uint64_t offset, unsigned size) {
    if (!validWidth(size)) {
        host_.guestError(err::kBarBadWidth, "read of %u bytes from BAR%d", size, bar);
        return 0;
    }
    return front_->barRead(bar, offset, size);
}

// Commands and doorbells may start work: the write is one event.
void Device::barWrite(int bar, uint64_t offset, uint64_t value, unsigned size) {
    if (!validWidth(size)) {
        host_.guestError(err::kBarBadWidth, "write of %u bytes to BAR%d", size, bar);
        return;
    }
    event([&] { front_->barWrite(bar, offset, value, size); });
}

} // namespace pib
