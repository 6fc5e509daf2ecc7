// SPDX-License-Identifier: GPL-2.0-or-later
#include "ring_pumps.hh"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <utility>

#include "frame.hh"
#include "packet.hh"

namespace pib::fabric {

namespace {

// What a thread reads of a ring before the loop takes it: about one
// socket read's worth, as the loop takes from a stream.
constexpr size_t kReadAhead = 64u << 10;
// A record's length and its VCRC's verdict, before its bytes.
constexpr size_t kRecordHeader = 5;
// A buffer holds what the thread reads before it stops, and one more
// packet: the one that took it past kReadAhead.
constexpr size_t kBufferBytes = kReadAhead + kRecordHeader + wire::kMaxPayload;
// The tag of a thread's own eventfd in its epoll (ports start at 1).
constexpr uint64_t kWakeTag = 0;

void signal(int eventFd) {
    const uint64_t one = 1;
    if (write(eventFd, &one, sizeof(one)) < 0) {
        // Full (it cannot be) or closed: the reader wakes anyway.
    }
}

void clear(int eventFd) {
    uint64_t count;
    if (read(eventFd, &count, sizeof(count)) < 0) {
        // Not signalled: nothing to clear.
    }
}

} // namespace

struct RingPumps::Thread {
    int epoll = -1;
    int wake = -1;               // an eventfd: `again` has ports, or `stop` is set
    std::mutex mutex;            // the loop's requests against the thread's taking them
    std::vector<unsigned> again; // ports to read without a doorbell
    bool stop = false;
    std::thread thread;

    ~Thread() {
        if (epoll >= 0)
            close(epoll);
        if (wake >= 0)
            close(wake);
    }
};

RingPumps::RingPumps(unsigned threads, unsigned ports) : ports_(ports), readyQueued_(ports, false) {
    for (auto &p : ports_)
        p = std::make_unique<Port>();
    ready_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (ready_ < 0)
        throw std::runtime_error("eventfd: " + std::string(strerror(errno)));
    for (unsigned i = 0; i < std::max(threads, 1u); ++i) {
        auto t = std::make_unique<Thread>();
        t->epoll = epoll_create1(EPOLL_CLOEXEC);
        t->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (t->epoll < 0 || t->wake < 0)
            throw std::runtime_error("forwarding thread: " + std::string(strerror(errno)));
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = kWakeTag;
        epoll_ctl(t->epoll, EPOLL_CTL_ADD, t->wake, &ev);
        threads_.push_back(std::move(t));
    }
    for (auto &t : threads_)
        t->thread = std::thread([this, raw = t.get()] { run(*raw); });
}

RingPumps::~RingPumps() {
    for (auto &t : threads_) {
        {
            std::lock_guard lock(t->mutex);
            t->stop = true;
        }
        signal(t->wake);
        if (t->thread.joinable())
            t->thread.join();
    }
    close(ready_);
}

void RingPumps::run(Thread &t) {
    epoll_event events[32];
    for (;;) {
        const int n = epoll_wait(t.epoll, events, 32, -1);
        for (int i = 0; i < n; ++i) {
            if (events[i].data.u64 == kWakeTag)
                clear(t.wake);
            else
                pump(static_cast<unsigned>(events[i].data.u64), true);
        }
        std::vector<unsigned> again;
        {
            std::lock_guard lock(t.mutex);
            if (t.stop)
                return;
            again.swap(t.again);
        }
        for (const unsigned port : again)
            pump(port, false);
    }
}

// The port's doorbell rang (`rang`), or the loop asked for more: the
// thread reads what came, and tells the loop.
void RingPumps::pump(unsigned port, bool rang) {
    Port &p = *ports_[port];
    bool news = false;
    {
        std::lock_guard lock(p.mutex);
        if (!p.in || !p.broken.empty())
            return; // detached, or a ring given up (a stale event)
        if (rang && !wire::clearDoorbell(p.bell)) {
            p.broken = "the peer closed the ring cable's doorbell line";
            // Watched no more: a line hung up stays readable for ever.
            epoll_ctl(threads_[port % threads_.size()]->epoll, EPOLL_CTL_DEL, p.bell, nullptr);
            news = true;
        } else {
            // A ring for room is news to the loop too: it writes the other ring.
            news = fill(p) || rang;
        }
    }
    if (news)
        markReady(port);
}

// Reads packets until the ring is empty or kReadAhead bytes wait for the
// loop. True when it read one, or found the ring broken.
bool RingPumps::fill(Port &p) {
    if (p.held)
        return false;
    bool read = false;
    while (!p.full) {
        if (p.filling.used >= kReadAhead) {
            p.full = true; // the loop asks for more when it takes these
            break;
        }
        uint8_t *record = p.filling.data.get() + p.filling.used;
        wire::RingReader::Error error;
        const auto length = p.in->nextTo(record + kRecordHeader, &error);
        if (!length) {
            if (error != wire::RingReader::Error::kNone) {
                p.broken = wire::RingReader::toString(error);
                return true;
            }
            if (p.in->release())
                wire::ringDoorbell(p.bell);
            if (p.in->armDoorbell())
                break; // empty: the peer rings when it writes
            continue;
        }
        std::memcpy(record, &*length, sizeof(*length));
        record[4] = iba::vcrcGood(std::span(record + kRecordHeader, *length)) ? 1 : 0;
        p.filling.used += kRecordHeader + *length;
        read = true;
    }
    if (p.in->release())
        wire::ringDoorbell(p.bell);
    return read;
}

void RingPumps::markReady(unsigned port) {
    bool wake = false;
    {
        std::lock_guard lock(readyMutex_);
        if (readyQueued_[port])
            return;
        readyQueued_[port] = true;
        wake = readyPorts_.empty();
        readyPorts_.push_back(port);
    }
    if (wake)
        signal(ready_);
}

std::vector<unsigned> RingPumps::takeReady() {
    clear(ready_);
    std::vector<unsigned> ports;
    std::lock_guard lock(readyMutex_);
    ports.swap(readyPorts_);
    for (const unsigned port : ports)
        readyQueued_[port] = false;
    return ports;
}

void RingPumps::poke(unsigned port) {
    Thread &t = *threads_[port % threads_.size()];
    {
        std::lock_guard lock(t.mutex);
        t.again.push_back(port);
    }
    signal(t.wake);
}

void RingPumps::attach(unsigned port, wire::RingReader *in, int bell) {
    Port &p = *ports_[port];
    {
        std::lock_guard lock(p.mutex);
        for (Buffer *b : {&p.filling, &p.draining}) {
            if (!b->data)
                b->data = std::make_unique<uint8_t[]>(kBufferBytes);
            b->used = b->at = 0;
        }
        p.in = in;
        p.bell = bell;
        p.full = p.held = false;
        p.broken.clear();
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = port;
        epoll_ctl(threads_[port % threads_.size()]->epoll, EPOLL_CTL_ADD, bell, &ev);
    }
    poke(port); // what the peer wrote before it knew we would read
}

void RingPumps::detach(unsigned port) {
    Port &p = *ports_[port];
    std::lock_guard lock(p.mutex);
    if (!p.in)
        return;
    // (A line given up is watched no more already: ENOENT, harmless.)
    epoll_ctl(threads_[port % threads_.size()]->epoll, EPOLL_CTL_DEL, p.bell, nullptr);
    p.in = nullptr;
    p.bell = -1;
    p.filling.used = p.filling.at = 0;
    p.draining.used = p.draining.at = 0;
}

void RingPumps::hold(unsigned port, bool held) {
    {
        std::lock_guard lock(ports_[port]->mutex);
        ports_[port]->held = held;
    }
    if (!held)
        poke(port); // what the peer wrote meanwhile
}

std::optional<RingPumps::Packet> RingPumps::next(unsigned port) {
    Port &p = *ports_[port];
    Buffer &d = p.draining;
    if (d.at == d.used) {
        bool wasFull = false;
        {
            std::lock_guard lock(p.mutex);
            if (!p.in)
                return std::nullopt;
            std::swap(p.filling, p.draining);
            p.filling.used = p.filling.at = 0;
            wasFull = std::exchange(p.full, false);
        }
        if (wasFull)
            poke(port);
        if (d.used == 0)
            return std::nullopt;
    }
    const uint8_t *record = d.data.get() + d.at;
    uint32_t length;
    std::memcpy(&length, record, sizeof(length));
    d.at += kRecordHeader + length;
    return Packet{std::span(record + kRecordHeader, length), record[4] != 0};
}

std::string RingPumps::broken(unsigned port) {
    Port &p = *ports_[port];
    std::lock_guard lock(p.mutex);
    return p.broken;
}

uint64_t RingPumps::waiting(unsigned port) {
    Port &p = *ports_[port];
    std::lock_guard lock(p.mutex);
    if (!p.in)
        return 0;
    return uint64_t{p.in->waiting()} + p.filling.used + (p.draining.used - p.draining.at);
}

} // namespace pib::fabric
