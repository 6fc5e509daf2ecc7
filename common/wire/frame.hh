// SPDX-License-Identifier: GPL-2.0-or-later
// Framing of the pib wire protocol (include/pib_wire.h, docs/wire.md) over
// a byte stream: encodes frames, and reassembles them from whatever pieces
// the stream delivers, refusing anything malformed.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "pib_wire.h"

namespace pib::wire {

struct Frame {
    uint8_t type = 0;
    std::vector<uint8_t> payload;
};

std::vector<uint8_t> encode(uint8_t type, std::span<const uint8_t> payload);
// The same, appended to `out`.
void appendFrame(std::vector<uint8_t> &out, uint8_t type, std::span<const uint8_t> payload);

// Bytes a sender leaves free in front of a payload so that it can be
// framed in place (frameInPlace), without a copy.
inline constexpr size_t kHeaderSize = sizeof(pib_wire_header);
// A little-endian 32-bit field of a frame header (magic, length).
inline uint32_t getLe32(const uint8_t *p) {
    return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
// Writes the frame header into the first kHeaderSize bytes of `framed`;
// the rest is the payload.
void frameInPlace(std::span<uint8_t> framed, uint8_t type);

class FrameReader {
  public:
    enum class Error { kNone, kBadMagic, kBadVersion, kBadType, kTooLong };

    // Appends stream bytes.
    void feed(std::span<const uint8_t> bytes);
    // Lends stream bytes instead: frames are read from them in place, not
    // copied (except the missing bytes of a frame the last piece cut off).
    // keepRest() copies what nextView did not return; until then `bytes`
    // must stay valid.
    void lend(std::span<const uint8_t> bytes);
    void keepRest();
    // The next complete frame, if any. After an error the stream cannot be
    // trusted any more: the caller drops the connection and calls reset().
    std::optional<Frame> next(Error *error);
    // The same without a copy: the payload is valid until the next feed().
    struct View {
        uint8_t type;
        std::span<const uint8_t> payload;
    };
    std::optional<View> nextView(Error *error);
    void reset() { buffer_.clear(), start_ = 0, lent_ = {}, failed_ = false; }
    // Bytes held, for flow control: a peer may not make us buffer more.
    size_t buffered() const { return buffer_.size() - start_ + lent_.size(); }

    static const char *toString(Error error);

  private:
    std::vector<uint8_t> buffer_;
    size_t start_ = 0; // where the unread bytes of buffer_ begin
    // Lent bytes not read yet: they follow what buffer_ holds unread.
    std::span<const uint8_t> lent_;
    bool failed_ = false;
};

// Payload limits per frame type: nothing larger is ever accepted.
inline constexpr uint32_t kMaxPayload = PIB_WIRE_MAX_PACKET;

} // namespace pib::wire
