# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""memory_plan's main(): arguments in, exit_json/fail_json out."""

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.sparkops.vllm.plugins.modules import memory_plan
from cgroup_fixture import LAB, LAB_LABEL, lab_lookup
from conftest import FIXTURES

SEED_ARGS = {
    "weights_gib": 110.83,
    "tensor_parallel_size": 2,
    "memory_total_gib": 121.7,
    "system_memory_total_gib": 119.70,
    "memory_available_gib": 117.7,
    "gpu_memory_utilization": 0.90,
    "vllm_version": "0.17.1rc1",
}


class ExitJson(Exception):
    pass


class FailJson(Exception):
    pass


@pytest.fixture(autouse=True)
def patched_exits(monkeypatch):
    def exit_json(self, **kwargs):
        raise ExitJson(kwargs)

    def fail_json(self, **kwargs):
        raise FailJson(kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)


def run(args):
    with patch_module_args(args), pytest.raises((ExitJson, FailJson)) as info:
        memory_plan.main()
    return info.type, info.value.args[0]


def test_seed_case_exits_unchanged_and_does_not_fit():
    kind, result = run(SEED_ARGS)
    assert kind is ExitJson
    assert result["changed"] is False
    assert result["fits"] is False
    assert result["kv_cache_gib"] == pytest.approx(49.12, rel=0.10)
    assert any("Ray's memory-monitor limit" in r for r in result["reasons"])


def test_check_mode_gives_the_same_plan():
    _, normal = run(SEED_ARGS)
    _, checked = run({**SEED_ARGS, "_ansible_check_mode": True})
    assert checked["changed"] is False
    assert checked["kv_cache_gib"] == normal["kv_cache_gib"]
    assert checked["peak_gib"] == normal["peak_gib"]


def test_recommendation_with_monitor_off_returns_env():
    args = {**SEED_ARGS, "ray_memory_monitor": False}
    del args["gpu_memory_utilization"]
    kind, result = run(args)
    assert kind is ExitJson
    assert result["fits"] is True
    assert result["env"] == {"RAY_memory_monitor_refresh_ms": "0"}
    assert result["vllm_args"][0] == "--gpu-memory-utilization"


def test_measured_log_feeds_the_plan():
    log = (FIXTURES / "real" / "28_vllm_v0.10.2_full_memory_sequence_8xL40S_TP8EP.txt").read_text()
    kind, result = run(
        {
            "measured_log": log,
            "tensor_parallel_size": 8,
            "memory_total_gib": 44.42,
            "unified_memory": False,
            "gpu_memory_utilization": 0.9,
            "vllm_version": "0.10.2",
        }
    )
    assert kind is ExitJson
    assert result["measured"]["activation_gib"] == 1.4
    assert result["kv_cache_gib"] == pytest.approx(10.65, abs=0.02)


def test_model_path_is_summed(tmp_path):
    (tmp_path / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 2048)
    args = {**SEED_ARGS, "model_path": str(tmp_path)}
    del args["weights_gib"]
    kind, result = run(args)
    assert kind is ExitJson
    assert result["breakdown"]["sources"]["weights_gib"] == "model_path / (TP x PP)"


def test_no_model_size_fails_with_the_fix():
    args = dict(SEED_ARGS)
    del args["weights_gib"]
    kind, result = run(args)
    assert kind is FailJson
    assert "give weights_gib" in result["msg"]
    assert "model_path" in result["msg"]


@pytest.mark.parametrize("value", [0, 1.5, -0.2])
def test_utilization_outside_range_fails_with_the_fix(value):
    kind, result = run({**SEED_ARGS, "gpu_memory_utilization": value})
    assert kind is FailJson
    assert "outside (0, 1]" in result["msg"]
    assert "leave it out" in result["msg"]


def test_missing_model_dir_fails_with_the_fix(tmp_path):
    args = {**SEED_ARGS, "model_path": str(tmp_path / "absent")}
    del args["weights_gib"]
    kind, result = run(args)
    assert kind is FailJson
    assert "not a directory" in result["msg"]


def test_running_stack_label_reads_the_containers_cgroups_and_adds_them_back(monkeypatch):
    """The lab's real capture: Ray head and serve container memory is added to what is available."""
    monkeypatch.setattr(memory_plan, "DockerLookup", lambda **_kw: lab_lookup())
    base = {**SEED_ARGS, "gpu_memory_utilization": None, "memory_available_gib": 100.0}
    _, plain = run(base)
    kind, read = run(
        {
            **base,
            "running_stack_label": LAB_LABEL,
            "proc_root": str(LAB / "proc"),
            "cgroup_root": str(LAB / "sys/fs/cgroup"),
        }
    )
    assert kind is ExitJson
    assert plain["running_stack"] is None
    assert set(read["running_stack"]["containers"]) == {"sparkops-lab-ray-head", "sparkops-lab-vllm"}
    assert read["running_stack"]["gib"] > 0.4
    assert read["breakdown"]["running_stack_host_gib"] == pytest.approx(
        read["running_stack"]["gib"], abs=0.005
    )
    assert plain["breakdown"]["running_stack_host_gib"] == 0
    assert read["recommended_gpu_memory_utilization"] >= plain["recommended_gpu_memory_utilization"]


def test_an_explicit_running_stack_figure_wins_over_the_label(monkeypatch):
    def no_lookup(**_kw):
        raise AssertionError("the cgroups must not be read when the figure is given")

    monkeypatch.setattr(memory_plan, "DockerLookup", no_lookup)
    _, result = run({**SEED_ARGS, "running_stack_host_gib": 1.5, "running_stack_label": "a=b"})
    assert result["running_stack"] is None
    assert result["breakdown"]["running_stack_host_gib"] == 1.5
