// SPDX-License-Identifier: GPL-2.0-or-later
// Memory regions at work: an L_Key or R_Key range translated to guest
// memory with the protection checks of IBA 10.6, and data moved between
// guest memory and packets by the scatter/gather lists of WQEs.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "host.hh"
#include "mtt.hh"
#include "object_table.hh"
#include "objects.hh"
#include "packet.hh"
#include "page_faults.hh"
#include "pib_hw.h"

namespace pib {

// A piece of guest memory that one DMA reaches.
struct Segment {
    uint64_t addr;
    uint64_t len;
};

class MemoryAccess {
  public:
    MemoryAccess(const Host &host, const Mtt &mtt, const ObjectTable<MemoryRegion> &mrs,
                 const ObjectTable<MemoryWindow> &mws)
        : host_(host), mtt_(mtt), mrs_(mrs), mws_(mws) {}

    // Appends to `out` the segments that hold [addr, addr + len) of the MR
    // `key` names, if PD `pdn` may reach them with `access`. Returns
    // PIB_WC_SUCCESS, or the completion status of the violation.
    uint8_t translate(uint32_t key, uint32_t pdn, uint64_t addr, uint64_t len, uint32_t access,
                      std::vector<Segment> &out) const;
    // The same for an R_Key, which may also name a memory window: QP
    // `qpn` asks (a type 2 window answers only the QP it is bound to).
    uint8_t translateRemote(uint32_t rkey, uint32_t pdn, uint32_t qpn, uint64_t addr, uint64_t len,
                            uint32_t access, std::vector<Segment> &out) const;
    // The same checks for a range of any length, whose segments nobody
    // needs yet (a whole message, before its packets move it): work
    // bounded by the key's entries, not by the range's segments.
    uint8_t check(uint32_t key, uint32_t pdn, uint64_t addr, uint64_t len, uint32_t access) const;
    uint8_t checkRemote(uint32_t rkey, uint32_t pdn, uint32_t qpn, uint64_t addr, uint64_t len,
                        uint32_t access) const;
    uint8_t gather(uint32_t pdn, std::span<const pib_wqe_data> sges, uint64_t maxLength,
                   std::vector<uint8_t> &out);
    uint8_t gatherInto(uint32_t pdn, std::span<const pib_wqe_data> sges, uint64_t offset,
                       std::span<uint8_t> dest);
    uint8_t gatherInto(uint32_t pdn, std::span<const pib_wqe_data> sges, uint64_t offset,
                       uint64_t len, iba::PacketWriter &packet);
    bool readIntoPacket(const Segment &s, iba::PacketWriter &packet);
    uint8_t scatter(uint32_t pdn, std::span<const pib_wqe_data> sges, std::span<const uint8_t> data,
                    uint64_t skip);
    // Where the last of the calls above that failed stopped at a page its
    // key does not map now (page_faults.hh), if that is why it failed;
    // taken once. Every translation or check starts it over.
    bool pendingFault() const { return fault_.has_value(); }
    std::optional<FaultSite> takeFault() {
        std::optional<FaultSite> site = fault_;
        fault_.reset();
        return site;
    }

  private:
    uint8_t forEachSegment(uint32_t pdn, std::span<const pib_wqe_data> sges, uint64_t offset,
                           uint64_t len, const std::function<bool(const Segment &)> &take);

    // The implementations of the above: `out` null checks only.
    uint8_t reach(uint32_t key, uint32_t pdn, uint64_t addr, uint64_t len, uint32_t access,
                  std::vector<Segment> *out) const;
    uint8_t reachRemote(uint32_t rkey, uint32_t pdn, uint32_t qpn, uint64_t addr, uint64_t len,
                        uint32_t access, std::vector<Segment> *out) const;
    uint8_t mapRegion(const MemoryRegion &mr, uint64_t addr, uint64_t len, uint32_t access,
                      std::vector<Segment> *out) const;
    uint8_t mapDirect(const MemoryRegion &mr, uint64_t addr, uint64_t len, uint32_t access,
                      std::vector<Segment> *out) const;
    bool pagesPresent(const MemoryRegion &mr, uint64_t addr, uint64_t len, uint32_t access) const;
    uint64_t entryOf(const MemoryRegion &mr, uint64_t page) const;
    uint8_t mapIndirect(const MemoryRegion &mr, uint64_t addr, uint64_t len, uint32_t access,
                        std::vector<Segment> *out) const;
    uint8_t mapKsm(const MemoryRegion &mr, uint64_t addr, uint64_t len, uint32_t access,
                   std::vector<Segment> *out) const;
    uint8_t mapImplicit(const MemoryRegion &mr, uint64_t addr, uint64_t len, uint32_t access,
                        std::vector<Segment> *out) const;
    bool reachesEntry(const MemoryRegion &mr, uint32_t key, uint32_t entryAccess) const;

    const Host &host_;
    const Mtt &mtt_;

    const ObjectTable<MemoryRegion> &mrs_;
    const ObjectTable<MemoryWindow> &mws_;
    // Lists of segments, kept for the next packet: the data path then
    // allocates no memory per packet. One per function, as neither calls
    // the other while it holds its list.
    std::vector<Segment> gatherSegments_, scatterSegments_;
    mutable std::optional<FaultSite> fault_;
};

} // namespace pib
