"""lab/nvidia-smi, the lab's simulated GB10: real formats, state file, failures; our parsers read it."""

import json
import os
import subprocess
import sys

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._gpu_consumers import collect_gpu_consumers
from ansible_collections.sparkops.vllm.plugins.module_utils._nvidia_smi import (
    APPS_QUERY_FIELDS,
    GPU_QUERY_FIELDS,
    detect_driver_error,
    parse_list,
    parse_query_compute_apps,
    parse_query_gpu,
    parse_table,
)
from conftest import ROOT
from test_nvidia_smi import capture, real

SIMULATOR = ROOT / "lab" / "nvidia-smi"
UUID = "GPU-5c1e3d0a-1b2c-4d5e-8f90-0123456789ab"
ALIVE = os.getpid()  # a PID that exists while the test runs
DEAD = 2**22 + 1  # above the kernel's pid_max ceiling: never a live PID


def write_state(tmp_path, **state):
    path = tmp_path / "gpu-state.json"
    path.write_text(json.dumps(state))
    return path


def smi(state_path, *args):
    env = dict(os.environ, SPARKOPS_LAB_GPU_STATE=str(state_path))
    done = subprocess.run(
        [sys.executable, str(SIMULATOR), *args], capture_output=True, text=True, env=env, check=False
    )
    return done.returncode, done.stdout


@pytest.fixture
def busy(tmp_path):
    """One GB10 where this test's own PID holds 12 GiB, plus a graphics process and a dead one."""
    return write_state(
        tmp_path,
        processes=[
            {
                "pid": ALIVE,
                "process_name": "/usr/bin/python3",
                "used_memory_mib": 12288,
                "type": "C",
                "gpu_index": 0,
            },
            {
                "pid": ALIVE,
                "process_name": "/usr/lib/xorg/Xorg",
                "used_memory_mib": 84,
                "type": "G",
                "gpu_index": 0,
            },
            {
                "pid": DEAD,
                "process_name": "/usr/bin/python3",
                "used_memory_mib": 4096,
                "type": "C",
                "gpu_index": 0,
            },
        ],
    )


def test_is_executable_and_stdlib_only():
    assert os.access(SIMULATOR, os.X_OK)
    first = SIMULATOR.read_text().splitlines()[0]
    assert first == "#!/usr/bin/env python3"


def test_missing_state_file_is_one_idle_gb10(tmp_path):
    rc, out = smi(
        tmp_path / "absent.json", "--query-gpu=index,name,driver_version,memory.total", "--format=csv"
    )
    assert rc == 0
    assert out == "index, name, driver_version, memory.total [MiB]\n0, NVIDIA GB10, 580.95.05, [N/A]\n"
    rc, out = smi(tmp_path / "absent.json")
    table = parse_table(out)
    assert (table["driver_version"], table["cuda_version"], table["processes"]) == ("580.95.05", "13.0", [])


def test_table_matches_the_real_gb10_layout(busy):
    rc, out = smi(busy)
    assert rc == 0
    simulated = out.splitlines()
    reference = real("01").splitlines()[1:]  # without the prompt line
    # Everything but the clock, the temperature/power/utilisation row and the process rows is identical.
    assert simulated[1:8] == reference[1:8]
    assert simulated[8] == reference[8]
    assert simulated[9].split("|")[2] == reference[9].split("|")[2] == " Not Supported          "
    assert simulated[10:18] == reference[10:18]
    assert all(len(line) == 91 for line in simulated[1:] if line)


def test_process_rows_are_the_real_gb10_rows(tmp_path):
    # Fixture 01's three graphics processes, declared in a state file, print byte for byte.
    state = write_state(
        tmp_path,
        keep_dead=True,
        gpus=[
            {
                "index": 0,
                "name": "NVIDIA GB10",
                "uuid": UUID,
                "pci_bus_id": "0000000F:01:00.0",
                "utilization_pct": 10,
            }
        ],
        processes=[
            {"pid": 4174, "process_name": "/usr/lib/xorg/Xorg", "used_memory_mib": 84, "type": "G"},
            {"pid": 4399, "process_name": "/usr/bin/gnome-shell", "used_memory_mib": 125, "type": "G"},
            {
                "pid": 4761,
                "process_name": "/snap/firefox/7182/usr/lib/firefox/firefox",
                "used_memory_mib": 273,
                "type": "G",
            },
        ],
    )
    simulated = smi(state)[1].splitlines()
    reference = real("01").splitlines()[1:]
    assert simulated[1:] == reference[1:]


def test_table_is_parsed_by_our_parser(busy):
    table = parse_table(smi(busy)[1])
    assert table["gpus"][0]["unified_memory"] is True
    assert table["gpus"][0]["memory_total_mib"] is None
    assert [(p["pid"], p["type"], p["process_name"], p["used_memory_mib"]) for p in table["processes"]] == [
        (ALIVE, "C", "/usr/bin/python3", 12288),
        (ALIVE, "G", "/usr/lib/xorg/Xorg", 84),
    ]
    assert table["warnings"] == []


def test_table_truncates_like_a_real_driver(tmp_path):
    state = write_state(
        tmp_path,
        processes=[
            {
                "pid": ALIVE,
                "process_name": "/snap/firefox/7182/usr/lib/firefox/firefox",
                "used_memory_mib": 107070,
                "gpu_index": 0,
            }
        ],
    )
    out = smi(state)[1]
    assert "|    0   N/A  N/A" in out
    assert ".../7182/usr/lib/firefox/firefox      10707... |" in out
    process = parse_table(out)["processes"][0]
    assert (process["process_name_truncated"], process["used_memory_mib"]) == (True, None)


@pytest.mark.parametrize(
    ("options", "header", "unit"),
    [
        ("csv", True, True),
        ("csv,noheader", False, True),
        ("csv,nounits", True, False),
        ("csv,noheader,nounits", False, False),
    ],
)
def test_query_formats_are_parsed_by_our_parser(busy, options, header, unit):
    rc, gpu_out = smi(busy, f"--query-gpu={','.join(GPU_QUERY_FIELDS)}", f"--format={options}")
    assert rc == 0
    assert gpu_out.startswith("index, uuid, name") is header
    gpus, warnings = parse_query_gpu(gpu_out)
    assert warnings == []
    assert [(g["uuid"], g["memory_total_mib"], g["unified_memory"]) for g in gpus] == [(UUID, None, True)]

    rc, apps_out = smi(busy, f"--query-compute-apps={','.join(APPS_QUERY_FIELDS)}", f"--format={options}")
    assert rc == 0
    assert apps_out.startswith("pid, process_name, used_gpu_memory [MiB], gpu_uuid\n") is header
    assert (" MiB," in apps_out) is unit
    apps, warnings = parse_query_compute_apps(apps_out)
    assert warnings == []
    # graphics-only processes are no compute apps; the dead PID is gone
    assert [(a["pid"], a["used_memory_mib"]) for a in apps] == [(ALIVE, 12288)]


def test_headers_match_the_real_h200_driver(busy):
    real_gpu, _ = capture("idle_query-gpu_csv.txt")
    real_apps, _ = capture("idle_query-compute-apps_csv.txt")
    gpu_out = smi(busy, f"--query-gpu={','.join(GPU_QUERY_FIELDS)}", "--format=csv")[1]
    apps_out = smi(busy, f"--query-compute-apps={','.join(APPS_QUERY_FIELDS)}", "--format=csv")[1]
    assert gpu_out.splitlines()[0] == real_gpu.splitlines()[0]
    assert apps_out.splitlines()[0] == real_apps.splitlines()[0]


def test_keep_dead(tmp_path):
    processes = [{"pid": DEAD, "process_name": "python3", "used_memory_mib": 1024, "gpu_index": 0}]
    dropped = write_state(tmp_path, processes=processes)
    assert smi(dropped, "--query-compute-apps=pid", "--format=csv,noheader")[1] == ""
    kept = write_state(tmp_path, processes=processes, keep_dead=True)
    assert smi(kept, "--query-compute-apps=pid", "--format=csv,noheader")[1] == f"{DEAD}\n"


def test_list_version_and_index(tmp_path):
    state = write_state(
        tmp_path,
        gpus=[
            {"index": 0, "name": "NVIDIA GB10", "uuid": UUID, "pci_bus_id": "0000000F:01:00.0"},
            {"index": 1, "name": "NVIDIA GB10", "uuid": "GPU-11111111-2222-3333-4444-555555555555"},
        ],
    )
    assert parse_list(smi(state, "-L")[1]) == [
        {"index": 0, "name": "NVIDIA GB10", "uuid": UUID},
        {"index": 1, "name": "NVIDIA GB10", "uuid": "GPU-11111111-2222-3333-4444-555555555555"},
    ]
    assert smi(state, "-i", "1", "--query-gpu=index", "--format=csv,noheader") == (0, "1\n")
    assert smi(state, "--id=0", "-L")[1].startswith("GPU 0: ")
    real_version, _ = capture("version.txt")
    out = smi(state, "--version")[1]
    assert [line.split(":")[0] for line in out.splitlines()] == [
        line.split(":")[0] for line in real_version.splitlines()
    ]
    assert "NVML version        : 580.95\n" in out


@pytest.mark.parametrize(
    ("args", "fixture"),
    [
        (("--bogus-flag",), "error_unknown_option.txt"),
        (("--query-gpu=bogus", "--format=csv"), "error_invalid_field.txt"),
        (("-i", "7"), "error_bad_index.txt"),
    ],
)
def test_usage_errors_like_the_real_driver(tmp_path, args, fixture):
    expected_out, expected_rc = capture(fixture)
    assert smi(tmp_path / "absent.json", *args) == (
        expected_rc,
        expected_out.rstrip("\n") + "\n" * (1 + expected_out.count("\n\n")),
    )


def test_query_without_format_is_csv_with_header(tmp_path):
    expected, rc = capture("query_without_format.txt")
    assert smi(tmp_path / "absent.json", "--query-gpu=index") == (rc, expected)


@pytest.mark.parametrize(
    ("failure", "rc", "kind", "fixture"),
    [
        ("driver_unreachable", 9, "driver_unreachable", "50"),
        ("version_mismatch", 18, "version_mismatch", "51a"),
        ("no_devices", 6, "no_devices", "52a"),
        ("gpu_lost", 15, "gpu_lost", None),
        ("not_installed", 12, "not_installed", None),
    ],
)
def test_failures_print_the_real_messages(tmp_path, failure, rc, kind, fixture):
    state = write_state(tmp_path, failure=failure)
    for args in ((), ("-L",), (f"--query-gpu={','.join(GPU_QUERY_FIELDS)}", "--format=csv,noheader,nounits")):
        code, out = smi(state, *args)
        assert code == rc
        assert detect_driver_error(out)["kind"] == kind
        if fixture is not None:
            assert out.splitlines()[0] in real(fixture).splitlines()


def test_unknown_failure_in_state_is_an_error(tmp_path):
    rc, out = smi(write_state(tmp_path, failure="melted"))
    assert rc == 255
    assert "unknown failure 'melted'" in out


def test_collector_reads_the_simulator_end_to_end(busy, tmp_path):
    env_state = str(busy)

    def run(argv):
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            check=False,
            env=dict(os.environ, SPARKOPS_LAB_GPU_STATE=env_state),
        )
        return done.returncode, done.stdout, done.stderr

    result = collect_gpu_consumers("nvidia_smi", run=run, nvidia_smi=str(SIMULATOR), proc_root="/proc")
    assert result["driver_branch"] == 580
    assert result["gpus"][0]["unified_memory"] is True
    mine = [c for c in result["consumers"] if c["pid"] == ALIVE]
    # The same PID as compute (CSV + table) and graphics (table) makes one C+G consumer.
    assert [(c["type"], c["used_memory_mib"], c["gpu_uuid"]) for c in mine] == [("C+G", 12288, UUID)]
    assert result["warnings"] == []
