// SPDX-License-Identifier: GPL-2.0-or-later
// A device that moves (docs/wire.md): its VM live-migrates, or a snapshot
// of it is restored, and a new QEMU process takes its cable. The device
// says MOVING on the old connection and HELLO with PIB_WIRE_HELLO_RESUMES
// on the new one; in between the port keeps its link, so that the SM sees
// no change and the LIDs stay. A move that does not end so within the
// grace period is a pulled cable.
#include <cinttypes>

#include "server.hh"
#include "server_internal.hh"

namespace pib::fabric {

void Server::deviceMoving(unsigned port) {
    Connection *c = conns_[port].get();
    // Only a trained link to a device has anything to keep: a switch (or
    // a port that dials one) does not move.
    if (!c->helloReceived || c->peer.node_type != PIB_WIRE_NODE_CA || dials(port))
        return;
    c->moved = true;
    if (pumps_ && c->rings) // its ring is not read while it moves
        pumps_->hold(port, true);
    const uint64_t t = now();
    moves_[port] = {.pending = true,
                    .portGuid = c->peer.port_guid,
                    .sinceNs = t,
                    .deadlineNs = t + moveGraceNs_};
    log("port %u: its device moves; the link is kept for %" PRIu64 " ms", port,
        moveGraceNs_ / 1'000'000);
}

// A HELLO on the port while its device moves: true when it is the device
// coming back, whose link goes on as it was. Any other HELLO ends the move
// (the link goes down, and that HELLO trains a new one).
bool Server::helloContinuesMove(unsigned port, const pib_wire_hello &hello) {
    Move &m = moves_[port];
    if (!m.pending)
        return false;
    if (!(hello.flags & PIB_WIRE_HELLO_RESUMES) || hello.port_guid != m.portGuid) {
        endMove(port, "was not the one that said HELLO");
        return false;
    }
    m.pending = false;
    conns_[port]->helloReceived = true;
    log("port %u: its peer is back after %" PRIu64 " ms; the link was kept", port,
        (now() - m.sinceNs) / 1'000'000);
    return true;
}

void Server::endMove(unsigned port, const char *why) {
    moves_[port].pending = false;
    log("port %u: link down (the device that moved %s)", port, why);
    for (auto &t : sw_.linkChanged(port, false))
        sendPacket(t.port, t.packet);
}

// Ends the moves whose grace ran out; returns how long the loop may sleep
// until the next one does, in milliseconds.
int Server::serviceMoves() {
    const uint64_t t = now();
    uint64_t next = t + 1'000'000'000;
    for (unsigned port = 1; port < moves_.size(); ++port) {
        const Move &m = moves_[port];
        if (!m.pending)
            continue;
        if (m.deadlineNs <= t) {
            if (const Connection *c = conns_[port].get(); c && c->moved)
                detach(port);
            endMove(port, "did not come back in time");
            continue;
        }
        next = std::min(next, m.deadlineNs);
    }
    return next <= t ? 0 : static_cast<int>((next - t + 999'999) / 1'000'000);
}

// For the control socket's "ports": empty unless the port's device moves.
std::string Server::moveStatus(unsigned port) const {
    const Move &m = moves_[port];
    if (!m.pending)
        return "";
    const uint64_t t = now();
    return ", its device moves (" + std::to_string((t - m.sinceNs) / 1'000'000) + " ms ago, " +
           std::to_string((m.deadlineNs - t) / 1'000'000) + " ms of grace left)";
}

} // namespace pib::fabric
