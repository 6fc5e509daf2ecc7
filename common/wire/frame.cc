// SPDX-License-Identifier: GPL-2.0-or-later
#include "frame.hh"

#include <algorithm>
#include <cstring>

namespace pib::wire {

namespace {

void putLe32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; ++i)
        p[i] = static_cast<uint8_t>(v >> (8 * i));
}

void writeHeader(uint8_t *h, uint8_t type, size_t payloadLength) {
    std::memset(h, 0, kHeaderSize);
    putLe32(h, PIB_WIRE_MAGIC);
    h[4] = PIB_WIRE_VERSION;
    h[5] = type;
    putLe32(h + 8, static_cast<uint32_t>(payloadLength));
}

} // namespace

std::vector<uint8_t> encode(uint8_t type, std::span<const uint8_t> payload) {
    std::vector<uint8_t> out;
    appendFrame(out, type, payload);
    return out;
}

void appendFrame(std::vector<uint8_t> &out, uint8_t type, std::span<const uint8_t> payload) {
    // Appended, not resized and then copied over: the bytes are written
    // once, not zeroed first.
    uint8_t header[kHeaderSize];
    writeHeader(header, type, payload.size());
    out.insert(out.end(), header, header + kHeaderSize);
    out.insert(out.end(), payload.begin(), payload.end());
}

void frameInPlace(std::span<uint8_t> framed, uint8_t type) {
    writeHeader(framed.data(), type, framed.size() - kHeaderSize);
}

void FrameReader::feed(std::span<const uint8_t> bytes) {
    if (failed_)
        return;
    keepRest();
    // Frames read so far are dropped here, not one by one: a stream with
    // many frames in one piece costs linear time, not quadratic.
    if (start_ && start_ >= buffer_.size() / 2) {
        buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<long>(start_));
        start_ = 0;
    }
    buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
}

void FrameReader::lend(std::span<const uint8_t> bytes) {
    keepRest();
    if (failed_)
        return;
    if (start_ == buffer_.size()) {
        buffer_.clear();
        start_ = 0;
    }
    // A frame cut off by the last piece is completed by copying just its
    // missing bytes; its header first, to know how many.
    while (start_ != buffer_.size() && !bytes.empty()) {
        const size_t held = buffer_.size() - start_;
        size_t want = sizeof(pib_wire_header) - std::min(held, sizeof(pib_wire_header));
        if (!want) {
            const uint32_t length = getLe32(buffer_.data() + start_ + 8);
            if (length > kMaxPayload || held >= sizeof(pib_wire_header) + length)
                break; // nextView refuses it, or it is whole
            want = sizeof(pib_wire_header) + length - held;
        }
        const size_t n = std::min(want, bytes.size());
        buffer_.insert(buffer_.end(), bytes.begin(), bytes.begin() + static_cast<long>(n));
        bytes = bytes.subspan(n);
    }
    lent_ = bytes;
}

void FrameReader::keepRest() {
    if (lent_.empty())
        return;
    const std::span<const uint8_t> rest = lent_;
    lent_ = {};
    feed(rest);
}

std::optional<Frame> FrameReader::next(Error *error) {
    auto view = nextView(error);
    if (!view)
        return std::nullopt;
    return Frame{view->type, {view->payload.begin(), view->payload.end()}};
}

std::optional<FrameReader::View> FrameReader::nextView(Error *error) {
    *error = Error::kNone;
    const bool lent = start_ == buffer_.size() && !lent_.empty();
    const size_t held = lent ? lent_.size() : buffer_.size() - start_;
    if (failed_ || held < sizeof(pib_wire_header))
        return std::nullopt;
    const uint8_t *h = lent ? lent_.data() : buffer_.data() + start_;
    auto fail = [&](Error e) -> std::optional<View> {
        failed_ = true;
        buffer_.clear();
        start_ = 0;
        lent_ = {};
        *error = e;
        return std::nullopt;
    };
    if (getLe32(h) != PIB_WIRE_MAGIC)
        return fail(Error::kBadMagic);
    if (h[4] != PIB_WIRE_VERSION)
        return fail(Error::kBadVersion);
    if (h[5] < PIB_WIRE_HELLO || h[5] > PIB_WIRE_DISCARDED)
        return fail(Error::kBadType);
    const uint32_t length = getLe32(h + 8);
    if (length > kMaxPayload)
        return fail(Error::kTooLong);
    if (held < sizeof(pib_wire_header) + length)
        return std::nullopt;
    View view{h[5], std::span<const uint8_t>(h + sizeof(pib_wire_header), length)};
    // The bytes stay where they are until the next feed() compacts.
    if (lent)
        lent_ = lent_.subspan(sizeof(pib_wire_header) + length);
    else
        start_ += sizeof(pib_wire_header) + length;
    return view;
}

const char *FrameReader::toString(Error error) {
    switch (error) {
    case Error::kNone:
        return "none";
    case Error::kBadMagic:
        return "bad magic";
    case Error::kBadVersion:
        return "unsupported version";
    case Error::kBadType:
        return "unknown frame type";
    case Error::kTooLong:
        return "frame too long";
    }
    return "?";
}

} // namespace pib::wire
