"""The lab's simulated ConnectX-7 (lab/node/sparkops-lab-rdma): layout and GID tables.

The tables follow Linux's RDMA core (the program's docstring cites the functions); these
tests check the rules on the address sequences that matter on a Spark (boot, a netplan
apply, a NetworkManager restart that brings the link-local address back first) and that the
project's own reader and NCCL's GID rule see the tree as they see a real one.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import ipaddress
from pathlib import Path

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._nccl_gid import nccl_gids
from ansible_collections.sparkops.vllm.plugins.module_utils._roce import read_device, roce_devices

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "lab" / "node" / "sparkops-lab-rdma"


def _load():
    loader = importlib.machinery.SourceFileLoader("sparkops_lab_rdma", str(SCRIPT))
    spec = importlib.util.spec_from_loader("sparkops_lab_rdma", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


sim = _load()
MAC = "02:42:c0:a8:c8:0c"
LINK_LOCAL = "fe80::8c1f:2a3b:4c5d:6e7f"  # a stable-privacy address, not the EUI-64 one


def test_spark_layout_names_the_twins_and_the_uncabled_pair():
    layout = sim.spark_layout("enp1s0f1np1")
    assert [(d["dev"], d["netdev"], d["cabled"], d["uverbs"]) for d in layout] == [
        ("rocep1s0f0", "enp1s0f0np0", False, 0),
        ("rocep1s0f1", "enp1s0f1np1", True, 1),
        ("roceP2p1s0f0", "enP2p1s0f0np0", False, 2),
        ("roceP2p1s0f1", "enP2p1s0f1np1", True, 3),
    ]
    assert [d["cabled"] for d in sim.spark_layout("enp1s0f0np0")] == [True, False, True, False]


@pytest.mark.parametrize("name", ["eth1", "enP2p1s0f1np1", "ib0", ""])
def test_spark_layout_refuses_other_names(name):
    with pytest.raises(ValueError, match="domain-0 netdev"):
        sim.spark_layout(name)


def test_default_gid_is_the_eui64_link_local_of_the_mac():
    gid = sim.default_gid(MAC)
    assert ipaddress.IPv6Address(gid) == ipaddress.IPv6Address("fe80::42:c0ff:fea8:c80c")
    assert gid == "fe80:0000:0000:0000:0042:c0ff:fea8:c80c"


def test_ipv4_gid_is_v4_mapped():
    assert sim.ip_gid("192.168.200.12") == "0000:0000:0000:0000:0000:ffff:c0a8:c80c"


def _table(addresses, previous=None, netdev="enp1s0f1np1", length=8):
    defaults, extra = sim.wanted_entries(netdev, MAC, addresses)
    return sim.next_table(previous or [None] * length, defaults, extra, length)


def test_boot_puts_ipv4_right_after_the_default_gids():
    table = _table(["192.168.200.12"])
    v4 = sim.ip_gid("192.168.200.12")
    assert table[:4] == [
        (sim.default_gid(MAC), sim.ROCE_V1, "enp1s0f1np1"),
        (sim.default_gid(MAC), sim.ROCE_V2, "enp1s0f1np1"),
        (v4, sim.ROCE_V1, "enp1s0f1np1"),
        (v4, sim.ROCE_V2, "enp1s0f1np1"),
    ]
    assert table[4:] == [None] * 4


def test_ipv4_before_ipv6_at_enumeration_and_the_eui64_link_local_adds_nothing():
    eui64 = str(ipaddress.IPv6Address(sim.default_gid(MAC)))
    table = _table([LINK_LOCAL, eui64, "192.168.200.12"])
    assert [e[0] for e in table[2:6]] == [sim.ip_gid("192.168.200.12")] * 2 + [sim.ip_gid(LINK_LOCAL)] * 2
    assert table[6:] == [None, None]


def test_an_address_added_later_takes_the_next_free_slot_and_the_old_ones_stay():
    booted = _table(["192.168.200.12"])
    later = _table(["192.168.200.12", LINK_LOCAL], booted)
    assert later[:4] == booted[:4]
    assert [e[0] for e in later[4:6]] == [sim.ip_gid(LINK_LOCAL)] * 2


def test_a_restart_that_brings_the_link_local_back_first_moves_the_ipv4_gids():
    # NetworkManager removes the addresses and adds them again; the IPv6 link-local comes
    # back before the static IPv4 one: RoCE v2 of the IPv4 address moves from 3 to 5.
    booted = _table(["192.168.200.12", LINK_LOCAL])
    assert booted[3][0] == sim.ip_gid("192.168.200.12")
    flushed = _table([], booted)
    assert flushed[2:] == [None] * 6
    link_local_first = _table([LINK_LOCAL], flushed)
    again = _table([LINK_LOCAL, "192.168.200.12"], link_local_first)
    assert again[3][0] == sim.ip_gid(LINK_LOCAL)
    assert again[5] == (sim.ip_gid("192.168.200.12"), sim.ROCE_V2, "enp1s0f1np1")


def test_a_full_table_adds_nothing_more():
    table = _table(["192.168.200.12", "10.0.0.1", LINK_LOCAL], length=4)
    assert [e[0] for e in table[2:]] == [sim.ip_gid("192.168.200.12")] * 2


def _tree(tmp_path, addresses_by_netdev):
    layout = sim.spark_layout("enp1s0f1np1")
    for device in layout:
        netdev = device["netdev"]
        defaults, extra = sim.wanted_entries(netdev, MAC, addresses_by_netdev.get(netdev, []))
        table = sim.next_table(sim.read_table(str(tmp_path), device["dev"]), defaults, extra)
        sim.write_device(str(tmp_path), device, table, active=device["cabled"])
    return layout


def test_the_tree_reads_as_a_real_one_and_nccl_takes_the_ipv4_v2_gid(tmp_path):
    _tree(tmp_path, {"enp1s0f1np1": ["192.168.200.12"]})
    device = read_device(str(tmp_path), "rocep1s0f1")
    assert "enp1s0f1np1" in device["netdevs"]
    found = roce_devices(str(tmp_path), "enp1s0f1np1", "192.168.200.12")
    assert found["nccl_ib_hca"].split(",") == ["rocep1s0f1", "roceP2p1s0f1"]
    choices = {c["device"]: c for c in nccl_gids(found["devices"])}
    assert choices["rocep1s0f1"]["index"] == 3
    # The twin has no IPv4 address: NCCL's rule takes another GID there, never index 3.
    assert choices["roceP2p1s0f1"]["index"] != 3
    # uverbs: what libibverbs lists the devices from.
    assert (
        tmp_path / "class" / "infiniband_verbs" / "uverbs3" / "ibdev"
    ).read_text().strip() == "roceP2p1s0f1"
    state = (tmp_path / "class" / "infiniband" / "rocep1s0f0" / "ports" / "1" / "state").read_text().strip()
    assert state == sim.DOWN


def test_rewriting_the_same_addresses_changes_no_file(tmp_path):
    _tree(tmp_path, {"enp1s0f1np1": ["192.168.200.12"]})
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    _tree(tmp_path, {"enp1s0f1np1": ["192.168.200.12"]})
    after = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    assert before == after


def test_a_removed_address_empties_its_slots_on_disk(tmp_path):
    _tree(tmp_path, {"enp1s0f1np1": ["192.168.200.12"]})
    _tree(tmp_path, {"enp1s0f1np1": []})
    pbase = tmp_path / "class" / "infiniband" / "rocep1s0f1" / "ports" / "1"
    assert (pbase / "gids" / "3").read_text().strip() == sim.EMPTY
    assert not (pbase / "gid_attrs" / "types" / "3").exists()
    assert roce_devices(str(tmp_path), "enp1s0f1np1")["nccl_ib_hca"].split(",") == [
        "rocep1s0f1",
        "roceP2p1s0f1",
    ]
