// SPDX-License-Identifier: GPL-2.0-or-later
// libFuzzer harness of the ConnectX personality's ways in from a hostile
// driver: initialization segment writes, command slots (well-formed
// commands of every opcode the device knows, with any input, output
// length and op_mod; slots and mailbox chains corrupted after they were
// built; SET_HCA_CAP as mlx5_core writes it, in a function enabled and
// not yet initialized), doorbells for any slots, EQs made of the
// harness's pages and their UAR doorbells, BAR reads, resets and internal
// errors; and, in a
// function set up with UD and RC QPs in RTS on an ACTIVE port, send WQEs
// (well-formed or not) rung through blue-flame registers, receive WQEs
// posted through doorbell records, state changes and QPs made and
// destroyed, so that the WQE reader, the transports and the CQEs run.
// The device must survive all of it and keep its promises: a slot it
// completes is the driver's again, and the pages it holds are the ones it
// was given. In a seventh of the runs, two tenants (Tenants, below): a
// user process attacks the kernel's memory and keys through its own QPs,
// and must not reach them; in another seventh, two user contexts
// (fuzz_mlx5_contexts.hh): one process's commands attack the other's
// objects, and must not touch them.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_set>

#include "fuzz_mlx5_contexts.hh"
#include "mlx5/mlx5_hca_caps.hh"
#include "mlx5_function.hh"
#include "mlx5_host.hh"
#include "mlx5_umr_wqes.hh"

using namespace pib::mlx5;
using pib::testing::Mlx5Function;
namespace qpc = pib::testing::mlx5qp;
namespace mlx5umr = pib::testing::mlx5umr;

namespace {

void check(bool ok, const char *what) {
    if (!ok) {
        std::fprintf(stderr, "fuzz-mlx5: invariant broken: %s\n", what);
        std::abort();
    }
}

// The opcodes the device executes, and a few it knows only by name.
constexpr uint16_t kOpcodes[] = {
    0x100, 0x101, 0x102, 0x103, 0x104, 0x105, 0x107, 0x108, 0x109, 0x10a, 0x10b,
    0x200, 0x202, 0x301, 0x302, 0x400, 0x401, 0x403, 0x500, 0x501, 0x502, 0x503,
    0x504, 0x505, 0x506, 0x507, 0x50a, 0x50b, 0x50c, 0x50d, 0x50e, 0x700, 0x701,
    0x702, 0x703, 0x762, 0x800, 0x801, 0x802, 0x803, 0x805, 0x806, 0x807, 0x80e,
    0x80f, 0x771, 0x772, 0x773, 0x710, 0x711, 0x712, 0x713, 0x714, 0xa04, 0xa06};
constexpr uint32_t kIsegOffsets[] = {iseg::kCmdqAddrHigh, iseg::kCmdqAddrLowSize,
                                     iseg::kCmdDoorbell,  iseg::kFwRev,
                                     iseg::kInitializing, iseg::kHealthCounter};

// Pages a driver could give: the harness's few, so that RAM lasts.
struct Pages {
    explicit Pages(Mlx5Host &host) {
        for (auto &page : list)
            page = host.alloc(4096);
    }
    uint64_t pick(FuzzedDataProvider &in) const { return in.PickValueInArray(list); }
    // A doorbell record: 64-byte aligned in one of the pages, or anywhere.
    uint64_t record(FuzzedDataProvider &in) const {
        return in.ConsumeBool() ? pick(in) + 64 * in.ConsumeIntegralInRange<uint32_t>(0, 63)
                                : in.ConsumeIntegral<uint64_t>();
    }
    uint64_t list[12];
};

// A CREATE_EQ that may well succeed: up to 2^7 EQEs in the harness's
// pages (or anywhere), on one of the first UAR pages, a vector that may
// not exist, any event types.
std::vector<uint8_t> eqInput(FuzzedDataProvider &in, const Pages &pages) {
    const uint32_t logSize = in.ConsumeIntegralInRange<uint32_t>(0, 7);
    const uint32_t count = logSize > 6 ? 2 : 1;
    auto cmd = Mlx5Host::input(0x301, 0, 0x110 + 8 * count);
    set(cmd, field(0xe3, 5), logSize);
    set(cmd, field(0xe8, 24), in.ConsumeIntegralInRange<uint32_t>(2, 5));
    set(cmd, field(0x134, 12), in.ConsumeIntegralInRange<uint32_t>(0, 9));
    writeBe64(&cmd[0x58], in.ConsumeBool() ? 1u << 0x0a : in.ConsumeIntegral<uint64_t>());
    for (uint32_t i = 0; i < count; ++i)
        writeBe64(&cmd[0x110 + 8 * i],
                  in.ConsumeBool() ? pages.pick(in) : in.ConsumeIntegral<uint64_t>());
    return cmd;
}

// A CREATE_CQ that may well succeed: up to 2^7 CQEs of 64 or 128 bytes
// in the harness's pages (or anywhere), for one of the first EQs and UAR
// pages, its doorbell record in a page or anywhere, now and then a field
// the device does not offer.
std::vector<uint8_t> cqInput(FuzzedDataProvider &in, const Pages &pages) {
    const uint32_t logSize = in.ConsumeIntegralInRange<uint32_t>(0, 7);
    const uint32_t cqeSize = in.ConsumeIntegralInRange<uint32_t>(0, 1);
    const uint32_t log = logSize + 6 + cqeSize;
    const uint32_t count = log > 12 ? 1u << (log - 12) : 1;
    auto cmd = Mlx5Host::input(0x400, 0, 0x110 + 8 * count);
    set(cmd, field(0x80 + 0x08, 3), cqeSize);
    set(cmd, field(0x80 + 0x63, 5), logSize);
    set(cmd, field(0x80 + 0x68, 24), in.ConsumeIntegralInRange<uint32_t>(2, 5));
    set(cmd, field(0x80 + 0xa0, 32), in.ConsumeIntegralInRange<uint32_t>(0, 3));
    set(cmd, field(0x80 + 0x1c0, 64), pages.record(in));
    if (in.ConsumeBool())
        set(cmd, field(0x80 + 8 * in.ConsumeIntegralInRange<uint32_t>(0, 3), 8),
            in.ConsumeIntegral<uint8_t>()); // cqe_sz, cc, oi, compression...
    for (uint32_t i = 0; i < count; ++i)
        writeBe64(&cmd[0x110 + 8 * i],
                  in.ConsumeBool() ? pages.pick(in) : in.ConsumeIntegral<uint64_t>());
    return cmd;
}

// A MODIFY_CQ of one of the first CQs: its event moderation (op_mod 0),
// the period, the count or both as the field select says, or a resize
// (op_mod 1) to a ring as CREATE_CQ's.
std::vector<uint8_t> modifyCqInput(FuzzedDataProvider &in, const Pages &pages) {
    const bool resize = in.ConsumeBool();
    auto cmd = resize ? cqInput(in, pages) : Mlx5Host::input(0x403, 0, 0x110);
    cmd[1] = 0x03;
    set(cmd, field(0x30, 16), resize);
    set(cmd, field(0x48, 24), in.ConsumeIntegralInRange<uint32_t>(0, 5));
    set(cmd, field(0x60, 32), in.ConsumeIntegralInRange<uint32_t>(0, 7));
    if (!resize) {
        set(cmd, field(0x80 + 0x84, 12), in.ConsumeIntegralInRange<uint32_t>(0, 0xfff));
        set(cmd, field(0x80 + 0x90, 16), in.ConsumeIntegral<uint16_t>());
    }
    return cmd;
}

// A CREATE_SRQ as mlx5_ib's: up to 2^7 WQEs of 16 to 256 bytes in the
// harness's pages (or anywhere), in one of the first PDs, XRC domains and
// CQs, with any limit, its doorbell record in a page or anywhere.
std::vector<uint8_t> srqInput(FuzzedDataProvider &in, const Pages &pages) {
    const uint32_t logSize = in.ConsumeIntegralInRange<uint32_t>(0, 7);
    const uint32_t logStride = in.ConsumeIntegralInRange<uint32_t>(0, 4);
    const uint32_t log = logSize + logStride + 4;
    const uint32_t count = log > 12 ? 1u << (log - 12) : 1;
    auto cmd = Mlx5Host::input(0x700, 0, 0x110 + 8 * count);
    set(cmd, field(0x80 + 0x04, 4), logSize);
    set(cmd, field(0x80 + 0x25, 3), logStride);
    set(cmd, field(0x80 + 0x28, 24), in.ConsumeIntegralInRange<uint32_t>(0, 3));
    set(cmd, field(0x80 + 0x48, 24), in.ConsumeIntegralInRange<uint32_t>(0, 3));
    set(cmd, field(0x80 + 0xc8, 24), in.ConsumeIntegralInRange<uint32_t>(0, 3));
    set(cmd, field(0x80 + 0xe0, 16), in.ConsumeIntegralInRange<uint32_t>(0, 1u << logSize));
    set(cmd, field(0x80 + 0x140, 64), pages.record(in));
    for (uint32_t i = 0; i < count; ++i)
        writeBe64(&cmd[0x110 + 8 * i],
                  in.ConsumeBool() ? pages.pick(in) : in.ConsumeIntegral<uint64_t>());
    return cmd;
}

// A CREATE_MKEY as mlx5_ib's DMA keys are, or its keys made with their
// pages (reg_create), in one of the first PDs, with any access bits,
// length and a few fields that may be wrong.
std::vector<uint8_t> mkeyInput(FuzzedDataProvider &in, const Pages &pages) {
    const uint32_t entries = in.ConsumeIntegralInRange<uint32_t>(0, 6);
    auto cmd = Mlx5Host::input(0x200, 0, 0x110 + 8 * entries);
    set(cmd, field(0x90, 1), in.ConsumeBool());                           // umr_en
    set(cmd, field(0x91, 5), in.ConsumeIntegralInRange<uint32_t>(0, 31)); // a, rw, rr, lw, lr
    set(cmd, field(0x96, 2), in.ConsumeBool() ? 0 : 1);                   // PA, or MTT
    set(cmd, field(0xa0, 24), in.ConsumeBool() ? 0xffffff : in.ConsumeIntegral<uint32_t>());
    set(cmd, field(0xb8, 8), in.ConsumeIntegral<uint8_t>());
    set(cmd, field(0xe0, 1), in.ConsumeBool());
    set(cmd, field(0xe8, 24), in.ConsumeIntegralInRange<uint32_t>(0, 3));
    set(cmd, field(0x100, 64), in.ConsumeBool() ? 0 : in.ConsumeIntegral<uint64_t>());
    set(cmd, field(0x140, 64),
        in.ConsumeBool() ? in.ConsumeIntegralInRange<uint64_t>(1, 6 * 4096)
                         : in.ConsumeIntegral<uint64_t>());
    set(cmd, field(0x220, 32), in.ConsumeIntegralInRange<uint32_t>(0, 4)); // the table
    set(cmd, field(0x25a, 6), in.ConsumeBool() ? 12 : in.ConsumeIntegral<uint8_t>());
    set(cmd, field(0x300, 32), in.ConsumeBool() ? entries / 2 : in.ConsumeIntegral<uint32_t>());
    for (uint32_t i = 0; i < entries; ++i)
        writeBe64(&cmd[0x110 + 8 * i],
                  in.ConsumeBool() ? pages.pick(in) | 3 : in.ConsumeIntegral<uint64_t>());
    return cmd;
}

// An EQ doorbell on one of the first UAR pages, for one of the first EQs.
void eqDoorbell(FuzzedDataProvider &in, Mlx5Host &host) {
    const uint32_t uar = in.ConsumeIntegralInRange<uint32_t>(3, 5);
    const uint32_t offset = in.ConsumeBool() ? 0x40 : 0x48;
    const uint32_t eqn = in.ConsumeIntegralInRange<uint32_t>(0, 3);
    host.uarWrite(uar, offset, eqn << 24 | in.ConsumeIntegralInRange<uint32_t>(0, 300));
}

// A CQ arm doorbell as mlx5_cq_arm writes it (two big-endian dwords), for
// one of the first CQs, or any 64-bit value.
void cqDoorbell(FuzzedDataProvider &in, Mlx5Host &host) {
    const uint32_t uar = in.ConsumeIntegralInRange<uint32_t>(3, 5);
    uint64_t value = in.ConsumeIntegral<uint64_t>();
    if (in.ConsumeBool()) {
        const uint32_t word = in.ConsumeIntegralInRange<uint32_t>(0, 3) << 28 |
                              in.ConsumeIntegralInRange<uint32_t>(0, 2) << 24 |
                              in.ConsumeIntegralInRange<uint32_t>(0, 300);
        const uint32_t cqn = in.ConsumeIntegralInRange<uint32_t>(0, 3);
        value = uint64_t{__builtin_bswap32(cqn)} << 32 | __builtin_bswap32(word);
    }
    pib_core_bar_write(host.core, PIB_BAR_REGS, uint64_t{uar} * 4096 + 0x20, value, 8);
}

// An async event the core raises, as the ConnectX reports it.
void asyncEvent(FuzzedDataProvider &in, Mlx5Host &host) {
    static const char *const kEvents[] = {
        "cq-err",    "port-active", "port-err",          "lid-change",
        "sm-change", "pkey-change", "client-reregister", "gid-change"};
    const std::string line = std::string("event ") + in.PickValueInArray(kEvents) + " " +
                             std::to_string(in.ConsumeIntegralInRange<uint32_t>(0, 3));
    char *answer = nullptr;
    pib_core_inject(host.core, line.c_str(), &answer);
    std::free(answer);
}

// ACCESS_REG of a register the device has (PCAP, NODE_DESC,
// HOST_ENDIANNESS, MCQS, MCQI, MCAM) or not, read or written, its data
// whatever comes: a PCAP names port 1, 2 or another.
std::vector<uint8_t> registerInput(FuzzedDataProvider &in) {
    static constexpr uint16_t kRegisters[] = {0x5001, 0x6001, 0x7004, 0x9060, 0x9061, 0x907f};
    auto cmd = Mlx5Host::input(0x805, in.ConsumeIntegralInRange<uint16_t>(0, 2),
                               0x10 + in.ConsumeIntegralInRange<size_t>(0, 0x50));
    const uint16_t id =
        in.ConsumeBool() ? in.PickValueInArray(kRegisters) : in.ConsumeIntegral<uint16_t>();
    set(cmd, field(0x50, 16), id);
    for (size_t i = 0x10; i < cmd.size() && in.remaining_bytes(); ++i)
        cmd[i] = in.ConsumeIntegral<uint8_t>();
    if (id == 0x5001 && cmd.size() > 0x11 && in.ConsumeBool())
        cmd[0x11] = in.ConsumeIntegralInRange<uint8_t>(1, 2); // local_port
    return cmd;
}

// A SET_HCA_CAP as mlx5_core's: the general capabilities the device
// reports as current (QUERY_HCA_CAP), a field changed (log_max_qp, as the
// driver lowers it, or any byte), for the general type or another.
std::vector<uint8_t> capInput(FuzzedDataProvider &in, Mlx5Host &host) {
    const Mlx5Host::Reply current = host.run(Mlx5Host::input(0x100, 1), 0x10 + HcaCaps::kPageBytes);
    auto cmd = Mlx5Host::input(0x109, in.ConsumeBool() ? 0 : in.ConsumeIntegral<uint8_t>() << 1,
                               0x10 + HcaCaps::kPageBytes);
    std::copy(current.out.begin() + 0x10, current.out.end(), cmd.begin() + 0x10);
    if (in.ConsumeBool())
        set(cmd, field(0x10 + 0x09b, 5), in.ConsumeIntegralInRange<uint32_t>(0, 31)); // log_max_qp
    else
        cmd[0x10 + in.ConsumeIntegralInRange<size_t>(0, HcaCaps::kPageBytes - 1)] =
            in.ConsumeIntegral<uint8_t>();
    return cmd;
}

// A command's input: its header, then fields the harness fills (page
// addresses for MANAGE_PAGES are guest pages or anything).
std::vector<uint8_t> commandInput(FuzzedDataProvider &in, Mlx5Host &host, const Pages &pages) {
    const uint16_t opcode =
        in.ConsumeBool() ? in.PickValueInArray(kOpcodes) : in.ConsumeIntegral<uint16_t>();
    const uint16_t opMod = in.ConsumeIntegralInRange<uint16_t>(0, 8);
    const size_t bytes =
        in.ConsumeBool() ? 0x10 + HcaCaps::kPageBytes : in.ConsumeIntegralInRange<size_t>(0, 0x200);
    auto cmd = Mlx5Host::input(opcode, opMod, std::max<size_t>(bytes, 0x10));
    cmd.resize(bytes);
    if (opcode == 0x301 && in.ConsumeBool())
        return eqInput(in, pages);
    if (opcode == 0x200 && in.ConsumeBool())
        return mkeyInput(in, pages);
    if (opcode == 0x400 && in.ConsumeBool())
        return cqInput(in, pages);
    if (opcode == 0x403 && in.ConsumeBool())
        return modifyCqInput(in, pages);
    if (opcode == 0x700 && in.ConsumeBool())
        return srqInput(in, pages);
    if (opcode == 0x805 && in.ConsumeBool())
        return registerInput(in);
    if (opcode == 0x109 && in.ConsumeBool())
        return capInput(in, host);
    if (in.ConsumeBool()) { // an object the device may have: a small number
        if (opcode == 0x202 || opcode == 0x401 || (opcode >= 0x701 && opcode <= 0x703) ||
            opcode == 0x801 || opcode == 0x803 || opcode == 0x80f) {
            auto cmd = Mlx5Host::input(opcode, opMod);
            set(cmd, field(0x48, 24), in.ConsumeIntegralInRange<uint32_t>(0, 5));
            set(cmd, field(0x70, 16), in.ConsumeIntegralInRange<uint32_t>(0, 9)); // ARM_RQ's lwm
            return cmd;
        }
        if (opcode == 0x302) {
            auto cmd = Mlx5Host::input(opcode, opMod);
            set(cmd, field(0x58, 8), in.ConsumeIntegralInRange<uint32_t>(0, 3));
            return cmd;
        }
    }
    if (opcode == 0x108 && bytes >= 0x10) { // pages: some real, some not
        const uint32_t n = static_cast<uint32_t>((bytes - 0x10) / 8);
        set(cmd, field(0x60, 32), in.ConsumeBool() ? n : in.ConsumeIntegral<uint32_t>());
        for (uint32_t i = 0; i < n; ++i)
            writeBe64(&cmd[0x10 + 8 * i],
                      in.ConsumeBool() ? pages.pick(in) : in.ConsumeIntegral<uint64_t>());
    } else {
        for (size_t i = 0x10; i + 4 <= bytes && in.remaining_bytes(); i += 4)
            writeBe32(&cmd[i], in.ConsumeIntegral<uint32_t>());
    }
    return cmd;
}

// The queue where the harness put it, or somewhere a write moved it.
struct Queue {
    bool inPlace = true;
    void write(Mlx5Host &host, uint32_t offset, uint32_t value) {
        host.isegWrite(offset, value);
        if (offset == iseg::kCmdqAddrHigh)
            highInPlace = value == static_cast<uint32_t>(host.queue >> 32);
        if (offset == iseg::kCmdqAddrLowSize)
            inPlace = highInPlace && (value & 0xfffff000u) == static_cast<uint32_t>(host.queue);
    }
    void restore(Mlx5Host &host) {
        write(host, iseg::kCmdqAddrHigh, static_cast<uint32_t>(host.queue >> 32));
        write(host, iseg::kCmdqAddrLowSize, static_cast<uint32_t>(host.queue));
    }
    bool highInPlace = true;
};

void runCommand(FuzzedDataProvider &in, Mlx5Host &host, const Pages &pages, const Queue &queue) {
    const auto cmd = commandInput(in, host, pages);
    const uint32_t outBytes = in.ConsumeBool() ? 0x10 + HcaCaps::kPageBytes
                                               : in.ConsumeIntegralInRange<uint32_t>(0, 0x400);
    const unsigned slot = in.ConsumeIntegralInRange<unsigned>(0, cmdq::kSlots - 1);
    const Mlx5Host::Reply r = host.run(cmd, outBytes, slot);
    // With the queue where it was put, a rung slot the driver owned is
    // always handed back.
    if (queue.inPlace)
        check(!r.owned(), "a command slot stays the device's after its doorbell");
}

// Corrupts a byte of the queue page or of RAM near it, then rings.
void corruptAndRing(FuzzedDataProvider &in, Mlx5Host &host) {
    const uint64_t at = host.queue + in.ConsumeIntegralInRange<uint64_t>(0, 2 * 4096 - 1);
    if (host.inRam(at, 1))
        *host.at(at) = in.ConsumeIntegral<uint8_t>();
    host.isegWrite(iseg::kCmdDoorbell, in.ConsumeIntegral<uint32_t>());
}

// A function with QPs in RTS on an ACTIVE port (mlx5_function.hh): two
// UD QPs and two RC QPs connected to each other through the port's
// loopback. The steps below post work on them, as a driver would or not.
struct QpWorld {
    explicit QpWorld(Mlx5Host &host) : f(host) {}

    bool setUp() {
        if (!f.setUp() || !f.activatePort())
            return false;
        for (const uint8_t st : {qpc::kUd, qpc::kUd, qpc::kRc, qpc::kRc}) {
            const auto qp = f.createQp(st, 1, 3, 4);
            if (!qp)
                return false;
            qps.push_back({*qp, st == qpc::kUd});
        }
        // A fifth, UD, receiving on an SRQ whose free list is out of order.
        srq = f.createSrq(3, {0, 5, 2, 7, 1, 3, 4, 6});
        const auto onSrq = srq ? f.createQpOnSrq(qpc::kUd, srq->srqn) : std::nullopt;
        if (!onSrq || !f.toRts(onSrq->qpn))
            return false;
        qps.push_back({*onSrq, true});
        // A sixth, the driver's UMR QP (docs/mlx5.md §10.1).
        const auto umrQp = f.createQp(kRegUmr, std::nullopt, 0, 4);
        if (!umrQp || !f.toRts(umrQp->qpn))
            return false;
        qps.push_back({*umrQp, false});
        // A free key for UMR WQEs to register and invalidate.
        auto key = Mlx5Host::input(0x200, 0, 0x110);
        set(key, field(0x81, 1), 1);         // free
        set(key, field(0x90, 1), 1);         // umr_en
        set(key, field(0x94, 2), 3);         // lw, lr
        set(key, field(0x96, 2), 1);         // MTT
        set(key, field(0xa0, 24), 0xffffff); // no QP
        set(key, field(0xe8, 24), f.pd);
        set(key, field(0x220, 32), 8); // 16 pages
        const auto made = f.host.run(key, 16);
        freeKey = static_cast<uint32_t>(made.get(qpc::kHeld)) << 8;
        // An indirect key (docs/mlx5.md §10.4) for libmlx5's UMRs to lay out.
        const auto klm = f.host.run(mlx5umr::klmKeyInput(f.pd, 8), 16);
        indirectKey = static_cast<uint32_t>(klm.get(qpc::kHeld)) << 8;
        // A seventh, a DCI with four streams, failing at two in error, and
        // a DCT on the SRQ (docs/mlx5.md §15).
        const auto dci = f.createDci(srq->srqn, 5, 2, 1);
        if (!dci || !f.toRts(dci->qpn, {.ackTimeout = 10, .retries = 3, .rnrRetries = 3}))
            return false;
        qps.push_back({*dci, false});
        const auto dct = f.host.run(f.dctInput(srq->srqn, kDcKey), 16);
        dctn = static_cast<uint32_t>(dct.get(qpc::kHeld));
        // The driver's page fault EQ (docs/mlx5.md §10.6).
        f.host.run(f.host.eqInput(4, uint64_t{1} << 0xc, 0, f.uar, &faultRing), 16);
        // An implicit region's KSM key of 4 spans and its null key (§10.7).
        auto ksm = Mlx5Host::input(0x200, 0, 0x110);
        set(ksm, field(0x81, 1), 1);         // free
        set(ksm, field(0x90, 1), 1);         // umr_en
        set(ksm, field(0x91, 5), 0x1f);      // a rw rr lw lr
        set(ksm, field(0x96, 2), 3);         // KSM
        set(ksm, field(0xa0, 24), 0xffffff); // no QP
        set(ksm, field(0xe8, 24), f.pd);
        set(ksm, field(0x220, 32), 4);
        ksmKey = static_cast<uint32_t>(f.host.run(ksm, 16).get(qpc::kHeld)) << 8;
        auto null = Mlx5Host::input(0x200, 0, 0x110 + 64);
        set(null, field(0x60, 1), 1);   // pg_access
        set(null, field(0x300, 32), 4); // its 8 entries, all absent
        set(null, field(0x91, 5), 0x1f);
        set(null, field(0x96, 2), 1); // MTT
        set(null, field(0xa0, 24), 0xffffff);
        set(null, field(0xe0, 1), 1); // length64
        set(null, field(0xe8, 24), f.pd);
        set(null, field(0x220, 32), 4);
        set(null, field(0x25a, 6), 61);
        nullKey = static_cast<uint32_t>(f.host.run(null, 16).get(qpc::kHeld)) << 8;
        return dct.status() == 0 && made.status() == 0 && f.toRts(qps[0].qp.qpn) &&
               f.toRts(qps[1].qp.qpn) && f.toRts(qps[2].qp.qpn, {.qpn = qps[3].qp.qpn}) &&
               f.toRts(qps[3].qp.qpn, {.qpn = qps[2].qp.qpn});
    }

    struct Entry {
        Mlx5Function::Qp qp;
        bool ud;
    };
    Entry &pick(FuzzedDataProvider &in) {
        return qps[in.ConsumeIntegralInRange<size_t>(0, qps.size() - 1)];
    }

    // A send WQE of any opcode, segments for it or not, then maybe a
    // corrupted byte or counter, rung at a blue-flame offset or not.
    void send(FuzzedDataProvider &in, const Pages &pages) {
        static constexpr uint8_t kOpcodes[] = {
            qpc::kSend, qpc::kRdmaWrite, qpc::kRdmaRead, 0x09, 0x0b, 0x11, 0x12, 0x01, 0x00};
        Entry &e = pick(in);
        const Mlx5Function::Send s{
            .opcode =
                in.ConsumeBool() ? in.PickValueInArray(kOpcodes) : in.ConsumeIntegral<uint8_t>(),
            .remoteQpn = in.ConsumeBool() ? qps[in.PickValueInArray(kUdPeers)].qp.qpn
                                          : in.ConsumeIntegral<uint32_t>() & 0xffffff,
            .addr = in.ConsumeBool() ? pages.pick(in) : in.ConsumeIntegral<uint64_t>(),
            .length = in.ConsumeIntegralInRange<uint32_t>(0, in.ConsumeBool() ? 8192 : ~0u),
            .remoteAddr = in.ConsumeBool() ? pages.pick(in) : in.ConsumeIntegral<uint64_t>()};
        const bool ud = in.ConsumeBool() ? e.ud : !e.ud; // now and then the other layout
        const uint32_t index = e.qp.sqPosted;
        uint64_t first8 = f.writeSend(e.qp, ud, s);
        if (in.ConsumeBool()) { // a byte of the WQE's first two blocks
            const uint32_t at = in.ConsumeIntegralInRange<uint32_t>(0, 127);
            f.host.at(e.qp.sqByte(index + at / 64))[at % 64] = in.ConsumeIntegral<uint8_t>();
        }
        if (in.ConsumeBool())
            writeBe32(f.host.at(e.qp.record + 4), in.ConsumeIntegral<uint32_t>());
        if (in.ConsumeBool())
            first8 = in.ConsumeIntegral<uint64_t>();
        // A blue-flame register, anywhere in them, or the doorbell of an
        // SQ without a record (docs/mlx5.md §10.3).
        const uint32_t offset = !in.ConsumeIntegralInRange<int>(0, 5) ? 0x600
                                : in.ConsumeBool()
                                    ? 0x800 + 0x100 * in.ConsumeIntegralInRange<uint32_t>(0, 7)
                                    : in.ConsumeIntegralInRange<uint32_t>(0x800, 0xff8) & ~7u;
        f.blueFlame(first8, in.ConsumeBool() ? f.uar : in.ConsumeIntegralInRange<uint32_t>(2, 5),
                    offset);
    }

    // A send as mlx5_ib posts one: SEND, RDMA WRITE or READ of up to 2 KiB
    // of the harness's pages from a UD QP to a UD peer (the one on the SRQ
    // among them) or from an RC QP to its peer, rung as the driver rings.
    // Random sends seldom survive all their coin flips; this one lands,
    // so that the responder, the receive WQEs and the SRQ's are reached.
    void sendAsDriver(FuzzedDataProvider &in, const Pages &pages) {
        static constexpr uint8_t kOpcodes[] = {qpc::kSend, qpc::kRdmaWrite, qpc::kRdmaRead};
        static constexpr size_t kSenders[] = {0, 1, 2, 3};
        Entry &e = qps[in.PickValueInArray(kSenders)];
        const bool ud = e.ud;
        const uint32_t peer = ud ? qps[in.PickValueInArray(kUdPeers)].qp.qpn : 0;
        const Mlx5Function::Send s{
            .opcode = ud ? qpc::kSend : in.PickValueInArray(kOpcodes),
            .remoteQpn = peer,
            .addr = pages.pick(in) + in.ConsumeIntegralInRange<uint32_t>(0, 2048),
            .length = in.ConsumeIntegralInRange<uint32_t>(0, 2048),
            .remoteAddr = pages.pick(in) + in.ConsumeIntegralInRange<uint32_t>(0, 2048)};
        f.blueFlame(f.writeSend(e.qp, ud, s), f.uar);
    }

    // DC: a DCI's send as libmlx5 writes one, to the DCT with its key or
    // not, or to any number, of any of DC's operations (from a QP of any
    // type now and then); or the DCT drained, destroyed and made again
    // (by a key of its own or another's), or queried.
    void dc(FuzzedDataProvider &in, const Pages &pages) {
        static constexpr uint8_t kOpcodes[] = {
            qpc::kSend, qpc::kRdmaWrite, qpc::kRdmaRead, 0x09, 0x0b, 0x11, 0x12, 0x01};
        if (in.ConsumeBool()) {
            Entry &e = in.ConsumeIntegralInRange<int>(0, 7) ? qps[kDci] : pick(in);
            const uint32_t to = in.ConsumeBool() ? dctn : in.ConsumeIntegral<uint32_t>() & 0xffffff;
            const uint64_t key = in.ConsumeBool() ? kDcKey : in.ConsumeIntegral<uint64_t>();
            const Mlx5Function::Send s{
                .opcode = in.PickValueInArray(kOpcodes),
                .addr = pages.pick(in) + in.ConsumeIntegralInRange<uint32_t>(0, 2048),
                .length = in.ConsumeIntegralInRange<uint32_t>(0, in.ConsumeBool() ? 2048 : 9000),
                .remoteAddr = pages.pick(in) + in.ConsumeIntegralInRange<uint32_t>(0, 2048),
                .rkey = in.ConsumeIntegralInRange<int>(0, 3) ? 0 : in.ConsumeIntegral<uint32_t>(),
                .lkey = in.ConsumeIntegralInRange<int>(0, 7) ? 0 : in.ConsumeIntegral<uint32_t>(),
                .stream = in.ConsumeIntegralInRange<uint16_t>(0, 5)};
            f.blueFlame(f.writeDcSend(e.qp, to, key, s, in.ConsumeIntegral<uint64_t>()), f.uar);
            return;
        }
        if (in.ConsumeBool()) { // a stream reset, as libmlx5 sends one, of any stream of any QP
            auto reset = Mlx5Host::input(qpc::kRts2Rts, 0, 0x1d0);
            set(reset, qpc::kHeld,
                in.ConsumeIntegralInRange<int>(0, 3) ? qps[kDci].qp.qpn : pick(in).qp.qpn);
            set(reset, field(0x40, 1), 1);
            set(reset, field(0x840, 64), in.ConsumeBool() ? 1 : in.ConsumeIntegral<uint64_t>());
            set(reset, field(0x890, 16), in.ConsumeIntegralInRange<uint16_t>(0, 5));
            f.host.run(reset, 16);
            return;
        }
        static constexpr uint16_t kCommands[] = {0x711, 0x712, 0x713, 0x714};
        const uint16_t opcode = in.PickValueInArray(kCommands);
        auto cmd = Mlx5Host::input(opcode);
        set(cmd, qpc::kHeld, in.ConsumeBool() ? dctn : in.ConsumeIntegralInRange<uint32_t>(0, 64));
        const auto r = f.host.run(cmd, opcode == 0x713 ? 0x80 : 0x10);
        if (opcode == 0x711 && r.status() == 0) {
            const uint64_t key = in.ConsumeBool() ? kDcKey : in.ConsumeIntegral<uint64_t>();
            const auto made = f.host.run(f.dctInput(srq->srqn, key), 16);
            if (made.status() == 0)
                dctn = static_cast<uint32_t>(made.get(qpc::kHeld));
        }
    }

    // A UMR WQE shaped as mlx5_ib's fast registration or invalidation, or
    // as its UMR QP's loads, enables and revocations, with any of its
    // fields wrong, on one of the QPs (the UMR QP most often).
    void umr(FuzzedDataProvider &in, const Pages &pages) {
        // The masks mlx5_ib writes: fast registration, invalidation, a
        // chunk of entries, enabling, revocation.
        static constexpr uint64_t kMasks[] = {0x209e2143, 1u << 29, 0, 0x203e20c3, 0x20000080};
        static constexpr uint8_t kFlags[] = {0x80, 0x00, 0x20, 0x30, 0x40, 0xa0, 0xc0};
        Entry &e = in.ConsumeBool() ? qps[kUmrQp] : pick(in);
        std::vector<uint8_t> wqe(128);
        wqe[3] = 0x25;
        writeBe32(&wqe[12], in.ConsumeBool() ? freeKey : in.ConsumeIntegral<uint32_t>());
        const bool invalidate = in.ConsumeBool();
        const uint32_t count = in.ConsumeIntegralInRange<uint32_t>(0, 20);
        wqe[16] = in.ConsumeBool() ? in.PickValueInArray(kFlags) : in.ConsumeIntegral<uint8_t>();
        writeBe16(&wqe[20], static_cast<uint16_t>(in.ConsumeIntegralInRange<uint32_t>(0, 12)));
        writeBe16(&wqe[22], static_cast<uint16_t>(in.ConsumeIntegralInRange<uint32_t>(0, 10)));
        writeBe64(&wqe[24],
                  in.ConsumeBool() ? in.PickValueInArray(kMasks) : in.ConsumeIntegral<uint64_t>());
        if (in.ConsumeBool())
            writeBe32(&wqe[32], in.ConsumeIntegral<uint32_t>()); // xlt_offset_47_16
        wqe[64] = invalidate ? 0x40 : 0;
        wqe[66] = in.ConsumeBool() ? 0xbd : in.ConsumeIntegral<uint8_t>(); // access, MTT
        wqe[71] = static_cast<uint8_t>(in.ConsumeBool() ? freeKey : in.ConsumeIntegral<uint8_t>());
        writeBe32(&wqe[76], in.ConsumeBool() ? f.pd : in.ConsumeIntegralInRange<uint32_t>(0, 4));
        writeBe64(&wqe[80], in.ConsumeIntegral<uint64_t>() & ~uint64_t{0xfff});
        writeBe64(&wqe[88], in.ConsumeIntegralInRange<uint64_t>(0, 20 * 4096));
        wqe[123] = in.ConsumeBool() ? 12 : in.ConsumeIntegral<uint8_t>();
        if (wqe[16] & 0x80) {
            for (uint32_t i = 0; i < count; ++i) {
                wqe.resize(wqe.size() + 8);
                // Present, read-only or absent (on-demand paging).
                static constexpr uint64_t kEnables[] = {3, 3, 1, 0};
                const uint64_t enables = in.PickValueInArray(kEnables);
                writeBe64(&wqe[wqe.size() - 8], enables ? pages.pick(in) | enables : 0);
            }
        } else {
            wqe.resize(144);
            writeBe32(&wqe[128], in.ConsumeIntegralInRange<uint32_t>(0, 256));
            writeBe64(&wqe[136],
                      in.ConsumeBool() ? pages.pick(in) : in.ConsumeIntegral<uint64_t>());
        }
        wqe.resize(std::min<size_t>(wqe.size(), 16 * 64));
        f.blueFlame(f.postWqe(e.qp, wqe), f.uar);
    }

    // An indirect key laid out as libmlx5 lays one out (a list or a
    // repeat block of up to six pieces of any key, any rights), or freed,
    // any byte of it wrong now and then, from any QP; or data through it:
    // a SEND, WRITE or READ naming it as its L_Key or R_Key.
    void indirect(FuzzedDataProvider &in, const Pages &pages) {
        static constexpr uint8_t kRights[] = {0x08, 0x78, 0x38, 0x20, 0x00};
        Entry &e = pick(in);
        const auto key = [&] {
            const uint32_t keys[] = {indirectKey, f.lkey, freeKey, in.ConsumeIntegral<uint32_t>()};
            return in.ConsumeBool() ? indirectKey : in.PickValueInArray(keys);
        };
        if (in.ConsumeIntegralInRange<int>(0, 2) == 0) {
            const bool send = in.ConsumeBool();
            const Mlx5Function::Send s{
                .opcode = in.PickValueInArray({qpc::kSend, qpc::kRdmaWrite, qpc::kRdmaRead}),
                .addr = send ? in.ConsumeIntegralInRange<uint64_t>(0, 4096) : pages.pick(in),
                .length = in.ConsumeIntegralInRange<uint32_t>(0, 4096),
                .remoteAddr = in.ConsumeIntegralInRange<uint64_t>(0, 4096),
                .rkey = send ? 0 : key(),
                .lkey = send ? key() : 0};
            f.blueFlame(f.writeSend(e.qp, e.ud, s), f.uar);
            return;
        }
        std::vector<uint8_t> wqe;
        if (in.ConsumeIntegralInRange<int>(0, 3) == 0) {
            wqe = mlx5umr::klmInvalidation(key());
        } else {
            std::vector<mlx5umr::KlmPiece> pieces(in.ConsumeIntegralInRange<size_t>(1, 6));
            for (mlx5umr::KlmPiece &p : pieces)
                p = {in.ConsumeIntegralInRange<uint32_t>(0, 3000), key(), pages.pick(in),
                     in.ConsumeIntegralInRange<uint16_t>(0, 4000)};
            const uint8_t rights = in.PickValueInArray(kRights);
            wqe = in.ConsumeBool()
                      ? mlx5umr::klmList(key(), rights, pieces)
                      : mlx5umr::klmInterleaved(key(), rights,
                                                in.ConsumeIntegralInRange<uint32_t>(0, 5), pieces);
        }
        if (in.ConsumeBool()) // any byte of it
            wqe[in.ConsumeIntegralInRange<size_t>(16, wqe.size() - 1)] =
                in.ConsumeIntegral<uint8_t>();
        f.blueFlame(f.postWqe(e.qp, wqe), f.uar);
    }

    // A receive WQE for any buffer, in a QP's RQ or the SRQ, or any
    // counter; or a free list link broken.
    void receive(FuzzedDataProvider &in, const Pages &pages) {
        const uint64_t addr = in.ConsumeBool() ? pages.pick(in) : in.ConsumeIntegral<uint64_t>();
        const uint32_t length = in.ConsumeIntegralInRange<uint32_t>(0, 8192);
        if (in.ConsumeBool()) {
            f.postSrq(*srq, addr, length);
            if (in.ConsumeBool())
                writeBe32(f.host.at(srq->record), in.ConsumeIntegral<uint32_t>());
            else if (in.ConsumeBool())
                writeBe16(f.host.at(srq->ring + 32 * in.ConsumeIntegralInRange<uint32_t>(0, 7) + 2),
                          in.ConsumeIntegral<uint16_t>());
        } else if (Entry &e = pick(in); e.qp.rqSlots) {
            f.postReceive(e.qp, addr, length);
            if (in.ConsumeBool())
                writeBe32(f.host.at(e.qp.record), in.ConsumeIntegral<uint32_t>());
        }
        f.host.runScheduled();
    }

    // The free key loaded as mlx5_ib loads an on-demand region (its pages
    // present or absent), then a SEND, WRITE or READ of an RC QP through
    // it, as its L_Key or its R_Key: a transfer that faults.
    void pagedTraffic(FuzzedDataProvider &in, const Pages &pages) {
        constexpr uint64_t kPagedIova = 0x7f5500000000;
        std::vector<uint64_t> entries(4);
        for (uint64_t &e : entries)
            e = in.ConsumeBool() ? pages.pick(in) : 0;
        std::vector<uint8_t> load =
            mlx5umr::cacheLoad(freeKey, f.pd, kPagedIova, 4 * 4096, entries);
        load[16] &= static_cast<uint8_t>(~0x60); // free or in use: loaded again and again
        f.blueFlame(f.postWqe(qps[kUmrQp].qp, std::move(load)), f.uar);
        trafficThrough(in, pages, freeKey,
                       kPagedIova + in.ConsumeIntegralInRange<uint32_t>(0, 3 * 4096), 4096);
    }

    // A SEND, WRITE or READ of an RC QP through `key` at `at`, as its
    // L_Key or its R_Key, of up to `most` bytes.
    void trafficThrough(FuzzedDataProvider &in, const Pages &pages, uint32_t key, uint64_t at,
                        uint32_t most) {
        static constexpr uint8_t kOpcodes[] = {qpc::kSend, qpc::kRdmaWrite, qpc::kRdmaRead};
        const bool local = in.ConsumeBool();
        const Mlx5Function::Send s{.opcode = in.PickValueInArray(kOpcodes),
                                   .addr = local ? at : pages.pick(in),
                                   .length = in.ConsumeIntegralInRange<uint32_t>(1, most),
                                   .remoteAddr = local ? pages.pick(in) : at,
                                   .rkey = local ? 0 : key,
                                   .lkey = local ? key : 0};
        f.blueFlame(f.writeSend(qps[in.ConsumeBool() ? 2 : 3].qp, false, s), f.uar);
        f.host.runScheduled();
    }

    // The implicit region's KSM key (docs/mlx5.md §10.7) loaded by the UMR
    // QP, each span through the null key, the paged key, another key or
    // any, at its own address or any, in spans of 4 KiB or 1 GiB; then a
    // transfer of an RC QP through it, as its L_Key or its R_Key.
    void implicitTraffic(FuzzedDataProvider &in, const Pages &pages) {
        constexpr uint64_t kPagedIova = 0x7f5500000000;
        const unsigned shift = in.ConsumeBool() ? 12 : 30;
        std::vector<uint64_t> words;
        for (uint64_t span = 0; span < 4; ++span) {
            const uint32_t keys[] = {nullKey, freeKey, indirectKey,
                                     ksmKey,  f.lkey,  in.ConsumeIntegral<uint32_t>()};
            words.push_back(uint64_t{1} << 32 | in.PickValueInArray(keys));
            words.push_back(in.ConsumeBool() ? kPagedIova : in.ConsumeIntegral<uint64_t>());
        }
        std::vector<uint8_t> load = mlx5umr::umrQpSegments(
            ksmKey, 0x80,
            (1u << 0) | (1u << 1) | (1u << 6) | (1u << 7) | (0x1fu << 17) | (1u << 29), false, f.pd,
            0, 0, words.size());
        load[64 + 12] |= 0x80;                       // length64
        load[64 + 59] = static_cast<uint8_t>(shift); // the span
        for (uint64_t w : words) {
            load.resize(load.size() + 8);
            writeBe64(&load[load.size() - 8], w);
        }
        f.blueFlame(f.postWqe(qps[kUmrQp].qp, std::move(load)), f.uar);
        trafficThrough(in, pages, ksmKey,
                       in.ConsumeIntegralInRange<uint64_t>(0, uint64_t{5} << shift), 8192);
    }

    // The driver's answer to a page fault (docs/mlx5.md §10.6): the
    // token of an EQE on its page fault EQ, or any, resumed or failed;
    // or time enough for an unanswered fault to fail.
    void pageFault(FuzzedDataProvider &in, const Pages &pages) {
        if (in.ConsumeIntegralInRange<int>(0, 2) == 0) {
            if (in.ConsumeBool())
                pagedTraffic(in, pages);
            else
                implicitTraffic(in, pages);
            return;
        }
        if (in.ConsumeIntegralInRange<int>(0, 3) == 0) {
            f.host.advance(11'000'000'000);
            f.host.runScheduled();
            return;
        }
        const uint8_t *eqe = f.host.at(faultRing + 64 * in.ConsumeIntegralInRange<uint32_t>(0, 15));
        auto cmd = Mlx5Host::input(0x204);
        if (in.ConsumeBool()) {
            std::copy_n(eqe + 0x26, 6, &cmd[0x0a]); // its token, as mlx5_ib copies it
        } else {
            writeBe16(&cmd[0x0a], in.ConsumeIntegral<uint16_t>());
            writeBe32(&cmd[0x0c], in.ConsumeIntegral<uint32_t>());
        }
        cmd[0x08] = in.ConsumeIntegralInRange<int>(0, 3) ? 0 : 0x80;
        f.host.run(cmd, 16);
        f.host.runScheduled();
    }

    // A state change of one of the QPs, to any peer; a QP made again in
    // place of one destroyed; the CQ's entries consumed.
    void manage(FuzzedDataProvider &in) {
        static constexpr uint16_t kChanges[] = {0x502, 0x503, 0x504, 0x505, 0x506,
                                                0x507, 0x50a, 0x50c, 0x50e};
        static constexpr uint8_t kTypes[] = {qpc::kUd,  qpc::kRc,  qpc::kUc,
                                             qpc::kQp0, qpc::kQp1, kRegUmr};
        Entry &e = pick(in);
        switch (in.ConsumeIntegralInRange<int>(0, 4)) {
        case 0:
            f.change(in.PickValueInArray(kChanges), e.qp.qpn,
                     in.ConsumeIntegralInRange<uint8_t>(0, 2),
                     {.qpn = in.ConsumeIntegral<uint32_t>() & 0xffffff,
                      .lid = in.ConsumeBool() ? Mlx5Function::kLid : in.ConsumeIntegral<uint16_t>(),
                      .mtu = in.ConsumeIntegralInRange<uint8_t>(0, 7),
                      .counterSet = in.ConsumeIntegralInRange<uint32_t>(0, 3),
                      .optional = in.ConsumeBool() ? 1u << 25 : 0});
            break;
        case 1:
            if (f.destroy(qpc::kDestroyQp, e.qp.qpn).status() == 0) {
                const uint8_t st = in.PickValueInArray(kTypes);
                if (const auto qp = f.createQp(
                        st, in.ConsumeIntegralInRange<uint32_t>(0, 3),
                        in.ConsumeIntegralInRange<uint32_t>(0, 5),
                        in.ConsumeIntegralInRange<uint32_t>(0, 5),
                        in.ConsumeIntegralInRange<int>(0, 3) ? 0 : in.ConsumeIntegralInRange(1, 3)))
                    e = {*qp, st != qpc::kRc && st != qpc::kUc};
            }
            break;
        case 2:
            f.query(e.qp.qpn);
            break;
        case 3:
            qCounter(in);
            break;
        default:
            f.cqes(&cqNext);
            break;
        }
        f.host.runScheduled();
    }

    // A Q counter made, ended or read (and perhaps cleared), by a number
    // the QPs' state changes may bind them to.
    void qCounter(FuzzedDataProvider &in) {
        static constexpr uint16_t kCommands[] = {0x771, 0x772, 0x773};
        const uint16_t opcode = in.PickValueInArray(kCommands);
        auto cmd = Mlx5Host::input(opcode, 0, opcode == 0x773 ? 0x20 : 0x10);
        const uint32_t number = in.ConsumeIntegralInRange<uint32_t>(0, 3);
        if (opcode == 0x772)
            set(cmd, field(0x58, 8), number);
        if (opcode == 0x773) {
            set(cmd, field(0xf8, 8), number);
            set(cmd, field(0xc0, 1), in.ConsumeBool());
        }
        f.host.run(cmd, opcode == 0x773 ? 0x100 : 0x10);
    }

    // Where UD sends go: the two UD QPs and the one on the SRQ.
    static constexpr size_t kUdPeers[] = {0, 1, 4};
    static constexpr size_t kUmrQp = 5;
    static constexpr size_t kDci = 6;
    static constexpr uint8_t kRegUmr = 0xc;
    static constexpr uint64_t kDcKey = 0x1ee7a330;
    uint32_t dctn = 0;
    Mlx5Function f;
    std::vector<Entry> qps;
    std::optional<Mlx5Function::Srq> srq;
    uint32_t cqNext = 0;
    uint32_t freeKey = 0;
    uint32_t indirectKey = 0;
    uint32_t ksmKey = 0, nullKey = 0;
    uint64_t faultRing = 0;
};

// Two tenants (issue 57), and an oracle of their isolation. The kernel,
// whose QPs have fre, holds a secret page behind keys no peer may reach
// (no remote rights) or free (no en_rinval): one made with its pages and
// UMR-enabled, as mlx5_ib's reg_create makes a user region's, and one a
// kernel QP's REG_MR mapped; its physical key is ib_core's local DMA key
// (local rights only). A user process, in a PD of its own with its QPs
// without fre, has two regions over its own pages that the driver's UMR
// QP loaded into keys of its MR cache (free, UMR-enabled keys moved into
// the process's PD: what the audit's attack starts from), and a third
// that CREATE_MKEY made as mlx5_ib's reg_create makes a region the cache
// cannot serve (its pages, UMR-enabled, in the process's PD: only the
// QP's missing fre keeps a UMR of the process's off it). It posts
// anything on its QPs: any opcode (UMR among them), any L_Key and R_Key
// (the kernel's too), any address, SEND with Invalidate of any key; it
// moves its QPs to any peer, the kernel's QPs included, posts receives,
// and rings any doorbell on its own UAR page, for the kernel's QPs and
// CQ too. Its QPs complete on a CQ of its own (on its own UAR page, its
// events to an EQ of their own); the kernel's on the fixture's. The
// oracle, after every step: the secret page never changes, its bytes
// never reach the process's pages, the kernel's keys stay as the kernel
// left them, and its CQ and EQ rings take no CQE or EQE (its QPs post
// nothing after set-up but one NOP they never ring, nothing arms its CQ).
struct Tenants {
    explicit Tenants(Mlx5Host &host) : f(host) { f.dmaKeyRights = 0x3; }

    bool setUp() {
        if (!f.setUp() || !f.activatePort())
            return false;
        secret = f.host.allocRandom(4096, 0x5ec2e7);
        std::copy_n(f.host.at(secret), 4096, secretBytes.begin());
        for (size_t at = 0; at + 8 <= secretBytes.size(); ++at) {
            uint64_t word;
            std::memcpy(&word, &secretBytes[at], 8);
            secretWords.insert(word);
        }
        for (uint64_t &page : own)
            page = f.host.allocRandom(4096, 0x0c0ffee);
        const auto kernelA = f.createQp(qpc::kRc, 1, 3, 4), kernelB = f.createQp(qpc::kRc, 1, 3, 4);
        if (!kernelA || !kernelB || !f.toRts(kernelA->qpn, {.qpn = kernelB->qpn}) ||
            !f.toRts(kernelB->qpn, {.qpn = kernelA->qpn}))
            return false;
        kernel[0] = *kernelA;
        kernel[1] = *kernelB;
        const auto pd = f.host.run(Mlx5Host::input(0x800), 16); // ALLOC_PD
        if (pd.status() != 0)
            return false;
        userPd = static_cast<uint32_t>(pd.get(qpc::kHeld));
        if (!userQueues())
            return false;
        for (Mlx5Function::Qp &qp : user)
            if (!userQp(qp))
                return false;
        if (!f.toRts(user[0].qpn, {.qpn = user[1].qpn}) ||
            !f.toRts(user[1].qpn, {.qpn = user[0].qpn}))
            return false;
        // The process's keys over its own pages, all rights, loaded by the
        // UMR QP; the kernel's two over the secret, local read only.
        const auto umrQp = f.createQp(kRegUmr, std::nullopt, 0, 4);
        if (!umrQp || !f.toRts(umrQp->qpn))
            return false;
        Mlx5Function::Qp loader = *umrQp;
        loaderQpn = loader.qpn;
        for (uint32_t &key : userKeys) {
            key = mlx5umr::freeKey(f, 2);
            f.blueFlame(f.postWqe(loader, mlx5umr::cacheLoad(key, userPd, kUserIova, 8192,
                                                             {own[0], own[1]})),
                        f.uar);
        }
        // An indirect key in the process's PD, which its UMRs may lay out
        // over any key: the kernel's are in another PD, and never reached.
        const auto klm = f.host.run(mlx5umr::klmKeyInput(userPd, 8), 16);
        userIndirect = static_cast<uint32_t>(klm.get(qpc::kHeld)) << 8;
        madeKey = keyWithPages(f.pd, 0x1, secret, 1);
        userMade = keyWithPages(userPd, 0xf, own[0], 2);
        regKey = mlx5umr::freeKey(f, 1);
        auto reg = mlx5umr::registration(regKey, kKernelIova, 4096, {secret}, nullptr, 0, 0,
                                         /*remoteInvalidate=*/false);
        reg[66] &= static_cast<uint8_t>(~0x38); // local read only: no lw, rr, rw
        f.blueFlame(f.postWqe(kernel[0], reg), f.uar);
        const auto done = f.completions(&cqNext, 3);
        if (!userKeys[0] || !userKeys[1] || !userMade || !madeKey || !userIndirect ||
            done.size() != 3 ||
            std::any_of(done.begin(), done.end(), [](const uint8_t *c) { return c[0x3f] >> 4; }))
            return false;
        // A signalled NOP the kernel wrote into kernel[1]'s send queue and
        // its doorbell record but has not rung: only a doorbell of the
        // process's for that QP could start it.
        f.postWqe(kernel[1], std::vector<uint8_t>(16));
        keysBefore = kernelKeys();
        queuesBefore = kernelQueues();
        return !keysBefore.empty();
    }

    // One step of the process's, then the oracle.
    void step(FuzzedDataProvider &in) {
        switch (in.ConsumeIntegralInRange<int>(0, 7)) {
        case 0:
        case 1:
            post(in);
            break;
        case 2:
            umr(in);
            break;
        case 6:
            attackChain(in);
            break;
        case 7:
            doorbell(in);
            break;
        case 3: // to RTS again, with any peer: the other user QP, a kernel QP, any number
            connect(in);
            break;
        case 4: // (the fixture's receive names the function's own key)
            f.postReceive(user[in.ConsumeIntegralInRange<int>(0, 1)], own[in.ConsumeBool()], 4096);
            break;
        default:
            f.host.advance(in.ConsumeIntegralInRange<uint64_t>(0, 100'000'000));
            break;
        }
        f.host.runScheduled();
        f.cqesOf(userCqRing, userCqRecord, &userCqNext);
        check(kernelQueues() == queuesBefore,
              "a CQE or EQE of the process's reached the kernel's CQ or EQ");
        check(std::equal(secretBytes.begin(), secretBytes.end(), f.host.at(secret)),
              "the process changed the kernel's secret page");
        for (size_t i = 0; i < std::size(own); ++i)
            check(!leaked(i), "the kernel's secret reached the process's pages");
    }

    // Whether a page holds 15 or more bytes of the secret, from any
    // offset of it: each such run covers one of the page's 8-byte-aligned
    // words, and every 8-byte window of the (random) secret is in
    // secretWords. (A search for the secret's first bytes missed a leak
    // from its middle.)
    // Whether the process's page `i` holds some of the secret; a page is
    // searched only when it changed since the last step.
    bool leaked(size_t i) {
        const uint8_t *page = f.host.at(own[i]);
        if (std::equal(page, page + 4096, seen[i].begin()))
            return false;
        std::copy_n(page, 4096, seen[i].begin());
        return holdsSecret(page);
    }

    bool holdsSecret(const uint8_t *page) const {
        for (size_t at = 0; at + 8 <= 4096; at += 8) {
            uint64_t word;
            std::memcpy(&word, page + at, 8);
            if (secretWords.contains(word))
                return true;
        }
        return false;
    }

    // The kernel's keys as inspection shows them: not what a step of the
    // process's may change.
    std::string kernelKeys() {
        std::string all;
        for (uint32_t key : {madeKey, regKey, f.lkey}) {
            char *answer = nullptr;
            const std::string what = "mr " + std::to_string(key);
            if (pib_core_inspect(f.host.core, what.c_str(), 1, &answer) == 0 && answer)
                all += answer;
            std::free(answer);
        }
        return all;
    }
    // The kernel's CQ and EQ rings, every byte.
    std::vector<uint8_t> kernelQueues() {
        std::vector<uint8_t> bytes(f.host.at(f.cqRing),
                                   f.host.at(f.cqRing) + (64u << Mlx5Function::kLogCq));
        bytes.insert(bytes.end(), f.host.at(f.eqRing), f.host.at(f.eqRing) + (64u << kLogEq));
        return bytes;
    }
    void finish() { check(kernelKeys() == keysBefore, "the process changed a kernel key"); }

  private:
    static constexpr uint64_t kKernelIova = 0x7f5000000000, kUserIova = 0x7f6000000000;
    static constexpr uint8_t kRegUmr = 0xc;
    static constexpr uint32_t kLogEq = 3; // the fixture's EQ: 8 EQEs
    static constexpr uint8_t kSendInvalidate = 0x01, kUmr = 0x25;

    // The process's UAR page, and its CQ there, reporting to an EQ of its
    // own (the kernel's EQ on the kernel's page, as mlx5_core makes them).
    bool userQueues() {
        userUar = f.host.allocUar();
        auto r = f.host.run(f.host.eqInput(kLogEq, 0, 1, f.uar, &userEqRing), 16);
        if (r.status() != 0)
            return false;
        const auto eqn = static_cast<uint32_t>(r.get(field(0x58, 8)));
        r = f.host.run(
            f.host.cqInput(Mlx5Function::kLogCq, eqn, userUar, &userCqRing, &userCqRecord), 16);
        userCqn = static_cast<uint32_t>(r.get(qpc::kHeld));
        return r.status() == 0;
    }
    bool userQp(Mlx5Function::Qp &qp) {
        auto in = f.qpInput(qpc::kRc, 1, 3, 4, qp);
        set(in, qpc::kFre, 0); // as mlx5_ib makes a process's QPs
        set(in, qpc::kPd, userPd);
        set(in, qpc::kUarPage, userUar);
        set(in, qpc::kCqnSnd, userCqn);
        set(in, qpc::kCqnRcv, userCqn);
        const auto r = f.host.run(in, 16);
        qp.qpn = static_cast<uint32_t>(r.get(qpc::kHeld));
        return r.status() == 0;
    }
    // CREATE_MKEY with its pages (MTT, not free, UMR-enabled) in `pdn`,
    // rights `rights` (a rw rr lw lr); 0 if refused.
    uint32_t keyWithPages(uint32_t pdn, uint32_t rights, uint64_t first, uint32_t pages) {
        auto in = Mlx5Host::input(0x200, 0, 0x110 + 8 * 2);
        set(in, field(0x90, 1), 1);
        set(in, field(0x91, 5), rights);
        set(in, field(0x96, 2), 1);
        set(in, field(0xa0, 24), 0xffffff);
        set(in, field(0xb8, 8), 0x42);
        set(in, field(0xe8, 24), pdn);
        set(in, field(0x100, 64), first);
        set(in, field(0x140, 64), uint64_t{pages} * 4096);
        set(in, field(0x220, 32), 1);
        set(in, field(0x25a, 6), 12);
        set(in, field(0x300, 32), 1);
        for (uint32_t i = 0; i < 2; ++i)
            writeBe64(&in[0x110 + 8 * i], i < pages ? first + 4096 * i : 0);
        const auto r = f.host.run(in, 16);
        return r.status() == 0 ? static_cast<uint32_t>(r.get(qpc::kHeld)) << 8 | 0x42 : 0;
    }
    uint32_t pickKey(FuzzedDataProvider &in) {
        const uint32_t keys[] = {
            userKeys[0], userKeys[1], userMade,     madeKey,
            regKey,      f.lkey,      userIndirect, in.ConsumeIntegral<uint32_t>()};
        return in.PickValueInArray(keys);
    }
    // An address: in the process's regions, an offset into its indirect
    // key, the secret's guest address or the kernel's I/O address of it,
    // or anything.
    uint64_t pick(FuzzedDataProvider &in) {
        const uint64_t at = in.ConsumeIntegralInRange<uint64_t>(0, 4095) / 2;
        switch (in.ConsumeIntegralInRange<int>(0, 5)) {
        case 0:
        case 1:
            return kUserIova + (in.ConsumeBool() ? 4096 : 0) + at;
        case 2:
            return secret + at;
        case 3:
            return kKernelIova + at;
        case 4: // an offset into a zero-based key: the process's indirect key
            return at;
        default:
            return in.ConsumeIntegral<uint64_t>();
        }
    }
    // A send WQE of any opcode the process's libmlx5 could write, with
    // the segments it names.
    void post(FuzzedDataProvider &in) {
        if (in.ConsumeIntegralInRange<int>(0, 7) == 0) { // a DMA copy (MMO)
            std::vector<uint8_t> wqe(64);
            wqe[0] = in.ConsumeBool() ? 0x1 : in.ConsumeIntegral<uint8_t>();
            wqe[3] = 0x2f;
            for (const size_t at : {32, 48}) {
                writeBe32(&wqe[at], in.ConsumeIntegralInRange<uint32_t>(0, 8192));
                writeBe32(&wqe[at + 4], pickKey(in));
                writeBe64(&wqe[at + 8], pick(in));
            }
            f.blueFlame(f.postWqe(user[in.ConsumeIntegralInRange<int>(0, 1)], wqe), userUar);
            return;
        }
        static constexpr uint8_t kOpcodes[] = {
            qpc::kSend, kSendInvalidate, qpc::kRdmaWrite, 0x09, qpc::kRdmaRead, 0x11, 0x12, 0x00};
        const uint8_t opcode =
            in.ConsumeBool() ? in.PickValueInArray(kOpcodes) : in.ConsumeIntegral<uint8_t>();
        std::vector<uint8_t> wqe(16);
        wqe[3] = opcode;
        writeBe32(&wqe[12],
                  opcode == kSendInvalidate ? pickKey(in) : in.ConsumeIntegral<uint32_t>());
        if (opcode == qpc::kRdmaWrite || opcode == 0x09 || opcode == qpc::kRdmaRead ||
            opcode == 0x11 || opcode == 0x12) {
            wqe.resize(32);
            writeBe64(&wqe[16], pick(in));
            writeBe32(&wqe[24], pickKey(in));
        }
        if (opcode == 0x11 || opcode == 0x12) {
            wqe.resize(48);
            writeBe64(&wqe[32], in.ConsumeIntegral<uint64_t>());
            writeBe64(&wqe[40], in.ConsumeIntegral<uint64_t>());
        }
        for (int sges = in.ConsumeIntegralInRange<int>(0, 2); sges > 0; --sges) {
            wqe.resize(wqe.size() + 16);
            uint8_t *data = &wqe[wqe.size() - 16];
            writeBe32(data, in.ConsumeIntegralInRange<uint32_t>(0, 8192));
            writeBe32(data + 4, pickKey(in));
            writeBe64(data + 8, pick(in));
        }
        f.blueFlame(f.postWqe(user[in.ConsumeIntegralInRange<int>(0, 1)], wqe), userUar);
    }
    // A UMR as the kernel writes one: a fast registration of any key over
    // the secret, or an invalidation of any key; or as libmlx5 writes one
    // for an indirect key, its pieces any key's at any address.
    void umr(FuzzedDataProvider &in) {
        const uint32_t key = pickKey(in);
        std::vector<uint8_t> wqe;
        if (in.ConsumeIntegralInRange<int>(0, 2) == 0) {
            std::vector<mlx5umr::KlmPiece> pieces(in.ConsumeIntegralInRange<size_t>(1, 4));
            for (mlx5umr::KlmPiece &p : pieces)
                p = {in.ConsumeIntegralInRange<uint32_t>(1, 4096), pickKey(in), pick(in),
                     in.ConsumeIntegralInRange<uint16_t>(0, 4096)};
            wqe = in.ConsumeBool() ? mlx5umr::klmList(key, 0x78, pieces)
                                   : mlx5umr::klmInterleaved(key, 0x78, 2, pieces);
        } else if (in.ConsumeBool()) { // its list inline, or in its second page
            const uint64_t iova = in.ConsumeBool() ? kKernelIova : kUserIova;
            wqe = in.ConsumeBool()
                      ? mlx5umr::registration(key, iova, 4096, {secret})
                      : mlx5umr::registration(key, iova, 4096, {secret}, f.host.at(own[1]),
                                              kUserIova + 4096, pickKey(in));
        } else {
            wqe = mlx5umr::invalidation(key);
        }
        if (in.ConsumeBool()) // any byte of its first two blocks
            wqe[in.ConsumeIntegralInRange<size_t>(0, 127)] = in.ConsumeIntegral<uint8_t>();
        wqe[3] = kUmr;
        f.blueFlame(f.postWqe(user[in.ConsumeIntegralInRange<int>(0, 1)], wqe), userUar);
    }
    // The audit's attack as one step, its choices the input's: the process
    // frees a key (one of its own, mostly), registers it over the secret,
    // and moves data between it and its other key by a READ or a WRITE.
    void attackChain(FuzzedDataProvider &in) {
        if (in.ConsumeBool())
            return indirectChain(in);
        const int mine = in.ConsumeIntegralInRange<int>(0, 2); // 2: the region it made
        const uint32_t victim =
            in.ConsumeBool() ? (mine == 2 ? userMade : userKeys[mine]) : pickKey(in);
        const uint32_t other = in.ConsumeBool() ? userKeys[mine == 0] : pickKey(in);
        Mlx5Function::Qp &qp = user[in.ConsumeIntegralInRange<int>(0, 1)];
        f.blueFlame(f.postWqe(qp, mlx5umr::invalidation(victim)), userUar);
        f.blueFlame(f.postWqe(qp, mlx5umr::registration(victim, kUserIova, 4096, {secret})),
                    userUar);
        const bool read = in.ConsumeBool();
        std::vector<uint8_t> wqe(48);
        wqe[3] = read ? qpc::kRdmaRead : qpc::kRdmaWrite;
        writeBe64(&wqe[16], kUserIova);
        writeBe32(&wqe[24], read ? victim : other);
        writeBe32(&wqe[32], 4096);
        writeBe32(&wqe[36], read ? other : victim);
        writeBe64(&wqe[40], kUserIova);
        f.blueFlame(f.postWqe(qp, wqe), userUar);
    }
    // The same through an indirect key (docs/mlx5.md §10.4): the process
    // lays its own out over a key of the kernel's (mostly) at the secret,
    // then READs through it into its own page, or WRITEs its page into it.
    void indirectChain(FuzzedDataProvider &in) {
        const uint32_t over =
            in.ConsumeBool() ? (in.ConsumeBool() ? madeKey : regKey) : pickKey(in);
        const uint64_t at = in.ConsumeBool() ? (in.ConsumeBool() ? secret : kKernelIova) : pick(in);
        Mlx5Function::Qp &qp = user[in.ConsumeIntegralInRange<int>(0, 1)];
        f.blueFlame(f.postWqe(qp, mlx5umr::klmList(userIndirect, 0x78, {{4096, over, at}})),
                    userUar);
        const bool read = in.ConsumeBool();
        std::vector<uint8_t> wqe(48);
        wqe[3] = read ? qpc::kRdmaRead : qpc::kRdmaWrite;
        writeBe64(&wqe[16], 0); // the indirect key is zero-based
        writeBe32(&wqe[24], userIndirect);
        writeBe32(&wqe[32], 4096);
        writeBe32(&wqe[36], userKeys[in.ConsumeIntegralInRange<int>(0, 1)]);
        writeBe64(&wqe[40], kUserIova);
        f.blueFlame(f.postWqe(qp, wqe), userUar);
    }
    // Any doorbell on the process's own UAR page: an arm of any CQ (the
    // kernel's has CQEs past any small counter: armed, it would signal at
    // once), or a send doorbell of any QP, the kernel's among them, with
    // any WQE counter.
    void doorbell(FuzzedDataProvider &in) {
        uint32_t first = 0, second = 0, offset = 0x20;
        if (in.ConsumeBool()) {
            const uint32_t cqs[] = {userCqn, f.cqn, in.ConsumeIntegral<uint32_t>() & 0xffffff};
            first = in.ConsumeIntegralInRange<uint32_t>(0, 3) << 28 |
                    in.ConsumeIntegralInRange<uint32_t>(0, 1) << 24 |
                    in.ConsumeIntegralInRange<uint32_t>(0, 4);
            second = in.PickValueInArray(cqs);
        } else {
            const uint32_t qps[] = {user[0].qpn,   user[1].qpn,
                                    kernel[0].qpn, kernel[1].qpn,
                                    loaderQpn,     in.ConsumeIntegral<uint32_t>() & 0xffffff};
            first = in.ConsumeIntegralInRange<uint32_t>(0, 8) << 8 | in.ConsumeIntegral<uint8_t>();
            second = in.PickValueInArray(qps) << 8 | in.ConsumeIntegralInRange<uint32_t>(1, 8);
            offset = 0x800;
        }
        if (in.ConsumeBool())
            first = in.ConsumeIntegral<uint32_t>();
        f.blueFlame(uint64_t{__builtin_bswap32(second)} << 32 | __builtin_bswap32(first), userUar,
                    offset);
    }
    void connect(FuzzedDataProvider &in) {
        Mlx5Function::Qp &qp = user[in.ConsumeIntegralInRange<int>(0, 1)];
        const uint32_t peers[] = {user[0].qpn, user[1].qpn, kernel[0].qpn, kernel[1].qpn,
                                  in.ConsumeIntegral<uint32_t>() & 0xffffff};
        const Mlx5Function::Peer peer{.qpn = in.PickValueInArray(peers)};
        f.change(qpc::kToRst, qp.qpn);
        f.change(qpc::kRst2Init, qp.qpn, 1, peer);
        if (in.ConsumeBool()) { // DMA copies on, as libmlx5's qp_enable_mmo asks
            auto ext = Mlx5Host::input(0x50e, 0, 0x1d0);
            set(ext, qpc::kHeld, qp.qpn);
            set(ext, field(0x40, 1), 1);
            set(ext, field(0x840, 64), uint64_t{1} << 3);
            set(ext, field(0x882, 1), 1);
            f.host.run(ext, 16);
        }
        f.change(qpc::kInit2Rtr, qp.qpn, 1, peer);
        f.change(qpc::kRtr2Rts, qp.qpn, 1, peer);
    }

    Mlx5Function f;
    uint64_t secret = 0;
    std::array<uint8_t, 4096> secretBytes{};
    std::unordered_set<uint64_t> secretWords;        // every 8-byte window of it
    std::array<std::array<uint8_t, 4096>, 2> seen{}; // own[i] when last searched
    uint64_t own[2] = {};
    Mlx5Function::Qp kernel[2], user[2];
    uint32_t userPd = 0, userKeys[2] = {}, userMade = 0, madeKey = 0, regKey = 0, loaderQpn = 0;
    uint32_t userIndirect = 0;
    uint32_t cqNext = 0;
    uint32_t userUar = 0, userCqn = 0, userCqNext = 0;
    uint64_t userEqRing = 0, userCqRing = 0, userCqRecord = 0;
    std::string keysBefore;
    std::vector<uint8_t> queuesBefore;
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzedDataProvider in(data, size);
    Mlx5Host host;
    host.reporting = false; // formatting every detail would be most of the work
    const Pages pages(host);
    Queue queue;
    // Most runs start as the driver does, so that what needs an
    // initialized function is reached; some with QPs ready for work; some
    // enabled only, where the driver sets capabilities and gives pages.
    QpWorld world(host);
    const int start = in.ConsumeIntegralInRange<int>(0, 6);
    if (start == 6) { // two user contexts, and the oracle of their isolation
        pib::fuzzing::UserContextsFuzz contexts(host);
        check(contexts.setUp(), "the two user contexts could not be set up");
        for (int step = 0; step < 64 && in.remaining_bytes(); ++step)
            contexts.step(in);
        return 0;
    }
    if (start == 5) { // two tenants, and the oracle of their isolation
        Tenants tenants(host);
        check(tenants.setUp(), "the two tenants could not be set up");
        for (int step = 0; step < 64 && in.remaining_bytes(); ++step)
            tenants.step(in);
        tenants.finish();
        return 0;
    }
    if (start == 1 && host.bringUp())
        host.run(Mlx5Host::input(0x802), 16);
    if (start == 4)
        host.run(Mlx5Host::input(0x104), 16); // ENABLE_HCA
    const bool qps = (start == 2 || start == 3) && world.setUp();
    for (int step = 0; step < 64 && in.remaining_bytes(); ++step) {
        const int what = in.ConsumeIntegralInRange<int>(0, qps ? 12 : 8);
        if (what == 9 && in.ConsumeBool())
            world.send(in, pages);
        else if (what == 9)
            world.sendAsDriver(in, pages);
        else if (what == 10)
            world.receive(in, pages);
        else if (what == 11 && in.ConsumeBool())
            world.manage(in);
        else if (what == 11 && in.ConsumeBool())
            world.umr(in, pages);
        else if (what == 11 && in.ConsumeBool())
            world.indirect(in, pages);
        else if (what == 11)
            world.dc(in, pages);
        else if (what == 12)
            world.pageFault(in, pages);
        if (what >= 9)
            continue;
        switch (what) {
        case 0:
            queue.write(host, in.PickValueInArray(kIsegOffsets), in.ConsumeIntegral<uint32_t>());
            break;
        case 1:
        case 2:
        case 3:
            runCommand(in, host, pages, queue);
            break;
        case 4:
            corruptAndRing(in, host);
            break;
        case 5: {
            if (in.ConsumeBool()) { // the vendor-specific capability, anywhere in it or not
                const uint32_t offset = in.ConsumeIntegralInRange<uint32_t>(0, 0x20);
                if (in.ConsumeBool())
                    pib_core_vsc_write(host.core, offset, in.ConsumeIntegral<uint32_t>());
                else
                    pib_core_vsc_read(host.core, offset);
                break;
            }
            const unsigned width = 1u << in.ConsumeIntegralInRange<unsigned>(0, 3);
            pib_core_bar_read(host.core, in.ConsumeIntegralInRange<int>(0, 5),
                              in.ConsumeIntegral<uint32_t>() % (256 << 10), width);
            break;
        }
        case 6: // anywhere in BAR0 but the queue's address
            queue.inPlace = false;
            pib_core_bar_write(
                host.core, PIB_BAR_REGS, in.ConsumeIntegral<uint32_t>() % (256 << 10),
                in.ConsumeIntegral<uint64_t>(), 1u << in.ConsumeIntegralInRange<unsigned>(0, 3));
            break;
        case 7:
            if (in.ConsumeBool())
                eqDoorbell(in, host);
            else if (in.ConsumeBool())
                cqDoorbell(in, host);
            else if (in.ConsumeBool())
                asyncEvent(in, host);
            else // time passes: moderated completion events and timers are due
                host.advance(in.ConsumeIntegralInRange<uint64_t>(0, 10'000'000));
            break;
        default:
            if (in.ConsumeBool())
                pib_core_inject_fatal(host.core, "fuzz");
            else
                pib_core_reset(host.core);
            queue.inPlace = false;
            if (in.ConsumeBool())
                queue.restore(host);
            break;
        }
    }
    for (const unsigned vector : host.interrupts)
        check(vector < Mlx5Host::mlx5Config().msix_vectors, "an interrupt on a vector not there");
    return 0;
}
