// SPDX-License-Identifier: GPL-2.0-or-later
// ConnectX user memory (UMEM, docs/mlx5.md §16.1): the pages of a
// process's buffer that mlx5_ib pinned and registered for DEVX by
// CREATE_UMEM, each of its user context, which DEVX objects then place
// their rings and doorbell records in by UMEM id and offset. An object
// built on one holds it: DESTROY_UMEM of a held one is refused, so the
// kernel never unpins pages the device still writes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "conditions.hh"
#include "host.hh"
#include "object_table.hh"
#include "objects.hh"
#include "state_archive.hh"

namespace pib::mlx5 {

struct UserMemory : Referenced {
    uint32_t shift = 0;          // log2 of its page size
    uint32_t offset = 0;         // where the buffer starts in its first page
    bool writable = false;       // the pages' wr_en
    std::vector<uint64_t> pages; // guest addresses

    // Bytes from the buffer's start to the end of its last page.
    uint64_t bytes() const { return (uint64_t{pages.size()} << shift) - offset; }
    // The guest address of byte `at` of the buffer (at < bytes()).
    uint64_t address(uint64_t at) const { return pageAddress(offset + at); }
    // The guest address of byte `from` of its pages, counted from the
    // start of the first (from < pages.size() << shift).
    uint64_t pageAddress(uint64_t from) const {
        return pages[from >> shift] + (from & ((uint64_t{1} << shift) - 1));
    }
};

// The UMEMs an object's ring and doorbell record are in (0: none).
struct UmemHold {
    uint32_t ring = 0;
    uint32_t record = 0;
};

class UserMemories {
  public:
    // UMEM ids from 1; the pages of all of them together are bounded.
    static constexpr uint32_t kMaxUmems = 4096;
    static constexpr uint64_t kMaxPages = uint64_t{1} << 20;

    explicit UserMemories(const Host &host) : host_(host) {}

    // CREATE_UMEM: `in` is create_umem_in; the id into *id.
    const err::Condition *create(std::span<const uint8_t> in, uint32_t *id);
    // DESTROY_UMEM of `id`: refused while an object holds it.
    const err::Condition *destroy(uint32_t id);
    UserMemory *find(uint64_t id) const { return table_.find(id); }
    // Object `number` of `kind` ('c' CQ, 'q' QP, 'k' memory key by index)
    // is built on `held`, which exist; release() when it ends.
    void hold(char kind, uint32_t number, const UmemHold &held);
    void release(char kind, uint32_t number);
    // Each object that holds a UMEM: its kind, number and what it holds.
    template <class F> void forEachHolder(F &&f) const {
        for (const auto &[object, held] : holders_)
            f(object.first, object.second, held);
    }
    const ObjectTable<UserMemory> &table() const { return table_; }
    void reset();
    // Each UMEM as the CREATE_UMEM input that makes it, loaded through
    // create() at its id, before the objects that hold them; then which
    // objects hold which (Commands::checkLoadedOwners checks they exist).
    void save(StateWriter &w) const;
    void load(StateReader &r);

  private:
    const err::Condition *refuse(const err::Condition &why, const char *fmt, ...) const
        __attribute__((format(printf, 3, 4)));
    std::vector<uint8_t> createInput(const UserMemory &m) const;

    const Host &host_;
    ObjectTable<UserMemory> table_{kMaxUmems, 1};
    uint64_t pages_ = 0; // of all UMEMs
    std::map<std::pair<char, uint32_t>, UmemHold> holders_;
};

} // namespace pib::mlx5
