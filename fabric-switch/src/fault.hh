// SPDX-License-Identifier: GPL-2.0-or-later
// Fault injection on a switch port: what a bad cable or a congested link
// does to the packets that cross it (loss, bit errors, duplicates,
// reordering, delay) and to the link itself (flaps). Every decision comes
// from a PRNG seeded per port and direction, so the same seed and the
// same packets give the same faults. Pure logic: the server feeds it
// packets and the time, and sends what it releases.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pib::fabric {

class FaultInjector;
class FlapSchedule;

// What to do to the packets of one direction of a port. Probabilities are
// in [0, 1]; times in nanoseconds; 0 turns a fault off.
struct FaultSpec {
    double loss = 0;            // each packet is lost with this probability
    uint32_t lossEvery = 0;     // every Nth packet is lost
    uint32_t burstLength = 0;   // and `burstLength` packets in a row...
    uint32_t burstEvery = 0;    // ...of every `burstEvery`
    double corrupt = 0;         // one bit flipped anywhere in the packet
    double duplicate = 0;       // the packet is sent twice
    double reorder = 0;         // the packet is held back...
    uint32_t reorderWindow = 4; // ...until 1..window later ones passed
    uint64_t delayNs = 0;       // every packet waits this long,
    uint64_t jitterNs = 0;      // give or take up to this (order is kept)
    uint64_t flapDownNs = 0;    // the link goes down for this long...
    uint64_t flapEveryNs = 0;   // ...once in each period of this length
    uint64_t seed = 1;

    bool any() const;
    bool flaps() const { return flapDownNs && flapEveryNs; }
    // The spec in the syntax parse() reads, e.g. "loss=5% delay=1ms±1ms".
    std::string toString() const;
    // Reads "key=value" words separated by spaces or commas: loss=5%,
    // loss-every=N, burst=LEN/EVERY, corrupt=P%, dup=P%, reorder=P%,
    // window=N, delay=T[±T], flap=T/T, seed=N. Times take ns, us, ms or s.
    static std::optional<FaultSpec> parse(std::string_view text, std::string *error);
};

// What a direction's faults did, for the status and the log.
struct FaultCounters {
    uint64_t packets = 0; // offered to the injector
    uint64_t dropped = 0;
    uint64_t corrupted = 0;
    uint64_t duplicated = 0;
    uint64_t reordered = 0;
    uint64_t delayed = 0;
    uint64_t overflowed = 0; // lost because too much was held back already

    std::string toString() const;
};

// A fault as the switch's --fault option and control socket take it: the
// spec, and which directions of the port it applies to ("dir=in": what
// the switch receives from the port's peer; "dir=out": what it sends to
// it; both when not said). A flap takes the whole link down either way.
struct FaultSetting {
    bool in = true, out = true;
    FaultSpec spec;

    static std::optional<FaultSetting> parse(std::string_view text, std::string *error);

    // Sets the directions it names on a port's injectors at `now` (what a
    // replaced one held leaves at once, by `toIn` and `toOut`), their PRNG
    // streams `stream` and `stream + 1`, and the port's flap. Returns the
    // directions it set: "in", "out" or "in+out".
    std::string apply(FaultInjector &in, const std::function<void(std::span<const uint8_t>)> &toIn,
                      FaultInjector &out,
                      const std::function<void(std::span<const uint8_t>)> &toOut,
                      FlapSchedule &flap, uint64_t stream, uint64_t now) const;
};

// One direction of one port.
class FaultInjector {
  public:
    using Deliver = std::function<void(std::span<const uint8_t>)>;

    // Starts applying `spec` from time `now`; `stream` tells the
    // directions and ports apart so each has its own sequence from one seed.
    void configure(const FaultSpec &spec, uint64_t stream, uint64_t now);
    // Stops injecting; what is held back is released at once.
    void clear(const Deliver &deliver);
    // Loses what is held back (the link it was to cross went down),
    // counted as dropped.
    void discardHeld();
    bool active() const { return active_; }
    const FaultSpec &spec() const { return spec_; }
    const FaultCounters &counters() const { return counters_; }

    // A packet enters the direction at `now`: `deliver` gets what leaves
    // now. `tag` goes with the packet, what tag() says while it is
    // delivered, now or later (a simulated fabric's hop count).
    void offer(std::span<const uint8_t> packet, uint64_t now, const Deliver &deliver,
               uint32_t tag = 0);
    // The tag of the packet `deliver` is given.
    uint32_t tag() const { return tag_; }
    // Delivers what waited long enough by `now`.
    void release(uint64_t now, const Deliver &deliver);
    // When release() next has something to deliver.
    std::optional<uint64_t> nextRelease() const;

    // Held-back packets at most, and bytes: beyond, packets are lost.
    static constexpr size_t kMaxHeldPackets = 4096;
    static constexpr size_t kMaxHeldBytes = 8u << 20;
    // A reordered packet on a link that falls quiet leaves after this.
    static constexpr uint64_t kReorderTimeoutNs = 20'000'000;

  private:
    struct Held {
        uint64_t due;        // when it may leave at the latest
        uint32_t overtakers; // reordering: packets still to pass it first
        uint32_t tag;
        std::vector<uint8_t> bytes;
    };
    bool chance(double p);
    bool lose();
    void leave(std::vector<uint8_t> bytes, uint32_t tag, uint64_t now, const Deliver &deliver);
    void deliverNow(std::span<const uint8_t> bytes, uint32_t tag, const Deliver &deliver);
    void overtake(uint64_t now, const Deliver &deliver);
    bool full(size_t more) const;

    FaultSpec spec_;
    bool active_ = false;
    std::mt19937_64 rng_;
    FaultCounters counters_;
    std::deque<Held> reordered_; // in arrival order
    std::deque<Held> delayed_;   // in departure order
    uint64_t lastDue_ = 0;       // delay keeps the order of packets
    size_t heldBytes_ = 0;
    uint32_t tag_ = 0; // of the packet being delivered
};

// When a flapping link is down: `down` long at the start of each `every`
// period counted from the time the fault was set.
class FlapSchedule {
  public:
    void configure(uint64_t downNs, uint64_t everyNs, uint64_t now);
    void clear() { every_ = 0; }
    bool active() const { return every_ != 0; }
    bool down(uint64_t now) const;
    // The next time down() changes after `now`.
    uint64_t nextChange(uint64_t now) const;

  private:
    uint64_t down_ = 0, every_ = 0, start_ = 0;
};

// When a port's (or a cable end's) faults next need servicing after
// `now`: a held packet due, or the flap changing; UINT64_MAX for never.
inline uint64_t nextFaultEvent(const FaultInjector &in, const FaultInjector &out,
                               const FlapSchedule &flap, uint64_t now) {
    uint64_t next =
        std::min(in.nextRelease().value_or(UINT64_MAX), out.nextRelease().value_or(UINT64_MAX));
    return flap.active() ? std::min(next, flap.nextChange(now)) : next;
}

} // namespace pib::fabric
