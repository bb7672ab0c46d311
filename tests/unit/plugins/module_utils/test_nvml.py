"""plugins/module_utils/_nvml.py against a fake pynvml: real H200 values, GB10, and NVML errors."""

import json
from types import SimpleNamespace

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._nvidia_smi import DriverError
from ansible_collections.sparkops.vllm.plugins.module_utils._nvml import MIB, collect_nvml, load_pynvml
from conftest import FIXTURES

# nvmlReturn_t values (nvml.h)
NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND, DRIVER_NOT_LOADED = 3, 4, 6, 9
LIBRARY_NOT_FOUND, FUNCTION_NOT_FOUND, GPU_IS_LOST, LIB_RM_VERSION_MISMATCH, UNKNOWN = 12, 13, 15, 18, 999


class FakeNVMLError(Exception):
    """Like pynvml.NVMLError: the nvmlReturn_t code is in ``value``; subclasses are named by it."""

    def __init__(self, value):
        super().__init__(f"NVML error {value}")
        self.value = value


class FakeNvml:
    """The parts of pynvml that _nvml calls, answering from a list of device dicts.

    ``fail`` maps a function name to the error code it raises. ``memory_v2`` adds the v2
    memory call whose ``used`` excludes the driver's reservation, like NVML 11.5+.
    """

    NVMLError = FakeNVMLError

    def __init__(self, devices, *, driver="580.95.05", cuda=13000, fail=None, memory_v2=False, names=None):
        self.devices = devices
        self.driver = driver
        self.cuda = cuda
        self.fail = fail or {}
        self.names = names or {}
        self.shutdown_called = False
        if memory_v2:
            self.nvmlMemory_v2 = 0x02000028

    def _check(self, name):
        if name in self.fail:
            raise FakeNVMLError(self.fail[name])

    def nvmlInit(self):
        self._check("nvmlInit")

    def nvmlShutdown(self):
        self.shutdown_called = True

    def nvmlSystemGetDriverVersion(self):
        self._check("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlSystemGetCudaDriverVersion_v2(self):
        self._check("nvmlSystemGetCudaDriverVersion_v2")
        return self.cuda

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index):
        self._check("nvmlDeviceGetHandleByIndex")
        return self.devices[index]

    def nvmlDeviceGetName(self, handle):
        return handle["name"].encode()  # older pynvml returns bytes

    def nvmlDeviceGetUUID(self, handle):
        return handle["uuid"]

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        self._check("nvmlDeviceGetMemoryInfo")
        if handle.get("mem") is None:
            raise FakeNVMLError(NOT_SUPPORTED)
        total, used, free = handle["mem"]
        if version is not None:
            used -= handle.get("reserved", 0)
        return SimpleNamespace(total=total, used=used, free=free)

    def _procs(self, handle, key):
        self._check(f"processes_{key}")
        return [SimpleNamespace(pid=p["pid"], usedGpuMemory=p["usedGpuMemory"]) for p in handle[key]]

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return self._procs(handle, "compute")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        return self._procs(handle, "graphics")

    def nvmlSystemGetProcessName(self, pid):
        if pid not in self.names:
            raise FakeNVMLError(NOT_FOUND)
        return self.names[pid]


def h200_dump(state):
    """The pynvml dump captured on the real H200 (idle or load)."""
    lines = (FIXTURES / "real_h200" / f"{state}_pynvml_dump.txt").read_text().splitlines()
    return json.loads("\n".join(lines[2:-1]))


def fake_from_dump(state):
    dump = h200_dump(state)
    names = {p["pid"]: p["name"] for d in dump["devices"] for p in d["compute"] + d["graphics"]}
    return FakeNvml(dump["devices"], driver=dump["driver"], cuda=dump["cuda"], names=names)


def test_real_h200_idle_replayed():
    result = collect_nvml(fake_from_dump("idle"))
    assert result["driver_version"] == "580.159.04"
    assert result["cuda_version"] == "13.0"
    # The v1 call counts the driver's reserved 615 MiB as used (nvidia-smi says 0 MiB).
    assert result["gpus"] == [
        {
            "index": 0,
            "uuid": "GPU-ebb217d5-fa0d-9ec4-c5f0-bb519b966f5b",
            "name": "NVIDIA H200",
            "driver_version": "580.159.04",
            "memory_total_mib": 143771,
            "memory_used_mib": 615,
            "unified_memory": False,
        }
    ]
    assert result["consumers"] == []


def test_real_h200_20gib_process_replayed():
    result = collect_nvml(fake_from_dump("load"))
    assert result["consumers"] == [
        {
            "pid": 453,
            "process_name": "python3",
            "used_memory_mib": 20998,  # 22017998848 bytes, as nvidia-smi printed
            "gpu_uuid": "GPU-ebb217d5-fa0d-9ec4-c5f0-bb519b966f5b",
            "gpu_index": 0,
            "type": "C",
        }
    ]


def test_memory_v2_leaves_reserved_memory_out():
    # v1 and v2 values read on the real H200 with PyTorch holding 20 GiB
    # (real_h200/load_nvml_memory_v1_v2.txt);
    # v2 used is 22027239424 bytes = 21006.8 MiB, which nvidia-smi printed as 21007 MiB.
    device = {
        "name": "NVIDIA H200",
        "uuid": "GPU-1",
        "mem": [150754820096, 22672179200, 128082640896],
        "reserved": 644939776,
        "compute": [],
        "graphics": [],
    }
    gpu = collect_nvml(FakeNvml([device], memory_v2=True))["gpus"][0]
    assert (gpu["memory_total_mib"], gpu["memory_used_mib"]) == (143771, 21007)


def test_gb10_memory_not_supported_is_unified():
    gb10 = {
        "name": "NVIDIA GB10",
        "uuid": "GPU-5c1e",
        "mem": None,
        "compute": [{"pid": 114687, "usedGpuMemory": 19135 * MIB}],
        "graphics": [{"pid": 4174, "usedGpuMemory": 84 * MIB}, {"pid": 114687, "usedGpuMemory": None}],
    }
    fake = FakeNvml([gb10], memory_v2=True, names={114687: "/usr/local/bin/python"})
    result = collect_nvml(fake)
    gpu = result["gpus"][0]
    assert (gpu["memory_total_mib"], gpu["memory_used_mib"], gpu["unified_memory"]) == (None, None, True)
    assert [(c["pid"], c["type"], c["used_memory_mib"], c["process_name"]) for c in result["consumers"]] == [
        (114687, "C+G", 19135, "/usr/local/bin/python"),
        (4174, "G", 84, None),  # NOT_FOUND name: another PID namespace
    ]
    assert fake.shutdown_called


def test_unknown_process_memory_stays_null():
    device = {"name": "NVIDIA H200", "uuid": "GPU-1", "mem": [MIB, 0, MIB], "compute": [], "graphics": []}
    device["compute"] = [{"pid": 7, "usedGpuMemory": None}]
    assert collect_nvml(FakeNvml([device]))["consumers"][0]["used_memory_mib"] is None


def test_process_list_not_supported_is_a_warning():
    device = {"name": "NVIDIA H200", "uuid": "GPU-1", "mem": [MIB, 0, MIB], "compute": [], "graphics": []}
    result = collect_nvml(FakeNvml([device], fail={"processes_graphics": NOT_SUPPORTED}))
    assert result["consumers"] == []
    assert result["warnings"] == ["GPU 0: NVML cannot list graphics processes: NVML error 3"]


@pytest.mark.parametrize(
    ("fail", "kind"),
    [
        ({"nvmlInit": LIBRARY_NOT_FOUND}, "not_installed"),
        ({"nvmlInit": DRIVER_NOT_LOADED}, "driver_unreachable"),
        ({"nvmlInit": NO_PERMISSION}, "driver_unreachable"),
        ({"nvmlInit": LIB_RM_VERSION_MISMATCH}, "version_mismatch"),
        ({"nvmlInit": UNKNOWN}, "driver_unreachable"),
        ({"nvmlDeviceGetHandleByIndex": GPU_IS_LOST}, "gpu_lost"),
        ({"nvmlDeviceGetHandleByIndex": UNKNOWN}, "driver_unreachable"),
        ({"nvmlDeviceGetHandleByIndex": NOT_FOUND}, "gpu_lost"),
        ({"processes_compute": GPU_IS_LOST}, "gpu_lost"),
    ],
)
def test_nvml_errors_map_to_driver_error_kinds(fail, kind):
    device = {"name": "NVIDIA GB10", "uuid": "GPU-1", "mem": None, "compute": [], "graphics": []}
    with pytest.raises(DriverError) as caught:
        collect_nvml(FakeNvml([device], fail=fail))
    assert caught.value.kind == kind
    assert "NVML" in caught.value.message


def test_no_device_is_no_devices():
    with pytest.raises(DriverError) as caught:
        collect_nvml(FakeNvml([]))
    assert caught.value.kind == "no_devices"


def test_load_pynvml_finds_nvidia_ml_py():
    # nvidia-ml-py is in the project's venv (requirements.txt).
    module = load_pynvml()
    assert module is not None
    assert hasattr(module, "nvmlInit")
