// SPDX-License-Identifier: GPL-2.0-or-later
// The switch's I/O: one stream socket per port (a UNIX socket the port's
// peer connects to, a TCP listener, or an outgoing connection to another
// switch), framed by the pib wire protocol, all in one epoll loop.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "element.hh"
#include "fault.hh"
#include "frame.hh"
#include "pcap.hh"
#include "ring_pumps.hh"
#include "switch.hh"

namespace pib::fabric {

// A state file's bytes, for Server::restoreState (bounded; throws
// std::runtime_error when it cannot be read).
std::vector<uint8_t> readStateFile(const std::string &path);

// Writes a line to the switch's log (stderr), prefixed with the program's
// name and the seconds since it started.
void logLine(const char *text);
// Turns the log off or back on: the fuzzer's servers make and break
// links by the million, and its output is for its findings.
void setLogging(bool on);

struct PortEndpoint {
    enum class Kind { kUnixListen, kTcpListen, kUnixConnect, kTcpConnect };
    Kind kind = Kind::kUnixListen;
    std::string address; // socket path, or host:port
};

// How an outgoing link (kUnixConnect, kTcpConnect) is dialled: an attempt
// that fails is retried after a delay that doubles from `firstRetryNs` up
// to `maxRetryNs`, and starts again from `firstRetryNs` once a link came
// up; an attempt (resolving the name and connecting) that has not
// connected after `attemptTimeoutNs` is abandoned, and counts as failed.
struct DialPolicy {
    uint64_t firstRetryNs = 1'000'000'000;
    uint64_t maxRetryNs = 30'000'000'000;
    uint64_t attemptTimeoutNs = 5'000'000'000;
};

class Server {
  public:
    // A monotonic clock in nanoseconds.
    using Clock = uint64_t (*)();

    Server(Switch &sw, std::vector<PortEndpoint> endpoints);
    // A simulated fabric's, or any element's, free ports as its ports.
    Server(std::unique_ptr<Element> element, std::vector<PortEndpoint> endpoints);
    ~Server();
    Server(const Server &) = delete;
    Server &operator=(const Server &) = delete;

    // Listens for fault commands on a UNIX socket at `path` (see docs/wire.md).
    void setControlSocket(std::string path) { controlPath_ = std::move(path); }
    // Before open(): how outgoing links are retried (tests shorten it).
    void setDialPolicy(const DialPolicy &policy) { dialPolicy_ = policy; }
    // How long a port whose device said MOVING keeps its link for the
    // device to come back (docs/wire.md, "A device that moves").
    void setMoveGrace(uint64_t ns) { moveGraceNs_ = ns; }
    // Before open(): the clock the server's timers run on (the fuzzer's
    // is a counter it advances, so that a run depends on its input alone).
    void setClock(Clock clock) { clock_ = clock; }
    // Before open(): `threads` forwarding threads read the ring cables
    // (ring_pumps.hh); 0, the default, reads them on the event loop.
    void setForwardingThreads(unsigned threads) { forwardingThreads_ = threads; }
    // The switch's state and whom each link that is up leads to, for a
    // fabric snapshot (server_state.cc).
    std::vector<uint8_t> saveState() const;
    // Before open(): takes a state saveState() wrote (throws
    // std::runtime_error with the reason when it refuses it). Each link
    // that was up stays up for `graceNs` for its peer to resume it.
    void restoreState(std::span<const uint8_t> state, uint64_t graceNs);
    // Opens every endpoint; throws std::runtime_error on failure.
    void open();
    // Injects faults into port `port` (see fault.hh); returns what it logs.
    std::string setFault(unsigned port, const FaultSetting &setting);
    std::string clearFault(unsigned port);
    // Records what port `port` sends and receives to a pcap file
    // (server_capture.cc); `limit` packets at most, 0 for no limit.
    // Returns what it logs; throws std::runtime_error when it cannot.
    // A control socket's command line (docs/wire.md), answered as the
    // socket answers it: "ok ..." or "error: ...".
    std::string controlCommand(std::string_view line);
    std::string startCapture(unsigned port, const std::string &path, uint64_t limit);
    std::string stopCapture(unsigned port);
    // Runs until stop() is called (from a signal handler) or a fatal error.
    void run();
    // One turn of run()'s loop: waits at most `maxWaitMs` for events,
    // handles them and the timers that are due. False once stop() was
    // called.
    bool runOnce(int maxWaitMs);
    void stop();

  private:
    struct Connection;
    struct ControlClient;
    struct Dial;
    struct Resolutions;
    // A port's fault injection: each direction, and link flaps.
    struct PortFaults {
        FaultInjector in, out;
        FlapSchedule flap;
        bool down = false;  // flapped down right now
        uint64_t flaps = 0; // times the flap took the link down
        std::string logged; // the counters as last logged
    };
    // A port whose device said MOVING (server_moves.cc): its link stays up
    // until the device says HELLO again with PIB_WIRE_HELLO_RESUMES.
    struct Move {
        bool pending = false;
        uint64_t portGuid = 0; // the device's, from its HELLO
        uint64_t sinceNs = 0;
        uint64_t deadlineNs = 0;
    };
    uint64_t now() const { return clock_(); }
    void dispatch(uint64_t tag, uint32_t events);
    void accept(unsigned port);
    // Outgoing links (server_dial.cc): resolved off the loop, connected
    // without blocking, retried with back-off.
    bool dials(unsigned port) const;
    void connectOut(unsigned port);
    void startResolving(unsigned port, const std::string &host, const std::string &service);
    void onResolved();
    void connectNext(unsigned port, std::string error);
    void onDialReady(unsigned port);
    void dialed(unsigned port, int fd);
    void dialFailed(unsigned port, const std::string &why);
    void cancelDial(unsigned port);
    void closeDialSocket(unsigned port);
    void retryAfterDrop(unsigned port, bool linkWasUp);
    int serviceDials();
    std::string dialStatus(unsigned port) const;
    // Flow control (server_flow.cc): an input whose packets filled an
    // output stops being read until the output drains, as IBA's link-level
    // credits hold a sender back; an output that drains nothing for a while
    // is stalled, and packets to it are discarded instead.
    void onReadable(unsigned port, uint32_t events);
    void onWritable(unsigned port);
    void processInput(unsigned port);
    bool helloReceived(unsigned port);
    void block(unsigned port, unsigned output);
    void rewatch(unsigned port);
    void resumeInputs();
    void outputGone(unsigned port);
    int serviceFlowControl();
    void tellDiscarded(unsigned port);
    void drop(unsigned port, const char *why);
    void resetLink(unsigned port);
    void detach(unsigned port);
    // A device that moves (server_moves.cc).
    void deviceMoving(unsigned port);
    bool helloContinuesMove(unsigned port, const pib_wire_hello &hello);
    void endMove(unsigned port, const char *why);
    int serviceMoves();
    std::string moveStatus(unsigned port) const;
    void sendFrame(unsigned port, uint8_t type, std::span<const uint8_t> payload);
    void flushOutputs();
    // Ring cables (server_rings.cc).
    struct RingLink;
    bool takesRings(unsigned port) const;
    void keepPassedFds(unsigned port, std::vector<int> &fds);
    std::unique_ptr<RingLink> adoptRings(std::span<const uint8_t> payload, std::vector<int> &fds,
                                         std::string *why);
    void ringOffer(unsigned port, std::span<const uint8_t> payload);
    bool offersRings(unsigned port) const;
    void offerRings(unsigned port);
    void ringAnswer(unsigned port, std::span<const uint8_t> payload);
    void closeRings(unsigned port);
    void startRingInput(unsigned port, RingLink &rings);
    static bool putInRing(RingLink &r, std::span<const uint8_t> packet);
    void onRingDoorbell(unsigned port);
    void ringTurn(unsigned port);
    void processRing(unsigned port);
    void processPumped(unsigned port);
    void onPumpsReady();
    void serviceBusyRings();
    size_t flushRing(unsigned port);
    void sendHello(unsigned port);
    void watch(int fd, unsigned port, bool listener, bool writable);
    // Packets through the port's fault injection, both ways.
    // `vcrcGood`: a forwarding thread checked the packet's VCRC.
    void receivePacket(unsigned port, std::span<const uint8_t> packet, bool vcrcGood = false);
    void toSwitch(unsigned port, std::span<const uint8_t> packet, bool vcrcGood = false);
    void sendPacket(unsigned port, std::span<const uint8_t> packet);
    FaultInjector::Deliver inward(unsigned port);
    FaultInjector::Deliver outward(unsigned port);
    // Releases delayed packets and flaps links whose time came; returns
    // how long the loop may sleep, in milliseconds.
    int serviceFaults();
    void flap(unsigned port, bool down);
    void logFaultCounters(bool always);
    std::string faultStatus() const;
    // The control socket: one command line in, its answer out.
    void acceptControl();
    void onControl(int fd, uint32_t events);
    std::string portStates() const;
    std::string queueStates() const;
    std::string captureCommand(unsigned port, std::string_view args);
    std::string saveCommand(std::string_view path);
    std::string captureStatus() const;
    void capture(unsigned port, std::span<const uint8_t> packet, bool sent);

    std::unique_ptr<Element> element_;
    Element &sw_;
    Clock clock_;
    DialPolicy dialPolicy_;
    std::vector<PortEndpoint> endpoints_; // index = port number
    std::vector<Dial> dials_;             // index = port number; used by outgoing links
    // Where resolver threads leave their answers (shared: a thread may
    // outlive the server).
    std::shared_ptr<Resolutions> resolutions_;
    std::vector<int> listeners_;
    std::vector<std::unique_ptr<Connection>> conns_;
    std::vector<PortFaults> faults_; // index = port number
    std::vector<Move> moves_;        // index = port number
    uint64_t moveGraceNs_ = 5'000'000'000;
    std::vector<std::unique_ptr<wire::PacketCapture>> captures_; // index = port number
    std::string controlPath_;
    int control_ = -1;
    std::vector<std::unique_ptr<ControlClient>> controlClients_;
    uint64_t lastFaultLog_ = 0;
    unsigned congested_ = 0;          // an output the current input's packet filled
    std::vector<unsigned> resume_;    // inputs whose output drained
    std::vector<unsigned> unflushed_; // outputs with frames not yet sent
    std::vector<unsigned> ringsBusy_; // rings with frames left for the next turn
    unsigned forwardingThreads_ = 0;
    // The forwarding threads, when there are: declared after conns_, so
    // that they stop before the rings they read go.
    std::unique_ptr<RingPumps> pumps_;
    int epoll_ = -1;
    int wake_ = -1;  // eventfd that stop() signals
    int waitMs_ = 0; // until the next timer is due; 0 at first, to dial at once
};

} // namespace pib::fabric
