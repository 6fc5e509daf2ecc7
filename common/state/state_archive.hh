// SPDX-License-Identifier: GPL-2.0-or-later
// The device's state as bytes, for QEMU's migration stream and snapshots
// (docs/migration.md). A StateWriter appends little-endian fields in
// tagged, length-prefixed sections; a StateReader takes them back from
// bytes that are untrusted input like a packet: every read is bounded by
// the stream and by the section it is in, every count by a limit the
// loader gives, and the first failure sticks (later reads give zeros) and
// says what was wrong. A loader therefore reads straight through and asks
// ok() before it lets anything it read size or index anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace pib {

// A section tag from four characters, as they read in a hex dump.
constexpr uint32_t stateTag(const char (&name)[5]) {
    return uint32_t{static_cast<uint8_t>(name[0])} | uint32_t{static_cast<uint8_t>(name[1])} << 8 |
           uint32_t{static_cast<uint8_t>(name[2])} << 16 |
           uint32_t{static_cast<uint8_t>(name[3])} << 24;
}

class StateWriter {
  public:
    void u8(uint8_t v) { out_.push_back(v); }
    void u16(uint16_t v) { little(v, 2); }
    void u32(uint32_t v) { little(v, 4); }
    void u64(uint64_t v) { little(v, 8); }
    void boolean(bool v) { u8(v ? 1 : 0); }
    // A length (u32), then the bytes.
    void bytes(std::span<const uint8_t> b);
    // A plain struct of the hardware interface (a context of pib_hw.h) as
    // its bytes, length first: the loader refuses any other size.
    template <class T> void record(const T &v) {
        static_assert(std::is_trivially_copyable_v<T>);
        bytes(std::span(reinterpret_cast<const uint8_t *>(&v), sizeof(v)));
    }
    // A section: its tag, then the length of what is written until
    // endSection() (sections nest).
    void beginSection(uint32_t tag);
    void endSection();
    const std::vector<uint8_t> &bytes() const { return out_; }
    std::vector<uint8_t> take() { return std::move(out_); }

  private:
    std::vector<uint8_t> out_;
    std::vector<size_t> open_; // where each open section's length goes

    void little(uint64_t v, unsigned n) {
        for (unsigned i = 0; i < n; ++i)
            out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    }
};

class StateReader {
  public:
    explicit StateReader(std::span<const uint8_t> in) : in_(in), end_(in.size()) {}

    uint8_t u8() { return static_cast<uint8_t>(little(1)); }
    uint16_t u16() { return static_cast<uint16_t>(little(2)); }
    uint32_t u32() { return static_cast<uint32_t>(little(4)); }
    uint64_t u64() { return little(8); }
    bool boolean(const char *what);
    // A count of things that follow, each of `eachAtLeast` bytes or more:
    // refused above `max`, and above what the rest of the section holds,
    // so that nothing sized by it outgrows the stream.
    uint32_t count(uint32_t max, size_t eachAtLeast, const char *what);
    // A u32 value refused unless below `limit` (an index, a state).
    uint32_t below(uint32_t limit, const char *what);
    // Bytes as StateWriter::bytes wrote them, at most `max`.
    std::vector<uint8_t> bytes(size_t max, const char *what);
    template <class T> void record(T &v, const char *what) {
        static_assert(std::is_trivially_copyable_v<T>);
        const uint32_t n = u32();
        if (ok() && n != sizeof(T))
            fail(std::string(what) + ": " + std::to_string(n) + " bytes, not " +
                 std::to_string(sizeof(T)));
        if (const uint8_t *p = take(sizeof(T)))
            std::memcpy(&v, p, sizeof(T));
        else
            v = T{};
    }
    // Enters the section of `tag`, which must come next; leaveSection()
    // checks that it was read to its end. Reads inside stop at its end.
    void enterSection(uint32_t tag, const char *what);
    void leaveSection(const char *what);
    bool atEnd() const { return pos_ == end_; }
    // Bytes left in the current section.
    size_t left() const { return end_ - pos_; }

    // Refuses the stream: the first reason sticks.
    void fail(std::string why);
    bool ok() const { return error_.empty(); }
    const std::string &error() const { return error_; }

  private:
    std::span<const uint8_t> in_;
    size_t pos_ = 0;
    size_t end_;               // of the innermost open section, or the stream
    std::vector<size_t> ends_; // of the sections around it
    std::string error_;

    const uint8_t *take(size_t n);
    uint64_t little(unsigned n);
};

} // namespace pib
