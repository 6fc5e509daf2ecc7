// SPDX-License-Identifier: GPL-2.0-or-later
// The base memory management extensions (IBA 10.6; docs/prm.md
// §6.2): a fast-registration MR mapped by a REG_MR WQE, and invalidated by
// a LOCAL_INV WQE or by a peer's SEND with invalidate. The send queue and
// the responder call in here; nothing else changes a region's mapping.
#pragma once

#include <cstdint>
#include <vector>

#include "host.hh"
#include "mtt.hh"
#include "object_table.hh"
#include "objects.hh"
#include "pib_hw.h"

namespace pib {

class MemoryKeys {
  public:
    MemoryKeys(const Host &host, Mtt &mtt, ObjectTable<MemoryRegion> &mrs)
        : host_(host), mtt_(mtt), mrs_(mrs) {}

    // A REG_MR WQE (`index` of QP `qpn`, in PD `pdn`): maps the region with
    // the WQE's page list, access and key. PIB_WC_SUCCESS, or the status
    // the WQE completes with (a guest error says why).
    uint8_t fastRegister(uint32_t qpn, uint32_t index, uint32_t pdn, const pib_wqe_reg_mr &reg);
    // A LOCAL_INV WQE: the key's region becomes free.
    uint8_t invalidateLocal(uint32_t qpn, uint32_t index, uint32_t pdn, uint32_t key);
    // A peer's SEND with invalidate names `rkey`: null when it was
    // invalidated, else why it could not be.
    const char *invalidateRemote(uint32_t pdn, uint32_t rkey);

  private:
    MemoryRegion *invalidatable(uint32_t pdn, uint32_t key, const char **why) const;
    const char *checkRegistration(const MemoryRegion *mr, uint32_t pdn,
                                  const pib_wqe_reg_mr &reg) const;
    bool readPageList(const pib_wqe_reg_mr &reg, const char **why);

    const Host &host_;
    Mtt &mtt_;
    ObjectTable<MemoryRegion> &mrs_;
    std::vector<uint64_t> pages_; // the last page list read, reused
};

} // namespace pib
