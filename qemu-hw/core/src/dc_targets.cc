// SPDX-License-Identifier: GPL-2.0-or-later
// DC's targets (docs/mlx5.md §15): a DCT takes requests from any DCI that
// knows its key. It keeps a connection for each DCI that reaches it, a
// hidden RC responder (isDcConnection) that the DCI's first packet opens
// (its DCETH says CONNECT) and a DISCONNECT closes; the responder then
// treats the DCI's requests as an RC QP's, with the DCT's SRQ, CQ, PD and
// access. Connections are the device's to bound: a full table takes a new
// one in place of the one idle longest.
#include "data_path.hh"

#include <utility>

#include "addressing.hh"
#include "limits.hh"
#include "trace.hh"

namespace pib {

// A DC request or DISCONNECT for DCT `dct` on `port`, whose P_Key passed.
void DataPath::deliverToDct(unsigned port, QueuePair &dct, const iba::Packet &packet) {
    const iba::Dceth &h = *packet.dceth; // every DC request has one (iba::Layout)
    const DcPeer peer{dct.number, h.dci, packet.lrh.slid, static_cast<uint8_t>(port)};
    if (dct.attr.qp_state != PIB_QPS_RTR) {
        trace::err_dc_dropped(host_, dct.number, h.dci, packet.lrh.slid, "its DCT was drained");
        return;
    }
    if (h.key != dct.dc.key) {
        ++dct.dc.keyViolations;
        if (std::exchange(dct.dc.keyViolationArmed, false))
            events_.postAsyncEvent(kAsyncDctKeyViolation, dct.number);
        trace::err_dc_dropped(host_, dct.number, h.dci, packet.lrh.slid, "wrong DC access key");
        if (PortState *p = ports_.find(port))
            ++p->transport.invalid_requests;
        return;
    }
    if (packet.bth.opcode == iba::kDcDisconnect) {
        // Only the connection it names: a late one of an earlier
        // connection must not close the DCI's new one.
        const auto it = objects_.dcConnections.byPeer.find(peer);
        if (it != objects_.dcConnections.byPeer.end() &&
            objects_.dcConnections.table.find(it->second)->dc.serial == h.serial)
            closeDcConnection(peer, "the DCI disconnected");
        return;
    }
    QueuePair *c = dcConnection(dct, peer, packet);
    if (!c)
        return;
    c->dc.lastActive = host_.clockNs();
    responder_.onRequest(*c, packet);
}

// The connection `packet` goes to: the one `peer` has, or one its CONNECT
// opens. The DCETH's serial names the DCI's connection: a packet of
// another one is of an earlier connection of the DCI (late, or the DCI
// was reset or made anew since) and its CONNECT starts over, or a
// packet of a connection the DCT no longer has. Of the same connection,
// a CONNECT beyond the PSN expected comes from a DCI that left (its
// DISCONNECT lost) and sent elsewhere since, and starts over too; one at
// that PSN or before it is in sequence, or a duplicate (a DCI's resends
// say CONNECT too), and goes to the connection as it is.
QueuePair *DataPath::dcConnection(QueuePair &dct, const DcPeer &peer, const iba::Packet &packet) {
    DcConnections &dc = objects_.dcConnections;
    const iba::Dceth &h = *packet.dceth;
    const bool connect = h.flags & iba::Dceth::kConnect;
    if (const auto it = dc.byPeer.find(peer); it != dc.byPeer.end()) {
        QueuePair &c = *dc.table.find(it->second);
        const bool same = c.dc.serial == h.serial;
        const bool failed = c.attr.qp_state != PIB_QPS_RTS;
        if (same && (!connect || (!failed && psnDiff(packet.bth.psn, c.resp.expectedPsn) <= 0))) {
            if (!failed)
                return &c;
            trace::err_dc_dropped(host_, dct.number, peer.dci, peer.slid,
                                  "its connection failed; the DCI must connect again");
            return nullptr;
        }
        if (!connect) {
            trace::err_dc_dropped(host_, dct.number, peer.dci, peer.slid,
                                  "of a connection of the DCI's that the DCT no longer has");
            return nullptr;
        }
        closeDcConnection(peer, "the DCI connected again");
    }
    if (!connect) {
        trace::err_dc_dropped(host_, dct.number, peer.dci, peer.slid,
                              "no connection, and it does not say CONNECT");
        return nullptr;
    }
    return openDcConnection(dct, peer, packet);
}

// The responder's reply path to `packet`'s sender: its LID and, when it
// came with a GRH, its GID, from the port GUID it was sent to.
static pib_av replyPath(const PortState &p, const iba::Packet &packet) {
    pib_av av{};
    av.dlid = packet.lrh.slid;
    av.sl = packet.lrh.sl;
    av.src_path_bits = static_cast<uint8_t>(packet.lrh.dlid & ~iba::lidMask(p.info.lmc));
    if (packet.grh) {
        av.flags = PIB_AV_GRH;
        av.hop_limit = 0xff;
        av.traffic_class = packet.grh->tclass;
        av.flow_label = packet.grh->flowLabel;
        std::copy(packet.grh->sgid.begin(), packet.grh->sgid.end(), av.dgid);
        uint64_t guid = 0;
        for (int i = 8; i < 16; ++i)
            guid = guid << 8 | packet.grh->dgid[i];
        for (unsigned i = 0; i < p.guids.size(); ++i)
            if (p.guids[i] == guid)
                av.sgid_index = static_cast<uint8_t>(i);
    }
    return av;
}

// A new connection of `dct` for `peer`, expecting `packet`'s PSN.
QueuePair *DataPath::openDcConnection(QueuePair &dct, const DcPeer &peer,
                                      const iba::Packet &packet) {
    DcConnections &dc = objects_.dcConnections;
    if (dc.table.size() >= dc.table.capacity() && !closeIdlestDcConnection()) {
        trace::err_dc_dropped(host_, dct.number, peer.dci, peer.slid,
                              "every DC connection of the device is busy");
        return nullptr;
    }
    QueuePair *c =
        addDcConnection(dct, peer, replyPath(ports_.at(peer.port), packet), packet.bth.psn);
    if (c) {
        c->dc.serial = packet.dceth->serial;
        trace::dc_opened(host_, dct.number, c->number, peer.dci, peer.slid, packet.bth.psn);
    }
    return c;
}

// A connection of `dct` for `peer`, answering by `path`, expecting `psn`:
// an RC responder in RTS with the DCT's SRQ, CQ, PD, access, path MTU
// and Q counter. nullptr when the table is full.
QueuePair *DataPath::addDcConnection(QueuePair &dct, const DcPeer &peer, const pib_av &path,
                                     uint32_t psn) {
    auto made = std::make_unique<QueuePair>();
    QueuePair &c = *made;
    c.ctx.type = PIB_QPT_RC;
    c.ctx.flags = PIB_QP_USE_SRQ;
    c.ctx.pdn = dct.ctx.pdn;
    c.ctx.srqn = dct.ctx.srqn;
    c.ctx.recv_cqn = c.ctx.send_cqn = dct.ctx.recv_cqn;
    c.attr = dct.attr;
    c.attr.qp_state = PIB_QPS_RTS;
    c.attr.rq_psn = psn;
    c.attr.dest_qp_num = peer.dci;
    c.attr.av = path;
    c.resp.expectedPsn = psn;
    c.resp.established = true; // a DCT raises no COMM_EST
    c.dc.dct = dct.number;
    c.dc.lastActive = host_.clockNs();
    c.counterSet = dct.counterSet; // the DCT holds it, and outlives its connections
    DcConnections &dc = objects_.dcConnections;
    const std::optional<uint32_t> number = dc.table.insert(std::move(made));
    if (!number)
        return nullptr;
    c.number = *number;
    dc.byPeer[peer] = c.number;
    return &c;
}

// Closes the connection idle longest, if it is idle kDcIdleNs or more:
// false when every one is busier than that.
bool DataPath::closeIdlestDcConnection() {
    DcConnections &dc = objects_.dcConnections;
    const QueuePair *idlest = nullptr;
    dc.table.forEach([&](uint32_t, const QueuePair &c) {
        if (!idlest || c.dc.lastActive < idlest->dc.lastActive)
            idlest = &c;
    });
    if (!idlest || host_.clockNs() - idlest->dc.lastActive < limits::kDcIdleNs)
        return false;
    for (const auto &[peer, number] : dc.byPeer)
        if (number == idlest->number) {
            closeDcConnection(peer, "idle, its place taken by a new one");
            return true;
        }
    return false;
}

// `peer`'s connection goes, if it has one: the receive WQE it claimed
// completes flushed, and nothing it owed is sent.
void DataPath::closeDcConnection(const DcPeer &peer, const char *why) {
    DcConnections &dc = objects_.dcConnections;
    const auto it = dc.byPeer.find(peer);
    if (it == dc.byPeer.end())
        return;
    const uint32_t number = it->second;
    dc.byPeer.erase(it);
    if (QueuePair *c = dc.table.find(number)) {
        forgetQp(*c);
        trace::dc_closed(host_, c->dc.dct, number, why);
        dc.table.erase(number);
    }
}

void DataPath::closeDcConnections(uint32_t dct, const char *why) {
    DcConnections &dc = objects_.dcConnections;
    for (auto it = dc.byPeer.begin(); it != dc.byPeer.end();) {
        const DcPeer peer = (it++)->first; // closing erases it
        if (peer.dct == dct)
            closeDcConnection(peer, why);
    }
}

size_t DataPath::dcConnectionsOf(uint32_t dct) const {
    size_t n = 0;
    for (const auto &entry : objects_.dcConnections.byPeer)
        n += entry.first.dct == dct;
    return n;
}

// Each connection: its peer, its reply path and PSN at opening, then its
// responder (transport_state.cc).
void DataPath::saveDcConnections(uint32_t dct, StateWriter &w) const {
    const DcConnections &dc = objects_.dcConnections;
    w.u32(static_cast<uint32_t>(dcConnectionsOf(dct)));
    for (const auto &[peer, number] : dc.byPeer) {
        if (peer.dct != dct)
            continue;
        const QueuePair &c = *dc.table.find(number);
        w.u32(peer.dci);
        w.u16(peer.slid);
        w.u8(peer.port);
        w.record(c.attr.av);
        w.u32(c.attr.rq_psn);
        w.boolean(c.attr.qp_state == PIB_QPS_RTS);
        saveTransport(c, w);
    }
}

// What saveDcConnections() wrote, each connection checked as a packet
// that opens one is, and its responder as any loaded QP's.
void DataPath::loadDcConnections(QueuePair &dct, StateReader &r) {
    DcConnections &dc = objects_.dcConnections;
    const uint32_t count = r.count(dc.table.capacity() - dc.table.size(),
                                   4 + 2 + 1 + sizeof(pib_av) + 4 + 1, "DC connections");
    for (uint32_t i = 0; i < count && r.ok(); ++i) {
        DcPeer peer{dct.number, r.u32(), 0, 0};
        peer.slid = r.u16();
        peer.port = r.u8();
        pib_av path;
        r.record(path, "a DC connection's path");
        const uint32_t psn = r.u32();
        const bool healthy = r.boolean("a DC connection in RTS");
        if (!r.ok())
            return;
        if (peer.dci > 0xffffff || psn > 0xffffff || peer.port != dct.attr.port_num ||
            dc.byPeer.contains(peer)) {
            r.fail("DCT " + std::to_string(dct.number) +
                   ": a DC connection of no DCI, another port, or twice");
            return;
        }
        QueuePair &c = *addDcConnection(dct, peer, path, psn); // room: counted above
        if (!healthy)
            c.attr.qp_state = PIB_QPS_ERR;
        loadTransport(c, r);
    }
}

} // namespace pib
