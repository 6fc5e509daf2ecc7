// SPDX-License-Identifier: GPL-2.0-or-later
// Object tables in a saved state (docs/migration.md), as every
// personality writes and reads them: a section per table with where its
// numbering goes on from, then each object's number and fields; and each
// loaded object made again by its personality's create command, at its
// saved number, so that it passes every check a guest's command passes.
#pragma once

#include <string>

#include "host.hh"
#include "object_table.hh"
#include "state_archive.hh"

namespace pib {

// A table's section: where its numbering goes on from, how many objects,
// then each one's number and what `each` writes of it.
template <class T, class Each>
void saveTable(StateWriter &w, uint32_t tag, const ObjectTable<T> &table, Each &&each) {
    w.beginSection(tag);
    w.u32(table.rotation());
    w.u32(static_cast<uint32_t>(table.size()));
    table.forEach([&](uint32_t number, const T &object) {
        w.u32(number);
        each(object);
    });
    w.endSection();
}

// The same, of the objects `keep` takes (a table another section shares:
// the QPs' with ConnectX's DCTs).
template <class T, class Keep, class Each>
void saveTableWhere(StateWriter &w, uint32_t tag, const ObjectTable<T> &table, Keep &&keep,
                    Each &&each) {
    uint32_t count = 0;
    table.forEach([&](uint32_t, const T &object) { count += keep(object) ? 1 : 0; });
    w.beginSection(tag);
    w.u32(table.rotation());
    w.u32(count);
    table.forEach([&](uint32_t number, const T &object) {
        if (!keep(object))
            return;
        w.u32(number);
        each(object);
    });
    w.endSection();
}

// A table's section as saveTable() wrote it: `load` reads each object's
// fields (`eachAtLeast` bytes or more) after its number and makes it.
template <class T, class Load>
void loadTable(StateReader &r, uint32_t tag, const char *what, ObjectTable<T> &table,
               size_t eachAtLeast, Load &&load) {
    r.enterSection(tag, what);
    const uint32_t rotation = r.u32();
    const uint32_t count = r.count(table.capacity(), 4 + eachAtLeast, what);
    for (uint32_t i = 0; i < count && r.ok(); ++i)
        load(r.u32());
    r.leaveSection(what);
    if (r.ok())
        table.restoreRotation(rotation);
}

// Makes object `number` of `table` by `create`, the code of the command
// that makes one, which stores it under the table's next number: true
// when it did; false, the stream refused saying why (the guest error the
// command raised), when the command would have refused it.
template <class T, class Create>
bool restoreAt(StateReader &r, const Host &host, const char *what, ObjectTable<T> &table,
               uint32_t number, Create &&create) {
    if (!r.ok())
        return false;
    if (!table.freeNumber(number)) {
        r.fail(std::string(what) + " " + std::to_string(number) +
               ": its number is taken or beyond the table");
        return false;
    }
    std::string why;
    table.placeNextAt(number);
    host.captureGuestErrors(&why);
    const bool made = create();
    host.captureGuestErrors(nullptr);
    table.cancelPlacement(); // refused before it was stored
    if (made && table.find(number))
        return true;
    r.fail(std::string(what) + " " + std::to_string(number) + ": " +
           (why.empty() ? "its command refused it" : why));
    return false;
}

} // namespace pib
