// SPDX-License-Identifier: GPL-2.0-or-later
// InfiniBand packets as they travel on a link (IBA chapter 9): the LRH,
// optional GRH, BTH, extension headers, payload, ICRC and VCRC. Builds
// them and parses untrusted bytes back, checking every length and CRC.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "crc.hh"

namespace pib::iba {

inline constexpr uint16_t kPermissiveLid = 0xffff;
inline constexpr uint32_t kQp1Qkey = 0x80010000;    // IBA 13.5.3.2
inline constexpr uint32_t kMulticastQpn = 0xffffff; // IBA 10.5.2.4

// LNH values (IBA 7.7.5).
enum Lnh : uint8_t { kLnhRaw = 0, kLnhIp = 1, kLnhIbaLocal = 2, kLnhIbaGlobal = 3 };

// BTH opcodes (IBA 9.2, table 38). The top three bits are the transport
// (RC 000, UC 001, UD 011, XRC 101); UC uses the RC codes 0x00..0x0b plus
// 0x20, XRC all of RC's plus 0xa0. DC, the ConnectX personality's
// Dynamically Connected transport, takes the first of the
// manufacturer-specific prefixes (110): RC's codes plus 0xc0, and one of
// its own, DISCONNECT (docs/wire.md §6).
enum Opcode : uint8_t {
    kSendFirst = 0x00,
    kSendMiddle = 0x01,
    kSendLast = 0x02,
    kSendLastImm = 0x03,
    kSendOnly = 0x04,
    kSendOnlyImm = 0x05,
    kWriteFirst = 0x06,
    kWriteMiddle = 0x07,
    kWriteLast = 0x08,
    kWriteLastImm = 0x09,
    kWriteOnly = 0x0a,
    kWriteOnlyImm = 0x0b,
    kReadRequest = 0x0c,
    kReadResponseFirst = 0x0d,
    kReadResponseMiddle = 0x0e,
    kReadResponseLast = 0x0f,
    kReadResponseOnly = 0x10,
    kAcknowledge = 0x11,
    kAtomicAcknowledge = 0x12,
    kCompareSwap = 0x13,
    kFetchAdd = 0x14,
    kSendLastInv = 0x16, // RC only: the IETH names an R_Key to invalidate
    kSendOnlyInv = 0x17,
    kFlush = 0x1c,       // IBA 1.5: FETH and RETH, no payload; answered as a READ
    kAtomicWrite = 0x1d, // IBA 1.5: RETH and 8 bytes; answered as a READ
    kTransportRc = 0x00,
    kTransportUc = 0x20,
    kTransportUd = 0x60,
    kTransportXrc = 0xa0,
    kTransportDc = 0xc0,
    kDcDisconnect = 0xd8, // a DCI leaves its DCT: DCETH only, never answered
    kUdSendOnly = 0x64,
    kUdSendOnlyImm = 0x65,
};

// Which headers follow the BTH, per opcode.
struct Layout {
    bool valid = false;
    bool deth = false;
    bool reth = false;
    bool aeth = false;
    bool atomicEth = false;
    bool atomicAckEth = false;
    bool imm = false;
    bool ieth = false;    // invalidate extended transport header
    bool feth = false;    // FLUSH extended transport header
    bool xrceth = false;  // XRC requests: the XRC SRQ they go to
    bool dceth = false;   // DC requests: the DC access key and the DCI
    bool payload = false; // may carry data
};
constexpr Layout computeLayout(uint8_t opcode) {
    Layout l;
    const uint8_t transport = opcode & 0xe0;
    const uint8_t op = opcode & 0x1f;
    if (transport == kTransportUd) {
        if (opcode == kUdSendOnly || opcode == kUdSendOnlyImm) {
            l.valid = l.deth = l.payload = true;
            l.imm = opcode == kUdSendOnlyImm;
        }
        return l;
    }
    if (opcode == kDcDisconnect) {
        l.valid = l.dceth = true;
        return l;
    }
    if (transport != kTransportRc && transport != kTransportXrc && transport != kTransportDc &&
        !(transport == kTransportUc && op <= kWriteOnlyImm))
        return l;
    // XRC requests name their XRC SRQ, DC requests their key and DCI;
    // responses neither (IBA A14.4.1).
    const bool response = op >= kReadResponseFirst && op <= kAtomicAcknowledge;
    l.xrceth = transport == kTransportXrc && !response;
    l.dceth = transport == kTransportDc && !response;
    l.valid = true;
    switch (op) {
    case kSendFirst:
    case kSendMiddle:
    case kSendLast:
    case kSendOnly:
    case kWriteMiddle:
    case kWriteLast:
    case kReadResponseMiddle:
        l.payload = true;
        break;
    case kSendLastImm:
    case kSendOnlyImm:
    case kWriteLastImm:
        l.payload = l.imm = true;
        break;
    case kWriteFirst:
    case kWriteOnly:
        l.reth = l.payload = true;
        break;
    case kWriteOnlyImm:
        l.reth = l.imm = l.payload = true;
        break;
    case kReadRequest:
        l.reth = true;
        break;
    case kReadResponseFirst:
    case kReadResponseLast:
    case kReadResponseOnly:
        l.aeth = l.payload = true;
        break;
    case kAcknowledge:
        l.aeth = true;
        break;
    case kAtomicAcknowledge:
        l.aeth = l.atomicAckEth = true;
        break;
    case kCompareSwap:
    case kFetchAdd:
        l.atomicEth = true;
        break;
    case kSendLastInv:
    case kSendOnlyInv:
        l.ieth = l.payload = true;
        break;
    case kFlush:
        l.feth = l.reth = true;
        break;
    case kAtomicWrite:
        l.reth = l.payload = true;
        break;
    default:
        l.valid = false;
    }
    return l;
}

// Looked up for every packet sent and received: a table, built at compile time.
inline constexpr std::array<Layout, 256> kLayouts = [] {
    std::array<Layout, 256> t{};
    for (unsigned opcode = 0; opcode < 256; ++opcode)
        t[opcode] = computeLayout(static_cast<uint8_t>(opcode));
    return t;
}();
inline Layout layoutOf(uint8_t opcode) {
    return kLayouts[opcode];
}

struct Lrh {
    uint8_t vl = 0;
    uint8_t lver = 0;
    uint8_t sl = 0;
    uint8_t lnh = kLnhIbaLocal;
    uint16_t dlid = 0;
    uint16_t slid = 0;
    uint16_t pktlen = 0; // 4-byte words from LRH to ICRC; set by build()
};

struct Grh {
    uint8_t tclass = 0;
    uint32_t flowLabel = 0;
    uint16_t payLen = 0; // set by build()
    uint8_t nextHeader = 0x1b;
    uint8_t hopLimit = 0;
    std::array<uint8_t, 16> sgid{};
    std::array<uint8_t, 16> dgid{};
};

struct Bth {
    uint8_t opcode = 0;
    bool solicited = false;
    bool migReq = false;
    uint8_t padCount = 0; // set by build()
    uint8_t tver = 0;
    uint16_t pkey = 0xffff;
    uint32_t destQp = 0;
    bool ackReq = false;
    uint32_t psn = 0;
};

struct Deth {
    uint32_t qkey = 0;
    uint32_t srcQp = 0;
};

// DC extended transport header (docs/mlx5.md §15.3): the DCT's access
// key, the DCI that sends, whether the packet opens its connection, and
// which connection of the DCI's it belongs to (a serial the DCI's device
// gives each one: a DCI that was reset, or made anew under the same
// number, is told from its former self whatever its PSNs).
struct Dceth {
    static constexpr uint8_t kConnect = 0x80; // the connection's first PSN
    uint64_t key = 0;
    uint32_t dci = 0; // 24 bits
    uint8_t flags = 0;
    uint32_t serial = 0;
};

// RDMA extended transport header: the remote buffer of a WRITE or READ.
struct Reth {
    uint64_t va = 0;
    uint32_t rkey = 0;
    uint32_t length = 0;
};

// ACK extended transport header (IBA 9.3.5): syndrome and MSN.
struct Aeth {
    uint8_t syndrome = 0;
    uint32_t msn = 0;
};

// FLUSH extended transport header (IBA 1.5): where the data must be
// placed (a mask: global visibility 1, persistence 2) and over what (0 the
// RETH's range, 1 the whole region).
struct Feth {
    uint8_t placement = 0;   // 4 bits
    uint8_t selectivity = 0; // 2 bits
};

struct AtomicEth {
    uint64_t va = 0;
    uint32_t rkey = 0;
    uint64_t swapAdd = 0;
    uint64_t compare = 0;
};

struct Packet {
    Lrh lrh;
    std::optional<Grh> grh;
    Bth bth;
    std::optional<Deth> deth;
    std::optional<Reth> reth;
    std::optional<Aeth> aeth;
    std::optional<AtomicEth> atomicEth;
    std::optional<uint64_t> atomicAck; // AtomicAckETH: the original value
    std::optional<uint32_t> imm;       // immediate data (host order)
    std::optional<uint32_t> ieth;      // the R_Key a SEND with invalidate names
    std::optional<uint32_t> xrceth;    // XRC requests: the XRC SRQ number (24 bits)
    std::optional<Dceth> dceth;        // DC requests
    std::optional<Feth> feth;          // FLUSH
    std::vector<uint8_t> payload;
    // A parsed packet's payload where it lies in the received bytes, when
    // parse() was asked not to copy it (then `payload` stays empty).
    std::span<const uint8_t> view;

    std::span<const uint8_t> data() const { return payload.empty() ? view : payload; }
};

enum class ParseError {
    kNone,
    kTooShort,
    kTooLong,
    kBadLnh,
    kBadLength, // PktLen or PayLen disagree with the bytes received
    kBadVcrc,
    kBadIcrc,
    kBadVersion,
    kUnsupportedOpcode,
};

const char *toString(ParseError error);

// Writes a packet in place: the headers of `headers` (its payload is
// ignored), room for `payloadLength` bytes that the caller fills through
// payload(), then finish() adds the pad, ICRC and VCRC. `headroom` bytes
// stay free in front, for whoever frames the packet next. This is how the
// device puts data read by DMA straight into the packet it sends.
class PacketWriter {
  public:
    // `storage` is a spent packet whose memory is used again (its bytes
    // are not): a sender that recycles its buffers allocates nothing.
    PacketWriter(const Packet &headers, size_t payloadLength, size_t headroom = 0,
                 std::vector<uint8_t> storage = {});
    // Or in `place`, which must be framedSize() bytes: the packet is built
    // where it is to go (a ring cable's room), and finish() returns nothing.
    PacketWriter(const Packet &headers, size_t payloadLength, size_t headroom,
                 std::span<uint8_t> place);
    // The bytes a packet of these headers and payload takes, headroom too.
    static size_t framedSize(const Packet &headers, size_t payloadLength, size_t headroom);
    // The bytes are where out_ points: a copy would write into the original's.
    PacketWriter(const PacketWriter &) = delete;
    PacketWriter &operator=(const PacketWriter &) = delete;
    // The whole payload, for a caller that fills it at once.
    std::span<uint8_t> payload() { return out_.subspan(payloadAt_, payloadLength_); }
    // Or piece by piece, in order: append() copies the bytes at src in and
    // checksums them in the same pass (a packet without a GRH); the room
    // appendRoom() gives is filled by the caller and checksummed later.
    void append(const uint8_t *src, size_t n);
    std::span<uint8_t> appendRoom(size_t n);
    std::vector<uint8_t> finish() &&;
    // Where the packet is built in place, headroom too; empty when it is
    // built in its own buffer.
    std::span<uint8_t> place() const { return inPlace_ ? out_ : std::span<uint8_t>{}; }

  private:
    size_t claim(size_t n);
    void foldUpTo(size_t end);
    void writeHeaders(const Packet &p, const Layout &layout, size_t total);

    std::vector<uint8_t> owned_; // the buffer, unless built in place
    std::span<uint8_t> out_;     // where the packet is built
    bool inPlace_ = false;
    size_t headroom_;
    size_t payloadAt_;
    size_t payloadLength_;
    size_t icrcAt_;
    bool grh_;
    size_t filled_ = 0;                  // payload bytes appended so far
    std::optional<JointCrcStream> crcs_; // without a GRH: the CRCs so far,
    size_t folded_ = 0;                  // over out_ up to here
};

// The bytes of `packet` on the wire, after `headroom` free bytes; fills in
// PktLen, PayLen and PadCnt. The extension headers present must be those
// the opcode's layout names.
std::vector<uint8_t> build(const Packet &packet, size_t headroom = 0,
                           std::vector<uint8_t> storage = {});

// Parses and checks `bytes`; nullopt with *error set when malformed. A
// switch checks the link's VCRC only: the ICRC is the end nodes' business
// (IBA 7.8), so it passes checkIcrc = false and saves a pass over the data.
// With copyPayload = false the payload is left in `bytes` (Packet::view),
// which must then outlive the packet.
std::optional<Packet> parse(std::span<const uint8_t> bytes, ParseError *error,
                            bool checkIcrc = true, bool copyPayload = true);

// Whether a whole packet's VCRC is good (false too when it is shorter
// than any packet or longer than the longest). A switch's forwarding
// thread checks it, so that the thread that forwards need not
// (parseVcrcChecked).
bool vcrcGood(std::span<const uint8_t> bytes);

// As parse(bytes, error, false, false), for a packet vcrcGood() found
// good: no CRC is computed again.
std::optional<Packet> parseVcrcChecked(std::span<const uint8_t> bytes, ParseError *error);

// Puts a whole packet (its VCRC good) on virtual lane `vl`: the LRH's VL
// and the VCRC, which covers it (the ICRC does not, IBA 7.8.1). What a
// switch does when the SL-to-VL table of the ports a packet crosses puts
// it on another VL.
void setVl(std::span<uint8_t> bytes, uint8_t vl);

// The longest packet, VCRC included; and the most bytes the headers of
// any packet take (LRH, GRH, BTH, the largest extension headers), with
// room to spare.
inline constexpr size_t kMaxPacketBytes = 8 + 40 + 12 + 28 + 4096 + 3 + 4 + 2;
inline constexpr size_t kMaxHeaderBytes = 128;

// The same for a packet in memory a peer shares and may rewrite at any
// moment (a ring cable): every header field is read from `head`, a
// private copy of the packet's first bytes (kMaxHeaderBytes of them, or
// all when it is shorter), so that no field read twice can differ; the
// CRCs are computed over `bytes` and the payload view points into them.
// What the peer rewrites there meanwhile is data only: its own packet.
std::optional<Packet> parseShared(std::span<const uint8_t> bytes, std::span<const uint8_t> head,
                                  ParseError *error);

} // namespace pib::iba
