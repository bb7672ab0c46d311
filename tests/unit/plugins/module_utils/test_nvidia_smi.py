"""Tables of real and constructed nvidia-smi outputs for plugins/module_utils/_nvidia_smi.py."""

import re

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._nvidia_smi import (
    DriverError,
    NvidiaSmiParseError,
    detect_driver_error,
    driver_branch,
    parse_csv,
    parse_list,
    parse_mib,
    parse_query_compute_apps,
    parse_query_gpu,
    parse_table,
)
from conftest import FIXTURES

H200_UUID = "GPU-ebb217d5-fa0d-9ec4-c5f0-bb519b966f5b"


def real(name, start=None, stop=None):
    """A file of tests/fixtures/real/ without its source line, cut to the lines in [start, stop)."""
    path = next((FIXTURES / "real").glob(f"{name}_*.txt"))
    lines = path.read_text().splitlines()[1:]
    if start is not None:
        lines = lines[next(i for i, line in enumerate(lines) if start in line) + 1 :]
    if stop is not None:
        lines = lines[: next(i for i, line in enumerate(lines) if stop in line)]
    return "\n".join(lines) + "\n"


def capture(name):
    """A real_h200 capture: ``(output, exit status)`` without the source and command lines.

    The exit status is None for captures that did not record one.
    """
    lines = (FIXTURES / "real_h200" / name).read_text().splitlines()
    assert lines[0].startswith("# Source: captured on the project's lent NVIDIA H200 machine")
    assert lines[1].startswith("$ ")
    rc = re.fullmatch(r"rc=(\d+)", lines[-1])
    if rc is None:
        return "\n".join(lines[2:]) + "\n", None
    return "\n".join(lines[2:-1]) + "\n", int(rc.group(1))


def own(name):
    """One of our constructed nvidia_smi fixtures, without its description line."""
    lines = (FIXTURES / "nvidia_smi" / name).read_text().splitlines()
    assert lines[0].startswith("# Constructed")
    return "\n".join(lines[1:]) + "\n"


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("20998", 20998),
        ("20998 MiB", 20998),
        (" 84MiB ", 84),
        ("0 MiB", 0),
        ("[N/A]", None),
        ("N/A", None),
        ("[Not Supported]", None),
        ("Not Supported", None),
        ("[Insufficient Permissions]", None),
        ("[Not Found]", None),
        ("10707...", None),  # cut by the table: a prefix of a larger number, never 10707
        ("1070...", None),
        (None, None),
    ],
)
def test_parse_mib(cell, expected):
    assert parse_mib(cell) == expected


@pytest.mark.parametrize("cell", ["12 GiB", "abc", "-5"])
def test_parse_mib_rejects_garbage(cell):
    with pytest.raises(ValueError, match="not a MiB value"):
        parse_mib(cell)


@pytest.mark.parametrize(
    ("version", "branch"),
    [
        ("580.95.05", 580),
        ("580.159.04", 580),
        ("535.183.01", 535),
        ("610.43", 610),
        (None, None),
        ("x.1", None),
    ],
)
def test_driver_branch(version, branch):
    assert driver_branch(version) == branch


# -- --query-gpu ---------------------------------------------------------------------------------

H200_GPU = {
    "index": 0,
    "uuid": H200_UUID,
    "name": "NVIDIA H200",
    "driver_version": "580.159.04",
    "memory_total_mib": 143771,
    "unified_memory": False,
}


@pytest.mark.parametrize(
    ("fixture", "used"),
    [
        ("idle_query-gpu_csv.txt", 0),
        ("idle_query-gpu_csv_noheader_nounits.txt", 0),
        ("load_query-gpu_csv.txt", 21007),
        ("load_query-gpu_csv_noheader_nounits.txt", 21007),
    ],
)
def test_query_gpu_real_h200(fixture, used):
    text, rc = capture(fixture)
    assert rc == 0
    gpus, warnings = parse_query_gpu(text)
    assert gpus == [dict(H200_GPU, memory_used_mib=used)]
    assert warnings == []


def test_query_gpu_real_gb10_na_memory():
    # Fixture 03 asked for index,name,memory.total,memory.free with a header: [N/A] memory.
    rows, warnings = parse_csv(
        real("03", start="$ nvidia-smi"), ("index", "name", "memory.total", "memory.free")
    )
    assert rows == [{"index": "0", "name": "NVIDIA GB10", "memory.total": "[N/A]", "memory.free": "[N/A]"}]
    assert warnings == []
    fields = ("index", "name", "memory.total", "memory.used")
    gpus, _ = parse_query_gpu("0, NVIDIA GB10, [N/A], [N/A]\n", fields=fields)
    assert gpus[0]["memory_total_mib"] is None
    assert gpus[0]["memory_used_mib"] is None
    assert gpus[0]["unified_memory"] is True


def test_query_gpu_real_gb10_units_header_fixture_04():
    fields = (
        "memory.total",
        "memory.used",
        "memory.free",
        "utilization.gpu",
        "power.draw",
        "temperature.gpu",
    )
    rows, warnings = parse_csv(real("04", start="$ nvidia-smi --query-gpu"), fields)
    assert warnings == []
    assert rows == [
        {
            "memory.total": "[N/A]",
            "memory.used": "[N/A]",
            "memory.free": "[N/A]",
            "utilization.gpu": "0 %",
            "power.draw": "11.17 W",
            "temperature.gpu": "35",
        }
    ]


def test_query_gpu_real_h200_class_8_gpus_with_units_fixture_62():
    text = real("62", start="## Before", stop="gpu_uuid, pid")
    gpus, warnings = parse_query_gpu(
        text, fields=("index", "uuid", "memory.used", "memory.total", "utilization.gpu")
    )
    assert warnings == []
    assert [(g["index"], g["memory_used_mib"], g["memory_total_mib"]) for g in gpus] == [
        (0, 130013, 143771),
        (1, 130053, 143771),
        (2, 105851, 143771),
        (3, 129993, 143771),
        (4, 106091, 143771),
        (5, 105851, 143771),
        (6, 106139, 143771),
        (7, 58071, 143771),
    ]
    assert gpus[7]["uuid"] == "GPU-28780eb0-24d5-1f13-59b8-ae5c23617a72"
    assert not any(g["unified_memory"] for g in gpus)


def test_query_gpu_odd_cells():
    gpus, warnings = parse_query_gpu(own("query-gpu_odd_cells.csv"))
    assert [(g["index"], g["memory_total_mib"], g["memory_used_mib"], g["unified_memory"]) for g in gpus] == [
        (0, None, None, True),
        (1, None, None, True),
        (2, None, None, False),  # no permission is not "no framebuffer"
        (3, 143771, 0, False),
    ]
    assert len(warnings) == 1
    assert "GPU-broken" in warnings[0]


# -- --query-compute-apps ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("idle_query-compute-apps_csv.txt", []),
        ("idle_query-compute-apps_csv_noheader_nounits.txt", []),
        (
            "load_query-compute-apps_csv.txt",
            [
                {
                    "pid": 453,
                    "process_name": "python3",
                    "used_memory_mib": 20998,
                    "gpu_uuid": H200_UUID,
                    "type": "C",
                }
            ],
        ),
        (
            "load_query-compute-apps_csv_noheader_nounits.txt",
            [
                {
                    "pid": 453,
                    "process_name": "python3",
                    "used_memory_mib": 20998,
                    "gpu_uuid": H200_UUID,
                    "type": "C",
                }
            ],
        ),
    ],
)
def test_query_compute_apps_real_h200(fixture, expected):
    text, rc = capture(fixture)
    assert rc == 0
    assert parse_query_compute_apps(text) == (expected, [])


def test_query_compute_apps_real_gb10_fixture_05():
    # The reporter elided the UUID as "GPU-..."; the field order differs from ours.
    fields = ("gpu_uuid", "pid", "process_name", "used_memory")
    apps, warnings = parse_query_compute_apps(real("05", start="--query-compute-apps"), fields=fields)
    assert warnings == []
    assert apps == [
        {
            "pid": 114687,
            "process_name": "/usr/local/bin/python",
            "used_memory_mib": 19135,
            "gpu_uuid": "GPU-...",
            "type": "C",
        }
    ]


def test_query_compute_apps_real_not_found_fixture_62():
    text = real("62", start="## After")
    text = text[text.index("gpu_uuid, pid") : text.index("# gpu ")]
    fields = ("gpu_uuid", "pid", "process_name", "used_memory")
    apps, warnings = parse_query_compute_apps(text, fields=fields)
    assert warnings == []
    assert [(a["pid"], a["process_name"], a["used_memory_mib"]) for a in apps] == [
        (1328667, "/usr/local/bin/python3.10", 130004),
        (1328668, "/usr/local/bin/python3.10", 130044),
        (1328669, "/usr/local/bin/python3.10", 129984),
        (1758887, None, 58060),  # "[Not Found]": a PID of another namespace
    ]


def test_query_compute_apps_odd_cells():
    apps, warnings = parse_query_compute_apps(own("query-compute-apps_odd_cells.csv"))
    assert [(a["pid"], a["process_name"], a["used_memory_mib"]) for a in apps] == [
        (114687, "/usr/local/bin/python", 19135),
        (2210, "/opt/app/run, with, commas", 512),
        (1425258, "python3", None),  # "10707..." is never 10707
        (1758887, None, None),
    ]
    assert len(warnings) == 1
    assert "notapid" in warnings[0]


# -- the table -----------------------------------------------------------------------------------


def _procs(table):
    return [
        (p["gpu_index"], p["pid"], p["type"], p["process_name"], p["used_memory_mib"])
        for p in table["processes"]
    ]


def test_table_real_gb10_fixture_01():
    table = parse_table(real("01"))
    assert (table["smi_version"], table["driver_version"], table["cuda_version"]) == (
        "580.95.05",
        "580.95.05",
        "13.0",
    )
    assert table["gpus"] == [
        {
            "index": 0,
            "name": "NVIDIA GB10",
            "pci_bus_id": "0000000F:01:00.0",
            "memory_used_mib": None,
            "memory_total_mib": None,
            "unified_memory": True,
            "memory_usage_cell": "Not Supported",
        }
    ]
    assert _procs(table) == [
        (0, 4174, "G", "/usr/lib/xorg/Xorg", 84),
        (0, 4399, "G", "/usr/bin/gnome-shell", 125),
        (0, 4761, "G", ".../7182/usr/lib/firefox/firefox", 273),
    ]
    assert [p["process_name_truncated"] for p in table["processes"]] == [False, False, True]
    assert table["warnings"] == []


def test_table_real_gh200_fixture_07_no_processes():
    table = parse_table(real("07", start="--- nvidia-smi"))
    assert table["driver_version"] == "570.124.06"
    assert table["cuda_version"] == "12.8"
    assert [(g["index"], g["name"], g["memory_used_mib"], g["memory_total_mib"]) for g in table["gpus"]] == [
        (0, "NVIDIA GH200 480GB", 1, 97871)
    ]
    assert table["gpus"][0]["unified_memory"] is False
    assert table["processes"] == []
    assert table["warnings"] == []


@pytest.mark.parametrize(
    ("fixture", "used", "processes"),
    [
        ("idle_nvidia-smi.txt", 0, []),
        ("load_nvidia-smi.txt", 21007, [(0, 453, "C", "python3", 20998)]),
    ],
)
def test_table_real_h200(fixture, used, processes):
    text, rc = capture(fixture)
    assert rc == 0
    table = parse_table(text)
    assert table["driver_version"] == "580.159.04"
    assert [
        (g["name"], g["pci_bus_id"], g["memory_used_mib"], g["memory_total_mib"]) for g in table["gpus"]
    ] == [("NVIDIA H200", "00000000:00:06.0", used, 143771)]
    assert _procs(table) == processes
    assert table["warnings"] == []


def test_table_535_narrow_pid_truncations():
    table = parse_table(own("table_535_narrow_pid_truncated.txt"))
    assert table["driver_version"] == "535.183.01"
    assert [(g["index"], g["memory_used_mib"], g["memory_total_mib"]) for g in table["gpus"]] == [
        (0, 79321, 81559),
        (1, 107093, 143771),
    ]
    assert _procs(table) == [
        (0, 48211, "C", "...niconda3/envs/vllm/bin/python3.10", 79310),
        (1, 1425258, "C", "python3", None),
    ]


def test_table_610_kmd_header_and_c_plus_g():
    table = parse_table(own("table_610_kmd_version.txt"))
    assert (table["smi_version"], table["driver_version"], table["cuda_version"]) == (
        "610.43.02",
        "610.43.02",
        "13.3",
    )
    assert table["gpus"][0]["unified_memory"] is True
    assert _procs(table) == [
        (0, 2210, "C+G", "/usr/bin/python3", 12290),
        (0, 4174, "G", "/usr/lib/xorg/Xorg", 84),
    ]


def test_table_empty_panel():
    table = parse_table(own("table_empty_panel_in_container.txt"))
    assert table["gpus"][0]["memory_used_mib"] == 61234
    assert table["processes"] == []
    assert table["warnings"] == []


def test_table_garbled_process_line_is_unreadable_not_a_warning():
    # The caller fails closed on it (a line it cannot read may be a consumer).
    table = parse_table(own("table_garbled_process_line.txt"))
    assert _procs(table) == [(0, 4174, "G", "/usr/lib/xorg/Xorg", 84)]
    assert table["warnings"] == []
    assert len(table["unreadable"]) == 1
    assert "garbage here" in table["unreadable"][0]


def test_table_without_header_is_an_error():
    with pytest.raises(NvidiaSmiParseError):
        parse_table("something else entirely\n")


def test_list_real_h200():
    text, _ = capture("load_nvidia-smi_-L.txt")
    assert parse_list(text) == [{"index": 0, "name": "NVIDIA H200", "uuid": H200_UUID}]


# -- driver failures -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "message"),
    [
        (
            real("50", start="$ nvidia-smi"),
            "driver_unreachable",
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.",
        ),
        (
            real("51a", start="nvidia-smi"),
            "version_mismatch",
            "Failed to initialize NVML: Driver/library version mismatch",
        ),
        (real("52a", start="# nvidia-smi", stop="# meanwhile"), "no_devices", "No devices were found"),
        (
            own("gpu_lost.txt"),
            "gpu_lost",
            "Unable to determine the device handle for GPU0000:01:00.0: Unknown Error",
        ),
        (
            "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system.\n",
            "not_installed",
            "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system.",
        ),
        (
            "Failed to initialize NVML: Unknown Error\n",
            "driver_unreachable",
            "Failed to initialize NVML: Unknown Error",
        ),
    ],
)
def test_detect_driver_error(text, kind, message):
    assert detect_driver_error(text) == {"kind": kind, "message": message}


@pytest.mark.parametrize("fixture", ["load_nvidia-smi.txt", "load_query-compute-apps_csv.txt", "version.txt"])
def test_healthy_output_is_no_driver_error(fixture):
    assert detect_driver_error(capture(fixture)[0]) is None


def test_real_h200_bad_index_says_no_devices():
    text, rc = capture("error_bad_index.txt")
    assert rc == 6
    assert detect_driver_error(text)["kind"] == "no_devices"


def test_driver_error_summary_says_what_to_do():
    error = DriverError("version_mismatch", "Failed to initialize NVML: Driver/library version mismatch")
    assert error.as_dict() == {
        "kind": "version_mismatch",
        "message": "Failed to initialize NVML: Driver/library version mismatch",
    }
    assert "reboot" in error.summary()
