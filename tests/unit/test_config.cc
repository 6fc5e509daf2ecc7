// SPDX-License-Identifier: GPL-2.0-or-later
#include <catch2/catch.hpp>

#include "fake_host.hh"
#include "pib_core.h"
#include "pib_hw.h"

TEST_CASE("a valid configuration is accepted", "[config]") {
    const auto config = FakeHost::defaultConfig();
    CHECK(pib_core_config_error(&config) == nullptr);
}

TEST_CASE("invalid configurations are refused with a reason", "[config]") {
    auto config = FakeHost::defaultConfig();
    SECTION("zero GUID") {
        config.node_guid = 0;
    }
    SECTION("no doorbell pages") {
        config.doorbell_pages = 0;
    }
    SECTION("too many doorbell pages") {
        config.doorbell_pages = PIB_MAX_DOORBELL_PAGES + 1;
    }
    SECTION("no MSI-X vectors") {
        config.msix_vectors = 0;
    }
    SECTION("too many MSI-X vectors") {
        config.msix_vectors = PIB_MAX_MSIX_VECTORS + 1;
    }
    SECTION("no ports") {
        config.num_ports = 0;
    }
    SECTION("too many ports") {
        config.num_ports = PIB_MAX_PORTS + 1;
    }

    CHECK(pib_core_config_error(&config) != nullptr);
    const pib_host_ops ops{};
    CHECK(pib_core_new(&config, &ops, nullptr) == nullptr);
}

TEST_CASE("a missing configuration or host is refused", "[config]") {
    const auto config = FakeHost::defaultConfig();
    const pib_host_ops ops{};
    CHECK(pib_core_config_error(nullptr) != nullptr);
    CHECK(pib_core_new(nullptr, &ops, nullptr) == nullptr);
    CHECK(pib_core_new(&config, nullptr, nullptr) == nullptr);
}

TEST_CASE("BAR sizes follow the configuration", "[config]") {
    auto config = FakeHost::defaultConfig();
    config.doorbell_pages = 3;
    FakeHost host(config);
    CHECK(pib_core_bar_size(host.core, PIB_BAR_REGS) == PIB_REGS_SIZE);
    CHECK(pib_core_bar_size(host.core, PIB_BAR_DOORBELL) == 3 * PIB_PAGE_SIZE);
    CHECK(pib_core_bar_size(host.core, PIB_BAR_MSIX) == 0);
    CHECK(pib_core_bar_size(host.core, 1) == 0);
}
