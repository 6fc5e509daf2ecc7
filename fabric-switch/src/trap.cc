// SPDX-License-Identifier: GPL-2.0-or-later
// Trap 128 (IBA 14.2.5.1, "link state changed"): a switch tells the SM at
// once when a port's link comes or goes, instead of waiting for the SM's
// next sweep to notice SwitchInfo.PortStateChange.
#include "switch.hh"

namespace pib::fabric {

namespace {

constexpr uint16_t kAttrNotice = 0x0002;
constexpr uint8_t kNoticeGenericUrgent = 0x81; // IsGeneric, Type 1 (urgent)
constexpr uint32_t kProducerSwitch = 2;
constexpr uint16_t kTrapLinkStateChanged = 128;

} // namespace

std::vector<Transmit> Switch::trap128() {
    // Only once the SM has given us a LID and told us its own; before that
    // the SM finds every change by sweeping anyway.
    const unsigned out = smLid_ < kLftCap ? lft_[smLid_] : 0xff;
    if (lid_ == 0 || smLid_ == 0 || out < 1 || out > config_.ports)
        return {};
    std::vector<uint8_t> bytes(kMadSize, 0);
    Mad mad(bytes);
    mad.set8(0, 1); // base version
    mad.set8(1, kClassSmpLid);
    mad.set8(2, 1); // class version
    mad.setMethod(kTrap);
    mad.set64(8, ++trapTid_);
    mad.set16(16, kAttrNotice);
    const size_t d = Mad::kSmpData;
    mad.set8(d + 0, kNoticeGenericUrgent);
    mad.set8(d + 1, 0);
    mad.set16(d + 2, kProducerSwitch);
    mad.set16(d + 4, kTrapLinkStateChanged);
    mad.set16(d + 6, lid_);  // IssuerLID
    mad.set16(d + 10, lid_); // data details: LIDADDR, the switch with the change

    iba::Packet p;
    p.lrh.vl = 15;
    p.lrh.dlid = smLid_;
    p.lrh.slid = lid_;
    p.bth.opcode = iba::kUdSendOnly;
    p.bth.destQp = 0;
    p.deth = iba::Deth{0, 0};
    p.payload = std::move(bytes);
    std::vector<Transmit> result;
    transmit(result, out, iba::build(p), true);
    return result;
}

} // namespace pib::fabric
