// SPDX-License-Identifier: GPL-2.0-or-later
#include "fuzz_mlx5_contexts.hh"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "conditions.hh"

namespace pib::fuzzing {

using namespace pib::mlx5;
namespace qpc = pib::testing::mlx5qp;

namespace {

void check(bool ok, const char *what) {
    if (!ok) {
        std::fprintf(stderr, "fuzz-mlx5: user contexts: %s\n", what);
        std::abort();
    }
}

constexpr uint16_t kCreateUctx = 0xa04, kDestroyUctx = 0xa06;
constexpr Field kUctxUid = field(0x50, 16);
constexpr uint16_t kShared = 0xffff;
constexpr uint32_t kOutBytes = 0x120; // the longest output of the commands below
constexpr uint32_t kDctc = 0x80;

// The commands that name one object (at kHeld, or a Q counter's place),
// and the kind of object each names.
struct Named {
    uint16_t opcode;
    char kind;
};
constexpr Named kNamed[] = {
    {0x401, 'c'}, {0x402, 'c'}, {0x403, 'c'}, {0x701, 's'}, {0x702, 's'}, {0x703, 's'},
    {0x706, 's'}, {0x707, 's'}, {0x708, 's'}, {0x501, 'q'}, {0x502, 'q'}, {0x503, 'q'},
    {0x504, 'q'}, {0x505, 'q'}, {0x506, 'q'}, {0x507, 'q'}, {0x50a, 'q'}, {0x50b, 'q'},
    {0x50c, 'q'}, {0x50e, 'q'}, {0x711, 'q'}, {0x712, 'q'}, {0x713, 'q'}, {0x806, 'q'},
    {0x807, 'q'}, {0x202, 'k'}, {0x801, 'p'}, {0x803, 'u'}, {0x80f, 'x'}, {0x772, 'n'},
    {0x773, 'n'}, {0xa0a, 'm'},
};
// The kernel's commands, which no context may issue.
constexpr uint16_t kKernels[] = {0x102, 0x103, 0x105, 0x107, 0x108,       0x109,       0x10b,
                                 0x301, 0x302, 0x50d, 0x805, kCreateUctx, kDestroyUctx};
// General objects: the type offered (reserved QP numbers), named by type
// and id (general_obj_in_cmd_hdr), the id the one create gives.
constexpr uint16_t kCreateGeneral = 0xa00, kDestroyGeneral = 0xa03, kReservedQpn = 0x2c;
constexpr uint16_t kGeneralNamed[] = {0xa01, 0xa02, kDestroyGeneral};
constexpr Field kGeneralType = field(0x30, 16), kGeneralId = field(0x40, 32);
constexpr Field kGeneralLogRange = field(0x63, 5);
// AH-to-QP mappings (rdma-core's av_qp_mapping): the QP mapped to.
constexpr uint16_t kAvQpMapping = 0x3a;
constexpr Field kMappedQpn = field(0xe0, 32);
// What a QP may be: RC, UC, UD, XRC, DCI, QP0, QP1, the UMR QP.
constexpr uint8_t kServiceTypes[] = {0x0, 0x1, 0x2, 0x3, 0x5, 0x7, 0x8, 0xc};

constexpr UmemFields kCqInUmems{{field(0x2e0, 1), field(0x2c0, 32), field(0x280, 64),
                                 field(0x86, 1), field(0xa0, 32), field(0x240, 64)}};
constexpr UmemFields kQpInUmems{{field(0x860, 1), field(0x840, 32), field(0x800, 64),
                                 field(0x743, 1), field(0x7e0, 32), qpc::kDbrAddr}};

// The number after "name": in an inspection's JSON; nullopt if none.
std::optional<uint64_t> member(const std::string &json, const char *name) {
    const std::string key = std::string("\"") + name + "\":";
    const size_t at = json.find(key);
    if (at == std::string::npos)
        return std::nullopt;
    return std::strtoull(json.c_str() + at + key.size(), nullptr, 10);
}

} // namespace

Mlx5Host::Reply UserContextsFuzz::as(uint16_t uid, std::vector<uint8_t> in, uint32_t outBytes) {
    set(in, kUid, uid);
    return f_.host.run(in, outBytes);
}

std::vector<uint8_t> UserContextsFuzz::srqInput(uint16_t opcode, uint32_t pd, uint32_t cq,
                                                uint32_t xrcd) {
    auto s = Mlx5Host::input(opcode, 0, 0x118);
    set(s, field(0x80 + 0x04, 4), 2); // 4 WQEs
    set(s, field(0x80 + 0x25, 3), 1); // of 32 bytes
    set(s, field(0x80 + 0x28, 24), xrcd);
    set(s, field(0x80 + 0x48, 24), cq);
    set(s, field(0x80 + 0xc8, 24), pd);
    set(s, field(0x80 + 0x140, 64), f_.host.alloc(64, 64));
    writeBe64(&s[0x110], f_.host.alloc(4096));
    return s;
}

// A key over two pages of its own (access mode MTT), local rights.
std::vector<uint8_t> UserContextsFuzz::keyInput(uint32_t pd) {
    auto k = Mlx5Host::input(0x200, 0, 0x120);
    set(k, field(0x94, 2), 3);         // lw lr
    set(k, field(0x96, 2), 1);         // MTT
    set(k, field(0xa0, 24), 0xffffff); // no QP
    set(k, field(0xe8, 24), pd);
    set(k, field(0x100, 64), 0x10000); // start_addr
    set(k, field(0x140, 64), 8192);    // len
    set(k, field(0x220, 32), 1);       // translations_octword_size
    set(k, field(0x25a, 6), 12);       // 4 KiB pages
    set(k, field(0x300, 32), 1);       // both entries given
    writeBe64(&k[0x110], f_.host.alloc(4096));
    writeBe64(&k[0x118], f_.host.alloc(4096));
    return k;
}

// CREATE_UMEM of two fresh pages, as mlx5_ib registers a pinned buffer;
// bent by `in` (when given) to any page, count, size or rights.
std::vector<uint8_t> UserContextsFuzz::umemInput(FuzzedDataProvider *in) {
    auto u = Mlx5Host::input(0xa08, 0, 0x40);
    set(u, field(0x140, 64), 2); // num_of_mtt
    writeBe64(&u[0x30], f_.host.alloc(4096, 4096) | 0x3);
    writeBe64(&u[0x38], f_.host.alloc(4096, 4096) | 0x3);
    if (in && in->ConsumeBool())
        writeBe64(&u[0x30 + 8 * in->ConsumeIntegralInRange<int>(0, 1)],
                  in->ConsumeIntegral<uint64_t>());
    if (in && in->ConsumeBool())
        set(u, field(0x11b, 5), in->ConsumeIntegralInRange<int>(0, 31)); // log_page_size
    return u;
}

// A general object command as rdma-core's reserved QPN allocator sends
// one (ranges of 2^3 numbers), of the size of libmlx5's AH-to-QP mapping.
std::vector<uint8_t> UserContextsFuzz::generalInput(uint16_t opcode, uint16_t type, uint32_t id,
                                                    uint32_t mappedQpn) {
    auto g = Mlx5Host::input(opcode, 0, 0x50);
    set(g, kGeneralType, type);
    set(g, kGeneralId, id);
    set(g, kGeneralLogRange, 3);
    set(g, kMappedQpn, mappedQpn);
    return g;
}

// A process's objects as mlx5_ib makes them (its keys as DEVX does):
// PD, UAR page, CQ on the kernel's EQ, a basic SRQ in the kernel's XRC
// domain, an RC QP, a DCT and a key, all under `uid`.
bool UserContextsFuzz::makeObjects(uint16_t uid, Objects &o) {
    const auto held = [](const Mlx5Host::Reply &r, uint32_t &number) {
        number = static_cast<uint32_t>(r.get(qpc::kHeld));
        return r.status() == 0;
    };
    uint64_t ring = 0, record = 0;
    Mlx5Function::Qp qp;
    if (!held(as(uid, Mlx5Host::input(0x800)), o.pd) ||
        !held(as(uid, Mlx5Host::input(0x802)), o.uar) ||
        !held(as(uid, f_.host.cqInput(2, f_.eqn, o.uar, &ring, &record)), o.cq) ||
        !held(as(uid, srqInput(0x700, o.pd, o.cq, kernelXrcd_)), o.srq))
        return false;
    const uint32_t kernel[] = {f_.pd, f_.cqn, f_.uar};
    f_.pd = o.pd, f_.cqn = o.cq, f_.uar = o.uar;
    auto qpIn = f_.qpInput(qpc::kRc, 0, 2, 2, qp);
    Mlx5Function::Qp ud;
    auto udIn = f_.qpInput(qpc::kUd, 0, 2, 2, ud);
    auto dctIn = f_.dctInput(o.srq, 0x5ec2e7);
    f_.pd = kernel[0], f_.cqn = kernel[1], f_.uar = kernel[2];
    set(qpIn, qpc::kFre, 0);
    set(udIn, qpc::kFre, 0);
    if (!held(as(uid, qpIn), o.qp) || !held(as(uid, udIn), o.udQp) ||
        !held(as(uid, dctIn), o.dct) || !held(as(uid, keyInput(o.pd)), o.key) ||
        !held(as(uid, umemInput(nullptr)), o.umem))
        return false;
    const auto range = as(uid, generalInput(kCreateGeneral, kReservedQpn, 0));
    const auto mapping = as(uid, generalInput(kCreateGeneral, kAvQpMapping, 0, o.udQp));
    o.range = static_cast<uint32_t>(range.get(kGeneralId));
    o.mapping = static_cast<uint32_t>(mapping.get(kGeneralId));
    return range.status() == 0 && mapping.status() == 0;
}

bool UserContextsFuzz::setUp() {
    if (!f_.setUp())
        return false;
    const auto uctx = [&] {
        return static_cast<uint16_t>(
            f_.host.run(Mlx5Host::input(kCreateUctx, 0, 0x40), 16).get(kUctxUid));
    };
    a_ = uctx();
    b_ = uctx();
    const auto xrcd = f_.host.run(Mlx5Host::input(0x80e), 16);
    const auto counter = as(kShared, Mlx5Host::input(0x771));
    kernelXrcd_ = static_cast<uint32_t>(xrcd.get(qpc::kHeld));
    sharedCounter_ = static_cast<uint32_t>(counter.get(field(0x58, 8)));
    if (!a_ || !b_ || xrcd.status() || counter.status() || !makeObjects(a_, objA_) ||
        !makeObjects(b_, objB_))
        return false;
    before_ = snapshotOfA();
    return true;
}

// Now and then, as DEVX makes a CQ or QP: its ring and record in UMEMs
// (any of A's, B's or any id), at any offset of two pages.
void UserContextsFuzz::placeInUmems(FuzzedDataProvider &in, std::vector<uint8_t> &cmd,
                                    const UmemFields &f) {
    if (!in.ConsumeBool())
        return;
    for (int i = 0; i < 6; i += 3) {
        set(cmd, f.fields[i], 1);
        set(cmd, f.fields[i + 1], pick(in, 'm'));
        set(cmd, f.fields[i + 2], in.ConsumeIntegralInRange<uint64_t>(0, 8192));
    }
}

// A number for an object of `kind`: A's, B's, the kernel's, or any.
uint32_t UserContextsFuzz::pick(FuzzedDataProvider &in, char kind) {
    std::vector<uint32_t> pool;
    switch (kind) {
    case 'p':
        pool = {objA_.pd, objB_.pd, f_.pd};
        break;
    case 'c':
        pool = {objA_.cq, objB_.cq, f_.cqn};
        break;
    case 's':
        pool = {objA_.srq, objB_.srq};
        break;
    case 'q':
        pool = {objA_.qp, objA_.dct, objA_.udQp, objB_.qp, objB_.dct, objB_.udQp};
        break;
    case 'u':
        pool = {objA_.uar, objB_.uar, f_.uar};
        break;
    case 'k':
        pool = {objA_.key, objB_.key, f_.lkey >> 8};
        break;
    case 'x':
        pool = {kernelXrcd_};
        break;
    case 'n':
        pool = {sharedCounter_, 0};
        break;
    case 'm':
        pool = {objA_.umem, objB_.umem};
        break;
    case 'g':
        pool = {objA_.range, objB_.range, objA_.mapping, objB_.mapping};
        break;
    default:
        pool = {f_.eqn};
        break;
    }
    for (const Made &m : madeByB_)
        if (m.kind == kind)
            pool.push_back(m.number);
    if (in.ConsumeIntegralInRange<int>(0, 15) == 0)
        return in.ConsumeIntegralInRange<uint32_t>(0, 0xffffff);
    return pool[in.ConsumeIntegralInRange<size_t>(0, pool.size() - 1)];
}

// One command of B's: what it is, on which objects; `made` the kind of
// object it would make.
std::vector<uint8_t> UserContextsFuzz::command(FuzzedDataProvider &in, char &made) {
    made = 0;
    switch (in.ConsumeIntegralInRange<int>(0, 8)) {
    case 0: {
        uint64_t ring = 0, record = 0;
        made = 'c';
        auto c = f_.host.cqInput(2, pick(in, 'e'), pick(in, 'u'), &ring, &record);
        placeInUmems(in, c, kCqInUmems);
        return c;
    }
    case 1: {
        Mlx5Function::Qp qp;
        auto q = f_.qpInput(in.PickValueInArray(kServiceTypes), 0, 2, 2, qp);
        set(q, qpc::kFre, in.ConsumeBool());
        set(q, qpc::kPd, pick(in, 'p'));
        set(q, qpc::kCqnSnd, pick(in, 'c'));
        set(q, qpc::kCqnRcv, pick(in, 'c'));
        set(q, qpc::kUarPage, pick(in, 'u'));
        set(q, qpc::kRqType, in.ConsumeIntegralInRange<int>(0, 3));
        set(q, qpc::kSrqn, pick(in, 's'));
        set(q, field(0xc0 + 0x4c8, 24), pick(in, 'x')); // xrcd
        placeInUmems(in, q, kQpInUmems);
        made = 'q';
        return q;
    }
    case 2:
        made = 's';
        return srqInput(in.ConsumeBool() ? 0x700 : 0x705, pick(in, 'p'), pick(in, 'c'),
                        pick(in, 'x'));
    case 3: {
        auto d = f_.dctInput(pick(in, 's'), in.ConsumeIntegral<uint64_t>());
        set(d, field(kDctc + 0xc8, 24), pick(in, 'p'));
        set(d, field(kDctc + 0x48, 24), pick(in, 'c'));
        set(d, field(kDctc + 0x60, 8), pick(in, 'n'));
        made = 'q';
        return d;
    }
    case 4: {
        auto k = keyInput(pick(in, 'p'));
        set(k, field(0x96, 2), in.ConsumeIntegralInRange<int>(0, 1)); // PA or MTT
        set(k, field(0x81, 1), in.ConsumeBool());                     // free
        set(k, field(0x90, 1), in.ConsumeBool());                     // umr_en
        if (in.ConsumeBool()) { // over a UMEM, as DEVX makes a key
            set(k, field(0x61, 1), 1);
            set(k, field(0x320, 32), pick(in, 'm'));
            set(k, field(0x340, 64), in.ConsumeIntegralInRange<uint64_t>(0, 0x2100));
            set(k, field(0x100, 64), in.ConsumeIntegral<uint64_t>()); // start_addr
            set(k, field(0x140, 64), in.ConsumeIntegralInRange<uint64_t>(0, 0x2100));
        }
        made = 'k';
        return k;
    }
    case 5: {
        const Named n = in.PickValueInArray(kNamed);
        auto c = Mlx5Host::input(n.opcode, in.ConsumeIntegralInRange<uint16_t>(0, 1), 0x100);
        const uint32_t number = pick(in, n.kind);
        set(c,
            n.opcode == 0x772   ? field(0x58, 8)
            : n.opcode == 0x773 ? field(0xf8, 8)
                                : qpc::kHeld,
            number);
        set(c, qpc::kVhcaPort, 1);
        set(c, qpc::kCounterSetId, pick(in, 'n'));
        set(c, field(0xc0, 1), in.ConsumeBool()); // QUERY_Q_COUNTER's clear
        return c;
    }
    case 6: {
        auto c = Mlx5Host::input(in.PickValueInArray(kKernels), 0, 0x110);
        set(c, kUctxUid, in.ConsumeBool() ? a_ : in.ConsumeIntegral<uint16_t>());
        return c;
    }
    case 7: {
        const bool create = in.ConsumeBool();
        const uint16_t type = in.ConsumeBool()   ? kReservedQpn
                              : in.ConsumeBool() ? kAvQpMapping
                                                 : in.ConsumeIntegral<uint16_t>();
        auto g = generalInput(create ? kCreateGeneral : in.PickValueInArray(kGeneralNamed), type,
                              pick(in, 'g'), pick(in, 'q'));
        if (in.ConsumeBool())
            set(g, kGeneralLogRange, in.ConsumeIntegralInRange<int>(0, 31));
        made = create ? 'g' : 0;
        return g;
    }
    default:
        if (in.ConsumeBool()) {
            made = 'm';
            return umemInput(&in);
        }
        return Mlx5Host::input(in.PickValueInArray({0x800, 0x802, 0x771, 0x80e}));
    }
}

std::string UserContextsFuzz::inspect(const std::string &what) {
    char *answer = nullptr;
    std::string text;
    if (pib_core_inspect(f_.host.core, what.c_str(), 1, &answer) == 0 && answer)
        text = answer;
    std::free(answer);
    return text;
}

// A's objects as the kernel's queries and the host's inspection show them.
std::string UserContextsFuzz::snapshotOfA() {
    std::string all;
    const auto query = [&](uint16_t opcode, uint32_t number, uint32_t outBytes) {
        auto q = Mlx5Host::input(opcode);
        set(q, qpc::kHeld, number);
        const auto r = f_.host.run(q, outBytes);
        all.append(r.out.begin(), r.out.end());
    };
    query(0x50b, objA_.qp, 0x100); // QUERY_QP
    query(0x702, objA_.srq, 0x50); // QUERY_SRQ
    query(0x713, objA_.dct, 0x80); // QUERY_DCT
    const auto mapping = f_.host.run(generalInput(0xa02, kAvQpMapping, objA_.mapping), 0x50);
    all.append(mapping.out.begin(), mapping.out.end());
    all += inspect("qp " + std::to_string(objA_.qp));
    all += inspect("cq " + std::to_string(objA_.cq));
    all += inspect("mr " + std::to_string(objA_.key << 8));
    return all;
}

// Every object B made that still exists says uid B and builds on nothing
// of A's, nor on the kernel's PD or (but as a placeholder) CQs.
void UserContextsFuzz::checkMadeByB() {
    std::vector<Made> live;
    for (const Made &m : madeByB_) {
        if (m.kind == 'm' || m.kind == 'g') { // no inspection: B's commands end it or not
            live.push_back(m);
            continue;
        }
        const char *what = m.kind == 'q'   ? "qp "
                           : m.kind == 's' ? "srq "
                           : m.kind == 'k' ? "mr "
                                           : "cq ";
        const uint64_t number = m.kind == 'k' ? uint64_t{m.number} << 8 : m.number;
        const std::string json = inspect(what + std::to_string(number));
        if (json.empty())
            continue; // B ended it
        live.push_back(m);
        check(member(json, "uid") == b_, "an object B made does not say uid B");
        const auto pd = member(json, "pd");
        check(!pd || (*pd != objA_.pd && *pd != f_.pd), "B's object is on A's or the kernel's PD");
        for (const char *cq : {"send_cq", "recv_cq", "cq"})
            check(member(json, cq) != objA_.cq, "B's object completes into A's CQ");
        check(member(json, "srq") != objA_.srq, "B's QP receives from A's SRQ");
    }
    madeByB_ = std::move(live);
}

void UserContextsFuzz::step(FuzzedDataProvider &in) {
    char made = 0;
    std::vector<uint8_t> cmd = command(in, made);
    uint16_t uid = b_;
    if (in.ConsumeIntegralInRange<int>(0, 9) == 0) { // a uid no context has
        uid = in.ConsumeIntegral<uint16_t>();
        if (uid == a_ || uid == b_ || uid == 0 || uid == kShared)
            uid = b_;
    }
    // Bent anywhere but its opcode and uid (what the kernel stamps).
    for (int n = in.ConsumeIntegralInRange<int>(0, 3); n > 0 && cmd.size() > 4; --n)
        cmd[in.ConsumeIntegralInRange<size_t>(4, cmd.size() - 1)] = in.ConsumeIntegral<uint8_t>();
    const auto r = as(uid, cmd, kOutBytes);
    if (r.status() == 0 && made && madeByB_.size() < 64)
        madeByB_.push_back(
            {made, static_cast<uint32_t>(r.get(made == 'g' ? kGeneralId : qpc::kHeld))});
    check(uid == b_ || r.status() != 0, "a command with a uid no context has succeeded");
    check(snapshotOfA() == before_, "a command of B's changed one of A's objects");
    auto end = Mlx5Host::input(kDestroyUctx);
    set(end, kUctxUid, a_);
    check(f_.host.run(end, 16).status() != 0, "A's context ended while its objects exist");
    auto umem = Mlx5Host::input(0xa0a);
    set(umem, qpc::kHeld, objA_.umem);
    check(as(b_, umem).syndrome() == err::kMlx5CmdForeignObject.syndrome,
          "A's UMEM is gone, or B may end it");
    check(as(b_, generalInput(kDestroyGeneral, kReservedQpn, objA_.range)).syndrome() ==
                  err::kMlx5CmdForeignObject.syndrome &&
              as(0, generalInput(0xa02, kReservedQpn, objA_.range)).status() == 0,
          "A's reserved QP numbers are gone, or B may end them");
    check(as(b_, generalInput(kDestroyGeneral, kAvQpMapping, objA_.mapping)).syndrome() ==
              err::kMlx5CmdForeignObject.syndrome,
          "A's AH-to-QP mapping is gone, or B may end it");
    checkMadeByB();
}

} // namespace pib::fuzzing
