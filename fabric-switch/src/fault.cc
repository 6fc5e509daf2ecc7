// SPDX-License-Identifier: GPL-2.0-or-later
#include "fault.hh"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace pib::fabric {

namespace {

// "5%" or "0.05" as a probability.
bool parseProbability(std::string_view text, double *out) {
    const bool percent = !text.empty() && text.back() == '%';
    if (percent)
        text.remove_suffix(1);
    double value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size())
        return false;
    if (percent)
        value /= 100;
    if (!(value >= 0 && value <= 1))
        return false;
    *out = value;
    return true;
}

bool parseCount(std::string_view text, uint64_t *out) {
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
    return ec == std::errc() && end == text.data() + text.size();
}

bool parseCount32(std::string_view text, uint32_t *out) {
    uint64_t v = 0;
    if (!parseCount(text, &v) || v > UINT32_MAX)
        return false;
    *out = static_cast<uint32_t>(v);
    return true;
}

// "1ms", "250us", "2s", "500ns"; a bare number is milliseconds.
bool parseTime(std::string_view text, uint64_t *ns) {
    static constexpr std::pair<std::string_view, double> kUnits[] = {
        {"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};
    double scale = 1e6;
    for (const auto &[suffix, factor] : kUnits) {
        if (text.size() > suffix.size() && text.ends_with(suffix)) {
            text.remove_suffix(suffix.size());
            scale = factor;
            break;
        }
    }
    double value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || !(value >= 0) ||
        value * scale > 3600e9)
        return false; // an hour is more than any test wants
    *ns = static_cast<uint64_t>(std::llround(value * scale));
    return true;
}

// "A/B" into its two halves.
bool split(std::string_view text, char sep, std::string_view *a, std::string_view *b) {
    const size_t at = text.find(sep);
    if (at == std::string_view::npos)
        return false;
    *a = text.substr(0, at);
    *b = text.substr(at + 1);
    return true;
}

// "1ms±1ms" or "1ms+-1ms" (a terminal may not type ±).
bool parseDelay(std::string_view text, uint64_t *delay, uint64_t *jitter) {
    *jitter = 0;
    for (std::string_view sep : {std::string_view("±"), std::string_view("+-")}) {
        const size_t at = text.find(sep);
        if (at != std::string_view::npos)
            return parseTime(text.substr(0, at), delay) &&
                   parseTime(text.substr(at + sep.size()), jitter);
    }
    return parseTime(text, delay);
}

// Calls `fn` with each word of `text` (split at spaces, tabs and commas)
// until it returns false; returns whether every word was taken.
template <typename Fn> bool forEachWord(std::string_view text, Fn fn) {
    size_t at = 0;
    while (at < text.size()) {
        const size_t end = std::min(text.find_first_of(" ,\t", at), text.size());
        const std::string_view word = text.substr(at, end - at);
        at = end + 1;
        if (!word.empty() && !fn(word))
            return false;
    }
    return true;
}

std::string formatTime(uint64_t ns) {
    char buf[32];
    if (ns % 1'000'000'000 == 0)
        std::snprintf(buf, sizeof(buf), "%llus",
                      static_cast<unsigned long long>(ns / 1'000'000'000));
    else if (ns % 1'000'000 == 0)
        std::snprintf(buf, sizeof(buf), "%llums", static_cast<unsigned long long>(ns / 1'000'000));
    else if (ns % 1'000 == 0)
        std::snprintf(buf, sizeof(buf), "%lluus", static_cast<unsigned long long>(ns / 1'000));
    else
        std::snprintf(buf, sizeof(buf), "%lluns", static_cast<unsigned long long>(ns));
    return buf;
}

std::string formatPercent(double p) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g%%", p * 100);
    return buf;
}

} // namespace

bool FaultSpec::any() const {
    return loss > 0 || lossEvery || (burstLength && burstEvery) || corrupt > 0 || duplicate > 0 ||
           reorder > 0 || delayNs || jitterNs || flaps();
}

std::string FaultSpec::toString() const {
    std::string s;
    auto add = [&s](const std::string &word) {
        if (!s.empty())
            s += ' ';
        s += word;
    };
    if (loss > 0)
        add("loss=" + formatPercent(loss));
    if (lossEvery)
        add("loss-every=" + std::to_string(lossEvery));
    if (burstLength && burstEvery)
        add("burst=" + std::to_string(burstLength) + "/" + std::to_string(burstEvery));
    if (corrupt > 0)
        add("corrupt=" + formatPercent(corrupt));
    if (duplicate > 0)
        add("dup=" + formatPercent(duplicate));
    if (reorder > 0)
        add("reorder=" + formatPercent(reorder) + " window=" + std::to_string(reorderWindow));
    if (delayNs || jitterNs)
        add("delay=" + formatTime(delayNs) + (jitterNs ? "±" + formatTime(jitterNs) : ""));
    if (flaps())
        add("flap=" + formatTime(flapDownNs) + "/" + formatTime(flapEveryNs));
    add("seed=" + std::to_string(seed));
    return s;
}

std::optional<FaultSpec> FaultSpec::parse(std::string_view text, std::string *error) {
    FaultSpec spec;
    const bool ok = forEachWord(text, [&](std::string_view word) {
        std::string_view key, value, a, b;
        bool good = split(word, '=', &key, &value);
        if (!good) {
        } else if (key == "loss") {
            good = parseProbability(value, &spec.loss);
        } else if (key == "loss-every") {
            good = parseCount32(value, &spec.lossEvery) && spec.lossEvery != 1;
        } else if (key == "burst") {
            good = split(value, '/', &a, &b) && parseCount32(a, &spec.burstLength) &&
                   parseCount32(b, &spec.burstEvery) && spec.burstLength < spec.burstEvery;
        } else if (key == "corrupt") {
            good = parseProbability(value, &spec.corrupt);
        } else if (key == "dup") {
            good = parseProbability(value, &spec.duplicate);
        } else if (key == "reorder") {
            good = parseProbability(value, &spec.reorder);
        } else if (key == "window") {
            good = parseCount32(value, &spec.reorderWindow) && spec.reorderWindow >= 1 &&
                   spec.reorderWindow <= 1024;
        } else if (key == "delay") {
            good = parseDelay(value, &spec.delayNs, &spec.jitterNs);
        } else if (key == "flap") {
            good = split(value, '/', &a, &b) && parseTime(a, &spec.flapDownNs) &&
                   parseTime(b, &spec.flapEveryNs) && spec.flapDownNs < spec.flapEveryNs;
        } else if (key == "seed") {
            good = parseCount(value, &spec.seed);
        } else {
            good = false;
        }
        if (!good && error)
            *error = "bad fault '" + std::string(word) + "'";
        return good;
    });
    if (!ok)
        return std::nullopt;
    return spec;
}

std::optional<FaultSetting> FaultSetting::parse(std::string_view text, std::string *error) {
    FaultSetting setting;
    std::string rest;
    const bool ok = forEachWord(text, [&](std::string_view word) {
        if (!word.starts_with("dir=")) {
            rest.append(word).push_back(' ');
            return true;
        }
        const std::string_view dir = word.substr(4);
        if (dir != "in" && dir != "out" && dir != "both") {
            if (error)
                *error = "bad fault '" + std::string(word) + "' (in, out or both)";
            return false;
        }
        setting.in = dir != "out";
        setting.out = dir != "in";
        return true;
    });
    if (!ok)
        return std::nullopt;
    auto spec = FaultSpec::parse(rest, error);
    if (!spec)
        return std::nullopt;
    setting.spec = *spec;
    return setting;
}

std::string FaultSetting::apply(FaultInjector &in,
                                const std::function<void(std::span<const uint8_t>)> &toIn,
                                FaultInjector &out,
                                const std::function<void(std::span<const uint8_t>)> &toOut,
                                FlapSchedule &flap, uint64_t stream, uint64_t now) const {
    std::string dirs;
    if (this->in) {
        in.clear(toIn);
        in.configure(spec, stream, now);
        dirs = "in";
    }
    if (this->out) {
        out.clear(toOut);
        out.configure(spec, stream + 1, now);
        dirs += dirs.empty() ? "out" : "+out";
    }
    if (spec.flaps())
        flap.configure(spec.flapDownNs, spec.flapEveryNs, now);
    else
        flap.clear();
    return dirs;
}

std::string FaultCounters::toString() const {
    return "packets=" + std::to_string(packets) + " dropped=" + std::to_string(dropped) +
           " corrupted=" + std::to_string(corrupted) + " duplicated=" + std::to_string(duplicated) +
           " reordered=" + std::to_string(reordered) + " delayed=" + std::to_string(delayed) +
           " overflowed=" + std::to_string(overflowed);
}

void FaultInjector::configure(const FaultSpec &spec, uint64_t stream, uint64_t now) {
    spec_ = spec;
    active_ = spec.loss > 0 || spec.lossEvery || (spec.burstLength && spec.burstEvery) ||
              spec.corrupt > 0 || spec.duplicate > 0 || spec.reorder > 0 || spec.delayNs ||
              spec.jitterNs;
    // splitmix-style mixing keeps neighbouring streams apart.
    rng_.seed(spec.seed * 0x9e3779b97f4a7c15ull ^ (stream + 1) * 0xbf58476d1ce4e5b9ull);
    counters_ = FaultCounters{};
    lastDue_ = now;
}

void FaultInjector::clear(const Deliver &deliver) {
    active_ = false;
    release(UINT64_MAX, deliver);
}

void FaultInjector::discardHeld() {
    counters_.dropped += reordered_.size() + delayed_.size();
    reordered_.clear();
    delayed_.clear();
    heldBytes_ = 0;
}

bool FaultInjector::chance(double p) {
    return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p;
}

bool FaultInjector::lose() {
    const uint64_t n = counters_.packets; // 1-based: this packet's number
    if (spec_.lossEvery && n % spec_.lossEvery == 0)
        return true;
    if (spec_.burstLength && spec_.burstEvery && (n - 1) % spec_.burstEvery < spec_.burstLength)
        return true;
    return chance(spec_.loss);
}

bool FaultInjector::full(size_t more) const {
    return reordered_.size() + delayed_.size() >= kMaxHeldPackets ||
           heldBytes_ + more > kMaxHeldBytes;
}

void FaultInjector::offer(std::span<const uint8_t> packet, uint64_t now, const Deliver &deliver,
                          uint32_t tag) {
    ++counters_.packets;
    if (lose()) {
        ++counters_.dropped;
        overtake(now, deliver); // a lost packet passed the held ones too
        return;
    }
    std::vector<uint8_t> bytes(packet.begin(), packet.end());
    if (!bytes.empty() && chance(spec_.corrupt)) {
        const size_t bit = std::uniform_int_distribution<size_t>(0, bytes.size() * 8 - 1)(rng_);
        bytes[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
        ++counters_.corrupted;
    }
    const bool twice = chance(spec_.duplicate);
    if (twice)
        ++counters_.duplicated;
    if (chance(spec_.reorder)) {
        if (full(bytes.size())) {
            ++counters_.overflowed;
            return;
        }
        ++counters_.reordered;
        const auto overtakers =
            std::uniform_int_distribution<uint32_t>(1, spec_.reorderWindow)(rng_);
        heldBytes_ += bytes.size();
        reordered_.push_back({now + kReorderTimeoutNs, overtakers, tag, std::move(bytes)});
        if (twice) // the copy follows in order; the original arrives late
            leave(reordered_.back().bytes, tag, now, deliver);
        return;
    }
    overtake(now, deliver);
    if (twice)
        leave(bytes, tag, now, deliver);
    leave(std::move(bytes), tag, now, deliver);
}

// A packet passed the reordered ones: those it was the last to overtake go.
void FaultInjector::overtake(uint64_t now, const Deliver &deliver) {
    for (auto it = reordered_.begin(); it != reordered_.end();) {
        if (--it->overtakers > 0) {
            ++it;
            continue;
        }
        std::vector<uint8_t> bytes = std::move(it->bytes);
        const uint32_t tag = it->tag;
        heldBytes_ -= bytes.size();
        it = reordered_.erase(it);
        leave(std::move(bytes), tag, now, deliver);
    }
}

// Leaves now, or after the delay (never before a packet that left earlier).
void FaultInjector::leave(std::vector<uint8_t> bytes, uint32_t tag, uint64_t now,
                          const Deliver &deliver) {
    if (!spec_.delayNs && !spec_.jitterNs) {
        deliverNow(bytes, tag, deliver);
        return;
    }
    if (full(bytes.size())) {
        ++counters_.overflowed;
        return;
    }
    const uint64_t low = spec_.delayNs > spec_.jitterNs ? spec_.delayNs - spec_.jitterNs : 0;
    const uint64_t wait =
        std::uniform_int_distribution<uint64_t>(low, spec_.delayNs + spec_.jitterNs)(rng_);
    lastDue_ = std::max(lastDue_, now + wait);
    ++counters_.delayed;
    heldBytes_ += bytes.size();
    delayed_.push_back({lastDue_, 0, tag, std::move(bytes)});
}

void FaultInjector::deliverNow(std::span<const uint8_t> bytes, uint32_t tag,
                               const Deliver &deliver) {
    tag_ = tag;
    deliver(bytes);
}

void FaultInjector::release(uint64_t now, const Deliver &deliver) {
    // Reordered packets whose wait ran out go first: they entered earlier.
    while (!reordered_.empty() && reordered_.front().due <= now) {
        std::vector<uint8_t> bytes = std::move(reordered_.front().bytes);
        const uint32_t tag = reordered_.front().tag;
        heldBytes_ -= bytes.size();
        reordered_.pop_front();
        if (now == UINT64_MAX) { // clear(): everything goes straight out
            deliverNow(bytes, tag, deliver);
            continue;
        }
        leave(std::move(bytes), tag, now, deliver);
    }
    while (!delayed_.empty() && delayed_.front().due <= now) {
        std::vector<uint8_t> bytes = std::move(delayed_.front().bytes);
        const uint32_t tag = delayed_.front().tag;
        heldBytes_ -= bytes.size();
        delayed_.pop_front();
        deliverNow(bytes, tag, deliver);
    }
}

std::optional<uint64_t> FaultInjector::nextRelease() const {
    std::optional<uint64_t> next;
    if (!reordered_.empty())
        next = reordered_.front().due;
    if (!delayed_.empty())
        next = std::min(next.value_or(UINT64_MAX), delayed_.front().due);
    return next;
}

void FlapSchedule::configure(uint64_t downNs, uint64_t everyNs, uint64_t now) {
    down_ = downNs;
    every_ = downNs < everyNs ? everyNs : 0;
    start_ = now;
}

// Up for the first every − down of each period, down for the rest: a
// flap set now first takes the link down one period from now, less `down`.
bool FlapSchedule::down(uint64_t now) const {
    if (!every_ || now < start_)
        return false;
    return (now - start_) % every_ >= every_ - down_;
}

uint64_t FlapSchedule::nextChange(uint64_t now) const {
    if (!every_)
        return UINT64_MAX;
    if (now < start_)
        return start_ + every_ - down_;
    const uint64_t phase = (now - start_) % every_;
    const uint64_t periodStart = now - phase;
    return phase < every_ - down_ ? periodStart + every_ - down_ : periodStart + every_;
}

} // namespace pib::fabric
