// SPDX-License-Identifier: GPL-2.0-or-later
#include "packet.hh"

#include <cstring>
#include <stdexcept>

#include "crc.hh"

namespace pib::iba {

namespace {

constexpr size_t kLrhSize = 8;
constexpr size_t kGrhSize = 40;
constexpr size_t kBthSize = 12;
constexpr size_t kDethSize = 8;
constexpr size_t kImmSize = 4;
constexpr size_t kIethSize = 4;
constexpr size_t kXrcethSize = 4;
constexpr size_t kFethSize = 4;
constexpr size_t kIcrcSize = 4;
constexpr size_t kVcrcSize = 2;
constexpr size_t kMaxPayload = 4096;

// Writes big-endian fields one after another into memory sized for them.
struct Cursor {
    uint8_t *at;
    void put8(uint8_t v) { *at++ = v; }
    void put16(uint16_t v) { put8(static_cast<uint8_t>(v >> 8)), put8(static_cast<uint8_t>(v)); }
    void put32(uint32_t v) {
        put16(static_cast<uint16_t>(v >> 16)), put16(static_cast<uint16_t>(v));
    }
    void put64(uint64_t v) {
        put32(static_cast<uint32_t>(v >> 32)), put32(static_cast<uint32_t>(v));
    }
    void put(std::span<const uint8_t> bytes) {
        std::memcpy(at, bytes.data(), bytes.size());
        at += bytes.size();
    }
};

uint16_t get16(const uint8_t *p) {
    return static_cast<uint16_t>(p[0] << 8 | p[1]);
}
uint32_t get32(const uint8_t *p) {
    return uint32_t{get16(p)} << 16 | get16(p + 2);
}

constexpr size_t kRethSize = 16;
constexpr size_t kAethSize = 4;
constexpr size_t kAtomicEthSize = 28;
constexpr size_t kAtomicAckEthSize = 8;
constexpr size_t kDcethSize = 16;

uint64_t get64(const uint8_t *p) {
    return uint64_t{get32(p)} << 32 | get32(p + 4);
}

size_t extensionSize(const Layout &l) {
    return (l.deth ? kDethSize : 0) + (l.reth ? kRethSize : 0) + (l.aeth ? kAethSize : 0) +
           (l.atomicEth ? kAtomicEthSize : 0) + (l.atomicAckEth ? kAtomicAckEthSize : 0) +
           (l.imm ? kImmSize : 0) + (l.ieth ? kIethSize : 0) + (l.xrceth ? kXrcethSize : 0) +
           (l.dceth ? kDcethSize : 0) + (l.feth ? kFethSize : 0);
}

// IBA 7.8.1: the ICRC covers the packet with its variant fields (the whole
// LRH; the GRH's traffic class, flow label and hop limit; the BTH's
// reserved byte) replaced by ones. Only the headers need a masked copy.
struct BodyCrcs {
    uint32_t icrc;      // the ICRC of the body
    uint16_t vcrcState; // the VCRC's running value after the body
};

// The ICRC's running value after the LRH, which it sees as ones.
constexpr uint32_t kIcrcAfterLrh = [] {
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < kLrhSize; ++i) {
        crc ^= 0xff;
        for (int bit = 0; bit < 8; ++bit)
            crc = crc & 1 ? (crc >> 1) ^ 0xedb88320u : crc >> 1;
    }
    return crc;
}();

// Without a GRH the two CRCs see the same bytes from the BTH on, except
// its reserved byte, which the ICRC takes as ones: one pass from there,
// with these running values and this byte flipped for the ICRC.
struct FromBth {
    uint32_t icrc;
    uint16_t vcrc;
    uint8_t flip;
};

FromBth crcsFromBth(std::span<const uint8_t> lrh, uint8_t resv8a) {
    return {kIcrcAfterLrh, crc16Update(0xffff, lrh), static_cast<uint8_t>(0xff ^ resv8a)};
}

// `body` is a packet from its LRH to its pad. The ICRC covers it with the
// variant fields of the headers (above) masked, the VCRC as it is; the
// data after the headers is the same for both, so one pass computes both.
BodyCrcs bodyCrcs(std::span<const uint8_t> body, bool grh) {
    if (!grh) { // the usual case: both go on together from the BTH
        FromBth c = crcsFromBth(body.first(kLrhSize), body[kLrhSize + 4]);
        crc32And16Update(&c.icrc, &c.vcrc, body.subspan(kLrhSize), c.flip);
        return {~c.icrc, c.vcrc};
    }
    const size_t bth = kLrhSize + (grh ? kGrhSize : 0);
    const size_t headers = bth + kBthSize;
    uint8_t masked[kLrhSize + kGrhSize + kBthSize];
    std::copy(body.begin(), body.begin() + headers, masked);
    for (size_t i = 0; i < kLrhSize; ++i)
        masked[i] = 0xff;
    if (grh) {
        masked[kLrhSize] |= 0x0f; // low nibble of TClass (with IPVer)
        masked[kLrhSize + 1] = 0xff;
        masked[kLrhSize + 2] = 0xff;
        masked[kLrhSize + 3] = 0xff;
        masked[kLrhSize + 7] = 0xff; // hop limit
    }
    masked[bth + 4] = 0xff; // resv8a
    uint32_t icrc = crc32Update(0xffffffffu, std::span<const uint8_t>(masked, headers));
    uint16_t vcrc = crc16Update(0xffff, body.first(headers));
    crc32And16Update(&icrc, &vcrc, body.subspan(headers));
    return {~icrc, vcrc};
}

size_t headerBytes(bool grh) {
    return kLrhSize + (grh ? kGrhSize : 0) + kBthSize;
}

} // namespace

const char *toString(ParseError error) {
    switch (error) {
    case ParseError::kNone:
        return "none";
    case ParseError::kTooShort:
        return "packet too short";
    case ParseError::kTooLong:
        return "packet too long";
    case ParseError::kBadLnh:
        return "unsupported LNH";
    case ParseError::kBadLength:
        return "length fields disagree with the packet";
    case ParseError::kBadVcrc:
        return "bad VCRC";
    case ParseError::kBadIcrc:
        return "bad ICRC";
    case ParseError::kBadVersion:
        return "unsupported header version";
    case ParseError::kUnsupportedOpcode:
        return "unsupported BTH opcode";
    }
    return "?";
}

namespace {

size_t padOf(size_t payloadLength) {
    return (4 - payloadLength % 4) % 4;
}

// LRH to ICRC: what PktLen counts.
size_t lrhToIcrc(const Packet &p, size_t payloadLength) {
    const Layout layout = layoutOf(p.bth.opcode);
    const size_t payload = layout.payload ? payloadLength : 0;
    return kLrhSize + (p.grh ? kGrhSize : 0) + kBthSize + extensionSize(layout) + payload +
           padOf(payload) + kIcrcSize;
}

} // namespace

size_t PacketWriter::framedSize(const Packet &p, size_t payloadLength, size_t headroom) {
    return headroom + lrhToIcrc(p, payloadLength) + kVcrcSize;
}

PacketWriter::PacketWriter(const Packet &p, size_t payloadLength, size_t headroom,
                           std::vector<uint8_t> storage)
    : owned_(std::move(storage)), headroom_(headroom), grh_(p.grh.has_value()) {
    const Layout layout = layoutOf(p.bth.opcode);
    payloadLength_ = layout.payload ? payloadLength : 0;
    const size_t total = lrhToIcrc(p, payloadLength_);
    // A recycled buffer usually has this size already: nothing is zeroed
    // only to be overwritten by the payload.
    owned_.resize(headroom + total + kVcrcSize);
    out_ = owned_;
    writeHeaders(p, layout, total);
}

PacketWriter::PacketWriter(const Packet &p, size_t payloadLength, size_t headroom,
                           std::span<uint8_t> place)
    : out_(place), inPlace_(true), headroom_(headroom), grh_(p.grh.has_value()) {
    const Layout layout = layoutOf(p.bth.opcode);
    payloadLength_ = layout.payload ? payloadLength : 0;
    const size_t total = lrhToIcrc(p, payloadLength_);
    if (place.size() != headroom + total + kVcrcSize)
        throw std::length_error("the place does not fit the packet");
    writeHeaders(p, layout, total);
}

// The headers, from the LRH on; `total` is what PktLen counts.
void PacketWriter::writeHeaders(const Packet &p, const Layout &layout, size_t total) {
    const size_t pad = padOf(payloadLength_);
    const size_t transport = total - kLrhSize - (p.grh ? kGrhSize : 0);
    icrcAt_ = headroom_ + total - kIcrcSize;
    Cursor out{out_.data() + headroom_};
    out.put8(static_cast<uint8_t>(p.lrh.vl << 4 | (p.lrh.lver & 0xf)));
    out.put8(static_cast<uint8_t>(p.lrh.sl << 4 | (p.grh ? kLnhIbaGlobal : kLnhIbaLocal)));
    out.put16(p.lrh.dlid);
    out.put16(static_cast<uint16_t>(total / 4) & 0x7ff);
    out.put16(p.lrh.slid);
    if (p.grh) {
        const Grh &g = *p.grh;
        out.put32(6u << 28 | uint32_t{g.tclass} << 20 | (g.flowLabel & 0xfffff));
        out.put16(static_cast<uint16_t>(transport));
        out.put8(g.nextHeader);
        out.put8(g.hopLimit);
        out.put(g.sgid);
        out.put(g.dgid);
    }
    const Bth &b = p.bth;
    out.put8(b.opcode);
    out.put8(static_cast<uint8_t>(b.solicited << 7 | b.migReq << 6 | pad << 4 | (b.tver & 0xf)));
    out.put16(b.pkey);
    out.put32(b.destQp & 0xffffff); // resv8a = 0
    out.put32(uint32_t{b.ackReq} << 31 | (b.psn & 0xffffff));
    // Extension headers in IBA order; absent ones are zeros.
    if (layout.deth) {
        const Deth d = p.deth.value_or(Deth{});
        out.put32(d.qkey);
        out.put32(d.srcQp & 0xffffff);
    }
    if (layout.xrceth)
        out.put32(p.xrceth.value_or(0) & 0xffffff);
    if (layout.dceth) {
        const Dceth d = p.dceth.value_or(Dceth{});
        out.put64(d.key);
        out.put32(uint32_t{d.flags} << 24 | (d.dci & 0xffffff));
        out.put32(d.serial);
    }
    if (layout.feth) {
        const Feth f = p.feth.value_or(Feth{});
        out.put32(uint32_t{f.selectivity & 3u} << 4 | (f.placement & 0xfu));
    }
    if (layout.reth) {
        const Reth r = p.reth.value_or(Reth{});
        out.put64(r.va);
        out.put32(r.rkey);
        out.put32(r.length);
    }
    if (layout.aeth) {
        const Aeth a = p.aeth.value_or(Aeth{});
        out.put32(uint32_t{a.syndrome} << 24 | (a.msn & 0xffffff));
    }
    if (layout.atomicEth) {
        const AtomicEth a = p.atomicEth.value_or(AtomicEth{});
        out.put64(a.va);
        out.put32(a.rkey);
        out.put64(a.swapAdd);
        out.put64(a.compare);
    }
    if (layout.atomicAckEth)
        out.put64(p.atomicAck.value_or(0));
    if (layout.imm)
        out.put32(p.imm.value_or(0));
    if (layout.ieth)
        out.put32(p.ieth.value_or(0));
    payloadAt_ = static_cast<size_t>(out.at - out_.data());
    std::memset(out.at + payloadLength_, 0, pad); // the pad bytes are zeros
    if (!p.grh) {
        const FromBth c = crcsFromBth(out_.subspan(headroom_, kLrhSize), 0);
        crcs_.emplace(c.icrc, c.vcrc, c.flip);
        folded_ = headroom_ + kLrhSize;
    }
}

void PacketWriter::foldUpTo(size_t end) {
    uint8_t *at = out_.data() + folded_;
    crcs_->add(at, at, end - folded_);
    folded_ = end;
}

// The payload room for the next n bytes: their offset in out_.
size_t PacketWriter::claim(size_t n) {
    if (n > payloadLength_ - filled_)
        throw std::length_error("more payload than the packet has room for");
    filled_ += n;
    return payloadAt_ + filled_ - n;
}

void PacketWriter::append(const uint8_t *src, size_t n) {
    const size_t at = claim(n);
    if (crcs_) {
        foldUpTo(at);
        crcs_->add(out_.data() + at, src, n);
        folded_ = at + n;
    } else {
        std::memcpy(out_.data() + at, src, n);
    }
}

std::span<uint8_t> PacketWriter::appendRoom(size_t n) {
    return out_.subspan(claim(n), n);
}

std::vector<uint8_t> PacketWriter::finish() && {
    const std::span<uint8_t> bytes = out_;
    BodyCrcs crcs;
    if (crcs_) {
        foldUpTo(icrcAt_);
        crcs_->finish(&crcs.icrc, &crcs.vcrcState);
        crcs.icrc = ~crcs.icrc;
    } else {
        crcs = bodyCrcs(bytes.subspan(headroom_, icrcAt_ - headroom_), grh_);
    }
    Cursor out{bytes.data() + icrcAt_};
    out.put32(__builtin_bswap32(crcs.icrc)); // little-endian, as Linux rxe sends it
    const uint16_t vcrc =
        static_cast<uint16_t>(~crc16Update(crcs.vcrcState, bytes.subspan(icrcAt_, kIcrcSize)));
    out.put16(__builtin_bswap16(vcrc)); // little-endian too
    return std::move(owned_);
}

std::vector<uint8_t> build(const Packet &p, size_t headroom, std::vector<uint8_t> storage) {
    PacketWriter writer(p, p.payload.size(), headroom, std::move(storage));
    auto room = writer.payload();
    if (!room.empty())
        std::memcpy(room.data(), p.payload.data(), room.size());
    return std::move(writer).finish();
}

namespace {

// Each reader checks one header of `b` and fills it into `p`, or says what
// is wrong with it. `total` is the packet's length without its VCRC.

ParseError readLrh(const uint8_t *b, size_t total, Packet &p) {
    p.lrh.vl = b[0] >> 4;
    p.lrh.lver = b[0] & 0xf;
    p.lrh.sl = b[1] >> 4;
    p.lrh.lnh = b[1] & 3;
    p.lrh.dlid = get16(b + 2);
    p.lrh.pktlen = get16(b + 4) & 0x7ff;
    p.lrh.slid = get16(b + 6);
    if (p.lrh.lver != 0)
        return ParseError::kBadVersion;
    if (p.lrh.lnh != kLnhIbaLocal && p.lrh.lnh != kLnhIbaGlobal)
        return ParseError::kBadLnh;
    if (size_t{p.lrh.pktlen} * 4 != total)
        return ParseError::kBadLength;
    return ParseError::kNone;
}

ParseError readGrh(const uint8_t *b, size_t total, Packet &p) {
    if (total < kLrhSize + kGrhSize + kBthSize + kIcrcSize)
        return ParseError::kTooShort;
    Grh g;
    const uint32_t w = get32(b);
    if (w >> 28 != 6)
        return ParseError::kBadVersion;
    g.tclass = static_cast<uint8_t>(w >> 20);
    g.flowLabel = w & 0xfffff;
    g.payLen = get16(b + 4);
    g.nextHeader = b[6];
    g.hopLimit = b[7];
    std::copy(b + 8, b + 24, g.sgid.begin());
    std::copy(b + 24, b + 40, g.dgid.begin());
    if (size_t{g.payLen} != total - kLrhSize - kGrhSize)
        return ParseError::kBadLength;
    p.grh = g;
    return ParseError::kNone;
}

ParseError readBth(const uint8_t *b, Packet &p) {
    Bth &t = p.bth;
    t.opcode = b[0];
    t.solicited = b[1] & 0x80;
    t.migReq = b[1] & 0x40;
    t.padCount = (b[1] >> 4) & 3;
    t.tver = b[1] & 0xf;
    t.pkey = get16(b + 2);
    t.destQp = get32(b + 4) & 0xffffff;
    t.ackReq = b[8] & 0x80;
    t.psn = get32(b + 8) & 0xffffff;
    return t.tver == 0 ? ParseError::kNone : ParseError::kBadVersion;
}

// The extension headers `layout` names, in their IBA order; returns the
// offset after them.
size_t readExtensions(const uint8_t *b, size_t off, const Layout &layout, Packet &p) {
    if (layout.deth) {
        p.deth = Deth{get32(b + off), get32(b + off + 4) & 0xffffff};
        off += kDethSize;
    }
    if (layout.xrceth) {
        p.xrceth = get32(b + off) & 0xffffff;
        off += kXrcethSize;
    }
    if (layout.dceth) {
        const uint32_t word = get32(b + off + 8);
        p.dceth = Dceth{get64(b + off), word & 0xffffff, static_cast<uint8_t>(word >> 24),
                        get32(b + off + 12)};
        off += kDcethSize;
    }
    if (layout.feth) { // bits 31..6 are reserved
        const uint32_t word = get32(b + off);
        p.feth = Feth{static_cast<uint8_t>(word & 0xf), static_cast<uint8_t>(word >> 4 & 3)};
        off += kFethSize;
    }
    if (layout.reth) {
        p.reth = Reth{get64(b + off), get32(b + off + 8), get32(b + off + 12)};
        off += kRethSize;
    }
    if (layout.aeth) {
        p.aeth = Aeth{b[off], get32(b + off) & 0xffffff};
        off += kAethSize;
    }
    if (layout.atomicEth) {
        p.atomicEth =
            AtomicEth{get64(b + off), get32(b + off + 8), get64(b + off + 12), get64(b + off + 20)};
        off += kAtomicEthSize;
    }
    if (layout.atomicAckEth) {
        p.atomicAck = get64(b + off);
        off += kAtomicAckEthSize;
    }
    if (layout.imm) {
        p.imm = get32(b + off);
        off += kImmSize;
    }
    if (layout.ieth) {
        p.ieth = get32(b + off);
        off += kIethSize;
    }
    return off;
}

} // namespace

static_assert(kMaxPacketBytes ==
              kLrhSize + kGrhSize + kBthSize + 28 + kMaxPayload + 3 + kIcrcSize + kVcrcSize);
static_assert(kMaxHeaderBytes >= kLrhSize + kGrhSize + kBthSize + 32); // XRCETH + AtomicETH

namespace {

// parse() and parseShared(): the headers come from `head`, the packet's
// first bytes (all of them, or kMaxHeaderBytes at least), the payload
// and the CRCs from `bytes`.
[[gnu::always_inline]] inline std::optional<Packet>
parseFrom(std::span<const uint8_t> bytes, const uint8_t *head, ParseError *error, bool checkIcrc,
          bool copyPayload, bool checkVcrc = true) {
    auto fail = [&](ParseError e) -> std::optional<Packet> {
        *error = e;
        return std::nullopt;
    };
    *error = ParseError::kNone;
    if (bytes.size() < kLrhSize + kBthSize + kIcrcSize + kVcrcSize)
        return fail(ParseError::kTooShort);
    if (bytes.size() > kMaxPacketBytes)
        return fail(ParseError::kTooLong);
    const size_t total = bytes.size() - kVcrcSize;
    // The trailing CRCs, read once.
    uint8_t tail[kIcrcSize + kVcrcSize];
    std::memcpy(tail, bytes.data() + total - kIcrcSize, sizeof(tail));
    const uint16_t vcrc = static_cast<uint16_t>(tail[4] | tail[5] << 8);
    // An end node checks both CRCs, in one pass when the headers the LNH
    // names fit (if they do not, parsing fails below anyway).
    const bool grh = (head[1] & 3) == kLnhIbaGlobal;
    std::optional<BodyCrcs> crcs;
    if (checkIcrc && total - kIcrcSize >= headerBytes(grh))
        crcs = bodyCrcs(bytes.first(total - kIcrcSize), grh);
    if (checkVcrc) {
        const uint16_t vcrcState = crcs ? crc16Update(crcs->vcrcState, std::span(tail, kIcrcSize))
                                        : crc16Update(0xffff, bytes.first(total));
        if (vcrc != static_cast<uint16_t>(~vcrcState))
            return fail(ParseError::kBadVcrc);
    }

    Packet p;
    if (const ParseError e = readLrh(head, total, p); e != ParseError::kNone)
        return fail(e);
    size_t off = kLrhSize;
    if (p.lrh.lnh == kLnhIbaGlobal) {
        if (const ParseError e = readGrh(head + off, total, p); e != ParseError::kNone)
            return fail(e);
        off += kGrhSize;
    }
    if (const ParseError e = readBth(head + off, p); e != ParseError::kNone)
        return fail(e);
    off += kBthSize;
    const Layout layout = layoutOf(p.bth.opcode);
    if (!layout.valid)
        return fail(ParseError::kUnsupportedOpcode);
    const size_t payloadEnd = total - kIcrcSize - p.bth.padCount;
    if (off + extensionSize(layout) + p.bth.padCount + kIcrcSize > total)
        return fail(ParseError::kTooShort);
    off = readExtensions(head, off, layout, p);
    if (!layout.payload && payloadEnd != off)
        return fail(ParseError::kBadLength); // data where the opcode has none
    if (copyPayload)
        p.payload.assign(bytes.data() + off, bytes.data() + payloadEnd);
    else
        p.view = bytes.subspan(off, payloadEnd - off);
    const uint32_t icrc = uint32_t{tail[0]} | uint32_t{tail[1]} << 8 | uint32_t{tail[2]} << 16 |
                          uint32_t{tail[3]} << 24;
    if (checkIcrc && (!crcs || p.grh.has_value() != grh || icrc != crcs->icrc))
        return fail(ParseError::kBadIcrc);
    return p;
}

} // namespace

void setVl(std::span<uint8_t> bytes, uint8_t vl) {
    if (bytes.size() < kLrhSize + kVcrcSize)
        return;
    bytes[0] = static_cast<uint8_t>((vl & 15) << 4 | (bytes[0] & 15));
    const size_t body = bytes.size() - kVcrcSize;
    const uint16_t vcrc = static_cast<uint16_t>(~crc16Update(0xffff, bytes.first(body)));
    bytes[body] = static_cast<uint8_t>(vcrc); // little-endian, as finish() puts it
    bytes[body + 1] = static_cast<uint8_t>(vcrc >> 8);
}

bool vcrcGood(std::span<const uint8_t> bytes) {
    if (bytes.size() < kLrhSize + kBthSize + kIcrcSize + kVcrcSize ||
        bytes.size() > kMaxPacketBytes)
        return false;
    const size_t body = bytes.size() - kVcrcSize;
    const uint16_t vcrc = static_cast<uint16_t>(bytes[body] | bytes[body + 1] << 8);
    return vcrc == static_cast<uint16_t>(~crc16Update(0xffff, bytes.first(body)));
}

std::optional<Packet> parseVcrcChecked(std::span<const uint8_t> bytes, ParseError *error) {
    return parseFrom(bytes, bytes.data(), error, false, false, /*checkVcrc=*/false);
}

std::optional<Packet> parse(std::span<const uint8_t> bytes, ParseError *error, bool checkIcrc,
                            bool copyPayload) {
    return parseFrom(bytes, bytes.data(), error, checkIcrc, copyPayload);
}

std::optional<Packet> parseShared(std::span<const uint8_t> bytes, std::span<const uint8_t> head,
                                  ParseError *error) {
    if (head.size() < std::min(bytes.size(), kMaxHeaderBytes))
        throw std::length_error("parseShared: the private copy of the headers is too short");
    return parseFrom(bytes, head.data(), error, true, false);
}

} // namespace pib::iba
