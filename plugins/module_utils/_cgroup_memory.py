# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Host memory the running stack's containers hold, from their memory cgroups (v1 and v2).

On a rerun on a serving node, MemTotal - MemAvailable already holds the stack's own host
memory (Ray, the API server, the engine's host side, Ray's object store in /dev/shm). It comes
back when the containers restart, so the memory plan adds it back like the stack's GPU memory.
The figure that moves with MemAvailable is the cgroup's memory less its reclaimable page cache,
the file pages on the LRU lists:

* cgroup v2: ``memory.current - active_file - inactive_file`` (memory.stat). Not
  ``memory.current - file``: ``file`` counts tmpfs and shared memory, which is swap-backed and
  on the anon lists, and which MemAvailable does not count as available (Linux
  Documentation/admin-guide/cgroup-v2.rst, memory.stat: "shmem pages are on anon memory
  management lists"; fs/proc/meminfo.c and si_mem_available(), in mm/show_mem.c or
  mm/page_alloc.c in older kernels, take the file LRU lists only). Measured on a cgroup v2 host (tests/fixtures/cgroup/
  h200_cgroup_v2_experiment.json, kernel 6.18): 1 GiB written to /dev/shm dropped MemAvailable
  by 1.07 GiB; ``current - active_file - inactive_file`` rose 1.065 GiB, ``current - file``
  0.065 GiB; 2 GiB of page cache moved neither by more than 0.11 GiB.
* cgroup v1 (memory controller): memory.stat's ``total_rss + total_cache`` less
  ``total_active_file + total_inactive_file`` (hierarchical, the container's children
  included). Documentation/admin-guide/cgroup-v1/memory.rst section 5.5: usage_in_bytes is a
  fuzzy figure, "use RSS+CACHE(+SWAP) value in memory.stat"; shmem is in ``cache``.

The containers are found without a container list: every PID's ``/proc/<pid>/cgroup`` names
its innermost container (_containers.container_from_cgroup), Docker's inspect gives that
container's labels, and the containers carrying the cluster's label are read.
"""

from __future__ import annotations

import os

from ansible_collections.sparkops.vllm.plugins.module_utils._containers import (
    container_from_cgroup,
    read_proc_file,
)

GIB = 1024**3


def memory_cgroup(proc_cgroup_text):
    """``(version, path)`` of the memory controller in a ``/proc/<pid>/cgroup`` text, or None.

    A v1 line naming the ``memory`` controller wins (a hybrid host mounts the unified tree
    as well, without controllers); otherwise the v2 line ``0::path``.
    """
    unified = None
    for line in (proc_cgroup_text or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            unified = path.strip()
        elif "memory" in controllers.split(","):
            return 1, path.strip()
    return (2, unified) if unified else None


def cgroup_dir(cgroup_root, version, path):
    """The directory of a memory cgroup under the cgroup mount (v1: its ``memory`` tree)."""
    base = os.path.join(cgroup_root, "memory") if version == 1 else cgroup_root
    return os.path.join(base, path.lstrip("/"))


def parse_memory_stat(text):
    """``{key: int}`` of a memory.stat text; lines that are not ``key number`` are left out."""
    stat = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            stat[parts[0]] = int(parts[1])
    return stat


def held_bytes(version, stat, current=None):
    """Bytes of the cgroup that MemAvailable does not count as available, or None.

    v2 needs ``memory.current`` (``current``) and memory.stat; v1 memory.stat alone. None
    when a figure the rule needs is missing (a cgroup that went away, a kernel without it).
    """
    if version == 2:
        needed = ("active_file", "inactive_file")
        if current is None or any(key not in stat for key in needed):
            return None
        usage = current
        reclaimable = stat["active_file"] + stat["inactive_file"]
    else:
        needed = ("total_rss", "total_cache", "total_active_file", "total_inactive_file")
        if any(key not in stat for key in needed):
            return None
        usage = stat["total_rss"] + stat["total_cache"]
        reclaimable = stat["total_active_file"] + stat["total_inactive_file"]
    return max(0, usage - reclaimable)


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def read_held_bytes(cgroup_root, version, path):
    """``held_bytes`` of the cgroup at ``path``, or None when its files cannot be read."""
    directory = cgroup_dir(cgroup_root, version, path)
    stat_text = _read(os.path.join(directory, "memory.stat"))
    if stat_text is None:
        return None
    current = None
    if version == 2:
        raw = (_read(os.path.join(directory, "memory.current")) or "").strip()
        current = int(raw) if raw.isdigit() else None
    return held_bytes(version, parse_memory_stat(stat_text), current)


def _label_matches(labels, label):
    key, sep, value = label.partition("=")
    if key not in labels:
        return False
    return not sep or labels[key] == value


def _pids(proc_root):
    try:
        names = os.listdir(proc_root)
    except OSError:
        return []
    return sorted(int(name) for name in names if name.isdigit())


def stack_host_memory(label, docker_lookup, proc_root="/proc", cgroup_root="/sys/fs/cgroup"):
    """Host memory of the running containers that carry ``label`` (``key=value``).

    Returns ``{"bytes", "gib", "containers": {name: {"bytes", "cgroup"}}, "warnings"}``.
    A container whose cgroup cannot be read is named in ``warnings`` and adds nothing, so the
    plan is never raised by a guess.
    """
    seen = {}
    for pid in _pids(proc_root):
        text = read_proc_file(proc_root, pid, "cgroup")
        found = container_from_cgroup(text or "")
        if found is None or found["id"] in seen:
            continue
        seen[found["id"]] = memory_cgroup(text)
    containers = {}
    warnings = []
    for container_id, where in seen.items():
        info = docker_lookup.inspect(container_id)
        if not _label_matches(info.get("labels") or {}, label):
            continue
        name = info.get("name") or container_id[:12]
        if where is None:
            warnings.append(
                f"{name}: no memory cgroup in /proc/<pid>/cgroup; its host memory is not added back"
            )
            continue
        version, path = where
        held = read_held_bytes(cgroup_root, version, path)
        if held is None:
            directory = cgroup_dir(cgroup_root, version, path)
            warnings.append(
                f"{name}: cannot read cgroup v{version} memory figures under {directory}; "
                "its host memory is not added back"
            )
            continue
        containers[name] = {"bytes": held, "cgroup": f"v{version}:{path}"}
    warnings.extend(getattr(docker_lookup, "warnings", []))
    total = sum(entry["bytes"] for entry in containers.values())
    return {"bytes": total, "gib": round(total / GIB, 3), "containers": containers, "warnings": warnings}
