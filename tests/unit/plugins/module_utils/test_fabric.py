# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Fabric qualification: pairing, the plan from deployed records, verdicts and the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _fabric as fabric

from tests.unit.plugins.module_utils.test_perftest import GBITS_DURATION, NO_SERVER

SETTINGS = {
    "allreduce_backend": "nccl",
    "rdma_duration_seconds": 5,
    "rdma_message_bytes": 65536,
    "rdma_port": 18515,
    "rdma_min_gbps": 80.0,
    "allreduce_min_busbw_gbps": 8.0,
    "require_rdma": True,
}
# A Spark's deployed record's network and image sections (docs/deployed-record.md), with
# both twins of the cabled port in NCCL_IB_HCA as roce_network writes it.
TWINS = "rocep1s0f1,roceP2p1s0f1"


def record(address, hca=TWINS, image="sparkops/vllm:abc", image_id="sha256:1"):
    env = {"NCCL_SOCKET_IFNAME": "enp1s0f1np1", "GLOO_SOCKET_IFNAME": "enp1s0f1np1", "VLLM_HOST_IP": address}
    if hca is not None:
        env["NCCL_IB_HCA"] = hca
    return {
        "network": {"interface": "enp1s0f1np1", "address": address, "mtu": 9000, "env": env},
        "image": {"ref": image, "id": image_id},
    }


def test_pairs_every_unordered_pair_in_inventory_order():
    assert fabric.pairs(["a", "b", "c"]) == [("a", "b"), ("a", "c"), ("b", "c")]
    assert fabric.pairs(["a"]) == []
    with pytest.raises(fabric.FabricError, match="repeat"):
        fabric.pairs(["a", "a"])


@pytest.mark.parametrize(
    ("hca", "present", "hcas", "reason"),
    [
        (TWINS, True, ["rocep1s0f1", "roceP2p1s0f1"], None),
        ("=rocep1s0f1:1,roceP2p1s0f1:1", True, ["rocep1s0f1", "roceP2p1s0f1"], None),
        ("^mlx5_bond_0", True, [], "NCCL_IB_HCA is empty"),
        (None, False, [], "NCCL_IB_HCA is empty"),  # a node roce_network found no device on
        ("", True, [], "NCCL_IB_HCA is empty"),
        (TWINS, False, [], "/dev/infiniband is missing"),
    ],
)
def test_node_devices_from_the_deployed_record(hca, present, hcas, reason):
    got = fabric.node("spark-1", record("192.168.100.11", hca), present)
    assert got["hcas"] == hcas
    assert (got["rdma_reason"] or "").startswith(reason or "")
    assert (got["rdma_reason"] is None) == (reason is None)


def test_node_without_a_record_says_deploy_first():
    with pytest.raises(fabric.FabricError, match=r"spark-2: no deployed record.*deploy first"):
        fabric.node("spark-2", None, True)


def test_plan_pairs_hcas_by_index_with_ports_per_device():
    nodes = [
        fabric.node("spark-1", record("192.168.100.11"), True),
        fabric.node("spark-2", record("192.168.100.12"), True),
        fabric.node("spark-3", record("192.168.100.13", hca=None), False),
    ]
    got = fabric.plan(nodes, SETTINGS)
    assert [(t["server"], t["client"], t["server_device"], t["port"]) for t in got["rdma"]] == [
        ("spark-1", "spark-2", "rocep1s0f1", 18515),
        ("spark-1", "spark-2", "roceP2p1s0f1", 18516),
    ]
    first = got["rdma"][0]
    assert first["client_argv"][-1] == "192.168.100.11" and "-D" in first["server_argv"]
    assert got["ranks"] == {"spark-1": 0, "spark-2": 1, "spark-3": 2}
    assert got["master_address"] == "192.168.100.11"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"allreduce_backend": "gloo"}, "choose one of nccl, tcp"),
        ({"rdma_duration_seconds": 600}, "lower it"),
    ],
)
def test_plan_refuses_bad_settings(change, message):
    nodes = [fabric.node("spark-1", record("192.168.100.11"), True)]
    with pytest.raises((fabric.FabricError, ValueError), match=message):
        fabric.plan(nodes, {**SETTINGS, **change})


def test_plan_refuses_nodes_on_different_images():
    nodes = [
        fabric.node("spark-1", record("192.168.100.11"), True),
        fabric.node("spark-2", record("192.168.100.12", image_id="sha256:2"), True),
    ]
    with pytest.raises(fabric.FabricError, match="different images"):
        fabric.plan(nodes, SETTINGS)


TEST = {
    "server": "spark-1",
    "client": "spark-2",
    "server_device": "rocep1s0f1",
    "client_device": "rocep1s0f1",
}


def test_rdma_result_from_a_real_report_against_the_threshold():
    low = fabric.rdma_result(TEST, {"rc": 0}, {"rc": 0, "stdout": GBITS_DURATION}, 80.0)
    assert (low["passed"], low["bw_average_gbps"]) == (False, 0.48)
    assert "below 80.0 Gb/s" in low["message"]
    ok = fabric.rdma_result(TEST, {"rc": 0}, {"rc": 0, "stdout": GBITS_DURATION}, 0.4)
    assert ok["passed"]


def test_rdma_result_without_a_server_names_perftest_message():
    got = fabric.rdma_result(
        TEST, {"rc": 124, "stderr": ""}, {"rc": 1, "stdout": "", "stderr": NO_SERVER}, 80.0
    )
    assert not got["passed"]
    assert "rc=1" in got["message"] and "Couldn't connect to 192.168.100.11:18515" in got["message"]


FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "nccl_real"


def _tcp_report(sockets, correct=True, busbw=0.05, world_size=2):
    return {
        "report": {
            "backend": "tcp",
            "world_size": world_size,
            "size_bytes": 1 << 20,
            "busbw_gbps": busbw,
            "algbw_gbps": busbw,
            "correct": correct,
            "max_rel_error": 0.0,
            "sockets": sockets,
        }
    }


IB = ["192.168.200.12", "192.168.200.13"]
GOOD_SOCKETS = [
    {"rank": 0, "local": "192.168.200.12", "peer": "192.168.200.13"},
    {"rank": 1, "local": "192.168.200.13", "peer": "192.168.200.12"},
]


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (_tcp_report(GOOD_SOCKETS), None),
        # The worker's socket left from its management address (172.29.10.12).
        (
            _tcp_report([GOOD_SOCKETS[0], {"rank": 1, "local": "172.29.10.12", "peer": "192.168.200.12"}]),
            "sockets outside the ib addresses: rank 1 172.29.10.12->192.168.200.12",
        ),
        (_tcp_report(GOOD_SOCKETS[:1]), "1 socket ends reported, expected 2"),
        (_tcp_report(GOOD_SOCKETS, correct=False), "sum was wrong"),
        (_tcp_report(GOOD_SOCKETS, busbw=0.0001), "below 0.001 GB/s"),
        (_tcp_report(GOOD_SOCKETS, world_size=1), "1 ranks took part"),
        ({"rc": 124, "stderr": "x\n"}, "rank 0 gave no report (timed out): x"),
    ],
)
def test_tcp_allreduce_asserts_it_ran_between_the_ib_addresses(raw, problem):
    got = fabric.allreduce_result(raw, "tcp", IB, 0.001)
    assert got["passed"] is (problem is None)
    if problem:
        assert any(problem in p for p in got["problems"]), got["problems"]


def test_nccl_allreduce_needs_net_ib():
    rdma = {
        "report": {"world_size": 2, "busbw_gbps": 20.0, "correct": True, "transport": {"verdict": "rdma"}}
    }
    assert fabric.allreduce_result(rdma, "nccl", IB, 8.0, expected_devices=["rocep1s0f1"])["passed"]
    socket = {
        "report": {
            "world_size": 2,
            "busbw_gbps": 2.9,
            "correct": True,
            "transport": {
                "verdict": "socket_fallback",
                "findings": [{"message": "NET/IB : No device found"}],
            },
        }
    }
    got = fabric.allreduce_result(socket, "nccl", IB, 8.0, expected_devices=["rocep1s0f1"])
    assert not got["passed"]
    assert "'socket_fallback', not NET/IB on rocep1s0f1: NET/IB : No device found" in got["problems"][0]
    assert "below 8.0 GB/s" in got["problems"][1]


@pytest.mark.parametrize(
    "name", ["smoke_h200x1_two_hosts_default.json", "smoke_h200x1_two_hosts_bad_hca.json"]
)
def test_real_two_host_nccl_smoke_over_sockets_fails(name):
    # Real runs of _allreduce_smoke.py between two hosts without RDMA (the lent H200,
    # tests/fixtures/nccl_real/capture.sh): NCCL ran over NET/Socket, which the check refuses.
    raw = json.loads((FIXTURES / name).read_text())
    got = fabric.allreduce_result(raw, "nccl", ["10.0.0.1", "10.0.0.2"], 8.0, expected_devices=["mlx5_0"])
    assert (got["passed"], got["transport"], got["busbw_gbps"]) == (False, "socket_fallback", 1.857)
    assert "NCCL transport is 'socket_fallback', not NET/IB on mlx5_0" in got["problems"][0]
    # The threshold alone would have failed it too (1.857 GB/s).
    assert got["problems"][-1] == "bus bandwidth 1.857 GB/s is below 8.0 GB/s"


def test_lab_report_passes_with_rdma_findings_and_renders_markdown():
    nodes = [
        fabric.node("spark-1", record(IB[0], hca=None), False),
        fabric.node("spark-2", record(IB[1], hca=None), False),
    ]
    settings = {
        **SETTINGS,
        "allreduce_backend": "tcp",
        "require_rdma": False,
        "allreduce_min_busbw_gbps": 0.001,
    }
    the_plan = fabric.plan(nodes, settings)
    assert the_plan["rdma"] == []
    allreduce = fabric.allreduce_result(_tcp_report(GOOD_SOCKETS), "tcp", IB, 0.001)
    doc = fabric.report(the_plan, [], allreduce, settings)
    assert doc["passed"]
    assert [(f["severity"], f["code"], f["host"]) for f in doc["findings"]] == [
        ("warning", "rdma_not_tested", "spark-1"),
        ("warning", "rdma_not_tested", "spark-2"),
    ]
    text = fabric.markdown(doc)
    assert text.startswith("# Fabric check: passed\n")
    assert "| spark-1 | — | — | — | — | not tested: NCCL_IB_HCA is empty" in text
    assert "| tcp | 2 | 1048576 | TCP between ib addresses | 0.05 | pass (min 0.001) |" in text
    # On a real node the same missing devices fail the check.
    strict = fabric.report(the_plan, [], allreduce, {**settings, "require_rdma": True})
    assert not strict["passed"] and strict["findings"][0]["severity"] == "error"
    assert "# Fabric check: FAILED" in fabric.markdown(strict)


def test_failed_rdma_pair_is_an_error_finding_and_a_table_row():
    nodes = [
        fabric.node("spark-1", record("192.168.100.11"), True),
        fabric.node("spark-2", record("192.168.100.12"), True),
    ]
    the_plan = fabric.plan(nodes, SETTINGS)
    results = [
        fabric.rdma_result(t, {"rc": 0}, {"rc": 0, "stdout": GBITS_DURATION}, 80.0) for t in the_plan["rdma"]
    ]
    doc = fabric.report(the_plan, results, {"backend": "nccl", "passed": True, "problems": []}, SETTINGS)
    assert not doc["passed"]
    assert [f["code"] for f in doc["findings"]] == ["rdma_bandwidth", "rdma_bandwidth"]
    assert "| spark-1 | rocep1s0f1 | spark-2 | rocep1s0f1 | 0.48 | FAIL (min 80.0) |" in fabric.markdown(doc)


ARGV_SETTINGS = {
    **SETTINGS,
    "allreduce_bytes": 1 << 20,
    "allreduce_warmup": 1,
    "allreduce_iters": 5,
    "allreduce_timeout_seconds": 120,
    "allreduce_port": 29555,
}


def _argv(backend, host, hca=TWINS, **flags):
    nodes = [
        fabric.node("spark-1", record(IB[0], hca=hca), True),
        fabric.node("spark-2", record(IB[1], hca=hca), True),
    ]
    the_plan = fabric.plan(nodes, {**ARGV_SETTINGS, "allreduce_backend": backend})
    kwargs = {"gpus": True, "memlock": True, "rdma_devices": True, **flags}
    return fabric.allreduce_argv(
        the_plan,
        host,
        ARGV_SETTINGS,
        container="sparkops-lab-fabric-check",
        labels={"io.sparkops.cluster": "lab"},
        env_file="/etc/sparkops/lab/ray.env",
        scratch="/tmp/sparkops-fabric-x",
        **kwargs,
    )


def test_allreduce_argv_nccl_has_the_ray_units_device_flags_and_rank_environment():
    argv = _argv("nccl", "spark-2")
    text = " ".join(argv)
    assert argv[:5] == ["docker", "run", "--rm", "--name", "sparkops-lab-fabric-check"]
    for flag in (
        "--network host",
        "--env-file /etc/sparkops/lab/ray.env",
        "--gpus all",
        "--device /dev/infiniband",
        "--ulimit memlock=-1 --cap-add IPC_LOCK",
        "-e RANK=1",
        "-e WORLD_SIZE=2",
        f"-e MASTER_ADDR={IB[0]}",
        "-e MASTER_PORT=29555",
        "--label io.sparkops.cluster=lab",
        "-v /tmp/sparkops-fabric-x:/opt/sparkops-fabric:ro sparkops/vllm:abc timeout 120 python3",
        "--backend nccl --size-bytes 1048576",
        f"--expect-devices {TWINS}",
    ):
        assert flag in text, flag


def test_allreduce_argv_tcp_binds_the_ib_address_without_device_flags():
    argv = _argv("tcp", "spark-1", hca=None, gpus=False, memlock=False, rdma_devices=False)
    text = " ".join(argv)
    assert f"--bind-address {IB[0]} --timeout 120" in text and "-e RANK=0" in text
    assert "--gpus" not in argv and "--device" not in argv and "--expect-devices" not in argv


def test_allreduce_argv_refuses_a_buffer_above_the_cap():
    nodes = [fabric.node("spark-1", record(IB[0]), True)]
    the_plan = fabric.plan(nodes, ARGV_SETTINGS)
    with pytest.raises(ValueError, match="lower it"):
        fabric.allreduce_argv(
            the_plan,
            "spark-1",
            {**ARGV_SETTINGS, "allreduce_bytes": 2 << 30},
            container="c",
            labels={},
            env_file="e",
            scratch="s",
            gpus=False,
            memlock=False,
            rdma_devices=False,
        )


def test_simulated_devices_are_not_tested_and_say_why():
    doc = record("192.168.200.12", TWINS)
    doc["network"]["sysfs_root"] = "/run/sparkops-lab/rdma"
    got = fabric.node("spark-1", doc, True)
    assert got["hcas"] == [] and got["listed_hcas"] == ["rocep1s0f1", "roceP2p1s0f1"]
    assert "are simulated" in got["rdma_reason"] and "/run/sparkops-lab/rdma" in got["rdma_reason"]
    doc["network"]["sysfs_root"] = "/sys"
    assert fabric.node("spark-1", doc, True)["rdma_reason"] is None
