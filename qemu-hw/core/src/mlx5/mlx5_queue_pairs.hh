// SPDX-License-Identifier: GPL-2.0-or-later
// The ConnectX QPs (docs/mlx5.md §10): CREATE_QP's context checked and
// made one of the core's QPs, the state-change commands turned into the
// core's attributes and transitions (qp_state.hh, qp_lifecycle.hh),
// QUERY_QP, DESTROY_QP, and the send doorbell of a UAR's blue-flame
// registers. RC, UC, UD, QP0 and QP1, with an RQ, on an SRQ or with no
// receive side.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "conditions.hh"
#include "data_path.hh"
#include "host.hh"
#include "mlx5_uars.hh"
#include "mlx5_wqe_reader.hh"
#include "object_tables.hh"
#include "ports.hh"
#include "qp_lifecycle.hh"
#include "state_archive.hh"

namespace pib::mlx5 {

class QueuePairs {
  public:
    // A UAR page's blue-flame registers: four of 512 bytes from 0x800,
    // each in two halves the driver alternates between.
    static constexpr uint32_t kFirstBlueFlame = 0x800;
    static constexpr uint32_t kBlueFlameHalf = 0x100;
    // Where a doorbell-less SQ's doorbell is written (§10.3).
    static constexpr uint32_t kDoorbellLessSend = 0x600;

    QueuePairs(const Host &host, ObjectTables &objects, Ports &ports, DataPath &dataPath,
               const Uars &uars)
        : host_(host), objects_(objects), ports_(ports), dataPath_(dataPath), uars_(uars),
          wqes_(host, objects.mtt, kMaxInlineData) {
        dataPath_.useWqes(wqes_);
    }

    // CREATE_QP: `in` is create_qp_in with its page list.
    const err::Condition *create(std::span<const uint8_t> in, uint32_t &qpn);
    const err::Condition *destroy(uint32_t qpn);
    // One of the state-change commands (RST2INIT_QP to 2RST_QP), whose
    // input `in` names the QP.
    const err::Condition *modify(uint16_t opcode, std::span<const uint8_t> in);
    // QUERY_QP: the context into query_qp_out `out`.
    // (`addresses`: the doorbell record's, which only the kernel sees: a
    // process's is a guest physical address.)
    const err::Condition *query(uint32_t qpn, std::span<uint8_t> out, bool addresses) const;
    // A write of 8 bytes at `offset` of UAR page `uar` in its blue-flame
    // registers: at the start of a half, the first 8 bytes of a send WQE's
    // control segment, which ring its QP's SQ; elsewhere, the rest of a
    // WQE the driver copies there too (it is read from memory instead).
    void blueFlame(uint32_t uar, uint32_t offset, uint64_t value);
    void doorbellLessSend(uint32_t uar, uint64_t value);
    // ATTACH_TO_MCG (`attach`) or DETACH_FROM_MCG: a UD QP joins or
    // leaves the multicast group whose GID `in` names, on its port. The
    // device is not told the group's LID: a group is known by its GID.
    const err::Condition *attachMulticast(bool attach, std::span<const uint8_t> in);

    // The QPs in the device's state (mlx5_state_queues.cc): each as the
    // CREATE_QP input that makes it, then its counter set, attributes and
    // transport; QP0 and QP1 in a section of their own.
    void save(StateWriter &w) const;
    void load(StateReader &r);

  private:
    QueuePair *ringable(uint32_t uar, uint32_t offset, uint32_t qpn, bool doorbellLess);
    static constexpr uint32_t kMaxInlineData = 1024 - 64; // one WQE's 16 blocks, less its headers

    std::vector<uint8_t> createInput(const QueuePair &qp) const;
    void saveQp(StateWriter &w, const QueuePair &qp) const;
    void loadQp(StateReader &r, uint32_t qpn);
    std::string attachLoaded(const SavedAttachment &a);
    const err::Condition *checkContext(std::span<const uint8_t> in) const;
    const err::Condition *checkOwners(std::span<const uint8_t> in) const;
    const err::Condition *refuse(const err::Condition &why, const char *command, uint32_t qpn,
                                 const char *what) const;
    std::optional<uint8_t> freePort(uint8_t type) const;
    void hold(const QueuePair &qp, int delta);
    // The counter set `opcode` binds `qp` to (docs/mlx5.md §4.6): the
    // context's at RST2INIT, and at RTS2RTS when opt_param_mask names it;
    // otherwise the one it has.
    uint32_t counterSetAfter(uint16_t opcode, const QueuePair &qp,
                             std::span<const uint8_t> in) const;
    void bindCounterSet(QueuePair &qp, uint32_t set);

    const Host &host_;
    ObjectTables &objects_;
    Ports &ports_;
    DataPath &dataPath_;
    const Uars &uars_;
    WqeReader wqes_;
};

} // namespace pib::mlx5
