# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""``/proc/meminfo`` to byte counts.

``free`` is never used: old procps cuts numbers wider than its columns (``free -b``
printed 6742351462 for a 67 GB host), while meminfo's kB values are exact.
"""

from __future__ import annotations

import re

_LINE = re.compile(r"^(?P<key>[A-Za-z0-9_()]+):\s*(?P<value>\d+)(?:\s+(?P<unit>kB))?\s*$")

# Output key -> meminfo field, all given in kB.
BYTE_FIELDS = {
    "total_bytes": "MemTotal",
    "free_bytes": "MemFree",
    "available_bytes": "MemAvailable",
    "buffers_bytes": "Buffers",
    "cached_bytes": "Cached",
    "swap_total_bytes": "SwapTotal",
    "swap_free_bytes": "SwapFree",
    "shmem_bytes": "Shmem",
    "sreclaimable_bytes": "SReclaimable",
    # CMA: the known-bad platform table compares the two (_known_bad_platforms.py,
    # kernel_kho_cma); absent on kernels built without CONFIG_CMA.
    "cma_total_bytes": "CmaTotal",
    "cma_free_bytes": "CmaFree",
}
REQUIRED = ("MemTotal", "MemFree")


class MeminfoError(ValueError):
    """A meminfo text without the fields every kernel has."""


def parse_meminfo(text):
    """``{field: int}`` (kB values stay kB, counts stay counts) and the lines not understood."""
    fields, skipped = {}, []
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _LINE.match(line.strip())
        if match:
            fields[match.group("key")] = int(match.group("value"))
        else:
            skipped.append(line)
    return fields, skipped


def estimate_available_kb(fields):
    """MemAvailable as kernels before 3.14 lacked it: free + page cache + reclaimable slab.

    This overestimates (not all page cache can be dropped), hence the caller's warning.
    """
    return (
        fields["MemFree"]
        + fields.get("Buffers", 0)
        + fields.get("Cached", 0)
        + fields.get("SReclaimable", 0)
        - fields.get("Shmem", 0)
    )


def memory_from_meminfo(text):
    """``(memory, warnings)``: the module's ``memory`` dict in bytes.

    Huge pages are reserved at boot and count as used; their size is returned so a
    planner can tell "little available" from "reserved for huge pages".
    """
    fields, skipped = parse_meminfo(text)
    missing = [name for name in REQUIRED if name not in fields]
    if missing:
        raise MeminfoError(f"/proc/meminfo lacks {', '.join(missing)}; is this a Linux /proc/meminfo?")
    warnings = [f"/proc/meminfo line not understood: {line!r}" for line in skipped]
    memory = {}
    for key, field in BYTE_FIELDS.items():
        memory[key] = fields[field] * 1024 if field in fields else None
    memory["available_estimated"] = "MemAvailable" not in fields
    if memory["available_estimated"]:
        memory["available_bytes"] = max(estimate_available_kb(fields), 0) * 1024
        warnings.append(
            "/proc/meminfo has no MemAvailable (kernel older than 3.14): available_bytes is estimated "
            "from MemFree + Buffers + Cached + SReclaimable - Shmem and may be too high"
        )
    page_kb = fields.get("Hugepagesize")
    total_pages = fields.get("HugePages_Total")
    hugetlb_kb = fields.get("Hugetlb")
    if hugetlb_kb is None and page_kb is not None and total_pages is not None:
        hugetlb_kb = page_kb * total_pages
    memory["hugepages"] = {
        "total": total_pages,
        "free": fields.get("HugePages_Free"),
        "page_size_bytes": page_kb * 1024 if page_kb is not None else None,
        "reserved_bytes": hugetlb_kb * 1024 if hugetlb_kb is not None else None,
    }
    return memory, warnings
