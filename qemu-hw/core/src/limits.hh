// SPDX-License-Identifier: GPL-2.0-or-later
// The resource limits the device enforces and reports in pib_dev_cap.
#pragma once

#include <cstdint>

namespace pib::limits {

inline constexpr uint32_t kMaxQp = 4096;
inline constexpr uint32_t kLogMaxQpWr = 14;
// ConnectX's log_max_qp_sz counts an SQ in 64-byte basic blocks, and
// mlx5_ib sizes one as WRs times the blocks of its largest WQE: rpcrdma's
// 2977 WRs of 448 bytes need 2^15, what a ConnectX-5 reports.
inline constexpr uint32_t kLogMaxMlx5QpSize = 15;
inline constexpr uint32_t kMaxSge = 32;
// DC connections (dc_targets.hh) of all DCTs: what a DCT keeps of each
// DCI that reaches it. A full table takes a new DCI in place of the one
// idle longest, if that one is idle kDcIdleNs or more.
inline constexpr uint32_t kMaxDcConnections = 1024;
inline constexpr uint64_t kDcIdleNs = 1'000'000'000;
inline constexpr uint32_t kMaxCq = 4096;
inline constexpr uint32_t kLogMaxCqe = 22; // as ConnectX: libfabric's RxM asks for 2^18
// Completion event moderation: a count of CQEs, a period in us (ConnectX's
// cq_period has 12 bits).
inline constexpr uint16_t kMaxCqModerationCount = 0xffff;
inline constexpr uint16_t kMaxCqModerationPeriod = 4095;
inline constexpr uint32_t kMaxMr = 65536;
inline constexpr uint32_t kMaxMw = 65536;
inline constexpr uint32_t kMaxPd = 65536;
inline constexpr uint32_t kMaxXrcd = 65536;
inline constexpr uint32_t kMaxRdAtom = 16;
// Counter sets a front end hands out (ConnectX Q counters), numbered from
// 1: 0 names none. mlx5_ib takes one per port, and one more per counter
// `rdma statistic` binds QPs to.
inline constexpr uint32_t kMaxCounterSets = 64;
// ConnectX user contexts (uids 1 to this, docs/mlx5.md §16): mlx5_ib makes
// one for every process that opens the device.
inline constexpr uint32_t kMaxUserContexts = 256;
inline constexpr uint32_t kMaxSrq = 4096;
inline constexpr uint32_t kLogMaxSrqWr = 14;
inline constexpr uint32_t kMaxInlineData = 1024;
inline constexpr uint32_t kMaxMtt = 1u << 20;
// Translation entries (8 bytes each) ConnectX keys keep with themselves,
// all keys together (Mtt::takeKeyEntries): 64 MiB of the host's memory
// at most. An implicit on-demand region takes 2^18 for its KSM table and
// 2^18 for each GiB of the address space its process touches.
inline constexpr uint32_t kMaxKeyEntries = 1u << 23;
// Entries of a KSM key's table (a ConnectX implicit on-demand region's):
// 2^17 spans of 1 GiB cover a 47-bit address space.
inline constexpr uint32_t kMaxKsmEntries = 1u << 17;
// The largest page of a key that faults on every page (ConnectX's null
// key of an implicit region: 2^61-byte pages, all absent).
inline constexpr uint32_t kMaxPagedLogPageSize = 61;
inline constexpr uint32_t kMaxEq = 32;
inline constexpr uint32_t kLogMaxEqe = 16;
inline constexpr uint32_t kLogMinWqeStride = 6;
inline constexpr uint32_t kLogMaxWqeStride = 11;
inline constexpr uint64_t kMaxMrSize = uint64_t{1} << 40;
inline constexpr uint32_t kMinLogPageSize = 12;
inline constexpr uint32_t kMaxLogPageSize = 30;
// Pages one REG_MR WQE maps (2 MiB in 4 KiB pages): its page list is read
// whole while the doorbell runs.
inline constexpr uint32_t kMaxFastRegPages = 512;
// Entries of an indirect key's table (a ConnectX KLM key): as many, the
// one list size a ConnectX advertises for both (log_max_klm_list_size).
inline constexpr uint32_t kMaxIndirectEntries = kMaxFastRegPages;
// Pieces one translation through an indirect key yields: a packet of the
// largest MTU at a byte a piece. A longer one (a DMA copy through a key
// of tiny pieces) fails rather than cost a callback a byte.
inline constexpr uint32_t kMaxIndirectPieces = 4096;
inline constexpr uint8_t kLocalCaAckDelay = 15;
// The core clock is the transport's clock, which counts nanoseconds: 1 GHz.
inline constexpr uint32_t kCoreClockKhz = 1'000'000;
inline constexpr uint32_t kMaxMsgSize = 1u << 31;
// The most one DMA copy WQE (ConnectX's MMO) moves: it runs whole while
// the doorbell or the scheduler's turn runs.
inline constexpr uint32_t kMaxDmaCopy = 1u << 20;
// A DCI's streams (dci_streams.hh): up to 2^4, and up to 2^4 in error at
// once before the DCI fails (each a 2-byte entry a DCI keeps).
inline constexpr uint8_t kLogMaxDciStreams = 4;
inline constexpr uint8_t kLogMaxDciErroredStreams = 4;
// Multicast: groups per device, QPs per group, attachments in all.
inline constexpr uint32_t kMaxMcastGroups = 256;
inline constexpr uint32_t kMaxMcastQpAttach = 32;
inline constexpr uint32_t kMaxTotalMcastQpAttach = 1024;
// Bytes the device holds for fetched, uncompleted send WQEs of all
// connected QPs beyond each QP's first (outstanding_memory.hh).
inline constexpr uint64_t kOutstandingWqeBytes = 16 << 20;
// Packets one event (a BAR access, a chunk of bytes from a port, the
// timer, a bottom half) may send: at most 512 KiB of payload, some 100 us
// of copying and checksums. More waits for the next run (scheduler.cc).
inline constexpr uint32_t kPacketsPerEvent = 128;
// WQEs a flush completes for one packet of that budget: a control
// segment read and a CQE written are far less work than a packet, but a
// QP in the error state with 2 x 16384 WQEs still takes 32 events.
inline constexpr uint32_t kFlushesPerPacket = 8;

} // namespace pib::limits
