// SPDX-License-Identifier: GPL-2.0-or-later
// The interface version is written in three places besides pib_hw.h: the
// README, and the programmer's reference manual's title, register table
// and "what it does" section. They must all say what the header says.
// The command table of docs/prm.md §4.4 is the device's own, row by row.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "fake_host.hh"
#include "pib/pib_commands.hh"
#include "pib_hw.h"

namespace {

// The source tree comes from the environment (meson test sets it), not
// from the compile command, which then is the same for every copy of the
// sources: ccache finds it built.
std::string readSource(const std::string &path) {
    const char *root = std::getenv("PIB_SOURCE_ROOT");
    INFO("PIB_SOURCE_ROOT names the source tree: " << (root ? root : "(unset)"));
    REQUIRE(root != nullptr);
    std::ifstream in(std::string(root) + "/" + path);
    INFO(path);
    REQUIRE(in.good());
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// Every "X.Y" that `pattern`'s first group catches in `text`.
std::vector<std::string> versions(const std::string &text, const std::string &pattern) {
    std::vector<std::string> found;
    const std::regex re(pattern);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
         ++it)
        found.push_back((*it)[1].str());
    return found;
}

} // namespace

TEST_CASE("README, docs/prm.md and the user guide give the interface version of pib_hw.h",
          "[docs]") {
    const std::string current = std::to_string(PIB_IF_VERSION_MAJOR(PIB_IF_VERSION_CURRENT)) + "." +
                                std::to_string(PIB_IF_VERSION_MINOR(PIB_IF_VERSION_CURRENT));
    const std::string readme = readSource("README.md");
    const std::string prm = readSource("docs/prm.md");
    const auto inReadme = versions(readme, R"(interface (\d+\.\d+))");
    const auto inPrm = versions(
        prm, R"((?:interface version \*\*|What version |\()(\d+\.\d+)(?:\*\*|\)| contains| does))");
    // `./pib package` versions its packages by the interface (package.py).
    const auto inGuide = versions(readSource("docs/user-guide.md"),
                                  R"((?:_|pib-hca-|interface's, `)(\d+\.\d+)(?:-1|`|\s))");
    CHECK(inReadme.size() >= 1);
    CHECK(inGuide.size() >= 4); // the package version, the source directory, two file names
    for (const auto &v : inGuide)
        CHECK(v == current);
    CHECK(inPrm.size() >= 4); // title, contents, IF_VERSION register, section 8
    for (const auto &v : inReadme)
        CHECK(v == current);
    for (const auto &v : inPrm)
        CHECK(v == current);
    // The register table's reset value is the number itself.
    char hex[16];
    std::snprintf(hex, sizeof(hex), "0x%08x", PIB_IF_VERSION_CURRENT);
    CHECK(prm.find(std::string("`IF_VERSION` | RO | `") + hex + "`") != std::string::npos);
}

TEST_CASE("docs/prm.md lists exactly the commands the device executes", "[docs][cmd]") {
    const std::string prm = readSource("docs/prm.md");
    const std::regex row(R"(\| `0x([0-9a-f]{4})` \| `([A-Z_]+)` \|)");
    std::map<unsigned, std::string> documented;
    for (auto it = std::sregex_iterator(prm.begin(), prm.end(), row); it != std::sregex_iterator();
         ++it)
        documented[std::stoul((*it)[1].str(), nullptr, 16)] = (*it)[2].str();
    std::map<unsigned, std::string> executed;
    for (unsigned opcode = 0; opcode <= 0xffff; ++opcode) {
        const std::string name = pib::CommandProcessor::commandName(static_cast<uint16_t>(opcode));
        if (name != "unknown")
            executed[opcode] = name;
    }
    CHECK(executed.size() == 46);
    CHECK(documented == executed);
    // The robustness test and fuzz-core issue every one of them.
    for (const auto &[opcode, name] : executed) {
        INFO(name);
        CHECK(std::find(std::begin(kCommandOpcodes), std::end(kCommandOpcodes), opcode) !=
              std::end(kCommandOpcodes));
    }
}
