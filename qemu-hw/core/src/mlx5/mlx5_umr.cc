// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_umr.hh"

#include "limits.hh"
#include "mlx5_ifc.hh"
#include "mlx5_umr_segments.hh"

namespace pib::mlx5::umr {

namespace {

using namespace segments;

// The pages [iova, iova + length) spans at 2^shift bytes a page; 0 when
// the core's checks refuse the registration anyway.
uint64_t pagesSpanned(uint64_t iova, uint64_t length, unsigned shift) {
    if (shift < limits::kMinLogPageSize || shift > limits::kMaxLogPageSize || length == 0 ||
        iova + length < iova)
        return 0;
    return ((iova + length - 1) >> shift) - (iova >> shift) + 1;
}

// The translation entries of a registration: inline after the key's
// segment, taken now; or `count` entries where its data segment points,
// which the requester reads through the segment's L_Key (a key of the
// QP's PD with local read, as a ConnectX reads them: never a bare guest
// address), so that out.sges holds that one segment.
const char *readTranslations(std::span<const uint8_t> wqe, size_t used, bool inlined,
                             uint32_t count, Wqe &out) {
    const size_t bytes = size_t{count} * sizeof(uint64_t);
    if (!inlined) {
        if (kTranslations + kDataSegment > used)
            return "no data segment for the translation entries";
        const uint8_t *data = wqe.data() + kTranslations;
        if (readBe32(data) < bytes)
            return "a data segment shorter than the range's translation entries";
        out.sges.push_back({static_cast<uint32_t>(bytes), readBe32(data + 4), readBe64(data + 8)});
        return nullptr;
    }
    if (kTranslations + bytes > used)
        return "fewer inline translation entries than the range's pages";
    translationEntries(wqe.subspan(kTranslations, bytes), out.pages);
    return nullptr;
}

// The general UMR's segments as a KeyUpdate; null, or why not.
const char *updateOf(std::span<const uint8_t> wqe, KeyUpdate &u) {
    const uint8_t *c = wqe.data() + kControl;
    const uint8_t *k = wqe.data() + kMkey;
    const uint8_t flags = c[control::kFlags];
    const uint64_t fields = readBe64(c + control::kMkeyMask);
    const uint64_t range = fields & mask::kRange, rights = fields & mask::kRights;
    const unsigned check = (flags & control::kCheckMask) >> control::kCheckShift;
    if (flags & ~control::kFlagsKnown || check == 3)
        return "control flags the device does not know";
    if (fields & ~mask::kUpdatable)
        return "a mask setting fields the device does not update";
    if ((range && range != mask::kRange) || (rights && rights != mask::kRights))
        return "a mask setting part of the range or part of the access rights";
    u.before = check == 1   ? KeyUpdate::Before::kFree
               : check == 2 ? KeyUpdate::Before::kInUse
                            : KeyUpdate::Before::kAnything;
    u.setsRange = range != 0;
    u.setsAccess = rights != 0;
    u.setsAtomic = fields & mask::kAtomic;
    u.setsPd = fields & mask::kPd;
    u.setsVariant = fields & mask::kKey;
    u.setsFree = fields & mask::kFree;
    u.iova = readBe64(k + mkey::kStartAddress);
    u.length = readBe64(k + mkey::kLength);
    u.length64 = k[mkey::kLength64] & mkey::kLength64Bit;
    u.logPageSize = k[mkey::kLogPageSize] & mkey::kLogPageSizeMask;
    u.access = accessOf(k[mkey::kFlags]);
    u.pdn = readBe32(k + mkey::kPd) & 0xffffff;
    u.variant = k[mkey::kVariant];
    u.free = k[mkey::kStatus] & mkey::kStatusFree;
    if (flags & control::kOffsetEnable)
        u.firstEntry = (uint64_t{readBe32(c + control::kXltOffsetHigh)} << 16 |
                        readBe16(c + control::kXltOffset)) *
                       2;
    return nullptr;
}

} // namespace

void translationEntries(std::span<const uint8_t> bytes, std::vector<uint64_t> &pages) {
    pages.resize(bytes.size() / sizeof(uint64_t));
    for (size_t i = 0; i < pages.size(); ++i)
        pages[i] = readBe64(bytes.data() + 8 * i); // with their enables: present bits
}

uint8_t decodeUpdate(const Host &host, uint32_t qpn, uint32_t index, std::span<const uint8_t> wqe,
                     size_t used, Wqe &out) {
    const auto bad = [&](const char *what) {
        host.guestError(err::kWqeBad, "QP %u UMR WQE %u: %s", qpn, index, what);
        return PIB_WC_LOC_QP_OP_ERR;
    };
    if (used < kTranslations)
        return bad("shorter than its UMR and key segments");
    KeyUpdate u;
    if (const char *why = updateOf(wqe, u))
        return bad(why);
    const uint8_t *c = wqe.data() + kControl;
    const uint32_t entries = uint32_t{readBe16(c + control::kXltOctowords)} * 2;
    if (entries)
        if (const char *why =
                readTranslations(wqe, used, c[control::kFlags] & control::kInline, entries, out))
            return bad(why);
    out.ctrl.opcode = PIB_WR_REG_MR;
    out.update = u;
    return PIB_WC_SUCCESS;
}

uint8_t decode(const Host &host, uint32_t qpn, uint32_t index, std::span<const uint8_t> wqe,
               size_t used, bool fastRegEnabled, Wqe &out) {
    const auto bad = [&](const err::Condition &why, const char *what, uint8_t status) {
        host.guestError(why, "QP %u UMR WQE %u: %s", qpn, index, what);
        return status;
    };
    if (used < kTranslations)
        return bad(err::kWqeBad, "shorter than its UMR and key segments", PIB_WC_LOC_QP_OP_ERR);
    const uint8_t *c = wqe.data() + kControl;
    const uint8_t *k = wqe.data() + kMkey;
    const uint64_t fields = readBe64(c + control::kMkeyMask);
    const uint32_t key = out.ctrl.imm;
    if (PIB_KEY_INDEX(key) > limits::kMaxMr) // a window's (the core numbers them after the keys)
        return decodeWindow(host, qpn, index, wqe, used, out);
    const bool invalidation = fields == mask::kFree && k[mkey::kStatus] & mkey::kStatusFree;
    if (!invalidation && !(fields & mask::kPageSize)) // no pages: an indirect key's
        return decodeIndirect(host, qpn, index, wqe, used, out);
    if (!fastRegEnabled)
        return bad(err::kWqeBad,
                   "a fast registration or invalidation on a QP without fast registration "
                   "enabled (fre)",
                   PIB_WC_LOC_QP_OP_ERR);
    if (invalidation) {
        out.ctrl.opcode = PIB_WR_LOCAL_INV;
        return PIB_WC_SUCCESS;
    }
    if ((fields & mask::kRegistration) != mask::kRegistration || k[mkey::kStatus])
        return bad(err::kWqeBad, "a UMR other than a fast registration or an invalidation",
                   PIB_WC_LOC_QP_OP_ERR);
    if ((k[mkey::kFlags] & mkey::kAccessModeMask) == mkey::kAccessModeKlm)
        return decodeKernelIndirect(host, qpn, index, wqe, used, out);
    if ((k[mkey::kFlags] & mkey::kAccessModeMask) != mkey::kAccessModeMtt)
        return bad(err::kWqeBad, "an access mode other than MTT", PIB_WC_LOC_QP_OP_ERR);
    if ((key & 0xff) != k[mkey::kVariant])
        return bad(err::kWqeBad, "the key segment's variant is not the key's",
                   PIB_WC_LOC_QP_OP_ERR);
    pib_wqe_reg_mr &reg = out.reg;
    reg.key = key;
    reg.access = accessOf(k[mkey::kFlags]);
    reg.iova = readBe64(k + mkey::kStartAddress);
    reg.length = readBe64(k + mkey::kLength);
    reg.log_page_size = k[mkey::kLogPageSize];
    const uint64_t pages = pagesSpanned(reg.iova, reg.length, reg.log_page_size);
    const uint64_t given = uint64_t{readBe16(c + control::kXltOctowords)} * 2;
    if (pages == 0 || pages > given || pages > limits::kMaxFastRegPages)
        return bad(err::kWqeFastReg, "a range of no pages, or of more than its entries",
                   PIB_WC_LOC_PROT_ERR);
    reg.page_count = static_cast<uint32_t>(pages);
    out.ctrl.opcode = PIB_WR_REG_MR;
    if (fields & mask::kRemoteInvalidate) // IB_WR_REG_MR's mask: a peer may free it
        out.remoteInvalidate = (k[mkey::kRemoteInvalidate] & mkey::kRemoteInvalidateBit) != 0;
    if (const char *why =
            readTranslations(wqe, used, c[control::kFlags] & control::kInline, reg.page_count, out))
        return bad(err::kWqeFastReg, why, PIB_WC_LOC_PROT_ERR);
    return PIB_WC_SUCCESS;
}

} // namespace pib::mlx5::umr
