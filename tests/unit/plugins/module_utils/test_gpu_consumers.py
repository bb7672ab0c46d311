"""plugins/module_utils/_gpu_consumers.py: merging CSV, table, NVML, /proc and Docker."""

import json
from functools import partial
from types import SimpleNamespace

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._containers import DockerLookup
from ansible_collections.sparkops.vllm.plugins.module_utils._gpu_consumers import (
    APPS_QUERY_ARGS,
    GPU_QUERY_ARGS,
    NvidiaSmiFailed,
    NvmlUnavailable,
    collect_gpu_consumers,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._nvidia_smi import (
    DriverError,
    parse_query_compute_apps,
    parse_table,
)
from test_containers import CID, INSPECT, FakeApi, make_proc
from test_nvidia_smi import H200_UUID, capture, own, real
from test_nvml import DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND, FakeNvml, fake_from_dump

SMI = "/usr/bin/nvidia-smi"
GB10_UUID = "GPU-5c1e3d0a-1b2c-4d5e-8f90-0123456789ab"
# --query-gpu for the two GPUs of tests/fixtures/nvidia_smi/table_535_narrow_pid_truncated.txt
H100_H200_CSV = (
    "0, GPU-1, NVIDIA H100 80GB HBM3, 535.183.01, 81559, 79321\n"
    "1, GPU-2, NVIDIA H200, 535.183.01, 143771, 107093\n"
)


class FakeSmi:
    """nvidia-smi answering each argv from a table; records the calls."""

    def __init__(self, gpu=(0, ""), apps=(0, ""), table=(0, ""), listing=(0, "")):
        self.answers = {
            (SMI, *GPU_QUERY_ARGS): gpu,
            (SMI, *APPS_QUERY_ARGS): apps,
            (SMI,): table,
            (SMI, "-L"): listing,
        }
        self.calls = []

    def __call__(self, argv):
        self.calls.append(argv)
        rc, out = self.answers[tuple(argv)]
        return rc, out, ""


def h200_smi(state):
    return FakeSmi(
        gpu=tuple(reversed(capture(f"{state}_query-gpu_csv_noheader_nounits.txt"))),
        apps=tuple(reversed(capture(f"{state}_query-compute-apps_csv_noheader_nounits.txt"))),
        table=tuple(reversed(capture(f"{state}_nvidia-smi.txt"))),
        listing=tuple(reversed(capture(f"{state}_nvidia-smi_-L.txt"))),
    )


def gb10_smi():
    """A DGX Spark as fixtures 01/03/05 show it: [N/A] memory, a compute app, graphics in the table."""
    return FakeSmi(
        gpu=(0, f"0, {GB10_UUID}, NVIDIA GB10, 580.95.05, [N/A], [N/A]\n"),
        apps=(0, f"114687, /usr/local/bin/python, 19135, {GB10_UUID}\n"),
        table=(0, real("01")),
    )


def test_real_h200_20gib_process_via_cli(tmp_path):
    smi = h200_smi("load")
    result = collect_gpu_consumers("nvidia_smi", run=smi, nvidia_smi=SMI, proc_root=str(tmp_path))
    assert result == {
        "backend_used": "nvidia_smi",
        "nvml_unavailable": None,
        "driver_version": "580.159.04",
        "driver_branch": 580,
        "cuda_version": "13.0",
        "gpus": [
            {
                "index": 0,
                "uuid": H200_UUID,
                "name": "NVIDIA H200",
                "driver_version": "580.159.04",
                "memory_total_mib": 143771,
                "memory_used_mib": 21007,
                "unified_memory": False,
            }
        ],
        "consumers": [
            {
                "pid": 453,
                "process_name": "python3",
                "used_memory_mib": 20998,
                "gpu_uuid": H200_UUID,
                "gpu_index": 0,
                "type": "C",
                "container": None,
            }
        ],
        "warnings": [],
    }
    assert all("LC_ALL" not in " ".join(call) for call in smi.calls)  # argv lists, env set by the module


def test_real_h200_idle_via_cli(tmp_path):
    result = collect_gpu_consumers(
        "nvidia_smi", run=h200_smi("idle"), nvidia_smi=SMI, proc_root=str(tmp_path)
    )
    assert result["consumers"] == []
    assert result["gpus"][0]["memory_used_mib"] == 0
    assert result["warnings"] == []


def test_real_h200_20gib_process_via_nvml(tmp_path):
    result = collect_gpu_consumers(
        "auto", run=FakeSmi(), nvidia_smi=SMI, nvml=fake_from_dump("load"), proc_root=str(tmp_path)
    )
    assert result["backend_used"] == "nvml"
    assert [(c["pid"], c["process_name"], c["used_memory_mib"], c["type"]) for c in result["consumers"]] == [
        (453, "python3", 20998, "C")
    ]


def test_gb10_cli_merges_graphics_from_the_table_and_names_containers(tmp_path):
    make_proc(
        tmp_path, 114687, cgroup=f"0::/system.slice/docker-{CID}.scope\n", cmdline=b"/usr/local/bin/python\0"
    )
    make_proc(
        tmp_path, 4761, cgroup="0::/user.slice\n", cmdline=b"/snap/firefox/7182/usr/lib/firefox/firefox\0"
    )
    lookup = DockerLookup(client_factory=partial(SimpleNamespace, api=FakeApi({CID: INSPECT})))
    result = collect_gpu_consumers(
        "nvidia_smi", run=gb10_smi(), nvidia_smi=SMI, proc_root=str(tmp_path), docker_lookup=lookup
    )
    assert result["gpus"] == [
        {
            "index": 0,
            "uuid": GB10_UUID,
            "name": "NVIDIA GB10",
            "driver_version": "580.95.05",
            "memory_total_mib": None,
            "memory_used_mib": None,
            "unified_memory": True,
        }
    ]
    rows = [
        (c["pid"], c["process_name"], c["used_memory_mib"], c["type"], c["gpu_uuid"])
        for c in result["consumers"]
    ]
    assert rows == [
        (114687, "/usr/local/bin/python", 19135, "C", GB10_UUID),
        (4174, "/usr/lib/xorg/Xorg", 84, "G", GB10_UUID),
        (4399, "/usr/bin/gnome-shell", 125, "G", GB10_UUID),
        # cut on the left in the table; /proc gives the whole path back
        (4761, "/snap/firefox/7182/usr/lib/firefox/firefox", 273, "G", GB10_UUID),
    ]
    assert result["consumers"][0]["container"]["name"] == "embeddings"
    assert [c["container"] for c in result["consumers"][1:]] == [None, None, None]
    assert result["driver_branch"] == 580


def test_truncated_table_memory_is_not_a_number(tmp_path):
    smi = FakeSmi(
        gpu=(0, H100_H200_CSV),
        apps=(0, ""),  # the CSV missed them (they started between the two calls)
        table=(0, own("table_535_narrow_pid_truncated.txt")),
    )
    result = collect_gpu_consumers("nvidia_smi", run=smi, nvidia_smi=SMI, proc_root=str(tmp_path))
    rows = [(c["pid"], c["process_name"], c["used_memory_mib"], c["gpu_uuid"]) for c in result["consumers"]]
    assert rows == [
        (48211, "...niconda3/envs/vllm/bin/python3.10", 79310, "GPU-1"),
        (1425258, "python3", None, "GPU-2"),
    ]


def test_csv_memory_wins_over_a_truncated_table_cell(tmp_path):
    smi = FakeSmi(
        gpu=(0, H100_H200_CSV),
        apps=(0, "1425258, python3, 107070, GPU-2\n"),
        table=(0, own("table_535_narrow_pid_truncated.txt")),
    )
    result = collect_gpu_consumers("nvidia_smi", run=smi, nvidia_smi=SMI, proc_root=str(tmp_path))
    by_pid = {c["pid"]: c for c in result["consumers"]}
    assert by_pid[1425258]["used_memory_mib"] == 107070


def test_c_plus_g_from_the_610_table(tmp_path):
    smi = FakeSmi(
        gpu=(0, f"0, {GB10_UUID}, NVIDIA GB10, 610.43.02, [N/A], [N/A]\n"),
        apps=(0, f"2210, /usr/bin/python3, 12290, {GB10_UUID}\n"),
        table=(0, own("table_610_kmd_version.txt")),
    )
    result = collect_gpu_consumers("nvidia_smi", run=smi, nvidia_smi=SMI, proc_root=str(tmp_path))
    assert [(c["pid"], c["type"]) for c in result["consumers"]] == [(2210, "C+G"), (4174, "G")]
    assert result["driver_branch"] == 610
    assert result["cuda_version"] == "13.3"


def test_empty_panel_with_used_memory_warns(tmp_path):
    smi = FakeSmi(
        gpu=(0, "0, GPU-1, NVIDIA H200, 580.159.04, 143771, 61234\n"),
        table=(0, own("table_empty_panel_in_container.txt")),
    )
    result = collect_gpu_consumers("nvidia_smi", run=smi, nvidia_smi=SMI, proc_root=str(tmp_path))
    assert result["consumers"] == []
    assert len(result["warnings"]) == 1
    assert "61234 MiB in use but no process is listed" in result["warnings"][0]


def test_failed_csv_query_falls_back_to_the_table(tmp_path):
    smi = FakeSmi(
        gpu=(2, 'Field "memory.used" is not a valid field to query.\n'),
        apps=(2, 'Field "used_memory" is not a valid field to query.\n'),
        table=(0, real("01")),
        listing=(0, f"GPU 0: NVIDIA GB10 (UUID: {GB10_UUID})\n"),
    )
    result = collect_gpu_consumers("nvidia_smi", run=smi, nvidia_smi=SMI, proc_root=str(tmp_path))
    assert result["gpus"][0]["uuid"] == GB10_UUID
    assert result["gpus"][0]["unified_memory"] is True
    assert [c["pid"] for c in result["consumers"]] == [4174, 4399, 4761]
    assert len(result["warnings"]) == 2


@pytest.mark.parametrize(
    ("rc", "text", "kind"),
    [
        (9, real("50", start="$ nvidia-smi"), "driver_unreachable"),
        (18, real("51a", start="nvidia-smi"), "version_mismatch"),
        (6, real("52a", start="# nvidia-smi", stop="# meanwhile"), "no_devices"),
        (15, own("gpu_lost.txt"), "gpu_lost"),
    ],
)
def test_driver_failures_raise_driver_error(tmp_path, rc, text, kind):
    smi = FakeSmi(gpu=(rc, text), apps=(rc, text), table=(rc, text), listing=(rc, text))
    with pytest.raises(DriverError) as caught:
        collect_gpu_consumers("nvidia_smi", run=smi, nvidia_smi=SMI, proc_root=str(tmp_path))
    assert caught.value.kind == kind
    assert caught.value.details["rc"] == rc
    assert caught.value.details["cmd"] == [SMI, *GPU_QUERY_ARGS]


def test_missing_nvidia_smi_is_not_installed():
    with pytest.raises(DriverError) as caught:
        collect_gpu_consumers("nvidia_smi", run=FakeSmi(), nvidia_smi=None)
    assert caught.value.kind == "not_installed"


def test_unknown_failure_is_reported_with_the_command(tmp_path):
    smi = FakeSmi(gpu=(0, ""), table=(255, "Segmentation fault\n"))
    with pytest.raises(NvidiaSmiFailed) as caught:
        collect_gpu_consumers("nvidia_smi", run=smi, nvidia_smi=SMI, proc_root=str(tmp_path))
    assert caught.value.rc == 255
    assert caught.value.cmd == [SMI]
    assert "Segmentation fault" in str(caught.value)


def test_unreadable_table_with_no_gpu_query_fails(tmp_path):
    smi = FakeSmi(gpu=(0, ""), table=(0, "nothing like a table\n"))
    with pytest.raises(NvidiaSmiFailed, match="no table it can read"):
        collect_gpu_consumers("nvidia_smi", run=smi, nvidia_smi=SMI, proc_root=str(tmp_path))


def test_table_failure_is_a_warning_when_the_query_worked(tmp_path):
    smi = FakeSmi(
        gpu=(0, "0, GPU-1, NVIDIA H200, 580.159.04, 143771, 0\n"), table=(255, "Segmentation fault\n")
    )
    result = collect_gpu_consumers("nvidia_smi", run=smi, nvidia_smi=SMI, proc_root=str(tmp_path))
    assert result["gpus"][0]["uuid"] == "GPU-1"
    assert result["cuda_version"] is None
    assert ["graphics processes unknown" in w for w in result["warnings"]] == [True]


def test_auto_falls_back_to_cli_when_libnvidia_ml_is_missing(tmp_path):
    nvml = FakeNvml([], fail={"nvmlInit": LIBRARY_NOT_FOUND})
    result = collect_gpu_consumers(
        "auto", run=h200_smi("load"), nvidia_smi=SMI, nvml=nvml, proc_root=str(tmp_path)
    )
    assert result["backend_used"] == "nvidia_smi"
    assert result["consumers"][0]["used_memory_mib"] == 20998
    assert result["nvml_unavailable"] == "NVML initialisation failed: FakeNVMLError: NVML error 12"
    assert result["warnings"] == []


def test_auto_fails_on_a_broken_driver_reported_by_nvml(tmp_path):
    nvml = FakeNvml([], fail={"nvmlInit": DRIVER_NOT_LOADED})
    with pytest.raises(DriverError) as caught:
        collect_gpu_consumers(
            "auto", run=h200_smi("load"), nvidia_smi=SMI, nvml=nvml, proc_root=str(tmp_path)
        )
    assert caught.value.kind == "driver_unreachable"


def test_nvml_backend_without_nvml_module():
    with pytest.raises(NvmlUnavailable, match="nvidia-ml-py"):
        collect_gpu_consumers("nvml", run=FakeSmi(), nvidia_smi=SMI, nvml=None)


def test_nvml_backend_does_not_fall_back(tmp_path):
    nvml = FakeNvml([], fail={"nvmlInit": LIBRARY_NOT_FOUND})
    with pytest.raises(DriverError) as caught:
        collect_gpu_consumers(
            "nvml", run=h200_smi("load"), nvidia_smi=SMI, nvml=nvml, proc_root=str(tmp_path)
        )
    assert caught.value.kind == "not_installed"


def module_result(state, backend):
    """What gpu_consumers_info printed on the real H200 and its exit status."""
    text, rc = capture(f"module_result_{state}_{backend}.txt")
    return json.loads(text), rc


@pytest.mark.parametrize("backend", ["nvml", "nvidia_smi", "auto"])
def test_module_on_the_real_h200_found_the_20gib_process(backend):
    idle, rc = module_result("idle", backend)
    assert rc == 0
    assert idle["consumers"] == []
    assert idle["gpus"][0]["memory_used_mib"] == 0
    load, rc = module_result("load", backend)
    assert rc == 0
    assert load["backend_used"] == ("nvidia_smi" if backend == "nvidia_smi" else "nvml")
    # NVML and nvidia-smi agree to the MiB (v2 used 22027239424 bytes, printed 21007 MiB)
    assert load["gpus"] == module_result("load", "nvidia_smi")[0]["gpus"]
    assert load["gpus"][0]["memory_used_mib"] == 21007
    assert [
        (c["pid"], c["process_name"], c["used_memory_mib"], c["type"], c["container"])
        for c in load["consumers"]
    ] == [(436, "python3", 20998, "C", None)]


def test_module_cli_result_agrees_with_the_raw_output_of_the_same_lease(tmp_path):
    text, _ = capture("module_lease_load_table_and_csv.txt")
    table_text, csv_text = text.split("pid, process_name", 1)
    table = parse_table(table_text)
    apps, _ = parse_query_compute_apps("pid, process_name" + csv_text.split("index, memory.used")[0])
    result, _ = module_result("load", "nvidia_smi")
    assert [(p["pid"], p["used_memory_mib"]) for p in table["processes"]] == [(436, 20998)]
    assert [(a["pid"], a["used_memory_mib"], a["gpu_uuid"]) for a in apps] == [
        (c["pid"], c["used_memory_mib"], c["gpu_uuid"]) for c in result["consumers"]
    ]
    assert table["gpus"][0]["memory_used_mib"] == result["gpus"][0]["memory_used_mib"] == 21007
