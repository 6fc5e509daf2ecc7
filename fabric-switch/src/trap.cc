// SPDX-License-Identifier: GPL-2.0-or-later
// Trap 128 (IBA 14.2.5.1, "link state changed"): a switch tells the SM at
// once when a port's link comes or goes, instead of waiting for the SM's
// next sweep to notice SwitchInfo.PortStateChange.
#include "switch.hh"

namespace pib::fabric {

namespace {

constexpr uint8_t kNoticeTypeUrgent = 1;
constexpr uint16_t kTrapLinkStateChanged = 128;

} // namespace

std::vector<Transmit> Switch::trap128() {
    std::vector<uint8_t> bytes =
        trapMad(++trapTid_, kNoticeTypeUrgent, kProducerSwitch, kTrapLinkStateChanged, lid_);
    Mad(bytes).set16(Mad::kSmpData + 10, lid_); // data details: LIDADDR, the switch with the change
    std::vector<Transmit> result;
    trapToSm(result, std::move(bytes));
    return result;
}

// Sends a trap to the SM. Only once the SM has given us a LID and told us
// its own; before that the SM finds everything by sweeping anyway.
void Switch::trapToSm(std::vector<Transmit> &out, std::vector<uint8_t> mad) {
    const unsigned port = smLid_ < kLftCap ? lft_[smLid_] : 0xff;
    if (lid_ == 0 || smLid_ == 0 || port < 1 || port > config_.ports)
        return;
    iba::Packet p;
    p.lrh.vl = 15;
    p.lrh.dlid = smLid_;
    p.lrh.slid = lid_;
    p.bth.opcode = iba::kUdSendOnly;
    p.bth.destQp = 0;
    p.deth = iba::Deth{0, 0};
    p.payload = std::move(mad);
    transmit(out, port, iba::build(p), true);
}

} // namespace pib::fabric
