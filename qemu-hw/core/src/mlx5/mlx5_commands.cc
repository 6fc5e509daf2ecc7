// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_commands.hh"

#include <algorithm>
#include <cstdarg>
#include <cstring>
#include <vector>

#include "mlx5_ifc.hh"
#include "trace.hh"

namespace pib::mlx5 {

namespace {

// Fields of the commands' inputs and outputs (mlx5_ifc.h), each where its
// `ifc:` structure has it (the commands a comment names put it there too).
// Also disable_hca_in's, query_pages_in's and manage_pages_in's:
constexpr Field kFunctionId = field(0x50, 16);           // ifc: enable_hca_in.function_id
constexpr Field kEmbeddedCpuFunction = field(0x40, 1);   // ifc: enable_hca_in.embedded_cpu_function
constexpr Field kQueryPagesNumPages = field(0x60, 32);   // ifc: query_pages_out.num_pages
constexpr Field kManagePagesInEntries = field(0x60, 32); // ifc: manage_pages_in.input_num_entries
constexpr Field kManagePagesOutEntries =
    field(0x40, 32);                         // ifc: manage_pages_out.output_num_entries
constexpr uint32_t kManagePagesArray = 0x10; // the 64-bit page addresses, in and out
// Also set_issi_in's:
constexpr Field kCurrentIssi = field(0x50, 16);    // ifc: query_issi_out.current_issi
constexpr Field kSupportedIssi = field(0x360, 32); // ifc: query_issi_out.supported_issi_dw0
constexpr Field kRegisterId = field(0x50, 16);     // ifc: access_register_in.register_id
constexpr Field kAdapterIeeeVendorId =
    field(0x148, 24); // ifc: query_adapter_out.query_adapter_struct.ieee_vendor_id
constexpr Field kAdapterVsdVendorId =
    field(0x170, 16); // ifc: query_adapter_out.query_adapter_struct.vsd_vendor_id
constexpr uint32_t kAdapterPsid = 0x100;         // vsd_contd_psid, 16 bytes
constexpr Field kTeardownState = field(0x7f, 1); // ifc: teardown_hca_out.state
// Also dealloc_uar_in's:
constexpr Field kUar = field(0x48, 24); // ifc: alloc_uar_out.uar
// The pd or xrcd of every alloc_*_out and dealloc_*_in:
constexpr Field kHeld = field(0x48, 24); // ifc: alloc_pd_out.pd
// Also destroy_eq_in's:
constexpr Field kEqNumber = field(0x58, 8); // ifc: create_eq_out.eq_number
// Also destroy_cq_in's:
constexpr Field kCqNumber = field(0x48, 24); // ifc: create_cq_out.cqn
// Also the other *_srq_in's and arm_rq_in's:
constexpr Field kSrqNumber = field(0x48, 24); // ifc: create_srq_out.srqn
// Also destroy_qp_in's and query_qp_in's:
constexpr Field kQpNumber = field(0x48, 24); // ifc: create_qp_out.qpn
constexpr Field kArmRqLwm = field(0x70, 16); // ifc: arm_rq_in.lwm
// Also dealloc_q_counter_in's:
constexpr Field kCounterSetId = field(0x58, 8);       // ifc: alloc_q_counter_out.counter_set_id
constexpr Field kQCounterOtherVport = field(0x40, 1); // ifc: query_q_counter_in.other_vport
constexpr Field kQCounterClear = field(0xc0, 1);      // ifc: query_q_counter_in.clear
constexpr Field kQueryCounterSetId = field(0xf8, 8);  // ifc: query_q_counter_in.counter_set_id

// query_q_counter_out's counters and the transport counters they are.
// rx_dct_connect is not counted (0); of the enhanced error counters, which
// the device does not offer (enhanced_error_q_counters 0), the two the
// transport counts are filled all the same.
struct QCounter {
    Field field;
    uint64_t pib_port_counters::*counter;
    uint64_t pib_port_counters::*plus = nullptr; // a second one it sums
};
constexpr QCounter kQCounters[] = {
    {field(0x080, 32), &pib_port_counters::write_requests},  // rx_write_requests
    {field(0x0c0, 32), &pib_port_counters::read_requests},   // rx_read_requests
    {field(0x100, 32), &pib_port_counters::atomic_requests}, // rx_atomic_requests
    // out_of_buffer: for want of a receive WQE, RC's RNR NAKs and UC's and
    // UD's drops.
    {field(0x180, 32), &pib_port_counters::rnr_naks_sent, &pib_port_counters::receives_dropped},
    {field(0x1c0, 32), &pib_port_counters::out_of_seq_requests}, // out_of_sequence
    {field(0x200, 32), &pib_port_counters::duplicate_requests},  // duplicate_request
    {field(0x240, 32), &pib_port_counters::rnr_naks_received},   // rnr_nak_retry_err
    {field(0x280, 32), &pib_port_counters::seq_naks_received},   // packet_seq_err
    {field(0x2c0, 32), &pib_port_counters::implied_naks},        // implied_nak_seq_err
    {field(0x300, 32), &pib_port_counters::ack_timeouts},        // local_ack_timeout_err
    {field(0x380, 32), &pib_port_counters::rnr_retry_exceeded},  // req_rnr_retries_exceeded
    {field(0x5a0, 32), &pib_port_counters::retry_exceeded},      // req_transport_retries_exceeded
};
constexpr uint16_t kArmRqSrq = 1; // arm_rq_in's op_mod for an SRQ

constexpr uint16_t kIssi = 0; // the only one: supported_issi bit 0
constexpr uint16_t kAccessRegWrite = 0, kAccessRegRead = 1;
constexpr uint16_t kManagePagesFail = 0, kManagePagesGive = 1, kManagePagesTake = 2;
constexpr char kPsid[] = "PIB0000000001"; // board_id, as ibstat shows it

} // namespace

// What the commands shared with the pib personality refuse with.
const Refusals Commands::kRefusals{err::kMlx5CmdBadResource, err::kMlx5CmdBadParam,
                                   err::kMlx5CmdNoResources, err::kMlx5CmdInUse};

// clang-format off
const std::array<Commands::Spec, 69> Commands::kTable = {{
    {0x100, "QUERY_HCA_CAP", 0x10, 0x10, State::kEnabled, &Commands::queryHcaCap},
    {0x101, "QUERY_ADAPTER", 0x10, 0x110, State::kEnabled, &Commands::queryAdapter},
    {0x102, "INIT_HCA", 0x10, 0x10, State::kEnabled, &Commands::initHca},
    {0x103, "TEARDOWN_HCA", 0x10, 0x10, State::kInitialized, &Commands::teardownHca},
    {0x104, "ENABLE_HCA", 0x10, 0x10, State::kDisabled, &Commands::enableHca},
    {0x105, "DISABLE_HCA", 0x10, 0x10, State::kEnabled, &Commands::disableHca},
    {0x107, "QUERY_PAGES", 0x10, 0x10, State::kEnabled, &Commands::queryPages},
    {0x108, "MANAGE_PAGES", 0x10, 0x10, State::kEnabled, &Commands::managePages},
    {0x109, "SET_HCA_CAP", 0x10 + HcaCaps::kPageBytes, 0x10, State::kEnabled, &Commands::setHcaCap},
    {0x10a, "QUERY_ISSI", 0x10, 0x70, State::kEnabled, &Commands::queryIssi},
    {0x10b, "SET_ISSI", 0x10, 0x10, State::kEnabled, &Commands::setIssi},
    {0x805, "ACCESS_REG", 0x10, 0x10, State::kEnabled, &Commands::accessRegister},
    {0x802, "ALLOC_UAR", 0x10, 0x10, State::kInitialized, &Commands::allocUar},
    {0x803, "DEALLOC_UAR", 0x10, 0x10, State::kInitialized, &Commands::deallocUar},
    {0x301, "CREATE_EQ", 0x110, 0x10, State::kInitialized, &Commands::createEq},
    {0x302, "DESTROY_EQ", 0x10, 0x10, State::kInitialized, &Commands::destroyEq},
    {0x400, "CREATE_CQ", 0x110, 0x10, State::kInitialized, &Commands::createCq},
    {0x401, "DESTROY_CQ", 0x10, 0x10, State::kInitialized, &Commands::destroyCq},
    {0x402, "QUERY_CQ", 0x10, 0x50, State::kInitialized, &Commands::queryCq},
    {0x403, "MODIFY_CQ", 0x110, 0x10, State::kInitialized, &Commands::modifyCq},
    {0x700, "CREATE_SRQ", 0x110, 0x10, State::kInitialized, &Commands::createSrq},
    {0x701, "DESTROY_SRQ", 0x10, 0x10, State::kInitialized, &Commands::destroySrq},
    {0x702, "QUERY_SRQ", 0x10, 0x50, State::kInitialized, &Commands::querySrq},
    {0x703, "ARM_RQ", 0x10, 0x10, State::kInitialized, &Commands::armRq},
    // XRC SRQs are the SRQs above (every SRQ names an XRC domain), their
    // context the same fields at the same places (docs/mlx5.md §9).
    {0x705, "CREATE_XRC_SRQ", 0x110, 0x10, State::kInitialized, &Commands::createSrq},
    {0x706, "DESTROY_XRC_SRQ", 0x10, 0x10, State::kInitialized, &Commands::destroySrq},
    {0x707, "QUERY_XRC_SRQ", 0x10, 0x50, State::kInitialized, &Commands::querySrq},
    {0x708, "ARM_XRC_SRQ", 0x10, 0x10, State::kInitialized, &Commands::armRq},
    {0x50d, "MAD_IFC", 0x110, 0x110, State::kInitialized, &Commands::madIfc},
    {0x762, "QUERY_HCA_VPORT_CONTEXT", 0x10, 0x210, State::kInitialized, &Commands::queryHcaVportContext},
    {0x800, "ALLOC_PD", 0x10, 0x10, State::kInitialized, &Commands::allocPd},
    {0x801, "DEALLOC_PD", 0x10, 0x10, State::kInitialized, &Commands::deallocPd},
    {0x80e, "ALLOC_XRCD", 0x10, 0x10, State::kInitialized, &Commands::allocXrcd},
    {0x80f, "DEALLOC_XRCD", 0x10, 0x10, State::kInitialized, &Commands::deallocXrcd},
    // Known by name, so that a trace names what a driver asked for.
    {0x10d, "SET_DRIVER_VERSION", 0, 0, State::kInitialized, nullptr},
    {0x200, "CREATE_MKEY", 0x110, 0x10, State::kInitialized, &Commands::createMkey},
    {0x202, "DESTROY_MKEY", 0x10, 0x10, State::kInitialized, &Commands::destroyMkey},
    {0x203, "QUERY_SPECIAL_CONTEXTS", 0x10, 0x20, State::kInitialized, &Commands::querySpecialContexts},
    {0x204, "PAGE_FAULT_RESUME", 0x10, 0x10, State::kInitialized, &Commands::pageFaultResume},
    {0x500, "CREATE_QP", 0x110, 0x10, State::kInitialized, &Commands::createQp},
    {0x501, "DESTROY_QP", 0x10, 0x10, State::kInitialized, &Commands::destroyQp},
    {0x502, "RST2INIT_QP", 0x100, 0x10, State::kInitialized, &Commands::changeQpState},
    {0x503, "INIT2RTR_QP", 0x100, 0x10, State::kInitialized, &Commands::changeQpState},
    {0x504, "RTR2RTS_QP", 0x100, 0x10, State::kInitialized, &Commands::changeQpState},
    {0x505, "RTS2RTS_QP", 0x100, 0x10, State::kInitialized, &Commands::changeQpState},
    {0x506, "SQERR2RTS_QP", 0x100, 0x10, State::kInitialized, &Commands::changeQpState},
    {0x507, "2ERR_QP", 0x10, 0x10, State::kInitialized, &Commands::changeQpState},
    {0x50a, "2RST_QP", 0x10, 0x10, State::kInitialized, &Commands::changeQpState},
    {0x50b, "QUERY_QP", 0x10, 0x100, State::kInitialized, &Commands::queryQp},
    {0x50c, "SQD_RTS_QP", 0x100, 0x10, State::kInitialized, &Commands::changeQpState},
    {0x50e, "INIT2INIT_QP", 0x100, 0x10, State::kInitialized, &Commands::changeQpState},
    {0x710, "CREATE_DCT", 0x80, 0x10, State::kInitialized, &Commands::createDct},
    {0x711, "DESTROY_DCT", 0x10, 0x10, State::kInitialized, &Commands::destroyDct},
    {0x712, "DRAIN_DCT", 0x10, 0x10, State::kInitialized, &Commands::drainDct},
    {0x713, "QUERY_DCT", 0x10, 0x80, State::kInitialized, &Commands::queryDct},
    {0x714, "ARM_DCT_FOR_KEY_VIOLATION", 0x10, 0x10, State::kInitialized, &Commands::armDct},
    {0x771, "ALLOC_Q_COUNTER", 0x10, 0x10, State::kInitialized, &Commands::allocQCounter},
    {0x772, "DEALLOC_Q_COUNTER", 0x10, 0x10, State::kInitialized, &Commands::deallocQCounter},
    {0x773, "QUERY_Q_COUNTER", 0x20, 0x100, State::kInitialized, &Commands::queryQCounter},
    {0x806, "ATTACH_TO_MCG", 0x20, 0x10, State::kInitialized, &Commands::attachToMcg},
    {0x807, "DETACH_FROM_MCG", 0x20, 0x10, State::kInitialized, &Commands::detachFromMcg},
    {0xa04, "CREATE_UCTX", 0x40, 0x10, State::kInitialized, &Commands::createUctx},
    {0xa06, "DESTROY_UCTX", 0x10, 0x10, State::kInitialized, &Commands::destroyUctx},
    {0xa08, "CREATE_UMEM", 0x30, 0x10, State::kInitialized, &Commands::createUmem},
    {0xa0a, "DESTROY_UMEM", 0x10, 0x10, State::kInitialized, &Commands::destroyUmem},
    {0xa00, "CREATE_GENERAL_OBJECT", 0x10, 0x10, State::kInitialized, &Commands::createGeneralObject},
    {0xa01, "MODIFY_GENERAL_OBJECT", 0x10, 0x10, State::kInitialized, &Commands::modifyGeneralObject},
    {0xa02, "QUERY_GENERAL_OBJECT", 0x10, 0x10, State::kInitialized, &Commands::queryGeneralObject},
    {0xa03, "DESTROY_GENERAL_OBJECT", 0x10, 0x10, State::kInitialized, &Commands::destroyGeneralObject},
}};
// clang-format on

const Commands::Spec *Commands::find(uint16_t opcode) {
    const auto it = std::find_if(kTable.begin(), kTable.end(),
                                 [&](const Spec &s) { return s.opcode == opcode; });
    return it == kTable.end() ? nullptr : &*it;
}

uint32_t Commands::inputBytes(uint16_t opcode) {
    const Spec *spec = find(opcode);
    return spec ? spec->inBytes : 0;
}

const char *Commands::name(uint16_t opcode) {
    const Spec *spec = find(opcode);
    return spec ? spec->name : "unknown";
}

std::optional<uint16_t> Commands::opcodeOf(std::string_view name) {
    const auto it =
        std::find_if(kTable.begin(), kTable.end(), [&](const Spec &s) { return name == s.name; });
    return it == kTable.end() ? std::nullopt : std::optional<uint16_t>(it->opcode);
}

namespace {

// The statuses `inject command` takes by name: MLX5_CMD_STAT_* without
// their prefix, as the kernel's device.h names them.
constexpr InjectionName kMlx5StatusNames[] = {
    {"INT_ERR", status::kInternal},
    {"BAD_OP_ERR", status::kBadOpcode},
    {"BAD_PARAM_ERR", status::kBadParam},
    {"BAD_SYS_STATE_ERR", status::kBadSystemState},
    {"BAD_RES_ERR", status::kBadResource},
    {"RES_BUSY", status::kResourceBusy},
    {"LIM_ERR", status::kLimit},
    {"BAD_RES_STATE_ERR", status::kBadResourceState},
    {"IX_ERR", status::kBadIndex},
    {"NO_RES_ERR", status::kNoResources},
    {"BAD_QP_STATE_ERR", status::kBadQpState},
    {"BAD_INP_LEN_ERR", status::kBadInputLength},
    {"BAD_OUTP_LEN_ERR", status::kBadOutputLength},
};

} // namespace

CommandWords Commands::commandWords() {
    return {opcodeOf, kMlx5StatusNames};
}

const err::Condition *Commands::fail(const err::Condition &why, const char *fmt, ...) const {
    va_list args;
    va_start(args, fmt);
    host_.vguestError(why, fmt, args);
    va_end(args);
    return &why;
}

void Commands::execute(unsigned slot, std::span<const uint8_t> in, std::span<uint8_t> out) {
    const uint16_t opcode = static_cast<uint16_t>(get(in, kOpcode));
    const Request r{in, out, static_cast<uint16_t>(get(in, kOpMod)), opcode};
    // Work the driver handed over before this command is done first, as
    // a hardware's send engine is far ahead of its firmware.
    core_.dataPath.settleBeforeCommand();
    const Spec *spec = find(opcode);
    const err::Condition *why = admit(spec, opcode, r);
    if (!why && !core_.injections.empty())
        if (const std::optional<uint8_t> injected = core_.injections.takeCommand(opcode)) {
            trace::inject_command(host_, spec->name, opcode, *injected);
            answerFailed(slot, r, *injected, err::kHostInjected.syndrome);
            return;
        }
    if (!why)
        why = (this->*spec->handler)(r);
    if (why)
        answerFailed(slot, r, why->mlx5Status, why->syndrome);
    else
        trace::mlx5_command(host_, slot, name(opcode), opcode, r.opMod, status::kOk, 0);
}

// A failed command answers its status and syndrome, and nothing else.
void Commands::answerFailed(unsigned slot, const Request &r, uint8_t status, uint32_t syndrome) {
    std::fill(r.out.begin(), r.out.end(), 0);
    std::span<uint8_t> header = r.out.first(std::min<size_t>(r.out.size(), kHeaderBytes));
    set(header, kStatus, status);
    set(header, kSyndrome, syndrome);
    trace::mlx5_command(host_, slot, name(r.opcode), r.opcode, r.opMod, status, syndrome);
}

// The checks every command passes before its handler runs.
const err::Condition *Commands::admit(const Spec *spec, uint16_t opcode, const Request &r) const {
    if (fatal_)
        return &err::kDeviceFatal;
    if (!spec || !spec->handler)
        return fail(err::kMlx5CmdBadOpcode, "opcode 0x%04x (%s)", opcode, name(opcode));
    if (state_ < spec->needs)
        return fail(err::kMlx5CmdBadState, "%s before %s", spec->name,
                    state_ == State::kDisabled ? "ENABLE_HCA" : "INIT_HCA");
    if (r.in.size() < spec->inBytes)
        return fail(err::kMlx5CmdShortInput, "%s: %zu bytes of input, %u needed", spec->name,
                    r.in.size(), spec->inBytes);
    if (r.out.size() < spec->outBytes)
        return fail(err::kMlx5CmdShortOutput, "%s: %zu bytes of output, %u needed", spec->name,
                    r.out.size(), spec->outBytes);
    return admitCaller(*spec, r);
}

void Commands::reset() {
    state_ = State::kDisabled;
    fatal_ = false;
    caps_.reset();
    pages_.reset();
    uars_.reset();
    eqs_.reset();
    dcts_.reset();
    registers_.reset();
    uctxs_.reset();
    umems_.reset();
    generalObjects_.reset();
}

// ---- The function's life ------------------------------------------------

// Commands that name a function: this device is function 0, a PF with no
// embedded CPU.
const err::Condition *Commands::notThisFunction(const Request &r, const char *command) const {
    if (get(r.in, kFunctionId) == 0 && !get(r.in, kEmbeddedCpuFunction))
        return nullptr;
    return fail(err::kMlx5CmdBadParam, "%s of function %u: this is function 0", command,
                static_cast<unsigned>(get(r.in, kFunctionId)));
}

const err::Condition *Commands::enableHca(const Request &r) {
    if (const err::Condition *why = notThisFunction(r, "ENABLE_HCA"))
        return why;
    if (state_ == State::kDisabled)
        state_ = State::kEnabled;
    return nullptr;
}

const err::Condition *Commands::disableHca(const Request &r) {
    if (const err::Condition *why = notThisFunction(r, "DISABLE_HCA"))
        return why;
    if (state_ == State::kInitialized)
        return fail(err::kMlx5CmdBadState, "DISABLE_HCA before TEARDOWN_HCA");
    state_ = State::kDisabled;
    return nullptr;
}

const err::Condition *Commands::initHca(const Request &) {
    if (state_ == State::kInitialized)
        return fail(err::kMlx5CmdBadState, "INIT_HCA twice");
    state_ = State::kInitialized;
    return nullptr;
}

// Graceful or forced, the function is back to where INIT_HCA found it.
const err::Condition *Commands::teardownHca(const Request &r) {
    state_ = State::kEnabled;
    // What the function made since INIT_HCA goes with it.
    eqs_.reset();
    uars_.reset();
    dcts_.reset();
    uctxs_.reset();
    umems_.reset();
    generalObjects_.reset();
    core_.endObjects();
    set(r.out, kTeardownState, 0); // a forced teardown is done
    return nullptr;
}

const err::Condition *Commands::queryIssi(const Request &r) {
    set(r.out, kCurrentIssi, kIssi);
    set(r.out, kSupportedIssi, 1u << kIssi);
    return nullptr;
}

const err::Condition *Commands::setIssi(const Request &r) {
    if (get(r.in, kCurrentIssi) != kIssi)
        return fail(err::kMlx5CmdBadParam, "SET_ISSI %u: the device supports ISSI %u only",
                    static_cast<unsigned>(get(r.in, kCurrentIssi)), kIssi);
    return nullptr;
}

// ---- Capabilities and identity -----------------------------------------

const err::Condition *Commands::queryHcaCap(const Request &r) {
    const uint16_t type = r.opMod >> 1;
    const HcaCaps::Page *page = caps_.page(type, r.opMod & 1);
    if (!page)
        return fail(err::kMlx5CmdBadParam, "QUERY_HCA_CAP of capability type 0x%x", type);
    // As much of the page as the output holds: a DEVX process may ask
    // for the part its own layout has (pyverbs' general page is 2 KiB).
    const size_t room = std::min(r.out.size() - kHeaderBytes, page->size());
    std::copy_n(page->begin(), room, r.out.begin() + kHeaderBytes);
    return nullptr;
}

const err::Condition *Commands::setHcaCap(const Request &r) {
    if (state_ == State::kInitialized)
        return fail(err::kMlx5CmdBadState, "SET_HCA_CAP after INIT_HCA");
    const err::Condition *why =
        caps_.apply(host_, r.opMod >> 1, r.in.subspan(kHeaderBytes, HcaCaps::kPageBytes));
    eqs_.useMemoryPageFaults(caps_.memoryPageFaults());
    return why;
}

const err::Condition *Commands::queryAdapter(const Request &r) {
    set(r.out, kAdapterIeeeVendorId, identity::kOui);
    set(r.out, kAdapterVsdVendorId, identity::kPciVendorId);
    std::memcpy(r.out.data() + kAdapterPsid, kPsid, sizeof(kPsid) - 1);
    return nullptr;
}

const err::Condition *Commands::accessRegister(const Request &r) {
    const uint16_t id = static_cast<uint16_t>(get(r.in, kRegisterId));
    const uint32_t bytes = Registers::size(id);
    if (!bytes)
        return fail(err::kMlx5CmdBadParam, "ACCESS_REG of register 0x%04x", id);
    if (r.opMod != kAccessRegWrite && r.opMod != kAccessRegRead)
        return fail(err::kMlx5CmdBadParam, "ACCESS_REG op_mod %u", r.opMod);
    if (r.in.size() < kHeaderBytes + bytes || r.out.size() < kHeaderBytes + bytes)
        return fail(r.in.size() < kHeaderBytes + bytes ? err::kMlx5CmdShortInput
                                                       : err::kMlx5CmdShortOutput,
                    "ACCESS_REG of %s: its %u bytes do not fit", Registers::name(id), bytes);
    const bool write = r.opMod == kAccessRegWrite;
    if (const char *bad =
            registers_.access(id, write, r.in.subspan(kHeaderBytes), r.out.subspan(kHeaderBytes)))
        return fail(err::kMlx5CmdBadParam, "ACCESS_REG of %s: %s", Registers::name(id), bad);
    trace::mlx5_access_reg(host_, id, Registers::name(id), write ? 1 : 0);
    return nullptr;
}

// ---- Pages --------------------------------------------------------------

const err::Condition *Commands::queryPages(const Request &r) {
    if (r.opMod < 1 || r.opMod > 3)
        return fail(err::kMlx5CmdBadParam, "QUERY_PAGES op_mod %u", r.opMod);
    if (const err::Condition *why = notThisFunction(r, "QUERY_PAGES"))
        return why;
    set(r.out, kQueryPagesNumPages, pages_.wanted(static_cast<FunctionPages::Stage>(r.opMod)));
    return nullptr;
}

const err::Condition *Commands::managePages(const Request &r) {
    if (const err::Condition *why = notThisFunction(r, "MANAGE_PAGES"))
        return why;
    const uint64_t count = get(r.in, kManagePagesInEntries);
    switch (r.opMod) {
    case kManagePagesFail: // the driver had no pages for the device
        return nullptr;
    case kManagePagesGive: {
        if (count > (r.in.size() - kManagePagesArray) / 8)
            return fail(err::kMlx5CmdShortInput, "MANAGE_PAGES: %llu pages in %zu bytes",
                        static_cast<unsigned long long>(count), r.in.size());
        std::vector<uint64_t> pages(count);
        for (size_t i = 0; i < count; ++i)
            pages[i] = readBe64(r.in.data() + kManagePagesArray + 8 * i);
        return pages_.give(pages);
    }
    case kManagePagesTake: {
        const size_t room = (r.out.size() - kManagePagesArray) / 8;
        const std::vector<uint64_t> back =
            pages_.take(static_cast<uint32_t>(std::min<uint64_t>({count, room, UINT32_MAX})));
        for (size_t i = 0; i < back.size(); ++i)
            writeBe64(r.out.data() + kManagePagesArray + 8 * i, back[i]);
        set(r.out, kManagePagesOutEntries, back.size());
        return nullptr;
    }
    default:
        return fail(err::kMlx5CmdBadParam, "MANAGE_PAGES op_mod %u", r.opMod);
    }
}

// ---- UAR pages and EQs (§6, §7) -----------------------------------------

const err::Condition *Commands::allocUar(const Request &r) {
    const auto index = uars_.alloc(static_cast<Owner>(get(r.in, kUid)));
    if (!index)
        return fail(err::kMlx5CmdNoResources, "ALLOC_UAR: every UAR page is given");
    set(r.out, kUar, *index);
    trace::mlx5_uar(host_, "given", *index);
    return nullptr;
}

const err::Condition *Commands::deallocUar(const Request &r) {
    const auto index = static_cast<uint32_t>(get(r.in, kUar));
    if (!uars_.given(index))
        return fail(err::kMlx5CmdBadResource, "DEALLOC_UAR of UAR %u, which is not given", index);
    // A CQ may outlive its page: libmlx5 frees its CQ doorbell page when
    // the context closes, before the kernel destroys the CQs an
    // application left, and the hardware takes it. The CQ keeps the
    // number: an arm doorbell on a page not given is refused (§6), and
    // one on the page given out again arms it, as on a ConnectX. An EQ's
    // page is the driver's own: that one is refused.
    if (eqs_.usesUar(index))
        return fail(err::kMlx5CmdInUse, "DEALLOC_UAR of UAR %u: an EQ has its doorbell there",
                    index);
    uars_.free(index);
    trace::mlx5_uar(host_, "taken back", index);
    return nullptr;
}

const err::Condition *Commands::createEq(const Request &r) {
    uint32_t eqn = 0;
    if (const err::Condition *why = eqs_.create(r.in, eqn))
        return why;
    set(r.out, kEqNumber, eqn);
    return nullptr;
}

const err::Condition *Commands::destroyEq(const Request &r) {
    const auto eqn = static_cast<uint32_t>(get(r.in, kEqNumber));
    if (const uint32_t cqs = eqs_.holders(eqn))
        return fail(err::kMlx5CmdInUse, "DESTROY_EQ of EQ %u, which %u CQs report to", eqn, cqs);
    if (!eqs_.destroy(eqn))
        return fail(err::kMlx5CmdBadResource, "DESTROY_EQ of EQ %u, which does not exist", eqn);
    return nullptr;
}

// A DEVX CQ's ring and record may be in UMEMs (mlx5_commands_umem.cc).
const err::Condition *Commands::createCq(const Request &r) {
    std::vector<uint8_t> placed;
    UmemHold held;
    if (const err::Condition *why = placeInUmems(r, kCqUmemFields, &placed, &held))
        return why;
    uint32_t cqn = 0;
    if (const err::Condition *why = cqs_.create(placed, cqn))
        return why;
    umems_.hold('c', cqn, held);
    set(r.out, kCqNumber, cqn);
    return nullptr;
}

const err::Condition *Commands::destroyCq(const Request &r) {
    const auto cqn = static_cast<uint32_t>(get(r.in, kCqNumber));
    const err::Condition *why = cqs_.destroy(cqn);
    if (!why)
        umems_.release('c', cqn);
    return why;
}

const err::Condition *Commands::queryCq(const Request &r) {
    return cqs_.query(static_cast<uint32_t>(get(r.in, kCqNumber)), r.out, fromKernel(r));
}

// Event moderation (op_mod 0) or the resize (op_mod 1).
const err::Condition *Commands::modifyCq(const Request &r) {
    constexpr uint16_t kModerate = 0, kResize = 1; // MLX5_CQ_OPMOD_RESIZE
    if (r.opMod == kModerate)
        return cqs_.moderate(r.in);
    if (r.opMod != kResize)
        return fail(err::kMlx5CmdBadParam, "MODIFY_CQ op_mod %u: moderation (0) or resize (1)",
                    r.opMod);
    return cqs_.resize(r.in);
}

// ---- SRQs ----------------------------------------------------------------

const err::Condition *Commands::createSrq(const Request &r) {
    uint32_t srqn = 0;
    if (const err::Condition *why = srqs_.create(r.in, srqn))
        return why;
    set(r.out, kSrqNumber, srqn);
    return nullptr;
}

// The DC targets (mlx5_dc_targets.hh): create_dct_out and the other
// commands' inputs name one at the same place.
constexpr Field kDctNumber = field(0x48, 24);

const err::Condition *Commands::createDct(const Request &r) {
    uint32_t dctn = 0;
    if (const err::Condition *why = dcts_.create(r.in, dctn))
        return why;
    set(r.out, kDctNumber, dctn);
    return nullptr;
}

const err::Condition *Commands::destroyDct(const Request &r) {
    return dcts_.destroy(static_cast<uint32_t>(get(r.in, kDctNumber)));
}

const err::Condition *Commands::drainDct(const Request &r) {
    return dcts_.drain(static_cast<uint32_t>(get(r.in, kDctNumber)));
}

const err::Condition *Commands::armDct(const Request &r) {
    return dcts_.arm(static_cast<uint32_t>(get(r.in, kDctNumber)));
}

const err::Condition *Commands::queryDct(const Request &r) {
    return dcts_.query(static_cast<uint32_t>(get(r.in, kDctNumber)), r.out);
}

const err::Condition *Commands::destroySrq(const Request &r) {
    return srqs_.destroy(static_cast<uint32_t>(get(r.in, kSrqNumber)));
}

const err::Condition *Commands::querySrq(const Request &r) {
    return srqs_.query(static_cast<uint32_t>(get(r.in, kSrqNumber)), r.out, fromKernel(r));
}

// ARM_RQ and ARM_XRC_SRQ set an SRQ's limit (op_mod 1 for both: an SRQ,
// an XRC SRQ); the device has no other kind of RQ object.
const err::Condition *Commands::armRq(const Request &r) {
    if (r.opMod != kArmRqSrq)
        return fail(err::kMlx5CmdBadParam, "ARM_RQ of op_mod %u: only SRQs", r.opMod);
    return srqs_.arm(static_cast<uint32_t>(get(r.in, kSrqNumber)),
                     static_cast<uint32_t>(get(r.in, kArmRqLwm)));
}

// ---- QPs -------------------------------------------------------------------

// A DEVX QP's ring and record may be in UMEMs (mlx5_commands_umem.cc).
const err::Condition *Commands::createQp(const Request &r) {
    std::vector<uint8_t> placed;
    UmemHold held;
    if (const err::Condition *why = placeInUmems(r, kQpUmemFields, &placed, &held))
        return why;
    uint32_t qpn = 0;
    if (const err::Condition *why = qps_.create(placed, qpn))
        return why;
    umems_.hold('q', qpn, held);
    set(r.out, kQpNumber, qpn);
    return nullptr;
}

const err::Condition *Commands::destroyQp(const Request &r) {
    const auto qpn = static_cast<uint32_t>(get(r.in, kQpNumber));
    const err::Condition *why = qps_.destroy(qpn);
    if (!why)
        umems_.release('q', qpn);
    return why;
}

const err::Condition *Commands::changeQpState(const Request &r) {
    return qps_.modify(r.opcode, r.in);
}

const err::Condition *Commands::queryQp(const Request &r) {
    return qps_.query(static_cast<uint32_t>(get(r.in, kQpNumber)), r.out, fromKernel(r));
}

const err::Condition *Commands::attachToMcg(const Request &r) {
    return qps_.attachMulticast(true, r.in);
}

const err::Condition *Commands::detachFromMcg(const Request &r) {
    return qps_.attachMulticast(false, r.in);
}

// ---- PDs and XRC domains: numbers the core's objects hold ----------------

template <class T>
const err::Condition *Commands::allocHeld(ObjectTable<T> &table, const Request &r, const char *what,
                                          Field numberField) {
    auto object = std::make_unique<T>();
    object->owner = static_cast<Owner>(get(r.in, kUid));
    const auto number = table.insert(std::move(object));
    if (!number)
        return fail(err::kMlx5CmdNoResources, "all %u %ss exist", table.capacity(), what);
    set(r.out, numberField, *number);
    return nullptr;
}

template <class T>
const err::Condition *Commands::releaseHeld(ObjectTable<T> &table, const Request &r,
                                            const char *what, Field numberField) {
    const uint64_t number = get(r.in, numberField);
    uint32_t refs = 0;
    switch (release(table, number, &refs)) {
    case Release::kMissing:
        return fail(err::kMlx5CmdBadResource, "%s %llu does not exist", what,
                    static_cast<unsigned long long>(number));
    case Release::kHeld:
        return fail(err::kMlx5CmdInUse, "%s %llu is used by %u objects", what,
                    static_cast<unsigned long long>(number), refs);
    case Release::kReleased:
        break;
    }
    return nullptr;
}

const err::Condition *Commands::allocPd(const Request &r) {
    return allocHeld(core_.objects.pds, r, "PD", kHeld);
}

const err::Condition *Commands::deallocPd(const Request &r) {
    return releaseHeld(core_.objects.pds, r, "PD", kHeld);
}

const err::Condition *Commands::allocXrcd(const Request &r) {
    return allocHeld(core_.objects.xrcds, r, "XRC domain", kHeld);
}

const err::Condition *Commands::deallocXrcd(const Request &r) {
    return releaseHeld(core_.objects.xrcds, r, "XRC domain", kHeld);
}

// Q counters (docs/mlx5.md §4.6): counter sets of the core's transport
// counters, which QPs are bound to by their context.
const err::Condition *Commands::allocQCounter(const Request &r) {
    return allocHeld(core_.objects.counterSets, r, "Q counter", kCounterSetId);
}

const err::Condition *Commands::deallocQCounter(const Request &r) {
    return releaseHeld(core_.objects.counterSets, r, "Q counter", kCounterSetId);
}

const err::Condition *Commands::queryQCounter(const Request &r) {
    if (get(r.in, kQCounterOtherVport))
        return fail(err::kMlx5CmdBadParam, "QUERY_Q_COUNTER of another vport");
    const auto number = static_cast<uint32_t>(get(r.in, kQueryCounterSetId));
    CounterSet *counters = core_.objects.counterSets.find(number);
    if (!counters)
        return fail(err::kMlx5CmdBadResource, "QUERY_Q_COUNTER: Q counter %u does not exist",
                    number);
    // Each is 32 bits wide and wraps, as a ConnectX's do.
    for (const QCounter &c : kQCounters)
        set(r.out, c.field,
            static_cast<uint32_t>(counters->counts.*c.counter +
                                  (c.plus ? counters->counts.*c.plus : 0)));
    if (get(r.in, kQCounterClear))
        counters->counts = {};
    return nullptr;
}

} // namespace pib::mlx5
