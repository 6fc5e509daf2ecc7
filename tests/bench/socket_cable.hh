// SPDX-License-Identifier: GPL-2.0-or-later
// The fabric benchmark's cable: a UNIX stream socket to a switch port,
// the byte stream of docs/wire.md, as QEMU's chardev gives it to the
// device. What the far end cannot take yet waits in the sender's buffer.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pib::bench {

class SocketCable {
  public:
    // Connects to the switch port listening at `path`, retrying for a
    // few seconds while the switch starts; throws if it never answers.
    explicit SocketCable(const std::string &path);
    ~SocketCable();
    SocketCable(const SocketCable &) = delete;
    SocketCable &operator=(const SocketCable &) = delete;

    int fd() const { return fd_; }
    // Writes what it can of `bytes[*offset..end)` (end: all) without
    // blocking and moves *offset past it. Throws if the switch closed the
    // cable.
    void write(const std::vector<uint8_t> &bytes, size_t *offset, size_t end = SIZE_MAX);
    // Reads what has arrived (at most the buffer's size) without blocking:
    // empty if nothing did. The bytes stay valid until the next read.
    std::span<const uint8_t> read();

  private:
    int fd_ = -1;
    std::vector<uint8_t> buffer_;
};

// Whether `fd` is readable now.
bool readable(int fd);
// Waits up to `ms` for `fd` to be readable (and, if `output`, writable),
// or `other` (if not -1) to be readable.
void waitFor(int fd, bool output, int ms, int other = -1);

} // namespace pib::bench
