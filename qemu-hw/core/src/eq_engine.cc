// SPDX-License-Identifier: GPL-2.0-or-later
#include "eq_engine.hh"

#include <cinttypes>

#include "trace.hh"

namespace pib {

bool EqEngine::doorbell(uint32_t eqn, EqRing &ring, uint32_t vector, uint32_t consumer, bool arm) {
    const uint32_t mask = rules_.counterMask;
    // The consumer moves forward, never past what the device wrote.
    if (((consumer - ring.consumer) & mask) > waiting(ring) || (consumer & ~mask)) {
        host_.guestError(rules_.doorbell, "EQ %u: consumer counter %u outside [%u, %u]", eqn,
                         consumer, ring.consumer & mask, ring.producer & mask);
        return false;
    }
    ring.consumer = consumer;
    if (!arm)
        return true;
    ring.armed = true;
    if (waiting(ring) != 0)
        signal(ring, vector); // EQEs are waiting: the interrupt comes at once
    return true;
}

bool EqEngine::hasRoom(uint32_t eqn, EqRing &ring, uint32_t logSize) {
    if (!ring.stopped && waiting(ring) < (uint32_t{1} << logSize)) {
        ring.overrun = false;
        return true;
    }
    if (!ring.overrun && ring.stopped)
        trace::inject_overrun(host_, "EQ", eqn);
    else if (!ring.overrun)
        host_.guestError(rules_.overrun, "EQ %u is full: events are lost", eqn);
    ring.overrun = true;
    return false;
}

void EqEngine::write(uint32_t eqn, EqRing &ring, uint32_t vector, std::optional<uint64_t> address,
                     std::span<const uint8_t> eqe, size_t ownerByte, const EqeAbout &about) {
    if (!address || !host_.dmaWriteOwnerLast(*address, eqe, ownerByte)) {
        host_.guestError(rules_.dma, "EQ %u: EQE %u at 0x%" PRIx64 " is not writable", eqn,
                         ring.producer, address.value_or(0));
        return;
    }
    trace::eqe_written(host_, eqn, ring.producer, about.type, about.subtype, about.number);
    ++ring.producer;
    if (ring.armed)
        signal(ring, vector);
}

void EqEngine::signal(EqRing &ring, uint32_t vector) {
    ring.armed = false;
    host_.msixNotify(vector);
}

} // namespace pib
