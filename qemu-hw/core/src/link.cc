// SPDX-License-Identifier: GPL-2.0-or-later
#include "link.hh"

#include <cinttypes>

namespace pib {

Link::Event Link::connected(bool connected) {
    const bool wasUp = up_;
    connected_ = connected;
    up_ = false;
    reader_.reset();
    if (connected) {
        pib_wire_hello hello{};
        hello.node_guid = nodeGuid_;
        hello.port_guid = portGuid_;
        hello.node_type = PIB_WIRE_NODE_CA;
        hello.port = static_cast<uint8_t>(port_);
        host_.portSend(
            port_, wire::encode(PIB_WIRE_HELLO, std::span(reinterpret_cast<const uint8_t *>(&hello),
                                                          sizeof(hello))));
        host_.trace("link", "port %u: connected, HELLO sent", port_);
    } else {
        host_.trace("link", "port %u: disconnected", port_);
    }
    return wasUp ? Event::kDown : Event::kNone;
}

Link::Event Link::receive(std::span<const uint8_t> bytes,
                          std::vector<std::vector<uint8_t>> *packets) {
    if (!connected_)
        return Event::kNone;
    Event event = Event::kNone;
    reader_.feed(bytes);
    wire::FrameReader::Error error;
    while (auto frame = reader_.next(&error)) {
        if (frame->type == PIB_WIRE_HELLO) {
            if (!up_ && frame->payload.size() >= sizeof(pib_wire_hello)) {
                up_ = true;
                event = Event::kUp;
                host_.trace("link", "port %u: link up", port_);
            }
        } else if (up_) {
            packets->push_back(std::move(frame->payload));
        } else {
            ++framesDropped_; // packets before HELLO: the link is not up
        }
    }
    if (error != wire::FrameReader::Error::kNone) {
        // The fabric is untrusted too: a corrupt stream drops the link.
        host_.trace("link-error", "port %u: %s; dropping the link", port_,
                    wire::FrameReader::toString(error));
        const bool wasUp = up_;
        up_ = false;
        connected_ = false;
        host_.portDisconnect(port_);
        return wasUp ? Event::kDown : Event::kNone;
    }
    return event;
}

void Link::sendPacket(std::span<const uint8_t> packet) {
    if (up_)
        host_.portSend(port_, wire::encode(PIB_WIRE_PACKET, packet));
}

} // namespace pib
