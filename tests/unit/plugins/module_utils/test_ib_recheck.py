"""The link re-check of every Ray unit start and of status (module_utils/_ib_recheck.py).

Sysfs trees are laid out as mlx5 lays out a DGX Spark's cabled port (tests/fixtures/sysfs/
sysfs_tree.py: link-local pair at 0-1, the IPv4 pair at 2-3, the twin with its link-local
pair only); `ip -j addr show` in iproute2's JSON shape (tests/fixtures/cluster_status/ip_head.json).
"""

import json
import shutil
import subprocess
import sys

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _ib_recheck
from conftest import FIXTURES, ROOT

sys.path.insert(0, str(FIXTURES / "sysfs"))
from sysfs_tree import add_device, spark_table, twin_table, v4_gid

IF, TWIN_IF = "enp1s0f1np1", "enP2p1s0f1np1"
ADDRESS = "192.168.200.12"
LL = "fe80:0000:0000:0000:4cbb:47ff:fe2c:1e06"
TWIN_LL = "fe80:0000:0000:0000:4cbb:47ff:fe2c:1e07"
NETWORK = {"interface": IF, "address": ADDRESS, "prefix": 24, "mtu": 9000, "env": {}}
MODULE_UTILS = ROOT / "plugins" / "module_utils"


def links(*addresses, mtu=9000):
    return [
        {
            "ifindex": 1,
            "ifname": "lo",
            "mtu": 65536,
            "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}],
        },
        {
            "ifindex": 4,
            "ifname": IF,
            "mtu": mtu,
            "operstate": "UP",
            "addr_info": [
                {"family": "inet", "local": a, "prefixlen": int(p)}
                for a, p in (x.split("/") for x in addresses)
            ]
            + [{"family": "inet6", "local": "fe80::4cbb:47ff:fe2c:1e06", "prefixlen": 64}],
        },
        {"ifindex": 5, "ifname": TWIN_IF, "mtu": 1500, "addr_info": []},
    ]


def spark(tmp_path, primary=None, twin=None):
    add_device(tmp_path, "rocep1s0f1", IF, primary or spark_table(IF, ADDRESS, LL))
    add_device(tmp_path, "roceP2p1s0f1", TWIN_IF, twin or twin_table(TWIN_IF, TWIN_LL))
    return tmp_path


def test_a_healthy_spark_port_holds(tmp_path):
    result = _ib_recheck.recheck(NETWORK, links(f"{ADDRESS}/24"), str(spark(tmp_path)))
    assert result["problems"] == []
    assert result["nccl_gid_summary"].startswith(
        "NCCL picks per device: rocep1s0f1:1 GID 3 RoCE v2 192.168.200.12"
    )


@pytest.mark.parametrize(
    ("held", "mtu", "expected"),
    [
        ([], 9000, "enp1s0f1np1 holds no IPv4 address, not ib_address 192.168.200.12."),
        (["192.168.200.77/24"], 9000, "enp1s0f1np1 holds 192.168.200.77/24, not ib_address 192.168.200.12."),
        ([f"{ADDRESS}/16"], 9000, "enp1s0f1np1 holds 192.168.200.12/16, the deployed prefix is /24."),
        ([f"{ADDRESS}/24"], 1500, "enp1s0f1np1 has MTU 1500, the deployed MTU is 9000."),
    ],
)
def test_address_prefix_and_mtu_drift(held, mtu, expected):
    [problem] = _ib_recheck.address_problems(links(*held, mtu=mtu), IF, ADDRESS, prefix=24, mtu=9000)
    assert problem.startswith(expected)
    assert "Fix: rerun the roce_network stage" in problem and "/etc/netplan" in problem


def test_a_missing_interface_lists_those_that_exist():
    [problem] = _ib_recheck.address_problems(links(), "enp9s0", ADDRESS)
    assert problem.startswith("enp9s0 does not exist (interfaces: enP2p1s0f1np1, enp1s0f1np1, lo).")


def test_an_ipv4_link_local_address_below_ib_address_takes_ncclls_choice(tmp_path):
    # `link-local: [ipv4]` from another netplan file (NVIDIA's 40-cx7.yaml): the 169.254 pair
    # lands at 2-3 and ib_address moves to 4-5; NCCL keeps the first valid IPv4 RoCE v2 GID.
    table = [
        (LL, "IB/RoCE v1", IF),
        (LL, "RoCE v2", IF),
        (v4_gid("169.254.33.7"), "IB/RoCE v1", IF),
        (v4_gid("169.254.33.7"), "RoCE v2", IF),
        (v4_gid(ADDRESS), "IB/RoCE v1", IF),
        (v4_gid(ADDRESS), "RoCE v2", IF),
    ]
    result = _ib_recheck.recheck(
        NETWORK, links("169.254.33.7/16", f"{ADDRESS}/24"), str(spark(tmp_path, primary=table))
    )
    [problem] = result["problems"]
    assert problem.startswith(
        "NCCL picks GID 3 on rocep1s0f1 port 1 (RoCE v2 169.254.33.7), not the RoCE v2 GID of ib_address 192.168.200.12."
    )
    assert "link-local: [ipv4]" in problem
    # The twin has no address and is not held to it.
    assert "roceP2p1s0f1" not in problem


def test_a_pinned_index_that_moved(tmp_path):
    # The field report's drift (tonyd2wild/...#38): the IPv4 pair moved from 2-3 to 4-5, index 3 is empty.
    table = [
        (LL, "IB/RoCE v1", IF),
        (LL, "RoCE v2", IF),
        None,
        None,
        (v4_gid(ADDRESS), "IB/RoCE v1", IF),
        (v4_gid(ADDRESS), "RoCE v2", IF),
    ]
    network = dict(NETWORK, env={"NCCL_IB_HCA": "rocep1s0f1", "NCCL_IB_GID_INDEX": "3"})
    [problem] = _ib_recheck.recheck(network, links(f"{ADDRESS}/24"), str(spark(tmp_path, primary=table)))[
        "problems"
    ]
    assert problem.startswith(
        "NCCL_IB_GID_INDEX 3 no longer holds: rocep1s0f1 port 1: index 3 is empty, not a RoCE v2 GID (its RoCE v2 GIDs: 1 "
    )
    assert "5 (::ffff:c0a8:c80c)" in problem
    assert "leave roce_network_nccl_ib_gid_index unset" in problem


def test_a_pinned_index_the_twin_lacks(tmp_path):
    network = dict(NETWORK, env={"NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1", "NCCL_IB_GID_INDEX": "3"})
    [problem] = _ib_recheck.recheck(network, links(f"{ADDRESS}/24"), str(spark(tmp_path)))["problems"]
    assert "roceP2p1s0f1 port 1: index 3 is empty, not a RoCE v2 GID" in problem


def test_a_pinned_index_that_still_holds(tmp_path):
    network = dict(NETWORK, env={"NCCL_IB_HCA": "rocep1s0f1", "NCCL_IB_GID_INDEX": "3"})
    assert _ib_recheck.recheck(network, links(f"{ADDRESS}/24"), str(spark(tmp_path)))["problems"] == []


def test_a_device_of_the_deployed_hca_list_that_is_gone(tmp_path):
    add_device(tmp_path, "rocep1s0f1", IF, spark_table(IF, ADDRESS, LL))
    network = dict(NETWORK, env={"NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1"})
    [problem] = _ib_recheck.recheck(network, links(f"{ADDRESS}/24"), str(tmp_path))["problems"]
    assert problem.startswith(
        "NCCL_IB_HCA names roceP2p1s0f1, which is no RDMA device of enp1s0f1np1 now (devices: rocep1s0f1)."
    )


def test_no_rdma_device_and_none_deployed_is_not_a_drift(tmp_path):
    # The lab: NCCL runs over sockets, which the transport check reports, not this one.
    assert _ib_recheck.recheck(NETWORK, links(f"{ADDRESS}/24"), str(tmp_path / "none"))["problems"] == []


def _run(tmp_path, record, ip_links, sysfs, *extra):
    bundle = tmp_path / "bundle"
    bundle.mkdir(parents=True)
    for name in _ib_recheck.BUNDLE:
        shutil.copy(MODULE_UTILS / name, bundle / name)
    (tmp_path / "deployed.json").write_text(json.dumps(record))
    (tmp_path / "ip.json").write_text(json.dumps(ip_links))
    # -I as the unit runs it: no PYTHONPATH, no user site, no script directory on sys.path.
    return subprocess.run(
        [
            sys.executable,
            "-I",
            str(bundle / "_ib_recheck.py"),
            "--record",
            str(tmp_path / "deployed.json"),
            "--host",
            "spark-1",
            "--ip-json",
            str(tmp_path / "ip.json"),
            *(["--sysfs-root", str(sysfs)] if sysfs is not None else []),
            *extra,
        ],
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_shipped_script_stops_the_unit_and_names_host_value_and_fix(tmp_path):
    record = {"schema": 1, "sections": {"network": NETWORK}}
    sysfs = spark(tmp_path / "sys")
    ok = _run(tmp_path / "ok", record, links(f"{ADDRESS}/24"), sysfs)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith(
        "sparkops ib recheck: spark-1: enp1s0f1np1 holds 192.168.200.12; NCCL picks per device:"
    )
    bad = _run(tmp_path / "bad", record, links("192.168.200.77/24"), sysfs)
    assert bad.returncode == 1
    assert bad.stderr.startswith(
        "sparkops ib recheck: spark-1: enp1s0f1np1 holds 192.168.200.77/24, not ib_address 192.168.200.12. Fix:"
    )
    as_json = _run(tmp_path / "json", record, links("192.168.200.77/24"), sysfs, "--json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["address_problems"] == json.loads(as_json.stdout)["problems"]


def test_the_shipped_script_without_a_record(tmp_path):
    done = _run(tmp_path, {"schema": 1, "sections": {}}, links(), tmp_path)
    assert done.returncode == 2
    assert "cannot be read (it has no network section)" in done.stdout


def test_the_sysfs_root_defaults_to_the_one_the_node_was_deployed_with(tmp_path):
    # The lab's simulated ConnectX-7 lives outside /sys (roce_network_sysfs_root); the
    # deployed record names it, and the unit's checker reads the devices there.
    sysfs = spark(tmp_path / "lab-rdma")
    record = {"schema": 1, "sections": {"network": dict(NETWORK, sysfs_root=str(sysfs))}}
    done = _run(tmp_path / "run", record, links(f"{ADDRESS}/24"), None)
    assert done.returncode == 0, done.stderr
    assert "NCCL picks per device:" in done.stdout
