// SPDX-License-Identifier: GPL-2.0-or-later
#include "ring_cable.hh"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <string_view>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

namespace pib::wire {

namespace {

uint32_t load(const uint32_t *p) {
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
void store(uint32_t *p, uint32_t v) {
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
// Between storing an index and reading the other end's doorbell request:
// without it, both ends could miss each other and sleep for ever.
void fullFence() {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

// Stores this end's index `now` where the other end reads it (`shared`),
// `told` being what it was told last. True when the other end asked to be
// woken (`wakeAt`) at a point the index just passed.
bool tell(uint32_t *shared, uint32_t *told, uint32_t now, const uint32_t *wakeAt) {
    const uint32_t before = *told;
    if (now == before)
        return false;
    store(shared, now);
    *told = now;
    fullFence();
    return passed(load(wakeAt), now, before);
}

size_t mappedBytes(uint32_t ringSize) {
    return PIB_WIRE_RING_DATA + 2 * size_t{ringSize};
}

constexpr unsigned kMaxFds = 4; // a ring offer carries 3

} // namespace

bool RingMemory::validSize(uint32_t ringSize) {
    return ringSize >= PIB_WIRE_RING_MIN_SIZE && ringSize <= PIB_WIRE_RING_MAX_SIZE &&
           (ringSize & (ringSize - 1)) == 0;
}

std::unique_ptr<RingMemory> RingMemory::create(uint32_t ringSize, std::string *why) {
    static_assert(sizeof(pib_wire_ring_layout) <= PIB_WIRE_RING_DATA);
    if (!validSize(ringSize)) {
        *why = "ring size out of range";
        return nullptr;
    }
    const int fd = memfd_create("pib-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    const size_t bytes = mappedBytes(ringSize);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        *why = std::string("memfd: ") + std::strerror(errno);
        if (fd >= 0)
            close(fd);
        return nullptr;
    }
    void *base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        *why = std::string("mmap: ") + std::strerror(errno);
        close(fd);
        return nullptr;
    }
    auto *layout = static_cast<pib_wire_ring_layout *>(base);
    layout->magic = PIB_WIRE_RING_MAGIC;
    layout->ring_size = ringSize;
    return std::unique_ptr<RingMemory>(
        new RingMemory(fd, static_cast<uint8_t *>(base), bytes, ringSize));
}

std::unique_ptr<RingMemory> RingMemory::adopt(int fd, uint32_t ringSize, std::string *why) {
    auto refuse = [&](const char *reason) -> std::unique_ptr<RingMemory> {
        *why = reason;
        close(fd);
        return nullptr;
    };
    if (!validSize(ringSize))
        return refuse("ring size out of range");
    // A peer that could shrink the file would make our reads fault (SIGBUS).
    const int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK))
        return refuse("the memory is not a memfd sealed against shrinking");
    struct stat st {};
    const size_t bytes = mappedBytes(ringSize);
    if (fstat(fd, &st) != 0 || st.st_size < 0 || static_cast<size_t>(st.st_size) < bytes)
        return refuse("the memory is smaller than its rings");
    void *base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        return refuse("the memory cannot be mapped");
    auto *layout = static_cast<const pib_wire_ring_layout *>(base);
    // Read once: what the peer writes there later changes nothing here.
    if (load(&layout->magic) != PIB_WIRE_RING_MAGIC || load(&layout->ring_size) != ringSize) {
        munmap(base, bytes);
        return refuse("the memory is not laid out as offered");
    }
    return std::unique_ptr<RingMemory>(
        new RingMemory(fd, static_cast<uint8_t *>(base), bytes, ringSize));
}

RingMemory::~RingMemory() {
    munmap(base_, bytes_);
    close(fd_);
}

pib_wire_ring_ctrl *RingMemory::ctrl(unsigned ring) {
    return &reinterpret_cast<pib_wire_ring_layout *>(base_)->ring[ring & 1];
}

uint8_t *RingMemory::data(unsigned ring) {
    return base_ + PIB_WIRE_RING_DATA + size_t{ring & 1} * ringSize_;
}

// ---- producer ----------------------------------------------------------

RingWriter::RingWriter(pib_wire_ring_ctrl *ctrl, uint8_t *data, uint32_t size)
    : ctrl_(ctrl), data_(data), size_(size) {}

uint32_t RingWriter::consumed() {
    const uint32_t consumed = load(&ctrl_->consumed);
    // The consumer cannot have taken more than was published.
    if (static_cast<uint32_t>(published_ - consumed) > size_)
        corrupt_ = true;
    return consumed;
}

bool RingWriter::hasRoom(size_t bytes, uint32_t consumed) const {
    const uint32_t used = produced_ - consumed;
    const uint32_t limit = std::min(size_, kRingFillLimit);
    return !corrupt_ && used <= limit && bytes <= limit - used;
}

bool RingWriter::put(std::span<const uint8_t> frame) {
    if (!hasRoom(frame.size(), consumed()))
        return false;
    const uint32_t at = produced_ & (size_ - 1);
    const size_t first = std::min<size_t>(frame.size(), size_ - at);
    std::memcpy(data_ + at, frame.data(), first);
    std::memcpy(data_, frame.data() + first, frame.size() - first);
    produced_ += static_cast<uint32_t>(frame.size());
    total_ += frame.size();
    return true;
}

std::span<uint8_t> RingWriter::reserve(size_t bytes) {
    const uint32_t at = produced_ & (size_ - 1);
    if (bytes > size_ - at || !hasRoom(bytes, consumed()))
        return {};
    return {data_ + at, bytes};
}

void RingWriter::commit(size_t bytes) {
    produced_ += static_cast<uint32_t>(bytes);
    total_ += bytes;
}

bool RingWriter::publish() {
    return tell(&ctrl_->produced, &published_, produced_, &ctrl_->wake_consumer_at);
}

uint32_t RingWriter::inFlight() const {
    return std::min(published_ - load(&ctrl_->consumed), size_);
}

bool RingWriter::armRoomDoorbell(size_t bytes) {
    // The consumer rings when its index passes the one stored here (see
    // tell()); one it passed before it could see the store rings nothing.
    const uint32_t seen = consumed();
    if (corrupt_ || hasRoom(bytes, seen))
        return false;
    store(&ctrl_->wake_producer_at, seen);
    fullFence();
    return consumed() == seen;
}

// ---- consumer ----------------------------------------------------------

RingReader::RingReader(pib_wire_ring_ctrl *ctrl, const uint8_t *data, uint32_t size)
    : ctrl_(ctrl), data_(data), size_(size), frame_(kHeaderSize + kMaxPayload) {}

void RingReader::copyOut(uint32_t at, uint8_t *to, uint32_t length) const {
    const uint32_t offset = at & (size_ - 1);
    const uint32_t first = std::min(length, size_ - offset);
    std::memcpy(to, data_ + offset, first);
    std::memcpy(to + first, data_, length - first);
}

// The length of the next frame's payload, its header checked (copied into
// frame_); nothing when none is complete, or when the producer broke the
// protocol (*error says so).
std::optional<uint32_t> RingReader::nextLength(Error *error) {
    *error = Error::kNone;
    const uint32_t available = load(&ctrl_->produced) - consumed_;
    if (available > size_) {
        *error = Error::kBadIndex;
        return std::nullopt;
    }
    if (available == 0)
        return std::nullopt;
    // The producer publishes whole frames: anything less is a broken ring.
    frameLength_ = kHeaderSize;
    if (available < kHeaderSize) {
        *error = Error::kBadFrame;
        return std::nullopt;
    }
    copyOut(consumed_, frame_.data(), kHeaderSize);
    const uint8_t *h = frame_.data();
    const uint32_t length = getLe32(h + 8);
    if (getLe32(h) != PIB_WIRE_MAGIC || h[4] != PIB_WIRE_VERSION || h[5] != PIB_WIRE_PACKET ||
        length > kMaxPayload || available - kHeaderSize < length) {
        *error = Error::kBadFrame;
        return std::nullopt;
    }
    return length;
}

std::optional<FrameReader::View> RingReader::next(Error *error) {
    const auto length = nextLength(error);
    if (!length)
        return std::nullopt;
    return FrameReader::View{PIB_WIRE_PACKET, takeWhole(*length)};
}

// The frame whose header nextLength() checked, copied out whole: its payload.
std::span<const uint8_t> RingReader::takeWhole(uint32_t length) {
    frameLength_ = kHeaderSize + length;
    takePayload(length, frame_.data() + kHeaderSize);
    return lastFrame().subspan(kHeaderSize);
}

// The payload of the frame whose header nextLength() checked, copied to
// `to`; the frame is read.
void RingReader::takePayload(uint32_t length, uint8_t *to) {
    copyOut(consumed_ + kHeaderSize, to, length);
    consumed_ += kHeaderSize + length;
    total_ += kHeaderSize + length;
}

std::optional<RingReader::InPlace> RingReader::nextInPlace(size_t headBytes, Error *error) {
    const auto length = nextLength(error);
    if (!length)
        return std::nullopt;
    const uint32_t at = (consumed_ + kHeaderSize) & (size_ - 1);
    if (*length <= 2 * headBytes || *length > size_ - at) { // short, or wraps: copied whole
        const auto whole = takeWhole(*length);
        return InPlace{whole, whole};
    }
    frameLength_ = kHeaderSize + headBytes;
    std::memcpy(frame_.data() + kHeaderSize, data_ + at, headBytes);
    consumed_ += kHeaderSize + *length;
    total_ += kHeaderSize + *length;
    return InPlace{std::span(data_ + at, *length), lastFrame().subspan(kHeaderSize)};
}

std::optional<uint32_t> RingReader::nextTo(uint8_t *to, Error *error) {
    const auto length = nextLength(error);
    if (length)
        takePayload(*length, to);
    return length;
}

std::span<const uint8_t> RingReader::lastFrame() const {
    return std::span(frame_).first(frameLength_);
}

bool RingReader::release() {
    return tell(&ctrl_->consumed, &released_, consumed_, &ctrl_->wake_producer_at);
}

uint32_t RingReader::waiting() const {
    return std::min(load(&ctrl_->produced) - consumed_, size_);
}

bool RingReader::armDoorbell() {
    store(&ctrl_->wake_consumer_at, consumed_);
    fullFence();
    return load(&ctrl_->produced) == consumed_;
}

const char *RingReader::toString(Error error) {
    switch (error) {
    case Error::kNone:
        return "no error";
    case Error::kBadIndex:
        return "the peer's ring index is impossible";
    case Error::kBadFrame:
        return "a frame in the ring is broken";
    }
    return "?";
}

// ---- descriptors over a UNIX socket -------------------------------------

bool sendWithFds(int socket, std::span<const uint8_t> bytes, std::span<const int> fds) {
    if (fds.size() > kMaxFds)
        return false;
    iovec iov{const_cast<uint8_t *>(bytes.data()), bytes.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (!fds.empty()) {
        msg.msg_control = control;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
        cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
        std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    return sendmsg(socket, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

long receiveWithFds(int socket, std::span<uint8_t> bytes, std::vector<int> *fds) {
    iovec iov{bytes.data(), bytes.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(socket, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    for (cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&msg) : nullptr; c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
            int fd;
            std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            fds->push_back(fd);
        }
    }
    return n;
}

// ---- the doorbell line ---------------------------------------------------

bool makeDoorbellLine(int *ours, int *theirs, std::string *why) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0) {
        *why = std::string("socketpair: ") + std::strerror(errno);
        return false;
    }
    *ours = pair[0];
    *theirs = pair[1];
    return true;
}

bool isDoorbellLine(int fd) {
    struct stat st {};
    int domain = 0, type = 0, listening = 1;
    socklen_t len = sizeof(int);
    sockaddr_storage peer{};
    socklen_t peerLen = sizeof(peer);
    return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) &&
           getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_UNIX &&
           getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM &&
           getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && !listening &&
           getpeername(fd, reinterpret_cast<sockaddr *>(&peer), &peerLen) == 0;
}

void ringDoorbell(int fd) {
    // A line whose buffer is full rings already (EAGAIN); one the peer
    // closed (EPIPE) is the peer's broken cable, which its reader finds.
    const uint8_t ring = 1;
    [[maybe_unused]] const ssize_t n = send(fd, &ring, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

bool clearDoorbell(int fd) {
    uint8_t rings[kDoorbellDrain];
    const ssize_t n = recv(fd, rings, sizeof(rings), MSG_DONTWAIT);
    if (n > 0)
        return true;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
}

} // namespace pib::wire
