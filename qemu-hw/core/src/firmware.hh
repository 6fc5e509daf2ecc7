// SPDX-License-Identifier: GPL-2.0-or-later
// The device firmware: executes commands (docs/prm.md §4) against the
// object tables, and posts events to the event queues.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "event_writer.hh"
#include "host.hh"
#include "mad.hh"
#include "memory.hh"
#include "mkey.hh"
#include "mtt.hh"
#include "multicast.hh"
#include "object_table.hh"
#include "objects.hh"
#include "packet.hh"
#include "pib_core.h"
#include "pib_hw.h"
#include "wqe_reader.hh"

namespace pib {

// The core reads and writes pib_hw.h's structures in guest memory by
// memcpy, without swapping: it models the device on little-endian hosts.
static_assert(std::endian::native == std::endian::little,
              "the device core uses pib_hw.h's little-endian layouts in place");

struct Command {
    uint16_t opcode = 0;
    uint8_t opmod = 0;
    uint32_t modifier = 0;
    uint64_t in = 0;  // input mailbox address or immediate
    uint64_t out = 0; // output mailbox address
};

struct CommandOutcome {
    uint8_t status = PIB_CMD_STATUS_OK;
    uint64_t result = 0;
};

struct PortState {
    pib_port_info info{};
    // IBA PortCounters, kept from the first link.
    uint64_t rcvPackets = 0;
    uint64_t rcvWords = 0;
    uint64_t rcvErrors = 0;
    uint64_t xmitPackets = 0;
    uint64_t xmitWords = 0;
    // SMA state beyond pib_port_info.
    iba::MkeyProtection mkey;
    uint64_t trapsHeldUntilNs = 0; // traps wait 4.096 us * 2^SubnetTimeout apart (IBA o14-2)
    uint8_t hoqLife = 0;
    uint8_t vlHighLimit = 0;
    std::array<uint8_t, 8> slToVl{};
    std::array<uint8_t, 64> vlArb{};
    std::array<uint16_t, PIB_PKEY_TABLE_LEN> pkeys{};
    std::array<uint64_t, PIB_GUID_TABLE_LEN> guids{};
    // The host said its queue for this port is full: QPs with work for
    // the port wait here until it has room (scheduler.cc).
    bool txFull = false;
    std::deque<uint32_t> waiting;
};

class Firmware {
  public:
    Firmware(const pib_core_config &config, const Host &host);

    CommandOutcome execute(const Command &cmd);
    // A 64-bit write to doorbell page `page` at `offset` (BAR2).
    void queueDoorbell(uint32_t page, uint32_t offset, uint64_t value);
    // Back to the power-on state: every object is gone.
    void reset();
    // The physical link of a port came up or went down.
    void portLinkChanged(unsigned port, bool up);
    // A packet arrived on a port.
    void portReceive(unsigned port, std::span<const uint8_t> packet);
    // The host's timer reached the deadline the firmware asked for.
    void timerExpired();
    // Delivers the packets QPs sent to their own port (after any engine
    // that sent them has returned).
    void drainLoopback();
    // Bounded work per event (scheduler.cc). The Device brackets every
    // call from the host with beginEvent() and endEvent(); run() goes on
    // with postponed work (pib_core_run), portWritable() with the work a
    // full port held back.
    void beginEvent();
    void endEvent();
    void run();
    void portWritable(unsigned port);
    // Where packets for the wire go (the Device hands them to the link),
    // each with wire::kHeaderSize free bytes in front for the frame header.
    // The transmitter may change the bytes but keeps nothing: the buffer
    // is used again for a later packet.
    // It returns false when the port's host queue is full.
    using Transmitter = std::function<bool(unsigned port, std::vector<uint8_t> &framed)>;
    void setTransmitter(Transmitter transmit) { transmit_ = std::move(transmit); }

    const pib_dev_cap &caps() const { return caps_; }
    EventWriter &events() { return events_; }
    // The name of a command opcode ("QUERY_PORT"), "unknown" for none.
    static const char *commandName(uint16_t opcode);
    bool initialized() const { return initialized_; }

  private:
    using Handler = CommandOutcome (Firmware::*)(const Command &);
    struct CommandSpec {
        uint16_t opcode;
        const char *name;
        bool beforeInit; // accepted before INIT_HCA
        Handler handler;
    };
    static const CommandSpec kCommands[];
    static const CommandSpec *findCommand(uint16_t opcode);

    // Helpers shared by the handlers.
    CommandOutcome fail(uint8_t status, const char *what, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
    // Mailboxes are 8-byte aligned guest memory (docs/prm.md §4).
    template <class T> bool readMailbox(const Command &cmd, T &obj) {
        static_assert(sizeof(T) <= PIB_MAILBOX_SIZE);
        return cmd.in % PIB_MAILBOX_ALIGN == 0 && host_.dmaRead(cmd.in, obj);
    }
    template <class T> bool writeMailbox(const Command &cmd, const T &obj) {
        static_assert(sizeof(T) <= PIB_MAILBOX_SIZE);
        return cmd.out % PIB_MAILBOX_ALIGN == 0 && host_.dmaWrite(cmd.out, obj);
    }
    bool validRing(const pib_buf_desc &buf, uint64_t pages) const;

    // Handlers, one per opcode (firmware_*.cc).
    CommandOutcome queryDevCap(const Command &);
    CommandOutcome queryPort(const Command &);
    CommandOutcome initHca(const Command &);
    CommandOutcome closeHca(const Command &);
    CommandOutcome modifyPort(const Command &);
    CommandOutcome queryPkeys(const Command &);
    CommandOutcome queryGuids(const Command &);
    CommandOutcome setNodeDesc(const Command &);
    CommandOutcome madIfc(const Command &);
    bool answerMad(unsigned port, std::span<uint8_t> mad, bool ignoreMkey);
    void sendTrap(unsigned port, std::vector<uint8_t> mad);
    uint16_t smaGet(unsigned port, iba::Mad &mad, bool hideMkey = false);
    uint16_t smaSet(unsigned port, iba::Mad &mad);
    iba::PortInfo portInfo(unsigned port, bool hideMkey);
    uint16_t setPortInfo(unsigned port, iba::Mad &mad);
    void pma(unsigned port, iba::Mad &mad);
    CommandOutcome allocUar(const Command &);
    CommandOutcome freeUar(const Command &);
    CommandOutcome allocPd(const Command &);
    CommandOutcome deallocPd(const Command &);
    CommandOutcome allocMtt(const Command &);
    CommandOutcome freeMtt(const Command &);
    CommandOutcome writeMtt(const Command &);
    CommandOutcome createEq(const Command &);
    CommandOutcome destroyEq(const Command &);
    CommandOutcome queryEq(const Command &);
    CommandOutcome createCq(const Command &);
    CommandOutcome destroyCq(const Command &);
    CommandOutcome queryCq(const Command &);
    CommandOutcome createMr(const Command &);
    CommandOutcome destroyMr(const Command &);
    CommandOutcome queryMr(const Command &);
    CommandOutcome createSrq(const Command &);
    CommandOutcome destroySrq(const Command &);
    CommandOutcome querySrq(const Command &);
    CommandOutcome armSrq(const Command &);
    CommandOutcome createQp(const Command &);
    CommandOutcome destroyQp(const Command &);
    CommandOutcome modifyQp(const Command &);
    void enterQpState(uint32_t qpn, QueuePair &qp, uint8_t cur, uint8_t next, uint32_t mask);
    CommandOutcome queryQp(const Command &);
    CommandOutcome attachOrDetachMcast(const Command &);

    // The data path (transport.cc, completion.cc).
    void processSendQueue(uint32_t qpn, QueuePair &qp);
    void processDatagramSend(uint32_t qpn, QueuePair &qp);
    bool sendUd(uint32_t qpn, QueuePair &qp, const Wqe &wqe, uint32_t *length, uint8_t *status);
    // A packet that arrived on `port` (or was sent to it by one of its own
    // QPs, `senderQpn`, which never receives its own multicast copy).
    void deliver(unsigned port, const iba::Packet &packet, uint32_t senderQpn = 0);
    void deliverMulticast(unsigned port, const iba::Packet &packet, uint32_t senderQpn);
    void receiveDatagram(unsigned port, const iba::Packet &packet, uint32_t qpn, QueuePair &qp,
                         uint16_t pkeyIndex);
    bool takeReceiveWqe(uint32_t qpn, QueuePair &qp, Wqe &wqe, uint16_t *index, uint8_t *status);

    // The connected transports: requester.cc, completer.cc, responder.cc,
    // connected.cc.
    uint32_t pathMtu(const QueuePair &qp) const;
    uint8_t fetchSendWqe(uint32_t qpn, QueuePair &qp, uint32_t index, SendWqe &w);
    uint8_t checkLocalBuffers(uint32_t qpn, QueuePair &qp, SendWqe &w, uint64_t *length);
    void processConnectedSend(uint32_t qpn, QueuePair &qp);
    void armAckTimerIfIdle(uint32_t qpn, QueuePair &qp);
    enum class SendProgress { kAllSent, kWindowFull, kPaused, kFailed };
    SendProgress sendRequestPackets(uint32_t qpn, QueuePair &qp, SendWqe &w);
    void stopSending(uint32_t qpn, QueuePair &qp, SendProgress why);
    void rewind(QueuePair &qp, uint32_t psn);
    uint64_t ackTimeoutNs(const QueuePair &qp) const;
    static uint64_t rnrDelayNs(uint8_t code);
    void restartAckTimer(uint32_t qpn, QueuePair &qp);
    void completeInOrder(uint32_t qpn, QueuePair &qp);
    void completeHead(uint32_t qpn, QueuePair &qp, uint8_t status);
    void notifyIfSqDrained(uint32_t qpn, QueuePair &qp);
    void ackUpTo(uint32_t qpn, QueuePair &qp, uint32_t psn);
    void onResponse(uint32_t qpn, QueuePair &qp, const iba::Packet &packet);
    bool onAcknowledge(uint32_t qpn, QueuePair &qp, const iba::Packet &packet);
    void onRnrNak(uint32_t qpn, QueuePair &qp, uint32_t psn, uint8_t timerCode);
    bool onNak(uint32_t qpn, QueuePair &qp, uint32_t psn, uint8_t code);
    bool onAtomicAcknowledge(uint32_t qpn, QueuePair &qp, const iba::Packet &packet);
    void readResponse(uint32_t qpn, QueuePair &qp, const iba::Packet &packet);
    void qpTimerExpired(uint32_t qpn, QueuePair &qp);
    void scheduleQpTimer(uint32_t qpn, QueuePair &qp);
    void armDeviceTimer();
    void sendAck(QueuePair &qp, uint32_t psn, uint8_t syndrome);
    bool remoteRange(const QueuePair &qp, uint32_t rkey, uint64_t va, uint64_t len, uint32_t access,
                     std::vector<Segment> &out);
    void responderError(uint32_t qpn, QueuePair &qp, uint32_t psn, uint8_t nakCode,
                        uint8_t wcStatus, const char *why);
    bool claimReceiveWqe(uint32_t qpn, QueuePair &qp);
    void completeReceive(uint32_t qpn, QueuePair &qp, const iba::Packet &packet, uint8_t opcode,
                         uint32_t length);
    void onRequest(uint32_t qpn, QueuePair &qp, const iba::Packet &packet);
    bool checkRequestPsn(uint32_t qpn, QueuePair &qp, const iba::Packet &packet);
    bool checkRequestSequence(uint32_t qpn, QueuePair &qp, const iba::Packet &packet);
    void readOrAtomicRequest(uint32_t qpn, QueuePair &qp, const iba::Packet &packet);
    bool receiveSend(uint32_t qpn, QueuePair &qp, const iba::Packet &packet);
    bool receiveWrite(uint32_t qpn, QueuePair &qp, const iba::Packet &packet);
    bool startWrite(uint32_t qpn, QueuePair &qp, const iba::Packet &packet);
    bool landWrite(uint32_t qpn, QueuePair &qp, const iba::Packet &packet);
    void endRequest(uint32_t qpn, QueuePair &qp, const iba::Packet &packet);
    void dropUcMessage(QueuePair &qp, uint32_t psn);
    void refuseRequest(uint32_t qpn, QueuePair &qp, uint32_t psn, uint8_t nakCode, uint8_t wcStatus,
                       const char *why);
    void noReceiveWqe(uint32_t qpn, QueuePair &qp, uint32_t psn);
    void readRequest(uint32_t qpn, QueuePair &qp, const iba::Packet &packet);
    bool sendReadResponse(uint32_t qpn, QueuePair &qp, Reply &r);
    void atomicRequest(uint32_t qpn, QueuePair &qp, const iba::Packet &packet);
    void sendAtomicAck(QueuePair &qp, const ReplayEntry &e);
    void acknowledge(uint32_t qpn, QueuePair &qp, uint32_t psn, uint8_t syndrome);
    void remember(QueuePair &qp, const ReplayEntry &e);
    void duplicateRequest(uint32_t qpn, QueuePair &qp, const iba::Packet &packet);
    bool addressConnected(QueuePair &qp, iba::Packet &packet);
    void transmitConnected(QueuePair &qp, std::vector<uint8_t> framed);
    void sendConnected(QueuePair &qp, iba::Packet &packet);
    void deliverConnected(unsigned port, const iba::Packet &packet);
    void flushQp(uint32_t qpn, QueuePair &qp);
    uint32_t wireQpn(uint32_t qpn, const QueuePair &qp) const;

    // The scheduler (scheduler.cc).
    bool mayTransmit(unsigned port);
    void postpone(uint32_t qpn, QueuePair &qp);
    void transmit(unsigned port, std::vector<uint8_t> &framed);
    // Sends what the responder of `qp` still owes, as the budget allows.
    void sendReplies(uint32_t qpn, QueuePair &qp);
    void reply(uint32_t qpn, QueuePair &qp, const Reply &r);

    PortState *port(uint32_t number);
    bool updateProducer(const char *what, uint32_t number, uint32_t &producer, uint32_t consumer,
                        uint32_t size, uint32_t value);
    QueuePair *findQp(uint32_t qpn) const;
    void releaseQp(QueuePair &qp);
    const char *badQpAttr(const QueuePair &qp, const pib_qp_attr &attr, uint32_t mask);

    const pib_core_config &config_;
    const Host &host_;
    pib_dev_cap caps_{};
    bool initialized_ = false;
    std::array<PortState, PIB_MAX_PORTS> ports_{};

    ObjectTable<DoorbellPage> uars_;
    ObjectTable<ProtectionDomain> pds_;
    Mtt mtt_;
    WqeReader wqes_;
    ObjectTable<EventQueue> eqs_;
    ObjectTable<CompletionQueue> cqs_;
    ObjectTable<MemoryRegion> mrs_;
    ObjectTable<SharedReceiveQueue> srqs_;
    ObjectTable<QueuePair> qps_;
    MemoryAccess memory_;
    EventWriter events_;
    MulticastGroups multicast_;
    // QP0 and QP1 of each port: numbers 2 * (port - 1) + type.
    std::array<std::unique_ptr<QueuePair>, 2 * PIB_MAX_PORTS> specialQps_{};
    Transmitter transmit_;
    // Buffers of packets sent, for the next packets: the data path then
    // allocates no memory per packet.
    std::vector<std::vector<uint8_t>> spentPackets_;
    // Lists of guest memory segments, kept for the next packet too: one
    // per data path function, as none calls another while it holds its
    // list (checkLocalBuffers, onRequest, sendReadResponses).
    std::vector<Segment> localSegments_, writeSegments_, readSegments_;
    std::vector<uint8_t> packetBuffer();
    void recyclePacket(std::vector<uint8_t> &&framed);
    std::array<char, PIB_NODE_DESC_LEN> nodeDesc_{};
    uint64_t trapTid_ = 0;
    // Timers of the connected QPs: (deadline, QPN), earliest first, and
    // the deadline the host's timer is set to.
    std::set<std::pair<uint64_t, uint32_t>> timers_;
    uint64_t armedAt_ = Host::kNever;
    std::deque<std::pair<unsigned, std::vector<uint8_t>>> loopback_;
    bool drainingLoopback_ = false;
    // Packets the current event may still send, and the QPs whose work
    // waits for the next run().
    int budget_ = 0;
    std::deque<uint32_t> ready_;
};

} // namespace pib
