// SPDX-License-Identifier: GPL-2.0-or-later
// The ConnectX DC targets (docs/mlx5.md §15): CREATE_DCT's context checked
// and made one of the core's QPs of type kQptDct, numbered among the QPs
// (a DCI's WQE names a DCT as a QP number); DRAIN_DCT closes its
// connections and raises DCT_DRAINED, which mlx5_core waits for before
// DESTROY_DCT; QUERY_DCT gives its context back.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <span>

#include "conditions.hh"
#include "data_path.hh"
#include "host.hh"
#include "mlx5_event_queues.hh"
#include "object_tables.hh"
#include "ports.hh"
#include "state_archive.hh"

namespace pib::mlx5 {

class DcTargets {
  public:
    static constexpr uint32_t kContextBytes = 64; // the dctc
    // A DCT's context at byte 0x10 of create_dct_in and query_dct_out.
    static constexpr uint32_t kContextByte = 0x10;

    DcTargets(const Host &host, ObjectTables &objects, const Ports &ports, DataPath &dataPath,
              EventQueues &eqs)
        : host_(host), objects_(objects), ports_(ports), dataPath_(dataPath), eqs_(eqs) {}

    // CREATE_DCT: `in` is create_dct_in.
    const err::Condition *create(std::span<const uint8_t> in, uint32_t &dctn);
    const err::Condition *drain(uint32_t dctn);
    // ARM_DCT_FOR_KEY_VIOLATION: the DCT's next request with another key
    // raises DCT_KEY_VIOLATION, once.
    const err::Condition *arm(uint32_t dctn);
    const err::Condition *destroy(uint32_t dctn);
    // QUERY_DCT: the context, its state and its key violations into
    // query_dct_out `out`.
    const err::Condition *query(uint32_t dctn, std::span<uint8_t> out) const;
    void reset() { contexts_.clear(); }

    // The DCTs in the device's state: each as the CREATE_DCT input that
    // makes it, then whether it was drained, its key violations and its
    // connections (DataPath::saveDcConnections). Saved after the QPs,
    // whose numbers they share.
    void save(StateWriter &w) const;
    void load(StateReader &r);

  private:
    using Context = std::array<uint8_t, kContextBytes>;
    const err::Condition *checkContext(std::span<const uint8_t> dctc) const;
    const err::Condition *checkOwners(std::span<const uint8_t> dctc, Owner caller) const;
    QueuePair *find(uint32_t dctn) const;
    const err::Condition *missing(const char *command, uint32_t dctn) const;
    void hold(const QueuePair &dct, int delta);

    const Host &host_;
    ObjectTables &objects_;
    const Ports &ports_;
    DataPath &dataPath_;
    EventQueues &eqs_;
    std::map<uint32_t, Context> contexts_; // each DCT's, as CREATE_DCT gave it
};

} // namespace pib::mlx5
