// SPDX-License-Identifier: GPL-2.0-or-later
#include "state_archive.hh"

#include <algorithm>

namespace pib {

void StateWriter::bytes(std::span<const uint8_t> b) {
    u32(static_cast<uint32_t>(b.size()));
    out_.insert(out_.end(), b.begin(), b.end());
}

void StateWriter::beginSection(uint32_t tag) {
    u32(tag);
    open_.push_back(out_.size());
    u32(0); // the length, once known
}

void StateWriter::endSection() {
    const size_t at = open_.back();
    open_.pop_back();
    const auto length = static_cast<uint32_t>(out_.size() - at - 4);
    for (unsigned i = 0; i < 4; ++i)
        out_[at + i] = static_cast<uint8_t>(length >> (8 * i));
}

void StateReader::fail(std::string why) {
    if (error_.empty())
        error_ = std::move(why);
}

// The next n bytes of the current section; null (and the stream refused)
// when it holds fewer.
const uint8_t *StateReader::take(size_t n) {
    if (!ok())
        return nullptr;
    if (n > end_ - pos_) {
        fail("the state ends " + std::to_string(n - (end_ - pos_)) + " bytes early");
        return nullptr;
    }
    const uint8_t *p = in_.data() + pos_;
    pos_ += n;
    return p;
}

uint64_t StateReader::little(unsigned n) {
    const uint8_t *p = take(n);
    uint64_t v = 0;
    for (unsigned i = 0; p && i < n; ++i)
        v |= uint64_t{p[i]} << (8 * i);
    return v;
}

bool StateReader::boolean(const char *what) {
    const uint8_t v = u8();
    if (v > 1)
        fail(std::string(what) + ": " + std::to_string(v) + " is not a truth value");
    return v == 1;
}

uint32_t StateReader::count(uint32_t max, size_t eachAtLeast, const char *what) {
    const uint32_t n = u32();
    if (ok() && n > max)
        fail(std::string(what) + ": " + std::to_string(n) + ", more than " + std::to_string(max));
    else if (ok() && n > (end_ - pos_) / std::max<size_t>(eachAtLeast, 1))
        fail(std::string(what) + ": " + std::to_string(n) + ", more than the section holds");
    return ok() ? n : 0;
}

uint32_t StateReader::below(uint32_t limit, const char *what) {
    const uint32_t v = u32();
    if (ok() && v >= limit) {
        fail(std::string(what) + ": " + std::to_string(v) + ", not below " + std::to_string(limit));
        return 0;
    }
    return v;
}

std::vector<uint8_t> StateReader::bytes(size_t max, const char *what) {
    const uint32_t n = u32();
    if (ok() && n > max) {
        fail(std::string(what) + ": " + std::to_string(n) + " bytes, more than " +
             std::to_string(max));
        return {};
    }
    const uint8_t *p = take(n);
    return p ? std::vector<uint8_t>(p, p + n) : std::vector<uint8_t>{};
}

namespace {

// A tag's four characters, as stateTag() made it ('?' for any other byte).
std::string tagName(uint32_t tag) {
    std::string s;
    for (unsigned i = 0; i < 4; ++i) {
        const char c = static_cast<char>(tag >> (8 * i));
        s += c >= ' ' && c <= '~' ? c : '?';
    }
    return s;
}

} // namespace

void StateReader::enterSection(uint32_t tag, const char *what) {
    const uint32_t got = u32();
    const uint32_t length = u32();
    ends_.push_back(end_);
    if (ok() && got != tag)
        fail(std::string(what) + ": section '" + tagName(got) + "' where '" + tagName(tag) +
             "' belongs");
    else if (ok() && length > end_ - pos_)
        fail(std::string(what) + ": a section of " + std::to_string(length) + " bytes in " +
             std::to_string(end_ - pos_));
    // A section refused is empty: reads in it fail, and leaving it balances.
    end_ = ok() ? pos_ + length : pos_;
}

void StateReader::leaveSection(const char *what) {
    if (ends_.empty()) {
        fail(std::string(what) + ": no section to leave");
        return;
    }
    if (ok() && pos_ != end_)
        fail(std::string(what) + ": " + std::to_string(end_ - pos_) + " bytes left unread");
    pos_ = end_;
    end_ = ends_.back();
    ends_.pop_back();
}

} // namespace pib
