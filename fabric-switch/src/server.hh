// SPDX-License-Identifier: GPL-2.0-or-later
// The switch's I/O: one stream socket per port (a UNIX socket the port's
// peer connects to, a TCP listener, or an outgoing connection to another
// switch), framed by the pib wire protocol, all in one epoll loop.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fault.hh"
#include "frame.hh"
#include "pcap.hh"
#include "switch.hh"

namespace pib::fabric {

// Writes a line to the switch's log (stderr), prefixed with the program's
// name and the seconds since it started.
void logLine(const char *text);

struct PortEndpoint {
    enum class Kind { kUnixListen, kTcpListen, kUnixConnect, kTcpConnect };
    Kind kind = Kind::kUnixListen;
    std::string address; // socket path, or host:port
};

class Server {
  public:
    Server(Switch &sw, std::vector<PortEndpoint> endpoints);
    ~Server();
    Server(const Server &) = delete;
    Server &operator=(const Server &) = delete;

    // Listens for fault commands on a UNIX socket at `path` (see docs/wire.md).
    void setControlSocket(std::string path) { controlPath_ = std::move(path); }
    // Opens every endpoint; throws std::runtime_error on failure.
    void open();
    // Injects faults into port `port` (see fault.hh); returns what it logs.
    std::string setFault(unsigned port, const FaultSetting &setting);
    std::string clearFault(unsigned port);
    // Records what port `port` sends and receives to a pcap file
    // (server_capture.cc); `limit` packets at most, 0 for no limit.
    // Returns what it logs; throws std::runtime_error when it cannot.
    std::string startCapture(unsigned port, const std::string &path, uint64_t limit);
    std::string stopCapture(unsigned port);
    // Runs until stop() is called (from a signal handler) or a fatal error.
    void run();
    void stop();

  private:
    struct Connection;
    struct ControlClient;
    // A port's fault injection: each direction, and link flaps.
    struct PortFaults {
        FaultInjector in, out;
        FlapSchedule flap;
        bool down = false;  // flapped down right now
        uint64_t flaps = 0; // times the flap took the link down
        std::string logged; // the counters as last logged
    };
    void accept(unsigned port);
    void connectOut(unsigned port);
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
    void drop(unsigned port, const char *why);
    void sendFrame(unsigned port, uint8_t type, std::span<const uint8_t> payload);
    void sendHello(unsigned port);
    void watch(int fd, unsigned port, bool listener, bool writable);
    // Packets through the port's fault injection, both ways.
    void receivePacket(unsigned port, std::span<const uint8_t> packet);
    void toSwitch(unsigned port, std::span<const uint8_t> packet);
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
    std::string controlCommand(std::string_view line);
    std::string portStates() const;
    std::string captureCommand(unsigned port, std::string_view args);
    std::string captureStatus() const;
    void capture(unsigned port, std::span<const uint8_t> packet, bool sent);

    Switch &sw_;
    std::vector<PortEndpoint> endpoints_; // index = port number
    std::vector<int> listeners_;
    std::vector<std::unique_ptr<Connection>> conns_;
    std::vector<PortFaults> faults_;                             // index = port number
    std::vector<std::unique_ptr<wire::PacketCapture>> captures_; // index = port number
    std::string controlPath_;
    int control_ = -1;
    std::vector<std::unique_ptr<ControlClient>> controlClients_;
    uint64_t lastFaultLog_ = 0;
    unsigned congested_ = 0;       // an output the current input's packet filled
    std::vector<unsigned> resume_; // inputs whose output drained
    int epoll_ = -1;
    int wake_ = -1; // eventfd that stop() signals
};

} // namespace pib::fabric
