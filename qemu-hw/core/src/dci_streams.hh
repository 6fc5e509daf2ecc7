// SPDX-License-Identifier: GPL-2.0-or-later
// A DCI's streams (docs/mlx5.md §15.4): each send WQE names a stream, and
// an error of one WQE fails its stream only. The stream's later WQEs are
// flushed until the driver resets it; the DCI stays in RTS until 2^n
// streams are in error at once, when it fails as a DCI without streams.
// The device sends a DCI's WQEs in order: 2^channels is how many streams
// may be in flight at once, a bound the device keeps by having one.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "pib_hw.h"

namespace pib {

struct DciStreams {
    uint8_t logChannels = 0; // as created; reported, and never exceeded
    uint8_t logErrored = 0;  // the DCI fails when 2^n streams are in error
    std::vector<uint16_t> errored;

    // Streams whose errors stay theirs: a DCI that fails at one stream
    // error behaves as one without streams.
    bool on() const { return logErrored != 0; }
    bool inError(uint16_t stream) const {
        return std::find(errored.begin(), errored.end(), stream) != errored.end();
    }
    // `stream` fails. False when that is the 2^logErrored-th stream in
    // error: the DCI fails instead (and the stream is not recorded).
    bool fail(uint16_t stream) {
        if (inError(stream))
            return true;
        if (errored.size() + 1 >= (size_t{1} << logErrored))
            return false;
        errored.push_back(stream);
        return true;
    }
    // The driver's reset: false for a stream that is not in error.
    bool reset(uint16_t stream) { return std::erase(errored, stream) != 0; }
};

// The completion statuses that fail a stream rather than its DCI: the
// WQE's own local errors, and the errors a DCT answers it with. A
// malformed WQE, a response the DCI cannot take or a path that fails
// (retries, RNR retries) fail the DCI.
inline bool failsStreamOnly(uint8_t status) {
    switch (status) {
    case PIB_WC_LOC_LEN_ERR:
    case PIB_WC_LOC_PROT_ERR:
    case PIB_WC_REM_INV_REQ_ERR:
    case PIB_WC_REM_ACCESS_ERR:
    case PIB_WC_REM_OP_ERR:
        return true;
    default:
        return false;
    }
}

} // namespace pib
