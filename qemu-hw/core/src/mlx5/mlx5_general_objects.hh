// SPDX-License-Identifier: GPL-2.0-or-later
// ConnectX general objects (docs/mlx5.md §16.3): the objects DEVX makes
// with CREATE_GENERAL_OBJECT, named by type and id. The device offers two
// types. A range of reserved QP numbers (RESERVED_QPN): numbers no QP will
// ever have, which a process hands to its peers as its own names for
// connections (rdma_cm's qp_num for a DCT behind it). The ranges are
// numbered apart from every QP, so reserving one takes nothing from the
// QPs' table, and a packet to a reserved number finds no QP. And an AH's
// path mapped to a UD QP or a DCI (AV_QP_MAPPING, libmlx5's
// mlx5dv_map_ah_to_qp): a hint for per-path congestion control, which
// the device does not have. A mapping is kept and shown as the hardware
// keeps one, and changes nothing the device does, as the interface allows
// a hint to.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>

#include "conditions.hh"
#include "host.hh"
#include "mlx5_ifc.hh"
#include "object_table.hh"
#include "object_tables.hh"
#include "objects.hh"
#include "state_archive.hh"

namespace pib::mlx5 {

struct ReservedQpnRange : Referenced {};

struct AvQpMapping : Referenced {
    uint32_t qpn = 0; // the QP the path is mapped to, when it was made
    uint8_t sl = 0;
    uint8_t sgidIndex = 0;
    std::array<uint8_t, 16> rgid{};
};

class GeneralObjects {
  public:
    static constexpr uint16_t kReservedQpn = 0x2c; // ifc: MLX5_OBJ_TYPE_RESERVED_QPN
    // rdma-core's mlx5_ifc.h (Linux's has no such type).
    static constexpr uint16_t kAvQpMapping = 0x3a;
    // The general_obj_types bits of the types offered.
    static constexpr uint64_t kTypesOffered = uint64_t{1} << kReservedQpn | uint64_t{1}
                                                                                << kAvQpMapping;
    static constexpr uint32_t kMaxMappings = 8192;
    // Each range is 2^kLogQpnsPerRange numbers (cmd_hca_cap_2's
    // log_reserved_qpn_granularity), the ranges one after another from
    // kFirstReservedQpn: beyond the QPs' numbers, within the 24 bits a
    // packet and a CM message carry.
    static constexpr uint32_t kLogQpnsPerRange = 3;
    static constexpr uint32_t kMaxRanges = 8192;
    static constexpr uint32_t kFirstReservedQpn = 0x400000;
    // The commands name an object by type and id (general_obj_in_cmd_hdr);
    // create answers the id at the same place (general_obj_out_cmd_hdr).
    static constexpr Field kType = field(0x30, 16); // ifc: general_obj_in_cmd_hdr.obj_type
    static constexpr Field kId = field(0x40, 32);   // ifc: general_obj_in_cmd_hdr.obj_id

    GeneralObjects(const Host &host, const ObjectTables &objects)
        : host_(host), objects_(objects) {}

    // CREATE_GENERAL_OBJECT: `in` is its input; the object's id into `out`.
    const err::Condition *create(std::span<const uint8_t> in, std::span<uint8_t> out);
    // DESTROY_GENERAL_OBJECT and QUERY_GENERAL_OBJECT of the object input
    // `in` names; check() that there is one, for any command (`command`
    // names it).
    const err::Condition *destroy(std::span<const uint8_t> in);
    const err::Condition *query(std::span<const uint8_t> in, std::span<uint8_t> out) const;
    const err::Condition *check(const char *command, std::span<const uint8_t> in) const;
    // The owner of the object input `in` names; nullopt if there is none.
    std::optional<Owner> ownerOf(std::span<const uint8_t> in) const;
    template <class F> void forEach(F &&f) const {
        ranges_.forEach([&](uint32_t index, const ReservedQpnRange &range) {
            f("reserved QPN range", firstQpn(index), range.owner);
        });
        mappings_.forEach([&](uint32_t id, const AvQpMapping &mapping) {
            f("AH-to-QP mapping", id, mapping.owner);
        });
    }
    void reset() {
        ranges_.clear();
        mappings_.clear();
    }
    void save(StateWriter &w) const;
    void load(StateReader &r);

  private:
    static uint32_t firstQpn(uint32_t index) {
        return kFirstReservedQpn + (index << kLogQpnsPerRange);
    }
    // The range `id` is the first number of; nullopt for any other id.
    static std::optional<uint32_t> indexOf(uint32_t id);
    // The object input `in` names (of a type offered), and its id; nullptr
    // if there is none.
    const Referenced *find(std::span<const uint8_t> in, uint32_t *id) const;
    const err::Condition *createRange(std::span<const uint8_t> in, std::span<uint8_t> out);
    const err::Condition *createMapping(std::span<const uint8_t> in, std::span<uint8_t> out);
    const err::Condition *refuse(const err::Condition &why, const char *fmt, ...) const
        __attribute__((format(printf, 3, 4)));

    const Host &host_;
    const ObjectTables &objects_;
    ObjectTable<ReservedQpnRange> ranges_{kMaxRanges};
    ObjectTable<AvQpMapping> mappings_{kMaxMappings, 1};
};

} // namespace pib::mlx5
