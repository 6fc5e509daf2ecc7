// SPDX-License-Identifier: GPL-2.0-or-later
// The one WQE reader on its own: every queue's WQEs decoded and checked
// the same way, whatever transport reads them.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "host.hh"
#include "mtt.hh"
#include "pib/pib_wqe_reader.hh"

namespace {

using pib::Wqe;
using pib::WqeReader;
using pib::WqeRing;

// One ring page of guest memory behind MTT entry 0, and the guest errors
// the reader reports.
struct Harness {
    static constexpr uint64_t kBase = 0x40000;
    static constexpr uint8_t kLogStride = 6; // 64-byte slots
    static constexpr uint32_t kMaxInline = 32;

    std::vector<uint8_t> page = std::vector<uint8_t>(PIB_PAGE_SIZE);
    std::vector<std::string> errors;
    pib_host_ops ops = makeOps();
    pib::Host host{ops, this};
    pib::Mtt mtt{16, 16};
    pib_buf_desc buf{};
    WqeReader reader{host, mtt, kMaxInline};

    Harness() {
        buf.mtt_index = *mtt.allocate(1);
        buf.npages = 1;
        mtt.write(buf.mtt_index, kBase);
    }
    WqeRing ring() const { return {buf, 6, kLogStride}; }

    static pib_host_ops makeOps() {
        pib_host_ops o{};
        o.guest_error = [](void *opaque, unsigned error, const char *) {
            static_cast<Harness *>(opaque)->errors.emplace_back(pib_guest_error_token(error));
        };
        o.dma_read = [](void *opaque, uint64_t addr, void *out, uint64_t len) {
            auto *h = static_cast<Harness *>(opaque);
            if (addr < kBase || addr + len > kBase + PIB_PAGE_SIZE)
                return -1;
            std::memcpy(out, h->page.data() + (addr - kBase), len);
            return 0;
        };
        return o;
    }

    // Writes segment bytes at `offset` of slot `slot`.
    template <class T> void put(unsigned slot, size_t offset, const T &segment) {
        std::memcpy(page.data() + (slot << kLogStride) + offset, &segment, sizeof(segment));
    }
    void control(unsigned slot, uint8_t opcode, uint8_t numDs, uint8_t flags = 0) {
        pib_wqe_ctrl c{};
        c.wr_id = 0x1000 + slot;
        c.opcode = opcode;
        c.num_ds = numDs;
        c.flags = flags;
        put(slot, 0, c);
    }
};

} // namespace

TEST_CASE("an RC RDMA WRITE WQE is decoded with its remote address and SGEs", "[wqe]") {
    Harness h;
    h.control(0, PIB_WR_RDMA_WRITE, 4);
    h.put(0, 16, pib_wqe_raddr{0xabc000, 0x77, 0});
    h.put(0, 32, pib_wqe_data{100, 5, 0x5000});
    h.put(0, 48, pib_wqe_data{200, 6, 0x6000});
    Wqe w;
    REQUIRE(h.reader.readSend(9, PIB_QPT_RC, h.ring(), 0, w) == PIB_WC_SUCCESS);
    CHECK(w.ctrl.wr_id == 0x1000);
    CHECK(w.raddr.remote_addr == 0xabc000);
    CHECK(w.raddr.rkey == 0x77);
    REQUIRE(w.sges.size() == 2);
    CHECK(w.sges[1].byte_count == 200);
    CHECK(w.sges[1].addr == 0x6000);
    CHECK_FALSE(w.isInline);
    CHECK(h.errors.empty());
}

TEST_CASE("a UD send WQE carries its address vector, inline data is bounded", "[wqe]") {
    Harness h;
    pib_wqe_ud ud{};
    ud.remote_qpn = 0x123;
    ud.remote_qkey = 0x11111111;
    ud.av.dlid = 7;
    // 64 bytes of headers fill a 64-byte slot: an inline flag with no room
    // left for the byte count is refused, never read past the slot.
    h.control(0, PIB_WR_SEND, 4, PIB_WQE_INLINE);
    h.put(0, 16, ud);
    Wqe w;
    CHECK(h.reader.readSend(1, PIB_QPT_UD, h.ring(), 0, w) == PIB_WC_LOC_LEN_ERR);
    CHECK(w.ud.remote_qpn == 0x123);
    CHECK(h.errors == std::vector<std::string>{"wqe-bad"});

    // The same WQE with an SGE list instead.
    h.control(0, PIB_WR_SEND, 4);
    CHECK(h.reader.readSend(1, PIB_QPT_UD, h.ring(), 0, w) == PIB_WC_SUCCESS);
    CHECK(w.ud.av.dlid == 7);
    CHECK(w.sges.empty());
}

TEST_CASE("inline data beyond max_inline_data fails on every transport alike", "[wqe]") {
    for (const uint8_t type : {PIB_QPT_UD, PIB_QPT_RC, PIB_QPT_UC}) {
        Harness h;
        const bool ud = type == PIB_QPT_UD;
        const size_t off = ud ? 64 : 16;
        // 128-byte slots: room for 40 inline bytes, more than the limit of 32.
        h.control(0, PIB_WR_SEND, static_cast<uint8_t>((off + 4 + 40 + 15) / 16), PIB_WQE_INLINE);
        h.put(0, off, uint32_t{40} | PIB_INLINE_FLAG);
        WqeRing ring{h.buf, 5, 7};
        Wqe w;
        CHECK(h.reader.readSend(3, type, ring, 0, w) == PIB_WC_LOC_LEN_ERR);
        CHECK(h.errors == std::vector<std::string>{"wqe-bad"});

        // Within the limit, the bytes are the WQE's own.
        h.errors.clear();
        h.put(0, off, uint32_t{5} | PIB_INLINE_FLAG);
        const uint8_t bytes[5] = {1, 2, 3, 4, 5};
        std::memcpy(h.page.data() + off + 4, bytes, 5);
        REQUIRE(h.reader.readSend(3, type, ring, 0, w) == PIB_WC_SUCCESS);
        REQUIRE(w.inlineData.size() == 5);
        CHECK(std::memcmp(w.inlineData.data(), bytes, 5) == 0);
        CHECK(h.errors.empty());
    }
}

TEST_CASE("an opcode the QP type does not have is a bad WQE", "[wqe]") {
    Harness h;
    Wqe w;
    h.control(0, PIB_WR_RDMA_READ, 4);
    CHECK(h.reader.readSend(1, PIB_QPT_UC, h.ring(), 0, w) == PIB_WC_LOC_QP_OP_ERR);
    CHECK(h.reader.readSend(1, PIB_QPT_UD, h.ring(), 0, w) == PIB_WC_LOC_QP_OP_ERR);
    CHECK(h.reader.readSend(1, PIB_QPT_RC, h.ring(), 0, w) == PIB_WC_SUCCESS);
    h.control(0, 0x55, 4);
    CHECK(h.reader.readSend(1, PIB_QPT_RC, h.ring(), 0, w) == PIB_WC_LOC_QP_OP_ERR);
    // A READ's data lands in memory: inline makes no sense there.
    h.control(0, PIB_WR_RDMA_READ, 4, PIB_WQE_INLINE);
    CHECK(h.reader.readSend(1, PIB_QPT_RC, h.ring(), 0, w) == PIB_WC_LOC_LEN_ERR);
    CHECK(h.errors.size() == 4);
}

TEST_CASE("segment counts outside the slot or short of the headers are refused", "[wqe]") {
    Harness h;
    Wqe w;
    h.control(0, PIB_WR_ATOMIC_FETCH_AND_ADD, 2); // needs 3: control, raddr, atomic
    CHECK(h.reader.readSend(1, PIB_QPT_RC, h.ring(), 0, w) == PIB_WC_LOC_QP_OP_ERR);
    h.control(0, PIB_WR_SEND, 5); // 80 bytes in a 64-byte slot
    CHECK(h.reader.readSend(1, PIB_QPT_RC, h.ring(), 0, w) == PIB_WC_LOC_QP_OP_ERR);
    uint8_t status = PIB_WC_SUCCESS;
    h.control(1, 0, 0); // a receive WQE without even its control segment
    CHECK(h.reader.readReceive(1, h.ring(), 1, w, &status));
    CHECK(status == PIB_WC_LOC_QP_OP_ERR);
    CHECK(h.errors.size() == 3);
}

TEST_CASE("receive WQEs ignore the inline flag and clear what the last WQE held", "[wqe]") {
    Harness h;
    Wqe w;
    h.control(0, PIB_WR_SEND, 4);
    h.put(0, 16, pib_wqe_data{1, 2, 3});
    h.put(0, 32, pib_wqe_data{4, 5, 6});
    h.put(0, 48, pib_wqe_data{7, 8, 9});
    uint8_t status = 0xff;
    REQUIRE(h.reader.readReceive(4, h.ring(), 0, w, &status));
    CHECK(status == PIB_WC_SUCCESS);
    CHECK(w.sges.size() == 3);

    h.control(1, 0, 2, PIB_WQE_INLINE);
    h.put(1, 16, pib_wqe_data{10, 11, 12});
    REQUIRE(h.reader.readReceive(4, h.ring(), 1, w, &status));
    CHECK(status == PIB_WC_SUCCESS);
    CHECK_FALSE(w.isInline);
    REQUIRE(w.sges.size() == 1);
    CHECK(w.sges[0].lkey == 11);

    // A bad WQE leaves no SGE of the one before.
    h.control(2, 0, 9);
    REQUIRE(h.reader.readReceive(4, h.ring(), 2, w, &status));
    CHECK(status == PIB_WC_LOC_QP_OP_ERR);
    CHECK(w.sges.empty());
}

TEST_CASE("a slot the MTT does not map cannot be read", "[wqe]") {
    Harness h;
    Wqe w;
    uint8_t status = 0;
    // A ring of no pages: slot 0 lies outside it.
    h.buf.npages = 0;
    CHECK(h.reader.readSend(1, PIB_QPT_RC, h.ring(), 0, w) == PIB_WC_LOC_QP_OP_ERR);
    CHECK(h.errors == std::vector<std::string>{"wqe-dma"});
    CHECK_FALSE(h.reader.readReceive(1, h.ring(), 0, w, &status));
    CHECK(h.reader.readControl(h.ring(), 0).wr_id == 0);
    h.buf.npages = 1;
    h.control(0, PIB_WR_SEND, 1);
    CHECK(h.reader.readControl(h.ring(), 0).wr_id == 0x1000);
}
