// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_uars.hh"

#include <algorithm>

namespace pib::mlx5 {

std::optional<uint32_t> Uars::alloc(Owner owner) {
    const auto it = std::find(given_.begin(), given_.end(), false);
    if (it == given_.end())
        return std::nullopt;
    *it = true;
    owners_[it - given_.begin()] = owner;
    return kFirstUar + static_cast<uint32_t>(it - given_.begin());
}

bool Uars::free(uint32_t index) {
    if (!given(index))
        return false;
    given_[index - kFirstUar] = false;
    return true;
}

} // namespace pib::mlx5
