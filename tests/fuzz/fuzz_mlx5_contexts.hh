// SPDX-License-Identifier: GPL-2.0-or-later
// Two user contexts of a ConnectX function (docs/mlx5.md §16), and an
// oracle of their isolation: the device alone keeps one process's objects
// from another's, whatever the other's commands say.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mlx5_function.hh"

namespace pib::fuzzing {

using pib::testing::Mlx5Function;

// Where a DEVX create names the UMEMs of its ring and doorbell record:
// valid bit, UMEM id, offset, for the ring then the record
// (docs/mlx5.md §16.2).
struct UmemFields {
    mlx5::Field fields[6];
};

// Victim A's objects are made as mlx5_ib makes a process's; the
// attacker, B, issues any command of the object interface: creates on
// objects it picks among A's, its own, the kernel's or any number, and
// destroys, changes, queries, arms and binds them, under its own uid or
// one no context has, its inputs then bent at any byte. The oracle,
// after every command: A's objects are as A left them (the kernel's
// QUERY_QP, QUERY_SRQ and QUERY_DCT of them, and the host's inspection
// of its CQ and key, byte for byte), A's context cannot end while they
// exist, nor its UMEM or its range of reserved QP numbers, and every object B made builds only on
// B's (its PD, CQs, SRQ, as inspection shows them) and says uid B.
class UserContextsFuzz {
  public:
    explicit UserContextsFuzz(Mlx5Host &host) : f_(host) {}
    bool setUp();
    void step(FuzzedDataProvider &in);

  private:
    struct Objects {
        uint32_t pd = 0, uar = 0, cq = 0, srq = 0, qp = 0, dct = 0, key = 0, umem = 0;
        uint32_t range = 0;   // of reserved QP numbers: a general object
        uint32_t udQp = 0;    // a UD QP, and the AH-to-QP mapping to it
        uint32_t mapping = 0; // (a general object)
    };
    struct Made {
        char kind; // 'q' QP or DCT, 's' SRQ, 'k' memory key, 'c' CQ, 'm' UMEM,
                   // 'g' general object
        uint32_t number;
    };

    Mlx5Host::Reply as(uint16_t uid, std::vector<uint8_t> in, uint32_t outBytes = 16);
    bool makeObjects(uint16_t uid, Objects &o);
    std::vector<uint8_t> srqInput(uint16_t opcode, uint32_t pd, uint32_t cq, uint32_t xrcd);
    std::vector<uint8_t> keyInput(uint32_t pd);
    std::vector<uint8_t> umemInput(FuzzedDataProvider *in);
    static std::vector<uint8_t> generalInput(uint16_t opcode, uint16_t type, uint32_t id,
                                             uint32_t mappedQpn = 0);
    uint32_t pick(FuzzedDataProvider &in, char kind);
    void placeInUmems(FuzzedDataProvider &in, std::vector<uint8_t> &cmd, const UmemFields &f);
    std::vector<uint8_t> command(FuzzedDataProvider &in, char &made);
    std::string snapshotOfA();
    std::string inspect(const std::string &what);
    void checkMadeByB();

    Mlx5Function f_;
    uint16_t a_ = 0, b_ = 0;
    Objects objA_, objB_;
    uint32_t kernelXrcd_ = 0, sharedCounter_ = 0;
    std::vector<Made> madeByB_;
    std::string before_;
};

} // namespace pib::fuzzing
