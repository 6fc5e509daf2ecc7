// SPDX-License-Identifier: GPL-2.0-or-later
// The base memory management extensions (IBA 10.6; docs/prm.md §6.2,
// §6.7): a fast-registration MR mapped by a REG_MR WQE, memory windows
// bound by BIND_MW WQEs, and either invalidated by a LOCAL_INV WQE or by
// a peer's SEND with invalidate. The send queue and the responder call in
// here; nothing else changes a mapping while the device runs.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "host.hh"
#include "indirect_key.hh"
#include "key_update.hh"
#include "mtt.hh"
#include "object_table.hh"
#include "objects.hh"
#include "pib_hw.h"

namespace pib {

class MemoryKeys {
  public:
    MemoryKeys(const Host &host, Mtt &mtt, ObjectTable<ProtectionDomain> &pds,
               ObjectTable<MemoryRegion> &mrs, ObjectTable<MemoryWindow> &mws)
        : host_(host), mtt_(mtt), pds_(pds), mrs_(mrs), mws_(mws) {}

    // A REG_MR WQE (`index` of QP `qpn`, in PD `pdn`): maps the region with
    // the WQE's page list (`given`, or read from reg.page_list when that
    // is empty), access and key. PIB_WC_SUCCESS, or the status the WQE
    // completes with (a guest error says why).
    // `remoteInvalidate`, when set, says whether a peer may invalidate the
    // key from now on (a ConnectX REG_MR's en_rinval).
    uint8_t fastRegister(uint32_t qpn, uint32_t index, uint32_t pdn, const pib_wqe_reg_mr &reg,
                         std::span<const uint64_t> given = {},
                         std::optional<bool> remoteInvalidate = std::nullopt);
    // A BIND_MW WQE of QP `qpn`: binds (type 1: or rebinds, or with length
    // 0 unbinds) the window to a range of a region.
    uint8_t bindWindow(uint32_t qpn, uint32_t index, uint32_t pdn, const pib_wqe_bind_mw &bind);
    // A LOCAL_INV WQE: the key's region, or type 2 window, becomes free.
    uint8_t invalidateLocal(uint32_t qpn, uint32_t index, uint32_t pdn, uint32_t key);
    // A peer's SEND with invalidate names `rkey`: null when it was
    // invalidated, else why it could not be. A region is invalidated so only
    // if it allows it (MemoryRegion::remoteInvalidate).
    // `qpn` is the QP it arrived on: a type 2B window is invalidated only
    // through the QP it is bound to (IBA 10.6.7.2.4), as by LOCAL_INV.
    const char *invalidateRemote(uint32_t qpn, uint32_t pdn, uint32_t rkey);
    // A UMR WQE of the ConnectX UMR QP `qpn`: updates the key's fields and
    // loads `entries` into its table as `u` says (key_update.hh), for the
    // driver's own keys in any PD. PIB_WC_SUCCESS, or the status the WQE
    // completes with (a guest error says why), the key unchanged.
    uint8_t update(uint32_t qpn, uint32_t index, uint32_t key, const KeyUpdate &u,
                   std::span<const uint64_t> entries);
    // A UMR of an indirect key (a ConnectX KLM key, indirect_key.hh) by
    // `qp`: sets what `u` names, all or nothing. PIB_WC_SUCCESS, or the
    // status the WQE completes with (a guest error says why).
    uint8_t configureIndirect(const QueuePair &qp, uint32_t index, uint32_t key,
                              const IndirectUpdate &u);
    // The same as the device's saved state brings it back: no QP asks.
    // Null, or why it cannot be.
    const char *restoreIndirect(MemoryRegion &mr, const IndirectUpdate &u);
    // Whether a region takes windows only with the MW_BIND right (IBA
    // 10.6.7.2, pib-hca's); a ConnectX key has no such bit (mlx5_ib takes
    // IB_ACCESS_MW_BIND and drops it), so any region of the PD takes them.
    void requireBindRight(bool required) { bindRightRequired_ = required; }
    // Leaves the window unbound (its region no longer held by it).
    static void unbind(ObjectTable<MemoryRegion> &mrs, MemoryWindow &mw);

  private:
    const char *invalidate(uint32_t qpn, uint32_t pdn, uint32_t key, bool remote);
    const char *invalidateWindow(uint32_t qpn, uint32_t pdn, uint32_t key, MemoryWindow &mw);
    MemoryRegion *invalidatable(uint32_t pdn, uint32_t key, bool remote, const char **why) const;
    const char *checkBind(const MemoryWindow *mw, const MemoryRegion *mr, uint32_t pdn,
                          const pib_wqe_bind_mw &bind) const;
    const char *checkRegistration(const MemoryRegion *mr, uint32_t pdn,
                                  const pib_wqe_reg_mr &reg) const;
    bool readPageList(const pib_wqe_reg_mr &reg, std::span<const uint64_t> given, const char **why);
    bool storePages(MemoryRegion &mr, const char **why);
    const char *checkUpdate(const MemoryRegion *mr, uint32_t key, const KeyUpdate &u,
                            std::span<const uint64_t> entries) const;
    bool storeEntries(MemoryRegion &mr, const KeyUpdate &u, std::span<const uint64_t> entries);
    static const char *refusedAccess(uint32_t access);
    void unbindWindowsOf(MemoryRegion &mr);
    const char *checkIndirectAuthority(const QueuePair &qp, const MemoryRegion *mr) const;
    const char *checkIndirect(const MemoryRegion &mr, uint32_t key, const IndirectUpdate &u) const;
    static void applyIndirect(MemoryRegion &mr, const IndirectUpdate &u);

    const Host &host_;
    Mtt &mtt_;
    ObjectTable<ProtectionDomain> &pds_;
    ObjectTable<MemoryRegion> &mrs_;
    ObjectTable<MemoryWindow> &mws_;
    std::vector<uint64_t> pages_; // the last page list read, reused
    bool bindRightRequired_ = true;
};

} // namespace pib
