// SPDX-License-Identifier: GPL-2.0-or-later
// Command dispatch, device and port commands, doorbell pages, PDs, MTT.
#include "firmware.hh"

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
    c.device_cap_flags = PIB_DEV_CAP_RC | PIB_DEV_CAP_UC | PIB_DEV_CAP_UD | PIB_DEV_CAP_SRQ |
                         PIB_DEV_CAP_RNR_NAK_GEN | PIB_DEV_CAP_SYS_IMAGE_GUID;
    c.max_qp = kMaxQp;
    c.max_qp_wr = 1u << kLogMaxQpWr;
    c.max_send_sge = kMaxSge;
    c.max_recv_sge = kMaxSge;
    c.max_sge_rd = kMaxSge;
    c.max_cq = kMaxCq;
    c.max_cqe = 1u << kLogMaxCqe;
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
    return c;
}

Firmware::Firmware(const pib_core_config &config, const Host &host)
    : config_(config), host_(host), caps_(buildCaps(config)), uars_(config.doorbell_pages),
      pds_(limits::kMaxPd), mtt_(limits::kMaxMtt), wqes_(host, mtt_, caps_.max_inline_data),
      eqs_(limits::kMaxEq), cqs_(limits::kMaxCq), mrs_(limits::kMaxMr, 1), srqs_(limits::kMaxSrq),
      qps_(limits::kMaxQp, PIB_FIRST_QPN), memory_(host, mtt_, mrs_),
      events_(host, mtt_, eqs_, cqs_),
      multicast_(
          {limits::kMaxMcastGroups, limits::kMaxMcastQpAttach, limits::kMaxTotalMcastQpAttach}) {
    reset();
}

void Firmware::reset() {
    initialized_ = false;
    uars_.clear();
    pds_.clear();
    mtt_.clear();
    eqs_.clear();
    cqs_.clear();
    mrs_.clear();
    srqs_.clear();
    qps_.clear();
    multicast_.clear();
    for (auto &qp : specialQps_)
        qp.reset();
    timers_.clear();
    armedAt_ = Host::kNever;
    host_.armTimer(Host::kNever);
    loopback_.clear();
    ready_.clear(); // the ports' waiting lists go with the ports below
    for (uint32_t i = 0; i < PIB_MAX_PORTS; ++i) {
        PortState &p = ports_[i];
        p = PortState{};
        // Until a link exists the port is down and polling for a peer.
        p.info.state = PIB_PORT_DOWN;
        p.info.phys_state = PIB_PHYS_POLLING;
        p.info.max_mtu = PIB_MTU_4096;
        p.info.active_mtu = PIB_MTU_256;
        p.info.gid_prefix = 0xfe80000000000000ull;
        p.info.port_guid = config_.node_guid + 1 + i;
        p.info.max_msg_sz = limits::kMaxMsgSize;
        p.info.pkey_tbl_len = PIB_PKEY_TABLE_LEN;
        p.info.gid_tbl_len = PIB_GUID_TABLE_LEN;
        // IsClientReregistrationSupported: the SMA honours ClientReregister.
        p.info.cap_mask = 1u << 25;
        p.info.max_vl_num = 1;
        p.info.subnet_timeout = 0;
        p.info.active_width = iba::kLinkWidth4x;
        p.info.active_speed = iba::kLinkSpeedQdr;
        p.pkeys[0] = 0xffff; // the default partition, full member
        p.guids[0] = p.info.port_guid;
    }
}

PortState *Firmware::port(uint32_t number) {
    if (number < 1 || number > config_.num_ports)
        return nullptr;
    return &ports_[number - 1];
}

CommandOutcome Firmware::fail(uint8_t status, const char *what, const char *fmt, ...) {
    char detail[200];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(detail, sizeof(detail), fmt, args);
    va_end(args);
    host_.guestError(what, "%s", detail);
    return CommandOutcome{status, 0};
}

// Every command the device executes (docs/prm.md §4.4): its opcode, the
// name traces give it, whether it runs before INIT_HCA (discovery and
// INIT_HCA itself), and its handler.
const Firmware::CommandSpec Firmware::kCommands[] = {
    {PIB_CMD_QUERY_DEV_CAP, "QUERY_DEV_CAP", true, &Firmware::queryDevCap},
    {PIB_CMD_QUERY_PORT, "QUERY_PORT", true, &Firmware::queryPort},
    {PIB_CMD_INIT_HCA, "INIT_HCA", true, &Firmware::initHca},
    {PIB_CMD_CLOSE_HCA, "CLOSE_HCA", false, &Firmware::closeHca},
    {PIB_CMD_MODIFY_PORT, "MODIFY_PORT", false, &Firmware::modifyPort},
    {PIB_CMD_QUERY_PKEYS, "QUERY_PKEYS", false, &Firmware::queryPkeys},
    {PIB_CMD_QUERY_GUIDS, "QUERY_GUIDS", false, &Firmware::queryGuids},
    {PIB_CMD_SET_NODE_DESC, "SET_NODE_DESC", false, &Firmware::setNodeDesc},
    {PIB_CMD_MAD_IFC, "MAD_IFC", false, &Firmware::madIfc},
    {PIB_CMD_ALLOC_UAR, "ALLOC_UAR", false, &Firmware::allocUar},
    {PIB_CMD_FREE_UAR, "FREE_UAR", false, &Firmware::freeUar},
    {PIB_CMD_ALLOC_PD, "ALLOC_PD", false, &Firmware::allocPd},
    {PIB_CMD_DEALLOC_PD, "DEALLOC_PD", false, &Firmware::deallocPd},
    {PIB_CMD_ALLOC_MTT, "ALLOC_MTT", false, &Firmware::allocMtt},
    {PIB_CMD_FREE_MTT, "FREE_MTT", false, &Firmware::freeMtt},
    {PIB_CMD_WRITE_MTT, "WRITE_MTT", false, &Firmware::writeMtt},
    {PIB_CMD_CREATE_EQ, "CREATE_EQ", false, &Firmware::createEq},
    {PIB_CMD_DESTROY_EQ, "DESTROY_EQ", false, &Firmware::destroyEq},
    {PIB_CMD_QUERY_EQ, "QUERY_EQ", false, &Firmware::queryEq},
    {PIB_CMD_CREATE_CQ, "CREATE_CQ", false, &Firmware::createCq},
    {PIB_CMD_DESTROY_CQ, "DESTROY_CQ", false, &Firmware::destroyCq},
    {PIB_CMD_QUERY_CQ, "QUERY_CQ", false, &Firmware::queryCq},
    {PIB_CMD_CREATE_MR, "CREATE_MR", false, &Firmware::createMr},
    {PIB_CMD_DESTROY_MR, "DESTROY_MR", false, &Firmware::destroyMr},
    {PIB_CMD_QUERY_MR, "QUERY_MR", false, &Firmware::queryMr},
    {PIB_CMD_CREATE_SRQ, "CREATE_SRQ", false, &Firmware::createSrq},
    {PIB_CMD_DESTROY_SRQ, "DESTROY_SRQ", false, &Firmware::destroySrq},
    {PIB_CMD_QUERY_SRQ, "QUERY_SRQ", false, &Firmware::querySrq},
    {PIB_CMD_ARM_SRQ, "ARM_SRQ", false, &Firmware::armSrq},
    {PIB_CMD_CREATE_QP, "CREATE_QP", false, &Firmware::createQp},
    {PIB_CMD_DESTROY_QP, "DESTROY_QP", false, &Firmware::destroyQp},
    {PIB_CMD_MODIFY_QP, "MODIFY_QP", false, &Firmware::modifyQp},
    {PIB_CMD_QUERY_QP, "QUERY_QP", false, &Firmware::queryQp},
    {PIB_CMD_ATTACH_MCAST, "ATTACH_MCAST", false, &Firmware::attachOrDetachMcast},
    {PIB_CMD_DETACH_MCAST, "DETACH_MCAST", false, &Firmware::attachOrDetachMcast},
};

const Firmware::CommandSpec *Firmware::findCommand(uint16_t opcode) {
    for (const CommandSpec &spec : kCommands)
        if (spec.opcode == opcode)
            return &spec;
    return nullptr;
}

const char *Firmware::commandName(uint16_t opcode) {
    const CommandSpec *spec = findCommand(opcode);
    return spec ? spec->name : "unknown";
}

CommandOutcome Firmware::execute(const Command &cmd) {
    const CommandSpec *spec = findCommand(cmd.opcode);
    if (!spec)
        return fail(PIB_CMD_STATUS_BAD_OPCODE, "cmd-bad-opcode", "unknown opcode 0x%04x",
                    cmd.opcode);
    if (!initialized_ && !spec->beforeInit)
        return fail(PIB_CMD_STATUS_BAD_STATE, "cmd-not-initialized", "%s (0x%04x) before INIT_HCA",
                    spec->name, cmd.opcode);
    const CommandOutcome outcome = (this->*spec->handler)(cmd);
    host_.trace("command", "%s (0x%04x) modifier 0x%x status %u result 0x%" PRIx64, spec->name,
                cmd.opcode, cmd.modifier, outcome.status, outcome.result);
    return outcome;
}

// ---- links --------------------------------------------------------------------

void Firmware::portLinkChanged(unsigned number, bool up) {
    PortState *p = port(number);
    if (!p)
        return;
    const bool wasActive = p->info.state == PIB_PORT_ACTIVE;
    if (up) {
        // A trained link leaves the port in INIT until the SM arms it.
        p->info.phys_state = PIB_PHYS_LINK_UP;
        p->info.state = PIB_PORT_INIT;
    } else {
        p->info.phys_state = PIB_PHYS_POLLING;
        p->info.state = PIB_PORT_DOWN;
        if (wasActive)
            events_.postAsyncEvent(PIB_ASYNC_PORT_ERR, number);
    }
    host_.trace("port", "port %u: %s", number, up ? "INIT/LinkUp" : "DOWN/Polling");
}

// ---- device and ports -------------------------------------------------------

CommandOutcome Firmware::queryDevCap(const Command &cmd) {
    if (!writeMailbox(cmd, caps_))
        return fail(PIB_CMD_STATUS_DMA_ERROR, "cmd-dma", "QUERY_DEV_CAP cannot write 0x%" PRIx64,
                    cmd.out);
    return {};
}

CommandOutcome Firmware::queryPort(const Command &cmd) {
    PortState *p = port(cmd.modifier);
    if (!p)
        return fail(PIB_CMD_STATUS_BAD_INDEX, "cmd-bad-port", "QUERY_PORT of port %u",
                    cmd.modifier);
    if (!writeMailbox(cmd, p->info))
        return fail(PIB_CMD_STATUS_DMA_ERROR, "cmd-dma", "QUERY_PORT cannot write 0x%" PRIx64,
                    cmd.out);
    return {};
}

CommandOutcome Firmware::initHca(const Command &) {
    if (initialized_)
        return fail(PIB_CMD_STATUS_BAD_STATE, "cmd-bad-state", "INIT_HCA twice");
    initialized_ = true;
    return {};
}

CommandOutcome Firmware::closeHca(const Command &) {
    reset();
    return {};
}

CommandOutcome Firmware::modifyPort(const Command &cmd) {
    PortState *p = port(cmd.modifier);
    if (!p)
        return fail(PIB_CMD_STATUS_BAD_INDEX, "cmd-bad-port", "MODIFY_PORT of port %u",
                    cmd.modifier);
    const auto set = static_cast<uint32_t>(cmd.in);
    const auto clear = static_cast<uint32_t>(cmd.in >> 32);
    p->info.cap_mask = (p->info.cap_mask | set) & ~clear;
    if (cmd.opmod & 1)
        p->info.qkey_viol_cntr = 0;
    return {};
}

CommandOutcome Firmware::queryPkeys(const Command &cmd) {
    PortState *p = port(cmd.modifier);
    if (!p)
        return fail(PIB_CMD_STATUS_BAD_INDEX, "cmd-bad-port", "QUERY_PKEYS of port %u",
                    cmd.modifier);
    if (!writeMailbox(cmd, p->pkeys))
        return fail(PIB_CMD_STATUS_DMA_ERROR, "cmd-dma", "QUERY_PKEYS cannot write 0x%" PRIx64,
                    cmd.out);
    return {};
}

CommandOutcome Firmware::queryGuids(const Command &cmd) {
    PortState *p = port(cmd.modifier);
    if (!p)
        return fail(PIB_CMD_STATUS_BAD_INDEX, "cmd-bad-port", "QUERY_GUIDS of port %u",
                    cmd.modifier);
    if (!writeMailbox(cmd, p->guids))
        return fail(PIB_CMD_STATUS_DMA_ERROR, "cmd-dma", "QUERY_GUIDS cannot write 0x%" PRIx64,
                    cmd.out);
    return {};
}

// ---- doorbell pages and protection domains --------------------------------------

CommandOutcome Firmware::allocUar(const Command &) {
    const auto number = uars_.insert(std::make_unique<DoorbellPage>());
    if (!number)
        return fail(PIB_CMD_STATUS_NO_RESOURCES, "cmd-no-resources", "all %u doorbell pages in use",
                    uars_.capacity());
    return {PIB_CMD_STATUS_OK, *number};
}

CommandOutcome Firmware::freeUar(const Command &cmd) {
    DoorbellPage *uar = uars_.find(cmd.modifier);
    if (!uar)
        return fail(PIB_CMD_STATUS_BAD_INDEX, "cmd-bad-index", "FREE_UAR of page %u", cmd.modifier);
    if (uar->refs)
        return fail(PIB_CMD_STATUS_BUSY, "cmd-busy", "FREE_UAR of page %u used by %u queues",
                    cmd.modifier, uar->refs);
    uars_.erase(cmd.modifier);
    return {};
}

CommandOutcome Firmware::allocPd(const Command &) {
    const auto number = pds_.insert(std::make_unique<ProtectionDomain>());
    if (!number)
        return fail(PIB_CMD_STATUS_NO_RESOURCES, "cmd-no-resources", "all %u PDs in use",
                    pds_.capacity());
    return {PIB_CMD_STATUS_OK, *number};
}

CommandOutcome Firmware::deallocPd(const Command &cmd) {
    ProtectionDomain *pd = pds_.find(cmd.modifier);
    if (!pd)
        return fail(PIB_CMD_STATUS_BAD_INDEX, "cmd-bad-index", "DEALLOC_PD of PD %u", cmd.modifier);
    if (pd->refs)
        return fail(PIB_CMD_STATUS_BUSY, "cmd-busy", "DEALLOC_PD of PD %u used by %u objects",
                    cmd.modifier, pd->refs);
    pds_.erase(cmd.modifier);
    return {};
}

// ---- memory translation table --------------------------------------------------

CommandOutcome Firmware::allocMtt(const Command &cmd) {
    if (cmd.in == 0 || cmd.in > limits::kMaxMtt)
        return fail(PIB_CMD_STATUS_BAD_PARAM, "cmd-bad-param", "ALLOC_MTT of %" PRIu64 " entries",
                    cmd.in);
    const auto first = mtt_.allocate(static_cast<uint32_t>(cmd.in));
    if (!first)
        return fail(PIB_CMD_STATUS_NO_RESOURCES, "cmd-no-resources",
                    "no room for %" PRIu64 " MTT entries", cmd.in);
    return {PIB_CMD_STATUS_OK, *first};
}

CommandOutcome Firmware::freeMtt(const Command &cmd) {
    if (mtt_.held(cmd.modifier))
        return fail(PIB_CMD_STATUS_BUSY, "cmd-busy", "FREE_MTT of range %u still in use",
                    cmd.modifier);
    if (!mtt_.release(cmd.modifier))
        return fail(PIB_CMD_STATUS_BAD_INDEX, "cmd-bad-index", "FREE_MTT: no range starts at %u",
                    cmd.modifier);
    return {};
}

CommandOutcome Firmware::writeMtt(const Command &cmd) {
    pib_mtt_write in;
    if (!readMailbox(cmd, in))
        return fail(PIB_CMD_STATUS_DMA_ERROR, "cmd-dma", "WRITE_MTT cannot read 0x%" PRIx64,
                    cmd.in);
    if (in.count == 0 || in.count > PIB_MTT_WRITE_MAX)
        return fail(PIB_CMD_STATUS_BAD_PARAM, "cmd-bad-param", "WRITE_MTT of %u entries", in.count);
    if (!mtt_.covers(cmd.modifier, in.count))
        return fail(PIB_CMD_STATUS_BAD_INDEX, "cmd-bad-index",
                    "WRITE_MTT of %u entries at %u outside an allocated range", in.count,
                    cmd.modifier);
    // Entries an MR reads as large pages must stay aligned to its page
    // size, as CREATE_MR checked them: else its translations would run
    // past the page the driver meant.
    const uint64_t pageSize = uint64_t{1} << mtt_.logPageSizeAt(cmd.modifier);
    static_assert(PIB_PAGE_SIZE == 1u << Mtt::kMinLogPage);
    for (uint32_t i = 0; i < in.count; ++i) {
        if (in.entries[i] % pageSize || in.entries[i] == 0)
            return fail(PIB_CMD_STATUS_BAD_PARAM, "cmd-bad-param",
                        "WRITE_MTT entry %u: 0x%" PRIx64 " is not a %" PRIu64 "-byte page address",
                        i, in.entries[i], pageSize);
    }
    for (uint32_t i = 0; i < in.count; ++i)
        mtt_.write(cmd.modifier + i, in.entries[i]);
    return {};
}

bool Firmware::validRing(const pib_buf_desc &buf, uint64_t pages) const {
    return buf.npages == pages && mtt_.covers(buf.mtt_index, buf.npages);
}

} // namespace pib
