// SPDX-License-Identifier: GPL-2.0-or-later
// The device's state for migration and snapshots (docs/migration.md): a
// header that says which device saved it, then a section per component.
// A device with armed injections (a test facility) refuses to save.
#include "device.hh"
#include "state_archive.hh"
#include "trace.hh"

namespace pib {

namespace {

// The format of the saved state. A stream of another version is refused:
// the device that saved it may hold what this one cannot read.
constexpr uint32_t kStateVersion = 13;

constexpr uint32_t kHeaderTag = stateTag("PIBD");
constexpr uint32_t kDeviceTag = stateTag("DEV ");
constexpr uint32_t kLinksTag = stateTag("LNKS");

void saveHeader(StateWriter &w, const pib_core_config &c) {
    w.beginSection(kHeaderTag);
    w.u32(kStateVersion);
    w.u32(c.personality);
    w.u64(c.node_guid);
    w.u32(c.num_ports);
    w.u32(c.doorbell_pages);
    w.u32(c.msix_vectors);
    w.endSection();
}

// The state must come from a device configured as this one: the same
// personality, node GUID, ports, doorbell pages and MSI-X vectors.
void checkHeader(StateReader &r, const pib_core_config &c) {
    r.enterSection(kHeaderTag, "the device state's header");
    const uint32_t version = r.u32();
    if (r.ok() && version != kStateVersion) {
        r.fail("the device state is of version " + std::to_string(version) +
               "; this device reads version " + std::to_string(kStateVersion));
        return;
    }
    const uint32_t personality = r.u32();
    const uint64_t guid = r.u64();
    const uint32_t ports = r.u32(), pages = r.u32(), vectors = r.u32();
    r.leaveSection("the device state's header");
    if (r.ok() && (personality != c.personality || guid != c.node_guid || ports != c.num_ports ||
                   pages != c.doorbell_pages || vectors != c.msix_vectors))
        r.fail("the device state was saved by a device configured otherwise (personality, "
               "node GUID, ports, doorbell pages or MSI-X vectors)");
}

} // namespace

// What the device holds that it does not save yet, or nullptr.
const char *Device::unsaved() const {
    if (!injections_.empty())
        return "armed injections";
    return front_->unsaved();
}

bool Device::save(std::vector<uint8_t> *state, std::string *why) const {
    if (const char *what = unsaved()) {
        *why = std::string("the device holds state this version does not save yet: ") + what;
        return false;
    }
    StateWriter w;
    saveHeader(w, config_);
    w.beginSection(kDeviceTag);
    w.boolean(fatal_);
    front_->saveFunction(w);
    w.u64(agents_.lastTrapTid());
    w.endSection();
    ports_.save(w);
    front_->saveObjects(w);
    // Whether each port's link was up (or moving): the loaded device
    // resumes it on its next cable, its port state kept.
    w.beginSection(kLinksTag);
    for (const auto &link : links_)
        w.boolean(link->resumable());
    w.endSection();
    front_->save(w);
    *state = w.take();
    return true;
}

void Device::loadState(StateReader &r) {
    checkHeader(r, config_);
    r.enterSection(kDeviceTag, "the device");
    const bool fatal = r.boolean("FATAL");
    front_->loadFunction(r);
    agents_.restoreLastTrapTid(r.u64());
    r.leaveSection("the device");
    ports_.load(r);
    front_->loadObjects(r);
    r.enterSection(kLinksTag, "the links");
    std::vector<bool> resumes;
    for (size_t i = 0; i < links_.size(); ++i)
        resumes.push_back(r.boolean("a link that was up"));
    r.leaveSection("the links");
    front_->load(r);
    for (size_t i = 0; r.ok() && i < links_.size(); ++i)
        if (resumes[i]) {
            links_[i]->resumeOnNextCable();
            if (PortState *p = ports_.find(static_cast<unsigned>(i + 1)))
                p->moved = true;
        }
    if (r.ok() && !r.atEnd())
        r.fail("bytes after the device's state");
    if (r.ok() && fatal) { // as it was: no second DEVICE_FATAL event
        fatal_ = true;
        front_->setFatal();
    }
}

bool Device::load(std::span<const uint8_t> state, std::string *why) {
    reset("loading a saved state");
    StateReader r(state);
    loadState(r);
    if (r.ok())
        return true;
    *why = r.error();
    reset("a saved state refused");
    return false;
}

} // namespace pib
