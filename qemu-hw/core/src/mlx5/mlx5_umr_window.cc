// SPDX-License-Identifier: GPL-2.0-or-later
// The UMR WQEs of memory windows (docs/mlx5.md §10.5), as libmlx5's
// set_bind_wr writes them from a process's QP: a bind (ibv_bind_mw of a
// type 1 window, IBV_WR_BIND_MW or ibv_wr_bind_mw of a type 2), a type 1
// unbind (a bind of length 0) and a type 2 LOCAL_INV, as the core's
// BIND_MW and LOCAL_INV. A window is a KLM key to the hardware: a bind
// lays one KLM entry over the region, the window's range.
#include "mlx5_ifc.hh"
#include "mlx5_umr.hh"
#include "mlx5_umr_segments.hh"

namespace pib::mlx5::umr {

namespace window {

using namespace segments;

constexpr uint64_t kBound = mask::kFree | mask::kKey | mask::kLength | mask::kStartAddress;
constexpr uint64_t kRemoteRights = 0x7u << 19; // rr, rw, a (MLX5_MKEY_MASK_*)
constexpr uint64_t kLocalWrite = 1u << 18;
constexpr uint8_t kFlags =
    control::kInline | control::kOffsetEnable | control::kCheckFree | control::kCheckQpn;

// The window's key once the UMR is done: its index, the segment's variant.
uint32_t newKey(uint32_t key, const uint8_t *k) {
    return (key & ~0xffu) | k[mkey::kVariant];
}

// A freeing UMR: a type 2 window's LOCAL_INV (it checks the QP, or sets
// it), else a type 1 unbind.
const char *freeing(uint32_t key, const uint8_t *c, const uint8_t *k, Wqe &out) {
    const uint64_t fields = readBe64(c + control::kMkeyMask);
    if (!(fields & mask::kFree) || fields & ~(mask::kFree | mask::kKey | mask::kQpn))
        return "a free window's mask setting more than free, key and QP";
    if (c[control::kFlags] & control::kCheckQpn || fields & mask::kQpn) {
        out.ctrl.opcode = PIB_WR_LOCAL_INV;
        return nullptr;
    }
    out.ctrl.opcode = PIB_WR_BIND_MW;
    out.bind = {};
    out.bind.mw_key = key;
    out.bind.new_rkey = newKey(key, k);
    return nullptr;
}

// A bind: one KLM entry, the window's range of the region (no zero-based
// windows: the entry's address is the window's start).
const char *binding(uint32_t qpn, uint32_t key, std::span<const uint8_t> wqe, size_t used,
                    Wqe &out) {
    const uint8_t *c = wqe.data() + kControl;
    const uint8_t *k = wqe.data() + kMkey;
    const uint64_t fields = readBe64(c + control::kMkeyMask);
    if ((fields & kBound) != kBound ||
        fields & ~(kBound | kLocalWrite | kRemoteRights | mask::kQpn))
        return "a bind's mask without free, key, length and start, or with more than rights "
               "and QP";
    if (!(c[control::kFlags] & control::kInline) || readBe16(c + control::kXltOctowords) == 0 ||
        kTranslations + kDataSegment > used)
        return "a bind without its KLM entry inline";
    const uint8_t *klm = wqe.data() + kTranslations;
    const uint64_t start = readBe64(k + mkey::kStartAddress), length = readBe64(k + mkey::kLength);
    if (readBe32(klm) != length || readBe64(klm + 8) != start)
        return "a KLM entry that is not the window's range (a zero-based window)";
    if (fields & mask::kQpn && readBe32(k + 4) >> 8 != qpn)
        return "a type 2 bind naming another QP";
    out.ctrl.opcode = PIB_WR_BIND_MW;
    out.bind.mw_key = key;
    out.bind.new_rkey = newKey(key, k);
    out.bind.mr_key = readBe32(klm + 4);
    out.bind.addr = start;
    out.bind.length = length;
    // Remote rights only: a window is reached by its R_Key (libmlx5 passes
    // local write on from the verbs' flags).
    out.bind.access = accessOf(k[mkey::kFlags]) & ~PIB_ACCESS_LOCAL_WRITE;
    return nullptr;
}

} // namespace window

uint8_t decodeWindow(const Host &host, uint32_t qpn, uint32_t index, std::span<const uint8_t> wqe,
                     size_t used, Wqe &out) {
    using namespace segments;
    const uint8_t *c = wqe.data() + kControl;
    const uint8_t *k = wqe.data() + kMkey;
    const uint32_t key = out.ctrl.imm;
    const char *why =
        c[control::kFlags] & ~window::kFlags ? "control flags the device does not know for a window"
        : k[mkey::kStatus] & mkey::kStatusFree ? window::freeing(key, c, k, out)
                                               : window::binding(qpn, key, wqe, used, out);
    if (why) {
        host.guestError(err::kWqeBindMw, "QP %u UMR WQE %u of window 0x%x: %s", qpn, index, key,
                        why);
        return PIB_WC_MW_BIND_ERR;
    }
    return PIB_WC_SUCCESS;
}

} // namespace pib::mlx5::umr
