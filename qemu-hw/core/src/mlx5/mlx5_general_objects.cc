// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_general_objects.hh"

#include <algorithm>
#include <cstdarg>
#include <string>

#include "mlx5_ifc.hh"
#include "state_tables.hh"
#include "trace.hh"

namespace pib::mlx5 {

// Named, not anonymous: the QEMU build compiles the core as one unit.
namespace gobj {
// op_param.create.log_obj_range: a member of a union, which the layout
// check (tools/pibctl/mlx5_layouts.py) does not read.
constexpr Field kLogRange = field(0x63, 5);
// An AH-to-QP mapping (av_qp_mapping in rdma-core's mlx5_ifc.h, after the
// header of create_av_qp_mapping_in and of query_av_qp_mapping_out): the
// QP, and of the path (ud_av) its SL, source GID index and remote GID.
constexpr Field kMappedQpn = field(0xe0, 32);
constexpr Field kMappedSl = field(0x164, 4);
constexpr Field kMappedSgidIndex = field(0x1e4, 8);
constexpr uint32_t kMappedRgidByte = 0x40;
constexpr uint32_t kMappingBytes = 0x50;
constexpr uint32_t kTag = stateTag("M5GO");
constexpr uint32_t kMappingsTag = stateTag("M5AM");
} // namespace gobj

const err::Condition *GeneralObjects::refuse(const err::Condition &why, const char *fmt,
                                             ...) const {
    va_list args;
    va_start(args, fmt);
    host_.vguestError(why, fmt, args);
    va_end(args);
    return &why;
}

std::optional<uint32_t> GeneralObjects::indexOf(uint32_t id) {
    const uint32_t mask = (1u << kLogQpnsPerRange) - 1;
    if (id < kFirstReservedQpn || (id & mask))
        return std::nullopt;
    return (id - kFirstReservedQpn) >> kLogQpnsPerRange;
}

const Referenced *GeneralObjects::find(std::span<const uint8_t> in, uint32_t *id) const {
    *id = static_cast<uint32_t>(get(in, kId));
    if (get(in, kType) == kAvQpMapping)
        return mappings_.find(*id);
    const std::optional<uint32_t> index = indexOf(*id);
    return get(in, kType) == kReservedQpn && index ? ranges_.find(*index) : nullptr;
}

std::optional<Owner> GeneralObjects::ownerOf(std::span<const uint8_t> in) const {
    uint32_t id = 0;
    const Referenced *object = find(in, &id);
    return object ? std::optional<Owner>(object->owner) : std::nullopt;
}

const err::Condition *GeneralObjects::create(std::span<const uint8_t> in, std::span<uint8_t> out) {
    const auto type = static_cast<uint16_t>(get(in, kType));
    if (type == kReservedQpn)
        return createRange(in, out);
    if (type == kAvQpMapping)
        return createMapping(in, out);
    return refuse(err::kMlx5GeneralObjectBad,
                  "CREATE_GENERAL_OBJECT of type 0x%x, which is not offered", type);
}

const err::Condition *GeneralObjects::createRange(std::span<const uint8_t> in,
                                                  std::span<uint8_t> out) {
    const uint64_t logRange = get(in, gobj::kLogRange);
    if (logRange != kLogQpnsPerRange)
        return refuse(err::kMlx5GeneralObjectBad,
                      "CREATE_GENERAL_OBJECT of 2^%u reserved QP numbers: ranges are 2^%u",
                      static_cast<unsigned>(logRange), kLogQpnsPerRange);
    auto range = std::make_unique<ReservedQpnRange>();
    range->owner = static_cast<Owner>(get(in, kUid));
    const Owner owner = range->owner;
    const std::optional<uint32_t> index = ranges_.insert(std::move(range));
    if (!index)
        return refuse(err::kMlx5CmdNoResources,
                      "CREATE_GENERAL_OBJECT: all %u ranges of reserved QP numbers are taken",
                      kMaxRanges);
    set(out, kId, firstQpn(*index));
    trace::mlx5_general_object(host_, "made", kReservedQpn, firstQpn(*index), owner);
    return nullptr;
}

// A mapping to a UD QP or a DCI (mlx5dv_map_ah_to_qp's "DC and UD QPs"),
// of a path through a GID the port has. The QP may be another context's,
// as pyverbs' test maps one process's AH to another context's DCI: the
// mapping names where a path's congestion state comes from and gives no
// reach into the QP.
const err::Condition *GeneralObjects::createMapping(std::span<const uint8_t> in,
                                                    std::span<uint8_t> out) {
    const auto owner = static_cast<Owner>(get(in, kUid));
    const auto qpn = static_cast<uint32_t>(get(in, gobj::kMappedQpn));
    const QueuePair *qp = objects_.findQp(qpn);
    const char *bad = in.size() < gobj::kMappingBytes ? "the input ends before the mapping"
                      : !qp                           ? "no such QP"
                      : qp->ctx.type != PIB_QPT_UD && qp->ctx.type != kQptDci
                          ? "the QP is neither UD nor a DCI"
                      : get(in, gobj::kMappedSgidIndex) >= PIB_GUID_TABLE_LEN
                          ? "src_addr_index beyond the GID table"
                          : nullptr;
    if (bad)
        return refuse(err::kMlx5GeneralObjectBad,
                      "CREATE_GENERAL_OBJECT of an AH-to-QP mapping to QP 0x%x: %s", qpn, bad);
    auto mapping = std::make_unique<AvQpMapping>();
    mapping->owner = owner;
    mapping->qpn = qpn;
    mapping->sl = static_cast<uint8_t>(get(in, gobj::kMappedSl));
    mapping->sgidIndex = static_cast<uint8_t>(get(in, gobj::kMappedSgidIndex));
    std::copy_n(in.data() + gobj::kMappedRgidByte, mapping->rgid.size(), mapping->rgid.begin());
    const std::optional<uint32_t> id = mappings_.insert(std::move(mapping));
    if (!id)
        return refuse(err::kMlx5CmdNoResources,
                      "CREATE_GENERAL_OBJECT: all %u AH-to-QP mappings exist", kMaxMappings);
    set(out, kId, *id);
    trace::mlx5_general_object(host_, "made", kAvQpMapping, *id, owner);
    return nullptr;
}

const err::Condition *GeneralObjects::check(const char *command,
                                            std::span<const uint8_t> in) const {
    const auto type = static_cast<unsigned>(get(in, kType));
    uint32_t id = 0;
    if (type != kReservedQpn && type != kAvQpMapping)
        return refuse(err::kMlx5GeneralObjectBad, "%s of type 0x%x, which is not offered", command,
                      type);
    if (!find(in, &id))
        return refuse(err::kMlx5CmdBadResource, "%s of %s 0x%x: there is none", command,
                      type == kReservedQpn ? "reserved QP numbers" : "AH-to-QP mapping", id);
    return nullptr;
}

// A range shows nothing but the header; a mapping, what it was made of.
const err::Condition *GeneralObjects::query(std::span<const uint8_t> in,
                                            std::span<uint8_t> out) const {
    if (const err::Condition *why = check("QUERY_GENERAL_OBJECT", in))
        return why;
    uint32_t id = 0;
    find(in, &id);
    const AvQpMapping *mapping = get(in, kType) == kAvQpMapping ? mappings_.find(id) : nullptr;
    if (!mapping || out.size() < gobj::kMappingBytes)
        return nullptr;
    set(out, kId, id);
    set(out, gobj::kMappedQpn, mapping->qpn);
    set(out, gobj::kMappedSl, mapping->sl);
    set(out, gobj::kMappedSgidIndex, mapping->sgidIndex);
    std::copy(mapping->rgid.begin(), mapping->rgid.end(), out.data() + gobj::kMappedRgidByte);
    return nullptr;
}

const err::Condition *GeneralObjects::destroy(std::span<const uint8_t> in) {
    if (const err::Condition *why = check("DESTROY_GENERAL_OBJECT", in))
        return why;
    uint32_t id = 0;
    const Owner owner = find(in, &id)->owner;
    const auto type = static_cast<uint16_t>(get(in, kType));
    if (type == kAvQpMapping)
        mappings_.erase(id);
    else
        ranges_.erase(*indexOf(id));
    trace::mlx5_general_object(host_, "ended", type, id, owner);
    return nullptr;
}

// Each range's owner under its index, then each mapping under its id.
void GeneralObjects::save(StateWriter &w) const {
    saveTable(w, gobj::kTag, ranges_, [&](const ReservedQpnRange &range) { w.u16(range.owner); });
    saveTable(w, gobj::kMappingsTag, mappings_, [&](const AvQpMapping &mapping) {
        w.u16(mapping.owner);
        w.u32(mapping.qpn);
        w.u8(mapping.sl);
        w.u8(mapping.sgidIndex);
        w.record(mapping.rgid);
    });
}

void GeneralObjects::load(StateReader &r) {
    reset();
    loadTable(r, gobj::kTag, "reserved QPN ranges", ranges_, 2, [&](uint32_t index) {
        auto range = std::make_unique<ReservedQpnRange>();
        range->owner = r.u16();
        if (r.ok() && !ranges_.insertAt(index, std::move(range)))
            r.fail("reserved QPN range " + std::to_string(index) +
                   ": its number is taken or beyond the table");
    });
    loadTable(r, gobj::kMappingsTag, "AH-to-QP mappings", mappings_, 2 + 4 + 1 + 1 + 4 + 16,
              [&](uint32_t id) {
                  auto mapping = std::make_unique<AvQpMapping>();
                  mapping->owner = r.u16();
                  mapping->qpn = r.u32();
                  mapping->sl = r.u8();
                  mapping->sgidIndex = r.u8();
                  r.record(mapping->rgid, "a mapping's remote GID");
                  if (r.ok() && (mapping->sl > 15 || mapping->sgidIndex >= PIB_GUID_TABLE_LEN))
                      r.fail("AH-to-QP mapping " + std::to_string(id) +
                             ": an SL or GID index out of range");
                  else if (r.ok() && !mappings_.insertAt(id, std::move(mapping)))
                      r.fail("AH-to-QP mapping " + std::to_string(id) +
                             ": its number is taken or beyond the table");
              });
}

} // namespace pib::mlx5
