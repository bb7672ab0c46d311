"""The reachability verdict over the real probe lines and ``ip -j neigh`` captured on the lab."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.sparkops.vllm.plugins.filter.roce_reachability import roce_reachability_problems
from ansible_collections.sparkops.vllm.plugins.module_utils._roce_reach import (
    parse_probe_lines,
    reachability_problems,
)

FIXTURES = Path(__file__).parents[3] / "fixtures" / "reachability"
SPARK2_MAC = "02:42:c0:a8:c8:0d"  # spark-2's ib netdev in the capture


def _capture(name):
    lines = [
        line
        for line in (FIXTURES / f"{name}.txt").read_text(encoding="utf-8").splitlines()
        if not line.startswith("#")
    ]
    return lines, (FIXTURES / f"{name}.neigh.json").read_text(encoding="utf-8")


def _peers(**macs):
    return {peer: {"interface": "enp1s0f1np1", "mac": mac} for peer, mac in macs.items()}


def test_the_real_probe_lines_parse():
    lines, _ = _capture("mtu_and_unreachable")
    probes = parse_probe_lines(lines)
    assert [(p["peer"], p["address"], p["full"], p["small"]) for p in probes] == [
        ("spark-2", "192.168.200.13", 1, 0),
        ("ghost", "192.168.200.99", 1, 1),
    ]
    assert probes[0]["said"].startswith("ping: local error: message too long, mtu=9000")


def test_a_peer_answering_at_the_full_mtu_from_its_own_mac_passes():
    lines, neigh = _capture("pass_9000")
    assert (
        reachability_problems(
            "spark-1", "enp1s0f1np1", 9000, lines, neigh, peers=_peers(**{"spark-2": SPARK2_MAC})
        )
        == []
    )
    # The MAC compares without case; an unknown MAC skips the check.
    assert (
        reachability_problems(
            "spark-1", "enp1s0f1np1", 9000, lines, neigh, peers=_peers(**{"spark-2": SPARK2_MAC.upper()})
        )
        == []
    )
    assert (
        reachability_problems("spark-1", "enp1s0f1np1", 9000, lines, neigh, peers=_peers(**{"spark-2": None}))
        == []
    )


def test_an_answer_from_another_mac_names_both():
    # What the scale lab showed once: the address answered from a twin's random MAC.
    lines, neigh = _capture("pass_9000")
    problems = reachability_problems(
        "spark-1", "enp1s0f1np1", 9000, lines, neigh, peers=_peers(**{"spark-2": "7a:2f:ff:43:14:ab"})
    )
    assert problems == [
        f"192.168.200.13 answers spark-1 from MAC {SPARK2_MAC}, not from spark-2's enp1s0f1np1 (7a:2f:ff:43:14:ab): "
        "another machine holds spark-2's ib_address; find it with `ip neigh` / the switch's MAC table and give it "
        "another address"
    ]


def test_a_path_mtu_below_the_setting_and_an_unreachable_peer():
    lines, neigh = _capture("mtu_and_unreachable")
    problems = reachability_problems(
        "spark-1", "enp1s0f1np1", 9000, lines, neigh, peers=_peers(**{"spark-2": SPARK2_MAC, "ghost": None})
    )
    assert len(problems) == 2
    assert problems[0].startswith(
        "path MTU below ib_mtu 9000 between spark-1 and spark-2 (192.168.200.13): a 9000-byte"
    )
    assert "(ping: local error: message too long, mtu=9000" in problems[0]
    assert problems[1].startswith(
        "ghost (192.168.200.99) is unreachable from spark-1 over enp1s0f1np1 (ping: "
    )
    assert "`ip -br link`" in problems[1]


@pytest.mark.parametrize(
    "lines",
    [
        [],
        ["garbage"],
        ["spark-2 192.168.200.13 x y"],
        ["environment: line 6: ping: command not found"],
    ],
)
def test_a_peer_the_probe_did_not_report_is_a_problem(lines):
    problems = reachability_problems(
        "spark-1", "enp1s0f1np1", 9000, lines, "[]", peers=_peers(**{"spark-2": SPARK2_MAC})
    )
    assert problems == [
        "the ping probe did not report spark-2 (it printed 0 line(s) for 1 peer(s)); read the task's output with -v and rerun"
    ]


def test_the_filter_reads_each_peers_interface_and_mac_from_hostvars():
    lines, neigh = _capture("pass_9000")
    hostvars = {
        "spark-2": {"ib_interface": "enp1s0f0np0", "__roce_network_link": {"address": "7a:2f:ff:43:14:ab"}}
    }
    problems = roce_reachability_problems(
        lines, "spark-1", "enp1s0f1np1", 9000, neigh, peers=["spark-2"], hostvars=hostvars
    )
    assert len(problems) == 1 and "not from spark-2's enp1s0f0np0 (7a:2f:ff:43:14:ab)" in problems[0]
    # A peer whose link was never read has no MAC to compare.
    assert (
        roce_reachability_problems(
            lines, "spark-1", "enp1s0f1np1", 9000, neigh, peers=["spark-2"], hostvars={"spark-2": {}}
        )
        == []
    )
