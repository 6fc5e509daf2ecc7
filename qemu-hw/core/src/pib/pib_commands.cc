// SPDX-License-Identifier: GPL-2.0-or-later
// The command table and its dispatch; device, port, doorbell page, PD
// and MTT commands.
#include "pib_commands.hh"
#include "trace.hh"

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "limits.hh"
#include "packet.hh"
#include "version.hh"

namespace pib {

static_assert(sizeof(pib_dev_cap) == 184);
static_assert(sizeof(pib_port_info) == 72);
static_assert(sizeof(pib_qp_attr) == 88);
static_assert(sizeof(pib_eqe) == 32);
static_assert(sizeof(pib_cqe) == PIB_CQE_SIZE);

static pib_dev_cap buildCaps(const pib_core_config &config) {
    using namespace limits;
    pib_dev_cap c{};
    c.node_guid = config.node_guid;
    c.sys_image_guid = config.node_guid;
    c.max_mr_size = kMaxMrSize;
    for (uint32_t shift = kMinLogPageSize; shift <= kMaxLogPageSize; ++shift)
        c.page_size_cap |= uint64_t{1} << shift;
    c.fw_version = PIB_FW_VERSION(kFirmwareMajor, kFirmwareMinor, kFirmwarePatch);
    c.vendor_id = PIB_PCI_VENDOR_ID;
    c.vendor_part_id = PIB_PCI_DEVICE_ID;
    c.hw_version = PIB_PCI_REVISION;
    c.device_cap_flags =
        PIB_DEV_CAP_RC | PIB_DEV_CAP_UC | PIB_DEV_CAP_UD | PIB_DEV_CAP_SRQ |
        PIB_DEV_CAP_RNR_NAK_GEN | PIB_DEV_CAP_SYS_IMAGE_GUID | PIB_DEV_CAP_PORT_ACTIVE_EVENT |
        PIB_DEV_CAP_BAD_PKEY_CNTR | PIB_DEV_CAP_BAD_QKEY_CNTR | PIB_DEV_CAP_MEM_MGT_EXTENSIONS |
        PIB_DEV_CAP_MEM_WINDOW | PIB_DEV_CAP_MEM_WINDOW_TYPE_2B | PIB_DEV_CAP_RESIZE_CQ |
        PIB_DEV_CAP_RESIZE_SRQ | PIB_DEV_CAP_CQE_TIMESTAMP | PIB_DEV_CAP_XRC |
        PIB_DEV_CAP_CQ_MODERATION | PIB_DEV_CAP_ATOMIC_WRITE | PIB_DEV_CAP_FLUSH_GLOBAL |
        PIB_DEV_CAP_ON_DEMAND_PAGING | PIB_DEV_CAP_IMPLICIT_ON_DEMAND;
    c.max_qp = kMaxQp;
    c.max_qp_wr = 1u << kLogMaxQpWr;
    c.max_send_sge = kMaxSge;
    c.max_recv_sge = kMaxSge;
    c.max_sge_rd = kMaxSge;
    c.max_cq = kMaxCq;
    c.max_cqe = 1u << kLogMaxCqe;
    c.max_cq_moderation_count = kMaxCqModerationCount;
    c.max_cq_moderation_period = kMaxCqModerationPeriod;
    c.max_mr = kMaxMr;
    c.max_pd = kMaxPd;
    c.max_qp_rd_atom = kMaxRdAtom;
    c.max_qp_init_rd_atom = kMaxRdAtom;
    c.max_res_rd_atom = kMaxRdAtom * kMaxQp;
    c.max_srq = kMaxSrq;
    c.max_srq_wr = 1u << kLogMaxSrqWr;
    c.max_srq_sge = kMaxSge;
    c.max_mcast_grp = kMaxMcastGroups;
    c.max_mcast_qp_attach = kMaxMcastQpAttach;
    c.max_total_mcast_qp_attach = kMaxTotalMcastQpAttach;
    c.max_inline_data = kMaxInlineData;
    c.max_mtt = kMaxMtt;
    c.max_eq = kMaxEq;
    c.max_eqe = 1u << kLogMaxEqe;
    c.max_uar = config.doorbell_pages;
    c.max_pkeys = PIB_PKEY_TABLE_LEN;
    c.local_ca_ack_delay = kLocalCaAckDelay;
    c.num_ports = static_cast<uint8_t>(config.num_ports);
    c.atomic_cap = PIB_ATOMIC_HCA;
    c.log_max_wqe_stride = kLogMaxWqeStride;
    c.max_fast_reg_pages = kMaxFastRegPages;
    c.max_mw = kMaxMw;
    c.hca_core_clock_khz = kCoreClockKhz;
    c.max_xrcd = kMaxXrcd;
    return c;
}

// What this personality's commands refuse with (memory_regions.hh).
static const Refusals kRefusals{err::kCmdBadIndex, err::kCmdBadParam, err::kCmdNoResources,
                                err::kCmdBusy};

CommandProcessor::CommandProcessor(const pib_core_config &config, const Host &host, CoreParts core)
    : config_(config), host_(host), caps_(buildCaps(config)), objects_(core.objects),
      regions_(host, core.objects, kRefusals), core_(std::move(core)) {}

CommandOutcome CommandProcessor::fail(const err::Condition &why, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    host_.vguestError(why, fmt, args);
    va_end(args);
    return CommandOutcome::failed(why);
}

// Every command the device executes (docs/prm.md §4.4): its opcode, the
// name traces give it, whether it runs before INIT_HCA (discovery and
// INIT_HCA itself), and its handler.
const CommandProcessor::CommandSpec CommandProcessor::kCommands[] = {
    {PIB_CMD_QUERY_DEV_CAP, "QUERY_DEV_CAP", true, &CommandProcessor::queryDevCap},
    {PIB_CMD_QUERY_PORT, "QUERY_PORT", true, &CommandProcessor::queryPort},
    {PIB_CMD_INIT_HCA, "INIT_HCA", true, &CommandProcessor::initHca},
    {PIB_CMD_CLOSE_HCA, "CLOSE_HCA", false, &CommandProcessor::closeHca},
    {PIB_CMD_MODIFY_PORT, "MODIFY_PORT", false, &CommandProcessor::modifyPort},
    {PIB_CMD_QUERY_PKEYS, "QUERY_PKEYS", false, &CommandProcessor::queryPkeys},
    {PIB_CMD_QUERY_GUIDS, "QUERY_GUIDS", false, &CommandProcessor::queryGuids},
    {PIB_CMD_SET_NODE_DESC, "SET_NODE_DESC", false, &CommandProcessor::setNodeDesc},
    {PIB_CMD_QUERY_COUNTERS, "QUERY_COUNTERS", false, &CommandProcessor::queryCounters},
    {PIB_CMD_MAD_IFC, "MAD_IFC", false, &CommandProcessor::madIfc},
    {PIB_CMD_ALLOC_UAR, "ALLOC_UAR", false, &CommandProcessor::allocUar},
    {PIB_CMD_FREE_UAR, "FREE_UAR", false, &CommandProcessor::freeUar},
    {PIB_CMD_ALLOC_PD, "ALLOC_PD", false, &CommandProcessor::allocPd},
    {PIB_CMD_DEALLOC_PD, "DEALLOC_PD", false, &CommandProcessor::deallocPd},
    {PIB_CMD_ALLOC_XRCD, "ALLOC_XRCD", false, &CommandProcessor::allocXrcd},
    {PIB_CMD_DEALLOC_XRCD, "DEALLOC_XRCD", false, &CommandProcessor::deallocXrcd},
    {PIB_CMD_ALLOC_MTT, "ALLOC_MTT", false, &CommandProcessor::allocMtt},
    {PIB_CMD_FREE_MTT, "FREE_MTT", false, &CommandProcessor::freeMtt},
    {PIB_CMD_WRITE_MTT, "WRITE_MTT", false, &CommandProcessor::writeMtt},
    {PIB_CMD_PAGE_FAULT_RESUME, "PAGE_FAULT_RESUME", false, &CommandProcessor::pageFaultResume},
    {PIB_CMD_CREATE_EQ, "CREATE_EQ", false, &CommandProcessor::createEq},
    {PIB_CMD_DESTROY_EQ, "DESTROY_EQ", false, &CommandProcessor::destroyEq},
    {PIB_CMD_QUERY_EQ, "QUERY_EQ", false, &CommandProcessor::queryEq},
    {PIB_CMD_CREATE_CQ, "CREATE_CQ", false, &CommandProcessor::createCq},
    {PIB_CMD_DESTROY_CQ, "DESTROY_CQ", false, &CommandProcessor::destroyCq},
    {PIB_CMD_QUERY_CQ, "QUERY_CQ", false, &CommandProcessor::queryCq},
    {PIB_CMD_RESIZE_CQ, "RESIZE_CQ", false, &CommandProcessor::resizeCq},
    {PIB_CMD_MODIFY_CQ, "MODIFY_CQ", false, &CommandProcessor::modifyCq},
    {PIB_CMD_CREATE_MR, "CREATE_MR", false, &CommandProcessor::createMr},
    {PIB_CMD_DESTROY_MR, "DESTROY_MR", false, &CommandProcessor::destroyMr},
    {PIB_CMD_QUERY_MR, "QUERY_MR", false, &CommandProcessor::queryMr},
    {PIB_CMD_REREG_MR, "REREG_MR", false, &CommandProcessor::reregMr},
    {PIB_CMD_CREATE_MW, "CREATE_MW", false, &CommandProcessor::createMw},
    {PIB_CMD_DESTROY_MW, "DESTROY_MW", false, &CommandProcessor::destroyMw},
    {PIB_CMD_QUERY_MW, "QUERY_MW", false, &CommandProcessor::queryMw},
    {PIB_CMD_CREATE_SRQ, "CREATE_SRQ", false, &CommandProcessor::createSrq},
    {PIB_CMD_DESTROY_SRQ, "DESTROY_SRQ", false, &CommandProcessor::destroySrq},
    {PIB_CMD_QUERY_SRQ, "QUERY_SRQ", false, &CommandProcessor::querySrq},
    {PIB_CMD_ARM_SRQ, "ARM_SRQ", false, &CommandProcessor::armSrq},
    {PIB_CMD_RESIZE_SRQ, "RESIZE_SRQ", false, &CommandProcessor::resizeSrq},
    {PIB_CMD_CREATE_QP, "CREATE_QP", false, &CommandProcessor::createQp},
    {PIB_CMD_DESTROY_QP, "DESTROY_QP", false, &CommandProcessor::destroyQp},
    {PIB_CMD_MODIFY_QP, "MODIFY_QP", false, &CommandProcessor::modifyQp},
    {PIB_CMD_QUERY_QP, "QUERY_QP", false, &CommandProcessor::queryQp},
    {PIB_CMD_ATTACH_MCAST, "ATTACH_MCAST", false, &CommandProcessor::attachOrDetachMcast},
    {PIB_CMD_DETACH_MCAST, "DETACH_MCAST", false, &CommandProcessor::attachOrDetachMcast},
};

const CommandProcessor::CommandSpec *CommandProcessor::findCommand(uint16_t opcode) {
    for (const CommandSpec &spec : kCommands)
        if (spec.opcode == opcode)
            return &spec;
    return nullptr;
}

bool CommandProcessor::mailboxUsable(const Command &cmd, uint64_t addr, const char *which) const {
    if (addr % PIB_MAILBOX_ALIGN == 0)
        return true;
    host_.guestError(err::kCmdDma, "%s: %s mailbox 0x%" PRIx64 " is not %u-byte aligned",
                     commandName(cmd.opcode), which, addr, PIB_MAILBOX_ALIGN);
    return false;
}

bool CommandProcessor::mailboxUnreachable(const Command &cmd, uint64_t addr,
                                          const char *how) const {
    host_.guestError(err::kCmdDma, "%s: mailbox 0x%" PRIx64 " cannot be %s",
                     commandName(cmd.opcode), addr, how);
    return false;
}

std::optional<uint16_t> CommandProcessor::opcodeOf(std::string_view name) {
    for (const CommandSpec &spec : kCommands)
        if (name == spec.name)
            return spec.opcode;
    return std::nullopt;
}

namespace {

// The statuses `inject command` takes by name: PIB_CMD_STATUS_* without
// their prefix.
constexpr InjectionName kPibStatusNames[] = {
    {"BAD_OPCODE", PIB_CMD_STATUS_BAD_OPCODE},
    {"BAD_STATE", PIB_CMD_STATUS_BAD_STATE},
    {"BAD_PARAM", PIB_CMD_STATUS_BAD_PARAM},
    {"BAD_INDEX", PIB_CMD_STATUS_BAD_INDEX},
    {"NO_RESOURCES", PIB_CMD_STATUS_NO_RESOURCES},
    {"BUSY", PIB_CMD_STATUS_BUSY},
    {"DMA_ERROR", PIB_CMD_STATUS_DMA_ERROR},
    {"BAD_TRANSITION", PIB_CMD_STATUS_BAD_TRANSITION},
    {"BAD_MASK", PIB_CMD_STATUS_BAD_MASK},
};

} // namespace

CommandWords CommandProcessor::commandWords() {
    return {opcodeOf, kPibStatusNames};
}

const char *CommandProcessor::commandName(uint16_t opcode) {
    const CommandSpec *spec = findCommand(opcode);
    return spec ? spec->name : "unknown";
}

CommandOutcome CommandProcessor::execute(const Command &cmd) {
    const CommandSpec *spec = findCommand(cmd.opcode);
    if (!spec)
        return fail(err::kCmdBadOpcode, "unknown opcode 0x%04x", cmd.opcode);
    if (!initialized_ && !spec->beforeInit)
        return fail(err::kCmdNotInitialized, "%s (0x%04x) before INIT_HCA", spec->name, cmd.opcode);
    if (!core_.injections.empty())
        if (const std::optional<uint8_t> status = core_.injections.takeCommand(cmd.opcode)) {
            trace::inject_command(host_, spec->name, cmd.opcode, *status);
            return {*status, 0, err::kHostInjected.syndrome};
        }
    // Sends posted before the command completed before it (docs/prm.md
    // §4.1): a RESIZE_CQ right after them finds their CQEs.
    core_.dataPath.settleBeforeCommand();
    const CommandOutcome outcome = (this->*spec->handler)(cmd);
    trace::command(host_, spec->name, cmd.opcode, cmd.modifier, outcome.status, outcome.result);
    return outcome;
}

// ---- device and ports -------------------------------------------------------

CommandOutcome CommandProcessor::queryDevCap(const Command &cmd) {
    if (!writeMailbox(cmd, caps_))
        return mailboxFailed();
    return {};
}

CommandOutcome CommandProcessor::queryPort(const Command &cmd) {
    PortState *p = core_.ports.find(cmd.modifier);
    if (!p)
        return fail(err::kCmdBadPort, "QUERY_PORT of port %u", cmd.modifier);
    if (!writeMailbox(cmd, p->info))
        return mailboxFailed();
    return {};
}

CommandOutcome CommandProcessor::initHca(const Command &) {
    if (initialized_)
        return fail(err::kCmdBadState, "INIT_HCA twice");
    initialized_ = true;
    return {};
}

// The function's objects end and its ports go back to power-on, as on
// a device reset.
CommandOutcome CommandProcessor::closeHca(const Command &) {
    initialized_ = false;
    core_.endObjects();
    core_.resetPorts();
    return {};
}

CommandOutcome CommandProcessor::modifyPort(const Command &cmd) {
    PortState *p = core_.ports.find(cmd.modifier);
    if (!p)
        return fail(err::kCmdBadPort, "MODIFY_PORT of port %u", cmd.modifier);
    const auto set = static_cast<uint32_t>(cmd.in);
    const auto clear = static_cast<uint32_t>(cmd.in >> 32);
    p->info.cap_mask = (p->info.cap_mask | set) & ~clear;
    if (cmd.opmod & 1)
        p->info.qkey_viol_cntr = 0;
    return {};
}

CommandOutcome CommandProcessor::queryCounters(const Command &cmd) {
    PortState *p = core_.ports.find(cmd.modifier);
    if (!p)
        return fail(err::kCmdBadPort, "QUERY_COUNTERS of port %u", cmd.modifier);
    pib_port_counters c = p->transport;
    c.packets_sent = p->xmitPackets;
    c.packets_received = p->rcvPackets;
    if (!writeMailbox(cmd, c))
        return mailboxFailed();
    return {};
}

CommandOutcome CommandProcessor::queryPkeys(const Command &cmd) {
    PortState *p = core_.ports.find(cmd.modifier);
    if (!p)
        return fail(err::kCmdBadPort, "QUERY_PKEYS of port %u", cmd.modifier);
    if (!writeMailbox(cmd, p->pkeys))
        return mailboxFailed();
    return {};
}

CommandOutcome CommandProcessor::queryGuids(const Command &cmd) {
    PortState *p = core_.ports.find(cmd.modifier);
    if (!p)
        return fail(err::kCmdBadPort, "QUERY_GUIDS of port %u", cmd.modifier);
    if (!writeMailbox(cmd, p->guids))
        return mailboxFailed();
    return {};
}

CommandOutcome CommandProcessor::setNodeDesc(const Command &cmd) {
    std::array<char, PIB_NODE_DESC_LEN> desc;
    if (!readMailbox(cmd, desc))
        return mailboxFailed();
    desc.back() = 0;
    core_.ports.nodeDesc = desc;
    return {};
}

CommandOutcome CommandProcessor::madIfc(const Command &cmd) {
    if (!core_.ports.find(cmd.modifier))
        return fail(err::kCmdBadPort, "MAD_IFC on port %u", cmd.modifier);
    pib_mad_ifc ifc;
    if (!readMailbox(cmd, ifc))
        return mailboxFailed();
    const bool reply =
        core_.agents.answerMad(cmd.modifier, ifc.mad, cmd.opmod & PIB_MAD_IFC_IGNORE_MKEY) ==
        PortAgents::MadOutcome::kAnswered;
    if (reply && !writeMailbox(cmd, ifc))
        return mailboxFailed();
    return {PIB_CMD_STATUS_OK, reply ? 1u : 0u};
}

// ---- doorbell pages and protection domains --------------------------------------

CommandOutcome CommandProcessor::allocUar(const Command &) {
    const auto number = objects_.uars.insert(std::make_unique<DoorbellPage>());
    if (!number)
        return fail(err::kCmdNoResources, "all %u doorbell pages in use", objects_.uars.capacity());
    return {PIB_CMD_STATUS_OK, *number};
}

CommandOutcome CommandProcessor::freeUar(const Command &cmd) {
    DoorbellPage *uar = objects_.uars.find(cmd.modifier);
    if (!uar)
        return fail(err::kCmdBadIndex, "FREE_UAR of page %u", cmd.modifier);
    if (uar->refs)
        return fail(err::kCmdBusy, "FREE_UAR of page %u used by %u queues", cmd.modifier,
                    uar->refs);
    objects_.uars.erase(cmd.modifier);
    return {};
}

// PDs and XRC domains: numbers that other objects hold, nothing more.
template <class T>
CommandOutcome CommandProcessor::allocHeld(ObjectTable<T> &table, const char *what) {
    const auto number = table.insert(std::make_unique<T>());
    if (!number)
        return fail(err::kCmdNoResources, "all %u %ss in use", table.capacity(), what);
    return {PIB_CMD_STATUS_OK, *number};
}

template <class T>
CommandOutcome CommandProcessor::deallocHeld(ObjectTable<T> &table, const Command &cmd,
                                             const char *what) {
    uint32_t refs = 0;
    switch (release(table, cmd.modifier, &refs)) {
    case Release::kMissing:
        return fail(err::kCmdBadIndex, "%s of %s %u", commandName(cmd.opcode), what, cmd.modifier);
    case Release::kHeld:
        return fail(err::kCmdBusy, "%s of %s %u used by %u objects", commandName(cmd.opcode), what,
                    cmd.modifier, refs);
    case Release::kReleased:
        break;
    }
    return {};
}

CommandOutcome CommandProcessor::allocPd(const Command &) {
    return allocHeld(objects_.pds, "PD");
}

CommandOutcome CommandProcessor::deallocPd(const Command &cmd) {
    return deallocHeld(objects_.pds, cmd, "PD");
}

CommandOutcome CommandProcessor::allocXrcd(const Command &) {
    return allocHeld(objects_.xrcds, "XRC domain");
}

CommandOutcome CommandProcessor::deallocXrcd(const Command &cmd) {
    return deallocHeld(objects_.xrcds, cmd, "XRC domain");
}

// ---- memory translation table --------------------------------------------------

CommandOutcome CommandProcessor::allocMtt(const Command &cmd) {
    if (cmd.in == 0 || cmd.in > limits::kMaxMtt)
        return fail(err::kCmdBadParam, "ALLOC_MTT of %" PRIu64 " entries", cmd.in);
    const auto first = objects_.mtt.allocate(static_cast<uint32_t>(cmd.in));
    if (!first)
        return fail(err::kCmdNoResources, "no room for %" PRIu64 " MTT entries", cmd.in);
    return {PIB_CMD_STATUS_OK, *first};
}

CommandOutcome CommandProcessor::freeMtt(const Command &cmd) {
    if (objects_.mtt.held(cmd.modifier))
        return fail(err::kCmdBusy, "FREE_MTT of range %u still in use", cmd.modifier);
    if (!objects_.mtt.release(cmd.modifier))
        return fail(err::kCmdBadIndex, "FREE_MTT: no range starts at %u", cmd.modifier);
    return {};
}

CommandOutcome CommandProcessor::writeMtt(const Command &cmd) {
    pib_mtt_write in;
    if (!readMailbox(cmd, in))
        return mailboxFailed();
    if (in.count == 0 || in.count > PIB_MTT_WRITE_MAX)
        return fail(err::kCmdBadParam, "WRITE_MTT of %u entries", in.count);
    if (!objects_.mtt.covers(cmd.modifier, in.count))
        return fail(err::kCmdBadIndex, "WRITE_MTT of %u entries at %u outside an allocated range",
                    in.count, cmd.modifier);
    if (objects_.mtt.deviceWrites(cmd.modifier))
        return fail(err::kCmdBadState,
                    "WRITE_MTT at %u: a fast-registration MR's entries, which REG_MR WQEs write",
                    cmd.modifier);
    // Entries an MR reads as large pages must stay aligned to its page
    // size, as CREATE_MR checked them: else its translations would run
    // past the page the driver meant.
    // An on-demand region's entries carry present bits, or are absent (0).
    const uint64_t pageSize = uint64_t{1} << objects_.mtt.logPageSizeAt(cmd.modifier);
    static_assert(PIB_PAGE_SIZE == 1u << Mtt::kMinLogPage);
    const bool paged = objects_.mtt.paged(cmd.modifier);
    constexpr uint64_t kPresent = PIB_MTT_READ | PIB_MTT_WRITE;
    for (uint32_t i = 0; i < in.count; ++i) {
        const uint64_t address = paged ? in.entries[i] & ~kPresent : in.entries[i];
        if ((paged && in.entries[i] == 0) || (address % pageSize == 0 && address != 0))
            continue;
        return fail(err::kCmdBadParam,
                    "WRITE_MTT entry %u: 0x%" PRIx64 " is not a %" PRIu64 "-byte page address%s", i,
                    in.entries[i], pageSize, paged ? " with present bits, nor 0" : "");
    }
    for (uint32_t i = 0; i < in.count; ++i)
        objects_.mtt.write(cmd.modifier + i, in.entries[i]);
    return {};
}

bool CommandProcessor::validRing(const pib_buf_desc &buf, uint64_t pages) const {
    return buf.npages == pages && objects_.mtt.covers(buf.mtt_index, buf.npages);
}

} // namespace pib
