// SPDX-License-Identifier: GPL-2.0-or-later
// Trap 128 (IBA 14.2.5.1, "link state changed"): a switch tells the SM at
// once when a port's link comes or goes, instead of waiting for the SM's
// next sweep to notice SwitchInfo.PortStateChange. A trap is an
// unreliable datagram, and an SM busy sweeping may miss it, so it is sent
// again every subnet timeout until the SM's TrapRepress says it arrived.
#include "switch.hh"

#include <algorithm>

namespace pib::fabric {

using namespace pib::iba;

namespace {

constexpr uint8_t kNoticeTypeUrgent = 1;
constexpr uint16_t kTrapLinkStateChanged = 128;
// Bounds on the interval of repeats (4.096 us x 2^SubnetTimeOut), and
// how often a trap the SM never represses is repeated.
constexpr uint64_t kMinTrapRepeatNs = 100'000'000;
constexpr uint64_t kMaxTrapRepeatNs = 10'000'000'000;
constexpr unsigned kMaxTrapRepeats = 8;

} // namespace

std::vector<Transmit> Switch::trap128() {
    std::vector<Transmit> result;
    if (lid_ == 0 || smLid_ == 0)
        return result; // no SM to tell yet: it will find everything by sweeping
    std::vector<uint8_t> bytes =
        trapMad(++trapTid_, kNoticeTypeUrgent, kProducerSwitch, kTrapLinkStateChanged, lid_);
    Mad(bytes).set16(Mad::kSmpData + 10, lid_); // data details: LIDADDR, the switch with the change
    // A newer change supersedes an unanswered trap: only the last repeats.
    unrepressed_ = UnrepressedTrap{bytes, trapTid_, now() + trapRepeatNs(), 0};
    trapToSm(result, std::move(bytes));
    return result;
}

uint64_t Switch::trapRepeatNs() const {
    return std::clamp(uint64_t{4096} << subnetTimeout_, kMinTrapRepeatNs, kMaxTrapRepeatNs);
}

void Switch::trapRepressed(const Mad &repress) {
    if (unrepressed_ && repress.get64(8) == unrepressed_->tid)
        unrepressed_.reset();
}

std::vector<Transmit> Switch::repeatTraps() {
    std::vector<Transmit> out;
    if (!unrepressed_ || now() < unrepressed_->dueNs)
        return out;
    if (unrepressed_->repeats == kMaxTrapRepeats) {
        event("Trap 128 " + std::to_string(unrepressed_->tid) + " never repressed; given up");
        unrepressed_.reset();
        return out;
    }
    ++unrepressed_->repeats;
    unrepressed_->dueNs = now() + trapRepeatNs();
    trapToSm(out, unrepressed_->mad);
    return out;
}

// Sends a trap to the SM. Only once the SM has given us a LID and told us
// its own; before that the SM finds everything by sweeping anyway.
void Switch::trapToSm(std::vector<Transmit> &out, std::vector<uint8_t> mad) {
    const unsigned port = tables_.port(smLid_);
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
    transmit(out, port, iba::build(p), true, p.bth.pkey);
}

} // namespace pib::fabric
