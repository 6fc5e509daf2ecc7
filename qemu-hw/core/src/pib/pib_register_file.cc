// SPDX-License-Identifier: GPL-2.0-or-later
#include "pib_register_file.hh"
#include "trace.hh"

#include <cinttypes>

#include "pib_hw.h"
#include "version.hh"

namespace pib {

RegisterFile::RegisterFile(const pib_core_config &config, const Host &host,
                           CommandProcessor &commands, PibEventQueues &events,
                           std::function<void()> requestReset)
    : config_(config), host_(host), commands_(commands), events_(events),
      requestReset_(std::move(requestReset)) {}

void RegisterFile::reset() {
    scratch_ = 0;
    fatal_ = false;
    cmdIn_ = cmdOut_ = cmdResult_ = 0;
    cmdModifier_ = cmdToken_ = cmdCtrl_ = cmdStatus_ = cmdSyndrome_ = 0;
}

// No command is ever in flight (each runs inside the write that starts
// it): the registers are all there is.
void RegisterFile::save(StateWriter &w) const {
    w.beginSection(stateTag("REGS"));
    w.u32(scratch_);
    w.u64(cmdIn_);
    w.u64(cmdOut_);
    w.u32(cmdModifier_);
    w.u32(cmdToken_);
    w.u32(cmdCtrl_);
    w.u32(cmdStatus_);
    w.u32(cmdSyndrome_);
    w.u64(cmdResult_);
    w.endSection();
}

// What the driver reads back is whatever was saved: no value of these
// sizes or indexes anything.
void RegisterFile::load(StateReader &r) {
    r.enterSection(stateTag("REGS"), "registers");
    scratch_ = r.u32();
    cmdIn_ = r.u64();
    cmdOut_ = r.u64();
    cmdModifier_ = r.u32();
    cmdToken_ = r.u32();
    cmdCtrl_ = r.u32();
    cmdStatus_ = r.u32();
    cmdSyndrome_ = r.u32();
    cmdResult_ = r.u64();
    r.leaveSection("registers");
}

static void setLow(uint64_t &reg, uint32_t v) {
    reg = (reg & ~uint64_t{0xffffffff}) | v;
}
static void setHigh(uint64_t &reg, uint32_t v) {
    reg = (reg & 0xffffffff) | uint64_t{v} << 32;
}

bool RegisterFile::readCommandRegister(uint64_t offset, uint32_t *value) const {
    switch (offset) {
    case PIB_REG_CMD_IN_LO:
        *value = static_cast<uint32_t>(cmdIn_);
        return true;
    case PIB_REG_CMD_IN_HI:
        *value = static_cast<uint32_t>(cmdIn_ >> 32);
        return true;
    case PIB_REG_CMD_OUT_LO:
        *value = static_cast<uint32_t>(cmdOut_);
        return true;
    case PIB_REG_CMD_OUT_HI:
        *value = static_cast<uint32_t>(cmdOut_ >> 32);
        return true;
    case PIB_REG_CMD_MODIFIER:
        *value = cmdModifier_;
        return true;
    case PIB_REG_CMD_TOKEN:
        *value = cmdToken_;
        return true;
    case PIB_REG_CMD_RESULT_LO:
        *value = static_cast<uint32_t>(cmdResult_);
        return true;
    case PIB_REG_CMD_RESULT_HI:
        *value = static_cast<uint32_t>(cmdResult_ >> 32);
        return true;
    // Commands complete within the write that starts them, so GO reads 0.
    case PIB_REG_CMD_CTRL:
        *value = cmdCtrl_ & ~PIB_CMD_CTRL_GO;
        return true;
    case PIB_REG_CMD_STATUS:
        *value = cmdStatus_;
        return true;
    case PIB_REG_CMD_SYNDROME:
        *value = cmdSyndrome_;
        return true;
    default:
        return false;
    }
}

bool RegisterFile::writeCommandRegister(uint64_t offset, uint32_t value) {
    switch (offset) {
    case PIB_REG_CMD_IN_LO:
        setLow(cmdIn_, value);
        return true;
    case PIB_REG_CMD_IN_HI:
        setHigh(cmdIn_, value);
        return true;
    case PIB_REG_CMD_OUT_LO:
        setLow(cmdOut_, value);
        return true;
    case PIB_REG_CMD_OUT_HI:
        setHigh(cmdOut_, value);
        return true;
    case PIB_REG_CMD_MODIFIER:
        cmdModifier_ = value;
        return true;
    case PIB_REG_CMD_TOKEN:
        cmdToken_ = value & 0xffff;
        return true;
    case PIB_REG_CMD_CTRL:
        runCommand(value);
        return true;
    default:
        return false;
    }
}

void RegisterFile::runCommand(uint32_t ctrl) {
    cmdCtrl_ = ctrl;
    if (!(ctrl & PIB_CMD_CTRL_GO))
        return;
    Command cmd;
    cmd.opcode = static_cast<uint16_t>(ctrl & PIB_CMD_CTRL_OPCODE_MASK);
    cmd.opmod = static_cast<uint8_t>(ctrl >> PIB_CMD_CTRL_OPMOD_SHIFT);
    cmd.modifier = cmdModifier_;
    cmd.in = cmdIn_;
    cmd.out = cmdOut_;
    if (fatal_) {
        trace::command_refused_fatal(host_, cmd.opcode);
        finish(CommandOutcome::failed(err::kDeviceFatal));
        return;
    }
    if ((ctrl & PIB_CMD_CTRL_EVENT) && !events_.hasAsyncEq()) {
        // Its completion could go nowhere: the command is refused, not run.
        host_.guestError(err::kCmdNoAsyncEq,
                         "command 0x%04x with EVENT but no async EQ (token 0x%04x): refused",
                         cmd.opcode, cmdToken_ & 0xffff);
        finish(CommandOutcome::failed(err::kCmdNoAsyncEq));
        return;
    }
    const CommandOutcome outcome = commands_.execute(cmd);
    finish(outcome);
    if (ctrl & PIB_CMD_CTRL_EVENT)
        events_.postCommandEvent(static_cast<uint16_t>(cmdToken_), outcome.status, outcome.result);
}

bool RegisterFile::writeEqDoorbell(uint64_t offset, uint32_t value) {
    if (offset < PIB_REG_EQ_DB_BASE || offset >= PIB_REG_EQ_DB(commands_.caps().max_eq))
        return false;
    const auto eqn = static_cast<uint32_t>((offset - PIB_REG_EQ_DB_BASE) / 8);
    if (fatal_)
        return true;
    events_.eqDoorbell(eqn, value, (offset - PIB_REG_EQ_DB_BASE) % 8 == PIB_EQ_DB_ARM);
    return true;
}

bool RegisterFile::validAccess(const char *dir, uint64_t offset, unsigned size) const {
    if (offset >= PIB_REGS_SIZE || size > PIB_REGS_SIZE - offset) {
        host_.guestError(err::kRegsOutOfRange, "%s of %u bytes at 0x%" PRIx64 " beyond BAR0", dir,
                         size, offset);
        return false;
    }
    if (size != 4) {
        host_.guestError(err::kRegsBadSize,
                         "%s of %u bytes at 0x%" PRIx64 " (registers are 32-bit)", dir, size,
                         offset);
        return false;
    }
    if (offset % 4 != 0) {
        host_.guestError(err::kRegsUnaligned, "%s at unaligned offset 0x%" PRIx64, dir, offset);
        return false;
    }
    return true;
}

uint64_t RegisterFile::read(uint64_t offset, unsigned size) {
    if (!validAccess("read", offset, size))
        return 0;
    switch (offset) {
    case PIB_REG_ID:
        return PIB_ID_MAGIC;
    case PIB_REG_IF_VERSION:
        return PIB_IF_VERSION_CURRENT;
    case PIB_REG_FW_VERSION:
        return PIB_FW_VERSION(kFirmwareMajor, kFirmwareMinor, kFirmwarePatch);
    case PIB_REG_RESET:
        return 0;
    case PIB_REG_STATUS:
        return fatal_ ? PIB_STATUS_FATAL : PIB_STATUS_READY;
    case PIB_REG_SCRATCH:
        return scratch_;
    case PIB_REG_NODE_GUID_LO:
        return static_cast<uint32_t>(config_.node_guid);
    case PIB_REG_NODE_GUID_HI:
        return static_cast<uint32_t>(config_.node_guid >> 32);
    case PIB_REG_NUM_DOORBELL_PAGES:
        return config_.doorbell_pages;
    case PIB_REG_NUM_MSIX_VECTORS:
        return config_.msix_vectors;
    case PIB_REG_NUM_PORTS:
        return config_.num_ports;
    case PIB_REG_CORE_CLOCK_LO:
        return static_cast<uint32_t>(host_.clockNs());
    case PIB_REG_CORE_CLOCK_HI:
        return static_cast<uint32_t>(host_.clockNs() >> 32);
    default:
        if (uint32_t value; readCommandRegister(offset, &value))
            return value;
        if (offset >= PIB_REG_EQ_DB_BASE && offset < PIB_REG_EQ_DB(commands_.caps().max_eq)) {
            host_.guestError(err::kRegsWriteOnly, "read of write-only EQ doorbell 0x%" PRIx64,
                             offset);
            return 0;
        }
        host_.guestError(err::kRegsBadOffset, "read of undefined register 0x%" PRIx64, offset);
        return 0;
    }
}

void RegisterFile::write(uint64_t offset, uint64_t value, unsigned size) {
    if (!validAccess("write", offset, size))
        return;
    const auto value32 = static_cast<uint32_t>(value);
    switch (offset) {
    case PIB_REG_RESET:
        if (value32 != PIB_RESET_MAGIC) {
            host_.guestError(
                err::kRegsBadReset,
                "reset register written with 0x%08" PRIx32 " instead of the reset magic", value32);
            return;
        }
        requestReset_();
        return;
    case PIB_REG_SCRATCH:
        scratch_ = value32;
        return;
    case PIB_REG_ID:
    case PIB_REG_IF_VERSION:
    case PIB_REG_FW_VERSION:
    case PIB_REG_STATUS:
    case PIB_REG_NODE_GUID_LO:
    case PIB_REG_NODE_GUID_HI:
    case PIB_REG_NUM_DOORBELL_PAGES:
    case PIB_REG_NUM_MSIX_VECTORS:
    case PIB_REG_NUM_PORTS:
    case PIB_REG_CORE_CLOCK_LO:
    case PIB_REG_CORE_CLOCK_HI:
    case PIB_REG_CMD_RESULT_LO:
    case PIB_REG_CMD_RESULT_HI:
    case PIB_REG_CMD_STATUS:
    case PIB_REG_CMD_SYNDROME:
        host_.guestError(err::kRegsReadOnly,
                         "write of 0x%08" PRIx32 " to read-only register 0x%" PRIx64, value32,
                         offset);
        return;
    default:
        if (writeCommandRegister(offset, value32) || writeEqDoorbell(offset, value32))
            return;
        host_.guestError(err::kRegsBadOffset,
                         "write of 0x%08" PRIx32 " to undefined register 0x%" PRIx64, value32,
                         offset);
        return;
    }
}

} // namespace pib
