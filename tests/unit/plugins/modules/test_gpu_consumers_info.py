"""main() of plugins/modules/gpu_consumers_info.py, driven through the lab's simulated nvidia-smi.

The last test runs the module against a real NVIDIA GPU when one is present (it ran on the
project's lent H200 machine); elsewhere it is skipped.
"""

import json
import os
import shutil
import subprocess

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _bounded
from ansible_collections.sparkops.vllm.plugins.modules import gpu_consumers_info
from conftest import ROOT
from test_meminfo_module import run_module

SIMULATOR = str(ROOT / "lab" / "nvidia-smi")
UUID = "GPU-5c1e3d0a-1b2c-4d5e-8f90-0123456789ab"


def run_gpu_module(monkeypatch, args, expect="exit_json"):
    return run_module(monkeypatch, args, expect=expect, main=gpu_consumers_info.main)


@pytest.fixture
def lab_state(tmp_path, monkeypatch):
    """Point the simulator at a state file in tmp_path; returns a writer for it."""
    path = tmp_path / "gpu-state.json"
    monkeypatch.setenv("SPARKOPS_LAB_GPU_STATE", str(path))

    def write(**state):
        path.write_text(json.dumps(state))

    return write


def test_gb10_in_the_lab(monkeypatch, lab_state):
    lab_state(
        processes=[
            {"pid": os.getpid(), "process_name": "/usr/bin/python3", "used_memory_mib": 12288, "type": "C"},
        ]
    )
    result = run_gpu_module(monkeypatch, {"backend": "nvidia_smi", "nvidia_smi_path": SIMULATOR})
    assert result["changed"] is False
    assert (result["backend_used"], result["driver_version"], result["driver_branch"]) == (
        "nvidia_smi",
        "580.95.05",
        580,
    )
    assert result["gpus"] == [
        {
            "index": 0,
            "uuid": UUID,
            "name": "NVIDIA GB10",
            "driver_version": "580.95.05",
            "memory_total_mib": None,
            "memory_used_mib": None,
            "unified_memory": True,
        }
    ]
    (consumer,) = result["consumers"]
    assert (consumer["pid"], consumer["used_memory_mib"], consumer["gpu_uuid"], consumer["type"]) == (
        os.getpid(),
        12288,
        UUID,
        "C",
    )
    assert consumer["process_name"] == "/usr/bin/python3"
    assert consumer["container"] is None
    assert "warnings" not in result


def test_auto_without_nvml_uses_the_cli_in_check_mode(monkeypatch, lab_state):
    lab_state()
    monkeypatch.setattr(gpu_consumers_info, "load_pynvml", lambda: None)
    result = run_gpu_module(monkeypatch, {"nvidia_smi_path": SIMULATOR, "_ansible_check_mode": True})
    assert result["backend_used"] == "nvidia_smi"
    assert result["consumers"] == []


def test_commands_run_as_argv_with_lc_all_c_and_a_time_limit(monkeypatch, lab_state):
    lab_state()
    seen = []
    original = _bounded.run

    def spy(argv, timeout, env_update=None):
        seen.append((argv, env_update, timeout))
        return original(argv, timeout=timeout, env_update=env_update)

    monkeypatch.setattr(_bounded, "run", spy)
    run_gpu_module(
        monkeypatch,
        {"backend": "nvidia_smi", "nvidia_smi_path": SIMULATOR, "docker_lookup": False, "timeout": 7},
    )
    assert [args[1:] for args, _, _ in seen] == [
        [
            "--query-gpu=index,uuid,name,driver_version,memory.total,memory.used",
            "--format=csv,noheader,nounits",
        ],
        [],
        ["--query-compute-apps=pid,process_name,used_memory,gpu_uuid", "--format=csv,noheader,nounits"],
    ]
    assert all(isinstance(args, list) and env["LC_ALL"] == "C" and bound == 7 for args, env, bound in seen)


def _fake_smi(tmp_path, body):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/bash\n" + body)
    smi.chmod(0o755)
    return str(smi)


def test_a_hung_nvidia_smi_fails_with_the_command_and_the_bound(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_consumers_info, "load_pynvml", lambda: None)
    smi = _fake_smi(tmp_path, "exec sleep 600\n")
    result = run_gpu_module(
        monkeypatch, {"nvidia_smi_path": smi, "docker_lookup": False, "timeout": 1}, expect="fail_json"
    )
    assert "did not answer within 1 s" in result["msg"]
    assert result["cmd"][0] == smi and result["timeout"] == 1


GPU_LINE = "0, GPU-5c1e3d0a-1b2c-4d5e-8f90-0123456789ab, NVIDIA GB10, 580.95.05, [N/A], [N/A]"


@pytest.mark.parametrize(
    ("apps", "unreadable"),
    [
        ("Segmentation fault (core dumped)", "Segmentation fault"),
        ("114687; python3; 12; GPU-x", "114687; python3"),
        ("notapid, python3, 12, GPU-5c1e3d0a-1b2c-4d5e-8f90-0123456789ab", "notapid"),
        ("\x00\x01\x02", "cells"),
    ],
)
def test_unreadable_output_fails_closed_with_what_could_not_be_read(monkeypatch, tmp_path, apps, unreadable):
    monkeypatch.setattr(gpu_consumers_info, "load_pynvml", lambda: None)
    table = (
        ROOT / "tests" / "fixtures" / "real" / "01_gb10_nvidia-smi_table_processes_obrienlabs.txt"
    ).read_text()
    (tmp_path / "table.txt").write_text(table)
    (tmp_path / "apps.txt").write_text(apps + "\n")
    smi = _fake_smi(
        tmp_path,
        f'case "$1" in --query-gpu*) echo "{GPU_LINE}";; --query-compute-apps*) cat {tmp_path}/apps.txt;; '
        f"*) cat {tmp_path}/table.txt;; esac\n",
    )
    result = run_gpu_module(
        monkeypatch,
        {"backend": "nvidia_smi", "nvidia_smi_path": smi, "docker_lookup": False},
        expect="fail_json",
    )
    assert "cannot read" in result["msg"] and unreadable in result["msg"]
    assert "consumers" not in result


def test_no_process_list_at_all_fails_closed(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_consumers_info, "load_pynvml", lambda: None)
    smi = _fake_smi(
        tmp_path,
        f'case "$1" in --query-gpu*) echo "{GPU_LINE}";; *) echo "unknown error" >&2; exit 3;; esac\n',
    )
    result = run_gpu_module(
        monkeypatch,
        {"backend": "nvidia_smi", "nvidia_smi_path": smi, "docker_lookup": False},
        expect="fail_json",
    )
    assert "neither in --query-compute-apps" in result["msg"]


@pytest.mark.parametrize(
    ("failure", "kind", "rc"),
    [
        ("driver_unreachable", "driver_unreachable", 9),
        ("version_mismatch", "version_mismatch", 18),
        ("no_devices", "no_devices", 6),
        ("gpu_lost", "gpu_lost", 15),
        ("not_installed", "not_installed", 12),
    ],
)
def test_driver_failures_fail_with_driver_error(monkeypatch, lab_state, failure, kind, rc):
    lab_state(failure=failure)
    result = run_gpu_module(
        monkeypatch, {"backend": "nvidia_smi", "nvidia_smi_path": SIMULATOR}, expect="fail_json"
    )
    assert result["driver_error"]["kind"] == kind
    assert result["rc"] == rc
    assert result["cmd"][0] == SIMULATOR
    assert result["msg"].startswith(f"NVIDIA driver problem ({kind}): ")


def test_missing_binary_is_not_installed(monkeypatch, tmp_path):
    result = run_gpu_module(
        monkeypatch,
        {"backend": "nvidia_smi", "nvidia_smi_path": str(tmp_path / "nvidia-smi")},
        expect="fail_json",
    )
    assert result["driver_error"]["kind"] == "not_installed"


def test_nvml_backend_without_nvidia_ml_py(monkeypatch, lab_state):
    lab_state()
    monkeypatch.setattr(gpu_consumers_info, "load_pynvml", lambda: None)
    result = run_gpu_module(monkeypatch, {"backend": "nvml"}, expect="fail_json")
    assert "nvidia-ml-py" in result["msg"]


def _real_gpu():
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return False
    with open(binary, "rb") as handle:
        head = handle.read(4096).decode("latin-1")
    if "sparkops lab" in head:
        return False  # the lab's simulator
    done = subprocess.run([binary, "-L"], capture_output=True, text=True, check=False)
    return done.returncode == 0 and done.stdout.startswith("GPU ")


@pytest.mark.skipif(
    not _real_gpu(), reason="needs a real NVIDIA GPU (nvidia-smi -L works and is not the lab simulator)"
)
@pytest.mark.parametrize("backend", ["nvml", "nvidia_smi", "auto"])
def test_live_on_a_real_gpu(monkeypatch, backend):
    if backend == "nvml":
        pytest.importorskip("pynvml")
    result = run_gpu_module(monkeypatch, {"backend": backend})
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout
    assert [g["uuid"] for g in result["gpus"]] == [
        line.split("UUID: ")[1].rstrip(")") for line in listed.splitlines()
    ]
    assert result["driver_branch"] == int(result["driver_version"].split(".")[0])
    totals = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for gpu, total in zip(result["gpus"], totals, strict=True):
        assert gpu["memory_total_mib"] == (None if total == "[N/A]" else int(total))
        assert gpu["unified_memory"] is (total == "[N/A]")
    apps = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # compute processes nvidia-smi lists right after the module ran are among its consumers
    expected = {
        int(line.split(",")[0]): int(line.split(",")[1]) for line in apps.splitlines() if line.strip()
    }
    by_pid = {c["pid"]: c for c in result["consumers"]}
    assert set(expected) <= set(by_pid)
    for pid, used in expected.items():
        assert by_pid[pid]["used_memory_mib"] == used
