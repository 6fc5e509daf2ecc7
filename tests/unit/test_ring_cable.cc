// SPDX-License-Identifier: GPL-2.0-or-later
// Ring cables (common/wire/ring_cable.*): frames through shared memory, the
// doorbell protocol, and a peer that writes nonsense into the rings.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include "frame.hh"
#include "ring_cable.hh"

using namespace pib::wire;

namespace {

constexpr uint32_t kSize = PIB_WIRE_RING_MIN_SIZE;

struct Cable {
    std::unique_ptr<RingMemory> memory;
    RingWriter writer;
    RingReader reader;

    explicit Cable(std::unique_ptr<RingMemory> m)
        : memory(std::move(m)), writer(memory->ctrl(0), memory->data(0), kSize),
          reader(memory->ctrl(0), memory->data(0), kSize) {}
    static std::unique_ptr<RingMemory> make() {
        std::string why;
        auto m = RingMemory::create(kSize, &why);
        REQUIRE(m);
        return m;
    }
    Cable() : Cable(make()) {}
};

std::vector<uint8_t> packetFrame(size_t length, uint8_t seed) {
    std::vector<uint8_t> payload(length);
    for (size_t i = 0; i < length; ++i)
        payload[i] = static_cast<uint8_t>(seed + i * 7);
    return encode(PIB_WIRE_PACKET, payload);
}

} // namespace

TEST_CASE("frames cross a ring whole and in order, around its end many times", "[ring]") {
    Cable c;
    size_t sent = 0, received = 0;
    std::vector<std::vector<uint8_t>> inFlight;
    for (unsigned round = 0; round < 200; ++round) {
        // Odd sizes, so that frames straddle the end of the data.
        while (true) {
            auto frame = packetFrame(1 + (sent * 977) % PIB_WIRE_MAX_PACKET, uint8_t(sent));
            if (!c.writer.put(frame))
                break;
            inFlight.push_back(std::move(frame));
            ++sent;
        }
        c.writer.publish();
        RingReader::Error error;
        while (auto view = c.reader.next(&error)) {
            REQUIRE(received < inFlight.size());
            const auto &expected = inFlight[received++];
            CHECK(std::vector<uint8_t>(c.reader.lastFrame().begin(), c.reader.lastFrame().end()) ==
                  expected);
            CHECK(view->payload.size() == expected.size() - kHeaderSize);
        }
        CHECK(error == RingReader::Error::kNone);
        c.reader.release();
    }
    CHECK(received == sent);
    CHECK(sent > 1000); // the ring (64 KiB) went round many times
}

TEST_CASE("frames built in place and read in place cross the ring as put ones do", "[ring]") {
    Cable c;
    constexpr size_t kHead = 128;
    size_t sent = 0, received = 0, builtInPlace = 0, readInPlace = 0;
    std::vector<std::vector<uint8_t>> inFlight;
    for (unsigned round = 0; round < 100; ++round) {
        while (true) {
            auto frame = packetFrame(1 + (sent * 977) % PIB_WIRE_MAX_PACKET, uint8_t(sent));
            // The room a frame that would wrap gets is none: it is put.
            const auto room = c.writer.reserve(frame.size());
            if (!room.empty()) {
                std::memcpy(room.data(), frame.data(), frame.size());
                c.writer.commit(frame.size());
                ++builtInPlace;
            } else if (!c.writer.put(frame)) {
                break;
            }
            inFlight.push_back(std::move(frame));
            ++sent;
        }
        c.writer.publish();
        RingReader::Error error;
        while (auto got = c.reader.nextInPlace(kHead, &error)) {
            REQUIRE(received < inFlight.size());
            const auto &expected = inFlight[received++];
            const auto payload = std::span(expected).subspan(kHeaderSize);
            REQUIRE(got->payload.size() == payload.size());
            CHECK(std::equal(got->payload.begin(), got->payload.end(), payload.begin()));
            if (got->payload.data() != got->head.data()) { // in the ring: a private head
                ++readInPlace;
                CHECK(got->payload.size() > 2 * kHead);
                REQUIRE(got->head.size() == kHead);
                CHECK(std::equal(got->head.begin(), got->head.end(), payload.begin()));
                const auto *ring = c.memory->data(0);
                CHECK(got->payload.data() >= ring);
                CHECK(got->payload.data() + got->payload.size() <= ring + kSize);
            }
        }
        CHECK(error == RingReader::Error::kNone);
        c.reader.release();
    }
    CHECK(received == sent);
    CHECK(builtInPlace > sent / 2);
    CHECK(builtInPlace < sent); // some would have wrapped
    CHECK(readInPlace > sent / 2);
}

TEST_CASE("a producer fills a large ring only to kRingFillLimit", "[ring]") {
    constexpr uint32_t kLarge = 4 << 20;
    static_assert(kLarge > kRingFillLimit);
    std::string why;
    auto memory = RingMemory::create(kLarge, &why);
    REQUIRE(memory);
    RingWriter writer(memory->ctrl(0), memory->data(0), kLarge);
    RingReader reader(memory->ctrl(0), memory->data(0), kLarge);
    const auto frame = packetFrame(4096, 2);
    size_t held = 0;
    while (writer.put(frame))
        held += frame.size();
    CHECK(held <= kRingFillLimit);
    CHECK(held + frame.size() > kRingFillLimit);
    writer.publish();
    CHECK(reader.waiting() == held);
    CHECK(writer.inFlight() == held);
    RingReader::Error error;
    REQUIRE(reader.next(&error));
    reader.release();
    CHECK(writer.put(frame)); // a frame taken makes room for one
    CHECK_FALSE(writer.put(frame));
}

TEST_CASE("a ring rings doorbells only when the other end asked for one", "[ring]") {
    Cable c;
    const auto frame = packetFrame(100, 1);
    SECTION("the consumer sleeps: the first frame rings, the next do not") {
        CHECK(c.reader.armDoorbell());
        REQUIRE(c.writer.put(frame));
        CHECK(c.writer.publish());
        REQUIRE(c.writer.put(frame));
        CHECK_FALSE(c.writer.publish());
    }
    SECTION("a consumer that is busy hears nothing") {
        REQUIRE(c.writer.put(frame));
        c.writer.publish();
        RingReader::Error error;
        REQUIRE(c.reader.next(&error));
        c.reader.release(); // it never armed: no doorbell either way
        REQUIRE(c.writer.put(frame));
        CHECK_FALSE(c.writer.publish());
    }
    SECTION("a consumer about to sleep sees what came meanwhile") {
        REQUIRE(c.writer.put(frame));
        c.writer.publish();
        CHECK_FALSE(c.reader.armDoorbell()); // a frame waits: it must not sleep
    }
    SECTION("a full ring: the producer hears when room comes") {
        while (c.writer.put(frame)) {
        }
        c.writer.publish();
        CHECK(c.writer.armRoomDoorbell(frame.size()));
        RingReader::Error error;
        REQUIRE(c.reader.next(&error));
        CHECK(c.reader.release());
        CHECK(c.writer.put(frame));
    }
    SECTION("a full ring the consumer empties before the producer asks: no sleep") {
        RingReader::Error error;
        REQUIRE(c.writer.put(frame)); // a first round: the producer's request is old
        c.writer.publish();
        REQUIRE(c.reader.next(&error));
        c.reader.release();
        while (c.writer.put(frame)) {
        }
        c.writer.publish();
        // The consumer takes everything while the producer is between its
        // failed put and its request: it had no request to ring for, and
        // has nothing left to take. A producer that slept now would sleep
        // for ever (it did, between two switches, under load).
        while (c.reader.next(&error)) {
        }
        CHECK_FALSE(c.reader.release());
        CHECK_FALSE(c.writer.armRoomDoorbell(frame.size()));
        CHECK(c.writer.put(frame));
    }
}

TEST_CASE("a peer that breaks the ring breaks only its link", "[ring]") {
    Cable c;
    pib_wire_ring_ctrl *ctrl = c.memory->ctrl(0);
    RingReader::Error error;
    SECTION("a producer index beyond the ring") {
        ctrl->produced = kSize + 1;
        CHECK_FALSE(c.reader.next(&error));
        CHECK(error == RingReader::Error::kBadIndex);
    }
    SECTION("less than a header") {
        ctrl->produced = 3;
        CHECK_FALSE(c.reader.next(&error));
        CHECK(error == RingReader::Error::kBadFrame);
    }
    SECTION("a frame that is not a packet, too long, or cut short") {
        auto frame = packetFrame(64, 2);
        SECTION("bad magic") {
            frame[0] ^= 1;
        }
        SECTION("a HELLO") {
            frame[5] = PIB_WIRE_HELLO;
        }
        SECTION("too long") {
            frame[10] = 0x10;
        }
        SECTION("longer than what was published") {
            frame[8] = 200;
        }
        std::memcpy(c.memory->data(0), frame.data(), frame.size());
        ctrl->produced = static_cast<uint32_t>(frame.size());
        CHECK_FALSE(c.reader.next(&error));
        CHECK(error == RingReader::Error::kBadFrame);
    }
    SECTION("a consumer index beyond what was published") {
        REQUIRE(c.writer.put(packetFrame(10, 3)));
        c.writer.publish();
        ctrl->consumed = 0x80000000u;
        CHECK_FALSE(c.writer.put(packetFrame(10, 3)));
        CHECK(c.writer.corrupt());
    }
}

TEST_CASE("adopting a peer's memory checks it first", "[ring]") {
    std::string why;
    SECTION("a valid offer maps") {
        auto offered = RingMemory::create(kSize, &why);
        REQUIRE(offered);
        auto adopted = RingMemory::adopt(dup(offered->fd()), kSize, &why);
        REQUIRE(adopted);
        adopted->ctrl(1)->produced = 42; // the same memory
        CHECK(offered->ctrl(1)->produced == 42);
    }
    SECTION("a size that is not offered") {
        auto offered = RingMemory::create(kSize, &why);
        CHECK_FALSE(RingMemory::adopt(dup(offered->fd()), kSize * 2, &why));
        CHECK_FALSE(RingMemory::adopt(dup(offered->fd()), kSize + 1, &why));
    }
    SECTION("an unsealed file, which the peer could shrink under us") {
        const int fd = memfd_create("unsealed", MFD_CLOEXEC);
        REQUIRE(ftruncate(fd, PIB_WIRE_RING_DATA + 2 * kSize) == 0);
        CHECK_FALSE(RingMemory::adopt(fd, kSize, &why));
        CHECK(why.find("sealed") != std::string::npos);
    }
    SECTION("a sealed file without the layout") {
        const int fd = memfd_create("blank", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        REQUIRE(ftruncate(fd, PIB_WIRE_RING_DATA + 2 * kSize) == 0);
        REQUIRE(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
        CHECK_FALSE(RingMemory::adopt(fd, kSize, &why));
    }
    SECTION("a sealed file too small for its rings") {
        const int fd = memfd_create("small", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        REQUIRE(ftruncate(fd, PIB_WIRE_RING_DATA) == 0);
        REQUIRE(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
        CHECK_FALSE(RingMemory::adopt(fd, kSize, &why));
    }
}

TEST_CASE("descriptors cross a UNIX socket with the bytes they belong to", "[ring]") {
    int pair[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
    int line[2];
    std::string why;
    REQUIRE(makeDoorbellLine(&line[0], &line[1], &why));
    const int bell = eventfd(0, EFD_CLOEXEC);
    int pipeFds[2];
    REQUIRE(pipe(pipeFds) == 0);
    const uint8_t bytes[] = {1, 2, 3};
    const int sent[] = {line[1], pipeFds[0], bell};
    REQUIRE(sendWithFds(pair[0], bytes, sent));
    uint8_t in[16];
    std::vector<int> fds;
    CHECK(receiveWithFds(pair[1], in, &fds) == 3);
    REQUIRE(fds.size() == 3);
    CHECK(isDoorbellLine(fds[0]));
    CHECK_FALSE(isDoorbellLine(fds[1])); // a pipe is no doorbell line
    CHECK_FALSE(isDoorbellLine(fds[2])); // nor an eventfd
    for (int fd :
         {fds[0], fds[1], fds[2], bell, pipeFds[0], pipeFds[1], pair[0], pair[1], line[0], line[1]})
        close(fd);
}

TEST_CASE("a doorbell line never blocks, whatever the peer does with its end", "[ring]") {
    int ours = -1, theirs = -1;
    std::string why;
    REQUIRE(makeDoorbellLine(&ours, &theirs, &why));
    // The peer makes its end blocking and never reads: we ring until its
    // buffer is full and beyond, and return each time.
    REQUIRE(fcntl(theirs, F_SETFL, fcntl(theirs, F_GETFL) & ~O_NONBLOCK) == 0);
    for (int i = 0; i < 1'000'000; ++i)
        ringDoorbell(ours);
    // It floods ours: each clear takes a bounded share, and returns.
    uint8_t flood[4096] = {};
    while (send(theirs, flood, sizeof(flood), MSG_DONTWAIT) > 0) {
    }
    REQUIRE(fcntl(ours, F_SETFL, fcntl(ours, F_GETFL) & ~O_NONBLOCK) == 0); // as a peer's dup could
    int clears = 0;
    while (clears < 1'000'000) {
        ++clears;
        pollfd p{ours, POLLIN, 0};
        if (poll(&p, 1, 0) != 1)
            break;
        REQUIRE(clearDoorbell(ours));
    }
    CHECK(clears > 1);
    CHECK(clearDoorbell(ours)); // nothing there: no wait, and the line is up
    // The peer hangs up: the line says so.
    close(theirs);
    CHECK_FALSE(clearDoorbell(ours));
    ringDoorbell(ours); // and ringing a closed line neither blocks nor raises SIGPIPE
    close(ours);
}

namespace {

// One end of a cable in a thread of its own, sleeping in poll() on its end
// of the doorbell line as the switch and QEMU's main loop do. A sleep that
// lasts kLostWakeupMs with work waiting is a doorbell the protocol lost.
constexpr int kLostWakeupMs = 2000;

bool sleepOnBell(int bell) {
    pollfd p{bell, POLLIN, 0};
    if (poll(&p, 1, kLostWakeupMs) != 1)
        return false;
    return clearDoorbell(bell);
}

} // namespace

TEST_CASE("two ends in two threads never both sleep with work waiting", "[ring][threads]") {
    // The doorbell protocol's fences are what make this hold: a producer
    // that publishes as the consumer arms, and a consumer that releases
    // as the producer arms for room, must each see the other. Frames of
    // odd sizes fill the smallest ring, so that the producer waits for
    // room as often as the consumer waits for frames.
    Cable c;
    int producerBell = -1, consumerBell = -1;
    std::string why;
    REQUIRE(makeDoorbellLine(&producerBell, &consumerBell, &why));
    constexpr uint32_t kFrames = 50'000;
    std::atomic<bool> producerLost{false};
    std::thread producer([&] {
        for (uint32_t n = 0; n < kFrames && !producerLost;) {
            auto frame = packetFrame(16 + (n * 613) % 3000, uint8_t(n));
            std::memcpy(frame.data() + kHeaderSize, &n, sizeof(n));
            if (c.writer.put(frame)) {
                if (c.writer.publish())
                    ringDoorbell(producerBell);
                ++n;
                continue;
            }
            if (c.writer.armRoomDoorbell(frame.size()) && !sleepOnBell(producerBell))
                producerLost = true;
        }
    });
    uint32_t expected = 0;
    bool consumerLost = false, inOrder = true;
    while (expected < kFrames && !consumerLost && inOrder) {
        RingReader::Error error;
        unsigned batch = 0;
        while (batch < 16) {
            const auto frame = c.reader.next(&error);
            if (!frame)
                break;
            uint32_t n;
            std::memcpy(&n, frame->payload.data(), sizeof(n));
            inOrder = inOrder && n == expected;
            ++expected;
            ++batch;
        }
        REQUIRE(error == RingReader::Error::kNone);
        if (c.reader.release())
            ringDoorbell(consumerBell);
        if (batch == 16 || !c.reader.armDoorbell())
            continue;
        if (expected < kFrames && !sleepOnBell(consumerBell))
            consumerLost = true;
    }
    producerLost = producerLost || consumerLost; // a consumer that gave up frees the producer
    producer.join();
    close(producerBell);
    close(consumerBell);
    CHECK(inOrder);
    CHECK_FALSE(consumerLost);
    CHECK_FALSE(producerLost);
    CHECK(expected == kFrames);
}
