# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Parsers for ``nvidia-smi`` output: the CSV queries, the human table, and failures.

Nothing here imports Ansible, so the parsers are tested against captured real outputs.
The CSV queries are the primary source; the table is read for what CSV cannot give
(graphics processes, the process type) and as a fallback.
"""

from __future__ import annotations

import re

GPU_QUERY_FIELDS = ("index", "uuid", "name", "driver_version", "memory.total", "memory.used")
APPS_QUERY_FIELDS = ("pid", "process_name", "used_memory", "gpu_uuid")

# nvidia-smi names some fields by an alias in its CSV header (``used_memory`` comes back
# as ``used_gpu_memory [MiB]``, seen on driver 580.159.04); map the header to our names.
FIELD_ALIASES = {
    "used_gpu_memory": "used_memory",
    "name": "name",
    "gpu_name": "name",
    "gpu_uuid": "gpu_uuid",
    "gpu_bus_id": "pci.bus_id",
}

# Cells that mean "no value". GB10 prints ``[N/A]`` in CSV and ``Not Supported`` in the table.
NOT_SUPPORTED_CELLS = frozenset({"[N/A]", "N/A", "[Not Supported]", "Not Supported"})
UNKNOWN_CELLS = NOT_SUPPORTED_CELLS | frozenset(
    {"[Insufficient Permissions]", "Insufficient Permissions", "[Not Found]", "[Unknown Error]", "-", ""}
)

# The GPUs that share system memory with the CPU and cannot report a framebuffer size.
UNIFIED_MEMORY_NAME = re.compile(r"\bGB10\b")

# nvidia-smi's own failure messages, most specific first, and what each one means.
DRIVER_ERROR_PATTERNS = (
    ("version_mismatch", re.compile(r"Driver/library version mismatch", re.I)),
    ("gpu_lost", re.compile(r"Unable to determine the device handle|GPU is lost|fallen off the bus", re.I)),
    ("driver_unreachable", re.compile(r"couldn't communicate with the NVIDIA driver", re.I)),
    ("no_devices", re.compile(r"No devices were found", re.I)),
    (
        "not_installed",
        re.compile(
            r"couldn't find libnvidia-ml\.so|NVML Shared Library Not Found|nvidia-smi: (command )?not found",
            re.I,
        ),
    ),
    ("driver_unreachable", re.compile(r"Failed to initialize NVML", re.I)),
)

DRIVER_ERROR_FIXES = {
    "not_installed": "Install the NVIDIA driver (and nvidia-smi / libnvidia-ml) on this node, then re-run.",
    "driver_unreachable": (
        "Load the NVIDIA kernel module (check `lsmod | grep nvidia` and `dmesg`), or reboot after a "
        "driver install; inside a container make sure the NVIDIA runtime exposes /dev/nvidia*."
    ),
    "version_mismatch": (
        "The loaded kernel module and the user-space driver libraries differ, usually after a driver "
        "upgrade without a reboot: reboot the node (or reload the nvidia modules)."
    ),
    "no_devices": (
        "The driver sees no GPU: check `dmesg` for NVRM/RmInitAdapter errors, the PCI device "
        "(`lspci | grep -i nvidia`) and CUDA_VISIBLE_DEVICES / -i selections."
    ),
    "gpu_lost": "A GPU fell off the bus or is unreachable: drain the node and reboot it (check `dmesg`).",
}

_HEADER_VERSIONS = re.compile(
    r"NVIDIA-SMI\s+(?P<smi>[\d.]+)\s+(?:Driver|KMD) Version:\s*(?P<driver>[\d.]+)"
    r"(?:\s+CUDA(?: UMD)? Version:\s*(?P<cuda>[\d.]+|N/A))?"
)
_GPU_ROW = re.compile(r"^\s*(?P<index>\d+)\s+(?P<name>.*?)\s+(?P<persistence>On|Off|N/A)?\s*$")
_BUS_ID = re.compile(r"^\s*(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\b")
_MEMORY_USAGE = re.compile(r"^\s*(?P<used>\d+)\s*MiB\s*/\s*(?P<total>\d+)\s*MiB\s*$")
_PROCESS_TYPES = r"C\+G|G\+C|M\+C|M\+G|C|G|M"
# GI/CI columns appeared with MIG (450); older tables have only GPU and PID.
_PROCESS_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?:(?P<gi>N/A|\d+)\s+(?P<ci>N/A|\d+)\s+)?(?P<pid>\d+)\s+"
    r"(?P<type>" + _PROCESS_TYPES + r")\s+(?P<name>.*?)\s+(?P<memory>\S+)\s*\|\s*$"
)
_MIB_VALUE = re.compile(r"^(?P<value>\d+)\s*(?:MiB)?$")


class NvidiaSmiParseError(ValueError):
    """Output that is not what the parser expects at all (not a single bad line)."""


class DriverError(Exception):
    """The NVIDIA driver is broken or missing; ``kind`` is one of ``DRIVER_ERROR_FIXES``."""

    def __init__(self, kind, message, **details):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.details = details

    def as_dict(self):
        return {"kind": self.kind, "message": self.message}

    def summary(self):
        return f"NVIDIA driver problem ({self.kind}): {self.message}. {DRIVER_ERROR_FIXES[self.kind]}"


def driver_branch(driver_version):
    """``580`` for ``580.95.05``; None when the version is unknown."""
    if not driver_version:
        return None
    head = str(driver_version).split(".", 1)[0]
    return int(head) if head.isdigit() else None


def is_unified_memory(name, memory_total_cell=None):
    """GB10-class devices share system memory; they also cannot report a framebuffer size."""
    if name and UNIFIED_MEMORY_NAME.search(name):
        return True
    return memory_total_cell is not None and memory_total_cell.strip() in NOT_SUPPORTED_CELLS


def parse_mib(cell):
    """``'20998'``, ``'20998 MiB'`` or ``'84MiB'`` to an int; None for unknown or truncated values.

    A cell cut to ``10707...`` is a prefix of a larger number, so it is never read as one.
    """
    if cell is None:
        return None
    text = cell.strip()
    if text in UNKNOWN_CELLS or text.endswith("..."):
        return None
    match = _MIB_VALUE.match(text)
    if not match:
        raise ValueError(f"not a MiB value: {cell!r}")
    return int(match.group("value"))


def parse_text_cell(cell):
    """A string cell, None when nvidia-smi says it has no value."""
    text = cell.strip()
    return None if text in UNKNOWN_CELLS else text


def detect_driver_error(text):
    """``{kind, message}`` when ``text`` holds one of nvidia-smi's driver failures, else None."""
    for kind, pattern in DRIVER_ERROR_PATTERNS:
        for line in text.splitlines():
            if pattern.search(line):
                return {"kind": kind, "message": line.strip()}
    return None


def _header_key(cell):
    """``'memory.total [MiB]'`` to ``'memory.total'``, with aliases resolved."""
    key = re.sub(r"\s*\[[^\]]*\]\s*$", "", cell.strip())
    return FIELD_ALIASES.get(key, key)


def _split_row(line, width, free_text_field):
    cells = [cell.strip() for cell in line.split(",")]
    if len(cells) > width and free_text_field is not None:
        # A process name may itself hold commas: give the surplus back to that column.
        extra = len(cells) - width
        cells[free_text_field : free_text_field + extra + 1] = [
            ", ".join(cells[free_text_field : free_text_field + extra + 1])
        ]
    return cells


def parse_csv(text, fields):
    """Rows of a ``--query-*`` CSV as dicts keyed by ``fields``; the header line is optional.

    Returns ``(rows, warnings)``. A row with the wrong number of cells becomes a warning.
    """
    rows, warnings = [], []
    lines = [line for line in text.splitlines() if line.strip()]
    expected = list(fields)
    if lines:
        header = [_header_key(cell) for cell in lines[0].split(",")]
        if header == [FIELD_ALIASES.get(field, field) for field in expected]:
            lines = lines[1:]
    free_text = expected.index("process_name") if "process_name" in expected else None
    for line in lines:
        cells = _split_row(line, len(expected), free_text)
        if len(cells) != len(expected):
            warnings.append(f"nvidia-smi CSV line skipped, expected {len(expected)} cells: {line!r}")
            continue
        rows.append(dict(zip(expected, cells, strict=True)))
    return rows, warnings


def parse_query_gpu(text, fields=GPU_QUERY_FIELDS):
    """``--query-gpu=index,uuid,name,driver_version,memory.total,memory.used`` to GPU dicts."""
    rows, warnings = parse_csv(text, fields)
    gpus = []
    for row in rows:
        try:
            index = int(row["index"])
            total = parse_mib(row.get("memory.total"))
            used = parse_mib(row.get("memory.used"))
        except ValueError as exc:
            warnings.append(f"nvidia-smi GPU line skipped ({exc}): {row!r}")
            continue
        name = parse_text_cell(row.get("name", ""))
        gpus.append(
            {
                "index": index,
                "uuid": parse_text_cell(row.get("uuid", "")),
                "name": name,
                "driver_version": parse_text_cell(row.get("driver_version", "")),
                "memory_total_mib": total,
                "memory_used_mib": used,
                "unified_memory": is_unified_memory(name, row.get("memory.total")),
            }
        )
    return gpus, warnings


def parse_query_compute_apps(text, fields=APPS_QUERY_FIELDS):
    """``--query-compute-apps=pid,process_name,used_memory,gpu_uuid`` to process dicts."""
    rows, warnings = parse_csv(text, fields)
    processes = []
    for row in rows:
        try:
            pid = int(row["pid"])
            used = parse_mib(row.get("used_memory"))
        except ValueError as exc:
            warnings.append(f"nvidia-smi process line skipped ({exc}): {row!r}")
            continue
        processes.append(
            {
                "pid": pid,
                "process_name": parse_text_cell(row.get("process_name", "")),
                "used_memory_mib": used,
                "gpu_uuid": parse_text_cell(row.get("gpu_uuid", "")),
                "type": "C",
            }
        )
    return processes, warnings


def _table_cells(line):
    """``'| a | b | c |'`` to ``['a', 'b', 'c']`` with the spacing kept."""
    stripped = line.strip()
    if not (stripped.startswith("|") and stripped.endswith("|")):
        return None
    return stripped[1:-1].split("|")


def _parse_gpu_block(first, second):
    """Two table rows of one GPU to a dict, or None when ``first`` is no GPU row."""
    if first is None or len(first) < 2:
        return None
    row = _GPU_ROW.match(first[0])
    bus = _BUS_ID.match(first[1])
    if not row or not bus:
        return None
    name = row.group("name").strip()
    memory_cell = second[1].strip() if second and len(second) > 1 else ""
    used = total = None
    usage = _MEMORY_USAGE.match(memory_cell)
    if usage:
        used, total = int(usage.group("used")), int(usage.group("total"))
    return {
        "index": int(row.group("index")),
        "name": name,
        "pci_bus_id": bus.group("bus"),
        "memory_used_mib": used,
        "memory_total_mib": total,
        "unified_memory": is_unified_memory(name, memory_cell),
        "memory_usage_cell": memory_cell,
    }


def parse_table(text):
    """The default ``nvidia-smi`` table to ``{driver_version, cuda_version, gpus, processes, warnings}``.

    Layouts differ by driver branch (the PID column widened in 570; 610 prints
    ``KMD Version`` and ``CUDA UMD Version``), so rows are read by their tokens, not by
    column offsets. A process line that cannot be read goes to ``unreadable`` (the caller fails closed:
    it may be a consumer); other oddities (a GPU's ERR!, a memory cell) become warnings.
    """
    result = {"smi_version": None, "driver_version": None, "cuda_version": None}
    gpus, processes, warnings, unreadable = [], [], [], []
    lines = text.splitlines()
    header = _HEADER_VERSIONS.search(text)
    if header:
        result["smi_version"] = header.group("smi")
        result["driver_version"] = header.group("driver")
        cuda = header.group("cuda")
        result["cuda_version"] = None if cuda in (None, "N/A") else cuda
    elif not any("Processes:" in line for line in lines):
        raise NvidiaSmiParseError("no nvidia-smi table header (NVIDIA-SMI ... Driver Version) found")

    section = None
    pending = None
    for line in lines:
        stripped = line.strip()
        if "Processes:" in stripped:
            section = "processes-header"
            continue
        if stripped.startswith("|=") and section in (None, "gpus-header"):
            section = "gpus"
            continue
        if stripped.startswith("|="):
            section = "processes" if section == "processes-header" else section
            continue
        if section == "gpus":
            cells = _table_cells(line)
            if cells is None:
                # A blank line or a +---+ border between GPU blocks ends a block.
                pending = None
                if not stripped.startswith("+"):
                    section = "between"
                continue
            if pending is not None:
                gpu = _parse_gpu_block(pending, cells)
                if gpu is not None:
                    gpus.append(gpu)
                pending = None
                continue
            if _parse_gpu_block(cells, None) is not None:
                pending = cells
            elif "ERR!" in line or "Unable to determine" in line:
                warnings.append(f"nvidia-smi reports a GPU error: {stripped}")
        elif section == "processes":
            if not stripped.startswith("|"):
                continue
            if "No running processes found" in stripped:
                continue
            match = _PROCESS_ROW.match(stripped)
            if not match:
                unreadable.append(f"nvidia-smi process line not understood: {stripped!r}")
                continue
            name = match.group("name").strip()
            try:
                used = parse_mib(match.group("memory"))
            except ValueError:
                warnings.append(f"nvidia-smi process memory not understood: {stripped!r}")
                used = None
            processes.append(
                {
                    "gpu_index": int(match.group("gpu")),
                    "pid": int(match.group("pid")),
                    "type": match.group("type"),
                    "process_name": name or None,
                    "process_name_truncated": name.startswith("..."),
                    "used_memory_mib": used,
                }
            )
    result.update(gpus=gpus, processes=processes, warnings=warnings, unreadable=unreadable)
    return result


def parse_list(text):
    """``nvidia-smi -L`` to ``[{index, name, uuid}]``."""
    gpus = []
    for line in text.splitlines():
        match = re.match(r"^GPU (\d+): (.*?) \(UUID: (\S+)\)\s*$", line.strip())
        if match:
            gpus.append({"index": int(match.group(1)), "name": match.group(2), "uuid": match.group(3)})
    return gpus
