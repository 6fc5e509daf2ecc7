// SPDX-License-Identifier: GPL-2.0-or-later
// libFuzzer harness of the parsers every byte from the fabric meets first:
// the wire framing (fed in pieces, read in place and copied) and the IBA
// packet parser (with and without the ICRC check, copying the payload or
// not, and parseShared, which reads the headers from a private copy of a
// packet in a ring and must agree with parse). A packet that parses must
// build again into bytes that parse to the same headers.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "frame.hh"
#include "packet.hh"

using namespace pib;

namespace {

void check(bool ok, const char *what) {
    if (!ok) {
        std::fprintf(stderr, "fuzz-packet: invariant broken: %s\n", what);
        std::abort();
    }
}

// parseShared on bytes nobody rewrites: the same verdict and headers as
// parse, the payload left where it lies.
void parseShared(std::span<const uint8_t> bytes) {
    const std::vector<uint8_t> head(bytes.begin(),
                                    bytes.begin() + std::min(bytes.size(), iba::kMaxHeaderBytes));
    iba::ParseError sharedError, error;
    const auto shared = iba::parseShared(bytes, head, &sharedError);
    const auto p = iba::parse(bytes, &error, true, false);
    check(shared.has_value() == p.has_value() && sharedError == error,
          "parseShared and parse disagree");
    if (p)
        check(shared->bth.psn == p->bth.psn && shared->bth.opcode == p->bth.opcode &&
                  shared->view.data() == p->view.data() && shared->view.size() == p->view.size(),
              "parseShared read other headers or another payload");
}

void parsePacket(std::span<const uint8_t> bytes, bool checkIcrc, bool copy) {
    iba::ParseError error;
    if (checkIcrc && !copy)
        parseShared(bytes);
    auto p = iba::parse(bytes, &error, checkIcrc, copy);
    if (!p)
        return;
    const std::vector<uint8_t> again = iba::build(*p);
    auto q = iba::parse(again, &error, true, true);
    check(q.has_value(), "a parsed packet does not build into one that parses");
    check(q->bth.opcode == p->bth.opcode && q->bth.psn == p->bth.psn &&
              q->bth.destQp == p->bth.destQp && q->lrh.dlid == p->lrh.dlid &&
              q->data().size() == p->data().size(),
          "a rebuilt packet has other headers");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzedDataProvider in(data, size);
    const uint8_t mode = in.ConsumeIntegral<uint8_t>();
    const std::vector<uint8_t> rest = in.ConsumeRemainingBytes<uint8_t>();
    parsePacket(rest, mode & 1, mode & 2);
    // The same bytes as a stream, in pieces of 1 to 64 bytes (sizes from
    // the mode byte), read in place (lend) or copied (feed).
    wire::FrameReader reader;
    wire::FrameReader::Error error = wire::FrameReader::Error::kNone;
    const size_t piece = 1 + (mode >> 2);
    for (size_t at = 0; at < rest.size() && error == wire::FrameReader::Error::kNone;) {
        const auto chunk = std::span(rest).subspan(at, std::min(piece, rest.size() - at));
        at += chunk.size();
        if (mode & 1) {
            reader.lend(chunk);
            while (auto frame = reader.nextView(&error))
                parsePacket(frame->payload, true, false);
            if (error == wire::FrameReader::Error::kNone)
                reader.keepRest();
        } else {
            reader.feed(chunk);
            while (auto frame = reader.next(&error))
                parsePacket(frame->payload, false, true);
        }
        check(reader.buffered() <= rest.size(), "the frame reader holds more than it was given");
    }
    return 0;
}
