// SPDX-License-Identifier: GPL-2.0-or-later
#include "inspect.hh"

#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "connected.hh"

namespace pib {

namespace {

const char *qpStateName(uint8_t state) {
    static constexpr const char *kNames[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
    return state < std::size(kNames) ? kNames[state] : "?";
}

const char *qpTypeName(uint8_t type) {
    static constexpr const char *kNames[] = {"SMI", "GSI", "RC", "UC", "UD", "XRC_INI", "XRC_TGT"};
    return type < std::size(kNames) ? kNames[type] : "?";
}

const char *portStateName(uint8_t state) {
    static constexpr const char *kNames[] = {"NOP", "DOWN", "INIT", "ARMED", "ACTIVE"};
    return state < std::size(kNames) ? kNames[state] : "?";
}

const char *physStateName(uint8_t state) {
    static constexpr const char *kNames[] = {"NOP",      "SLEEP",    "POLLING",
                                             "DISABLED", "TRAINING", "LINKUP"};
    return state < std::size(kNames) ? kNames[state] : "?";
}

const char *armName(uint8_t arm) {
    return arm == PIB_CQ_ARM_NEXT ? "next" : arm == PIB_CQ_ARM_SOLICITED ? "solicited" : "no";
}

Json queue(uint32_t producer, uint32_t consumer, uint32_t size) {
    return Json{{"pi", producer}, {"ci", consumer}, {"size", size}};
}

// "qp 12" -> {"qp", 12}; numbers in decimal or 0x hex.
bool splitObject(std::string_view what, std::string_view *kind, uint64_t *number) {
    const size_t space = what.find(' ');
    if (space == std::string_view::npos)
        return false;
    *kind = what.substr(0, space);
    std::string_view digits = what.substr(what.find_first_not_of(' ', space));
    int base = 10;
    if (digits.starts_with("0x") || digits.starts_with("0X"))
        digits.remove_prefix(2), base = 16;
    const auto [end, ec] =
        std::from_chars(digits.data(), digits.data() + digits.size(), *number, base);
    return ec == std::errc() && end == digits.data() + digits.size() && !digits.empty();
}

} // namespace

std::optional<Json> Inspector::inspect(std::string_view what, std::string *error) const {
    while (!what.empty() && what.front() == ' ')
        what.remove_prefix(1);
    while (!what.empty() && what.back() == ' ')
        what.remove_suffix(1);
    if (what.empty())
        return device();
    std::string_view kind;
    uint64_t n = 0;
    if (!splitObject(what, &kind, &n)) {
        *error =
            "expected OBJECT NUMBER (port, eq, cq, qp, srq, mr), got '" + std::string(what) + "'";
        return std::nullopt;
    }
    const ObjectTables &o = s_.objects;
    std::optional<Json> found;
    if (kind == "port" && n >= 1 && n <= s_.config.num_ports)
        found = port(static_cast<unsigned>(n));
    else if (kind == "eq" && n <= UINT32_MAX && s_.front.findEq(static_cast<uint32_t>(n)))
        found = eq(*s_.front.findEq(static_cast<uint32_t>(n)));
    else if (kind == "cq" && o.cqs.find(n))
        found = cq(static_cast<uint32_t>(n), *o.cqs.find(n));
    else if (kind == "qp" && n <= UINT32_MAX && o.findQp(static_cast<uint32_t>(n)))
        found = qp(static_cast<uint32_t>(n), *o.findQp(static_cast<uint32_t>(n)));
    else if (kind == "srq" && o.srqs.find(n))
        found = srq(static_cast<uint32_t>(n), *o.srqs.find(n));
    else if (kind == "mr" && n <= UINT32_MAX &&
             o.mrs.find(PIB_KEY_INDEX(static_cast<uint32_t>(n))) &&
             o.mrs.find(PIB_KEY_INDEX(static_cast<uint32_t>(n)))->key == n)
        found = mr(PIB_KEY_INDEX(static_cast<uint32_t>(n)), *o.mrs.find(PIB_KEY_INDEX(n)));
    else if (kind == "mw" && n <= UINT32_MAX &&
             o.mws.find(PIB_KEY_INDEX(static_cast<uint32_t>(n))) &&
             o.mws.find(PIB_KEY_INDEX(static_cast<uint32_t>(n)))->key == n)
        found = mw(*o.mws.find(PIB_KEY_INDEX(n)));
    if (!found)
        *error = "no " + std::string(kind) + " " + std::to_string(n);
    return found;
}

Json Inspector::device() const {
    const ObjectTables &o = s_.objects;
    Json j;
    j["state"] = s_.fatal ? "fatal" : s_.front.initialized() ? "running" : "not initialised";
    j["node_guid"] = s_.config.node_guid;
    Json &ports = j["ports"] = Json::array();
    for (unsigned p = 1; p <= s_.config.num_ports; ++p)
        ports.push_back(port(p));
    Json eqs = Json::array();
    s_.front.forEachEq([&](const EqView &e) { eqs.push_back(eq(e)); });
    j["objects"] = {{"uars", s_.front.doorbellPages()},
                    {"pds", o.pds.size()},
                    {"eqs", eqs.size()},
                    {"cqs", o.cqs.size()},
                    {"qps", o.qps.size()},
                    {"srqs", o.srqs.size()},
                    {"mrs", o.mrs.size()},
                    {"mcast_groups", o.multicast.groups()}};
    j["eqs"] = std::move(eqs);
    Json &cqs = j["cqs"] = Json::array();
    o.cqs.forEach([&](uint32_t n, const CompletionQueue &c) { cqs.push_back(cq(n, c)); });
    Json &qps = j["qps"] = Json::array();
    for (uint32_t n = 0; n < o.specialQps.size(); ++n)
        if (o.specialQps[n])
            qps.push_back(qpSummary(n, *o.specialQps[n]));
    o.qps.forEach([&](uint32_t n, const QueuePair &q) { qps.push_back(qpSummary(n, q)); });
    Json &srqs = j["srqs"] = Json::array();
    o.srqs.forEach([&](uint32_t n, const SharedReceiveQueue &q) { srqs.push_back(srq(n, q)); });
    Json &mrs = j["mrs"] = Json::array();
    o.mrs.forEach([&](uint32_t n, const MemoryRegion &m) { mrs.push_back(mr(n, m)); });
    j["outstanding_wqe_bytes"] = s_.outstanding.held();
    j["injections"] = s_.injections.describe();
    return j;
}

Json Inspector::port(unsigned number) const {
    const PortState &p = s_.ports.at(number);
    const Link &link = *s_.links[number - 1];
    Json j{{"port", number},
           {"link", link.up() ? "up" : "down"},
           {"state", portStateName(p.info.state)},
           {"phys_state", physStateName(p.info.phys_state)},
           {"lid", p.info.lid},
           {"sm_lid", p.info.sm_lid},
           {"lmc", p.info.lmc},
           {"active_mtu", mtuBytes(p.info.active_mtu)},
           {"port_guid", p.info.port_guid},
           {"queue_full", p.txFull},
           {"qps_waiting", p.waiting.size()}};
    j["counters"] = {{"xmit_packets", p.xmitPackets},
                     {"xmit_words", p.xmitWords},
                     {"rcv_packets", p.rcvPackets},
                     {"rcv_words", p.rcvWords},
                     {"rcv_errors", p.rcvErrors},
                     {"bad_pkey", p.info.bad_pkey_cntr},
                     {"qkey_violations", p.info.qkey_viol_cntr},
                     {"frames_dropped", link.framesDropped()},
                     {"frames_built_in_ring", link.framesBuiltInRing()},
                     {"frames_read_in_ring", link.framesReadInRing()}};
    if (const wire::PacketCapture *c = link.capture())
        j["capture"] = {{"file", c->path()}, {"packets", c->packets()}, {"stopped", c->finished()}};
    return j;
}

Json Inspector::eq(const EqView &e) const {
    return Json{{"eqn", e.eqn},        {"async", e.async},
                {"vector", e.vector},  {"queue", queue(e.producer, e.consumer, e.size)},
                {"armed", e.armed},    {"overrun", e.overrun},
                {"stopped", e.stopped}};
}

// A ConnectX user context's object says whose it is (docs/mlx5.md §16);
// the kernel's and every pib-hca object say nothing.
static void withOwner(Json &j, Owner owner) {
    if (owner)
        j["uid"] = owner;
}

Json Inspector::cq(uint32_t cqn, const CompletionQueue &c) const {
    Json j{{"cqn", cqn},
           {"eqn", c.ctx.eqn},
           {"queue", queue(c.producer, c.consumer, 1u << c.ctx.log_size)},
           {"armed", armName(c.arm)},
           {"moderation", Json{{"count", c.ctx.moderation_count},
                               {"period_us", c.ctx.moderation_period},
                               {"held", c.heldCqes}}},
           {"overrun", c.overrun},
           {"stopped", c.stopped}};
    withOwner(j, c.owner);
    return j;
}

Json Inspector::qpSummary(uint32_t qpn, const QueuePair &q) const {
    const bool srq = (q.ctx.flags & PIB_QP_USE_SRQ) != 0;
    Json j{{"qpn", qpn},
           {"type", qpTypeName(q.ctx.type)},
           {"state", qpStateName(q.attr.qp_state)},
           {"port", sendPort(q)},
           {"send_cq", q.ctx.send_cqn},
           {"recv_cq", q.ctx.recv_cqn},
           {"sq", queue(q.sq.producer, q.sq.consumer, 1u << q.ctx.sq_log_wqe_count)}};
    if (srq)
        j["srq"] = q.ctx.srqn;
    else if (hasReceiveSide(q.ctx.type))
        j["rq"] = queue(q.rq.producer, q.rq.consumer, 1u << q.ctx.rq_log_wqe_count);
    if (q.ctx.type == PIB_QPT_XRC_TGT)
        j["xrcd"] = q.ctx.xrcdn;
    withOwner(j, q.owner);
    return j;
}

Json Inspector::qp(uint32_t qpn, const QueuePair &q) const {
    Json j = qpSummary(qpn, q);
    const pib_qp_attr &a = q.attr;
    j["pd"] = q.ctx.pdn;
    j["pkey_index"] = a.pkey_index;
    if (isDatagramType(q.ctx.type)) {
        j["qkey"] = a.qkey;
        j["next_psn"] = q.nextPsn;
        return j;
    }
    j["path"] = {{"dlid", a.av.dlid},
                 {"dest_qpn", a.dest_qp_num},
                 {"mtu", mtuBytes(a.path_mtu)},
                 {"sl", a.av.sl},
                 {"timeout", a.timeout},
                 {"retry_cnt", a.retry_cnt},
                 {"rnr_retry", a.rnr_retry},
                 {"min_rnr_timer", a.min_rnr_timer},
                 {"max_rd_atomic", a.max_rd_atomic},
                 {"max_dest_rd_atomic", a.max_dest_rd_atomic}};
    const RequesterState &r = q.req;
    const uint32_t mtu = mtuBytes(a.path_mtu);
    j["requester"] = {{"next_psn", r.psn},
                      {"unacked_psn", r.unackedPsn},
                      {"in_flight", static_cast<uint32_t>(psnDiff(r.psn, r.unackedPsn))},
                      {"window", q.ctx.type == PIB_QPT_RC ? sendWindowPackets(mtu) : 0},
                      {"wqes_outstanding", r.outstanding.size()},
                      {"reads_in_flight", r.readsInFlight},
                      {"retries_left", r.retriesLeft},
                      {"rnr_retries_left", r.rnrRetriesLeft},
                      {"ack_timer", r.ackDeadline != 0},
                      {"rnr_wait", r.rnrDeadline != 0}};
    const ResponderState &p = q.resp;
    static constexpr const char *kIn[] = {"none", "send", "write"};
    j["responder"] = {{"expected_psn", p.expectedPsn},
                      {"msn", p.msn},
                      {"nak_sent", p.nakSent},
                      {"in_message", kIn[static_cast<unsigned>(p.in)]},
                      {"replies_owed", p.replies.size()},
                      {"replay_entries", p.replay.size()}};
    return j;
}

Json Inspector::srq(uint32_t srqn, const SharedReceiveQueue &q) const {
    Json j{{"srqn", srqn},
           {"pd", q.ctx.pdn},
           {"queue", queue(q.producer, q.consumer, 1u << q.ctx.log_wqe_count)},
           {"limit", q.ctx.limit}};
    if (q.isXrc()) {
        j["xrcd"] = q.ctx.xrcdn;
        j["cq"] = q.ctx.cqn;
    }
    withOwner(j, q.owner);
    return j;
}

Json Inspector::mr(uint32_t, const MemoryRegion &m) const {
    Json j{{"key", m.key},           {"pd", m.ctx.pdn},
           {"access", m.ctx.access}, {"iova", m.ctx.iova},
           {"length", m.ctx.length}, {"physical", (m.ctx.flags & PIB_MR_PHYSICAL) != 0},
           {"valid", m.valid},       {"remote_invalidate", m.fastReg() && m.remoteInvalidate},
           {"umr_qp", m.umrQpOwned}};
    if (m.indirect)
        j["indirect"] = {{"entries", m.indirect->entries.size()},
                         {"repeats", m.indirect->repeats},
                         {"table", m.indirect->tableEntries}};
    if (m.ksm)
        j["ksm"] = {{"span", uint64_t{1} << m.ctx.log_page_size},
                    {"entries", m.ownPages.size() / ksm_entry::kWords},
                    {"table", m.ctx.mtt_count / ksm_entry::kWords}};
    if (m.pagedEntries)
        j["on_demand"] = true;
    if (m.implicit())
        j["implicit"] = {{"span", uint64_t{1} << m.ctx.log_page_size},
                         {"children", m.children.size()}};
    if (m.ctx.parent_key)
        j["parent"] = m.ctx.parent_key;
    withOwner(j, m.owner);
    return j;
}

Json Inspector::mw(const MemoryWindow &w) const {
    const pib_mw_context &c = w.ctx;
    Json j{{"key", w.key}, {"pd", c.pdn}, {"type", c.type}, {"bound", c.bound != 0}};
    if (c.bound)
        j.update({{"region", c.mr_key},
                  {"iova", c.addr},
                  {"length", c.length},
                  {"access", c.access},
                  {"qp", c.qpn}});
    return j;
}

namespace {

// Keys whose numbers read better in hex.
bool hexKey(const std::string &key) {
    return key.ends_with("guid") || key == "key" || key == "iova" || key == "access" ||
           key == "qkey" || key == "region";
}

std::string scalar(const std::string &key, const Json &v) {
    if (v.is_string())
        return v.get<std::string>();
    if (v.is_number_unsigned() && hexKey(key)) {
        char buf[24];
        std::snprintf(buf, sizeof(buf), "0x%" PRIx64, v.get<uint64_t>());
        return buf;
    }
    return v.dump();
}

// A small group of numbers ("sq pi 4 ci 4 size 64") stays on its
// object's line.
bool smallGroup(const Json &v) {
    return v.is_object() && v.size() <= 4 &&
           std::all_of(v.begin(), v.end(), [](const Json &x) { return x.is_primitive(); });
}

void renderText(const Json &j, const std::string &indent, std::string *out) {
    std::string line;
    for (const auto &[key, v] : j.items()) {
        if (smallGroup(v)) {
            std::string group;
            for (const auto &[k, x] : v.items())
                group += (group.empty() ? "" : " ") + k + " " + scalar(k, x);
            line += (line.empty() ? "" : "  ") + key + " " + group;
        } else if (v.is_primitive()) {
            line += (line.empty() ? "" : "  ") + key + " " + scalar(key, v);
        }
    }
    if (!line.empty())
        *out += indent + line + "\n";
    for (const auto &[key, v] : j.items()) {
        if (v.is_array()) {
            *out += indent + key + (v.empty() ? ": none\n" : ":\n");
            for (const Json &item : v)
                renderText(item, indent + "  ", out);
        } else if (v.is_object() && !smallGroup(v)) {
            *out += indent + key + ":\n";
            renderText(v, indent + "  ", out);
        }
    }
}

} // namespace

std::string inspectionText(const Json &j) {
    std::string out;
    renderText(j, "", &out);
    return out;
}

} // namespace pib
