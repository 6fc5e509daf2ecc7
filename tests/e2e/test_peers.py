"""The peers' suites (./pib test --peers, tools/pibctl/peers.py) in
./pib test: one short run of each whose cost fits the budget, on the
pass's fabric (rdma-core's tests run in test_verbs and
test_connectx_verbs), and the table in docs/peers.md being what the
last campaign wrote."""

import json

from pibctl import peers, peers_output


def test_osmtest_validates_the_subnet_administrator_of_the_fabric(ctx):
    result = peers.osmtest(ctx.fabric, peers.DEVICES[0])
    assert result.passed == ["Create Inventory", "All Validations", "Multicast"], result


def test_the_peers_table_in_the_docs_is_what_the_campaign_wrote(ctx):
    assert not peers.doc_is_current(), peers.doc_is_current()


# runfabtests.sh -vv as it prints: a failed test's output may end without
# a newline, the next entry following on its last line.
FABTESTS_OUTPUT = """\
- name:   fi_getinfo_test -s 10.78.0.1 10.78.0.1 -p "verbs"
  timestamp: 20261129-213911+0000
  result: Pass
  time:   1
- name:   fi_rdm -p "verbs"
  result: Excluded
  time:   0
- name:   fi_cq_test -p "verbs;ofi_rxm"
  result: Fail
  time:   7
  server_stdout: |
    Running cq_open_close_simultaneous [Test opening several CQs at a time]...\
- name:   fi_mr_test -p "verbs;ofi_rxm"
  result: Pass
  time:   1
- name:   fi_shared_ctx -e msg -p "verbs"
  result: Notrun
  time:   2
  server_stdout: |
    fi_getinfo(): common/shared.c:1072, ret=-61 (No data available)
# ------------------------------------------------------------------------------
# Total Pass                                                 2
"""


def test_fabtests_output_is_read_test_by_test():
    outcomes, why, ended = peers_output.fabtests(FABTESTS_OUTPUT)
    assert outcomes == {
        'fi_getinfo_test -s ADDR ADDR -p "verbs"': "Pass",
        'fi_rdm -p "verbs"': "Excluded",
        'fi_cq_test -p "verbs;ofi_rxm"': "Fail",
        'fi_mr_test -p "verbs;ofi_rxm"': "Pass",
        'fi_shared_ctx -e msg -p "verbs"': "Notrun",
    }
    assert why == {
        'fi_rdm -p "verbs"': "excluded by the provider's exclude list",
        'fi_shared_ctx -e msg -p "verbs"':
            "fi_getinfo(): common/shared.c:N, ret=-N (No data available)",
    }
    assert ended
    assert not peers_output.fabtests(FABTESTS_OUTPUT.split("# ---")[0])[2]


# UCX's gtest: a test that skips itself prints SKIP, then GoogleTest's OK.
GTEST_OUTPUT = """\
[ RUN      ] rc_verbs/uct_amo_add_xor_test.add32/0 <rc_verbs/pib_0:1>
[     SKIP ] (!check_atomics(UCS_BIT(UCT_ATOMIC_OP_ADD), OP32))
[       OK ] rc_verbs/uct_amo_add_xor_test.add32/0 (12 ms)
[ RUN      ] rc_verbs/uct_p2p_rma_test.put_short/0 <rc_verbs/pib_0:1>
[       OK ] rc_verbs/uct_p2p_rma_test.put_short/0 (3051 ms)
[ RUN      ] rc_verbs/test_rc_flow_control.general/0 <rc_verbs/pib_0:1>
[  FAILED  ] rc_verbs/test_rc_flow_control.general/0, where GetParam() = rc_verbs/pib_0:1 (88 ms)
[==========] 3 tests from 3 test suites ran. (3151 ms total)
"""


def test_gtest_output_is_read_test_by_test():
    outcomes, why, ended = peers_output.gtest(GTEST_OUTPUT)
    assert outcomes == {"rc_verbs/uct_amo_add_xor_test.add32/0": "skipped",
                        "rc_verbs/uct_p2p_rma_test.put_short/0": "ok",
                        "rc_verbs/test_rc_flow_control.general/0": "failed"}
    assert why == {"rc_verbs/uct_amo_add_xor_test.add32/0":
                   "!check_atomics(UCS_BIT(UCT_ATOMIC_OP_ADD), OP32)"}
    assert ended
    # Soft-RoCE's guests have pib_0 too: its uct tests are not Soft-RoCE's.
    other = GTEST_OUTPUT.replace("pib_0:1>", "rxe0:1>", 1)
    assert set(peers_output.gtest(other, "pib_0")[0]) == {
        "rc_verbs/uct_p2p_rma_test.put_short/0", "rc_verbs/test_rc_flow_control.general/0"}


def test_a_campaign_of_some_suites_and_devices_keeps_the_others_results():
    results = {"osmtest, 2 switches": {"pib-hca": [1], "ConnectX": [2]},
               "fabtests": {"pib-hca": [3], "Soft-RoCE": [4]}}
    osmtest = [s for s in peers.SUITES if s.name == "osmtest"]
    assert peers.kept(results, osmtest, peers.DEVICES[:1]) == {
        "osmtest, 2 switches": {"ConnectX": [2]}, "fabtests": {"pib-hca": [3], "Soft-RoCE": [4]}}
    assert peers.kept(results, peers.SUITES, peers.DEVICES) == {}


def test_the_table_is_the_same_from_a_campaign_and_from_its_file():
    run = {"passed": 1, "failed": [], "error": "",
           "skipped": {"b: not offered": 2, "a: not offered": 2, "c": 1}}
    row = peers.render({"fabtests": {"pib-hca": [run]}})
    assert "2 x a: not offered; 2 x b: not offered; 1 x c" in row
    again = json.loads(json.dumps({"fabtests": {"pib-hca": [run]}}, sort_keys=True))
    assert peers.render(again) == row


def test_a_campaign_run_in_parts_names_the_commits_of_its_runs():
    run = {"passed": 1, "failed": [], "error": "", "skipped": {}}
    older = [run] * 3
    newer = [{**run, "revision": "bd613a3"}] * 6 + \
        [{**run, "revision": "c0ffee1 + uncommitted changes"}]
    assert "| fabtests | pib-hca | 1 |" in peers.render({"fabtests": {"pib-hca": [run]}})
    row = peers.render({"fabtests": {"pib-hca": older + newer}})
    assert "| 10 (bd613a3, c0ffee1 and 3 of an earlier commit) |" in row, row
    assert "| 10 of 10 |" not in row and "| 0 of 10 |" in row
