// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_general_objects.hh"

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
constexpr uint32_t kTag = stateTag("M5GO");
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

const ReservedQpnRange *GeneralObjects::find(std::span<const uint8_t> in, uint32_t *id) const {
    *id = static_cast<uint32_t>(get(in, kId));
    const std::optional<uint32_t> index = indexOf(*id);
    return get(in, kType) == kReservedQpn && index ? ranges_.find(*index) : nullptr;
}

std::optional<Owner> GeneralObjects::ownerOf(std::span<const uint8_t> in) const {
    uint32_t id = 0;
    const ReservedQpnRange *range = find(in, &id);
    return range ? std::optional<Owner>(range->owner) : std::nullopt;
}

const err::Condition *GeneralObjects::create(std::span<const uint8_t> in, std::span<uint8_t> out) {
    const auto type = static_cast<uint16_t>(get(in, kType));
    const uint64_t logRange = get(in, gobj::kLogRange);
    if (type != kReservedQpn)
        return refuse(err::kMlx5GeneralObjectBad,
                      "CREATE_GENERAL_OBJECT of type 0x%x, which is not offered", type);
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
    trace::mlx5_general_object(host_, "made", type, firstQpn(*index), owner);
    return nullptr;
}

const err::Condition *GeneralObjects::check(const char *command,
                                            std::span<const uint8_t> in) const {
    const auto type = static_cast<unsigned>(get(in, kType));
    uint32_t id = 0;
    if (type != kReservedQpn)
        return refuse(err::kMlx5GeneralObjectBad, "%s of type 0x%x, which is not offered", command,
                      type);
    if (!find(in, &id))
        return refuse(err::kMlx5CmdBadResource, "%s of reserved QP numbers 0x%x: no such range",
                      command, id);
    return nullptr;
}

const err::Condition *GeneralObjects::destroy(std::span<const uint8_t> in) {
    if (const err::Condition *why = check("DESTROY_GENERAL_OBJECT", in))
        return why;
    uint32_t id = 0;
    const Owner owner = find(in, &id)->owner;
    ranges_.erase(*indexOf(id));
    trace::mlx5_general_object(host_, "ended", kReservedQpn, id, owner);
    return nullptr;
}

// Each range's owner under its index; the type is the only one there is.
void GeneralObjects::save(StateWriter &w) const {
    saveTable(w, gobj::kTag, ranges_, [&](const ReservedQpnRange &range) { w.u16(range.owner); });
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
}

} // namespace pib::mlx5
