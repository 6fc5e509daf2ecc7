// SPDX-License-Identifier: GPL-2.0-or-later
// A host for the core in unit tests: guest RAM for DMA, recorded MSI-X
// interrupts, guest errors and traces, and helpers to run commands.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "mad.hh"
#include "pib_core.h"
#include "pib_hw.h"

// Every command opcode, and one that is none.
inline constexpr uint16_t kCommandOpcodes[] = {
    PIB_CMD_QUERY_DEV_CAP,
    PIB_CMD_QUERY_PORT,
    PIB_CMD_INIT_HCA,
    PIB_CMD_CLOSE_HCA,
    PIB_CMD_MODIFY_PORT,
    PIB_CMD_QUERY_PKEYS,
    PIB_CMD_QUERY_GUIDS,
    PIB_CMD_SET_NODE_DESC,
    PIB_CMD_MAD_IFC,
    PIB_CMD_ALLOC_UAR,
    PIB_CMD_FREE_UAR,
    PIB_CMD_ALLOC_PD,
    PIB_CMD_DEALLOC_PD,
    PIB_CMD_ALLOC_XRCD,
    PIB_CMD_DEALLOC_XRCD,
    PIB_CMD_ALLOC_MTT,
    PIB_CMD_FREE_MTT,
    PIB_CMD_WRITE_MTT,
    PIB_CMD_CREATE_EQ,
    PIB_CMD_DESTROY_EQ,
    PIB_CMD_QUERY_EQ,
    PIB_CMD_CREATE_CQ,
    PIB_CMD_DESTROY_CQ,
    PIB_CMD_QUERY_CQ,
    PIB_CMD_CREATE_MR,
    PIB_CMD_DESTROY_MR,
    PIB_CMD_QUERY_MR,
    PIB_CMD_CREATE_SRQ,
    PIB_CMD_DESTROY_SRQ,
    PIB_CMD_QUERY_SRQ,
    PIB_CMD_ARM_SRQ,
    PIB_CMD_CREATE_QP,
    PIB_CMD_DESTROY_QP,
    PIB_CMD_MODIFY_QP,
    PIB_CMD_QUERY_QP,
    PIB_CMD_ATTACH_MCAST,
    PIB_CMD_DETACH_MCAST,
    PIB_CMD_QUERY_COUNTERS,
    PIB_CMD_REREG_MR,
    PIB_CMD_CREATE_MW,
    PIB_CMD_DESTROY_MW,
    PIB_CMD_QUERY_MW,
    PIB_CMD_RESIZE_CQ,
    PIB_CMD_RESIZE_SRQ,
    PIB_CMD_MODIFY_CQ,
    PIB_CMD_PAGE_FAULT_RESUME,
    0x7777,
};

struct FakeHost {
    struct Report {
        std::string what;
        std::string detail;
    };
    struct Outcome {
        uint32_t status;
        uint64_t result;
    };

    // Guest RAM the device may DMA to: [kRamBase, kRamBase + ram.size()).
    static constexpr uint64_t kRamBase = 0x100000;
    static constexpr uint64_t kDefaultRamSize = 8 << 20;
    // Where the device's BAR0 sits in the bus address space. DMA there
    // reaches the registers, as on a host that does not refuse it.
    static constexpr uint64_t kBar0Base = 0xfe000000;

    FakeHost();
    explicit FakeHost(const pib_core_config &config, uint64_t ramSize = kDefaultRamSize);
    ~FakeHost();
    FakeHost(const FakeHost &) = delete;
    FakeHost &operator=(const FakeHost &) = delete;

    static pib_core_config defaultConfig();
    // The callbacks the device is given, `this` their opaque pointer: a
    // test may build a core component on them (pib::Host).
    static const pib_host_ops &hostOps();

    uint32_t read32(int bar, uint64_t offset) {
        return static_cast<uint32_t>(pib_core_bar_read(core, bar, offset, 4));
    }
    void write32(int bar, uint64_t offset, uint32_t value) {
        pib_core_bar_write(core, bar, offset, value, 4);
    }
    // Number of guest errors reported with token `what` (all when empty).
    size_t guestErrors(const std::string &what = "") const;
    size_t traces(const std::string &what) const;
    void clear() { errors.clear(), traceLines.clear(), interrupts.clear(); }

    // Guest memory.
    uint64_t alloc(uint64_t bytes, uint64_t align = PIB_PAGE_SIZE);
    // Fresh RAM as alloc gives it, filled with bytes of std::mt19937(seed).
    uint64_t allocRandom(uint64_t bytes, uint32_t seed);
    uint8_t *at(uint64_t addr) { return &ram[addr - kRamBase]; }
    bool inRam(uint64_t addr, uint64_t len) const {
        return addr >= kRamBase && len <= ram.size() && addr - kRamBase <= ram.size() - len;
    }
    template <class T> void poke(uint64_t addr, const T &obj) {
        std::memcpy(at(addr), &obj, sizeof(obj));
    }
    template <class T> T peek(uint64_t addr) {
        T obj;
        std::memcpy(&obj, at(addr), sizeof(obj));
        return obj;
    }

    // Runs a command through the BAR0 command registers.
    Outcome command(uint16_t opcode, uint32_t modifier = 0, uint64_t in = 0, uint64_t out = 0,
                    uint32_t ctrlFlags = 0);
    // Same, with `mailbox` copied to a fresh input mailbox first.
    template <class T> Outcome commandIn(uint16_t opcode, uint32_t modifier, const T &mailbox) {
        const uint64_t in = alloc(PIB_MAILBOX_SIZE);
        poke(in, mailbox);
        return command(opcode, modifier, in);
    }
    // Same, returning the output mailbox's contents in *out.
    template <class T> Outcome commandOut(uint16_t opcode, uint32_t modifier, T *out) {
        const uint64_t addr = alloc(PIB_MAILBOX_SIZE);
        const Outcome o = command(opcode, modifier, 0, addr);
        std::memcpy(out, at(addr), sizeof(T));
        return o;
    }
    // Runs a MAD of class `cls` through MAD_IFC on port 1: the header from
    // the arguments, the rest from `fill`. The response goes to *response.
    Outcome mad(uint8_t cls, uint8_t method, uint16_t attr, uint32_t mod,
                const std::function<void(pib::iba::Mad &)> &fill, pib_mad_ifc *response);
    // A ring of `pages` fresh pages listed in a fresh MTT range; their
    // guest addresses go to *addrs when asked for.
    pib_buf_desc ring(uint32_t pages, std::vector<uint64_t> *addrs = nullptr);

    // The objects a driver creates before its QPs, in fresh pages. Each
    // throws if the device refuses.
    struct Eq {
        uint32_t eqn;
        uint64_t page; // of its EQEs
    };
    Eq createEq(uint32_t logSize, uint16_t flags, uint16_t msixVector = 0);
    struct Cq {
        uint32_t cqn;
        uint64_t page;     // the first of its `pages` contiguous pages of CQEs
        uint64_t ciRecord; // where the driver writes its consumer index
    };
    Cq createCq(uint32_t eqn, uint32_t uar, uint32_t logSize, uint32_t pages = 1);
    // An MR of `pd` over all of guest memory, by physical address.
    uint32_t createPhysicalMr(uint32_t pd, uint32_t access);
    // Writes a receive WQE of one SGE into the ring slot at `slot`.
    void writeRecvWqe(uint64_t slot, uint64_t wrId, uint32_t lkey, uint64_t buf, uint32_t len) {
        pib_wqe_ctrl ctrl{};
        ctrl.wr_id = wrId;
        ctrl.num_ds = 2;
        poke(slot, ctrl);
        poke(slot + sizeof(ctrl), pib_wqe_data{len, lkey, buf});
    }
    // RESET -> INIT -> RTR -> RTS for datagram QP `qpn` (UD on port 1,
    // or QP0/QP1) with Q_Key `qkey`. Throws if the device refuses.
    void datagramToRts(uint32_t qpn, uint8_t type, uint32_t qkey);
    // The subtypes of the asynchronous events among the first `entries`
    // EQEs of the EQ at `eqPage`.
    std::vector<uint8_t> asyncEvents(uint64_t eqPage, unsigned entries);
    void initHca();
    // The switch says HELLO on port 1, with `flags` (PIB_WIRE_HELLO_*).
    void switchHello(uint16_t flags = 0);
    // Port 1 cabled to a switch that said HELLO: the link is up.
    void cablePort1() {
        pib_core_port_connected(core, 1, 1);
        switchHello();
    }
    // QUERY_DEV_CAP's answer (the command must succeed).
    pib_dev_cap caps() {
        pib_dev_cap cap{};
        if (commandOut(PIB_CMD_QUERY_DEV_CAP, 0, &cap).status != PIB_CMD_STATUS_OK)
            throw std::runtime_error("QUERY_DEV_CAP failed");
        return cap;
    }

    // The device is replaced by a new one of the same configuration, as a
    // migration's destination has (the RAM, the clock and the records of
    // what the old one did stay; its timer and scheduled work go).
    void replaceCore();
    // The device's state (pib_core_save); empty, its reason in *why, when
    // it refuses to save.
    std::vector<uint8_t> saveState(std::string *why = nullptr);
    // pib_core_load: "" when the device took `state`, else its reason.
    std::string loadState(std::span<const uint8_t> state);
    // The device moves (docs/migration.md): its state is saved, what it
    // had sent is lost, and a new device of its configuration over the
    // same RAM is loaded with it; the switch kept its port's link, which
    // the new cable's HELLO resumes. "" when the new device took the
    // state, else the loader's reason.
    std::string move();

    pib_core *core = nullptr;
    pib_core_config config{};
    std::vector<uint8_t> ram;
    uint64_t ramNext = kRamBase;
    // Whether the device may read RAM in place (dma_map_read), how many
    // such mappings it holds, and how many it was given in all.
    bool mapping = true;
    int mappings = 0;
    uint64_t mapped = 0;
    // Every DMA write into RAM while recordingDmaWrites, in order.
    bool recordingDmaWrites = false;
    struct DmaWrite {
        uint64_t addr, len;
    };
    std::vector<DmaWrite> dmaWrites;
    unsigned stores64 = 0; // ATOMIC WRITEs' one-store writes (pib_host_ops.dma_store64)
    // Whether the ring entry [entry, entry + size) got its byte `ownerByte`
    // in a write of its own after every other write into it, as a driver
    // polling the owner or phase bit needs.
    bool ownerWrittenLast(uint64_t entry, uint64_t size, uint64_t ownerByte) const;
    std::vector<Report> errors;
    std::vector<Report> traceLines;
    // Whether guest errors and trace events are wanted (as QEMU's log and
    // trace state say), and how often the core asked.
    bool reporting = true;
    bool tracingPath = false; // ...the normal path's events too (fake_host.cc)
    unsigned enabledQueries = 0;
    std::vector<unsigned> interrupts;
    std::vector<uint8_t> portOutput[3]; // what each port sent, by port number
    // port_send says the queue is full once a port's output holds this much.
    size_t portQueueLimit = SIZE_MAX;
    size_t portOutputPeak = 0; // the most any port's output held at once
    bool portFull[3] = {};     // port_send said PIB_PORT_SEND_FULL since the last drain
    // The cable took what port `port` sent: its output is empty again, and
    // the core hears there is room if it was told the queue was full.
    void portDrained(unsigned port);
    // The core asked for pib_core_run() this many times since the last
    // run; runScheduled() runs it (as the host's main loop would) if so.
    unsigned scheduled = 0;
    unsigned runs = 0; // pib_core_run calls made
    bool runScheduled();
    std::vector<unsigned> disconnects;
    // Ring cables: whether port_send_fds takes descriptors, the
    // descriptors each port sent (duplicates, closed with the host) and
    // at which byte of its output, and the doorbell it asks the host to
    // watch (-1: none).
    bool passesDescriptors = false;
    // ...and only while the port's output holds at most this much, as
    // QEMU's glue passes them only with nothing queued before them.
    size_t descriptorsBehindAtMost = SIZE_MAX;
    struct PassedFds {
        size_t at;
        std::vector<int> fds;
    };
    std::vector<PassedFds> passedFds[3];
    int watchedFd[3] = {-1, -1, -1};
    // Streams: whether port_backlog answers (else 0 and 0, as a host that
    // cannot tell), then with a port's output as untaken and portUnread as
    // what its socket holds unread.
    bool reportsBacklog = false;
    size_t portUnread[3] = {};
    uint64_t barDmas = 0; // DMAs that reached BAR0
    // A bug inside the core, simulated: the next DMA read throws, as a
    // broken invariant would, in the middle of whatever the core does.
    bool throwOnNextDmaRead = false;
    bool throwForeign = false; // ...and throws an int instead of a std::exception
    // The transport clock: tests move it by hand.
    uint64_t now = 1'000'000'000;
    uint64_t timerDeadline = UINT64_MAX;
    // Advances the clock by `ns`, firing the core's timer if it is due.
    void advance(uint64_t ns) {
        now += ns;
        if (timerDeadline <= now) {
            timerDeadline = UINT64_MAX;
            pib_core_timer_expired(core);
        }
    }
};
