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

// The errors that fail a stream rather than its DCI: a WQE's own local
// length or protection error, found as it is fetched (before any of it
// goes out), and the errors a DCT answers with in a NAK (which fail the
// connection, not the DCI). A malformed WQE, data that cannot be read
// once sending began, a response the DCI cannot place, or a path that
// fails (retries, RNR retries) fail the DCI.
inline bool failsStreamAtFetch(uint8_t status) {
    return status == PIB_WC_LOC_LEN_ERR || status == PIB_WC_LOC_PROT_ERR;
}
inline bool failsStreamByNak(uint8_t status) {
    return status == PIB_WC_REM_INV_REQ_ERR || status == PIB_WC_REM_ACCESS_ERR ||
           status == PIB_WC_REM_OP_ERR;
}

} // namespace pib
