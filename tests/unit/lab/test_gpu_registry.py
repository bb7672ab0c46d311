"""The stand-in vLLM's ranks on the lab's simulated GPU (lab/vllm/vllm -> lab/nvidia-smi).

A serving rank is listed by ``--query-compute-apps`` and the table with the memory its
flags imply, in the real GB10 formats, until it exits: after a clean stop its record is
gone, and after SIGKILL its record stays on disk but a dead PID is never listed. The
stand-in runs without Ray (``uni``), as in test_vllm_standin.py.
"""
# The stand-in's fixtures (env, model_dir, serve) come from test_vllm_standin; a test
# naming one as its argument is not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._gpu_consumers import collect_gpu_consumers
from ansible_collections.sparkops.vllm.plugins.module_utils._nvidia_smi import (
    APPS_QUERY_FIELDS,
    parse_query_compute_apps,
    parse_table,
)
from test_vllm_standin import GIB, ROOT, TOTAL_KIB, env, model_dir, serve  # noqa: F401 - fixtures

SIMULATOR = ROOT / "lab" / "nvidia-smi"
MIB = 1 << 20
# The default capture sizes at max_num_seqs 256: 1, 2, 4, 8..248 by 8, 256..512 by 16.
CAPTURE_SIZES = 3 + 31 + 17


def footprint_mib(util: float = 0.9) -> int:
    """The budget (util x MemTotal) plus the CUDA graphs (lab/vllm/README.md), in MiB."""
    return int(util * TOTAL_KIB * 1024 + CAPTURE_SIZES * 3.45 / 67 * GIB) // MIB


def smi(env: dict, tmp_path: Path, *args: str) -> str:
    environ = dict(env, SPARKOPS_LAB_GPU_STATE=str(tmp_path / "no-state.json"))
    done = subprocess.run(
        [sys.executable, str(SIMULATOR), *args], capture_output=True, text=True, env=environ, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def compute_apps(env: dict, tmp_path: Path) -> list[tuple[int, int]]:
    out = smi(
        env, tmp_path, f"--query-compute-apps={','.join(APPS_QUERY_FIELDS)}", "--format=csv,noheader,nounits"
    )
    apps, warnings = parse_query_compute_apps(out)
    assert warnings == []
    return [(app["pid"], app["used_memory_mib"]) for app in apps]


def starttime(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]


def test_a_serving_rank_is_listed_with_its_memory_until_it_stops(serve, env, tmp_path):
    server = serve("--gpu-memory-utilization", "0.5")
    assert compute_apps(env, tmp_path) == [(server.proc.pid, footprint_mib(0.5))]
    table = parse_table(smi(env, tmp_path))
    assert table["gpus"][0]["unified_memory"] is True  # still "Not Supported", as on a GB10
    assert [(p["pid"], p["type"]) for p in table["processes"]] == [(server.proc.pid, "C")]
    record = Path(env["SPARKOPS_LAB_GPU_APPS_DIR"]) / f"{server.proc.pid}.json"
    assert json.loads(record.read_text())["used_memory_mib"] == footprint_mib(0.5)

    assert server.stop(signal.SIGTERM) == 0
    assert not record.exists()
    assert compute_apps(env, tmp_path) == []
    assert "No running processes found" in smi(env, tmp_path)


def test_a_killed_rank_is_not_listed(serve, env, tmp_path):
    server = serve("--kv-cache-memory-bytes", str(2 * GIB), "--enforce-eager")
    weights_activation_non_torch = 3 * GIB + (0.5 + 1.5 * 4096 / 8192) * GIB + 0.25 * GIB
    assert compute_apps(env, tmp_path) == [
        (server.proc.pid, int(weights_activation_non_torch + 2 * GIB) // MIB)
    ]
    server.stop(signal.SIGKILL)
    assert (Path(env["SPARKOPS_LAB_GPU_APPS_DIR"]) / f"{server.proc.pid}.json").exists()
    assert compute_apps(env, tmp_path) == []


def test_the_collector_sees_the_rank_as_a_consumer(serve, env, tmp_path):
    server = serve()
    environ = dict(env, SPARKOPS_LAB_GPU_STATE=str(tmp_path / "no-state.json"))

    def run(argv):
        done = subprocess.run(argv, capture_output=True, text=True, check=False, env=environ)
        return done.returncode, done.stdout, done.stderr

    result = collect_gpu_consumers("nvidia_smi", run=run, nvidia_smi=str(SIMULATOR), proc_root="/proc")
    assert [(c["pid"], c["used_memory_mib"], c["process_name"]) for c in result["consumers"]] == [
        (server.proc.pid, footprint_mib(), sys.executable)
    ]
    assert result["warnings"] == []


@pytest.mark.parametrize(
    ("record", "listed"),
    [
        ({"used_memory_mib": 4096}, True),
        ({"used_memory_mib": 4096, "starttime": "1"}, False),  # an earlier process with this PID
        ({"starttime": None}, False),  # no memory: not a record
        (["not", "a", "mapping"], False),
    ],
)
def test_records_count_only_for_the_process_that_wrote_them(env, tmp_path, record, listed):
    directory = Path(env["SPARKOPS_LAB_GPU_APPS_DIR"])
    directory.mkdir()
    pid = os.getpid()
    if isinstance(record, dict):
        record = {"starttime": starttime(pid)} | record
    (directory / f"{pid}.json").write_text(json.dumps(record))
    assert compute_apps(env, tmp_path) == ([(pid, 4096)] if listed else [])


def test_state_file_processes_and_records_are_both_listed(env, tmp_path):
    directory = Path(env["SPARKOPS_LAB_GPU_APPS_DIR"])
    directory.mkdir()
    pid = os.getpid()
    (directory / f"{pid}.json").write_text(json.dumps({"starttime": starttime(pid), "used_memory_mib": 512}))
    state = tmp_path / "state.json"
    state.write_text(
        json.dumps({"processes": [{"pid": 1, "process_name": "/sbin/init", "used_memory_mib": 7}]})
    )
    out = subprocess.run(
        [
            sys.executable,
            str(SIMULATOR),
            "--query-compute-apps=pid,used_memory",
            "--format=csv,noheader,nounits",
        ],
        capture_output=True,
        text=True,
        env=dict(env, SPARKOPS_LAB_GPU_STATE=str(state)),
        check=True,
    ).stdout
    assert out == f"1, 7\n{pid}, 512\n"


# --- utilization and power follow the ranks' activity ---------------------------------------


def power_utilization(env: dict, tmp_path: Path, *fmt: str, state: Path | None = None) -> str:
    environ = dict(env, SPARKOPS_LAB_GPU_STATE=str(state or tmp_path / "no-state.json"))
    return subprocess.run(
        [sys.executable, str(SIMULATOR), "--query-gpu=power.draw,utilization.gpu", *fmt],
        capture_output=True,
        text=True,
        env=environ,
        check=True,
    ).stdout


@pytest.mark.parametrize(
    ("generating", "expected"),
    [
        # idle: fixture 04's shape ("0 %, 11.17 W" on a real idle GB10)
        (False, {"nounits": "11.00, 0\n", "units": "11.00 W, 0 %\n", "table": ("11W /  N/A", " 0% ")}),
        (True, {"nounits": "34.00, 96\n", "units": "34.00 W, 96 %\n", "table": ("34W /  N/A", " 96% ")}),
    ],
)
def test_power_and_utilization_follow_a_generating_record(env, tmp_path, generating, expected):
    directory = Path(env["SPARKOPS_LAB_GPU_APPS_DIR"])
    directory.mkdir()
    pid = os.getpid()
    record = {"starttime": starttime(pid), "used_memory_mib": 512, "generating": generating}
    (directory / f"{pid}.json").write_text(json.dumps(record))
    assert power_utilization(env, tmp_path, "--format=csv,noheader,nounits") == expected["nounits"]
    assert power_utilization(env, tmp_path, "--format=csv,noheader") == expected["units"]
    row = next(line for line in smi(env, tmp_path).splitlines() if "W / " in line)
    assert all(cell in row for cell in expected["table"])


def test_a_dead_generating_record_leaves_the_gpu_idle(env, tmp_path):
    directory = Path(env["SPARKOPS_LAB_GPU_APPS_DIR"])
    directory.mkdir()
    pid = os.getpid()
    record = {"starttime": "1", "used_memory_mib": 512, "generating": True}  # an earlier process
    (directory / f"{pid}.json").write_text(json.dumps(record))
    assert power_utilization(env, tmp_path, "--format=csv,noheader,nounits") == "11.00, 0\n"


def test_state_file_processes_and_gpu_overrides_drive_the_activity(env, tmp_path):
    state = tmp_path / "state.json"
    gpu = {"index": 0, "uuid": "GPU-0", "power_w": 9.5, "busy_power_w": 80, "busy_utilization_pct": 71}
    process = {"pid": 1, "process_name": "/sbin/init", "used_memory_mib": 7}
    state.write_text(json.dumps({"gpus": [gpu], "processes": [process]}))
    assert power_utilization(env, tmp_path, "--format=csv,noheader,nounits", state=state) == "9.50, 0\n"
    state.write_text(json.dumps({"gpus": [gpu], "processes": [process | {"generating": True}]}))
    assert power_utilization(env, tmp_path, "--format=csv,noheader,nounits", state=state) == "80.00, 71\n"
