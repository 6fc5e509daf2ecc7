// SPDX-License-Identifier: GPL-2.0-or-later
// MemoryKeys::configureIndirect: a UMR of an indirect key (indirect_key.hh,
// docs/mlx5.md §10.4), checked whole before any of it takes effect.
#include "memory_keys.hh"
#include "trace.hh"

namespace pib {

namespace indirect_update {

uint32_t accessAfter(const MemoryRegion &mr, const IndirectUpdate &u) {
    return (mr.ctx.access & ~u.accessMask) | (u.access & u.accessMask);
}

} // namespace indirect_update

// Who may lay out the key: a QP of its PD; one without fast registration
// (a process's, docs/mlx5.md §10) only its own user context's keys.
const char *MemoryKeys::checkIndirectAuthority(const QueuePair &qp, const MemoryRegion *mr) const {
    if (!mr || !mr->indirect)
        return "the key names no indirect key";
    if (!qp.fastRegEnabled && mr->owner != qp.owner)
        return "the key is another user context's";
    if (mr->ctx.pdn != qp.ctx.pdn)
        return "the key is in another PD";
    return nullptr;
}

// What keeps `u` from applying to `mr`, named by `key`: null when nothing.
const char *MemoryKeys::checkIndirect(const MemoryRegion &mr, uint32_t key,
                                      const IndirectUpdate &u) const {
    if ((u.invalidation || !u.setsVariant) && mr.key != key)
        return "the key's variant is not the key's";
    if (u.before == IndirectUpdate::Before::kFree && mr.valid)
        return "the key is in use, and the UMR asks for a free one";
    if (u.invalidation && !mr.valid)
        return "the key is already free";
    if (u.octowords > mr.indirect->tableEntries)
        return "more entries than the key's table";
    const IndirectLayout &layout = u.layout ? *u.layout : *mr.indirect;
    const uint64_t start = u.setsStart ? u.start : mr.ctx.iova;
    const uint64_t length = u.setsLength ? u.length : mr.ctx.length;
    if (start + length < start)
        return "a range that wraps";
    if (length > layout.length())
        return "a length beyond what the entries cover";
    return refusedAccess(indirect_update::accessAfter(mr, u));
}

uint8_t MemoryKeys::configureIndirect(const QueuePair &qp, uint32_t index, uint32_t key,
                                      const IndirectUpdate &u) {
    MemoryRegion *mr = mrs_.find(PIB_KEY_INDEX(key));
    if (const char *why = checkIndirectAuthority(qp, mr)) {
        host_.guestError(err::kWqeBad, "QP %u UMR WQE %u of key 0x%x: %s", qp.number, index, key,
                         why);
        return PIB_WC_LOC_QP_OP_ERR;
    }
    if (const char *why = checkIndirect(*mr, key, u)) {
        host_.guestError(err::kMlx5IndirectUmr, "QP %u UMR WQE %u of key 0x%x: %s", qp.number,
                         index, key, why);
        return PIB_WC_LOC_PROT_ERR;
    }
    applyIndirect(*mr, u);
    trace::mlx5_indirect_umr(host_, qp.number, mr->key,
                             static_cast<unsigned>(mr->indirect->entries.size()),
                             mr->indirect->repeats, mr->ctx.length, mr->valid);
    return PIB_WC_SUCCESS;
}

const char *MemoryKeys::restoreIndirect(MemoryRegion &mr, const IndirectUpdate &u) {
    if (!mr.indirect)
        return "not an indirect key";
    if (u.layout)
        if (const char *why = u.layout->invalid())
            return why;
    if (const char *why = checkIndirect(mr, mr.key, u))
        return why;
    applyIndirect(mr, u);
    return nullptr;
}

void MemoryKeys::applyIndirect(MemoryRegion &mr, const IndirectUpdate &u) {
    pib_mr_context &c = mr.ctx;
    if (u.layout) {
        const uint32_t table = mr.indirect->tableEntries;
        mr.indirect = *u.layout;
        mr.indirect->tableEntries = table;
    }
    if (u.setsStart)
        c.iova = u.start;
    if (u.setsLength)
        c.length = u.length;
    c.access = indirect_update::accessAfter(mr, u);
    if (u.setsVariant && !u.invalidation) {
        c.key_variant = u.variant;
        mr.key = (PIB_KEY_INDEX(mr.key) << 8) | u.variant;
    }
    if (u.setsRemoteInvalidate)
        mr.remoteInvalidate = u.remoteInvalidate;
    if (u.setsFree)
        mr.valid = !u.free;
}

} // namespace pib
