// SPDX-License-Identifier: GPL-2.0-or-later
// Ring cables (docs/wire.md): the frames of a link in two rings of shared
// memory, one per direction, with a doorbell line. The memory is shared
// with the peer, which may write anything into it at any time: a reader
// copies each frame out before it looks at it, checks every index it
// reads, and keeps its own positions privately.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "frame.hh"
#include "pib_wire.h"

namespace pib::wire {

// A producer keeps at most this much in a ring, however large the peer
// made it: a cable holds about what a link in flight holds, not seconds'
// worth. Every byte queued on a path delays the packets behind it, and
// RC's local ACK timer (67 ms at timeout 14) counts the delay at the tens
// to hundreds of MB/s guests move under TCG. (256 KiB cost a third of
// ib_write_bw between two guests; 1 MiB keeps it.)
inline constexpr uint32_t kRingFillLimit = 1 << 20;

// The shared memory of one ring cable, mapped.
class RingMemory {
  public:
    // Makes a sealed memfd with two rings of `ringSize` bytes, for an offer.
    static std::unique_ptr<RingMemory> create(uint32_t ringSize, std::string *why);
    // Maps a peer's memfd after checking it: sealed against shrinking,
    // large enough, laid out for `ringSize`. Takes the descriptor.
    static std::unique_ptr<RingMemory> adopt(int memfd, uint32_t ringSize, std::string *why);
    ~RingMemory();
    RingMemory(const RingMemory &) = delete;
    RingMemory &operator=(const RingMemory &) = delete;

    static bool validSize(uint32_t ringSize);
    int fd() const { return fd_; }
    uint32_t ringSize() const { return ringSize_; }
    pib_wire_ring_ctrl *ctrl(unsigned ring);
    uint8_t *data(unsigned ring);

  private:
    RingMemory(int fd, uint8_t *base, size_t bytes, uint32_t ringSize)
        : fd_(fd), base_(base), bytes_(bytes), ringSize_(ringSize) {}
    int fd_;
    uint8_t *base_;
    size_t bytes_;
    uint32_t ringSize_;
};

// The producing end of one ring.
class RingWriter {
  public:
    RingWriter(pib_wire_ring_ctrl *ctrl, uint8_t *data, uint32_t size);

    // Puts a whole frame (header and payload, as on the stream) if there
    // is room for it within kRingFillLimit; false if not. False too, for
    // good, once the peer's index is impossible (corrupt()).
    bool put(std::span<const uint8_t> frame);
    // Room for a frame of `bytes` built in place: contiguous (a frame
    // that would wrap past the ring's end gets none: put() it instead) and
    // within kRingFillLimit. The peer may write there too; what the
    // producer writes is the peer's own business once it is published.
    // Empty when there is none.
    std::span<uint8_t> reserve(size_t bytes);
    // The frame built in the room reserve() gave is in the ring.
    void commit(size_t bytes);
    // Makes what was put visible. True when the consumer asked for a
    // doorbell (ringDoorbell).
    bool publish();
    // Before the producer waits for room for a frame of `bytes`: asks for
    // a doorbell once the consumer takes more. False when there is room
    // already (retry now): the consumer may have taken everything between
    // the failed put() and this call, and then rings no more.
    bool armRoomDoorbell(size_t bytes);
    bool corrupt() const { return corrupt_; }
    // Bytes published that the consumer has not taken (as far as its
    // index says).
    uint32_t inFlight() const;
    // Bytes put in the ring since it was made (an index that does not wrap).
    uint64_t total() const { return total_; }

  private:
    pib_wire_ring_ctrl *ctrl_;
    uint8_t *data_;
    uint32_t size_;
    uint32_t produced_ = 0;  // this end's own count, never read back
    uint32_t published_ = 0; // what the consumer may see
    uint64_t total_ = 0;
    bool corrupt_ = false;

    uint32_t consumed(); // the peer's, checked
    bool hasRoom(size_t bytes, uint32_t consumed) const;
};

// The consuming end of one ring.
class RingReader {
  public:
    enum class Error { kNone, kBadIndex, kBadFrame };

    RingReader(pib_wire_ring_ctrl *ctrl, const uint8_t *data, uint32_t size);

    // The next whole frame, copied out of the ring: valid until the next
    // call. Nothing when none is complete; an error when the producer
    // broke the protocol (the link is then dropped).
    std::optional<FrameReader::View> next(Error *error);
    // That frame whole, header and payload, as a stream carries it.
    std::span<const uint8_t> lastFrame() const;
    // The next frame's payload where it lies in the ring, for a consumer
    // that reads it in place: `payload` is memory the producer may rewrite
    // at any moment, `head` a private copy of its first `headBytes` bytes
    // (read what decides anything from there, once). A short frame, or one
    // that wraps past the ring's end, is copied out whole as next() does:
    // then both are the copy. Valid until the next call or release().
    struct InPlace {
        std::span<const uint8_t> payload;
        std::span<const uint8_t> head;
    };
    std::optional<InPlace> nextInPlace(size_t headBytes, Error *error);
    // The next whole frame's payload copied to `to`, which has room for
    // kMaxPayload bytes: its length. For a consumer that keeps frames (a
    // switch's forwarding thread), one copy and no more.
    std::optional<uint32_t> nextTo(uint8_t *to, Error *error);
    // Gives the space of the frames read back. True when the producer
    // asked for a doorbell (ringDoorbell).
    bool release();
    // Before the consumer sleeps: asks for a doorbell at the next frame.
    // False when one arrived meanwhile (read again instead of sleeping).
    bool armDoorbell();
    // Bytes the producer published that are not read yet (as far as its
    // index says).
    uint32_t waiting() const;
    // Bytes read from the ring since it was made (an index that does not wrap).
    uint64_t total() const { return total_; }
    static const char *toString(Error error);

  private:
    pib_wire_ring_ctrl *ctrl_;
    const uint8_t *data_;
    uint32_t size_;
    uint32_t consumed_ = 0; // read so far, this end's own count
    uint32_t released_ = 0; // what the producer was told
    uint64_t total_ = 0;
    // The last frame copied out: frame_'s first frameLength_ bytes. It
    // has room for the largest frame from the start: resizing it to each
    // frame's length zero-filled each frame longer than the one before,
    // and the switch spent a tenth of its time in that memset.
    std::vector<uint8_t> frame_;
    size_t frameLength_ = 0;

    void copyOut(uint32_t at, uint8_t *to, uint32_t length) const;
    std::optional<uint32_t> nextLength(Error *error);
    std::span<const uint8_t> takeWhole(uint32_t length);
    void takePayload(uint32_t length, uint8_t *to);
};

// Whether moving an index from `before` to `after` passed `event` (the
// virtio event index test: wake the other end).
inline bool passed(uint32_t event, uint32_t after, uint32_t before) {
    return static_cast<uint32_t>(after - event - 1) < static_cast<uint32_t>(after - before);
}

// SCM_RIGHTS over a UNIX socket: sends `bytes` with `fds`; receives bytes
// and whatever descriptors came with them (closed by the caller).
bool sendWithFds(int socket, std::span<const uint8_t> bytes, std::span<const int> fds);
long receiveWithFds(int socket, std::span<uint8_t> bytes, std::vector<int> *fds);
// A ring cable's doorbell line (docs/wire.md): one end of a UNIX stream
// socket pair the offerer makes, the other end passed in its offer. Each
// end rings the other by sending a byte on its own end and takes the rings
// it got by reading its own. Neither ever blocks, whatever the peer does
// with the end it holds: every call is MSG_DONTWAIT, and the two ends of
// a socket pair are two open file descriptions (an eventfd is one, whose
// O_NONBLOCK a peer could clear and whose counter it could fill so that
// our write() would wait for ever).
bool makeDoorbellLine(int *ours, int *theirs, std::string *why);
// Whether a descriptor a peer passed is a doorbell line: a connected
// UNIX stream socket (not a file, a pipe or a listening socket).
bool isDoorbellLine(int fd);
// Wakes the other end; never blocks (a line whose buffer is full is
// ringing already).
void ringDoorbell(int fd);
// The rings a read takes at most: a peer that rings without pause costs
// this end one bounded read per turn of its loop, and no more.
inline constexpr size_t kDoorbellDrain = 256;
// Takes the rings waiting, before the reader looks at its ring. False
// when the peer closed its end: the cable is broken.
bool clearDoorbell(int fd);
} // namespace pib::wire
