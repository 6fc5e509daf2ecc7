// SPDX-License-Identifier: GPL-2.0-or-later
// pib-fabric-switch: an InfiniBand switch for pib-hca fabrics.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>

#include "server.hh"
#include "sim_fabric.hh"

namespace {

const char kUsage[] = R"(usage: pib-fabric-switch [OPTIONS]

An InfiniBand switch that pib-hca ports (and other switches) connect to.
opensm discovers and programs it like a real switch: SMA, LFT/MFT
forwarding, directed-route SMPs and a PMA.

Options:
  --ports N             external ports (default 8, 1..254)
  --socket-dir DIR      port N listens on DIR/portN.sock (default: .)
  --guid GUID           node GUID (default 0x0250494253570001)
  --name TEXT           NodeDescription (default "pib-hca fabric switch")
  --tcp N=HOST:PORT     port N listens on TCP instead (another host's switch)
  --connect N=PATH      port N connects to a UNIX socket (another switch's port)
  --connect-tcp N=HOST:PORT
                        port N connects over TCP; a HOST name is resolved
                        anew at each attempt
                        Both dial again when the link fails or drops:
                        after 1 s, doubling up to 30 s (from 1 s again once
                        a link came up); an attempt not connected in 5 s
                        is abandoned. Other ports never wait for it.
  --move-grace MS       how long a port whose device said MOVING (its VM
                        migrates) keeps its link for the device to come
                        back on a new connection (default 5000; docs/wire.md)
  --restore FILE        start with the state a switch saved (the control
                        socket's "save FILE"; ./pib fabric snapshot): its
                        SM's configuration, forwarding tables and
                        counters. Each link that was up stays up until
                        its peer resumes it (a guest or switch restored
                        from the same snapshot), or the grace runs out
  --restore-grace MS    how long a restored link waits (default 60000)
  --control PATH        take fault commands on a UNIX socket (see docs/wire.md)
  --fault N=SPEC        inject faults into port N from the start, e.g.
                        --fault 3=loss=5%,corrupt=1%,dir=in; SPEC words:
                        loss=P% loss-every=N burst=LEN/EVERY corrupt=P%
                        dup=P% reorder=P% window=N delay=T[+-T] flap=T/T
                        dir=in|out|both seed=N (times in ns, us, ms or s)
  --fault GUID:PORT=SPEC
                        the same on the end of a link inside the --fabric:
                        port PORT of the simulated node GUID
  --capture N=FILE      record port N's packets, both ways, to a pcap file
                        that Wireshark reads as InfiniBand (ERF records);
                        see also the control socket's capture command
  --fabric FILE         simulate a whole fabric of switches and CAs (a
                        fabric file, docs/wire.md "Simulated fabrics"):
                        its `attach` statements, in order, are ports 1..N;
                        --ports, --guid and --name do not apply; with
                        --restore, the state a process of the same fabric
                        file saved: every simulated switch's and CA's
                        state
  --forwarding-threads N
                        read ring cables on N threads (0..16, default 0:
                        on the event loop): the copy out of each peer's
                        ring and the VCRC check run beside the loop, which
                        forwards (docs/wire.md, "Forwarding threads")
  --verbose             log every dropped packet and why
  --help                show this text

Cabling a guest: give its QEMU (one with -device pib-hca) a chardev that
connects to a port's socket and name it as the HCA port's cable:
  -chardev socket,id=ib1,path=DIR/port1.sock,reconnect-ms=1000
  -device pib-hca,bus=ROOTPORT,node-guid=0x0250494200000101,port1=ib1
With reconnect-ms the guest rides out a switch restart. Under libvirt the
two go in the domain's <qemu:commandline>; pib-hca's
examples/libvirt/pib-guest.xml shows one, and its
pib-fabric-switch@.service runs a switch as a systemd service. One guest
of the subnet runs opensm.
)";

pib::fabric::Server *g_server = nullptr;

void onSignal(int) {
    if (g_server)
        g_server->stop();
}

unsigned portOf(const std::string &spec, unsigned ports, std::string *rest) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos)
        throw std::runtime_error("expected N=..., got " + spec);
    const unsigned long n = std::stoul(spec.substr(0, eq));
    if (n < 1 || n > ports)
        throw std::runtime_error("no port " + spec.substr(0, eq));
    *rest = spec.substr(eq + 1);
    return static_cast<unsigned>(n);
}

// What the command line asks for.
struct Options {
    pib::fabric::SwitchConfig config;
    std::string dir = ".";
    bool verbose = false;
    bool help = false;
    std::vector<std::pair<std::string, std::string>> overrides; // --tcp, --connect*
    std::vector<std::string> faults;
    std::vector<std::string> captures;
    std::string control;
    uint64_t moveGraceMs = 5000;
    std::string restore;
    std::string fabric;
    uint64_t restoreGraceMs = 60000;
    unsigned forwardingThreads = 0;
};

// A grace period in ms, as --move-grace and --restore-grace take it.
uint64_t graceMs(const std::string &option, const std::string &text) {
    const unsigned long long ms = std::stoull(text);
    if (ms > 600'000)
        throw std::runtime_error(option + " is at most 600000 ms");
    return ms;
}

Options parseOptions(int argc, char **argv) {
    Options o;
    o.config.guid = 0x0250494253570001ull;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc)
                throw std::runtime_error(arg + " needs a value");
            return argv[++i];
        };
        if (arg == "--help" || arg == "-h") {
            o.help = true;
        } else if (arg == "--ports") {
            const unsigned long n = std::stoul(value());
            if (n < 1 || n > 254)
                throw std::runtime_error("--ports must be 1..254");
            o.config.ports = static_cast<unsigned>(n);
        } else if (arg == "--forwarding-threads") {
            const unsigned long n = std::stoul(value());
            if (n > 16)
                throw std::runtime_error("--forwarding-threads must be 0..16");
            o.forwardingThreads = static_cast<unsigned>(n);
        } else if (arg == "--verbose") {
            o.verbose = true;
        } else if (arg == "--socket-dir") {
            o.dir = value();
        } else if (arg == "--guid") {
            o.config.guid = std::stoull(value(), nullptr, 0);
        } else if (arg == "--name") {
            o.config.description = value();
        } else if (arg == "--control") {
            o.control = value();
        } else if (arg == "--move-grace") {
            o.moveGraceMs = graceMs(arg, value());
        } else if (arg == "--fabric") {
            o.fabric = value();
        } else if (arg == "--restore") {
            o.restore = value();
        } else if (arg == "--restore-grace") {
            o.restoreGraceMs = graceMs(arg, value());
        } else if (arg == "--fault") {
            o.faults.push_back(value());
        } else if (arg == "--capture") {
            o.captures.push_back(value());
        } else if (arg == "--tcp" || arg == "--connect" || arg == "--connect-tcp") {
            o.overrides.emplace_back(arg, value());
        } else {
            throw std::runtime_error("unknown option " + arg + " (see --help)");
        }
    }
    return o;
}

// Where each port's stream is: DIR/portN.sock unless an option says else.
std::vector<pib::fabric::PortEndpoint> endpointsOf(const Options &o) {
    using Kind = pib::fabric::PortEndpoint::Kind;
    std::vector<pib::fabric::PortEndpoint> endpoints(o.config.ports + 1);
    for (unsigned p = 1; p <= o.config.ports; ++p)
        endpoints[p] = {Kind::kUnixListen, o.dir + "/port" + std::to_string(p) + ".sock"};
    for (const auto &[option, spec] : o.overrides) {
        std::string rest;
        const unsigned p = portOf(spec, o.config.ports, &rest);
        endpoints[p] = {option == "--tcp"       ? Kind::kTcpListen
                        : option == "--connect" ? Kind::kUnixConnect
                                                : Kind::kTcpConnect,
                        rest};
    }
    return endpoints;
}

void applyFaults(pib::fabric::Server &server, const Options &o) {
    for (const std::string &spec : o.faults) {
        // GUID:PORT=SPEC: a link inside a simulated fabric, as the control
        // socket's "link GUID PORT fault SPEC" sets it.
        const std::string where = spec.substr(0, spec.find('='));
        if (where.find(':') != std::string::npos) {
            std::string words = spec.substr(std::min(spec.size(), where.size() + 1));
            std::replace(words.begin(), words.end(), ',', ' ');
            std::string line = where;
            line[line.find(':')] = ' ';
            const std::string answer = server.controlCommand("link " + line + " fault " + words);
            if (answer.rfind("ok", 0) != 0)
                throw std::runtime_error("--fault " + spec + ": " + answer);
            continue;
        }
        std::string rest, error;
        const unsigned p = portOf(spec, o.config.ports, &rest);
        const auto setting = pib::fabric::FaultSetting::parse(rest, &error);
        if (!setting)
            throw std::runtime_error("--fault " + spec + ": " + error);
        server.setFault(p, *setting);
    }
    for (const std::string &spec : o.captures) {
        std::string file;
        const unsigned p = portOf(spec, o.config.ports, &file);
        server.startCapture(p, file, 0);
    }
}

void log(const std::string &line) {
    pib::fabric::logLine(line.c_str());
}

// One switch, or the simulated fabric --fabric describes (whose ports
// then set --ports).
std::unique_ptr<pib::fabric::Element> makeElement(Options &o) {
    if (o.fabric.empty()) {
        auto sw = std::make_unique<pib::fabric::Switch>(o.config);
        sw->setEventLogger(log);
        if (o.verbose)
            sw->setDropLogger(log);
        return std::make_unique<pib::fabric::SwitchElement>(std::move(sw));
    }
    std::ifstream in(o.fabric);
    if (!in)
        throw std::runtime_error("cannot read " + o.fabric);
    auto fabric = std::make_unique<pib::fabric::SimulatedFabric>(pib::fabric::readFabric(in));
    if (fabric->ports() == 0 || fabric->ports() > 254)
        throw std::runtime_error(o.fabric + ": 1 to 254 attach statements, not " +
                                 std::to_string(fabric->ports()));
    o.config.ports = fabric->ports();
    // The simulated switches' events (every port the SM sets) are many:
    // logged with --verbose only, as their drops are.
    if (o.verbose) {
        fabric->setEventLogger(log);
        fabric->setDropLogger(log);
    }
    fabric->setFaultLogger(log);
    pib::fabric::logLine((std::to_string(fabric->switchCount()) + " simulated switches, " +
                          std::to_string(fabric->caCount()) + " simulated CAs")
                             .c_str());
    return fabric;
}

} // namespace

int main(int argc, char **argv) {
    try {
        Options o = parseOptions(argc, argv);
        if (o.help) {
            std::fputs(kUsage, stdout);
            return 0;
        }
        std::unique_ptr<pib::fabric::Element> element = makeElement(o);
        pib::fabric::Server server(std::move(element), endpointsOf(o));
        applyFaults(server, o);
        if (!o.control.empty())
            server.setControlSocket(o.control);
        server.setMoveGrace(o.moveGraceMs * 1'000'000);
        server.setForwardingThreads(o.forwardingThreads);
        if (!o.restore.empty())
            server.restoreState(pib::fabric::readStateFile(o.restore),
                                o.restoreGraceMs * 1'000'000);
        server.open();
        g_server = &server;
        std::signal(SIGTERM, onSignal);
        std::signal(SIGINT, onSignal);
        std::signal(SIGPIPE, SIG_IGN);
        char guid[32];
        std::snprintf(guid, sizeof(guid), "0x%016llx",
                      static_cast<unsigned long long>(o.config.guid));
        pib::fabric::logLine((std::to_string(o.config.ports) + " ports, " +
                              (o.fabric.empty() ? "GUID " + std::string(guid)
                                                : "a simulated fabric from " + o.fabric) +
                              ", sockets in " + o.dir)
                                 .c_str());
        server.run();
        g_server = nullptr;
        return 0;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "pib-fabric-switch: %s\n", e.what());
        return 2;
    }
}
