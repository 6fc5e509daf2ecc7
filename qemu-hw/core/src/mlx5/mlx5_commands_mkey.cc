// SPDX-License-Identifier: GPL-2.0-or-later
// The ConnectX memory key commands (docs/mlx5.md §4.5): CREATE_MKEY makes
// a memory region in the core's tables (MemoryRegions, the same the pib
// personality's CREATE_MR makes), whose key is the mkey: a physical one
// (PA), or a free one that UMR WQEs map and invalidate (MTT, free and
// UMR-enabled: the core's fast-registration regions); DESTROY_MKEY ends
// it.
#include <algorithm>
#include <cinttypes>
#include <vector>

#include "limits.hh"

#include "mlx5_commands.hh"
#include "mlx5_ifc.hh"
#include "mlx5_page_list.hh"

namespace pib::mlx5 {

namespace {

// create_mkey_in: the mkey context (mkc) from byte 0x10 (mlx5_ifc.h).
// ifc fields: create_mkey_in.memory_key_mkey_entry
namespace mkc {
constexpr Field kFree = field(0x81, 1);
constexpr Field kAccessMode42 = field(0x83, 3); // ifc: access_mode_4_2
constexpr Field kUmrEnable = field(0x90, 1);    // ifc: umr_en
constexpr Field kAtomic = field(0x91, 1);       // ifc: a
constexpr Field kRemoteWrite = field(0x92, 1);  // ifc: rw
constexpr Field kRemoteRead = field(0x93, 1);   // ifc: rr
constexpr Field kLocalWrite = field(0x94, 1);   // ifc: lw
constexpr Field kLocalRead = field(0x95, 1);    // ifc: lr
constexpr Field kAccessMode10 = field(0x96, 2); // ifc: access_mode_1_0
constexpr Field kQpn = field(0xa0, 24);
constexpr Field kVariant = field(0xb8, 8); // ifc: mkey_7_0
constexpr Field kLength64 = field(0xe0, 1);
constexpr Field kBsfEnable = field(0xe1, 1);        // ifc: bsf_en
constexpr Field kRemoteInvalidate = field(0xe7, 1); // ifc: en_rinval
constexpr Field kPd = field(0xe8, 24);
constexpr Field kStartAddress = field(0x100, 64); // ifc: start_addr
constexpr Field kLength = field(0x140, 64);       // ifc: len
constexpr Field kBsfOctowords = field(0x180, 32); // ifc: bsf_octword_size
// In 16-byte octowords: two MTT entries each.
constexpr Field kTranslationOctowords = field(0x220, 32); // ifc: translations_octword_size
constexpr Field kLogPageSize = field(0x25a, 6);
} // namespace mkc
// create_mkey_in's UMEM fields, where the PRM (and UCX's and DPDK's
// copies of its layouts) has them; Linux's mlx5_ifc.h keeps these bits
// reserved, so they are outside the checked fields below.
constexpr Field kUmemId = field(0x320, 32);     // mkey_umem_id
constexpr Field kUmemOffset = field(0x340, 64); // mkey_umem_offset
constexpr uint64_t kUmemGranule = uint64_t{1} << PageList::kAdapterPageShift;
// The mkc's crypto_en, where rdma-core's mlx5_ifc.h has it (reserved in
// Linux's): a crypto key, which the device does not offer.
constexpr Field kCryptoEnable = field(0x80 + 0x1e3, 2);
// ifc fields: create_mkey_in
constexpr Field kActualOctowords = field(0x300, 32); // ifc: translations_octword_actual_size
constexpr size_t kEntriesByte = 0x110;               // klm_pas_mtt
constexpr Field kUmemValid = field(0x61, 1);         // ifc: mkey_umem_valid (DEVX memory)
constexpr Field kPgAccess = field(0x60, 1);          // ifc: pg_access (entries with present bits)
// Where destroy_mkey_in has it too.
constexpr Field kMkeyIndex = field(0x48, 24); // ifc: create_mkey_out.mkey_index

constexpr uint32_t kAccessModePa = 0;  // the address is the guest physical one
constexpr uint32_t kAccessModeMtt = 1; // pages through translation entries
constexpr uint32_t kAccessModeKlm = 2; // pieces of other keys (indirect_key.hh)
constexpr uint32_t kAccessModeKsm = 3; // fixed spans of other keys (MemoryRegion::ksm)
constexpr uint32_t kNoQp = 0xffffff;   // qpn of a key no QP owns

// IBA access rights of a context's bits; local read is always there.
uint32_t accessOf(std::span<const uint8_t> in) {
    return (get(in, mkc::kLocalWrite) ? PIB_ACCESS_LOCAL_WRITE : 0) |
           (get(in, mkc::kRemoteWrite) ? PIB_ACCESS_REMOTE_WRITE : 0) |
           (get(in, mkc::kRemoteRead) ? PIB_ACCESS_REMOTE_READ : 0) |
           (get(in, mkc::kAtomic) ? PIB_ACCESS_REMOTE_ATOMIC : 0);
}

} // namespace

// What the device does not do is refused before anything is made: keys a
// QP owns, on-demand paging, signature and crypto keys, KSM and other
// access modes, a free key UMRs cannot map, UMR on physical keys, and an
// indirect key UMRs do not lay out.
const err::Condition *Commands::createMkey(const Request &r) {
    if (get(r.in, kUmemValid))
        return createUmemMkey(r);
    const uint64_t mode = get(r.in, mkc::kAccessMode42) << 2 | get(r.in, mkc::kAccessMode10);
    const bool free = get(r.in, mkc::kFree), umr = get(r.in, mkc::kUmrEnable);
    const char *unsupported =
        get(r.in, mkc::kQpn) != kNoQp ? "owned by a QP"
        : get(r.in, mkc::kBsfEnable) || get(r.in, mkc::kBsfOctowords) || get(r.in, kCryptoEnable)
            ? "for signatures or crypto (docs/mlx5.md §11)"
        : mode > kAccessModeKsm
            ? "of an access mode other than PA, MTT, KLM and KSM (docs/mlx5.md §11)"
        : mode == kAccessModePa && (free || umr) ? "free or UMR-enabled with access mode PA"
        : mode >= kAccessModeKlm && !(free && umr)
            ? "of access mode KLM or KSM, not free and UMR-enabled (only UMRs lay one out)"
        : free && !umr                ? "free, and no UMR may map it"
        : !get(r.in, mkc::kLocalRead) ? "without local read"
                                      : nullptr;
    if (unsupported)
        return fail(err::kMlx5MkeyNotOffered, "CREATE_MKEY %s", unsupported);
    if (const err::Condition *why = checkKeyOwners(r))
        return why;
    if (mode == kAccessModeKlm && isWindow(r))
        return createWindowMkey(r);
    const err::Condition *why = mode == kAccessModePa    ? createPhysicalMkey(r)
                                : mode == kAccessModeKlm ? createIndirectMkey(r)
                                : mode == kAccessModeKsm ? createKsmMkey(r)
                                : free                   ? createFreeMkey(r)
                                                         : createMttMkey(r);
    if (why)
        return why;
    MemoryRegion &made = core_.objects.mrs.at(static_cast<uint32_t>(get(r.out, kMkeyIndex)));
    // Only a key with en_rinval may a peer's SEND with Invalidate free.
    made.remoteInvalidate = get(r.in, mkc::kRemoteInvalidate);
    made.owner = static_cast<Owner>(get(r.in, kUid));
    return nullptr;
}

// mlx5_ib makes every key as the kernel (uid 0), a process's too: a user
// context's key is DEVX's, in a PD of its own, over its own memory or
// (an indirect key, mlx5dv_create_mkey) over its own keys. A key over
// guest physical memory, or a free one only the kernel's UMRs fill, is
// the kernel's.
const err::Condition *Commands::checkKeyOwners(const Request &r) const {
    const auto caller = static_cast<Owner>(get(r.in, kUid));
    if (caller == uid::kKernel)
        return nullptr;
    const uint64_t mode = get(r.in, mkc::kAccessMode42) << 2 | get(r.in, mkc::kAccessMode10);
    if (mode == kAccessModePa || (get(r.in, mkc::kFree) && mode != kAccessModeKlm))
        return fail(err::kMlx5CmdBadUid, "CREATE_MKEY with uid %u: a %s key is the kernel's",
                    caller, mode == kAccessModePa ? "physical" : "free");
    const uint64_t pd = get(r.in, mkc::kPd);
    if (const ProtectionDomain *owned = core_.objects.pds.find(pd);
        owned && !controls(caller, owned->owner))
        return fail(err::kMlx5CmdForeignObject,
                    "CREATE_MKEY with uid %u: PD %llu is user context %u's", caller,
                    static_cast<unsigned long long>(pd), owned->owner);
    return nullptr;
}

// A key over guest physical memory: what mlx5_ib_get_dma_mr makes.
const err::Condition *Commands::createPhysicalMkey(const Request &r) {
    pib_mr_context ctx{};
    ctx.pdn = static_cast<uint32_t>(get(r.in, mkc::kPd));
    ctx.access = accessOf(r.in);
    ctx.flags = PIB_MR_PHYSICAL;
    ctx.iova = get(r.in, mkc::kStartAddress);
    ctx.length = get(r.in, mkc::kLength64) ? ~uint64_t{0} : get(r.in, mkc::kLength);
    ctx.key_variant = static_cast<uint8_t>(get(r.in, mkc::kVariant));
    if (ctx.length == 0 || ctx.iova + (ctx.length - 1) < ctx.iova)
        return fail(err::kMlx5CmdBadParam, "CREATE_MKEY of 0x%" PRIx64 " bytes at 0x%" PRIx64,
                    ctx.length, ctx.iova);
    if (const err::Condition *why = regions_.check("CREATE_MKEY", ctx))
        return why;
    uint32_t key = 0;
    if (const err::Condition *why = regions_.insert(ctx, &key))
        return why;
    set(r.out, kMkeyIndex, key >> 8);
    return nullptr;
}

// A free key with room for translation_octword_size * 2 pages, which UMR
// WQEs map: what ib_alloc_mr makes (mlx5_ib's _mlx5_alloc_mkey_descs),
// and what mlx5_ib's MR cache makes by the thousand at probe, up to 2^17
// pages each. So the key holds nothing until a UMR maps it: it keeps the
// pages a UMR gives with itself (MemoryRegion::ownPages), at most
// kMaxFastRegPages at a time, within the device's budget.
const err::Condition *Commands::createFreeMkey(const Request &r) {
    const uint64_t pages = get(r.in, mkc::kTranslationOctowords) * 2;
    if (pages == 0 || pages > limits::kMaxMtt)
        return fail(err::kMlx5CmdBadParam, "CREATE_MKEY for %" PRIu64 " pages (1..%u)", pages,
                    limits::kMaxMtt);
    pib_mr_context ctx{};
    ctx.pdn = static_cast<uint32_t>(get(r.in, mkc::kPd));
    ctx.flags = PIB_MR_FAST_REG;
    ctx.key_variant = static_cast<uint8_t>(get(r.in, mkc::kVariant));
    ctx.mtt_count = static_cast<uint32_t>(pages);
    if (!core_.objects.pds.find(ctx.pdn))
        return fail(err::kMlx5CmdBadResource, "CREATE_MKEY in PD %u", ctx.pdn);
    uint32_t key = 0;
    if (const err::Condition *why = regions_.insert(ctx, &key, MemoryRegions::Translations::kOwn))
        return why;
    set(r.out, kMkeyIndex, key >> 8);
    return nullptr;
}

// mlx5_ib makes a process's memory window (mlx5_ib_alloc_mw) as a KLM key
// of the kernel's (uid 0) in the process's PD, en_rinval for type 2; a
// kernel consumer's KLM key (ib_alloc_mr's SG_GAPS) is in a PD of the
// kernel's, and a process's own (mlx5dv_create_mkey) has its uid.
bool Commands::isWindow(const Request &r) const {
    const ProtectionDomain *pd = core_.objects.pds.find(get(r.in, mkc::kPd));
    return get(r.in, kUid) == uid::kKernel && pd && pd->owner != uid::kKernel;
}

// A memory window (docs/mlx5.md §10.5): the core's, unbound, of type 2
// with en_rinval, else type 1; its index among the windows' (above the
// keys') is the mkey index.
const err::Condition *Commands::createWindowMkey(const Request &r) {
    uint32_t key = 0;
    const uint8_t type = get(r.in, mkc::kRemoteInvalidate) ? PIB_MW_TYPE_2 : PIB_MW_TYPE_1;
    if (const err::Condition *why =
            regions_.insertWindow("CREATE_MKEY", static_cast<uint32_t>(get(r.in, mkc::kPd)), type,
                                  static_cast<uint8_t>(get(r.in, mkc::kVariant)), &key))
        return why;
    set(r.out, kMkeyIndex, key >> 8);
    return nullptr;
}

// The context of a free indirect (KLM or KSM) key: its PD, which must
// exist, rights IBA allows (10.6.3.1: remote write or atomic with local
// write) and variant; null, or why not.
const err::Condition *Commands::freeKeyContext(const Request &r, pib_mr_context *ctx) const {
    ctx->pdn = static_cast<uint32_t>(get(r.in, mkc::kPd));
    ctx->access = accessOf(r.in);
    ctx->flags = PIB_MR_FAST_REG;
    ctx->key_variant = static_cast<uint8_t>(get(r.in, mkc::kVariant));
    if (!core_.objects.pds.find(ctx->pdn))
        return fail(err::kMlx5CmdBadResource, "CREATE_MKEY in PD %u", ctx->pdn);
    if (ctx->access & (PIB_ACCESS_REMOTE_WRITE | PIB_ACCESS_REMOTE_ATOMIC) &&
        !(ctx->access & PIB_ACCESS_LOCAL_WRITE))
        return fail(err::kMlx5CmdBadParam,
                    "CREATE_MKEY with remote write or atomic rights and no local write");
    return nullptr;
}

// An indirect key (indirect_key.hh) with a table of
// translations_octword_size entries, 16 bytes each: what
// mlx5dv_create_mkey makes, free until a UMR lays it out (docs/mlx5.md
// §10.4). Its entries come only by UMR.
const err::Condition *Commands::createIndirectMkey(const Request &r) {
    const uint64_t entries = get(r.in, mkc::kTranslationOctowords);
    if (entries == 0 || entries > limits::kMaxIndirectEntries || get(r.in, kActualOctowords))
        return fail(err::kMlx5CmdBadParam,
                    "CREATE_MKEY of an indirect key with a table of %" PRIu64
                    " entries (1..%u), or with entries of its own",
                    entries, limits::kMaxIndirectEntries);
    pib_mr_context ctx{};
    if (const err::Condition *why = freeKeyContext(r, &ctx))
        return why;
    ctx.iova = get(r.in, mkc::kStartAddress);
    uint32_t key = 0;
    if (const err::Condition *why =
            regions_.insertIndirect("CREATE_MKEY", ctx, static_cast<uint32_t>(entries), &key))
        return why;
    set(r.out, kMkeyIndex, key >> 8);
    return nullptr;
}

// A KSM key (docs/mlx5.md §10.7) with a table of
// translations_octword_size entries, 16 bytes each: what mlx5_ib's MR
// cache makes for an implicit on-demand region, free until the UMR QP
// loads its entries and enables it. The kernel's alone (checkKeyOwners:
// a process's free key is refused).
const err::Condition *Commands::createKsmMkey(const Request &r) {
    const uint64_t entries = get(r.in, mkc::kTranslationOctowords);
    if (entries == 0 || entries > limits::kMaxKsmEntries || get(r.in, kActualOctowords))
        return fail(err::kMlx5CmdBadParam,
                    "CREATE_MKEY of a KSM key with a table of %" PRIu64
                    " entries (1..%u), or with entries of its own",
                    entries, limits::kMaxKsmEntries);
    pib_mr_context ctx{};
    if (const err::Condition *why = freeKeyContext(r, &ctx))
        return why;
    ctx.mtt_count = static_cast<uint32_t>(entries * ksm_entry::kWords);
    uint32_t key = 0;
    if (const err::Condition *why = regions_.insert(ctx, &key, MemoryRegions::Translations::kOwn))
        return why;
    core_.objects.mrs.at(PIB_KEY_INDEX(key)).ksm = true;
    set(r.out, kMkeyIndex, key >> 8);
    return nullptr;
}

// QUERY_SPECIAL_CONTEXTS: the null key (null_mkey) is 0, index 0, which
// no key ever has: an access through it fails as a bad key's. The
// memory scheme's implicit regions use keys of their own instead
// (docs/mlx5.md §10.7). The reserved lkey is 0 too; neither
// dump_fill_mkey nor terminate_scatter_list_mkey is offered.
const err::Condition *Commands::querySpecialContexts(const Request &) {
    return nullptr;
}

// A key made with its pages, translations_octword_actual_size * 2 of them
// after the context: what mlx5_ib's reg_create makes for user memory
// when it does not load the pages by UMR. The key keeps them with itself
// (MemoryRegions::insertWithPages), in a table of
// translations_octword_size * 2 entries that UMRs may rewrite if umr_en.
// With pg_access its entries carry present bits: the key maps a page only
// while its entry says so (on-demand paging); such a key may reach the
// address space's end (length64) in pages up to 2^61 bytes: the null key
// of an implicit region, whose entries are all absent (docs/mlx5.md
// §10.7).
const err::Condition *Commands::createMttMkey(const Request &r) {
    const uint64_t given = get(r.in, kActualOctowords) * 2;
    const uint64_t table = std::max(get(r.in, mkc::kTranslationOctowords) * 2, given);
    const bool paged = get(r.in, kPgAccess);
    if (given == 0 || table > limits::kMaxMtt || (get(r.in, mkc::kLength64) && !paged))
        return fail(err::kMlx5CmdBadParam,
                    "CREATE_MKEY with %" PRIu64 " translation entries in a table of %" PRIu64
                    " (1..%u), or length64 without pg_access",
                    given, table, limits::kMaxMtt);
    if (r.in.size() < kEntriesByte + given * sizeof(uint64_t))
        return fail(err::kMlx5CmdBadParam,
                    "CREATE_MKEY of %zu bytes, short of its %" PRIu64 " translation entries",
                    r.in.size(), given);
    pib_mr_context ctx{};
    ctx.pdn = static_cast<uint32_t>(get(r.in, mkc::kPd));
    ctx.access = accessOf(r.in);
    ctx.flags = get(r.in, mkc::kUmrEnable) ? PIB_MR_FAST_REG : 0;
    ctx.iova = get(r.in, mkc::kStartAddress);
    ctx.length = get(r.in, mkc::kLength64) ? ~uint64_t{0} - ctx.iova : get(r.in, mkc::kLength);
    ctx.log_page_size = static_cast<uint8_t>(get(r.in, mkc::kLogPageSize));
    ctx.key_variant = static_cast<uint8_t>(get(r.in, mkc::kVariant));
    ctx.mtt_count = static_cast<uint32_t>(table);
    std::vector<uint64_t> pages(given);
    for (size_t i = 0; i < given; ++i)
        pages[i] = readBe64(r.in.data() + kEntriesByte + i * sizeof(uint64_t)) &
                   (paged ? ~uint64_t{0} : ~key_entry::kFlags);
    uint32_t key = 0;
    if (const err::Condition *why =
            regions_.insertWithPages("CREATE_MKEY", ctx, std::move(pages), &key, paged))
        return why;
    set(r.out, kMkeyIndex, key >> 8);
    return nullptr;
}

// The CREATE_MKEY input that makes `mr` as it was made (the device's
// state): a physical key, or a key with its pages; a UMR-enabled key as
// a free one, which the saved state then maps (or lays out, an indirect
// key) as the UMRs since did.
std::vector<uint8_t> Commands::mkeyInput(const MemoryRegion &mr) const {
    const pib_mr_context &c = mr.ctx;
    const bool physical = c.flags & PIB_MR_PHYSICAL;
    const bool withPages = !physical && !mr.fastReg();
    std::vector<uint8_t> in(kEntriesByte + (withPages ? sizeof(uint64_t) * mr.ownPages.size() : 0));
    set(in, kUid, mr.owner);
    set(in, mkc::kLocalRead, 1);
    set(in, mkc::kQpn, kNoQp);
    set(in, mkc::kPd, c.pdn);
    set(in, mkc::kVariant, c.key_variant);
    set(in, mkc::kRemoteInvalidate, mr.remoteInvalidate);
    if (mr.indirect) {
        set(in, mkc::kAccessMode10, kAccessModeKlm);
        set(in, mkc::kTranslationOctowords, mr.indirect->tableEntries);
    } else if (mr.ksm) {
        set(in, mkc::kAccessMode10, kAccessModeKsm);
        set(in, mkc::kTranslationOctowords, c.mtt_count / ksm_entry::kWords);
    } else if (!physical) {
        set(in, mkc::kAccessMode10, kAccessModeMtt);
        set(in, mkc::kTranslationOctowords, c.mtt_count / 2);
    }
    if (mr.fastReg()) {
        set(in, mkc::kFree, 1);
        set(in, mkc::kUmrEnable, 1);
        return in;
    }
    set(in, mkc::kLocalWrite, (c.access & PIB_ACCESS_LOCAL_WRITE) != 0);
    set(in, mkc::kRemoteWrite, (c.access & PIB_ACCESS_REMOTE_WRITE) != 0);
    set(in, mkc::kRemoteRead, (c.access & PIB_ACCESS_REMOTE_READ) != 0);
    set(in, mkc::kAtomic, (c.access & PIB_ACCESS_REMOTE_ATOMIC) != 0);
    set(in, mkc::kStartAddress, c.iova);
    // length64: a physical key over all addresses, or a paged one to
    // the address space's end (createMttMkey's length for it).
    const bool toTheEnd =
        physical ? c.length == ~uint64_t{0} : mr.pagedEntries && c.length == ~uint64_t{0} - c.iova;
    set(in, toTheEnd ? mkc::kLength64 : mkc::kLength, toTheEnd ? 1 : c.length);
    if (physical)
        return in;
    set(in, kPgAccess, mr.pagedEntries);
    set(in, mkc::kLogPageSize, c.log_page_size);
    set(in, kActualOctowords, mr.ownPages.size() / 2);
    for (size_t i = 0; i < mr.ownPages.size(); ++i)
        writeBe64(in.data() + kEntriesByte + i * sizeof(uint64_t), mr.ownPages[i]);
    return in;
}

// A key over a UMEM: an MTT key whose start_addr is byte mkey_umem_offset
// of the UMEM's buffer, over len bytes of it, translated by the UMEM's own
// pages, 4 KiB at a time (so start_addr lies where that byte lies in its
// page). Only what a process may make: MTT, neither free nor UMR-enabled,
// writable only over a writable UMEM.
const err::Condition *Commands::placeKeyInUmem(const Request &r,
                                               std::vector<uint8_t> *placed) const {
    const uint64_t mode = get(r.in, mkc::kAccessMode42) << 2 | get(r.in, mkc::kAccessMode10);
    if (mode != kAccessModeMtt || get(r.in, mkc::kFree) || get(r.in, mkc::kUmrEnable) ||
        get(r.in, mkc::kLength64))
        return fail(err::kMlx5MkeyNotOffered,
                    "CREATE_MKEY over a UMEM: access mode %" PRIu64 ", free, UMR-enabled or "
                    "length64 (an MTT key over its pages alone)",
                    mode);
    const UserMemory *m = nullptr;
    if (const err::Condition *why = usableUmem(r, kUmemId, "the key's", &m))
        return why;
    const auto id = static_cast<uint32_t>(get(r.in, kUmemId));
    const uint64_t at = get(r.in, kUmemOffset), length = get(r.in, mkc::kLength);
    const uint64_t from = m->offset + at, lead = from % kUmemGranule;
    if (at >= m->bytes() || length == 0 || length > m->bytes() - at ||
        get(r.in, mkc::kStartAddress) % kUmemGranule != lead)
        return fail(err::kMlx5UmemBad,
                    "CREATE_MKEY of %" PRIu64 " bytes from %" PRIu64 " of UMEM %u (%" PRIu64
                    " bytes), or a start_addr not where that byte is in its page",
                    length, at, id, m->bytes());
    const bool writes =
        get(r.in, mkc::kLocalWrite) || get(r.in, mkc::kRemoteWrite) || get(r.in, mkc::kAtomic);
    if (writes && !m->writable)
        return fail(err::kMlx5UmemBad, "CREATE_MKEY with write rights over UMEM %u, read-only", id);
    // An even count of entries, in as many octowords (the last page twice
    // if need be).
    const uint64_t pages = (lead + length + kUmemGranule - 1) / kUmemGranule;
    const uint64_t entries = pages + pages % 2;
    if (entries > limits::kMaxMtt)
        return fail(err::kMlx5CmdBadParam, "CREATE_MKEY over %" PRIu64 " pages of UMEM %u (%u)",
                    pages, id, limits::kMaxMtt);
    placed->assign(r.in.begin(), r.in.begin() + std::min<size_t>(r.in.size(), kEntriesByte));
    placed->resize(kEntriesByte + 8 * entries);
    for (uint64_t i = 0; i < entries; ++i)
        writeBe64(placed->data() + kEntriesByte + 8 * i,
                  m->pageAddress(from - lead + std::min(i, pages - 1) * kUmemGranule));
    set(*placed, kUmemValid, 0);
    set(*placed, mkc::kLogPageSize, PageList::kAdapterPageShift);
    set(*placed, mkc::kTranslationOctowords, entries / 2);
    set(*placed, kActualOctowords, entries / 2);
    return nullptr;
}

const err::Condition *Commands::createUmemMkey(const Request &r) {
    std::vector<uint8_t> placed;
    if (const err::Condition *why = placeKeyInUmem(r, &placed))
        return why;
    if (const err::Condition *why = createMkey({placed, r.out, r.opMod, r.opcode}))
        return why;
    const auto index = static_cast<uint32_t>(get(r.out, kMkeyIndex));
    umems_.hold('k', index, {static_cast<uint32_t>(get(r.in, kUmemId)), 0});
    return nullptr;
}

const err::Condition *Commands::destroyMkey(const Request &r) {
    const auto index = static_cast<uint32_t>(get(r.in, kMkeyIndex));
    if (core_.objects.mws.find(index)) // mlx5_ib_dealloc_mw: bound or not
        return regions_.destroyWindow("DESTROY_MKEY", index << 8);
    const MemoryRegion *mr = core_.objects.mrs.find(index);
    if (!mr)
        return fail(err::kMlx5CmdBadResource, "DESTROY_MKEY of index 0x%x", index);
    const err::Condition *why = regions_.destroy("DESTROY_MKEY", mr->key);
    if (!why)
        umems_.release('k', index);
    return why;
}

// PAGE_FAULT_RESUME of a memory scheme fault (docs/mlx5.md §10.6): the
// driver mapped the pages of the fault its token names, or (error) could
// not. A token no QP waits for is no error: the driver answers faults
// from a queue of its own, out of order, and a QP may have been reset or
// destroyed since.
const err::Condition *Commands::pageFaultResume(const Request &r) {
    // page_fault_resume_in's mem_page_fault_info (Linux 6.12's layout; 6.1
    // has the transport scheme's fields there): error, fault_token_47_32
    // and fault_token_31_0.
    constexpr Field kError = field(0x40, 1);
    constexpr Field kTokenHigh = field(0x50, 16);
    constexpr Field kTokenLow = field(0x60, 32);
    const uint64_t token = get(r.in, kTokenHigh) << 32 | get(r.in, kTokenLow);
    core_.dataPath.resumePageFault(token, get(r.in, kError));
    return nullptr;
}

} // namespace pib::mlx5
