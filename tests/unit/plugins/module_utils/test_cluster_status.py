"""status.yml's report: parsers on what the lab's nodes printed, node records, the verdict and the table.

The inputs are captures from a deployed two-node lab (tests/fixtures/cluster_status/, taken with
`docker exec <node> ...` on the h3 lab, 2026-11-30) and the real H200 gpu_consumers_info result
(tests/fixtures/real_h200/module_result_load_auto.txt: PID 436 python3 holding 20998 MiB).
"""

import copy
import json
import sys

import pytest
from ansible_collections.sparkops.vllm.plugins.filter.cluster_status import FilterModule
from ansible_collections.sparkops.vllm.plugins.module_utils import _cluster_status as status
from ansible_collections.sparkops.vllm.plugins.module_utils import _ib_recheck, _watchdog
from conftest import FIXTURES

sys.path.insert(0, str(FIXTURES / "sysfs"))
from sysfs_tree import add_device, v4_gid

CAPTURES = FIXTURES / "cluster_status"
FILTERS = FilterModule().filters()
GIB = 1024**3


def _read(name):
    return (CAPTURES / name).read_text()


def _h200_result():
    lines = (FIXTURES / "real_h200" / "module_result_load_auto.txt").read_text().splitlines()
    return json.loads(next(line for line in lines if line.startswith('{"changed"')))


# -- parsers -----------------------------------------------------------------


def test_ip_addr_of_the_lab_ib_interface():
    assert status.parse_ip_addr(_read("ip_head.json")) == {
        "addresses": ["192.168.203.12/24"],
        "mtu": 9000,
        "state": "UP",
    }


@pytest.mark.parametrize("text", [_read("ip_missing.out"), "", "[]", "{}"])
def test_ip_addr_of_a_missing_interface_is_empty(text):
    assert status.parse_ip_addr(text) == {}


def test_systemctl_show_of_an_active_and_of_a_missing_unit():
    assert status.parse_systemctl_show(_read("show_ray_head.txt")) == {
        "NRestarts": "0",
        "LoadState": "loaded",
        "ActiveState": "active",
        "SubState": "running",
    }
    assert status.parse_systemctl_show(_read("show_missing.txt"))["LoadState"] == "not-found"


def test_utilization_of_the_deployed_record():
    record = json.dumps(DEPLOYED)
    assert status.context([], {"deployed_record": record}, {})["utilization"] == 0.55
    assert status.context([], {"deployed_record": record}, {})["utilization_source"] == "the deployed record"
    # No record (before the first deploy, or unreadable): the inventory's value, else none.
    for text in ("", "not json", json.dumps({"schema": 99, "sections": {}})):
        assert status.context([], {"deployed_record": text}, {})["utilization"] is None
        assert (
            status.context([], {"deployed_record": text}, {"gpu_memory_utilization": 0.6})["utilization"]
            == 0.6
        )


def test_ray_nodes_output():
    nodes = status.parse_ray_nodes(_read("ray_nodes.out"))
    assert [(n["ip"], n["gpus"]) for n in nodes] == [("192.168.203.12", 1.0), ("192.168.203.13", 1.0)]
    assert (
        status.parse_ray_nodes("Traceback (most recent call last):\n  ...\nConnectionError: no Ray") is None
    )
    assert status.parse_ray_nodes("") is None


# -- the report --------------------------------------------------------------

IMAGE_ID = "sha256:b43cb24599799e34b8f0d20cac6d163b5943f5ba4c32886ff869061685fd420f"
# The head's deployed record as the stages write it (docs/deployed-record.md),
# with the utilization of the lab's launch script (fixtures/cluster_status/launch.sh).
DEPLOYED = {
    "schema": 1,
    "cluster": "lab",
    "host": "spark-1",
    "role": "head",
    "recorded_at": "2026-12-01T18:40:00Z",
    "sections": {
        "image": {
            "ref": "sparkops/vllm-lab:ef2343e6f453",
            "id": IMAGE_ID,
            "recorded_at": "2026-12-01T18:40:00Z",
        },
        "serve": {
            "argv": ["vllm", "serve", "/models/lab-tiny-moe", "--gpu-memory-utilization", "0.55"],
            "gpu_memory_utilization": 0.55,
            "recorded_at": "2026-12-01T18:40:00Z",
        },
    },
}
MEMORY = {"total_bytes": int(23.54 * GIB), "available_bytes": int(20.25 * GIB), "free_bytes": int(17 * GIB)}
GB10 = [
    {
        "index": 0,
        "name": "NVIDIA GB10",
        "memory_total_mib": None,
        "memory_used_mib": None,
        "unified_memory": True,
    }
]


def _recheck(host, ib_address, ip_json, sysfs_root="/nonexistent-sysfs", **network):
    """What the Ray unit's re-check prints with --json on this node (the lab has no RDMA device)."""
    record = dict(
        {"interface": "enp1s0f1np1", "address": ib_address, "prefix": 24, "mtu": 9000, "env": {}}, **network
    )
    result = _ib_recheck.recheck(record, json.loads(ip_json), str(sysfs_root))
    for key in ("problems", "address_problems", "gid_problems"):
        result[key] = [f"sparkops ib recheck: {host}: {p}" for p in result[key]]
    return {"rc": 1 if result["problems"] else 0, "stdout": json.dumps(result), "stderr": ""}


def _node(host, role, ib_address, ip_json):
    unit = "head" if role == "head" else "worker"
    raw = {
        "host": host,
        "role": role,
        "reachable": True,
        "ib": {
            "interface": "enp1s0f1np1",
            "expected_address": ib_address,
            "expected_mtu": 9000,
            "rc": 0,
            "stdout": ip_json,
            "stderr": "",
            "recheck": _recheck(host, ib_address, ip_json),
            "netplan": {"errors": [], "warnings": [], "definitions": []},
        },
        "gpu": {"failed": False, "msg": "", "driver_version": "580.95.05", "gpus": GB10, "consumers": []},
        "memory": {"failed": False, "msg": "", "memory": dict(MEMORY)},
        "ray_unit": {"name": f"sparkops-lab-ray-{unit}", "stdout": _read("show_ray_head.txt")},
        "serve_unit": {"name": "sparkops-lab-vllm", "stdout": _read("show_ray_head.txt")}
        if role == "head"
        else None,
        "image": {
            "ref": "sparkops/vllm-lab:ef2343e6f453",
            "id": IMAGE_ID,
            "running_id": IMAGE_ID,
        },
        "manifest": {
            "failed": False,
            "msg": "",
            "hashed": [],
            "files": 11,
            "total_bytes": 536872070,
            "mismatches": [],
        },
        "ansible_host": "172.29.83.11" if role == "head" else "172.29.83.12",
    }
    return raw


def _healthy():
    worker_ip = (
        _read("ip_head.json")
        .replace("192.168.203.12", "192.168.203.13")
        .replace("c0:a8:cb:0c", "c0:a8:cb:0d")
    )
    nodes = [
        _node("spark-1", "head", "192.168.203.12", _read("ip_head.json")),
        _node("spark-2", "worker", "192.168.203.13", worker_ip),
    ]
    cluster = {
        "endpoint": "http://172.29.83.11:8000",
        "served_model_name": "lab-tiny-moe",
        "health": {"status": 200, "msg": "OK (unknown bytes)"},
        "models": {"status": 200, "msg": "OK", "json": {"object": "list", "data": [{"id": "lab-tiny-moe"}]}},
        "ray_nodes": {"rc": 0, "stdout": _read("ray_nodes.out"), "stderr": ""},
        "deployed_record": json.dumps(DEPLOYED),
    }
    settings = {
        "gpu_memory_utilization": None,
        "memory_margin_gib": 1.0,
        "ray_memory_monitor": True,
        "ray_memory_threshold": 0.95,
        "gpus_per_node": 1,
        "image_id": "",
    }
    return nodes, cluster, settings


def test_a_healthy_lab_is_healthy_with_every_field():
    result = status.report(*_healthy())
    assert result["healthy"] is True
    assert result["problems"] == []
    head, worker = result["nodes"]
    assert head["ib_address"] == "192.168.203.12" and head["ib_mtu"] == 9000
    assert worker["ray_counted"] is True and worker["ray_gpus"] == 1.0
    assert head["gpu_memory_utilization"] == 0.55
    assert head["mem_needed_gib"] == pytest.approx(0.55 * 23.54, abs=0.01)
    assert head["image"] == "sparkops/vllm-lab:ef2343e6f453" and head["image_id_expected"] == IMAGE_ID
    assert head["serve_unit_state"] == "active" and head["model"] == "ok"
    assert result["cluster"] == {
        "endpoint": "http://172.29.83.11:8000",
        "health_status": 200,
        "served_models": ["lab-tiny-moe"],
        "served_model": "lab-tiny-moe",
        "served_model_expected": "lab-tiny-moe",
        "transport": {
            "verdict": "unknown",
            "summary": "NCCL transport: unknown (no NCCL lines in the log); not enforced: the ranks do not span "
            "nodes with RDMA devices",
            "enforced": False,
            "ok": True,
            "nccl_versions": [],
            "ranks": [],
        },
        "watchdog": _watchdog.summary(None, None, 0),
        "problems": [],
        "healthy": True,
    }
    assert json.loads(json.dumps(result)) == result


def test_the_table_has_one_row_per_node_and_the_endpoint():
    lines = status.table(status.report(*_healthy()))
    assert lines[0].split()[:2] == ["HOST", "SSH"]
    assert lines[1].startswith("spark-1") and lines[1].endswith("yes")
    assert "192.168.203.13 / 9000" in lines[2] and "active, counted" in lines[2]
    assert lines[3] == "Endpoint http://172.29.83.11:8000: /health 200, serving lab-tiny-moe"
    assert lines[4] == "Healthy: every node and the endpoint."


def test_a_stopped_worker_ray_unit_names_the_worker():
    nodes, cluster, settings = _healthy()
    nodes[1]["ray_unit"]["stdout"] = "NRestarts=0\nLoadState=loaded\nActiveState=inactive\nSubState=dead\n"
    # What ray_nodes.py printed without the worker: the capture less spark-2's entry.
    alive = [n for n in json.loads(_read("ray_nodes.out")) if n["ip"] != "192.168.203.13"]
    cluster["ray_nodes"]["stdout"] = json.dumps(alive)
    result = status.report(nodes, cluster, settings)
    assert result["healthy"] is False
    worker = result["nodes"][1]
    assert worker["healthy"] is False and worker["ray_counted"] is False
    assert worker["problems"][0].startswith("spark-2: sparkops-lab-ray-worker is inactive.")
    assert "Ray does not count the node by its ib_address 192.168.203.13" in worker["problems"][1]
    assert result["nodes"][0]["healthy"] is True
    lines = status.table(result)
    assert lines[2].endswith("NO") and "inactive, NOT counted" in lines[2]
    assert lines[4] == "UNHEALTHY: 2 problem(s):"


def test_ray_counting_a_management_address_says_so():
    nodes, cluster, settings = _healthy()
    alive = json.loads(_read("ray_nodes.out"))
    alive[1]["ip"] = "172.29.83.12"
    cluster["ray_nodes"]["stdout"] = json.dumps(alive)
    problem = status.report(nodes, cluster, settings)["nodes"][1]["problems"][0]
    assert "Ray counts it by its management address 172.29.83.12 instead" in problem


def test_ray_that_does_not_answer_is_a_cluster_problem_and_counts_nobody():
    nodes, cluster, settings = _healthy()
    cluster["ray_nodes"] = {
        "rc": 1,
        "stdout": "",
        "stderr": "Error response from daemon: container is not running",
    }
    result = status.report(nodes, cluster, settings)
    assert [n["ray_counted"] for n in result["nodes"]] == [None, None]
    assert result["cluster"]["problems"] == [
        "cluster: Ray could not be asked for its nodes on the head (Error response from daemon: container is not "
        "running). Fix: start the head's Ray unit; status cannot tell which nodes Ray counts until it answers."
    ]


def test_an_unreachable_node_is_reported_and_the_rest_still_read():
    nodes, cluster, settings = _healthy()
    nodes[1] = {
        "host": "spark-2",
        "role": "worker",
        "reachable": False,
        "ansible_host": "172.29.83.12",
        "msg": "Failed to connect to the host via ssh: ssh: connect to host 172.29.83.12 port 22: No route to host",
    }
    result = status.report(nodes, cluster, settings)
    worker = result["nodes"][1]
    assert worker == {
        "host": "spark-2",
        "role": "worker",
        "reachable": False,
        "problems": [
            "spark-2: unreachable over SSH (Failed to connect to the host via ssh: ssh: connect to host 172.29.83.12 "
            "port 22: No route to host). Fix: check the node is up and `ssh 172.29.83.12` works from the controller."
        ],
        "healthy": False,
    }
    assert result["nodes"][0]["healthy"] is True
    assert status.table(result)[2].split() == ["spark-2", "down", "-", "-", "-", "-", "-", "-", "NO"]


def test_wrong_address_and_mtu_on_the_ib_interface():
    nodes, cluster, settings = _healthy()
    nodes[0]["ib"]["expected_address"] = "192.168.203.99"
    nodes[0]["ib"]["expected_mtu"] = 1500
    problems = status.report(nodes, cluster, settings)["nodes"][0]["problems"]
    assert problems[0].startswith(
        "spark-1: enp1s0f1np1 holds 192.168.203.12/24, not its ib_address 192.168.203.99."
    )
    assert problems[1].startswith("spark-1: enp1s0f1np1 has MTU 9000, the inventory's ib_mtu is 1500.")


def test_a_missing_ib_interface():
    nodes, cluster, settings = _healthy()
    nodes[0]["ib"].update(rc=1, stdout="", stderr=_read("ip_missing.out"))
    problem = status.report(nodes, cluster, settings)["nodes"][0]["problems"][0]
    assert problem.startswith('spark-1: interface enp1s0f1np1 not found (Device "nosuch" does not exist.).')


def test_the_real_h200_stale_consumer_and_discrete_memory():
    nodes, cluster, settings = _healthy()
    h200 = _h200_result()
    consumers = [
        dict(c, verdict="stale", why="not this cluster's container, not allowlisted")
        for c in h200["consumers"]
    ]
    nodes[1]["gpu"] = {
        "failed": False,
        "msg": "",
        "driver_version": h200["driver_version"],
        "gpus": h200["gpus"],
        "consumers": consumers,
    }
    worker = status.report(nodes, cluster, settings)["nodes"][1]
    assert worker["stale_consumers"] == 1 and worker["own_consumers"] == 0
    assert worker["problems"][0].startswith("spark-2: stale GPU consumer PID 436 python3 (20998 MiB)")
    # no container to stop through Docker: the fix names the process
    assert "`kill 436` on spark-2" in worker["problems"][0]
    # Discrete GPU: the claim is utilization x the GPU's 143771 MiB, and the room is what the GPU has free.
    assert worker["mem_needed_gib"] == pytest.approx(0.55 * 143771 / 1024, abs=0.01)
    assert len(worker["problems"]) == 1


def test_own_gpu_memory_counts_as_room_and_a_short_node_is_named():
    nodes, cluster, settings = _healthy()
    own = {
        "pid": 1704,
        "process_name": "VLLM::Worker",
        "used_memory_mib": 12000,
        "verdict": "own",
        "why": "label",
        "container": {"name": "sparkops-lab-vllm"},
    }
    nodes[0]["memory"]["memory"]["available_bytes"] = int(3 * GIB)
    nodes[0]["gpu"]["consumers"] = [own]
    assert status.report(nodes, cluster, settings)["nodes"][0]["healthy"] is True
    nodes[0]["gpu"]["consumers"] = []
    problem = status.report(nodes, cluster, settings)["nodes"][0]["problems"][0]
    assert problem.startswith(
        "spark-1: MemAvailable 3.0 GiB (+ 0.0 GiB held by this cluster's own containers) is below the plan's "
        "12.95 GiB (gpu_memory_utilization 0.55 of 23.54 GiB, from the deployed record) plus the 1.0 GiB margin"
    )


def test_memory_at_rays_threshold():
    nodes, cluster, settings = _healthy()
    nodes[1]["memory"]["memory"]["available_bytes"] = int(0.04 * 23.54 * GIB)
    cluster["deployed_record"] = ""
    problems = status.report(nodes, cluster, settings)["nodes"][1]["problems"]
    assert len(problems) == 1 and "at or over Ray's memory threshold 0.95" in problems[0]


def test_without_a_deployed_record_the_inventory_utilization_is_the_plan():
    nodes, cluster, settings = _healthy()
    cluster["deployed_record"] = ""
    result = status.report(nodes, cluster, settings)
    assert result["nodes"][0]["mem_needed_gib"] is None
    assert "20.25 GiB, no plan" in status.table(result)[1]
    settings["gpu_memory_utilization"] = 0.5
    head = status.report(nodes, cluster, settings)["nodes"][0]
    assert head["gpu_memory_utilization"] == 0.5


def test_image_differences():
    nodes, cluster, settings = _healthy()
    nodes[1]["image"]["id"] = "sha256:" + "1" * 64
    nodes[0]["image"]["running_id"] = "sha256:" + "2" * 64
    result = status.report(nodes, cluster, settings)
    assert "not the expected " + IMAGE_ID in result["nodes"][1]["problems"][0]
    assert result["nodes"][0]["problems"][0].startswith(
        "spark-1: sparkops-lab-ray-head runs image sha256:2222"
    )
    nodes[1]["image"]["id"] = ""
    assert (
        "the node holds no image sparkops/vllm-lab:ef2343e6f453"
        in status.report(nodes, cluster, settings)["nodes"][1]["problems"][0]
    )


def test_model_manifest_states():
    nodes, cluster, settings = _healthy()
    nodes[1]["manifest"]["mismatches"] = [{"path": "model-00001-of-00008.safetensors", "reason": "missing"}]
    nodes[0]["manifest"]["hashed"] = ["config.json"]
    result = status.report(nodes, cluster, settings)
    assert result["nodes"][1]["model"] == "1 differ"
    assert "model-00001-of-00008.safetensors (missing)" in result["nodes"][1]["problems"][0]
    assert result["nodes"][0]["model"] == "unrecorded"
    nodes[1]["manifest"] = {"skipped": True, "msg": "the head's manifest could not be read"}
    assert status.report(nodes, cluster, settings)["nodes"][1]["model"] == "unknown"
    # cluster_status_check_model: false is the operator's choice, not a problem.
    nodes[0]["manifest"] = {"disabled": True}
    head = status.report(nodes, cluster, settings)["nodes"][0]
    assert head["model"] == "not checked" and head["problems"] == []


def test_the_endpoint_down_or_serving_another_model():
    nodes, cluster, settings = _healthy()
    down = copy.deepcopy(cluster)
    down["health"] = {
        "status": -1,
        "msg": "Status code was -1 and not [200]: Request failed: <urlopen error [Errno 111] Connection refused>",
    }
    down["models"] = {"status": -1, "msg": "", "json": {}}
    result = status.report(nodes, down, settings)
    assert result["cluster"]["health_status"] is None and result["cluster"]["served_model"] is None
    assert "answered nothing (Status code was -1" in result["cluster"]["problems"][0]
    other = copy.deepcopy(cluster)
    other["models"]["json"]["data"] = [{"id": "another-model"}]
    assert (
        "serves another-model, not lab-tiny-moe"
        in status.report(nodes, other, settings)["cluster"]["problems"][0]
    )
    unauthorized = copy.deepcopy(cluster)
    unauthorized["models"] = {"status": 401, "msg": "HTTP Error 401: Unauthorized", "json": {}}
    assert "sparkops_api_key" in status.report(nodes, unauthorized, settings)["cluster"]["problems"][0]


def test_a_read_that_failed_is_the_only_problem_of_its_node():
    nodes, cluster, settings = _healthy()
    nodes[1] = {"host": "spark-2", "role": "worker", "reachable": True, "error": "Read | MemAvailable: boom"}
    worker = status.report(nodes, cluster, settings)["nodes"][1]
    assert worker["problems"] == [
        "spark-2: status could not read the node: Read | MemAvailable: boom. Fix: run the status again with -vvv; "
        "check the node's Docker engine and systemd answer."
    ]


def test_the_report_filter_reads_hostvars_and_counts_a_host_without_facts_unreachable():
    nodes, cluster, settings = _healthy()
    hostvars = {
        "spark-1": {"cluster_status_raw": nodes[0], "ansible_host": "172.29.83.11"},
        "spark-2": {"ansible_host": "172.29.83.12"},
    }
    result = FILTERS["cluster_status_report"](["spark-1", "spark-2"], hostvars, cluster, settings)
    assert result["nodes"][1]["reachable"] is False
    assert result["nodes"][1]["problems"][0].startswith(
        "spark-2: unreachable over SSH (the node left the run before status read it)."
    )
    assert FILTERS["cluster_status_table"](result)[0].startswith("HOST")


def _nccl_log(network):
    """Two ranks' NCCL lines behind Ray's prefix, in NCCL 2.28.9's formats (_nccl_transport's sources)."""
    lines = []
    for rank, (host, ip) in enumerate((("spark-1", "192.168.203.12"), ("spark-2", "192.168.203.13"))):
        head = f"(EngineCore_DP0 pid=9) (RayWorkerWrapper pid={50 + rank}, ip={ip}) {host}:{50 + rank}:{50 + rank} [0] NCCL INFO "
        peer = 1 - rank
        if network == "IB":
            lines.append(
                head
                + "NET/IB : Using [0]rocep1s0f1:1/RoCE [1]roceP2p1s0f1:1/RoCE [RO]; OOB enp1s0f1np1:"
                + ip
                + "<0>"
            )
        else:
            lines.append(head + "NCCL_IB_HCA set to rocep1s0f1,roceP2p1s0f1")
            lines.append(head + "NET/IB : No device found.")
            lines.append(head + f"NET/Socket : Using [0]enp1s0f1np1:{ip}<0>")
        lines.append(head + f"Using network {network}")
        lines.append(head + f"comm 0x{rank} rank {rank} nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0")
        via = "NET/IB/0" if network == "IB" else "NET/Socket/0"
        lines.append(head + f"Channel 00/0 : {peer}[0] -> {rank}[0] [receive] via {via}")
        lines.append(head + f"Channel 00/0 : {rank}[0] -> {peer}[0] [send] via {via}")
    return "\n".join(lines)


def _spanning(network):
    nodes, cluster, settings = _healthy()
    for node in nodes:
        node["nccl_ib_hca"] = "rocep1s0f1,roceP2p1s0f1"
    nodes[0]["serve_log"] = _nccl_log(network)
    settings = dict(settings, world_size=2, gpus_per_node=1)
    return status.report(nodes, cluster, settings)


def test_status_shows_every_ranks_transport():
    result = _spanning("IB")
    assert result["healthy"] is True
    transport = result["cluster"]["transport"]
    assert transport["verdict"] == "rdma" and transport["enforced"] is True
    assert [r["ib_devices_used"] for r in transport["ranks"]] == [["rocep1s0f1"], ["rocep1s0f1"]]
    assert (
        "NCCL transport: rdma (rank 0 spark-1: NET/IB on rocep1s0f1; rank 1 spark-2: NET/IB on rocep1s0f1)"
        in status.table(result)
    )


def test_status_calls_a_socket_fallback_an_error_with_the_fix():
    result = _spanning("Socket")
    assert result["healthy"] is False
    problems = result["cluster"]["problems"]
    assert len(problems) == 2 and all(
        p.startswith("cluster: NCCL transport: socket_fallback") for p in problems
    )
    assert "sends over NET/Socket" in problems[0] and "Fix:" in problems[0]


def test_a_single_node_cluster_is_not_held_to_rdma():
    nodes, cluster, settings = _healthy()
    nodes[0]["serve_log"] = _nccl_log("Socket")
    result = status.report(nodes, cluster, dict(settings, world_size=2, gpus_per_node=2))
    assert result["cluster"]["transport"]["enforced"] is False
    assert not [p for p in result["cluster"]["problems"] if "NCCL" in p]


# -- the link re-check (module_utils/_ib_recheck.py) and other netplan files --------------


def test_gid_drift_found_by_the_units_recheck_is_a_problem_with_its_fix(tmp_path):
    nodes, cluster, settings = _healthy()
    ll = "fe80:0000:0000:0000:4cbb:47ff:fe2c:1e06"
    # A 169.254 pair below ib_address's: NCCL takes it (the first valid IPv4 RoCE v2 GID).
    add_device(
        tmp_path,
        "rocep1s0f1",
        "enp1s0f1np1",
        [
            (ll, "IB/RoCE v1", "enp1s0f1np1"),
            (ll, "RoCE v2", "enp1s0f1np1"),
            (v4_gid("169.254.9.9"), "IB/RoCE v1", "enp1s0f1np1"),
            (v4_gid("169.254.9.9"), "RoCE v2", "enp1s0f1np1"),
            (v4_gid("192.168.203.12"), "IB/RoCE v1", "enp1s0f1np1"),
            (v4_gid("192.168.203.12"), "RoCE v2", "enp1s0f1np1"),
        ],
    )
    nodes[0]["ib"]["recheck"] = _recheck(
        "spark-1", "192.168.203.12", nodes[0]["ib"]["stdout"], sysfs_root=tmp_path
    )
    result = status.report(nodes, cluster, settings)
    [problem] = result["nodes"][0]["problems"]
    assert problem.startswith(
        "spark-1: NCCL picks GID 3 on rocep1s0f1 port 1 (RoCE v2 169.254.9.9), not the RoCE v2 GID of ib_address "
        "192.168.203.12. Fix: remove the other IPv4 address from enp1s0f1np1"
    )
    assert result["nodes"][1]["problems"] == []


def test_an_address_problem_is_reported_once_and_a_prefix_drift_by_the_recheck():
    nodes, cluster, settings = _healthy()
    nodes[0]["ib"]["expected_address"] = "192.168.203.99"
    nodes[0]["ib"]["recheck"] = _recheck("spark-1", "192.168.203.99", nodes[0]["ib"]["stdout"])
    problems = status.report(nodes, cluster, settings)["nodes"][0]["problems"]
    assert [p for p in problems if "not its ib_address" in p or "not ib_address" in p] == [
        next(p for p in problems if "not its ib_address" in p)
    ]
    nodes, cluster, settings = _healthy()
    nodes[1]["ib"]["recheck"] = _recheck("spark-2", "192.168.203.13", nodes[1]["ib"]["stdout"], prefix=16)
    [problem] = status.report(nodes, cluster, settings)["nodes"][1]["problems"]
    assert problem.startswith("spark-2: enp1s0f1np1 holds 192.168.203.13/24, the deployed prefix is /16.")


def test_a_recheck_that_did_not_run_and_another_netplan_file_are_problems():
    nodes, cluster, settings = _healthy()
    nodes[0]["ib"]["recheck"] = {
        "rc": 2,
        "stdout": "",
        "stderr": "/usr/bin/python3: can't open file '/etc/sparkops/lab/ib-recheck/_ib_recheck.py'",
    }
    nodes[1]["ib"]["netplan"] = {
        "errors": ["/etc/netplan/40-cx7.yaml configures enp1s0f1np1 (...)"],
        "warnings": [],
    }
    result = status.report(nodes, cluster, settings)
    assert result["nodes"][0]["problems"][0].startswith(
        "spark-1: the link re-check did not run (/usr/bin/python3: can't open file"
    )
    assert result["nodes"][1]["problems"] == [
        "spark-2: /etc/netplan/40-cx7.yaml configures enp1s0f1np1 (...)"
    ]


def _watchdog_status(**state):
    doc = _watchdog.new_state()
    doc.update(state)
    return json.dumps(
        {"state": doc, "state_note": None, "state_file": "/var/lib/sparkops/lab/watchdog/state.json"}
    )


@pytest.mark.parametrize(
    ("state", "timer", "shown", "problem"),
    [
        ({}, "active", "Watchdog: enabled; last tick 5 s ago (none); 1 restart(s) in the window", None),
        ({}, "inactive", "Watchdog: disabled; last tick 5 s ago (none); 1 restart(s) in the window", None),
        (
            {"paused": True, "paused_reason": "maintenance"},
            "active",
            "Watchdog: paused (maintenance); last tick 5 s ago (none); 1 restart(s) in the window",
            None,
        ),
        (
            {
                "gave_up": {
                    "at": 90.0,
                    "reason": "3 restarts in 21600 s did not help: x.",
                    "bundle": "/b.tar.gz",
                }
            },
            "active",
            "Watchdog: gave up (3 restarts in 21600 s did not help: x. Bundle: /b.tar.gz); last tick 5 s ago (none);"
            " 1 restart(s) in the window",
            "watchdog: gave up: 3 restarts in 21600 s did not help: x. Support bundle: /b.tar.gz. "
            "Fix: docs/runbooks/watchdog.md (find the cause, then `sparkops watchdog resume`).",
        ),
    ],
)
def test_status_shows_the_watchdog_and_a_give_up_is_a_problem(state, timer, shown, problem):
    nodes, cluster, settings = _healthy()
    base = {
        "last_tick": 95.0,
        "last_decision": "none",
        "restarts": [{"at": 50.0, "scope": "serve", "reason": "x"}],
    }
    cluster["watchdog"] = {"status": _watchdog_status(**{**base, **state}), "timer": timer, "now": 100.0}
    result = status.report(nodes, cluster, settings)
    assert shown in status.table(result)
    assert result["problems"] == ([problem] if problem else [])
    assert result["healthy"] is (problem is None)


def test_status_shows_the_watchdog_s_last_tick_cost_and_over_budget_is_no_problem():
    nodes, cluster, settings = _healthy()
    cost = _watchdog.tick_cost(1.25, 2.5, {})
    status_text = _watchdog_status(last_tick=95.0, last_decision="none", last_tick_cost=cost)
    cluster["watchdog"] = {"status": status_text, "timer": "active", "now": 100.0}
    result = status.report(nodes, cluster, settings)
    assert (
        "Watchdog: enabled; last tick 5 s ago (none, 1.25 s CPU over its 1 s budget, 2.5 s wall);"
        " 0 restart(s) in the window" in status.table(result)
    )
    assert result["cluster"]["watchdog"]["last_tick_cpu_s"] == 1.25
    assert result["problems"] == [] and result["healthy"] is True


def test_a_corrupt_watchdog_state_is_a_problem():
    nodes, cluster, settings = _healthy()
    cluster["watchdog"] = {
        "status": json.dumps(
            {"state": _watchdog.new_state(), "state_note": "the state file is not JSON", "state_file": "/s"}
        ),
        "timer": "active",
        "now": 1.0,
    }
    result = status.report(nodes, cluster, settings)
    assert result["problems"] == ["watchdog: the state file is not JSON (/s)"]
