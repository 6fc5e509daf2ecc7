// SPDX-License-Identifier: GPL-2.0-or-later
#include "fuzz_core_peer.hh"

#include <algorithm>
#include <cstring>

#include "connected.hh"
#include "fuzz_core_check.hh"

namespace pib::fuzz {

namespace {

constexpr uint8_t kAckSyndrome = aeth::syndrome(aeth::kAck, aeth::kNoCredits);
// At most this many READ response packets per answer: a long READ is
// answered over several steps, as a slow peer would.
constexpr uint32_t kMaxResponsesAtOnce = 64;
// Messages the peer remembers per QP, to send again.
constexpr size_t kRecentMessages = 4;

// The later of two PSNs (in 24-bit sequence space).
uint32_t later(uint32_t a, uint32_t b) {
    return psnDiff(b, a) > 0 ? b : a;
}

uint32_t packetsFor(uint32_t length, uint32_t mtu) {
    return std::max<uint32_t>(1, (length + mtu - 1) / mtu);
}

bool isResponse(uint8_t op) {
    return op >= iba::kReadResponseFirst && op <= iba::kAtomicAcknowledge;
}

// The opcode of packet `i` of `n` of a SEND or WRITE (IBA 9.2, table 38).
uint8_t messageOpcode(Operation op, uint32_t i, uint32_t n) {
    const bool only = n == 1, first = i == 0, last = i == n - 1;
    switch (op) {
    case Operation::kWrite:
    case Operation::kWriteImm: {
        const bool imm = op == Operation::kWriteImm;
        return only    ? (imm ? iba::kWriteOnlyImm : iba::kWriteOnly)
               : first ? iba::kWriteFirst
               : last  ? (imm ? iba::kWriteLastImm : iba::kWriteLast)
                       : iba::kWriteMiddle;
    }
    case Operation::kSendImm:
        return only    ? iba::kSendOnlyImm
               : first ? iba::kSendFirst
               : last  ? iba::kSendLastImm
                       : iba::kSendMiddle;
    case Operation::kSendInv:
        return only    ? iba::kSendOnlyInv
               : first ? iba::kSendFirst
               : last  ? iba::kSendLastInv
                       : iba::kSendMiddle;
    default:
        return only    ? iba::kSendOnly
               : first ? iba::kSendFirst
               : last  ? iba::kSendLast
                       : iba::kSendMiddle;
    }
}

// The requests of one packet whatever their length: the atomics, and
// IBA 1.5's FLUSH and ATOMIC WRITE.
bool isOnePacket(Operation op) {
    return op == Operation::kCompareSwap || op == Operation::kFetchAdd || op == Operation::kFlush ||
           op == Operation::kAtomicWrite;
}

// UC has SENDs and WRITEs only (IBA 9.8): the rest becomes one of those.
Operation forTransport(const Qp &q, Operation op) {
    if (q.type != PIB_QPT_UC)
        return op;
    if (op == Operation::kSendInv)
        return Operation::kSend;
    return op >= Operation::kRead ? Operation::kWrite : op;
}

uint8_t transportOf(const Qp &q) {
    switch (q.type) {
    case PIB_QPT_UC:
        return iba::kTransportUc;
    case PIB_QPT_XRC_INI:
    case PIB_QPT_XRC_TGT:
        return iba::kTransportXrc;
    default:
        return iba::kTransportRc;
    }
}

// The last PSN an answer takes: a READ's last response, else the request's.
uint32_t lastPsnOf(const Owed &o, uint32_t mtu) {
    return o.kind == Owed::Kind::kRead ? psnAdd(o.psn, packetsFor(o.length, mtu) - 1) : o.psn;
}

} // namespace

iba::Packet Peer::fromPeer(const Qp &q, uint8_t op, uint32_t psn) const {
    iba::Packet p;
    p.lrh.dlid = kLid;
    p.lrh.slid = q.peerLid;
    p.bth.opcode = static_cast<uint8_t>(transportOf(q) | op);
    p.bth.destQp = q.qpn;
    p.bth.psn = psn;
    return p;
}

// ---- messages to the responders -------------------------------------------------

std::vector<iba::Packet> Peer::packetsOf(const Qp &q, const Message &m) const {
    const Operation op = forTransport(q, m.op);
    const uint32_t mtu = q.mtu();
    const auto withXrceth = [&](iba::Packet p) {
        if (iba::layoutOf(p.bth.opcode).xrceth)
            p.xrceth = m.xrcSrqn & 0xffffff;
        return p;
    };
    if (op == Operation::kRead) {
        iba::Packet p = fromPeer(q, iba::kReadRequest, q.expectedPsn);
        p.reth = iba::Reth{m.va, m.rkey, m.length};
        return {withXrceth(p)};
    }
    if (op == Operation::kCompareSwap || op == Operation::kFetchAdd) {
        iba::Packet p = fromPeer(
            q, op == Operation::kCompareSwap ? iba::kCompareSwap : iba::kFetchAdd, q.expectedPsn);
        p.atomicEth = iba::AtomicEth{m.va, m.rkey, m.swapAdd, m.compare};
        return {withXrceth(p)};
    }
    if (op == Operation::kFlush) { // mostly to global visibility; now and then any FETH
        iba::Packet p = fromPeer(q, iba::kFlush, q.expectedPsn);
        const bool any = (m.compare & 7) == 0;
        p.feth = iba::Feth{any ? static_cast<uint8_t>(m.compare >> 3 & 0xf)
                               : static_cast<uint8_t>(PIB_FLUSH_GLOBAL),
                           static_cast<uint8_t>(m.compare >> 7 & (any ? 3 : 1))};
        p.reth = iba::Reth{m.va, m.rkey, m.length};
        return {withXrceth(p)};
    }
    if (op == Operation::kAtomicWrite) {
        iba::Packet p = fromPeer(q, iba::kAtomicWrite, q.expectedPsn);
        p.reth = iba::Reth{m.va, m.rkey, 8};
        p.payload.resize(8);
        std::memcpy(p.payload.data(), &m.swapAdd, 8);
        return {withXrceth(p)};
    }
    const uint32_t n = packetsFor(m.length, mtu);
    std::vector<iba::Packet> packets;
    for (uint32_t i = 0; i < n; ++i) {
        iba::Packet p = fromPeer(q, messageOpcode(op, i, n), psnAdd(q.expectedPsn, i));
        const iba::Layout l = iba::layoutOf(p.bth.opcode);
        const uint32_t offset = i * mtu;
        p.payload.resize(std::min(mtu, m.length - std::min(m.length, offset)));
        for (size_t b = 0; b < p.payload.size(); ++b)
            p.payload[b] = static_cast<uint8_t>(m.fill + offset + b);
        if (l.reth)
            p.reth = iba::Reth{m.va, m.rkey, m.length};
        if (l.imm)
            p.imm = m.imm;
        if (l.ieth)
            p.ieth = m.invalidate;
        const bool last = i == n - 1;
        p.bth.ackReq = last;
        p.bth.solicited = last && m.solicited;
        packets.push_back(withXrceth(p));
    }
    return packets;
}

void Peer::transmit(const iba::Packet &p, size_t cut, std::optional<size_t> flip) {
    std::vector<uint8_t> bytes = iba::build(p);
    if (flip && !bytes.empty()) // a bit flipped on the wire: the CRCs no longer match
        bytes[*flip % bytes.size()] ^= static_cast<uint8_t>(1u << (*flip % 8));
    const std::vector<uint8_t> frame = wire::encode(PIB_WIRE_PACKET, bytes);
    if (t_.ringsUp()) {
        // A full ring loses the packet, as a switch's full output would.
        t_.rings->put(frame);
        t_.rings->publish();
        if (cut >= frame.size()) // else the device finds it at its next doorbell
            t_.rings->answerBell();
        return;
    }
    cut = std::min(cut, frame.size());
    pib_core_port_receive(t_.host.core, 1, frame.data(), cut);
    pib_core_port_receive(t_.host.core, 1, frame.data() + cut, frame.size() - cut);
}

// Each packet's frame mostly whole, sometimes cut in two reads; packet
// `flipIn`, if any, with a bit flipped.
void Peer::transmitAll(const std::vector<iba::Packet> &packets, FuzzedDataProvider &in,
                       std::optional<size_t> flipIn) {
    for (size_t i = 0; i < packets.size(); ++i) {
        const size_t cut =
            in.ConsumeIntegralInRange(0, 7) ? SIZE_MAX : in.ConsumeIntegral<uint16_t>();
        std::optional<size_t> flip;
        if (flipIn == i)
            flip = in.ConsumeIntegral<uint16_t>();
        transmit(packets[i], cut, flip);
    }
}

void Peer::sendMessage(Qp &q, const Message &m, Spoil spoil, FuzzedDataProvider &in) {
    q.rest.clear(); // a message held back is given up: this one is out of sequence
    std::vector<iba::Packet> packets = packetsOf(q, m);
    const auto pickPacket = [&] {
        return in.ConsumeIntegralInRange<size_t>(0, packets.size() - 1);
    };
    std::optional<size_t> flip;
    switch (spoil) {
    case Spoil::kNone:
    case Spoil::kCount:
        break;
    case Spoil::kShiftPsn: {
        const auto delta = static_cast<uint32_t>(in.ConsumeIntegralInRange(1, 3));
        for (iba::Packet &p : packets)
            p.bth.psn = psnAdd(p.bth.psn, in.ConsumeBool() ? delta : 0x1000000 - delta);
        break;
    }
    case Spoil::kDropPacket:
        packets.erase(packets.begin() + static_cast<ptrdiff_t>(pickPacket()));
        break;
    case Spoil::kRepeatPacket: {
        const size_t i = pickPacket();
        packets.insert(packets.begin() + static_cast<ptrdiff_t>(i), packets[i]);
        break;
    }
    case Spoil::kSwapPackets:
        if (packets.size() > 1) {
            const size_t i = in.ConsumeIntegralInRange<size_t>(0, packets.size() - 2);
            std::swap(packets[i], packets[i + 1]);
        }
        break;
    case Spoil::kResizePayload: {
        std::vector<uint8_t> &payload = packets[pickPacket()].payload;
        payload.resize(in.ConsumeBool() ? payload.size() + in.ConsumeIntegralInRange(1, 8)
                                        : payload.size() / 2);
        break;
    }
    case Spoil::kFlipBit:
        flip = pickPacket();
        break;
    case Spoil::kForeignPkey:
        packets[pickPacket()].bth.pkey = in.ConsumeIntegralInRange<uint16_t>(1, 0x7ffe);
        break;
    case Spoil::kCutShort: // the message stays in progress
    case Spoil::kHoldBack:
        if (packets.size() > 1) {
            const auto sent = in.ConsumeIntegralInRange<size_t>(1, packets.size() - 1);
            if (spoil == Spoil::kHoldBack)
                q.rest.assign(packets.begin() + static_cast<ptrdiff_t>(sent), packets.end());
            packets.resize(sent);
        } else {
            spoil = Spoil::kNone; // one packet: nothing to cut
        }
        break;
    }
    transmitAll(packets, in, flip);
    q.recent.push_back(std::move(packets));
    if (q.recent.size() > kRecentMessages)
        q.recent.pop_front();
    // Packets sent in sequence are taken (or answered with a NAK that
    // says otherwise): the next message follows them.
    const Operation op = forTransport(q, m.op);
    const uint32_t psns = isOnePacket(op) ? 1 : packetsFor(m.length, q.mtu());
    if (spoil == Spoil::kNone || spoil == Spoil::kRepeatPacket)
        q.expectedPsn = psnAdd(q.expectedPsn, psns);
    else if (spoil == Spoil::kCutShort || spoil == Spoil::kHoldBack)
        q.expectedPsn = psnAdd(q.expectedPsn, static_cast<uint32_t>(q.recent.back().size()));
}

void Peer::sendRest(Qp &q, FuzzedDataProvider &in) {
    std::vector<iba::Packet> packets = std::move(q.rest);
    q.rest.clear();
    transmitAll(packets, in, std::nullopt);
    q.expectedPsn = psnAdd(q.expectedPsn, static_cast<uint32_t>(packets.size()));
}

void Peer::sendAgain(Qp &q, FuzzedDataProvider &in) {
    if (q.recent.empty())
        return;
    transmitAll(q.recent[in.ConsumeIntegralInRange<size_t>(0, q.recent.size() - 1)], in,
                std::nullopt);
}

// ---- answers to the requesters ----------------------------------------------------

// READ responses for `o`, at most kMaxResponsesAtOnce of them: the rest
// stays owed, from the next PSN on.
std::vector<iba::Packet> Peer::readResponses(const Qp &q, const Owed &o, FuzzedDataProvider &in) {
    const uint32_t mtu = q.mtu();
    const uint32_t n = packetsFor(o.length, mtu);
    const uint32_t now = std::min(n, kMaxResponsesAtOnce);
    std::vector<iba::Packet> packets;
    const auto fill = in.ConsumeIntegral<uint8_t>();
    for (uint32_t i = 0; i < now; ++i) {
        const uint8_t op = n == 1       ? iba::kReadResponseOnly
                           : i == 0     ? iba::kReadResponseFirst
                           : i == n - 1 ? iba::kReadResponseLast
                                        : iba::kReadResponseMiddle;
        iba::Packet p = fromPeer(q, op, psnAdd(o.psn, i));
        if (iba::layoutOf(p.bth.opcode).aeth)
            p.aeth = iba::Aeth{kAckSyndrome, 0};
        p.payload.assign(std::min(mtu, o.length - i * mtu), static_cast<uint8_t>(fill + i));
        packets.push_back(p);
    }
    return packets;
}

void Peer::answer(Qp &q, Answer how, FuzzedDataProvider &in) {
    if (q.owed.empty()) { // nothing asked: a stray ACK
        iba::Packet p = fromPeer(q, iba::kAcknowledge, q.lastRequestPsn);
        p.aeth = iba::Aeth{kAckSyndrome, 0};
        transmit(p, SIZE_MAX);
        return;
    }
    Owed o = q.owed.front();
    q.owed.pop_front();
    iba::Packet nak = fromPeer(q, iba::kAcknowledge, o.psn);
    switch (how) {
    case Answer::kRnrNak:
        nak.aeth =
            iba::Aeth{aeth::syndrome(aeth::kRnrNak, in.ConsumeIntegralInRange<uint8_t>(0, 31)), 0};
        transmit(nak, SIZE_MAX);
        return;
    case Answer::kSequenceNak:
    case Answer::kFatalNak:
        nak.aeth = iba::Aeth{aeth::syndrome(aeth::kNak, how == Answer::kSequenceNak
                                                            ? aeth::kPsnSequence
                                                            : in.ConsumeIntegralInRange(1, 3)),
                             0};
        transmit(nak, SIZE_MAX);
        return;
    case Answer::kBeyondSent: // a response to a request never sent
        o.psn = psnAdd(q.lastRequestPsn, in.ConsumeIntegralInRange(1, 4));
        break;
    case Answer::kStale: // one the requester has had already
        o.psn = psnAdd(o.psn, 0x1000000 - in.ConsumeIntegralInRange<uint32_t>(1, 4));
        break;
    default:
        break;
    }
    std::vector<iba::Packet> packets;
    if (o.kind == Owed::Kind::kRead) {
        packets = readResponses(q, o, in);
        const uint32_t sent = static_cast<uint32_t>(packets.size());
        if (sent < packetsFor(o.length, q.mtu())) // the rest, later
            q.owed.push_front({Owed::Kind::kRead, psnAdd(o.psn, sent), o.length - sent * q.mtu()});
        if (how == Answer::kBadReadLength)
            packets.back().payload.resize(packets.back().payload.size() ^ 1);
        if (how == Answer::kLostResponse && packets.size() > 1)
            packets.erase(packets.begin() + in.ConsumeIntegralInRange<ptrdiff_t>(
                                                0, static_cast<ptrdiff_t>(packets.size()) - 2));
    } else {
        const bool atomic = o.kind == Owed::Kind::kAtomic;
        iba::Packet p = fromPeer(q, atomic ? iba::kAtomicAcknowledge : iba::kAcknowledge, o.psn);
        p.aeth = iba::Aeth{kAckSyndrome, 0};
        if (atomic)
            p.atomicAck = in.ConsumeIntegral<uint64_t>();
        packets.push_back(p);
    }
    transmitAll(packets, in, std::nullopt);
}

// ---- what the device sent ------------------------------------------------------------

// The QP of ours a packet of the device comes from: connected QPs send to
// their peer's QP, which names them.
Qp *Peer::qpTalkingTo(const iba::Packet &p) {
    for (Qp *q : t_.qps)
        if (q->connected() && q->peerQpn == p.bth.destQp && q->peerLid == p.lrh.dlid)
            return q;
    return nullptr;
}

void Peer::readDeviceOutput() {
    std::vector<uint8_t> &out = t_.host.portOutput[1];
    reader_.feed(out);
    out.clear();
    if (t_.ringsUp()) { // whole frames, after what the stream carried
        std::vector<std::vector<uint8_t>> frames;
        try {
            frames = t_.rings->take();
        } catch (const std::runtime_error &) {
            // Only the input's scribbles may break the device's ring: the
            // switch then drops the link.
            check(t_.ringScribbled, "the device broke its own ring");
            t_.rings.reset();
            pib_core_port_connected(t_.host.core, 1, 0);
        }
        for (const auto &frame : frames)
            reader_.feed(frame);
    }
    wire::FrameReader::Error error = wire::FrameReader::Error::kNone;
    while (const auto frame = reader_.next(&error)) {
        if (frame->type != PIB_WIRE_PACKET)
            continue;
        iba::ParseError parseError;
        const std::optional<iba::Packet> p = iba::parse(frame->payload, &parseError);
        Qp *q = p ? qpTalkingTo(*p) : nullptr;
        if (!q)
            continue;
        if (isResponse(p->bth.opcode & 0x1f))
            responderSaid(*q, *p);
        else
            requesterSent(*q, *p);
    }
    if (error != wire::FrameReader::Error::kNone)
        reader_.reset();
}

// A responder's answer tells the PSN it takes next: past what it ACKed or
// answered, or the PSN it NAKed for a sequence error or RNR. Any other NAK
// moved the QP to the error state.
void Peer::responderSaid(Qp &q, const iba::Packet &p) {
    const uint32_t psn = p.bth.psn;
    if ((p.bth.opcode & 0x1f) != iba::kAcknowledge || !p.aeth) {
        q.expectedPsn = later(q.expectedPsn, psnAdd(psn, 1));
        return;
    }
    const uint8_t syndrome = p.aeth->syndrome;
    switch (syndrome >> 5) {
    case aeth::kAck:
        q.expectedPsn = later(q.expectedPsn, psnAdd(psn, 1));
        break;
    case aeth::kRnrNak:
        q.expectedPsn = psn;
        break;
    case aeth::kNak:
        if ((syndrome & 0x1f) == aeth::kPsnSequence)
            q.expectedPsn = psn;
        else
            q.suspect = true;
        break;
    default:
        break;
    }
}

// A requester's packet: what it waits for. A packet at a PSN already owed
// is a resend from there: those answers are asked again.
void Peer::requesterSent(Qp &q, const iba::Packet &p) {
    if (!q.reliable())
        return; // UC: nothing is answered
    const uint32_t psn = p.bth.psn;
    const uint32_t mtu = q.mtu();
    std::erase_if(q.owed, [&](const Owed &o) { return psnDiff(lastPsnOf(o, mtu), psn) >= 0; });
    q.lastRequestPsn = psn;
    switch (p.bth.opcode & 0x1f) {
    case iba::kReadRequest: {
        const Owed o{Owed::Kind::kRead, psn, p.reth ? p.reth->length : 0};
        q.owed.push_back(o);
        q.lastRequestPsn = lastPsnOf(o, mtu);
        break;
    }
    case iba::kCompareSwap:
    case iba::kFetchAdd:
        q.owed.push_back({Owed::Kind::kAtomic, psn, 0});
        break;
    case iba::kFlush: // IBA 1.5: answered by a READ response without data
    case iba::kAtomicWrite:
        q.owed.push_back({Owed::Kind::kRead, psn, 0});
        break;
    default:
        if (p.bth.ackReq)
            q.owed.push_back({Owed::Kind::kAck, psn, 0});
        break;
    }
}

// ---- anything at all ------------------------------------------------------------------

void Peer::sendAnyPacket(FuzzedDataProvider &in) {
    static constexpr uint8_t kConnectedOps[] = {
        iba::kSendFirst,         iba::kSendMiddle,         iba::kSendLast,
        iba::kSendLastImm,       iba::kSendOnly,           iba::kSendOnlyImm,
        iba::kWriteFirst,        iba::kWriteMiddle,        iba::kWriteLast,
        iba::kWriteLastImm,      iba::kWriteOnly,          iba::kWriteOnlyImm,
        iba::kReadRequest,       iba::kReadResponseFirst,  iba::kAcknowledge,
        iba::kReadResponseOnly,  iba::kCompareSwap,        iba::kFetchAdd,
        iba::kAtomicAcknowledge, iba::kReadResponseMiddle, iba::kReadResponseLast,
        iba::kSendLastInv,       iba::kSendOnlyInv,        iba::kFlush,
        iba::kAtomicWrite};
    iba::Packet p;
    p.lrh.slid = in.ConsumeIntegralInRange(0, 7) ? kPeerLid : in.ConsumeIntegral<uint16_t>();
    p.lrh.sl = in.ConsumeIntegralInRange<uint8_t>(0, 15);
    p.lrh.dlid = kLid;
    const uint8_t op =
        kConnectedOps[in.ConsumeIntegralInRange<size_t>(0, std::size(kConnectedOps) - 1)];
    uint32_t base = 0; // the PSN the packet is near
    switch (in.ConsumeIntegralInRange(0, 4)) {
    case 0:
    case 1: { // a connected QP
        Qp &q = t_.pickConnected(in);
        p.bth.destQp = q.qpn;
        p.bth.opcode = static_cast<uint8_t>(transportOf(q) | op);
        base = isResponse(op) ? (q.owed.empty() ? q.lastRequestPsn : q.owed.front().psn)
                              : q.expectedPsn;
        if (iba::layoutOf(p.bth.opcode).xrceth) {
            const uint32_t named[] = {t_.xrcSrq.srqn, t_.srq.srqn, t_.tenant.srqn,
                                      in.ConsumeIntegralInRange(0u, 0xffffffu)};
            p.xrceth = named[in.ConsumeIntegralInRange<size_t>(0, std::size(named) - 1)];
        }
        break;
    }
    case 2: // UD, unicast or to the multicast group
        p.lrh.dlid = in.ConsumeBool() ? kLid : kMlid;
        p.bth.destQp = p.lrh.dlid == kMlid ? iba::kMulticastQpn : t_.ud.qpn;
        p.bth.opcode = in.ConsumeBool() ? iba::kUdSendOnly : iba::kUdSendOnlyImm;
        break;
    case 3: // QP0 or QP1
        p.lrh.dlid = in.ConsumeBool() ? kLid : iba::kPermissiveLid;
        p.bth.destQp = in.ConsumeIntegralInRange(0, 1);
        p.lrh.vl = p.bth.destQp == 0 ? 15 : 0;
        p.bth.opcode = iba::kUdSendOnly;
        break;
    default: // anything
        p.lrh.dlid = in.ConsumeIntegral<uint16_t>();
        p.lrh.vl = in.ConsumeIntegralInRange<uint8_t>(0, 15);
        p.bth.destQp = in.ConsumeIntegralInRange<uint32_t>(0, 0xffffff);
        p.bth.opcode = in.ConsumeIntegral<uint8_t>();
        break;
    }
    if (!iba::layoutOf(p.bth.opcode).valid)
        p.bth.opcode = iba::kUdSendOnly; // build() needs a layout it knows
    const iba::Layout l = iba::layoutOf(p.bth.opcode);
    if (l.xrceth && !p.xrceth)
        p.xrceth = in.ConsumeIntegralInRange(0u, 0xffffffu);
    p.bth.pkey = in.ConsumeIntegralInRange(0, 7) ? 0xffff : in.ConsumeIntegral<uint16_t>();
    p.bth.ackReq = in.ConsumeBool();
    p.bth.solicited = in.ConsumeBool();
    // Mostly near the PSN the transport expects, sometimes anything.
    p.bth.psn = in.ConsumeIntegralInRange(0, 15)
                    ? psnAdd(base, static_cast<uint32_t>(in.ConsumeIntegralInRange(-3, 3)))
                    : in.ConsumeIntegralInRange(0u, 0xffffffu);
    if (in.ConsumeIntegralInRange(0, 7) == 0) {
        iba::Grh g;
        g.hopLimit = in.ConsumeIntegral<uint8_t>();
        g.dgid[0] = 0xff;
        g.dgid[15] = in.ConsumeIntegralInRange<uint8_t>(0, 2);
        p.grh = g;
        p.lrh.lnh = iba::kLnhIbaGlobal;
    }
    if (l.deth)
        p.deth = iba::Deth{in.ConsumeBool() ? kQkey : in.ConsumeIntegral<uint32_t>(),
                           in.ConsumeIntegralInRange<uint32_t>(0, 0xffffff)};
    if (l.reth)
        p.reth = iba::Reth{t_.pickAddress(in), t_.pickKey(in), t_.pickLength(in)};
    if (l.aeth)
        p.aeth = iba::Aeth{in.ConsumeIntegral<uint8_t>(), in.ConsumeIntegralInRange(0u, 0xffffffu)};
    if (l.atomicEth)
        p.atomicEth =
            iba::AtomicEth{t_.pickAddress(in), t_.pickKey(in), in.ConsumeIntegral<uint64_t>(),
                           in.ConsumeIntegral<uint64_t>()};
    if (l.atomicAckEth)
        p.atomicAck = in.ConsumeIntegral<uint64_t>();
    if (l.imm)
        p.imm = in.ConsumeIntegral<uint32_t>();
    if (l.ieth)
        p.ieth = t_.pickKey(in);
    if (l.payload) {
        const size_t len = in.ConsumeIntegralInRange<size_t>(0, 4096);
        p.payload = in.ConsumeBytes<uint8_t>(len);
        p.payload.resize(len);
    }
    std::optional<size_t> flip;
    if (in.ConsumeIntegralInRange(0, 15) == 0)
        flip = in.ConsumeIntegral<uint16_t>();
    transmit(p, in.ConsumeBool() ? SIZE_MAX : in.ConsumeIntegral<uint16_t>(), flip);
}

} // namespace pib::fuzz
