// SPDX-License-Identifier: GPL-2.0-or-later
#include "socket_cable.hh"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <stdexcept>
#include <sys/socket.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

namespace pib::bench {

namespace {

// A read takes at most this much: several 4 KiB frames at once, as a
// socket holds them, where QEMU's chardev reads 4 KiB.
constexpr size_t kReadBytes = 256 << 10;
constexpr int kConnectTries = 500; // 10 ms apart: the switch has 5 s to start

int connectUnix(const std::string &path) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path.size() >= sizeof(address.sun_path))
        throw std::runtime_error("socket path too long: " + path);
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    for (int attempt = 0; attempt < kConnectTries; ++attempt) {
        const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
        if (connect(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)) == 0)
            return fd;
        close(fd);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    throw std::runtime_error("no switch port answers at " + path);
}

} // namespace

SocketCable::SocketCable(const std::string &path) : fd_(connectUnix(path)), buffer_(kReadBytes) {
    fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
}

SocketCable::~SocketCable() {
    close(fd_);
}

void SocketCable::write(const std::vector<uint8_t> &bytes, size_t *offset, size_t end) {
    end = std::min(end, bytes.size());
    while (*offset < end) {
        const ssize_t n =
            send(fd_, bytes.data() + *offset, end - *offset, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            *offset += static_cast<size_t>(n);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        throw std::runtime_error("the switch closed the cable");
    }
}

std::span<const uint8_t> SocketCable::read() {
    const ssize_t n = recv(fd_, buffer_.data(), buffer_.size(), MSG_DONTWAIT);
    if (n > 0)
        return {buffer_.data(), static_cast<size_t>(n)};
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return {};
    throw std::runtime_error("the switch closed the cable");
}

bool readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, 0) == 1;
}

void waitFor(int fd, bool output, int ms, int other) {
    pollfd p[2] = {{fd, static_cast<short>(POLLIN | (output ? POLLOUT : 0)), 0},
                   {other, POLLIN, 0}};
    poll(p, other >= 0 ? 2 : 1, ms);
}

} // namespace pib::bench
