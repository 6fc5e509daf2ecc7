// SPDX-License-Identifier: GPL-2.0-or-later
// The host's view of the device (docs/user-guide.md, "Inspecting a
// device"): its state, ports, queues, QPs and memory regions as QEMU's
// `info pib` and the x-pib-query QMP command show them. Read-only: it
// looks at the components' state and never changes it.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

// Only the declarations: the whole of nlohmann/json.hpp costs each file
// that includes this one a second or two of compile time.
#include <nlohmann/json_fwd.hpp>

#include "front_end.hh"
#include "injection.hh"
#include "link.hh"
#include "object_tables.hh"
#include "outstanding_memory.hh"
#include "ports.hh"

namespace pib {

using Json = nlohmann::ordered_json;

class Inspector {
  public:
    struct Sources {
        const pib_core_config &config;
        const ObjectTables &objects;
        Ports &ports;
        const std::vector<std::unique_ptr<Link>> &links;
        const FrontEnd &front;
        const ArmedInjections &injections;
        const OutstandingMemory &outstanding;
        const bool &fatal;
    };
    explicit Inspector(Sources sources) : s_(sources) {}

    // `what` is empty for the whole device, or one object: "port N",
    // "eq N", "cq N", "qp N", "srq N" or "mr KEY" (numbers in decimal or
    // 0x hex). Null with the reason in `error` when there is no such
    // object.
    std::optional<Json> inspect(std::string_view what, std::string *error) const;

  private:
    Json device() const;
    Json port(unsigned number) const;
    Json eq(const EqView &eq) const;
    Json cq(uint32_t cqn, const CompletionQueue &cq) const;
    Json qpSummary(uint32_t qpn, const QueuePair &qp) const;
    Json qp(uint32_t qpn, const QueuePair &qp) const;
    Json srq(uint32_t srqn, const SharedReceiveQueue &srq) const;
    Json mr(uint32_t index, const MemoryRegion &mr) const;
    Json mw(const MemoryWindow &mw) const;

    Sources s_;
};

// The monitor's text form of an inspection: a line of `name value` pairs
// per object, nested objects indented under it.
std::string inspectionText(const Json &j);

} // namespace pib
