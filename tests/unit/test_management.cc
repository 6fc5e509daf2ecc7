// SPDX-License-Identifier: GPL-2.0-or-later
// The host's management interface of the core: packet capture on a port
// (read back with libpcap, as Wireshark would) and the inspection that
// QEMU's `info pib` and x-pib-query show.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <pcap/pcap.h>

#include "management_calls.hh"

using namespace pib;
using namespace pib::testing;

namespace {

nlohmann::json inspectJson(Node &n, const char *what) {
    const Answer a = inspect(n, what, true);
    REQUIRE(a.rc == 0);
    return nlohmann::json::parse(a.text);
}

// The records of a pcap file, and its link type.
std::vector<std::vector<uint8_t>> readRecords(const std::string &path, int *linkType) {
    char error[PCAP_ERRBUF_SIZE];
    pcap_t *p = pcap_open_offline(path.c_str(), error);
    REQUIRE(p != nullptr);
    *linkType = pcap_datalink(p);
    std::vector<std::vector<uint8_t>> records;
    pcap_pkthdr *header;
    const u_char *data;
    while (pcap_next_ex(p, &header, &data) == 1) {
        CHECK(header->caplen == header->len);
        CHECK(header->ts.tv_sec > 0);
        records.emplace_back(data, data + header->caplen);
    }
    pcap_close(p);
    return records;
}

struct Captured {
    std::vector<uint8_t> packet;
    bool sent; // the ERF header's interface: 1 sent, 0 received
};

// The packets of a capture: pcap records of LINKTYPE_ERF, each an ERF
// header of type InfiniBand and a packet, as Wireshark reads them.
std::vector<Captured> readPcap(const std::string &path) {
    int linkType = 0;
    std::vector<Captured> packets;
    for (const auto &r : readRecords(path, &linkType)) {
        REQUIRE(r.size() > 16);
        CHECK(r[8] == 21);                             // ERF type InfiniBand
        CHECK((r[9] & ~3) == 0x04);                    // variable length, interface in bits 1:0
        CHECK(size_t(r[10] << 8 | r[11]) == r.size()); // record length
        CHECK(size_t(r[14] << 8 | r[15]) == r.size() - 16); // wire length
        packets.push_back({{r.begin() + 16, r.end()}, (r[9] & 3) == 1});
    }
    CHECK(linkType == 197); // LINKTYPE_ERF
    return packets;
}

struct TempFile {
    std::string path;
    explicit TempFile(const char *name)
        : path((std::filesystem::temp_directory_path() /
                (std::string(name) + "-" + std::to_string(getpid()) + ".pcap"))
                   .string()) {}
    ~TempFile() { std::filesystem::remove(path); }
};

} // namespace

TEST_CASE("a port's capture holds every packet both ways, LRH to VCRC", "[management]") {
    Pair p;
    TempFile file("pib-capture");
    REQUIRE(capture(p.a, 1, file.path.c_str()).rc == 0);
    const uint64_t out = p.a.host.alloc(8192), in = p.b.host.alloc(8192);
    p.a.fill(out, 5000, 3);
    p.b.postRecv(1, in, 8192);
    p.a.postSend(1, {.local = out, .length = 5000});
    p.a.postSend(2, {.opcode = PIB_WR_RDMA_READ, .local = out, .length = 3000, .remote = in});
    p.wire.run();
    REQUIRE(p.a.poll().size() == 2);
    const Answer stopped = capture(p.a, 1, nullptr);
    CHECK(stopped.rc == 0);
    CHECK(stopped.text.find(std::to_string(p.wire.seen.size()) + " packets") != std::string::npos);

    const auto records = readPcap(file.path);
    REQUIRE(records.size() == p.wire.seen.size());
    for (size_t i = 0; i < records.size(); ++i) {
        // Each record is the packet as it crossed the wire, CRCs included,
        // and says which way it went.
        iba::ParseError error;
        auto parsed = iba::parse(records[i].packet, &error);
        REQUIRE(parsed.has_value());
        CHECK(parsed->bth.opcode == p.wire.seen[i].bth.opcode);
        CHECK(parsed->bth.psn == p.wire.seen[i].bth.psn);
        CHECK(records[i].packet == iba::build(p.wire.seen[i]));
        CHECK(records[i].sent == (parsed->lrh.slid == p.a.lid));
    }
    // Nothing more is recorded once stopped.
    p.b.postRecv(2, in, 8192);
    p.a.postSend(3, {.local = out, .length = 100});
    p.wire.run();
    CHECK(readPcap(file.path).size() == records.size());
}

TEST_CASE("a capture stops by itself at its packet limit", "[management]") {
    Pair p;
    TempFile file("pib-capture-limit");
    REQUIRE(capture(p.b, 1, file.path.c_str(), 3).rc == 0);
    const uint64_t out = p.a.host.alloc(8192), in = p.b.host.alloc(8192);
    p.b.postRecv(1, in, 8192);
    p.a.postSend(1, {.local = out, .length = 8000});
    p.wire.run();
    CHECK(readPcap(file.path).size() == 3);
    CHECK(
        capture(p.b, 1, nullptr).text.find("3 packets to " + file.path + " (stopped: the limit") !=
        std::string::npos);
}

TEST_CASE("a capture the host cannot start says why", "[management]") {
    Node n(PIB_QPT_RC, 0x11);
    const Answer noDir = capture(n, 1, "/nonexistent-dir/x.pcap");
    CHECK(noDir.rc == -1);
    CHECK(noDir.text.find("No such file") != std::string::npos);
    const Answer noPort = capture(n, 7, "/tmp/x.pcap");
    CHECK(noPort.rc == -1);
    CHECK(noPort.text == "the device has no port 7");
    CHECK(capture(n, 1, nullptr).text == "port 1: no capture");
}

TEST_CASE("inspection shows the device, its ports and objects, and one QP in detail",
          "[management]") {
    Pair p;
    const uint64_t out = p.a.host.alloc(4096), in = p.b.host.alloc(4096);
    p.b.postRecv(1, in, 4096);
    p.a.postSend(1, {.local = out, .length = 3000});
    p.wire.run();

    const auto device = inspectJson(p.a, nullptr);
    CHECK(device["state"] == "running");
    REQUIRE(device["ports"].size() == 1);
    CHECK(device["ports"][0]["state"] == "ACTIVE");
    CHECK(device["ports"][0]["lid"] == 0x11);
    CHECK(device["ports"][0]["counters"]["xmit_packets"] == 3);
    CHECK(device["objects"]["qps"] == 1);
    bool listed = false;
    for (const auto &qp : device["qps"])
        if (qp["qpn"] == p.a.qpn) {
            listed = true;
            CHECK(qp["type"] == "RC");
            CHECK(qp["state"] == "RTS");
            CHECK(qp["sq"]["pi"] == 1);
            CHECK(qp["sq"]["ci"] == 1);
        }
    CHECK(listed);
    REQUIRE(device["mrs"].size() == 1);
    CHECK(device["mrs"][0]["key"] == p.a.key);

    const std::string which = "qp " + std::to_string(p.a.qpn);
    const auto qp = inspectJson(p.a, which.c_str());
    CHECK(qp["path"]["dlid"] == 0x22);
    CHECK(qp["requester"]["next_psn"] == 103); // sq_psn 100, three packets
    CHECK(qp["requester"]["unacked_psn"] == 103);
    CHECK(qp["requester"]["in_flight"] == 0);
    const auto peer = inspectJson(p.b, ("qp " + std::to_string(p.b.qpn)).c_str());
    CHECK(peer["responder"]["expected_psn"] == 103);
    CHECK(peer["responder"]["msn"] == 1);

    const Answer text = inspect(p.a, which.c_str(), false);
    CHECK(text.rc == 0);
    CHECK(text.text.find("type RC  state RTS") != std::string::npos);
    CHECK(text.text.find("sq pi 1 ci 1 size 64") != std::string::npos);
    CHECK(text.text.find("requester:\n  next_psn 103") != std::string::npos);
}

TEST_CASE("inspecting what does not exist is an error, never a crash", "[management]") {
    Node n(PIB_QPT_RC, 0x11);
    for (const char *what : {"qp 99999", "qp", "cq x", "bogus 1", "port 0", "port 2", "mr 0x1",
                             "qp 0x", "eq 18446744073709551616", "qp -1"}) {
        INFO(what);
        const Answer a = inspect(n, what, true);
        CHECK(a.rc == -1);
        CHECK(!a.text.empty());
    }
    CHECK(inspect(n, "  ", false).rc == 0);
    CHECK(inspect(n, "port 1", false).text.find("state ACTIVE") != std::string::npos);
    CHECK(inspect(n, ("mr " + std::to_string(n.key)).c_str(), true).rc == 0);
}
