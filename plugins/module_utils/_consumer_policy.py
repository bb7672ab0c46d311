# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Which GPU consumers are stale: the preflight policy, testable without Ansible.

A consumer is one entry of ``gpu_consumers_info``'s ``consumers``. The verdicts:

- ``own``: its container carries the project's label for this cluster. A rerun on
  a serving cluster sees our own vLLM and Ray; they must never fail preflight.
- ``allowed``: it matches an allowlist entry (container name, image or process
  name; each a regular expression searched in the value).
- ``graphics``: a graphics-only process (type ``G``: Xorg, gnome-shell, a browser
  on a desktop Spark). Reported, and stale only when the node is ``headless``.
- ``stale``: everything else. Preflight fails on these.
"""

from __future__ import annotations

import re

# Every container the project starts carries this label, valued with the
# cluster's name (sparkops_cluster_name); the one definition of it.
LABEL_KEY = "io.sparkops.vllm.cluster"
ALLOWLIST_KEYS = ("container", "image", "process")
GIB = 1024


def _matches(entry, consumer):
    container = consumer.get("container") or {}
    values = {
        "container": container.get("name") or "",
        "image": container.get("image") or "",
        "process": consumer.get("process_name") or "",
    }
    keys = [key for key in ALLOWLIST_KEYS if entry.get(key)]
    if not keys or (not container and {"container", "image"} & set(keys)):
        # A container or image pattern never matches a bare process.
        return False
    return all(re.search(entry[key], values[key]) for key in keys)


def validate_allowlist(allowlist):
    """Return a list of problems with the allowlist entries (empty when valid)."""
    problems = []
    for position, entry in enumerate(allowlist or []):
        if not isinstance(entry, dict) or not any(entry.get(key) for key in ALLOWLIST_KEYS):
            problems.append(
                f"entry {position} ({entry!r}) must be a mapping with at least one of "
                f"{', '.join(ALLOWLIST_KEYS)}"
            )
            continue
        unknown = sorted(set(entry) - set(ALLOWLIST_KEYS) - {"reason"})
        if unknown:
            problems.append(f"entry {position} has unknown keys {unknown}; use {', '.join(ALLOWLIST_KEYS)}")
        for key in ALLOWLIST_KEYS:
            if entry.get(key):
                try:
                    re.compile(entry[key])
                except re.error as err:
                    problems.append(
                        f"entry {position} {key} {entry[key]!r} is not a regular expression: {err}"
                    )
    return problems


def classify(consumers, *, label_key, cluster_name, allowlist=None, headless=False):
    """Return a copy of each consumer with ``verdict`` and ``why`` added."""
    result = []
    for consumer in consumers or []:
        container = consumer.get("container") or {}
        labels = container.get("labels") or {}
        kind = (consumer.get("type") or "C").upper()
        if labels.get(label_key) == cluster_name:
            verdict, why = "own", f"container labelled {label_key}={cluster_name}"
        else:
            entry = next((e for e in allowlist or [] if isinstance(e, dict) and _matches(e, consumer)), None)
            if entry is not None:
                verdict, why = "allowed", f"allowlisted ({entry.get('reason') or _describe_entry(entry)})"
            elif kind == "G" and not headless:
                verdict, why = "graphics", "graphics process (set preflight_headless: true to refuse it)"
            else:
                verdict, why = "stale", "not started by this cluster and not allowlisted"
        result.append({**consumer, "verdict": verdict, "why": why})
    return result


def _describe_entry(entry):
    return ", ".join(f"{key}~{entry[key]}" for key in ALLOWLIST_KEYS if entry.get(key))


def describe_memory(mib):
    if mib is None:
        return "memory unknown"
    if mib >= GIB:
        return f"{mib} MiB ({mib / GIB:.1f} GiB)"
    return f"{mib} MiB"


def stop_command(consumer):
    """The command an operator runs to stop this consumer, or a note when it has no container."""
    container = consumer.get("container")
    if not container:
        return (
            f"no container: a bare process; stop it where it was started (kill {consumer.get('pid')} "
            "only if you know what it is)"
        )
    ref = container.get("name") or container.get("id", "")[:12]
    labels = container.get("labels") or {}
    project = labels.get("com.docker.compose.project")
    service = labels.get("com.docker.compose.service")
    if project and service:
        return f"docker compose -p {project} stop {service}"
    return f"docker update --restart=no {ref} && docker stop {ref}"


def report(host, classified):
    """Human lines for one host: one line per stale consumer, with the fix."""
    lines = []
    for consumer in classified:
        if consumer["verdict"] != "stale":
            continue
        container = consumer.get("container")
        where = (
            f"container {container.get('name') or container.get('id', '')[:12]} "
            f"(image {container.get('image') or 'unknown'})"
            if container
            else "no container"
        )
        lines.append(
            f"{host}: {where}, PID {consumer.get('pid')} {consumer.get('process_name') or '?'}, "
            f"{describe_memory(consumer.get('used_memory_mib'))} of GPU memory. "
            f"Stop it: {stop_command(consumer)}"
        )
    return lines
