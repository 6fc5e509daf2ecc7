// SPDX-License-Identifier: GPL-2.0-or-later
// An event queue's ring, run alike for both personalities (docs/prm.md
// §5, docs/mlx5.md §7): the EQEs written and consumed, the arm that makes
// the next EQE signal the EQ's MSI-X vector once, a full ring's overrun
// and the host's stop (injection.hh), under one set of traces. Where a
// slot is, and how an EQE and its owner bit look, are the personality's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "conditions.hh"
#include "eq_ring.hh"
#include "host.hh"

namespace pib {

// What an EQE is about, as its trace names it.
struct EqeAbout {
    unsigned type, subtype;
    unsigned number; // the CQ, the command's token, or the async event's object
};

class EqEngine {
  public:
    // What a personality's EQs refuse with, and the bits of its driver's
    // consumer counter.
    struct Rules {
        const err::Condition &overrun;
        const err::Condition &dma;
        const err::Condition &doorbell;
        uint32_t counterMask;
    };
    EqEngine(const Host &host, const Rules &rules) : host_(host), rules_(rules) {}

    // The driver consumed the EQEs up to `consumer` and, with `arm`, asks
    // for the next EQE's interrupt, at once when EQEs wait. A counter that
    // moves back or past the producer is refused (false, a guest error).
    bool doorbell(uint32_t eqn, EqRing &ring, uint32_t vector, uint32_t consumer, bool arm);
    // Whether EQ `eqn` of 2^`logSize` EQEs takes the next one: not when
    // the host stopped it or it is full. Its event is lost then, and the
    // EQ overruns (reported once).
    bool hasRoom(uint32_t eqn, EqRing &ring, uint32_t logSize);
    // The EQE the personality encoded for slot `ring.producer` goes to
    // `address` (nullopt: the slot is not in the ring's pages), its owner
    // byte last; then it is traced, and an armed EQ signals `vector`.
    void write(uint32_t eqn, EqRing &ring, uint32_t vector, std::optional<uint64_t> address,
               std::span<const uint8_t> eqe, size_t ownerByte, const EqeAbout &about);
    // EQEs written and not yet consumed.
    uint32_t waiting(const EqRing &ring) const {
        return (ring.producer - ring.consumer) & rules_.counterMask;
    }

  private:
    void signal(EqRing &ring, uint32_t vector);

    const Host &host_;
    const Rules rules_;
};

} // namespace pib
