"""The peers' suites (./pib test --peers, tools/pibctl/peers.py) in
./pib test: one short run of each whose cost fits the budget, on the
pass's fabric (rdma-core's tests run in test_verbs and
test_connectx_verbs), and the table in docs/peers.md being what the
last campaign wrote."""

from pibctl import peers


def test_osmtest_validates_the_subnet_administrator_of_the_fabric(ctx):
    result = peers.osmtest(ctx.fabric, "pib_0")
    assert result.passed == ["Create Inventory", "All Validations", "Multicast"], result


def test_the_peers_table_in_the_docs_is_what_the_campaign_wrote(ctx):
    assert not peers.doc_is_current(), peers.doc_is_current()
