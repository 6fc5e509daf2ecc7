// SPDX-License-Identifier: GPL-2.0-or-later
// The memory keys and UMR WQEs mlx5_ib makes for a kernel consumer's fast
// registration (ib_alloc_mr, IB_WR_REG_MR, IB_WR_LOCAL_INV), for the unit
// tests of the ConnectX UMR path and of what it keeps from user processes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "mlx5_function.hh"

namespace pib::testing::mlx5umr {

using pib::mlx5::field;

// CREATE_MKEY as ib_alloc_mr asks mlx5_ib: free, UMR-enabled, MTT, room
// for `pages`, in `pdn` (the function's PD when 0). Returns the key (its
// variant 0x33), 0 if the device refused it.
inline uint32_t freeKey(Mlx5Function &f, uint32_t pages, uint32_t pdn = 0) {
    auto in = Mlx5Host::input(0x200, 0, 0x110);
    set(in, field(0x81, 1), 1);         // free
    set(in, field(0x90, 1), 1);         // umr_en
    set(in, field(0x95, 1), 1);         // lr
    set(in, field(0x96, 2), 1);         // MTT
    set(in, field(0xa0, 24), 0xffffff); // no QP
    set(in, field(0xb8, 8), 0x33);      // variant
    set(in, field(0xe8, 24), pdn ? pdn : f.pd);
    set(in, field(0x220, 32), (pages + 1) / 2); // translation octowords
    const auto r = f.host.run(in, 16);
    return r.status() == 0 ? static_cast<uint32_t>(r.get(mlx5qp::kHeld)) << 8 | 0x33 : 0;
}

// A UMR WQE as mlx5_ib's set_reg_wr writes it: key `key` over `pages`
// (4 KiB each) from `iova` for `length` bytes, remote read and write,
// remote invalidation enabled (MLX5_MKEY_REMOTE_INVAL) unless
// `remoteInvalidate` is false; the page list inline, or at `listAddr`
// (whose bytes are `list`) behind a data segment with L_Key `lkey`.
inline std::vector<uint8_t> registration(uint32_t key, uint64_t iova, uint64_t length,
                                         const std::vector<uint64_t> &pages,
                                         uint8_t *list = nullptr, uint64_t listAddr = 0,
                                         uint32_t lkey = 0, bool remoteInvalidate = true) {
    std::vector<uint8_t> wqe(128);
    wqe[3] = 0x25;
    writeBe32(&wqe[12], key);
    uint8_t *umr = &wqe[16];
    umr[0] = list ? 0 : 0x80; // inline
    writeBe16(umr + 4, static_cast<uint16_t>((pages.size() + 1) / 2));
    writeBe64(umr + 8, (1u << 0) | (1u << 1) | (1u << 6) | (1u << 8) | (1u << 13) | (1u << 17) |
                           (1u << 18) | (1u << 19) | (1u << 20) | (1u << 29));
    uint8_t *mkey = &wqe[64];
    mkey[2] =
        (1u << 2) | (1u << 3) | (1u << 4) | (1u << 5) | (1u << 7) | 0x1; // LR LW RR RW UMR, MTT
    writeBe32(mkey + 4, 0xffffff00u | (key & 0xff));
    writeBe32(mkey + 12, remoteInvalidate ? 1u << 24 : 0); // flags_pd: en_rinval
    writeBe64(mkey + 16, iova);
    writeBe64(mkey + 24, length);
    mkey[59] = 12;
    std::vector<uint8_t> entries(8 * pages.size());
    for (size_t i = 0; i < pages.size(); ++i)
        writeBe64(&entries[8 * i], pages[i] | 0x3); // read and write enabled
    if (list) {
        std::copy(entries.begin(), entries.end(), list);
        wqe.resize(144);
        writeBe32(&wqe[128], static_cast<uint32_t>((entries.size() + 63) / 64 * 64));
        writeBe32(&wqe[132], lkey);
        writeBe64(&wqe[136], listAddr);
    } else {
        wqe.insert(wqe.end(), entries.begin(), entries.end());
    }
    return wqe;
}

// The control, UMR control and key segments (128 bytes) of a WQE of the
// driver's UMR QP, as mlx5r_umr_post_send writes them: `flags` (with the
// offset flag when `offset`, in entries, is not 0), the mask `fields`,
// `entries` translation entries to follow, and the key segment's free
// bit, all rights, PD `pdn` and range from `iova` for `length` bytes of
// 4 KiB pages.
inline std::vector<uint8_t> umrQpSegments(uint32_t key, uint8_t flags, uint64_t fields, bool free,
                                          uint32_t pdn, uint64_t iova, uint64_t length,
                                          size_t entries, uint64_t offset = 0) {
    std::vector<uint8_t> wqe(128);
    wqe[3] = 0x25;
    writeBe32(&wqe[12], key);
    uint8_t *c = &wqe[16];
    c[0] = flags | (offset ? 0x10 : 0);
    writeBe16(c + 4, static_cast<uint16_t>(entries / 2));
    writeBe16(c + 6, static_cast<uint16_t>(offset / 2));
    writeBe64(c + 8, fields);
    writeBe32(c + 16, static_cast<uint32_t>(offset / 2 >> 16));
    uint8_t *k = &wqe[64];
    k[0] = free ? 0x40 : 0;
    k[2] = (1u << 2) | (1u << 3) | (1u << 4) | (1u << 5) | (1u << 6); // lr lw rr rw a
    writeBe32(k + 4, 0xffffff00u | (key & 0xff));
    writeBe32(k + 12, pdn);
    writeBe64(k + 16, iova);
    writeBe64(k + 24, length);
    k[59] = 12;
    return wqe;
}

// Translation entries as a UMR carries them: big-endian, read and write
// enabled where present.
inline std::vector<uint8_t> mttEntries(const std::vector<uint64_t> &pages) {
    std::vector<uint8_t> bytes(8 * pages.size());
    for (size_t i = 0; i < pages.size(); ++i)
        writeBe64(&bytes[8 * i], pages[i] ? pages[i] | 0x3 : 0);
    return bytes;
}

// A WQE of the driver's UMR QP as mlx5r_umr_update_mr_pas writes the
// last of a user region's loads: free key `key` (of the MR cache) takes
// `pages` (4 KiB each, inline) from `iova` for `length` bytes, all
// rights, PD `pdn`, and is enabled; the key must have been free.
inline std::vector<uint8_t> cacheLoad(uint32_t key, uint32_t pdn, uint64_t iova, uint64_t length,
                                      std::vector<uint64_t> pages) {
    pages.resize((pages.size() + 1) / 2 * 2);
    // range, PD, key, the rights, free (MLX5_MKEY_MASK_*)
    const uint64_t fields =
        (1u << 0) | (1u << 1) | (1u << 6) | (1u << 7) | (1u << 13) | (0x1fu << 17) | (1u << 29);
    std::vector<uint8_t> wqe = umrQpSegments(key, 0x80 | 1u << 5, // inline; fail unless free
                                             fields, false, pdn, iova, length, pages.size());
    const std::vector<uint8_t> entries = mttEntries(pages);
    wqe.insert(wqe.end(), entries.begin(), entries.end());
    return wqe;
}

// A WQE of the driver's UMR QP as mlx5r_umr_revoke_mr writes it when a
// user region is deregistered: key `key` free, in PD `pdn` (the UMR's).
inline std::vector<uint8_t> cacheRevoke(uint32_t key, uint32_t pdn) {
    return umrQpSegments(key, 0x80, (1u << 7) | (1u << 29), true, pdn, 0, 0, 0); // PD, free
}

// A UMR WQE as set_linv_wr writes it: key `key` free.
inline std::vector<uint8_t> invalidation(uint32_t key) {
    std::vector<uint8_t> wqe(128);
    wqe[3] = 0x25;
    writeBe32(&wqe[12], key);
    wqe[16] = 0x80;
    writeBe64(&wqe[24], 1u << 29); // the free bit only
    wqe[64] = 0x40;                // free
    return wqe;
}

// A SEND with Invalidate (opcode 0x01) of `rkey`: `length` bytes at
// `addr` through L_Key `lkey`, the message the peer receives.
inline std::vector<uint8_t> sendInvalidate(uint32_t rkey, uint32_t length, uint32_t lkey,
                                           uint64_t addr) {
    std::vector<uint8_t> wqe(32);
    wqe[3] = 0x01;
    writeBe32(&wqe[12], rkey);
    writeBe32(&wqe[16], length);
    writeBe32(&wqe[20], lkey);
    writeBe64(&wqe[24], addr);
    return wqe;
}

// CREATE_MKEY as mlx5dv_create_mkey asks for an indirect key: KLM, free,
// UMR-enabled, local read, a table of `entries`, in `pdn`, made by `uid`.
inline std::vector<uint8_t> klmKeyInput(uint32_t pdn, uint32_t entries, uint16_t uid = 0,
                                        bool remoteInvalidate = false) {
    auto in = Mlx5Host::input(0x200, 0, 0x110);
    set(in, field(0x10, 16), uid);
    set(in, field(0x81, 1), 1);         // free
    set(in, field(0x90, 1), 1);         // umr_en
    set(in, field(0x95, 1), 1);         // lr
    set(in, field(0x96, 2), 2);         // KLMS
    set(in, field(0xa0, 24), 0xffffff); // no QP
    set(in, field(0xe7, 1), remoteInvalidate);
    set(in, field(0xe8, 24), pdn);
    set(in, field(0x220, 32), entries);
    return in;
}

// A piece of an indirect key: a KLM entry, or a repeat block's entry
// (with its stride).
struct KlmPiece {
    uint32_t bytes;
    uint32_t key;
    uint64_t addr;
    uint16_t stride = 0;
};

// KLM entries (byte count, key, address; 16 bytes each) of `pieces`, and
// the bytes they add up to in *length.
inline std::vector<uint8_t> klmEntries(const std::vector<KlmPiece> &pieces, uint64_t *length) {
    std::vector<uint8_t> bytes;
    for (const KlmPiece &p : pieces) {
        uint8_t e[16];
        writeBe32(e, p.bytes);
        writeBe32(e + 4, p.key);
        writeBe64(e + 8, p.addr);
        bytes.insert(bytes.end(), e, e + 16);
        *length += p.bytes;
    }
    return bytes;
}

// A UMR of an indirect key as libmlx5's mlx5dv_wr_mkey_configure writes
// it (qp.c): `flags`, `mask`, the rights byte, the length, and `layout`
// inline at byte 128, padded to 64 bytes.
inline std::vector<uint8_t> indirectUmr(uint32_t key, uint8_t rights, uint64_t length,
                                        std::vector<uint8_t> layout, uint64_t mask = 0x203C2001,
                                        uint8_t flags = 0x80) {
    layout.resize((layout.size() + 63) / 64 * 64);
    std::vector<uint8_t> wqe(128);
    wqe[3] = 0x25;
    writeBe32(&wqe[12], key);
    wqe[16] = flags;
    writeBe16(&wqe[20], static_cast<uint16_t>(layout.size() / 16));
    writeBe64(&wqe[24], mask);
    wqe[66] = rights;
    writeBe32(&wqe[68], 0xffffff00u | (key & 0xff));
    writeBe64(&wqe[88], length);
    wqe.insert(wqe.end(), layout.begin(), layout.end());
    return wqe;
}

// mlx5_send_wr_mr_list's UMR: configure, access and a KLM list of
// `pieces` for their total length.
inline std::vector<uint8_t> klmList(uint32_t key, uint8_t rights,
                                    const std::vector<KlmPiece> &pieces, uint64_t mask = 0x203C2001,
                                    uint8_t flags = 0x80) {
    uint64_t length = 0;
    std::vector<uint8_t> layout = klmEntries(pieces, &length);
    return indirectUmr(key, rights, length, layout, mask, flags);
}

// mlx5_send_wr_mr_interleaved's: `repeats` blocks of `pieces`.
inline std::vector<uint8_t> klmInterleaved(uint32_t key, uint8_t rights, uint32_t repeats,
                                           const std::vector<KlmPiece> &pieces) {
    std::vector<uint8_t> layout(16);
    uint32_t block = 0;
    for (const KlmPiece &p : pieces) {
        uint8_t e[16];
        writeBe16(e, p.stride);
        writeBe16(e + 2, static_cast<uint16_t>(p.bytes));
        writeBe32(e + 4, p.key);
        writeBe64(e + 8, p.addr);
        layout.insert(layout.end(), e, e + 16);
        block += p.bytes;
    }
    writeBe32(&layout[0], block);
    writeBe32(&layout[4], 0x400);
    writeBe32(&layout[8], repeats);
    writeBe16(&layout[14], static_cast<uint16_t>(pieces.size()));
    return indirectUmr(key, rights, uint64_t{block} * repeats, layout);
}

// ibv_post_send's IBV_WR_LOCAL_INV on a libmlx5 QP: INLINE,
// TRANSLATION_OFFSET and CHECK_QPN; the mask FREE, KEY and QPN.
inline std::vector<uint8_t> klmInvalidation(uint32_t key) {
    std::vector<uint8_t> wqe(128);
    wqe[3] = 0x25;
    writeBe32(&wqe[12], key);
    wqe[16] = 0x98;
    writeBe64(&wqe[24], 0x20006000);
    wqe[64] = 0x40;
    writeBe32(&wqe[68], 0xffffff00u);
    return wqe;
}

// mlx5_ib's IB_WR_REG_MR of an IB_MR_TYPE_SG_GAPS region (set_reg_wr):
// KLM key `key` over `pieces` from `iova`, remote read and write (and
// atomic if `atomic`), en_rinval; the list inline when it fits 64 bytes,
// else at `listAddr` (its bytes written to `list`) behind a data segment
// with L_Key `lkey`.
inline std::vector<uint8_t> klmRegistration(uint32_t key, uint64_t iova,
                                            const std::vector<KlmPiece> &pieces,
                                            uint8_t *list = nullptr, uint64_t listAddr = 0,
                                            uint32_t lkey = 0, bool atomic = false) {
    uint64_t length = 0;
    std::vector<uint8_t> klms = klmEntries(pieces, &length);
    const bool inlined = klms.size() <= 64;
    std::vector<uint8_t> wqe(128);
    wqe[3] = 0x25;
    writeBe32(&wqe[12], key);
    uint8_t *umr = &wqe[16];
    umr[0] = inlined ? 0x80 : 0;
    writeBe16(umr + 4, static_cast<uint16_t>((klms.size() + 63) / 64 * 4));
    // frwr_mkey_mask: length, page size, start, en_rinval, key, lr, lw,
    // rr, rw, small fence, free (and a)
    writeBe64(umr + 8, (1u << 0) | (1u << 1) | (1u << 6) | (1u << 8) | (1u << 13) | (0xfu << 17) |
                           (1u << 23) | (1u << 29) | (atomic ? 1u << 21 : 0));
    uint8_t *mkey = &wqe[64];
    mkey[2] = (atomic ? 0x40 : 0) | 0x20 | 0x10 | 0x08 | 0x04 | 0x80 | 0x2; // rights, LR, UMR, KLM
    writeBe32(mkey + 4, 0xffffff00u | (key & 0xff));
    writeBe32(mkey + 12, 1u << 24); // en_rinval
    writeBe64(mkey + 16, iova);
    writeBe64(mkey + 24, length);
    if (inlined) {
        klms.resize(64);
        wqe.insert(wqe.end(), klms.begin(), klms.end());
        return wqe;
    }
    std::copy(klms.begin(), klms.end(), list);
    wqe.resize(144);
    writeBe32(&wqe[128], static_cast<uint32_t>((klms.size() + 63) / 64 * 64));
    writeBe32(&wqe[132], lkey);
    writeBe64(&wqe[136], listAddr);
    return wqe;
}

// CREATE_MKEY as mlx5_ib_alloc_mw makes a process's memory window: the
// kernel's (uid 0) KLM key with room for 4 entries in the process's PD,
// en_rinval for type 2; its variant `variant`.
inline std::vector<uint8_t> windowKeyInput(uint32_t pdn, bool type2, uint8_t variant) {
    auto in = klmKeyInput(pdn, 4, 0, type2);
    set(in, field(0xb8, 8), variant);
    return in;
}

// libmlx5's set_bind_wr of a bind: window `key` (its current key) becomes
// `newVariant`'s, over [addr, addr + length) of region `mrKey` with
// `rights` (MLX5_PERM_*, local write included as libmlx5 passes it); a
// type 2 window for QP `qpn`. The bytes libmlx5 leaves as the ring had
// them are 0xa5 here.
inline std::vector<uint8_t> windowBind(uint32_t key, uint8_t newVariant, bool type2, uint32_t qpn,
                                       uint32_t mrKey, uint64_t addr, uint64_t length,
                                       uint8_t rights) {
    std::vector<uint8_t> wqe(192, 0);
    std::fill(wqe.begin() + 64, wqe.begin() + 128, 0xa5);
    wqe[3] = 0x25;
    writeBe32(&wqe[12], key);
    wqe[16] = 0x80 | 0x10 | (type2 ? 0x20 : 0);
    writeBe16(&wqe[20], 4);
    writeBe64(&wqe[24], 0x203C2041u | (type2 ? 1u << 14 : 0));
    wqe[64] = 0;
    wqe[66] = rights;
    writeBe32(&wqe[68], (type2 ? qpn << 8 : 0xffffff00u) | newVariant);
    writeBe64(&wqe[80], addr);
    writeBe64(&wqe[88], length);
    writeBe32(&wqe[128], static_cast<uint32_t>(length));
    writeBe32(&wqe[132], mrKey);
    writeBe64(&wqe[136], addr);
    return wqe;
}

// ibv_bind_mw's unbind of a type 1 window (a bind of length 0): free, its
// key's variant `newVariant`.
inline std::vector<uint8_t> windowUnbind(uint32_t key, uint8_t newVariant) {
    std::vector<uint8_t> wqe(128, 0);
    std::fill(wqe.begin() + 64, wqe.end(), 0xa5);
    wqe[3] = 0x25;
    writeBe32(&wqe[12], key);
    wqe[16] = 0x90;
    writeBe64(&wqe[24], 0x20002000);
    wqe[64] = 0x40;
    writeBe32(&wqe[68], 0xffffff00u | newVariant);
    return wqe;
}

} // namespace pib::testing::mlx5umr
