"""Addressing the twin: its name from the Spark layout, and every bad input refused first."""

from __future__ import annotations

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._roce_twin import twin_netdev, twin_plan


@pytest.mark.parametrize(
    ("name", "twin"),
    [
        ("enp1s0f1np1", "enP2p1s0f1np1"),
        ("enp1s0f0np0", "enP2p1s0f0np0"),
        ("enP2p1s0f1np1", None),  # already the twin
        ("eth1", None),
        ("enP7s7", None),  # the Spark's management port
        ("", None),
        (None, None),
    ],
)
def test_twin_netdev(name, twin):
    assert twin_netdev(name) == twin


def _hosts(**overrides):
    base = {
        "spark-1": {
            "ib_interface": "enp1s0f1np1",
            "ib_subnet": "192.168.200.0/24",
            "twin_subnet": "192.168.201.0/24",
            "twin_address": "192.168.201.12",
        },
        "spark-2": {
            "ib_interface": "enp1s0f0np0",
            "ib_subnet": "192.168.200.0/24",
            "twin_subnet": "192.168.201.0/24",
            "twin_address": "192.168.201.13",
        },
    }
    for host, values in overrides.items():
        base[host] = dict(base[host], **values)
    return base


def test_disabled_when_no_node_sets_a_subnet():
    hosts = _hosts(**{h: {"twin_subnet": None, "twin_address": None} for h in ("spark-1", "spark-2")})
    assert twin_plan(hosts) == {"enabled": False, "hosts": {}, "problems": []}


def test_a_plan_per_node_with_its_own_twin():
    plan = twin_plan(_hosts())
    assert plan["problems"] == []
    assert plan["hosts"] == {
        "spark-1": {"interface": "enP2p1s0f1np1", "address": "192.168.201.12", "prefix": 24},
        "spark-2": {"interface": "enP2p1s0f0np0", "address": "192.168.201.13", "prefix": 24},
    }


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ({"spark-2": {"twin_subnet": None}}, ["spark-2", "not set while other nodes set it"]),
        ({"spark-1": {"twin_subnet": "192.168.200.0/23", "twin_address": "192.168.201.12"}}, ["overlaps"]),
        ({"spark-1": {"twin_subnet": "fd00::/64"}}, ["not an IPv4 CIDR"]),
        ({"spark-1": {"twin_address": "192.168.9.9"}}, ["not a host address", "192.168.201.0/24"]),
        ({"spark-1": {"twin_address": "192.168.201.255"}}, ["not a host address"]),
        ({"spark-1": {"twin_address": "x"}}, ["'x'", "not an IPv4 address"]),
        ({"spark-2": {"twin_address": "192.168.201.12"}}, ["also spark-1's"]),
        ({"spark-1": {"ib_interface": "eth1"}}, ["'eth1'", "roce_network_twin_interface"]),
        ({"spark-1": {"twin_interface": "enp1s0f1np1"}}, ["is ib_interface itself"]),
    ],
)
def test_bad_input_is_refused_naming_host_value_and_fix(override, words):
    plan = twin_plan(_hosts(**override))
    assert len(plan["problems"]) == 1, plan["problems"]
    assert all(w in plan["problems"][0] for w in words), plan["problems"]
    assert "Fix:" in plan["problems"][0]


def test_an_explicit_twin_interface_wins():
    plan = twin_plan(_hosts(**{"spark-1": {"ib_interface": "eth1", "twin_interface": "eth2"}}))
    assert plan["hosts"]["spark-1"]["interface"] == "eth2"
