// SPDX-License-Identifier: GPL-2.0-or-later
// Test facilities (docs/prm.md §10): faults the host injects so that a
// driver can be tested against failures that are hard to provoke. The host
// arms them with one line of words (parseInjection); the components that
// own each kind of event take them when it happens:
//   command OPCODE STATUS        the next command OPCODE fails with STATUS
//   wqe QPN STATUS [VENDOR_ERR]  QPN's next send WQE completes so
//   drop QPN [COUNT]             QPN's next COUNT packets are lost
//   corrupt QPN [COUNT]          ... leave with a bad ICRC
//   event EVENT [NUMBER]         an async event, at once
//   stop eq|cq N, resume eq|cq N the queue takes no entries meanwhile
//   fatal [REASON]               the device goes FATAL
//   clear                        disarms everything armed
// Everything armed is bounded: at most kMaxArmed of each kind.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

// Only the declarations: the whole of nlohmann/json.hpp costs each file
// that includes this one a second or two of compile time.
#include <nlohmann/json_fwd.hpp>

namespace pib {

struct Injection {
    enum class Kind { kCommand, kWqe, kDrop, kCorrupt, kEvent, kStop, kResume, kFatal, kClear };
    Kind kind = Kind::kClear;
    uint32_t number = 0; // opcode, QPN, EQN/CQN, or the event's object
    uint8_t status = 0;  // command or completion status; the event's type
    uint8_t vendorErr = 0;
    uint32_t count = 1; // packets
    bool cq = false;    // stop/resume: a CQ, not an EQ
    std::string reason; // fatal
};

// A number an injection line may give by name.
struct InjectionName {
    const char *name;
    uint8_t value;
};

// What `command OPCODE STATUS` names, which is the personality's: its
// commands (by name, from `opcodeOf`) and its command statuses (0 is
// success in both, and is refused).
struct CommandWords {
    std::optional<uint16_t> (*opcodeOf)(std::string_view name) = nullptr;
    std::span<const InjectionName> statuses;
};

// Parses one injection line; nullopt with the reason in `error`. Opcodes
// and statuses may also be given as numbers.
std::optional<Injection> parseInjection(std::string_view line, const CommandWords &commands,
                                        std::string *error);

// What is armed and not yet taken.
class ArmedInjections {
  public:
    static constexpr size_t kMaxArmed = 64;

    // False when kMaxArmed of its kind are armed already.
    bool arm(const Injection &injection);
    void clear();
    bool empty() const { return commands_.empty() && wqes_.empty() && packets_.empty(); }

    // The status the next command `opcode` fails with, if one is armed.
    std::optional<uint8_t> takeCommand(uint16_t opcode);
    // The completion armed for QP `qpn`'s next send WQE.
    std::optional<Injection> takeWqe(uint32_t qpn);
    enum class PacketFate { kSend, kDrop, kCorrupt };
    PacketFate takePacket(uint32_t qpn);

    nlohmann::ordered_json describe() const;

  private:
    std::vector<Injection> commands_, wqes_, packets_;
};

} // namespace pib
