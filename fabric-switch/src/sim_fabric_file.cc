// SPDX-License-Identifier: GPL-2.0-or-later
// The fabric file that describes a simulated fabric (sim_fabric.hh): what
// `./pib fabric up` writes from a topology, a generator or ibnetdiscover's
// output, and pib-fabric-switch --fabric reads.
#include <charconv>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "sim_fabric.hh"

namespace pib::fabric {

namespace {

constexpr size_t kMaxLine = 4096;
constexpr size_t kMaxDescription = 63; // NodeDescription's 64 bytes, NUL-terminated

// The words of a line; a word in double quotes may hold spaces.
std::vector<std::string> words(const std::string &line) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i < line.size()) {
        if (line[i] == ' ' || line[i] == '\t' || line[i] == '\r') {
            ++i;
        } else if (line[i] == '#') {
            break;
        } else if (line[i] == '"') {
            const size_t end = line.find('"', i + 1);
            if (end == std::string::npos)
                throw std::runtime_error("a quote that does not end");
            out.push_back(line.substr(i + 1, end - i - 1));
            i = end + 1;
        } else {
            size_t end = i;
            while (end < line.size() && line[end] != ' ' && line[end] != '\t' && line[end] != '\r')
                ++end;
            out.push_back(line.substr(i, end - i));
            i = end;
        }
    }
    return out;
}

uint64_t number(const std::string &word, uint64_t max) {
    const auto v = fabricNumber(word, max);
    if (!v)
        throw std::runtime_error("\"" + word + "\" is not a number up to " + std::to_string(max));
    return *v;
}

class Reader {
  public:
    void statement(const std::vector<std::string> &w) {
        const std::string &verb = w[0];
        if (verb == "switch" || verb == "ca") {
            arity(w, 4);
            if (w[3].size() > kMaxDescription)
                throw std::runtime_error("a description longer than 63 bytes");
            const uint64_t guid = number(w[1], UINT64_MAX);
            if (!index_.emplace(guid, d_.nodes.size()).second)
                throw std::runtime_error("node " + w[1] + " again");
            if (d_.nodes.size() >= SimulatedFabric::kMaxNodes)
                throw std::runtime_error("more nodes than a fabric holds");
            d_.nodes.push_back(
                {verb == "switch", guid, static_cast<unsigned>(number(w[2], 254)), w[3]});
        } else if (verb == "link") {
            arity(w, 5);
            d_.links.emplace_back(end(w[1], w[2]), end(w[3], w[4]));
        } else if (verb == "vls") {
            arity(w, 2);
            d_.vlCap = vlsCode(static_cast<unsigned>(number(w[1], 8)));
            if (!d_.vlCap)
                throw std::runtime_error("vls is 1, 2, 4 or 8, not " + w[1]);
        } else if (verb == "attach") {
            arity(w, 3);
            d_.attachments.push_back(end(w[1], w[2]));
        } else {
            throw std::runtime_error("no statement \"" + verb + "\"");
        }
    }
    FabricDescription take() { return std::move(d_); }

  private:
    static void arity(const std::vector<std::string> &w, size_t n) {
        if (w.size() != n)
            throw std::runtime_error(w[0] + " takes " + std::to_string(n - 1) + " words");
    }
    FabricDescription::End end(const std::string &guid, const std::string &port) {
        const auto it = index_.find(number(guid, UINT64_MAX));
        if (it == index_.end())
            throw std::runtime_error("node " + guid + " is not described before");
        return {it->second, static_cast<unsigned>(number(port, 254))};
    }

    FabricDescription d_;
    std::unordered_map<uint64_t, uint32_t> index_;
};

} // namespace

std::optional<uint64_t> fabricNumber(std::string_view word, uint64_t max) {
    const bool hex = word.size() > 2 && word[0] == '0' && (word[1] == 'x' || word[1] == 'X');
    if (hex)
        word.remove_prefix(2);
    uint64_t v = 0;
    const auto [end, ec] =
        std::from_chars(word.data(), word.data() + word.size(), v, hex ? 16 : 10);
    if (word.empty() || ec != std::errc() || end != word.data() + word.size() || v > max)
        return std::nullopt;
    return v;
}

FabricDescription readFabric(std::istream &in) {
    Reader reader;
    std::string line;
    unsigned n = 0;
    while (std::getline(in, line)) {
        ++n;
        try {
            if (line.size() > kMaxLine)
                throw std::runtime_error("a line longer than 4096 bytes");
            const std::vector<std::string> w = words(line);
            if (!w.empty())
                reader.statement(w);
        } catch (const std::runtime_error &e) {
            throw std::runtime_error("line " + std::to_string(n) + ": " + e.what());
        }
    }
    return reader.take();
}

} // namespace pib::fabric
