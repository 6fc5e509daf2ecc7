// SPDX-License-Identifier: GPL-2.0-or-later
// The switch's I/O: one stream socket per port (a UNIX socket the port's
// peer connects to, a TCP listener, or an outgoing connection to another
// switch), framed by the pib wire protocol, all in one epoll loop.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "frame.hh"
#include "switch.hh"

namespace pib::fabric {

using namespace pib::iba;

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

    // Opens every endpoint; throws std::runtime_error on failure.
    void open();
    // Runs until stop() is called (from a signal handler) or a fatal error.
    void run();
    void stop();

  private:
    struct Connection;
    void accept(unsigned port);
    void connectOut(unsigned port);
    void onReadable(unsigned port);
    void onWritable(unsigned port);
    void drop(unsigned port, const char *why);
    void sendFrame(unsigned port, uint8_t type, std::span<const uint8_t> payload);
    void sendHello(unsigned port);
    void watch(int fd, unsigned port, bool listener, bool writable);

    Switch &sw_;
    std::vector<PortEndpoint> endpoints_; // index = port number
    std::vector<int> listeners_;
    std::vector<std::unique_ptr<Connection>> conns_;
    int epoll_ = -1;
    int wake_ = -1; // eventfd that stop() signals
};

} // namespace pib::fabric
