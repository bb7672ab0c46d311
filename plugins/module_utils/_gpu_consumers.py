# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Who holds GPU memory on this node: NVML or nvidia-smi, merged with /proc and Docker.

``collect_gpu_consumers`` is the whole of the ``gpu_consumers_info`` module without
Ansible: commands run through a ``run(argv) -> (rc, stdout, stderr)`` callable and NVML is
a module object, so both can be faked in tests.
"""

from __future__ import annotations

from ansible_collections.sparkops.vllm.plugins.module_utils._containers import (
    container_for_pid,
    process_name_from_proc,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._nvidia_smi import (
    APPS_QUERY_FIELDS,
    GPU_QUERY_FIELDS,
    DriverError,
    NvidiaSmiParseError,
    detect_driver_error,
    driver_branch,
    parse_list,
    parse_query_compute_apps,
    parse_query_gpu,
    parse_table,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._nvml import collect_nvml

GPU_QUERY_ARGS = (f"--query-gpu={','.join(GPU_QUERY_FIELDS)}", "--format=csv,noheader,nounits")
APPS_QUERY_ARGS = (f"--query-compute-apps={','.join(APPS_QUERY_FIELDS)}", "--format=csv,noheader,nounits")

# A GPU using this much memory with no process listed hides its consumers from us.
HIDDEN_CONSUMERS_MIB = 256


class NvidiaSmiFailed(Exception):
    """nvidia-smi failed in a way that is not a known driver failure."""

    def __init__(self, message, cmd, rc, stdout, stderr):
        super().__init__(message)
        self.cmd, self.rc, self.stdout, self.stderr = cmd, rc, stdout, stderr


class NvidiaSmiUnreadable(NvidiaSmiFailed):
    """nvidia-smi answered, but with lines that cannot be read: fail closed (they may be consumers)."""

    def __init__(self, unreadable, cmd, stdout):
        self.unreadable = list(unreadable)
        shown = "; ".join(self.unreadable[:5]) + (
            f" (and {len(self.unreadable) - 5} more)" if len(self.unreadable) > 5 else ""
        )
        super().__init__(
            f"nvidia-smi printed output this check cannot read, so it cannot say which processes hold the GPU: "
            f"{shown}.",
            cmd,
            0,
            stdout,
            "",
        )


class NvmlUnavailable(Exception):
    """``backend=nvml`` was asked for but nvidia-ml-py is not importable."""


def _run_smi(run, argv):
    """stdout of a successful nvidia-smi run; a driver failure raises ``DriverError``."""
    rc, out, err = run(list(argv))
    found = detect_driver_error(f"{out}\n{err}")
    if found is not None and (rc != 0 or not out.strip() or found["kind"] != "no_devices"):
        raise DriverError(found["kind"], found["message"], cmd=list(argv), rc=rc, stdout=out, stderr=err)
    if rc != 0:
        message = (err or out).strip() or f"exit status {rc}"
        raise NvidiaSmiFailed(f"{argv[0]} failed: {message}", list(argv), rc, out, err)
    return out


def _table(run, nvidia_smi):
    """``(table, None)``, or ``(None, NvidiaSmiFailed)`` when the table can't be had."""
    argv = [nvidia_smi]
    try:
        text = _run_smi(run, argv)
    except NvidiaSmiFailed as exc:
        return None, exc
    try:
        return parse_table(text), None
    except NvidiaSmiParseError as exc:
        return None, NvidiaSmiFailed(f"{nvidia_smi} printed no table it can read: {exc}", argv, 0, text, "")


def _gpus_from_table(run, nvidia_smi, table):
    """GPUs when the CSV query is unusable: the table plus ``-L`` for the UUIDs."""
    uuids = {gpu["index"]: gpu["uuid"] for gpu in parse_list(_run_smi(run, [nvidia_smi, "-L"]))}
    return [
        {
            "index": gpu["index"],
            "uuid": uuids.get(gpu["index"]),
            "name": gpu["name"],
            "driver_version": table["driver_version"],
            "memory_total_mib": gpu["memory_total_mib"],
            "memory_used_mib": gpu["memory_used_mib"],
            "unified_memory": gpu["unified_memory"],
        }
        for gpu in table["gpus"]
    ]


def _merge_table_processes(consumers, table_processes, uuid_by_index):
    """Add the table's process types, graphics processes and memory the CSV lacked."""
    by_key = {(c["gpu_uuid"], c["pid"]): c for c in consumers}
    typed = set()
    for proc in table_processes:
        uuid = uuid_by_index.get(proc["gpu_index"])
        key = (uuid, proc["pid"])
        known = by_key.get(key)
        if known is not None:
            # The CSV only says "compute"; the table knows C, G or C+G (two rows make C+G).
            known["type"] = proc["type"] if key not in typed or known["type"] == proc["type"] else "C+G"
            typed.add(key)
            if known["used_memory_mib"] is None:
                known["used_memory_mib"] = proc["used_memory_mib"]
            if known["process_name"] is None and not proc["process_name_truncated"]:
                known["process_name"] = proc["process_name"]
            continue
        entry = {
            "pid": proc["pid"],
            "process_name": proc["process_name"],
            "process_name_truncated": proc["process_name_truncated"],
            "used_memory_mib": proc["used_memory_mib"],
            "gpu_uuid": uuid,
            "gpu_index": proc["gpu_index"],
            "type": proc["type"],
        }
        consumers.append(entry)
        by_key[key] = entry
        typed.add(key)


def collect_cli(run, nvidia_smi):
    """GPUs and consumers from nvidia-smi: the CSV queries first, the table for the rest."""
    if not nvidia_smi:
        raise DriverError(
            "not_installed", "nvidia-smi was not found (not on PATH, or nvidia_smi_path is not an executable)"
        )
    warnings = []
    gpu_text = None
    try:
        gpu_text = _run_smi(run, [nvidia_smi, *GPU_QUERY_ARGS])
    except NvidiaSmiFailed as exc:
        warnings.append(f"nvidia-smi --query-gpu failed ({exc}); reading the table instead")
    gpus, unreadable = parse_query_gpu(gpu_text or "")
    if unreadable:
        raise NvidiaSmiUnreadable(unreadable, [nvidia_smi, *GPU_QUERY_ARGS], gpu_text)

    table, table_error = _table(run, nvidia_smi)
    if table_error is not None:
        if not gpus:
            raise table_error
        warnings.append(f"nvidia-smi table unavailable, graphics processes unknown: {table_error}")
    if not gpus:
        if not table["gpus"]:
            raise DriverError("no_devices", "nvidia-smi listed no GPU in its query or its table")
        gpus = _gpus_from_table(run, nvidia_smi, table)

    if table is not None and table["unreadable"]:
        raise NvidiaSmiUnreadable(table["unreadable"], [nvidia_smi], "")

    apps_text = ""
    try:
        apps_text = _run_smi(run, [nvidia_smi, *APPS_QUERY_ARGS])
    except NvidiaSmiFailed as exc:
        if table is None:
            # Neither the query nor the table lists the processes: "no consumers" would be a guess.
            raise NvidiaSmiFailed(
                f"nvidia-smi listed the processes neither in --query-compute-apps ({exc}) nor in its table "
                f"({table_error})",
                exc.cmd,
                exc.rc,
                exc.stdout,
                exc.stderr,
            ) from exc
        warnings.append(f"nvidia-smi --query-compute-apps failed ({exc}); using the table's process list")
    consumers, unreadable = parse_query_compute_apps(apps_text)
    if unreadable:
        raise NvidiaSmiUnreadable(unreadable, [nvidia_smi, *APPS_QUERY_ARGS], apps_text)
    uuid_by_index = {gpu["index"]: gpu["uuid"] for gpu in gpus}
    index_by_uuid = {gpu["uuid"]: gpu["index"] for gpu in gpus}
    for consumer in consumers:
        consumer["gpu_index"] = index_by_uuid.get(consumer["gpu_uuid"])
    if table is not None:
        _merge_table_processes(consumers, table["processes"], uuid_by_index)
        warnings.extend(table["warnings"])

    driver_version = next((g["driver_version"] for g in gpus if g["driver_version"]), None)
    if driver_version is None and table is not None:
        driver_version = table["driver_version"]
    return {
        "driver_version": driver_version,
        "cuda_version": table["cuda_version"] if table is not None else None,
        "gpus": gpus,
        "consumers": consumers,
        "warnings": warnings,
    }


def _finish_consumer(consumer, proc_root, docker_lookup):
    name = consumer.get("process_name")
    truncated = consumer.pop("process_name_truncated", False)
    if name is None or truncated:
        # "[Not Found]" (another PID namespace) or ".../firefox" cut on the left.
        full = process_name_from_proc(proc_root, consumer["pid"])
        if full and (name is None or full.endswith(name[3:])):
            name = full
    return {
        "pid": consumer["pid"],
        "process_name": name,
        "used_memory_mib": consumer["used_memory_mib"],
        "gpu_uuid": consumer["gpu_uuid"],
        "gpu_index": consumer.get("gpu_index"),
        "type": consumer.get("type"),
        "container": container_for_pid(proc_root, consumer["pid"], docker_lookup),
    }


def _hidden_consumer_warnings(gpus, consumers):
    warnings = []
    for gpu in gpus:
        used = gpu["memory_used_mib"]
        listed = [c for c in consumers if c["gpu_uuid"] == gpu["uuid"]]
        if used is not None and used >= HIDDEN_CONSUMERS_MIB and not listed:
            warnings.append(
                f"GPU {gpu['index']} has {used} MiB in use but no process is listed: its consumers "
                "run in another PID namespace; run this check on the host (or with --pid host)."
            )
    return warnings


def collect_gpu_consumers(backend, *, run, nvidia_smi, nvml=None, proc_root="/proc", docker_lookup=None):
    """The module's result (``gpus``, ``consumers``, ``driver_version``, ...) or ``DriverError``.

    ``backend`` is ``auto``, ``nvml`` or ``nvidia_smi``; ``nvml`` is the pynvml module or None.
    ``auto`` falls back to nvidia-smi when nvidia-ml-py or libnvidia-ml is missing.
    """
    warnings = []
    collected = None
    backend_used = "nvidia_smi"
    nvml_unavailable = None
    if backend in ("auto", "nvml"):
        if nvml is None:
            if backend == "nvml":
                raise NvmlUnavailable(
                    "backend=nvml needs the nvidia-ml-py package (import pynvml) on the node: "
                    "install it with pip, or use backend=auto / nvidia_smi"
                )
        else:
            try:
                collected = collect_nvml(nvml)
                backend_used = "nvml"
            except DriverError as exc:
                if backend == "nvml" or exc.kind != "not_installed":
                    raise
                # Expected where nvidia-ml-py is installed without libnvidia-ml (the lab): no warning.
                nvml_unavailable = exc.message
    if collected is None:
        collected = collect_cli(run, nvidia_smi)

    warnings.extend(collected["warnings"])
    consumers = [_finish_consumer(c, proc_root, docker_lookup) for c in collected["consumers"]]
    warnings.extend(_hidden_consumer_warnings(collected["gpus"], consumers))
    if docker_lookup is not None:
        warnings.extend(docker_lookup.warnings)
    return {
        "backend_used": backend_used,
        "nvml_unavailable": nvml_unavailable,
        "driver_version": collected["driver_version"],
        "driver_branch": driver_branch(collected["driver_version"]),
        "cuda_version": collected["cuda_version"],
        "gpus": collected["gpus"],
        "consumers": consumers,
        "warnings": warnings,
    }
