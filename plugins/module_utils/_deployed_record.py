# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The record of what is deployed on a node (``<state dir>/deployed.json``, docs/deployed-record.md).

The stages write their section of it when they configure the node (the plan,
the image, the network, serve's launch); preflight, status, diagnose, restart
and teardown read it instead of parsing the launch script or a unit file back.

A section is replaced only when what it records changed: ``compare`` names the
keys that decide it (the deployed choice), so the plan's predictions of the
run that deployed it are kept while a later run predicts a little differently
(MemAvailable moves between runs). ``recorded_at`` moves only with a change,
so a rerun writes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

SCHEMA = 1


class RecordError(ValueError):
    """A section or value the record cannot hold."""


def load(text: str | None) -> dict[str, Any]:
    """The record in ``text``; an empty one when it is absent, not JSON, or of another schema."""
    try:
        doc = json.loads(text) if text and text.strip() else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("sections"), dict):
        return {"schema": SCHEMA, "sections": {}}
    return doc


def dumps(doc: Mapping[str, Any]) -> str:
    """The file's text: sorted keys, so the same content is the same bytes."""
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _canonical(value: Any) -> Any:
    # Round-trip through JSON: tuples become lists, so a comparison with what
    # was read back from the file is exact.
    return json.loads(json.dumps(value, sort_keys=True))


def update(
    text: str | None,
    *,
    section: str | None,
    data: Mapping[str, Any],
    now: str,
    identity: Mapping[str, Any] | None = None,
    compare: Sequence[str] | None = None,
) -> tuple[dict[str, Any], bool]:
    """The record with ``data`` as ``section`` (or, with no section, as the whole record), and whether it changed.

    ``identity`` (cluster, host) is kept at the top. ``compare`` limits the
    keys of ``data`` that decide whether the section changes; None: all of
    them. ``recorded_at`` (the section's, and the record's) is ``now`` only
    when something changed.
    """
    if not isinstance(data, Mapping):
        raise RecordError(f"the data of a record is a mapping, not {type(data).__name__}")
    new = _canonical(dict(data))
    if "recorded_at" in new:
        raise RecordError("recorded_at is the record's own field; leave it out of the data")
    if section is None:
        old = load_plain(text)
        old_content = {k: v for k, v in old.items() if k != "recorded_at"}
        if old.get("recorded_at") and _same(old_content, new, compare):
            return old, False
        return dict(new, recorded_at=now), True
    if not section or not isinstance(section, str):
        raise RecordError(f"a section is named by a non-empty string, not {section!r}")
    doc = load(text)
    changed = False
    for key, value in _canonical(dict(identity or {})).items():
        if doc.get(key) != value:
            doc[key] = value
            changed = True
    old_section = doc["sections"].get(section)
    old_content = (
        {k: v for k, v in old_section.items() if k != "recorded_at"}
        if isinstance(old_section, dict)
        else None
    )
    if old_content is None or not _same(old_content, new, compare):
        doc["sections"][section] = dict(new, recorded_at=now)
        changed = True
    if changed or "recorded_at" not in doc:
        doc["recorded_at"] = now
        changed = True
    doc["schema"] = SCHEMA
    return doc, changed


def load_plain(text: str | None) -> dict[str, Any]:
    """A whole-file record (the measured record): its mapping, or an empty one."""
    try:
        doc = json.loads(text) if text and text.strip() else None
    except ValueError:
        doc = None
    return doc if isinstance(doc, dict) else {}


def _same(old: Mapping[str, Any] | None, new: Mapping[str, Any], compare: Sequence[str] | None) -> bool:
    if old is None:
        return False
    if compare is None:
        return dict(old) == dict(new)
    return all(old.get(key) == new.get(key) for key in compare)


# -- what the readers take from it ---------------------------------------------


def section(doc: Mapping[str, Any] | None, name: str) -> dict[str, Any]:
    """One section of a loaded record (an empty mapping when it is not there)."""
    value = ((doc or {}).get("sections") or {}).get(name)
    return dict(value) if isinstance(value, Mapping) else {}


def serve_utilization(doc: Mapping[str, Any] | None) -> float | None:
    """The ``--gpu-memory-utilization`` serve was deployed with (the head's record), or None."""
    value = section(doc, "serve").get("gpu_memory_utilization")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def images(doc: Mapping[str, Any] | None) -> list[str]:
    """The image references of the node's cluster, each once.

    The ones its units were deployed with (Ray's, serve's), then the ones an
    upgrade keeps for a rollback (``upgrade_images.kept``, docs/upgrades.md): teardown
    with ``teardown_remove_image`` removes them all, and nothing else removes a kept one.
    """
    found = []
    refs = [section(doc, "image").get("ref"), section(doc, "serve").get("image")]
    kept = section(doc, "upgrade_images").get("kept")
    refs.extend(kept if isinstance(kept, list) else [])
    for ref in refs:
        if isinstance(ref, str) and ref and ref not in found:
            found.append(ref)
    return found


def _number(value: Any) -> float | None:
    return None if isinstance(value, bool) or not isinstance(value, int | float) else float(value)


def plan_limit_bytes(doc: Mapping[str, Any] | None) -> int | None:
    """The node's planned memory limit in bytes (the plan section's ``node.limit_gib``), or None.

    The plan keeps the node's peak use (MemTotal less MemAvailable) under this limit: Ray's
    memory monitor or earlyoom acts above it. A node whose MemAvailable falls under MemTotal
    less this limit is past its plan; the watchdog and the monitoring alert both read it here.
    """
    plan = section(doc, "plan")
    node = plan.get("node") if isinstance(plan.get("node"), Mapping) else {}
    limit = _number(node.get("limit_gib"))
    if limit is None or limit <= 0:
        return None
    return int(limit * (1 << 30))


def memavailable_floor_bytes(doc: Mapping[str, Any] | None, mem_total_bytes: int) -> int | None:
    """The MemAvailable under which the node is past its planned limit, or None without a plan."""
    limit = plan_limit_bytes(doc)
    if limit is None or mem_total_bytes <= 0:
        return None
    return max(0, int(mem_total_bytes) - limit)


def cluster_plan(docs: Mapping[str, Mapping[str, Any] | None]) -> dict[str, Any]:
    """The deployed memory plan of the cluster, from every node's record, in the shape diagnose takes.

    ``docs`` maps each host to its loaded record. The result is what preflight's cluster
    plan holds (``gpu_memory_utilization``, ``utilization_source``, ``fits``, and per node
    its ``peak_gib``, ``limit_gib``, ``recommended_gpu_memory_utilization``), as of the run
    that deployed it: an empty mapping when no node has a plan section.
    """
    nodes = {}
    chosen = {}
    for host, doc in sorted(docs.items()):
        plan = section(doc, "plan")
        if not plan:
            continue
        chosen = chosen or plan
        node = plan.get("node") if isinstance(plan.get("node"), Mapping) else {}
        nodes[host] = {
            key: node.get(key)
            for key in ("role", "fits", "peak_gib", "limit_gib", "recommended_gpu_memory_utilization")
            if key in node
        }
    if not nodes:
        return {}
    fits = [node.get("fits") for node in nodes.values() if isinstance(node.get("fits"), bool)]
    return {
        "gpu_memory_utilization": _number(chosen.get("gpu_memory_utilization")),
        "utilization_source": chosen.get("utilization_source"),
        "fits": all(fits) if fits else None,
        "nodes": nodes,
    }


def summary_lines(docs: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
    """One line per node of what is deployed there: role, image and versions, the plan, when."""
    lines = []
    for host, doc in sorted(docs.items()):
        if not doc or not doc.get("sections"):
            lines.append(f"{host}: no deployed record (never configured by deploy.yml, or before schema 1)")
            continue
        image, plan = section(doc, "image"), section(doc, "plan")
        versions = ", ".join(
            f"{name} {image[key]}"
            for name, key in (("vLLM", "vllm_version"), ("Ray", "ray_version"), ("NCCL", "nccl_version"))
            if image.get(key)
        )
        node = plan.get("node") if isinstance(plan.get("node"), Mapping) else {}
        peak, limit = _number(node.get("peak_gib")), _number(node.get("limit_gib"))
        figures = f", peak {peak:.2f} of {limit:.2f} GiB" if peak is not None and limit is not None else ""
        util = _number(plan.get("gpu_memory_utilization"))
        plan_text = (
            f"utilization {util} ({plan.get('utilization_source') or '?'}){figures}"
            if util is not None
            else "no plan"
        )
        lines.append(
            f"{host} ({doc.get('role') or '?'}): image {image.get('ref') or '?'}"
            + (f" [{versions}]" if versions else "")
            + f"; {plan_text}; recorded {doc.get('recorded_at') or '?'}"
        )
    return lines
