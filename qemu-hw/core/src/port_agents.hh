// SPDX-License-Identifier: GPL-2.0-or-later
// The port's own management agents behind PIB_CMD_MAD_IFC: the SMA (IBA
// 14.2.5) and the PMA (IBA 16.1), the traps the SMA sends, and the port
// state that follows the physical link. Sets raise the IB events the
// kernel relies on.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "event_writer.hh"
#include "host.hh"
#include "mad.hh"
#include "packet.hh"
#include "pib_core.h"
#include "ports.hh"
#include "smp.hh"

namespace pib {

// How the agents reach the fabric: a packet from the port's QP0 (the data
// path sends it); and what they tell the data path: the port is ACTIVE
// again.
class SubnetSender {
  public:
    virtual void sendSubnetPacket(unsigned port, iba::Packet &packet) = 0;
    // The port became ACTIVE again: what its QPs had in flight while it
    // was not went nowhere (DataPath::resendWhatWasLost says so at once).
    virtual void portActive(unsigned port) = 0;

  protected:
    ~SubnetSender() = default;
};

class PortAgents {
  public:
    PortAgents(const pib_core_config &config, const Host &host, Ports &ports, EventWriter &events,
               SubnetSender &sender)
        : config_(config), host_(host), ports_(ports), events_(events), sender_(sender) {}

    // What became of a MAD the driver handed the agents.
    enum class MadOutcome {
        kAnswered, // the MAD is now the response to send back
        kNotOurs,  // no agent of the device takes it (SMInfo, other classes)
        kDropped,  // an SMP with a bad M_Key: dropped unanswered, trap sent
    };
    // Answers a MAD that arrived on port `port`, in place.
    MadOutcome answerMad(unsigned port, std::span<uint8_t> mad, bool ignoreMkey);
    // The physical link of a port came up or went down.
    void linkChanged(unsigned port, bool up);
    // The last trap's transaction ID, in the device's saved state: a
    // loaded device does not reuse one the SM saw.
    uint64_t lastTrapTid() const { return trapTid_; }
    void restoreLastTrapTid(uint64_t tid) { trapTid_ = tid; }

  private:
    void sendTrap(unsigned port, std::vector<uint8_t> mad);
    uint16_t smaGet(unsigned port, iba::Mad &mad, bool hideMkey = false);
    uint16_t smaSet(unsigned port, iba::Mad &mad);
    iba::PortInfo portInfo(unsigned port, bool hideMkey);
    uint16_t setPortInfo(unsigned port, iba::Mad &mad);
    void pma(unsigned port, iba::Mad &mad);

    const pib_core_config &config_;
    const Host &host_;
    Ports &ports_;
    EventWriter &events_;
    SubnetSender &sender_;
    uint64_t trapTid_ = 0;
};

} // namespace pib
