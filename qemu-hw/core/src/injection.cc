// SPDX-License-Identifier: GPL-2.0-or-later
#include "injection.hh"

#include <algorithm>
#include <charconv>

#include <nlohmann/json.hpp>

#include "pib_hw.h"

namespace pib {

namespace {

using Name = InjectionName;

constexpr Name kCompletionStatuses[] = {
    {"LOC_LEN_ERR", PIB_WC_LOC_LEN_ERR},
    {"LOC_QP_OP_ERR", PIB_WC_LOC_QP_OP_ERR},
    {"LOC_PROT_ERR", PIB_WC_LOC_PROT_ERR},
    {"WR_FLUSH_ERR", PIB_WC_WR_FLUSH_ERR},
    {"BAD_RESP_ERR", PIB_WC_BAD_RESP_ERR},
    {"LOC_ACCESS_ERR", PIB_WC_LOC_ACCESS_ERR},
    {"REM_INV_REQ_ERR", PIB_WC_REM_INV_REQ_ERR},
    {"REM_ACCESS_ERR", PIB_WC_REM_ACCESS_ERR},
    {"REM_OP_ERR", PIB_WC_REM_OP_ERR},
    {"RETRY_EXC_ERR", PIB_WC_RETRY_EXC_ERR},
    {"RNR_RETRY_EXC_ERR", PIB_WC_RNR_RETRY_EXC_ERR},
    {"GENERAL_ERR", PIB_WC_GENERAL_ERR},
};

constexpr Name kEvents[] = {
    {"cq-err", PIB_ASYNC_CQ_ERR},
    {"qp-fatal", PIB_ASYNC_QP_FATAL},
    {"qp-req-err", PIB_ASYNC_QP_REQ_ERR},
    {"qp-access-err", PIB_ASYNC_QP_ACCESS_ERR},
    {"comm-est", PIB_ASYNC_COMM_EST},
    {"sq-drained", PIB_ASYNC_SQ_DRAINED},
    {"last-wqe-reached", PIB_ASYNC_QP_LAST_WQE_REACHED},
    {"srq-limit", PIB_ASYNC_SRQ_LIMIT},
    {"srq-err", PIB_ASYNC_SRQ_ERR},
    {"path-mig", PIB_ASYNC_PATH_MIG},
    {"path-mig-err", PIB_ASYNC_PATH_MIG_ERR},
    {"port-active", PIB_ASYNC_PORT_ACTIVE},
    {"port-err", PIB_ASYNC_PORT_ERR},
    {"lid-change", PIB_ASYNC_LID_CHANGE},
    {"pkey-change", PIB_ASYNC_PKEY_CHANGE},
    {"sm-change", PIB_ASYNC_SM_CHANGE},
    {"client-reregister", PIB_ASYNC_CLIENT_REREGISTER},
    {"gid-change", PIB_ASYNC_GID_CHANGE},
    {"device-fatal", PIB_ASYNC_DEVICE_FATAL},
};

std::string_view nextWord(std::string_view *line) {
    const size_t start = line->find_first_not_of(" \t");
    if (start == std::string_view::npos) {
        *line = {};
        return {};
    }
    line->remove_prefix(start);
    const size_t end = std::min(line->find_first_of(" \t"), line->size());
    const std::string_view word = line->substr(0, end);
    line->remove_prefix(end);
    return word;
}

// A number in decimal or 0x hex, at most `max`.
std::optional<uint64_t> number(std::string_view word, uint64_t max) {
    int base = 10;
    if (word.starts_with("0x") || word.starts_with("0X"))
        word.remove_prefix(2), base = 16;
    uint64_t value = 0;
    const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), value, base);
    if (word.empty() || ec != std::errc() || end != word.data() + word.size() || value > max)
        return std::nullopt;
    return value;
}

std::optional<uint8_t> named(std::string_view word, std::span<const Name> names) {
    for (const Name &n : names)
        if (word == n.name)
            return n.value;
    if (auto value = number(word, 0xff))
        return static_cast<uint8_t>(*value);
    return std::nullopt;
}

std::string choices(std::span<const Name> names) {
    std::string s;
    for (const Name &n : names)
        s += (s.empty() ? "" : ", ") + std::string(n.name);
    return s;
}

// A command's opcode: by its name on the personality, or a number.
std::optional<uint16_t> commandOpcode(std::string_view word, const CommandWords &commands) {
    if (commands.opcodeOf)
        if (const std::optional<uint16_t> named = commands.opcodeOf(word))
            return named;
    if (const auto n = number(word, 0xffff))
        return static_cast<uint16_t>(*n);
    return std::nullopt;
}

class Parser {
  public:
    Parser(std::string_view line, std::string *error) : line_(line), error_(error) {}

    std::string_view word() { return nextWord(&line_); }
    bool done() const { return line_.find_first_not_of(" \t") == std::string_view::npos; }
    std::string_view rest() const { return line_; }

    template <class T> std::optional<T> fail(const std::string &why) {
        *error_ = why;
        return std::nullopt;
    }

  private:
    std::string_view line_;
    std::string *error_;
};

std::optional<Injection> parsePacketFault(Parser &p, Injection in, std::string_view kind) {
    const auto qpn = number(p.word(), 0xffffff);
    if (!qpn)
        return p.fail<Injection>(std::string(kind) + " QPN [COUNT]: QPN is a number");
    in.number = static_cast<uint32_t>(*qpn);
    if (!p.done()) {
        const auto count = number(p.word(), 1'000'000);
        if (!count || *count == 0)
            return p.fail<Injection>(std::string(kind) + " QPN [COUNT]: COUNT is 1..1000000");
        in.count = static_cast<uint32_t>(*count);
    }
    return in;
}

} // namespace

std::optional<Injection> parseInjection(std::string_view line, const CommandWords &commands,
                                        std::string *error) {
    using Kind = Injection::Kind;
    Parser p(line, error);
    const std::string_view what = p.word();
    Injection in;
    if (what == "command") {
        in.kind = Kind::kCommand;
        const std::string_view op = p.word();
        const std::optional<uint16_t> opcode = commandOpcode(op, commands);
        const auto status = named(p.word(), commands.statuses);
        if (!opcode || !status || *status == 0)
            return p.fail<Injection>("command OPCODE STATUS: OPCODE a command's name or number, "
                                     "STATUS one of " +
                                     choices(commands.statuses) + " or a number");
        in.number = *opcode;
        in.status = *status;
    } else if (what == "wqe") {
        in.kind = Kind::kWqe;
        const auto qpn = number(p.word(), 0xffffff);
        const auto status = named(p.word(), kCompletionStatuses);
        if (!qpn || !status || *status == PIB_WC_SUCCESS)
            return p.fail<Injection>("wqe QPN STATUS [VENDOR_ERR]: STATUS one of " +
                                     choices(kCompletionStatuses) + " or a number");
        in.number = static_cast<uint32_t>(*qpn);
        in.status = *status;
        if (!p.done()) {
            const auto vendorErr = number(p.word(), 0xff);
            if (!vendorErr)
                return p.fail<Injection>("wqe QPN STATUS [VENDOR_ERR]: VENDOR_ERR is 0..255");
            in.vendorErr = static_cast<uint8_t>(*vendorErr);
        }
    } else if (what == "drop" || what == "corrupt") {
        in.kind = what == "drop" ? Kind::kDrop : Kind::kCorrupt;
        const std::optional<Injection> parsed = parsePacketFault(p, in, what);
        if (!parsed)
            return parsed;
        in = *parsed;
    } else if (what == "event") {
        in.kind = Kind::kEvent;
        const auto event = named(p.word(), kEvents);
        if (!event)
            return p.fail<Injection>("event EVENT [NUMBER]: EVENT one of " + choices(kEvents));
        in.status = *event;
        if (!p.done()) {
            const auto n = number(p.word(), UINT32_MAX);
            if (!n)
                return p.fail<Injection>("event EVENT [NUMBER]: NUMBER is a number");
            in.number = static_cast<uint32_t>(*n);
        }
    } else if (what == "stop" || what == "resume") {
        in.kind = what == "stop" ? Kind::kStop : Kind::kResume;
        const std::string_view queue = p.word();
        const auto n = number(p.word(), UINT32_MAX);
        if ((queue != "eq" && queue != "cq") || !n)
            return p.fail<Injection>(std::string(what) + " eq|cq N");
        in.cq = queue == "cq";
        in.number = static_cast<uint32_t>(*n);
    } else if (what == "fatal") {
        in.kind = Kind::kFatal;
        const size_t start = p.rest().find_first_not_of(" \t");
        in.reason =
            start == std::string_view::npos ? "injected" : std::string(p.rest().substr(start));
        return in;
    } else if (what == "clear") {
        in.kind = Kind::kClear;
    } else {
        return p.fail<Injection>("unknown injection '" + std::string(what) +
                                 "' (command, wqe, drop, corrupt, event, stop, resume, fatal, "
                                 "clear)");
    }
    if (!p.done())
        return p.fail<Injection>("unexpected '" + std::string(p.rest()) + "' at the end");
    return in;
}

bool ArmedInjections::arm(const Injection &in) {
    using Kind = Injection::Kind;
    std::vector<Injection> &list = in.kind == Kind::kCommand ? commands_
                                   : in.kind == Kind::kWqe   ? wqes_
                                                             : packets_;
    if (list.size() >= kMaxArmed)
        return false;
    list.push_back(in);
    return true;
}

void ArmedInjections::clear() {
    commands_.clear();
    wqes_.clear();
    packets_.clear();
}

std::optional<uint8_t> ArmedInjections::takeCommand(uint16_t opcode) {
    auto it = std::find_if(commands_.begin(), commands_.end(),
                           [&](const Injection &i) { return i.number == opcode; });
    if (it == commands_.end())
        return std::nullopt;
    const uint8_t status = it->status;
    commands_.erase(it);
    return status;
}

std::optional<Injection> ArmedInjections::takeWqe(uint32_t qpn) {
    auto it = std::find_if(wqes_.begin(), wqes_.end(),
                           [&](const Injection &i) { return i.number == qpn; });
    if (it == wqes_.end())
        return std::nullopt;
    Injection taken = *it;
    wqes_.erase(it);
    return taken;
}

ArmedInjections::PacketFate ArmedInjections::takePacket(uint32_t qpn) {
    auto it = std::find_if(packets_.begin(), packets_.end(),
                           [&](const Injection &i) { return i.number == qpn; });
    if (it == packets_.end())
        return PacketFate::kSend;
    const PacketFate fate =
        it->kind == Injection::Kind::kDrop ? PacketFate::kDrop : PacketFate::kCorrupt;
    if (--it->count == 0)
        packets_.erase(it);
    return fate;
}

nlohmann::ordered_json ArmedInjections::describe() const {
    nlohmann::ordered_json j = nlohmann::ordered_json::array();
    for (const Injection &i : commands_)
        j.push_back({{"command", i.number}, {"status", i.status}});
    for (const Injection &i : wqes_)
        j.push_back({{"wqe_of_qp", i.number}, {"status", i.status}, {"vendor_err", i.vendorErr}});
    for (const Injection &i : packets_)
        j.push_back(
            {{i.kind == Injection::Kind::kDrop ? "drop_from_qp" : "corrupt_from_qp", i.number},
             {"packets", i.count}});
    return j;
}

} // namespace pib
