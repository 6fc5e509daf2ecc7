// SPDX-License-Identifier: GPL-2.0-or-later
#include "fake_host.hh"
#include "frame.hh"

#include <algorithm>
#include <cstdlib>
#include <fcntl.h>
#include <random>
#include <stdexcept>
#include <string>
#include <unistd.h>

static void recordGuestError(void *opaque, unsigned error, const char *detail) {
    static_cast<FakeHost *>(opaque)->errors.push_back({pib_guest_error_token(error), detail});
}

// The normal path's events (a WQE from doorbell to completion), which a
// test asks for as a QEMU user names them with -trace: every packet and
// CQE of a long test would otherwise be recorded.
static bool isPathEvent(unsigned event) {
    switch (event) {
    case PIB_EVENT_DOORBELL:
    case PIB_EVENT_WQE_FETCHED:
    case PIB_EVENT_RECV_WQE_FETCHED:
    case PIB_EVENT_PACKET_SENT:
    case PIB_EVENT_PACKET_RECEIVED:
    case PIB_EVENT_CQE_WRITTEN:
    case PIB_EVENT_EQE_WRITTEN:
    case PIB_EVENT_MLX5_RQ_RECORD:
        return true;
    default:
        return false;
    }
}

// An event is recorded by its name, its arguments in the detail.
static void recordEvent(void *opaque, unsigned event, const uint64_t *args) {
    std::string detail;
    const char *kinds = pib_event_args(event);
    for (size_t i = 0; kinds[i]; ++i) {
        if (i)
            detail += ", ";
        detail += kinds[i] == 's' ? reinterpret_cast<const char *>(static_cast<uintptr_t>(args[i]))
                                  : std::to_string(args[i]);
    }
    static_cast<FakeHost *>(opaque)->traceLines.push_back({pib_event_name(event), detail});
}

// A host that lets DMA reach the device's own BAR0 (peer-to-peer, as a
// naive bus would): each aligned word becomes a register access, from
// inside whatever the core is doing.
static bool inBar0(uint64_t addr) {
    return addr >= FakeHost::kBar0Base && addr - FakeHost::kBar0Base < PIB_REGS_SIZE;
}

static void barDmaRead(FakeHost *host, uint64_t addr, uint8_t *buf, uint64_t len) {
    for (uint64_t i = 0; i + 4 <= len; i += 4) {
        const auto word = static_cast<uint32_t>(
            pib_core_bar_read(host->core, PIB_BAR_REGS, addr - FakeHost::kBar0Base + i, 4));
        std::memcpy(buf + i, &word, 4);
    }
    ++host->barDmas;
}

static void barDmaWrite(FakeHost *host, uint64_t addr, const uint8_t *buf, uint64_t len) {
    for (uint64_t i = 0; i + 4 <= len; i += 4) {
        uint32_t word;
        std::memcpy(&word, buf + i, 4);
        pib_core_bar_write(host->core, PIB_BAR_REGS, addr - FakeHost::kBar0Base + i, word, 4);
    }
    ++host->barDmas;
}

static int dmaRead(void *opaque, uint64_t addr, void *buf, uint64_t len) {
    auto *host = static_cast<FakeHost *>(opaque);
    if (host->throwOnNextDmaRead) {
        host->throwOnNextDmaRead = false;
        if (host->throwForeign)
            throw 42; // not a std::exception: it must not cross the C interface either
        throw std::logic_error("simulated internal error");
    }
    if (inBar0(addr)) {
        barDmaRead(host, addr, static_cast<uint8_t *>(buf), len);
        return 0;
    }
    if (!host->inRam(addr, len))
        return -1;
    std::memcpy(buf, host->at(addr), len);
    return 0;
}

static int dmaWrite(void *opaque, uint64_t addr, const void *buf, uint64_t len) {
    auto *host = static_cast<FakeHost *>(opaque);
    if (inBar0(addr)) {
        barDmaWrite(host, addr, static_cast<const uint8_t *>(buf), len);
        return 0;
    }
    if (!host->inRam(addr, len))
        return -1;
    std::memcpy(host->at(addr), buf, len);
    if (host->recordingDmaWrites)
        host->dmaWrites.push_back({addr, len});
    return 0;
}

// An ATOMIC WRITE's store: counted, so a test sees it took this path.
static int dmaStore64(void *opaque, uint64_t addr, uint64_t value) {
    auto *host = static_cast<FakeHost *>(opaque);
    if (addr % 8 || !host->inRam(addr, 8))
        return -1;
    for (unsigned i = 0; i < 8; ++i)
        host->at(addr)[i] = static_cast<uint8_t>(value >> (8 * i));
    ++host->stores64;
    return 0;
}

static const void *dmaMapRead(void *opaque, uint64_t addr, uint64_t len) {
    auto *host = static_cast<FakeHost *>(opaque);
    if (!host->mapping || !host->inRam(addr, len))
        return nullptr;
    ++host->mappings;
    ++host->mapped;
    return host->at(addr);
}

static void dmaUnmapRead(void *opaque, const void *, uint64_t) {
    --static_cast<FakeHost *>(opaque)->mappings;
}

static void msixNotify(void *opaque, unsigned vector) {
    static_cast<FakeHost *>(opaque)->interrupts.push_back(vector);
}

static int portSend(void *opaque, unsigned port, const void *buf, size_t len) {
    auto *host = static_cast<FakeHost *>(opaque);
    auto &out = host->portOutput[port];
    out.insert(out.end(), static_cast<const uint8_t *>(buf),
               static_cast<const uint8_t *>(buf) + len);
    host->portOutputPeak = std::max(host->portOutputPeak, out.size());
    if (out.size() < host->portQueueLimit)
        return PIB_PORT_SEND_OK;
    host->portFull[port] = true;
    return PIB_PORT_SEND_FULL;
}

// A ring offer: its bytes join the stream; its descriptors are kept
// (duplicated) with where in the stream they go, for a test or a host
// program to pass on.
static int portSendFds(void *opaque, unsigned port, const void *buf, size_t len, const int *fds,
                       size_t nfds) {
    auto *host = static_cast<FakeHost *>(opaque);
    if (!host->passesDescriptors || host->portOutput[port].size() > host->descriptorsBehindAtMost)
        return -1;
    FakeHost::PassedFds passed{host->portOutput[port].size(), {}};
    for (size_t i = 0; i < nfds; ++i)
        passed.fds.push_back(fcntl(fds[i], F_DUPFD_CLOEXEC, 0));
    host->passedFds[port].push_back(std::move(passed));
    portSend(opaque, port, buf, len);
    return 0;
}

static void portWatch(void *opaque, unsigned port, int fd) {
    static_cast<FakeHost *>(opaque)->watchedFd[port] = fd;
}

// A stream's backlog, as a host with sockets reports it: what the port
// sent that the test's cable has not taken, and what the test says waits.
static void portBacklog(void *opaque, unsigned port, uint64_t *untaken, uint64_t *unread) {
    const auto *host = static_cast<FakeHost *>(opaque);
    *untaken = host->reportsBacklog ? host->portOutput[port].size() : 0;
    *unread = host->reportsBacklog ? host->portUnread[port] : 0;
}

static void portDisconnect(void *opaque, unsigned port) {
    static_cast<FakeHost *>(opaque)->disconnects.push_back(port);
}

pib_core_config FakeHost::defaultConfig() {
    return pib_core_config{
        .node_guid = 0x0002c90300001234ull,
        .doorbell_pages = 16,
        .msix_vectors = 8,
        .num_ports = 1,
        .personality = PIB_PERSONALITY_PIB,
    };
}

FakeHost::FakeHost() : FakeHost(defaultConfig()) {}

// Guest RAM of hosts gone, for the next host: a fuzzer makes one host per
// input, and fresh pages for each would cost more than the input's work.
static std::vector<std::vector<uint8_t>> &ramPool() {
    static std::vector<std::vector<uint8_t>> pool;
    return pool;
}

static std::vector<uint8_t> takeRam(uint64_t size) {
    auto &pool = ramPool();
    for (auto it = pool.begin(); it != pool.end(); ++it) {
        if (it->size() == size) {
            std::vector<uint8_t> ram = std::move(*it);
            pool.erase(it);
            std::memset(ram.data(), 0, ram.size()); // not a loop the fuzzer instruments
            return ram;
        }
    }
    return std::vector<uint8_t>(size, 0);
}

const pib_host_ops &FakeHost::hostOps() {
    static const pib_host_ops ops = {
        .guest_error = recordGuestError,
        .guest_error_enabled =
            [](void *opaque, unsigned) {
                auto *host = static_cast<FakeHost *>(opaque);
                ++host->enabledQueries;
                return int{host->reporting};
            },
        .event = recordEvent,
        .event_enabled =
            [](void *opaque, unsigned event) {
                auto *host = static_cast<FakeHost *>(opaque);
                ++host->enabledQueries;
                return int{host->reporting && (host->tracingPath || !isPathEvent(event))};
            },
        .dma_read = dmaRead,
        .dma_write = dmaWrite,
        .dma_store64 = dmaStore64,
        .dma_map_read = dmaMapRead,
        .dma_unmap_read = dmaUnmapRead,
        .msix_notify = msixNotify,
        .port_send = portSend,
        .port_disconnect = portDisconnect,
        .port_send_fds = portSendFds,
        .port_watch = portWatch,
        .port_backlog = portBacklog,
        .clock_ns = [](void *opaque) { return static_cast<FakeHost *>(opaque)->now; },
        .timer_arm =
            [](void *opaque, uint64_t deadline) {
                static_cast<FakeHost *>(opaque)->timerDeadline = deadline;
            },
        .schedule = [](void *opaque) { ++static_cast<FakeHost *>(opaque)->scheduled; },
    };
    return ops;
}

FakeHost::FakeHost(const pib_core_config &config_, uint64_t ramSize)
    : config(config_), ram(takeRam(ramSize)) {
    core = pib_core_new(&config, &hostOps(), this);
    if (!core)
        throw std::runtime_error("pib_core_new rejected the configuration");
}

void FakeHost::replaceCore() {
    pib_core_free(core);
    timerDeadline = UINT64_MAX;
    scheduled = 0;
    for (int &fd : watchedFd)
        fd = -1;
    core = pib_core_new(&config, &hostOps(), this);
    if (!core)
        throw std::runtime_error("pib_core_new rejected the configuration");
}

std::vector<uint8_t> FakeHost::saveState(std::string *why) {
    void *state = nullptr;
    size_t len = 0;
    char *error = nullptr;
    const int result = pib_core_save(core, &state, &len, &error);
    if (why)
        *why = error ? error : "";
    std::vector<uint8_t> bytes;
    if (result == 0)
        bytes.assign(static_cast<uint8_t *>(state), static_cast<uint8_t *>(state) + len);
    std::free(state);
    std::free(error);
    return bytes;
}

std::string FakeHost::loadState(std::span<const uint8_t> state) {
    char *error = nullptr;
    const int result = pib_core_load(core, state.data(), state.size(), &error);
    std::string why = error ? error : "";
    std::free(error);
    return result == 0 ? "" : why.empty() ? "refused, no reason" : why;
}

std::string FakeHost::move() {
    std::string why;
    const std::vector<uint8_t> state = saveState(&why);
    if (state.empty())
        return "not saved: " + why;
    for (auto &out : portOutput)
        out.clear();
    replaceCore();
    why = loadState(state);
    if (!why.empty())
        return why;
    pib_core_port_connected(core, 1, 1);
    switchHello(PIB_WIRE_HELLO_RESUMES);
    return "";
}

FakeHost::~FakeHost() {
    pib_core_free(core);
    for (const auto &port : passedFds)
        for (const PassedFds &passed : port)
            for (int fd : passed.fds)
                close(fd);
    if (ramPool().size() < 4)
        ramPool().push_back(std::move(ram));
}

bool FakeHost::ownerWrittenLast(uint64_t entry, uint64_t size, uint64_t ownerByte) const {
    const uint64_t owner = entry + ownerByte;
    bool ownerWritten = false;
    for (const DmaWrite &w : dmaWrites) {
        if (w.addr >= entry + size || w.addr + w.len <= entry)
            continue; // not into this entry
        if (ownerWritten)
            return false; // the entry changed after its owner byte
        if (w.addr <= owner && owner < w.addr + w.len) {
            if (w.len != 1)
                return false; // the owner byte in one write with others
            ownerWritten = true;
        }
    }
    return ownerWritten;
}

size_t FakeHost::guestErrors(const std::string &what) const {
    bool known = what.empty();
    for (unsigned e = 0; e < PIB_GUEST_ERROR_COUNT; ++e)
        known |= what == pib_guest_error_token(e);
    if (!known)
        throw std::invalid_argument("no guest error " + what + " in qemu-hw/core/events.list");
    size_t n = 0;
    for (const auto &e : errors)
        n += what.empty() || e.what == what;
    return n;
}

size_t FakeHost::traces(const std::string &what) const {
    // A test that counts an event the core does not have would pass for
    // nothing.
    bool known = false;
    for (unsigned e = 0; e < PIB_EVENT_COUNT; ++e)
        known |= what == pib_event_name(e);
    if (!known)
        throw std::invalid_argument("no trace event " + what + " in qemu-hw/core/events.list");
    size_t n = 0;
    for (const auto &t : traceLines)
        n += t.what == what;
    return n;
}

uint64_t FakeHost::alloc(uint64_t bytes, uint64_t align) {
    const uint64_t addr = (ramNext + align - 1) / align * align;
    if (!inRam(addr, bytes))
        throw std::runtime_error("fake guest RAM exhausted");
    ramNext = addr + bytes;
    std::memset(at(addr), 0, bytes);
    return addr;
}

uint64_t FakeHost::allocRandom(uint64_t bytes, uint32_t seed) {
    const uint64_t addr = alloc(bytes);
    std::mt19937 random(seed);
    std::generate_n(at(addr), bytes, [&] { return static_cast<uint8_t>(random()); });
    return addr;
}

FakeHost::Outcome FakeHost::command(uint16_t opcode, uint32_t modifier, uint64_t in, uint64_t out,
                                    uint32_t ctrlFlags) {
    write32(PIB_BAR_REGS, PIB_REG_CMD_IN_LO, static_cast<uint32_t>(in));
    write32(PIB_BAR_REGS, PIB_REG_CMD_IN_HI, static_cast<uint32_t>(in >> 32));
    write32(PIB_BAR_REGS, PIB_REG_CMD_OUT_LO, static_cast<uint32_t>(out));
    write32(PIB_BAR_REGS, PIB_REG_CMD_OUT_HI, static_cast<uint32_t>(out >> 32));
    write32(PIB_BAR_REGS, PIB_REG_CMD_MODIFIER, modifier);
    write32(PIB_BAR_REGS, PIB_REG_CMD_CTRL, opcode | ctrlFlags | PIB_CMD_CTRL_GO);
    const uint64_t result = read32(PIB_BAR_REGS, PIB_REG_CMD_RESULT_LO) |
                            uint64_t{read32(PIB_BAR_REGS, PIB_REG_CMD_RESULT_HI)} << 32;
    return {read32(PIB_BAR_REGS, PIB_REG_CMD_STATUS), result};
}

pib_buf_desc FakeHost::ring(uint32_t pages, std::vector<uint64_t> *addrs) {
    const Outcome mtt = command(PIB_CMD_ALLOC_MTT, 0, pages);
    if (mtt.status != PIB_CMD_STATUS_OK)
        throw std::runtime_error("ALLOC_MTT failed");
    pib_mtt_write w{};
    w.count = pages;
    for (uint32_t i = 0; i < pages; ++i) {
        w.entries[i] = alloc(PIB_PAGE_SIZE);
        if (addrs)
            addrs->push_back(w.entries[i]);
    }
    if (commandIn(PIB_CMD_WRITE_MTT, static_cast<uint32_t>(mtt.result), w).status !=
        PIB_CMD_STATUS_OK)
        throw std::runtime_error("WRITE_MTT failed");
    return pib_buf_desc{static_cast<uint32_t>(mtt.result), pages};
}

// The result of a command that must succeed.
static uint32_t created(const FakeHost::Outcome &o, const char *what) {
    if (o.status != PIB_CMD_STATUS_OK)
        throw std::runtime_error(std::string(what) + " failed");
    return static_cast<uint32_t>(o.result);
}

FakeHost::Eq FakeHost::createEq(uint32_t logSize, uint16_t flags, uint16_t msixVector) {
    std::vector<uint64_t> pages;
    pib_eq_context eq{};
    eq.buf = ring(1, &pages);
    eq.log_size = logSize;
    eq.flags = flags;
    eq.msix_vector = msixVector;
    return {created(commandIn(PIB_CMD_CREATE_EQ, 0, eq), "CREATE_EQ"), pages.front()};
}

FakeHost::Cq FakeHost::createCq(uint32_t eqn, uint32_t uar, uint32_t logSize, uint32_t pages) {
    std::vector<uint64_t> addrs;
    pib_cq_context cq{};
    cq.buf = ring(pages, &addrs); // contiguous, as alloc() hands pages out in order
    cq.log_size = logSize;
    cq.eqn = eqn;
    cq.uar_page = uar;
    cq.ci_record = alloc(64, 64);
    return {created(commandIn(PIB_CMD_CREATE_CQ, 0, cq), "CREATE_CQ"), addrs.front(), cq.ci_record};
}

uint32_t FakeHost::createPhysicalMr(uint32_t pd, uint32_t access) {
    pib_mr_context mr{};
    mr.pdn = pd;
    mr.access = access;
    mr.flags = PIB_MR_PHYSICAL;
    mr.length = ~0ull;
    return created(commandIn(PIB_CMD_CREATE_MR, 0, mr), "CREATE_MR");
}

std::vector<uint8_t> FakeHost::asyncEvents(uint64_t eqPage, unsigned entries) {
    std::vector<uint8_t> events;
    for (unsigned i = 0; i < entries; ++i) {
        const auto e = peek<pib_eqe>(eqPage + i * sizeof(pib_eqe));
        if (e.flags & PIB_EQE_PHASE && e.type == PIB_EQE_ASYNC)
            events.push_back(e.subtype);
    }
    return events;
}

FakeHost::Outcome FakeHost::mad(uint8_t cls, uint8_t method, uint16_t attr, uint32_t mod,
                                const std::function<void(pib::iba::Mad &)> &fill,
                                pib_mad_ifc *response) {
    pib_mad_ifc ifc{};
    pib::iba::Mad m(ifc.mad);
    m.set8(0, 1); // base version
    m.set8(1, cls);
    m.set8(2, 1); // class version
    m.set8(3, method);
    m.set16(16, attr);
    m.set32(20, mod);
    if (fill)
        fill(m);
    const uint64_t in = alloc(PIB_MAILBOX_SIZE), out = alloc(PIB_MAILBOX_SIZE);
    poke(in, ifc);
    const Outcome o = command(PIB_CMD_MAD_IFC, 1, in, out);
    *response = peek<pib_mad_ifc>(out);
    return o;
}

void FakeHost::switchHello(uint16_t flags) {
    pib_wire_hello hello{};
    hello.node_type = PIB_WIRE_NODE_SWITCH;
    hello.flags = flags;
    const auto frame = pib::wire::encode(
        PIB_WIRE_HELLO, std::span(reinterpret_cast<const uint8_t *>(&hello), sizeof(hello)));
    pib_core_port_receive(core, 1, frame.data(), frame.size());
}

void FakeHost::initHca() {
    if (command(PIB_CMD_INIT_HCA).status != PIB_CMD_STATUS_OK)
        throw std::runtime_error("INIT_HCA failed");
}

bool FakeHost::runScheduled() {
    if (!scheduled)
        return false;
    scheduled = 0;
    ++runs;
    pib_core_run(core);
    return true;
}

void FakeHost::datagramToRts(uint32_t qpn, uint8_t type, uint32_t qkey) {
    auto modify = [&](const pib_qp_attr &a) {
        if (commandIn(PIB_CMD_MODIFY_QP, qpn, a).status != PIB_CMD_STATUS_OK)
            throw std::runtime_error("MODIFY_QP of a datagram QP failed");
    };
    pib_qp_attr a{};
    a.attr_mask = PIB_QP_STATE | PIB_QP_PKEY_INDEX | PIB_QP_QKEY;
    if (type == PIB_QPT_UD)
        a.attr_mask |= PIB_QP_PORT;
    a.qp_state = PIB_QPS_INIT;
    a.port_num = 1;
    a.qkey = qkey;
    modify(a);
    a = {};
    a.attr_mask = PIB_QP_STATE;
    a.qp_state = PIB_QPS_RTR;
    modify(a);
    a.attr_mask = PIB_QP_STATE | PIB_QP_SQ_PSN;
    a.qp_state = PIB_QPS_RTS;
    modify(a);
}

void FakeHost::portDrained(unsigned port) {
    portOutput[port].clear();
    if (portFull[port]) { // only a port said to be full hears it has room
        portFull[port] = false;
        pib_core_port_writable(core, port);
    }
}
