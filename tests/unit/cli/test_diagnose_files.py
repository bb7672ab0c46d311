"""`sparkops diagnose FILE...`: the collection's parser on real captured logs, no Ansible."""

from __future__ import annotations

import json

import pytest

from sparkops_cli import cli
from tests.conftest import FIXTURES

REAL = FIXTURES / "real"


@pytest.mark.parametrize(
    ("name", "root_cause"),
    [
        ("30_ray_oom_killer_message_ray-28776.txt", "ray_oom_kill"),
        ("20_vllm_cudagraph_capture_oom_issue19186.txt", "cuda_graph_capture_oom"),
        ("10_vllm_free_memory_less_than_desired_v0.9.1_issue20305.txt", "startup_memory_short"),
        ("42_nccl_socket_connect_abort_h100_sglang-5594.txt", "nccl_socket_connect_failed"),
        ("50_nvidia-smi_fail_couldnt_communicate_driver_shine-cluster-50.txt", "nvidia_driver_unavailable"),
    ],
)
def test_an_error_finding_exits_1_with_its_fix(name, root_cause, capsys):
    assert cli.main(["diagnose", str(REAL / name)]) == 1
    out = capsys.readouterr().out
    assert f"[ERROR] {root_cause}" in out
    assert "Fix: " in out
    assert f"root cause: {root_cause}" in out


def test_a_clean_log_exits_0(capsys):
    assert cli.main(["diagnose", str(REAL / "15_vllm_kv_cache_lines_v0.21_lmcache-3326.txt")]) == 0
    assert "root cause: none named" in capsys.readouterr().out


def test_a_warning_only_exits_0_and_is_shown(capsys):
    assert cli.main(["diagnose", str(REAL / "34_ray_ip_mismatch_global_state_accessor_vllm-6689.txt")]) == 0
    assert "[WARNING] ray_node_ip_mismatch" in capsys.readouterr().out


def test_json_is_one_document_with_findings_from_every_file(capsys):
    files = [
        str(REAL / "30_ray_oom_killer_message_ray-28776.txt"),
        str(REAL / "40_nccl_ibv_modify_qp_roce_gid_nccl-2013.txt"),
    ]
    assert cli.main(["diagnose", "--json", *files]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["command"] == "diagnose"
    assert doc["files"] == files
    assert (doc["outcome"], doc["exit_code"]) == ("failed", 1)
    assert {finding["id"] for finding in doc["findings"]} >= {"ray_oom_kill", "nccl_ib_error"}
    assert {item["path"] for finding in doc["findings"] for item in finding["evidence"]} == set(files)


def test_context_names_the_host(tmp_path, capsys):
    context = tmp_path / "context.json"
    context.write_text(json.dumps({"hosts": {"spark-9": {"ib_address": "172.31.69.247"}}}))
    log = str(REAL / "30_ray_oom_killer_message_ray-28776.txt")
    assert cli.main(["diagnose", "--json", "--context", str(context), log]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert "spark-9" in json.dumps(doc["findings"])
