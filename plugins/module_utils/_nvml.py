# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""GPUs and their processes through NVML (the ``pynvml`` module of nvidia-ml-py).

The NVML module is passed in, so tests drive this code with a fake object. NVML error
codes are stable C ABI values; they are mapped here to the driver-error kinds that
nvidia-smi's messages map to in ``_nvidia_smi``.
"""

from __future__ import annotations

import contextlib

from ansible_collections.sparkops.vllm.plugins.module_utils._nvidia_smi import (
    UNIFIED_MEMORY_NAME,
    DriverError,
)

MIB = 1024 * 1024

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_FUNCTION_NOT_FOUND = 13

# nvmlReturn_t values (nvml.h) to the driver-error kinds.
NVML_ERROR_KINDS = {
    1: "driver_unreachable",  # UNINITIALIZED
    4: "driver_unreachable",  # NO_PERMISSION: /dev/nvidia* not accessible
    9: "driver_unreachable",  # DRIVER_NOT_LOADED
    12: "not_installed",  # LIBRARY_NOT_FOUND: no libnvidia-ml.so.1
    15: "gpu_lost",  # GPU_IS_LOST
    16: "gpu_lost",  # RESET_REQUIRED
    17: "driver_unreachable",  # OPERATING_SYSTEM
    18: "version_mismatch",  # LIB_RM_VERSION_MISMATCH
    28: "no_devices",  # GPU_NOT_FOUND
    999: "driver_unreachable",  # UNKNOWN
}


def load_pynvml():
    """The ``pynvml`` module when nvidia-ml-py is importable, else None."""
    try:
        import pynvml  # noqa: PLC0415 - optional dependency, probed at run time
    except ImportError:
        return None
    return pynvml


def to_mib(value):
    """Bytes to whole MiB, rounded to nearest as nvidia-smi prints them.

    Seen on the H200: NVML's v2 ``used`` of 22027239424 bytes (21006.8 MiB) is 21007 MiB in
    nvidia-smi. Per-process values are whole MiB already (22017998848 bytes = 20998 MiB).
    """
    return None if value is None else (value + MIB // 2) // MIB


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _code(exc):
    return getattr(exc, "value", None)


def driver_error_from_nvml(exc, during, default_kind="driver_unreachable"):
    """A ``DriverError`` for an NVML exception raised while doing ``during``."""
    kind = NVML_ERROR_KINDS.get(_code(exc), default_kind)
    return DriverError(kind, f"NVML {during} failed: {type(exc).__name__}: {exc}", nvml_error_code=_code(exc))


def _memory(nvml, handle, warnings, index):
    """``(total_mib, used_mib, not_supported)``.

    The v2 call leaves the driver's reserved memory out of ``used``, as nvidia-smi does
    (on the idle H200 v1 said 615 MiB used, v2 and nvidia-smi 0 MiB: 644939776 bytes reserved).
    """
    calls = []
    if hasattr(nvml, "nvmlMemory_v2"):
        calls.append(lambda: nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2))
    calls.append(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    for call in calls:
        try:
            info = call()
        except nvml.NVMLError as exc:
            if _code(exc) == NVML_ERROR_NOT_SUPPORTED:
                return None, None, True
            if _code(exc) == NVML_ERROR_FUNCTION_NOT_FOUND:
                continue
            warnings.append(f"GPU {index}: NVML memory info unavailable: {exc}")
            return None, None, False
        return to_mib(info.total), to_mib(info.used), False
    return None, None, False


def _processes(nvml, handle, kind, warnings, index):
    getter = {
        "C": nvml.nvmlDeviceGetComputeRunningProcesses,
        "G": nvml.nvmlDeviceGetGraphicsRunningProcesses,
    }[kind]
    try:
        return list(getter(handle))
    except nvml.NVMLError as exc:
        if NVML_ERROR_KINDS.get(_code(exc)) == "gpu_lost":
            raise driver_error_from_nvml(exc, f"listing processes of GPU {index}") from exc
        label = "compute" if kind == "C" else "graphics"
        warnings.append(f"GPU {index}: NVML cannot list {label} processes: {exc}")
        return []


def _process_name(nvml, pid):
    try:
        return _text(nvml.nvmlSystemGetProcessName(pid)) or None
    except nvml.NVMLError:
        # NOT_FOUND for a PID in another PID namespace; the caller falls back to /proc.
        return None


def _merge_process(merged, proc, kind, gpu):
    """Add ``proc`` to ``merged`` (an insertion-ordered dict keyed by GPU UUID and PID)."""
    used_mib = to_mib(proc.usedGpuMemory)
    key = (gpu["uuid"], proc.pid)
    entry = merged.get(key)
    if entry is None:
        merged[key] = {
            "pid": proc.pid,
            "used_memory_mib": used_mib,
            "gpu_uuid": gpu["uuid"],
            "gpu_index": gpu["index"],
            "type": kind,
        }
        return
    # The same context listed as compute and graphics is one C+G process.
    if kind not in entry["type"]:
        entry["type"] = "C+G"
    if used_mib is not None and (entry["used_memory_mib"] is None or used_mib > entry["used_memory_mib"]):
        entry["used_memory_mib"] = used_mib


def collect_nvml(nvml):
    """GPUs and their processes: ``{driver_version, cuda_version, gpus, consumers, warnings}``.

    Raises ``DriverError`` when NVML cannot reach a healthy driver.
    """
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise driver_error_from_nvml(exc, "initialisation") from exc
    try:
        return _collect(nvml)
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def _collect(nvml):
    warnings = []
    try:
        driver_version = _text(nvml.nvmlSystemGetDriverVersion())
        count = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError as exc:
        raise driver_error_from_nvml(exc, "driver query") from exc
    cuda_version = None
    try:
        cuda = nvml.nvmlSystemGetCudaDriverVersion_v2()
        cuda_version = f"{cuda // 1000}.{cuda % 1000 // 10}"
    except (nvml.NVMLError, AttributeError):
        warnings.append("NVML does not report the CUDA driver version")
    if count == 0:
        raise DriverError("no_devices", "NVML reports no GPU (device count 0)")

    gpus, merged = [], {}
    for index in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = _text(nvml.nvmlDeviceGetName(handle))
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        except nvml.NVMLError as exc:
            raise driver_error_from_nvml(
                exc, f"device handle of GPU {index}", default_kind="gpu_lost"
            ) from exc
        total, used, not_supported = _memory(nvml, handle, warnings, index)
        gpus.append(
            {
                "index": index,
                "uuid": uuid,
                "name": name,
                "driver_version": driver_version,
                "memory_total_mib": total,
                "memory_used_mib": used,
                "unified_memory": bool(not_supported or UNIFIED_MEMORY_NAME.search(name or "")),
            }
        )
        for kind in ("C", "G"):
            for proc in _processes(nvml, handle, kind, warnings, index):
                _merge_process(merged, proc, kind, gpus[-1])

    consumers = list(merged.values())
    for entry in consumers:
        entry["process_name"] = _process_name(nvml, entry["pid"])
    return {
        "driver_version": driver_version,
        "cuda_version": cuda_version,
        "gpus": gpus,
        "consumers": consumers,
        "warnings": warnings,
    }
