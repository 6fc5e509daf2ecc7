// SPDX-License-Identifier: GPL-2.0-or-later
// The far end of the attacker's QPs, played by the input: it sends the
// responders whole messages (FIRST, MIDDLE..., LAST with MTU-sized
// payloads) at the PSN each expects, or spoils one on purpose; it answers
// what the requesters ask (ACKs, READ responses, atomic ACKs), rightly or
// not; and it reads every packet the device sends, to follow where each
// QP's transport stands: a responder's ACK or NAK says which PSN it takes
// next, a requester's packets what it waits for.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <optional>

#include "frame.hh"
#include "fuzz_core_target.hh"
#include "packet.hh"

namespace pib::fuzz {

enum class Operation : uint8_t {
    kSend,
    kSendImm,
    kSendInv,
    kWrite,
    kWriteImm,
    kRead,
    kCompareSwap,
    kFetchAdd,
    kFlush,       // IBA 1.5, answered by a READ response without data
    kAtomicWrite, // the same
    kCount
};

struct Message {
    Operation op = Operation::kSend;
    uint32_t length = 0;
    uint64_t va = 0; // WRITE, READ, atomics
    uint32_t rkey = 0;
    uint32_t imm = 0;
    uint32_t invalidate = 0; // kSendInv: the R_Key it names
    uint32_t xrcSrqn = 0;    // to the XRC TGT QP: the XRC SRQ it goes to
    uint64_t swapAdd = 0, compare = 0;
    uint8_t fill = 0; // the payload's bytes start from it
    bool solicited = false;
};

// How the peer spoils a message, if it does.
enum class Spoil : uint8_t {
    kNone,
    kShiftPsn,
    kDropPacket,
    kRepeatPacket,
    kSwapPackets,
    kResizePayload,
    kFlipBit,
    kForeignPkey,
    kCutShort,
    kHoldBack, // the rest follows in a later step (Peer::sendRest)
    kCount
};

// How the peer answers a request, when not as it should.
enum class Answer : uint8_t {
    kRight,
    kRnrNak,
    kSequenceNak,
    kFatalNak,
    kBadReadLength,
    kBeyondSent,
    kStale,
    kLostResponse, // a READ response other than the last is lost on the way
    kCount
};

class Peer {
  public:
    explicit Peer(Target &t) : t_(t) {}

    // Message `m` to q's responder, from the PSN it expects.
    void sendMessage(Qp &q, const Message &m, Spoil spoil, FuzzedDataProvider &in);
    // What the peer held back of q's last message, if anything: the
    // message's receive WQE stays claimed in between.
    void sendRest(Qp &q, FuzzedDataProvider &in);
    // One of the last messages sent to q's responder, again: duplicates
    // are answered again (READs from memory as it is now) or ignored.
    void sendAgain(Qp &q, FuzzedDataProvider &in);
    // The oldest answer q's requester waits for (a stray ACK if none).
    void answer(Qp &q, Answer how, FuzzedDataProvider &in);
    // A packet of headers from the input for any QP, near the PSNs the
    // transport expects, with a payload from the input.
    void sendAnyPacket(FuzzedDataProvider &in);
    // Follows what the device sent since the last call.
    void readDeviceOutput();

  private:
    // Cuts the frame of `p` across two reads at `cut`, maybe with bit
    // `flip` of the packet inverted on the way.
    void transmit(const iba::Packet &p, size_t cut, std::optional<size_t> flip = std::nullopt);
    void transmitAll(const std::vector<iba::Packet> &packets, FuzzedDataProvider &in,
                     std::optional<size_t> flipIn);
    std::vector<iba::Packet> packetsOf(const Qp &q, const Message &m) const;
    iba::Packet fromPeer(const Qp &q, uint8_t op, uint32_t psn) const;
    std::vector<iba::Packet> readResponses(const Qp &q, const Owed &o, FuzzedDataProvider &in);
    void responderSaid(Qp &q, const iba::Packet &p);
    void requesterSent(Qp &q, const iba::Packet &p);
    Qp *qpTalkingTo(const iba::Packet &p);

    Target &t_;
    wire::FrameReader reader_;
};

} // namespace pib::fuzz
