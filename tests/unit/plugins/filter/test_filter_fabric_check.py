"""The fabric check's filters (plugins/filter/fabric_check.py) over deployed records as the
deployed_record module writes them (schema 1, sections) and rank 0's registered run."""

import json

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkops.vllm.plugins.filter import fabric_check as filters
from ansible_collections.sparkops.vllm.plugins.module_utils import _deployed_record as record

SETTINGS = {
    "allreduce_backend": "tcp",
    "rdma_duration_seconds": 5,
    "rdma_message_bytes": 65536,
    "rdma_port": 18515,
    "rdma_min_gbps": 80.0,
    "allreduce_min_busbw_gbps": 0.001,
    "require_rdma": False,
}


def _text(address):
    doc = {"schema": 1, "sections": {}}
    doc["sections"]["network"] = {"interface": "enp1s0f1np1", "address": address, "mtu": 9000, "env": {}}
    doc["sections"]["image"] = {"ref": "sparkops/vllm-lab:1", "id": "sha256:1"}
    return record.dumps(doc)


HOSTVARS = {
    "spark-1": {"fabric_check_raw": {"record": _text("192.168.200.12"), "infiniband": False}},
    "spark-2": {"fabric_check_raw": {"record": _text("192.168.200.13"), "infiniband": False}},
}


def test_plan_and_report_from_records_and_rank_zero_stdout():
    plan = filters.fabric_check_plan(["spark-1", "spark-2"], HOSTVARS, SETTINGS)
    assert [n["address"] for n in plan["nodes"]] == ["192.168.200.12", "192.168.200.13"]
    assert plan["rdma"] == [] and plan["bundle"][0] == "_allreduce_smoke.py"
    sockets = [
        {"rank": 0, "local": "192.168.200.12", "peer": "192.168.200.13"},
        {"rank": 1, "local": "192.168.200.13", "peer": "192.168.200.12"},
    ]
    stdout = json.dumps({"world_size": 2, "busbw_gbps": 0.05, "correct": True, "sockets": sockets})
    report = filters.fabric_check_report(plan, [], {"rc": 0, "stdout": stdout}, SETTINGS)
    assert report["passed"] and report["allreduce"]["passed"]
    assert filters.fabric_check_markdown(report).startswith("# Fabric check: passed")


def test_report_when_rank_zero_printed_no_json():
    plan = filters.fabric_check_plan(["spark-1", "spark-2"], HOSTVARS, SETTINGS)
    report = filters.fabric_check_report(
        plan, [], {"rc": 1, "stdout": "Traceback", "stderr": "boom"}, SETTINGS
    )
    assert not report["passed"]
    assert "rank 0 gave no report (rc=1)" in report["allreduce"]["problems"][0]


def test_plan_without_a_record_names_the_host():
    hostvars = {**HOSTVARS, "spark-2": {"fabric_check_raw": {"record": "", "infiniband": False}}}
    with pytest.raises(AnsibleFilterError, match="spark-2: no deployed record"):
        filters.fabric_check_plan(["spark-1", "spark-2"], hostvars, SETTINGS)


def test_a_failed_worker_rank_is_named_with_its_last_lines():
    plan = filters.fabric_check_plan(["spark-1", "spark-2"], HOSTVARS, SETTINGS)
    hostvars = {
        "spark-1": {"__fabric_check_rank": {"rc": 124, "stderr": ""}},
        "spark-2": {
            "__fabric_check_rank": {"rc": 1, "stderr": "Traceback\nConnectionRefusedError: [Errno 111]"}
        },
    }
    report = filters.fabric_check_report(plan, [], {"rc": 124, "stdout": ""}, SETTINGS, hostvars)
    problems = report["allreduce"]["problems"]
    assert problems[:2] == [
        "spark-1's rank ended timed out",
        "spark-2's rank ended rc=1: Traceback | ConnectionRefusedError: [Errno 111]",
    ]
    assert problems[2] == "rank 0 gave no report (timed out)"
