"""main() of roce_devices_info and roce_firewall_info with patched exit_json/fail_json."""

import sys

from ansible.module_utils import basic
from ansible_collections.sparkops.vllm.plugins.modules import roce_devices_info, roce_firewall_info
from conftest import FIXTURES
from test_meminfo_module import run_module

sys.path.insert(0, str(FIXTURES / "sysfs"))
from sysfs_tree import add_device, spark_table, twin_table

IPTABLES_EXPLICIT_DROP = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -s 192.168.200.0/24 -j DROP\nCOMMIT\n"


def _spark(tmp_path):
    add_device(tmp_path, "rocep1s0f1", "enp1s0f1np1", spark_table("enp1s0f1np1", "192.168.200.12", "fe80::3"))
    add_device(tmp_path, "roceP2p1s0f1", "enP2p1s0f1np1", twin_table("enP2p1s0f1np1", "fe80::4"))
    return {"interface": "enp1s0f1np1", "address": "192.168.200.12", "sysfs_root": str(tmp_path)}


def test_devices_module_returns_the_nccl_settings(monkeypatch, tmp_path):
    args = _spark(tmp_path)
    result = run_module(monkeypatch, args, main=roce_devices_info.main)
    assert result["changed"] is False
    assert result["nccl_ib_hca"] == "rocep1s0f1,roceP2p1s0f1"
    assert "nccl_ib_gid_index" not in result
    assert [g["index"] for g in result["nccl_gids"]] == [3, 0]
    assert result["pinned_gid_problems"] == []
    assert (
        "roceP2p1s0f1:1 GID 0 IB/RoCE v1 fe80::4 (no IPv4 RoCE v2 GID on this device)"
        in result["nccl_gid_summary"]
    )
    assert result["nccl_socket_ifname"] == result["gloo_socket_ifname"] == "enp1s0f1np1"
    assert result["roce_present"] is True
    checked = run_module(monkeypatch, dict(args, _ansible_check_mode=True), main=roce_devices_info.main)
    assert checked == result


def test_devices_module_names_the_twin_a_pinned_index_is_wrong_on(monkeypatch, tmp_path):
    result = run_module(monkeypatch, dict(_spark(tmp_path), gid_index=3), main=roce_devices_info.main)
    assert result["pinned_gid_problems"] == [
        "roceP2p1s0f1 port 1: index 3 is empty, not a RoCE v2 GID (its RoCE v2 GIDs: 1 (fe80::4))"
    ]


def test_devices_module_checks_the_pin_on_the_inventory_hca_list(monkeypatch, tmp_path):
    args = dict(_spark(tmp_path), gid_index=3, hca="rocep1s0f1")
    result = run_module(monkeypatch, args, main=roce_devices_info.main)
    assert result["pinned_gid_problems"] == []
    assert [g["device"] for g in result["nccl_gids"]] == ["rocep1s0f1"]


def test_devices_module_warns_without_roce(monkeypatch, tmp_path):
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda _module, text: warnings.append(text))
    result = run_module(
        monkeypatch, {"interface": "enp1s0f1np1", "sysfs_root": str(tmp_path)}, main=roce_devices_info.main
    )
    assert result["nccl_ib_hca"] == "" and result["roce_present"] is False
    assert "no RoCE device" in warnings[0]


def test_devices_module_refuses_a_bad_address(monkeypatch, tmp_path):
    add_device(tmp_path, "rocep1s0f1", "enp1s0f1np1", spark_table("enp1s0f1np1", "192.168.200.12", "fe80::3"))
    result = run_module(
        monkeypatch,
        {"interface": "enp1s0f1np1", "address": "not-an-ip", "sysfs_root": str(tmp_path)},
        expect="fail_json",
        main=roce_devices_info.main,
    )
    assert "not an IP address" in result["msg"]


def test_firewall_module_reads_iptables_when_nft_is_missing(monkeypatch, tmp_path):
    port_range = tmp_path / "ip_local_port_range"
    port_range.write_text("32768\t60999\n")
    monkeypatch.setattr(
        basic.AnsibleModule,
        "get_bin_path",
        lambda _module, name, **_kw: None if name in ("nft", "ufw") else f"/usr/sbin/{name}",
    )
    calls = []

    def run_command(_module, argv, **_kw):
        calls.append(argv)
        return 0, IPTABLES_EXPLICIT_DROP, ""

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    result = run_module(
        monkeypatch,
        {
            "subnet": "192.168.200.0/24",
            "interface": "enp1s0f1np1",
            "ray_ports": {"gcs": 6379},
            "port_range_path": str(port_range),
        },
        main=roce_firewall_info.main,
    )
    assert calls == [["/usr/sbin/iptables-save", "-t", "filter"]]
    assert result["source"] == "iptables" and result["blocked"] is True
    assert {b["service"] for b in result["explicit"]} == {
        "Ray gcs",
        "NCCL/Gloo/torch ephemeral (ip_local_port_range)",
        "SSH (rsync of the model)",
        "ICMP echo (the ping check)",
    }
