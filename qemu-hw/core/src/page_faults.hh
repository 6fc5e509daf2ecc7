// SPDX-License-Identifier: GPL-2.0-or-later
// On-demand paging's page faults (docs/mlx5.md §10.6). A key whose entries
// carry present bits (MemoryRegion::pagedEntries) maps a page only while
// the driver says so; a transfer that reaches a page it does not map (or
// maps read-only, for a write) stops there, and the device asks the
// driver, by an event, to map it.
//
// A QP's requester then waits with its send queue held at that WQE until
// the driver resumes the fault, and fetches it again; a responder answers
// the request with an RNR NAK, so that the peer sends it again after its
// RNR timer, and drops a UC or UD message. Neither stalls anything else.
//
// Each QP has at most one fault outstanding per side, named by a token
// that says which QP and side it is: the driver's answer needs no table
// to find it, and a guest can make the device hold no more than two per
// QP. A fault the driver does not answer within kWaitNs, or answers with
// an error, fails the side's next fault: the requester's WQE completes
// with a local protection error, the responder NAKs a remote access error.
#pragma once

#include <cstdint>

namespace pib {

// Where a transfer reached a page its key does not map now.
struct FaultSite {
    uint32_t key = 0;
    uint64_t va = 0;     // the first byte it could not reach
    uint64_t length = 0; // from there to the end of the transfer's range
    bool write = false;  // the transfer writes the page
    // Reached through a KSM key's span (an implicit region's): that key,
    // and the byte's address in it; 0 otherwise.
    uint32_t region = 0;
    uint64_t regionVa = 0;
};

enum class FaultSide : uint8_t { kRequester = 0, kResponder = 1 };

// One side of a QP's faults.
struct PageFaultWait {
    uint64_t token = 0;    // the outstanding fault's; 0 for none
    uint64_t deadline = 0; // when the device stops waiting for the driver
    uint64_t raisedAt = 0; // when the device raised it (its trace says how long it took)
    // The driver could not map the last fault's pages, or did not answer
    // in time: the side's next fault fails its transfer instead, if it is
    // on the same key (or any key, after a timeout). A fault on another
    // key is a new one: the driver changed the translation meanwhile (an
    // implicit region's span given a new child, docs/mlx5.md §10.7).
    bool failed = false;
    uint32_t key = 0; // the outstanding or failed fault's; 0 after a timeout: any
    // The driver failed the last fault once: the side asks again after
    // kRetryNs (`retrying` meanwhile: a responder RNR NAKs) before it
    // gives up, through an implicit region's span on the region's key.
    // mlx5_ib fails a fault on an implicit region's child it is
    // destroying, and points the span elsewhere a moment later.
    bool failedOnce = false;
    bool retrying = false;
    uint32_t serial = 0; // faults raised, for the next token

    bool waiting() const { return token != 0 || retrying; }
};

// What a personality tells its driver about a fault.
struct PageFaultReport {
    FaultSite site;
    uint64_t token = 0;
    uint32_t qpn = 0;
    FaultSide side = FaultSide::kRequester;
};

namespace page_fault {

// How long a fault waits for the driver: under TCG a guest's fault
// handler may take a while, but not this long.
inline constexpr uint64_t kWaitNs = 10'000'000'000;
// How long a requester waits before it asks again after the driver failed
// a fault once: time for the driver's deferred work to change the
// translation.
inline constexpr uint64_t kRetryNs = 20'000'000;

// A token: the QP's number in bits 23:0, the side in bit 24, the side's
// serial in bits 46:25, bit 47 set (48 bits, as ConnectX's event carries
// them; never 0).
inline uint64_t token(uint32_t qpn, FaultSide side, uint32_t serial) {
    return uint64_t{1} << 47 | uint64_t{serial & 0x3fffff} << 25 |
           uint64_t{static_cast<uint8_t>(side)} << 24 | (qpn & 0xffffff);
}
inline uint32_t tokenQpn(uint64_t token) {
    return token & 0xffffff;
}
inline FaultSide tokenSide(uint64_t token) {
    return static_cast<FaultSide>(token >> 24 & 1);
}

} // namespace page_fault

} // namespace pib
