"""RDMA devices from sysfs trees built in tmp_path, and the firewall verdicts of _roce."""

import json
import sys

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _roce
from conftest import FIXTURES

sys.path.insert(0, str(FIXTURES / "sysfs"))
from sysfs_tree import add_device, spark_table, twin_table, v4_gid


def test_dgx_spark_twins_both_in_nccl_ib_hca(tmp_path):
    # The two ports of the CX-7, each seen through both PCIe links. netplan addresses
    # ib_interface only, so the cabled port's twin has its link-local GIDs and no IPv4 one.
    add_device(tmp_path, "rocep1s0f0", "enp1s0f0np0", [("fe80::1", "RoCE v2", "enp1s0f0np0")])
    add_device(tmp_path, "roceP2p1s0f0", "enP2p1s0f0np0", [("fe80::2", "RoCE v2", "enP2p1s0f0np0")])
    add_device(tmp_path, "rocep1s0f1", "enp1s0f1np1", spark_table("enp1s0f1np1", "192.168.200.12", "fe80::3"))
    add_device(tmp_path, "roceP2p1s0f1", "enP2p1s0f1np1", twin_table("enP2p1s0f1np1", "fe80::4"))
    found = _roce.roce_devices(str(tmp_path), "enp1s0f1np1", "192.168.200.12")
    assert found["nccl_ib_hca"] == "rocep1s0f1,roceP2p1s0f1"
    assert "nccl_ib_gid_index" not in found
    assert found["address_gid_indices"] == {"rocep1s0f1": 3}
    # What NCCL takes with NCCL_IB_GID_INDEX unset: the IPv4 RoCE v2 GID on the primary,
    # index 0 (link-local, RoCE v1) on the twin.
    assert [(g["device"], g["index"], g["type"], g["ipv4_roce_v2"]) for g in found["nccl_gids"]] == [
        ("rocep1s0f1", 3, "RoCE v2", True),
        ("roceP2p1s0f1", 0, "IB/RoCE v1", False),
    ]
    assert found["pinned_gid_problems"] == []
    assert found["warnings"] == []
    assert [d["twin"] for d in found["devices"]] == [False, True]
    assert {d["name"] for d in found["all_devices"]} == {
        "rocep1s0f0",
        "roceP2p1s0f0",
        "rocep1s0f1",
        "roceP2p1s0f1",
    }
    gids = found["devices"][0]["ports"][0]["gids"]
    assert [g["index"] for g in gids] == [0, 1, 2, 3]  # the empty slot 4 is left out
    assert gids[3] == {
        "index": 3,
        "gid": "::ffff:c0a8:c80c",
        "ip": "192.168.200.12",
        "type": "RoCE v2",
        "ndev": "enp1s0f1np1",
    }
    json.dumps(found)


def test_twins_sharing_one_netdev_found_through_ndevs_only(tmp_path):
    # Both devices list the same netdev, seen only in the GID attributes.
    for name in ("roceP2p1s0f1", "rocep1s0f1"):
        add_device(
            tmp_path, name, "enp1s0f1np1", spark_table("enp1s0f1np1", "10.0.0.5", "fe80::9"), via="ndevs"
        )
    found = _roce.roce_devices(str(tmp_path), "enp1s0f1np1", "10.0.0.5")
    assert found["nccl_ib_hca"] == "rocep1s0f1,roceP2p1s0f1"
    assert [g["index"] for g in found["nccl_gids"]] == [3, 3]
    assert found["address_gid_indices"] == {"rocep1s0f1": 3, "roceP2p1s0f1": 3}
    assert found["warnings"] == []


def test_single_device(tmp_path):
    add_device(tmp_path, "mlx5_0", "ens1f0np0", spark_table("ens1f0np0", "192.168.7.2", "fe80::7"))
    found = _roce.roce_devices(str(tmp_path), "ens1f0np0", "192.168.7.2")
    assert found["nccl_ib_hca"] == "mlx5_0"
    assert found["address_gid_indices"] == {"mlx5_0": 3}
    assert found["nccl_gid_summary"] == "NCCL picks per device: mlx5_0:1 GID 3 RoCE v2 192.168.7.2"
    assert found["warnings"] == []


def test_no_roce_device_is_a_warning_not_a_failure(tmp_path):
    found = _roce.roce_devices(str(tmp_path), "enp1s0f1np1", "192.168.200.12")
    assert found["nccl_ib_hca"] == ""
    assert found["nccl_gids"] == []
    assert found["nccl_gid_summary"] == "no RDMA device: NCCL uses TCP sockets"
    assert found["devices"] == []
    assert "no RoCE device" in found["warnings"][0] and "lab" in found["warnings"][0]


def test_devices_on_other_interfaces_only_named_in_the_warning(tmp_path):
    add_device(tmp_path, "rocep1s0f0", "enp1s0f0np0", [("fe80::1", "RoCE v2", "enp1s0f0np0")])
    found = _roce.roce_devices(str(tmp_path), "enp1s0f1np1", "192.168.200.12")
    assert found["nccl_ib_hca"] == ""
    assert "rocep1s0f0 (enp1s0f0np0)" in found["warnings"][0]


def test_ipv6_only_gids(tmp_path):
    add_device(
        tmp_path,
        "rocep1s0f1",
        "enp1s0f1np1",
        [
            ("fe80::3", "IB/RoCE v1", "enp1s0f1np1"),
            ("fe80::3", "RoCE v2", "enp1s0f1np1"),
            ("fd00::12", "IB/RoCE v1", "enp1s0f1np1"),
            ("fd00::12", "RoCE v2", "enp1s0f1np1"),
        ],
    )
    ipv4 = _roce.roce_devices(str(tmp_path), "enp1s0f1np1", "192.168.200.12")
    assert ipv4["nccl_ib_hca"] == "rocep1s0f1"
    assert ipv4["address_gid_indices"] == {}
    # No IPv4 GID at all: NCCL (AF_INET by default) keeps index 0.
    assert [g["index"] for g in ipv4["nccl_gids"]] == [0]
    assert "No RoCE v2 GID" in ipv4["warnings"][0]
    ipv6 = _roce.roce_devices(str(tmp_path), "enp1s0f1np1", "fd00::12")
    assert ipv6["address_gid_indices"] == {"rocep1s0f1": 3}


def test_roce_v1_entry_is_not_taken(tmp_path):
    # Only a v1 entry holds the address: NCCL needs v2, so no index, and the warning says why.
    add_device(
        tmp_path,
        "rocep1s0f1",
        "enp1s0f1np1",
        [("fe80::3", "RoCE v2", "enp1s0f1np1"), (v4_gid("192.168.200.12"), "IB/RoCE v1", "enp1s0f1np1")],
    )
    found = _roce.roce_devices(str(tmp_path), "enp1s0f1np1", "192.168.200.12")
    assert found["address_gid_indices"] == {}
    # NCCL takes the IPv4 entry even as RoCE v1 (another family beats index 0's), and the
    # warning says NCCL needs v2.
    assert [(g["index"], g["ipv4_roce_v2"]) for g in found["nccl_gids"]] == [(1, False)]
    assert "only a RoCE v1 entry" in found["warnings"][0]


def test_v2_index_picked_among_v1_and_v2(tmp_path):
    add_device(tmp_path, "rocep1s0f1", "enp1s0f1np1", spark_table("enp1s0f1np1", "192.168.200.12", "fe80::3"))
    found = _roce.roce_devices(str(tmp_path), "enp1s0f1np1", "192.168.200.12")
    assert [g["index"] for g in found["nccl_gids"]] == [3]


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("roceP2p1s0f1", "rocep1s0f1"),
        ("enP2p1s0f1np1", "enp1s0f1np1"),
        ("rocep1s0f1", "rocep1s0f1"),
        ("eth0", "eth0"),
    ],
)
def test_twin_key(name, key):
    assert _roce.twin_key(name) == key


# --- firewall -------------------------------------------------------------------

SERVICES = _roce.cluster_services(
    {"gcs": 6379, "dashboard": 8265, "worker_ports": "10002-10999"}, "32768\t60999\n", 22
)
SUBNET = "192.168.200.0/24"
IFACE = "enp1s0f1np1"

IPTABLES_ACCEPT = """*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
COMMIT
"""

IPTABLES_EXPLICIT_DROP = """*filter
:INPUT ACCEPT [0:0]
-A INPUT -s 192.168.200.0/24 -j DROP
COMMIT
"""

IPTABLES_POLICY_DROP = """*filter
:INPUT DROP [0:0]
-A INPUT -i lo -j ACCEPT
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -i enP7s7 -p tcp -m tcp --dport 22 -j ACCEPT
COMMIT
"""

# What roce_network_firewall_open left on a lab node (iptables -S, captured).
_OURS = '-s 192.168.200.0/24 -i enp1s0f1np1 {} -m comment --comment "sparkops roce_network" -j ACCEPT'
IPTABLES_OPENED = "\n".join(
    [
        "*filter",
        ":INPUT DROP [0:0]",
        "-A INPUT " + _OURS.format("-p icmp -m icmp --icmp-type 8"),
        "-A INPUT " + _OURS.format("-p tcp -m multiport --dports 22,6379:6385,8265,10001:10999,32768:60999"),
        "-A INPUT -i lo -j ACCEPT",
        "COMMIT",
    ]
)


def test_open_firewall_blocks_nothing():
    assert _roce.firewall_blocks(SERVICES, SUBNET, IFACE, iptables_save=IPTABLES_ACCEPT)["blocks"] == []


def test_explicit_drop_rule_blocks_every_service():
    found = _roce.firewall_blocks(SERVICES, SUBNET, IFACE, iptables_save=IPTABLES_EXPLICIT_DROP)
    assert {b["service"] for b in found["blocks"]} == {s["name"] for s in SERVICES}
    assert {b["kind"] for b in found["blocks"]} == {"rule"}
    assert found["blocks"][0]["rule"] == "-A INPUT -s 192.168.200.0/24 -j DROP"


def test_drop_rule_for_another_subnet_blocks_nothing():
    text = IPTABLES_EXPLICIT_DROP.replace("192.168.200.0/24", "10.9.0.0/16")
    assert _roce.firewall_blocks(SERVICES, SUBNET, IFACE, iptables_save=text)["blocks"] == []


def test_policy_drop_blocks_and_is_openable():
    found = _roce.firewall_blocks(SERVICES, SUBNET, IFACE, iptables_save=IPTABLES_POLICY_DROP)
    summary = _roce.firewall_summary(found, SERVICES)
    assert summary["blocked"] and summary["explicit"] == []
    assert summary["policy_chains"] == [
        {"family": "ip", "table": "filter", "chain": "INPUT", "iptables": True}
    ]
    # SSH from the management interface is allowed, from the ib interface it is not.
    assert "SSH (rsync of the model)" in {b["service"] for b in found["blocks"]}
    assert summary["tcp_ranges"] == ["22", "6379", "8265", "10002:10999", "32768:60999"]


def test_opened_policy_blocks_nothing():
    assert _roce.firewall_blocks(SERVICES, SUBNET, IFACE, iptables_save=IPTABLES_OPENED)["blocks"] == []


def nft(*items):
    return json.dumps({"nftables": [{"metainfo": {"json_schema_version": 1}}, *items]})


def table(family, name):
    return {"table": {"family": family, "name": name, "handle": 1}}


def chain(family, tname, name, *, policy="accept", prio=0, hook="input"):
    return {
        "chain": {
            "family": family,
            "table": tname,
            "name": name,
            "handle": 1,
            "type": "filter",
            "hook": hook,
            "prio": prio,
            "policy": policy,
        }
    }


def rule(family, tname, cname, handle, *expr):
    return {"rule": {"family": family, "table": tname, "chain": cname, "handle": handle, "expr": list(expr)}}


SADDR = {
    "match": {
        "op": "==",
        "left": {"payload": {"protocol": "ip", "field": "saddr"}},
        "right": {"prefix": {"addr": "192.168.200.0", "len": 24}},
    }
}


def test_nft_accept_in_our_table_does_not_override_another_tables_drop():
    ruleset = nft(
        table("inet", "sparkops"),
        chain("inet", "sparkops", "input", prio=-10),
        rule("inet", "sparkops", "input", 2, SADDR, {"accept": None}),
        table("inet", "filter"),
        chain("inet", "filter", "input", policy="drop"),
    )
    found = _roce.firewall_blocks(SERVICES, SUBNET, IFACE, nft_json=ruleset)
    assert found["source"] == "nftables"
    assert {b["kind"] for b in found["blocks"]} == {"policy"}
    assert {b["table"] for b in found["blocks"]} == {"filter"}


def test_nft_accept_of_the_ports_in_the_dropping_chain_opens_it():
    dport = {
        "match": {
            "op": "==",
            "left": {"payload": {"protocol": "tcp", "field": "dport"}},
            "right": {
                "set": [
                    22,
                    {"range": [6379, 6385]},
                    8265,
                    {"range": [10001, 10999]},
                    {"range": [32768, 60999]},
                ]
            },
        }
    }
    icmp = {
        "match": {
            "op": "==",
            "left": {"payload": {"protocol": "icmp", "field": "type"}},
            "right": "echo-request",
        }
    }
    ruleset = nft(
        table("inet", "filter"),
        chain("inet", "filter", "input", policy="drop"),
        rule("inet", "filter", "input", 5, SADDR, dport, {"accept": None}),
        rule("inet", "filter", "input", 6, SADDR, icmp, {"accept": None}),
    )
    assert _roce.firewall_blocks(SERVICES, SUBNET, IFACE, nft_json=ruleset)["blocks"] == []


def test_nft_explicit_drop_of_one_port_names_only_that_service():
    dport = {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 6379}}
    ruleset = nft(
        table("ip", "filter"),
        chain("ip", "filter", "INPUT"),
        rule(
            "ip", "filter", "INPUT", 7, SADDR, dport, {"counter": {"packets": 0, "bytes": 0}}, {"drop": None}
        ),
    )
    found = _roce.firewall_blocks(SERVICES, SUBNET, IFACE, nft_json=ruleset)
    assert [(b["service"], b["kind"]) for b in found["blocks"]] == [("Ray gcs", "rule")]
    assert "handle 7" in found["blocks"][0]["rule"]


def test_ufw_status_read():
    status = (
        "Status: active\nLogging: on (low)\nDefault: deny (incoming), allow (outgoing), disabled (routed)\n"
    )
    assert _roce.parse_ufw_status(status) == {"active": True, "default_incoming": "deny", "rules": []}
    assert _roce.parse_ufw_status("Status: inactive\n")["active"] is False


def test_merged_ports_and_format():
    services = _roce.cluster_services({"a": 6379, "b": 6380, "c": "6381-6385"}, "32768 60999", 22)
    assert _roce.merged_ports(services) == [(22, 22), (6379, 6385), (32768, 60999)]
    assert _roce.format_ports([(1, 1), (5, 9)]) == "1,5-9"
