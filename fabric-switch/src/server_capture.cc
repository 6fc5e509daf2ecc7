// SPDX-License-Identifier: GPL-2.0-or-later
// Packet capture on switch ports: every packet a port receives (after the
// fault injection of its cable's inward direction) and every packet it
// puts on its cable (after the outward one) goes to the port's pcap file.
#include <charconv>

#include "server.hh"
#include "server_internal.hh"

namespace pib::fabric {

std::string Server::startCapture(unsigned port, const std::string &path, uint64_t limit) {
    std::string error;
    auto capture = wire::PacketCapture::open(path, limit, &error);
    if (!capture)
        throw std::runtime_error("port " + std::to_string(port) + ": cannot capture to " + path +
                                 ": " + error);
    captures_[port] = std::move(capture);
    const std::string text = "port " + std::to_string(port) + ": capturing to " + path +
                             (limit ? ", " + std::to_string(limit) + " packets at most" : "");
    log("%s", text.c_str());
    return text;
}

std::string Server::stopCapture(unsigned port) {
    std::string text = "port " + std::to_string(port) + ": ";
    if (!captures_[port])
        return text + "no capture";
    text += "captured " + captures_[port]->describe();
    captures_[port].reset(); // closes the file
    log("%s", text.c_str());
    return text;
}

void Server::capture(unsigned port, std::span<const uint8_t> packet, bool sent) {
    wire::PacketCapture *c = captures_[port].get();
    using Direction = wire::PacketCapture::Direction;
    if (c && !c->record(packet, sent ? Direction::kSent : Direction::kReceived) &&
        c->packets() == 0)
        captures_[port].reset(); // not even one packet could be written
}

// "capture PORT FILE [COUNT]" or "capture PORT stop"; the port is parsed.
std::string Server::captureCommand(unsigned port, std::string_view args) {
    const size_t start = args.find_first_not_of(' ');
    if (start == std::string_view::npos)
        return "error: capture PORT FILE [COUNT] | capture PORT stop";
    args.remove_prefix(start);
    const size_t space = args.find(' ');
    const std::string file(args.substr(0, space));
    if (file == "stop")
        return "ok " + stopCapture(port);
    uint64_t limit = 0;
    if (space != std::string_view::npos) {
        std::string_view count = args.substr(space + 1);
        const auto [end, ec] = std::from_chars(count.data(), count.data() + count.size(), limit);
        if (ec != std::errc() || end != count.data() + count.size())
            return "error: COUNT must be a number, got '" + std::string(count) + "'";
    }
    try {
        return "ok " + startCapture(port, file, limit);
    } catch (const std::runtime_error &e) {
        return std::string("error: ") + e.what();
    }
}

// A line per port that has a capture: "port 3: 120 packets to FILE".
std::string Server::captureStatus() const {
    std::string s;
    for (unsigned p = 1; p < captures_.size(); ++p)
        if (captures_[p])
            s += "port " + std::to_string(p) + ": " + captures_[p]->describe() + "\n";
    return s;
}

} // namespace pib::fabric
