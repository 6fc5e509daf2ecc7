// SPDX-License-Identifier: GPL-2.0-or-later
// The fabric benchmark (./pib bench --fabric): two device cores in two
// processes, as in two VMs' QEMUs, cabled by UNIX sockets through real
// pib-fabric-switch processes (one, or two in a chain), RC RDMA WRITE,
// SEND and READ from 8 B to 1 MiB. No guest: what it measures is the path
// between the devices, the ceiling a guest reaches however fast it runs.
// With --pairs N, N such pairs stream at once, through one switch process
// (--layout shared) or each through a switch process of its own
// (--layout separate): what one switch forwards for many, beside the same
// work spread over independent switches. With --switch-threads N each
// switch reads its ring cables on N forwarding threads.
//
// This process starts the switches, programs them as a subnet manager
// would (bench_sm.hh), forks the two devices (bench_device.hh) and tells
// them what to do over a socket pair each. Every run moves random bytes
// and compares digests of both ends: a figure is printed only for data
// that arrived. It prints numbers; it asserts nothing about them.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <poll.h>
#include <stdexcept>
#include <string>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "bench_device.hh"
#include "bench_sm.hh"

using namespace pib;
using namespace pib::bench;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kMaxMessage = 1u << 20;
constexpr unsigned kDepth = 32; // WQEs in flight, as perftest's default tx depth
// Pair i's requester has LID 2i + 1, its responder 2i + 2.
constexpr uint16_t requesterLid(unsigned pair) {
    return static_cast<uint16_t>(2 * pair + 1);
}
constexpr unsigned kMaxPairs = 16;
constexpr int kIdleWaitMs = 10;   // a device with nothing to do sleeps this long at most
constexpr int kControlWaitS = 60; // a device answers an order in this time, or hangs
const uint32_t kSizes[] = {8, 64, 512, 4096, 16384, 65536, 262144, kMaxMessage};

struct Options {
    std::string switchBinary;
    int switches = 1;
    int runs = 3;               // each figure the median of this many runs
    double seconds = 0.3;       // each run streams this long...
    uint64_t messages = 0;      // ...or exactly this many messages (a profiler's fixed count)
    bool rings = false;         // ring cables (docs/wire.md) rather than streams
    std::string onlyOp;         // "write", "send" or "read": that operation only
    uint32_t onlySize = 0;      // that size only
    unsigned pairs = 1;         // pairs of devices streaming at once
    bool separate = false;      // each pair through a switch process of its own
    unsigned switchThreads = 0; // each switch's --forwarding-threads
};

// What the coordinator and a device say to each other, one per datagram.
struct Msg {
    enum Kind : uint32_t { kReady, kConnect, kPrepare, kRun, kFinish, kDone, kQuit };
    uint32_t kind = kDone;
    uint32_t op = 0, size = 0, seed = 0;
    uint64_t messages = 0; // kRun: how many (0: for `seconds`); kDone: how many went
    double seconds = 0;    // kRun: how long; kDone: how long it took
    double cpu = 0;        // kDone: this process's CPU seconds for the run
    uint64_t digest = 0;   // kDone: of the bytes sent (SEND, WRITE) or read (READ)
    uint32_t lid = 0, qpn = 0, rkey = 0;
    uint64_t addr = 0;
};

void put(int fd, const Msg &m) {
    if (write(fd, &m, sizeof(m)) != sizeof(m))
        throw std::runtime_error("a device's control socket is gone");
}

Msg get(int fd) {
    Msg m;
    if (read(fd, &m, sizeof(m)) != sizeof(m))
        throw std::runtime_error("a device ended (see its message above)");
    return m;
}

double cpuSeconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    auto s = [](timeval t) { return t.tv_sec + t.tv_usec / 1e6; };
    return s(u.ru_utime) + s(u.ru_stime);
}

double since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

void fillRandom(uint8_t *p, uint32_t len, uint32_t seed) {
    uint64_t x = 0x9e3779b97f4a7c15ull ^ seed;
    for (uint32_t i = 0; i < len; ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = static_cast<uint8_t>(x);
    }
}

uint64_t digest(const uint8_t *p, uint32_t len) { // FNV-1a
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t i = 0; i < len; ++i)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

// ---- a device process ------------------------------------------------

class DeviceProcess {
  public:
    DeviceProcess(int control, uint16_t lid, const std::string &port, bool rings)
        : control_(control), device_(lid, port, rings), buffer_(node().host.alloc(kMaxMessage)) {}

    void serve() {
        put(control_, {.kind = Msg::kReady,
                       .lid = node().lid,
                       .qpn = node().qpn,
                       .rkey = node().key,
                       .addr = buffer_});
        for (;;) {
            if (!orderWaiting()) {
                device_.pump(kIdleWaitMs);
                repostReceives();
                continue;
            }
            const Msg m = get(control_);
            if (m.kind == Msg::kQuit)
                return;
            put(control_, obey(m));
        }
    }

  private:
    int control_;
    BenchDevice device_;
    uint64_t buffer_;
    uint32_t peerRkey_ = 0;
    uint64_t peerAddr_ = 0;
    bool receiving_ = false;      // the responder of a SEND row: it reposts receives
    unsigned receivesPosted_ = 0; // and not used yet; they outlive a row
    uint64_t received_ = 0;
    double cpuAtPrepare_ = 0;

    testing::Node &node() { return device_.node(); }

    bool orderWaiting() const {
        pollfd p{control_, POLLIN, 0};
        return poll(&p, 1, 0) > 0;
    }

    Msg obey(const Msg &m) {
        switch (m.kind) {
        case Msg::kConnect:
            return connect(m);
        case Msg::kPrepare:
            return prepare(m);
        case Msg::kRun:
            return stream(m);
        case Msg::kFinish:
            return finish(m);
        default:
            throw std::runtime_error("an order a device does not know");
        }
    }

    Msg connect(const Msg &peer) {
        testing::Node::Options o;
        o.mtu = 5;      // 4096
        o.timeout = 14; // 67 ms: real time passes here
        o.retryCnt = 7;
        o.rnrRetry = 7;          // infinite: a responder that falls behind is waited for
        if (node().lid % 2 == 0) // a responder: its peer's PSNs mirrored
            std::swap(o.sqPsn, o.rqPsn);
        node().connectTo(peer.lid, peer.qpn, PIB_QPT_RC, o);
        peerRkey_ = peer.rkey;
        peerAddr_ = peer.addr;
        return {};
    }

    // The responder's side of a run: receives for SENDs, data for READs.
    Msg prepare(const Msg &m) {
        cpuAtPrepare_ = cpuSeconds();
        received_ = 0;
        std::memset(node().host.at(buffer_), 0, m.size);
        if (m.op == PIB_WR_RDMA_READ)
            fillRandom(node().host.at(buffer_), m.size, m.seed);
        receiving_ = m.op == PIB_WR_SEND;
        if (receiving_)
            for (; receivesPosted_ < (1u << testing::Node::kLogRq) - 1; ++receivesPosted_)
                node().postRecv(receivesPosted_, buffer_, kMaxMessage);
        return {};
    }

    void repostReceives() {
        for (const pib_cqe &c : node().poll()) {
            if (c.status != PIB_WC_SUCCESS)
                throw std::runtime_error("a receive completed in error " +
                                         std::to_string(c.status));
            ++received_;
            if (receiving_)
                node().postRecv(c.wr_id, buffer_, kMaxMessage);
            else
                --receivesPosted_;
        }
    }

    Msg finish(const Msg &m) {
        // The receives still posted stay for the next SEND row, which
        // tops them up.
        receiving_ = false;
        repostReceives();
        return {.messages = received_,
                .cpu = cpuSeconds() - cpuAtPrepare_,
                .digest = digest(node().host.at(buffer_), m.size)};
    }

    // The requester's side: `m.messages` messages, or as many as fit in
    // `m.seconds`, kDepth in flight.
    Msg stream(const Msg &m) {
        if (m.op != PIB_WR_RDMA_READ)
            fillRandom(node().host.at(buffer_), m.size, m.seed);
        else
            std::memset(node().host.at(buffer_), 0, m.size);
        const double cpu = cpuSeconds();
        const auto start = Clock::now();
        uint64_t posted = 0, completed = 0;
        auto more = [&] { return m.messages ? posted < m.messages : since(start) < m.seconds; };
        while (more() || completed < posted) {
            for (; more() && posted - completed < kDepth; ++posted)
                node().postSend(posted, {.opcode = static_cast<uint8_t>(m.op),
                                         .local = buffer_,
                                         .length = m.size,
                                         .remote = peerAddr_,
                                         .rkey = peerRkey_});
            device_.pump(1);
            for (const pib_cqe &c : node().poll()) {
                if (c.status != PIB_WC_SUCCESS)
                    throw std::runtime_error("a request completed in error " +
                                             std::to_string(c.status));
                ++completed;
            }
        }
        return {.messages = completed,
                .seconds = since(start),
                .cpu = cpuSeconds() - cpu,
                .digest = digest(node().host.at(buffer_), m.size)};
    }
};

// ---- the coordinator ---------------------------------------------------

struct Child {
    pid_t pid = 0;
    int control = -1;
};

pid_t spawn(const std::vector<std::string> &args, const std::string &log) {
    const pid_t pid = fork();
    if (pid == 0) {
        const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1), dup2(fd, 2);
        std::vector<char *> argv;
        for (const std::string &a : args)
            argv.push_back(const_cast<char *>(a.c_str()));
        argv.push_back(nullptr);
        execv(argv[0], argv.data());
        _exit(127);
    }
    return pid;
}

Child forkDevice(uint16_t lid, const std::string &port, bool rings,
                 const std::vector<Child> &others) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
        throw std::runtime_error("socketpair");
    const pid_t pid = fork();
    if (pid == 0) {
        close(pair[0]);
        for (const Child &c : others)
            close(c.control);
        try {
            DeviceProcess(pair[1], lid, port, rings).serve();
            _exit(0);
        } catch (const std::exception &e) {
            std::fprintf(stderr, "fabric-bench: device of LID %u: %s\n", lid, e.what());
            _exit(1);
        }
    }
    close(pair[1]);
    timeval limit{kControlWaitS, 0};
    setsockopt(pair[0], SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
    return {pid, pair[0]};
}

// CPU seconds a process used so far, from /proc (0 if it is gone).
double processCpu(pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos)
        return 0;
    std::vector<std::string> fields;
    size_t at = close + 2;
    while (at < line.size()) {
        const size_t end = std::min(line.find(' ', at), line.size());
        fields.push_back(line.substr(at, end - at));
        at = end + 1;
    }
    if (fields.size() < 13) // utime and stime are the 14th and 15th fields
        return 0;
    return (std::stod(fields[11]) + std::stod(fields[12])) / sysconf(_SC_CLK_TCK);
}

class Coordinator {
  public:
    explicit Coordinator(const Options &o) : o_(o) {
        char dir[] = "/tmp/pib-fabric-bench-XXXXXX";
        if (!mkdtemp(dir))
            throw std::runtime_error("mkdtemp");
        dir_ = dir;
    }
    ~Coordinator() { stop(); }

    void run() {
        startSwitches();
        for (unsigned i = 0; i < o_.pairs; ++i) {
            Pair pair;
            pair.a = forkDevice(requesterLid(i), devicePort(i, 0), o_.rings, children());
            children_.push_back(pair.a);
            pair.b = forkDevice(requesterLid(i) + 1, devicePort(i, 1), o_.rings, children());
            children_.push_back(pair.b);
            pairs_.push_back(pair);
        }
        std::vector<Msg> ready;
        for (const Child &c : children_)
            ready.push_back(get(c.control));
        programSwitches();
        for (size_t c = 0; c < children_.size(); ++c) {
            Msg connect = ready[c ^ 1]; // each device is told of its pair's other
            connect.kind = Msg::kConnect;
            put(children_[c].control, connect);
        }
        for (const Child &c : children_)
            get(c.control);
        printHeader();
        for (uint32_t op : {PIB_WR_RDMA_WRITE, PIB_WR_SEND, PIB_WR_RDMA_READ})
            for (uint32_t size : kSizes)
                if (selected(op, size))
                    row(op, size);
    }

  private:
    struct Pair {
        Child a, b; // the requester and the responder
    };
    Options o_;
    std::string dir_;
    std::vector<pid_t> switches_;
    std::vector<Child> children_; // every device, in pairs
    std::vector<Pair> pairs_;
    uint32_t seed_ = 1;

    const std::vector<Child> &children() const { return children_; }

    static const char *name(uint32_t op) {
        return op == PIB_WR_SEND ? "SEND" : op == PIB_WR_RDMA_READ ? "RDMA READ" : "RDMA WRITE";
    }

    bool selected(uint32_t op, uint32_t size) const {
        const char *word = op == PIB_WR_SEND ? "send" : op == PIB_WR_RDMA_READ ? "read" : "write";
        return (o_.onlyOp.empty() || o_.onlyOp == word) && (!o_.onlySize || o_.onlySize == size);
    }

    std::string switchDir(int s) const { return dir_ + "/s" + std::to_string(s); }

    // The switch port device `end` (0 the requester, 1 the responder) of
    // pair `i` is cabled to. One switch: pair i on ports 2i + 1 and
    // 2i + 2, the SM on the last port. Separate switches: pair i on
    // ports 1 and 2 of switch i + 1, its SM on port 3. Two in a chain:
    // the requester on switch 1, the responder on switch 2.
    std::string devicePort(unsigned i, unsigned end) const {
        if (o_.separate)
            return switchDir(static_cast<int>(i) + 1) + "/port" + std::to_string(end + 1) + ".sock";
        if (o_.switches == 2)
            return switchDir(static_cast<int>(end) + 1) + "/port1.sock";
        return switchDir(1) + "/port" + std::to_string(2 * i + end + 1) + ".sock";
    }

    // Separate switches: one of 3 ports for each pair. Otherwise switch1:
    // the pairs' devices, then the SM; in a chain, switch1 has the
    // requester, the SM and switch2, switch2 the responder and switch1.
    void startSwitches() {
        const int count = o_.separate ? static_cast<int>(o_.pairs) : o_.switches;
        for (int s = 1; s <= count; ++s) {
            const std::string dir = switchDir(s);
            mkdir(dir.c_str(), 0755);
            const unsigned ports = o_.separate        ? 3
                                   : s == 2           ? 2
                                   : o_.switches == 2 ? 3
                                                      : 2 * o_.pairs + 1;
            std::vector<std::string> args = {o_.switchBinary,
                                             "--ports",
                                             std::to_string(ports),
                                             "--socket-dir",
                                             dir,
                                             "--guid",
                                             std::to_string(0x0250494200005100ull + s),
                                             "--name",
                                             "bench" + std::to_string(s)};
            if (s == 2 && !o_.separate)
                args.insert(args.end(), {"--connect", "2=" + dir_ + "/s1/port3.sock"});
            if (o_.switchThreads)
                args.insert(args.end(), {"--forwarding-threads", std::to_string(o_.switchThreads)});
            switches_.push_back(spawn(args, dir + ".log"));
        }
    }

    void programSwitches() {
        if (o_.separate) {
            for (unsigned i = 0; i < o_.pairs; ++i) {
                BenchSm sm(switchDir(static_cast<int>(i) + 1) + "/port3.sock");
                const uint16_t a = requesterLid(i);
                sm.configureSwitch({1}, {{a, 1}, {a + 1, 2}}, {1, 2});
            }
            return;
        }
        if (o_.switches == 2) {
            BenchSm sm(switchDir(1) + "/port2.sock");
            const uint16_t a = requesterLid(0);
            sm.configureSwitch({1}, {{a, 1}, {a + 1, 3}}, {1, 3});
            sm.configureSwitch({1, 3}, {{a, 2}, {a + 1, 1}}, {1, 2});
            return;
        }
        BenchSm sm(switchDir(1) + "/port" + std::to_string(2 * o_.pairs + 1) + ".sock");
        std::vector<std::pair<uint16_t, uint8_t>> routes;
        std::vector<uint8_t> ports;
        for (unsigned i = 0; i < o_.pairs; ++i)
            for (unsigned end = 0; end < 2; ++end) {
                const auto port = static_cast<uint8_t>(2 * i + end + 1);
                routes.emplace_back(requesterLid(i) + end, port);
                ports.push_back(port);
            }
        sm.configureSwitch({1}, routes, ports);
    }

    void printHeader() const {
        if (o_.pairs == 1 && !o_.separate)
            std::printf("pib-hca fabric: two device processes through %d pib-fabric-switch "
                        "process%s, %s cables, RC, MTU 4096, %u in flight\n",
                        o_.switches, o_.switches == 2 ? "es" : "", o_.rings ? "ring" : "stream",
                        kDepth);
        else
            std::printf("pib-hca fabric: %u pairs of device processes streaming at once through "
                        "%s, %s cables, RC, MTU 4096, %u in flight each; figures are the pairs' "
                        "sum\n",
                        o_.pairs,
                        o_.separate ? "a pib-fabric-switch process each"
                                    : "one pib-fabric-switch process",
                        o_.rings ? "ring" : "stream", kDepth);
        if (o_.switchThreads)
            std::printf("(each switch reads its ring cables on %u forwarding threads)\n",
                        o_.switchThreads);
        if (o_.messages)
            std::printf("(%d runs of %llu messages per row, the median run)\n", o_.runs,
                        static_cast<unsigned long long>(o_.messages));
        else
            std::printf("(%d runs of %.1f s per row, the median run)\n", o_.runs, o_.seconds);
        std::printf("%-11s %8s %12s %9s | %-33s\n", "operation", "bytes", "messages/s", "GB/s",
                    "CPU seconds per GB: req  resp  switch");
    }

    struct Run {
        double rate, cpuRequester, cpuResponder, cpuSwitches;
        uint64_t bytes;
    };

    // Every pair streams `op` of `size` at once: the rate is the pairs'
    // messages over the longest of their runs.
    Run once(uint32_t op, uint32_t size) {
        const uint32_t seed = seed_++;
        double switchCpu = 0;
        for (pid_t s : switches_)
            switchCpu -= processCpu(s);
        for (const Pair &p : pairs_)
            put(p.b.control, {.kind = Msg::kPrepare, .op = op, .size = size, .seed = seed});
        for (const Pair &p : pairs_)
            get(p.b.control);
        for (const Pair &p : pairs_)
            put(p.a.control, {.kind = Msg::kRun,
                              .op = op,
                              .size = size,
                              .seed = seed,
                              .messages = o_.messages,
                              .seconds = o_.seconds});
        Run total{};
        double longest = 0;
        uint64_t messages = 0;
        for (const Pair &p : pairs_) {
            const Msg ran = get(p.a.control);
            put(p.b.control, {.kind = Msg::kFinish, .size = size});
            const Msg done = get(p.b.control);
            if (ran.digest != done.digest)
                throw std::runtime_error(std::string(name(op)) + " of " + std::to_string(size) +
                                         " B: the bytes at the two ends differ");
            if (op == PIB_WR_SEND && done.messages != ran.messages)
                throw std::runtime_error("SEND: " + std::to_string(ran.messages) + " sent, " +
                                         std::to_string(done.messages) + " received");
            longest = std::max(longest, ran.seconds);
            messages += ran.messages;
            total.cpuRequester += ran.cpu;
            total.cpuResponder += done.cpu;
        }
        for (pid_t s : switches_)
            switchCpu += processCpu(s);
        total.rate = messages / longest;
        total.cpuSwitches = switchCpu;
        total.bytes = messages * size;
        return total;
    }

    void row(uint32_t op, uint32_t size) {
        std::vector<Run> runs;
        for (int r = 0; r < o_.runs; ++r)
            runs.push_back(once(op, size));
        std::sort(runs.begin(), runs.end(),
                  [](const Run &x, const Run &y) { return x.rate < y.rate; });
        const Run &median = runs[runs.size() / 2];
        const double gb = median.bytes / 1e9;
        std::printf("%-11s %8u %12.0f %9.3f | %9.2f %5.2f %7.2f\n", name(op), size, median.rate,
                    median.rate * size / 1e9, median.cpuRequester / gb, median.cpuResponder / gb,
                    median.cpuSwitches / gb);
        std::fflush(stdout);
    }

    void stop() {
        for (Child &c : children_)
            if (c.pid > 0) {
                Msg quit;
                quit.kind = Msg::kQuit;
                (void)write(c.control, &quit, sizeof(quit));
                close(c.control);
                waitpid(c.pid, nullptr, 0);
                c.pid = 0;
            }
        for (pid_t s : switches_) {
            kill(s, SIGTERM);
            waitpid(s, nullptr, 0);
        }
        switches_.clear();
        std::system(("rm -rf '" + dir_ + "'").c_str());
    }
};

Options parse(int argc, char **argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc)
                throw std::runtime_error(a + " needs a value");
            return argv[++i];
        };
        if (a == "--switch")
            o.switchBinary = value();
        else if (a == "--switches")
            o.switches = std::stoi(value());
        else if (a == "--runs")
            o.runs = std::stoi(value());
        else if (a == "--seconds")
            o.seconds = std::stod(value());
        else if (a == "--cable") {
            const std::string kind = value();
            if (kind != "ring" && kind != "stream")
                throw std::runtime_error("--cable is ring or stream");
            o.rings = kind == "ring";
        } else if (a == "--pairs")
            o.pairs = static_cast<unsigned>(std::stoul(value()));
        else if (a == "--layout") {
            const std::string layout = value();
            if (layout != "shared" && layout != "separate")
                throw std::runtime_error("--layout is shared or separate");
            o.separate = layout == "separate";
        } else if (a == "--switch-threads")
            o.switchThreads = static_cast<unsigned>(std::stoul(value()));
        else if (a == "--messages")
            o.messages = std::stoull(value());
        else if (a == "--only") {
            o.onlyOp = value();
            o.onlySize = static_cast<uint32_t>(std::stoul(value()));
        } else
            throw std::runtime_error("unknown option " + a);
    }
    if (o.switchBinary.empty() || o.switches < 1 || o.switches > 2 || o.runs < 1 || o.pairs < 1 ||
        o.pairs > kMaxPairs || (o.switches == 2 && (o.pairs > 1 || o.separate)))
        throw std::runtime_error("usage: fabric-bench --switch PIB-FABRIC-SWITCH [--switches 1|2] "
                                 "[--cable ring|stream] [--runs N] [--seconds S | --messages N] "
                                 "[--only OP SIZE] [--pairs 1..16 [--layout shared|separate]] "
                                 "[--switch-threads N] "
                                 "(pairs through one switch, or a chain of two with one pair)");
    return o;
}

} // namespace

int main(int argc, char **argv) {
    std::signal(SIGPIPE, SIG_IGN);
    try {
        Coordinator(parse(argc, argv)).run();
        return 0;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "fabric-bench: %s\n", e.what());
        return 1;
    }
}
