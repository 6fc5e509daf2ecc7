// SPDX-License-Identifier: GPL-2.0-or-later
// The switch's state with its links, for a fabric snapshot
// (docs/migration.md, "The switch's state"): the control socket's
// "save FILE" writes what the Switch saves and, for each port whose link
// is up, whom it leads to; --restore gives it to a new switch process
// before it opens its ports. A restored link is kept up, as for a device
// that moves (server_moves.cc), until its peer comes back and resumes it
// or the grace runs out: a guest restored from the same snapshot, or
// another restored switch.
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "server.hh"
#include "server_internal.hh"
#include "state_archive.hh"

namespace pib::fabric {

namespace {

constexpr uint32_t kTagLinks = stateTag("SLNK");
// A switch's state is its ports and the tables its SM wrote (at most
// about 100 KiB); a simulated fabric's, that of each of its switches and
// CAs (some 10 KiB a switch in a fabric of 10,000 LIDs). Anything larger
// than a fabric of the largest size could save is not one.
constexpr size_t kMaxStateBytes = size_t{512} << 20;

} // namespace

std::vector<uint8_t> Server::saveState() const {
    StateWriter w;
    sw_.save(w);
    w.beginSection(kTagLinks);
    for (unsigned port = 1; port < endpoints_.size(); ++port) {
        const Connection *c = conns_[port].get();
        const Move &m = moves_[port];
        const bool up = sw_.port(port).linkUp && (m.pending || (c && c->helloReceived));
        w.boolean(up);
        w.u64(!up ? 0 : m.pending ? m.portGuid : c->peer.port_guid);
    }
    w.endSection();
    return w.take();
}

void Server::restoreState(std::span<const uint8_t> state, uint64_t graceNs) {
    StateReader r(state);
    if (!sw_.saves())
        throw std::runtime_error("this switch has no state to restore");
    // A state refused in its links leaves the switch as it was.
    StateWriter before;
    sw_.save(before);
    if (!sw_.load(r))
        throw std::runtime_error("the switch state was refused: " + r.error());
    r.enterSection(kTagLinks, "the switch's links");
    std::vector<Move> moves(endpoints_.size());
    const uint64_t t = now();
    for (unsigned port = 1; port < endpoints_.size() && r.ok(); ++port) {
        const bool up = r.boolean("a link's state");
        const uint64_t guid = r.u64();
        if (r.ok() && up != sw_.port(port).linkUp)
            r.fail("port " + std::to_string(port) + ": its link and its port state disagree");
        if (up)
            moves[port] = {
                .pending = true, .portGuid = guid, .sinceNs = t, .deadlineNs = t + graceNs};
    }
    r.leaveSection("the switch's links");
    if (r.ok() && !r.atEnd())
        r.fail("bytes after the switch's links");
    if (!r.ok()) {
        const std::vector<uint8_t> bytes = before.take();
        StateReader back(bytes);
        sw_.load(back);
        throw std::runtime_error("the switch state was refused: " + r.error());
    }
    moves_ = std::move(moves);
    for (unsigned port = 1; port < moves_.size(); ++port)
        if (moves_[port].pending)
            log("port %u: restored with its link up; kept for %" PRIu64 " ms for its peer", port,
                graceNs / 1'000'000);
}

std::string Server::saveCommand(std::string_view path) {
    if (path.empty())
        return "error: save needs a file";
    if (!sw_.saves())
        return "error: this switch has no state to save";
    const std::string file(path);
    const std::string tmp = file + ".tmp";
    const std::vector<uint8_t> state = saveState();
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char *>(state.data()),
                  static_cast<std::streamsize>(state.size()));
        if (!out.flush())
            return "error: cannot write " + tmp;
    }
    if (std::rename(tmp.c_str(), file.c_str()) != 0)
        return "error: cannot rename " + tmp + " to " + file;
    log("saved the switch's state to %s (%zu bytes)", file.c_str(), state.size());
    return "ok saved " + std::to_string(state.size()) + " bytes to " + file;
}

std::vector<uint8_t> readStateFile(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw std::runtime_error("cannot read " + path);
    std::vector<uint8_t> bytes;
    char buf[65536];
    while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
        bytes.insert(bytes.end(), buf, buf + in.gcount());
        if (bytes.size() > kMaxStateBytes)
            throw std::runtime_error(path + " is larger than a switch's state can be");
    }
    return bytes;
}

} // namespace pib::fabric
