# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The cluster's memory plan, from the per-node plans of ``memory_plan``.

vLLM runs every rank with the same ``--gpu-memory-utilization``, and its KV cache is
as large as the smallest rank's. So the preflight role plans every node, takes the
smallest recommendation as the cluster's utilization (or the given one), plans every
node again at that value, and records one plan for the launch-script stage. This file
holds that decision and the words around it (failure report, summary), so they can be
tested without Ansible. The arithmetic stays in ``_memory_plan.py``.
"""

from __future__ import annotations

import json
import re

# Which inventory variable moves each lever the planner names.
LEVER_SETTINGS = {
    "gpu_memory_utilization": "sparkops_gpu_memory_utilization",
    "max_model_len": "sparkops_max_model_len",
    "cuda_graphs": "sparkops_cuda_graphs",
    "tensor_parallel_size": "sparkops_tensor_parallel_size",
    "ray_memory_threshold": "sparkops_ray_memory_threshold",
    "ray_memory_monitor": "sparkops_ray_memory_monitor",
}

MEASURED_KEYS = ("weights_gib", "activation_gib", "non_torch_gib", "cuda_graph_gib")


class ClusterPlanError(ValueError):
    """Input the preflight role should never pass; the message says what is wrong."""


def measured_from_record(text, model_id, tensor_parallel_size, pipeline_parallel_size, vllm_version):
    """The measured figures of the last start, when they apply to this deployment.

    ``text`` is the content of the head's measured file (see roles/preflight/README.md):
    ``{"model_id", "tensor_parallel_size", "pipeline_parallel_size", "vllm_version",
    "recorded_at", "measured": {weights_gib, activation_gib, non_torch_gib,
    cuda_graph_gib}}``, per rank. Returns ``{"measured": {...}, "note": str}``; figures
    taken at another model, TP, PP or vLLM release are not used, and the note says why.
    """
    if not text or not str(text).strip():
        return {"measured": {}, "note": "no figures from a previous start: the planner's defaults are used"}
    try:
        record = json.loads(text)
    except ValueError as exc:
        return {"measured": {}, "note": f"the measured file is not JSON ({exc}): the defaults are used"}
    if not isinstance(record, dict) or not isinstance(record.get("measured"), dict):
        return {"measured": {}, "note": "the measured file has no 'measured' mapping: the defaults are used"}
    wanted = {
        "model_id": model_id,
        "tensor_parallel_size": int(tensor_parallel_size),
        "pipeline_parallel_size": int(pipeline_parallel_size),
        "vllm_version": None if vllm_version is None else str(vllm_version),
    }
    for key, value in wanted.items():
        recorded = record.get(key)
        if key.endswith("_size") and recorded is not None:
            try:
                recorded = int(recorded)
            except (TypeError, ValueError):
                recorded = None
        if recorded != value:
            return {
                "measured": {},
                "note": f"the last start's figures were measured with {key} {record.get(key)!r}, "
                f"this deployment uses {value!r}: the defaults are used",
            }
    measured = {}
    for key in MEASURED_KEYS:
        value = record["measured"].get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            measured[key] = float(value)
    when = record.get("recorded_at") or "an unknown time"
    if not measured:
        return {
            "measured": {},
            "note": f"the measured file of {when} holds no figures: the defaults are used",
        }
    return {
        "measured": measured,
        "note": f"figures measured at the last start ({when}): {', '.join(measured)}",
    }


# A rerun keeps the deployed utilization while it fits on every node (at most the
# smallest recommendation), however far under it: raising it would restart vLLM
# on a routine rerun, and the first rerun after a start always could, because the
# figures that start measured (the measured record) are smaller than the planner's
# defaults. The higher value is reported (``recommended``) with the one-run lever
# that takes it; only a value that no longer fits is planned again.
# A fresh choice sits this far under the smallest recommendation, so that the
# same noise pushing a recommendation down by one step keeps the deployed value.
FRESH_STEP = 0.01


def choose_utilization(recommendations, given=None, current=None):
    """``{"value", "source", "limited_by", "recommended"}``: the given value, the deployed one, or a fresh one.

    ``recommendations`` maps host to its recommended utilization (None: nothing fits
    there). With none given, every host must have a recommendation. ``current`` is the
    utilization serve was deployed with (the deployed record): it is kept while it is at
    most the smallest recommendation, so a rerun changes nothing. ``recommended`` is the
    value a fresh plan would take (one step under the smallest recommendation), also
    when the deployed or given value is used, so the report can offer it.
    """
    if given is not None:
        fresh = _fresh(recommendations) if recommendations and None not in recommendations.values() else None
        return {"value": round(float(given), 2), "source": "given", "limited_by": None, "recommended": fresh}
    if not recommendations:
        raise ClusterPlanError("no node was planned: the play has no hosts")
    missing = sorted(h for h, r in recommendations.items() if r is None)
    if missing:
        raise ClusterPlanError(
            "no utilization fits on "
            + ", ".join(missing)
            + ": their plans must pass before a cluster value exists"
        )
    host = min(sorted(recommendations), key=lambda h: recommendations[h])
    smallest = float(recommendations[host])
    fresh = _fresh(recommendations)
    if current is not None and 0 < float(current) <= smallest:
        return {"value": round(float(current), 2), "source": "kept", "limited_by": host, "recommended": fresh}
    return {"value": fresh, "source": "recommended", "limited_by": host, "recommended": fresh}


def _fresh(recommendations):
    """One step under the smallest recommendation (never under 0.01)."""
    return round(max(min(float(r) for r in recommendations.values()) - FRESH_STEP, 0.01), 2)


def _lever_line(lever):
    setting = LEVER_SETTINGS.get(lever.get("lever"), lever.get("lever"))
    value = lever.get("value")
    shown = json.dumps(value) if isinstance(value, bool) else value
    closes = "" if lever.get("closes_gap") else " (not enough on its own)"
    return f"{setting}: {shown}{closes} -> {lever.get('detail')}"


def _limit_words(plan):
    b = plan.get("breakdown") or {}
    threshold = b.get("ray_memory_threshold")
    total = b.get("system_memory_total_gib")
    if threshold is not None and total is not None:
        return f"Ray's memory monitor kills at {threshold} x {total:.2f} GiB MemTotal"
    if total is not None:
        return "MemTotal; Ray's memory monitor is off"
    return "the device's memory"


def failure_report(host, role, plan, utilization_source=None):
    """Lines explaining why ``plan`` (a memory_plan result) does not fit on ``host``."""
    b = plan.get("breakdown") or {}
    u = b.get("gpu_memory_utilization")
    if plan.get("gpu_memory_utilization") is None and plan.get("recommended_gpu_memory_utilization") is None:
        headline = f"{host} ({role}): no --gpu-memory-utilization fits this node; the plan at {u} shows why"
    else:
        why = {
            "given": " (sparkops_gpu_memory_utilization)",
            "recommended": " (the cluster's value: the smallest node recommendation)",
        }.get(utilization_source, "")
        headline = f"{host} ({role}): the memory plan does not fit at --gpu-memory-utilization {u}{why}"
    lines = [headline]
    lines.append(
        f"  KV cache {plan.get('kv_cache_gib')} GiB per rank; peak {plan.get('peak_gib')} GiB vs limit "
        f"{plan.get('limit_gib')} GiB ({_limit_words(plan)}); shortfall {plan.get('shortfall_gib')} GiB"
    )
    lines.append(
        f"  claim {b.get('claim_gib')} GiB = weights {b.get('weights_gib')}"
        f" + activation {b.get('activation_gib')}"
        f" + non-torch {b.get('non_torch_gib')} + graphs in claim {b.get('cuda_graph_in_claim_gib')}"
        f" + KV {b.get('kv_cache_gib')}; outside it: in use before launch {b.get('used_before_launch_gib')},"
        f" CUDA context {b.get('cuda_context_gib')}, NCCL {b.get('nccl_gib', 0.0)}, graph capture {b.get('cuda_graph_outside_claim_gib')},"
        f" Ray and host processes {b.get('ray_and_host_processes_gib')}"
    )
    lines.append("  why:")
    lines.extend(f"    - {reason}" for reason in plan.get("reasons") or [])
    levers = plan.get("levers") or []
    if levers:
        lines.append("  levers (inventory setting: value -> what it does):")
        lines.extend(f"    - {_lever_line(lever)}" for lever in levers)
    return lines


def _release(version):
    match = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", str(version or ""))
    return None if match is None else tuple(int(part or 0) for part in match.groups())


def release_of(version):
    """The X.Y.Z release of a vLLM version string (``0.17.1+sparkops.lab`` -> ``0.17.1``), or None."""
    release = _release(version)
    return None if release is None else ".".join(map(str, release))


def version_mismatch(image_version, planned_version, host="the head"):
    """The image's vLLM decides: a message when it is not the release the plan assumed, else "".

    The plan's model depends on the vLLM release (CUDA graphs inside the claim from 0.21,
    MemAvailable at the startup check on unified memory from about 0.12), and preflight plans
    with ``sparkops_vllm_version`` before the image stage has looked into the image. So a later
    stage compares the two releases (X.Y.Z; pre-release and local tags such as ``rc1`` or
    ``+sparkops.lab`` do not count) and fails with the fix. Nothing to compare is no mismatch.
    """
    image, planned = _release(image_version), _release(planned_version)
    if image is None or planned is None or image == planned:
        return ""
    found = ".".join(map(str, image))
    return (
        f"{host}: the image holds vLLM {image_version}, but the memory plan was made for sparkops_vllm_version "
        f"{planned_version}: the release decides whether CUDA graphs sit inside the claim and which free memory "
        f'vLLM checks at start. Fix: set sparkops_vllm_version: "{found}" (group_vars/all/vllm.yml) and rerun '
        "from preflight, or deploy an image of vLLM " + str(planned_version) + "."
    )


def cluster_plan(nodes, choice, notes=None):
    """The cluster's plan from every node's plan at the cluster's utilization.

    ``nodes`` maps host to ``{"role", "recommended", "plan"}`` where ``plan`` is the
    memory_plan result at ``choice["value"]``. Returns the fact recorded for later
    stages: utilization, vllm_args, env, the smallest KV cache and per-node figures.
    """
    if not nodes:
        raise ClusterPlanError("no node was planned: the play has no hosts")
    per_node = {}
    for host in sorted(nodes):
        node = nodes[host]
        plan = node["plan"]
        per_node[host] = {
            "role": node["role"],
            "recommended_gpu_memory_utilization": node.get("recommended"),
            "fits": bool(plan.get("fits")),
            "peak_gib": plan.get("peak_gib"),
            "limit_gib": plan.get("limit_gib"),
            "headroom_gib": (
                None
                if plan.get("peak_gib") is None or plan.get("limit_gib") is None
                else round(plan["limit_gib"] - plan["peak_gib"], 2)
            ),
            "kv_cache_gib": plan.get("kv_cache_gib"),
            "kv_cache_memory_bytes": plan.get("kv_cache_memory_bytes"),
            "kv_cache_tokens": plan.get("kv_cache_tokens"),
            "kv_cache_bytes_per_token": plan.get("kv_cache_bytes_per_token"),
            "sources": (plan.get("breakdown") or {}).get("sources", {}),
        }
    smallest = min(per_node, key=lambda h: (per_node[h]["kv_cache_gib"] or 0.0, h))
    first = nodes[sorted(nodes)[0]]["plan"]
    envs = [nodes[h]["plan"].get("env") or {} for h in sorted(nodes)]
    env = {}
    for item in envs:
        env.update(item)
    risks = []
    for host in sorted(nodes):
        for risk in nodes[host]["plan"].get("risks") or []:
            if risk not in risks:
                risks.append(risk)
    tokens = [n["kv_cache_tokens"] for n in per_node.values()]
    guards = [nodes[h]["plan"].get("earlyoom_args") for h in sorted(nodes)]
    return {
        "fits": all(n["fits"] for n in per_node.values()),
        "gpu_memory_utilization": choice["value"],
        "utilization_source": choice["source"],
        "limited_by": choice.get("limited_by"),
        "recommended_gpu_memory_utilization": choice.get("recommended"),
        "kv_cache_gib": per_node[smallest]["kv_cache_gib"],
        "kv_cache_memory_bytes": per_node[smallest]["kv_cache_memory_bytes"],
        "kv_cache_tokens": None if any(t is None for t in tokens) else min(tokens),
        "vllm_args": list(first.get("vllm_args") or []),
        "env": env,
        "ray_memory_monitor": "RAY_memory_monitor_refresh_ms" not in env,
        # The guard the plan's limit assumes (one figure on every node: the same inputs).
        "earlyoom_args": next((g for g in guards if g), None),
        "drop_caches": any(bool(nodes[h]["plan"].get("drop_caches")) for h in sorted(nodes)),
        "nodes": per_node,
        "risks": risks,
        "notes": list(notes or []),
    }


def summary_lines(plan, cluster_name=None, max_model_len=None):
    """One screen: the chosen utilization and flags, per node peak/limit/KV/tokens, env."""
    name = f" of cluster {cluster_name}" if cluster_name else ""
    u = plan["gpu_memory_utilization"]
    if plan["utilization_source"] == "recommended":
        how = f"recommended: one step under the smallest of the nodes' recommendations, set by {plan['limited_by']}"
    elif plan["utilization_source"] == "kept":
        how = f"kept: the deployed value still fits (the smallest recommendation is {plan['limited_by']}'s)"
    else:
        how = "given in sparkops_gpu_memory_utilization"
    lines = [
        f"Memory plan{name}: {'fits' if plan['fits'] else 'DOES NOT FIT'}",
        f"--gpu-memory-utilization {u:.2f} ({how})",
    ]
    fresh = plan.get("recommended_gpu_memory_utilization")
    if plan["utilization_source"] == "kept" and fresh is not None and fresh > u:
        lines.append(
            f"a fresh plan would take {fresh:.2f} (more KV cache); the deployed {u:.2f} is kept so a rerun "
            f"restarts nothing: to take it, run deploy.yml once with "
            f"-e sparkops_gpu_memory_utilization={fresh:.2f} (restarts serve; later reruns keep it)"
        )
    lines += [
        f"{'node':<16} {'role':<7} {'recommended':>11} {'peak GiB':>9} {'limit GiB':>9} {'headroom':>8} "
        f"{'KV GiB':>7} {'KV tokens':>10}",
    ]
    for host, node in plan["nodes"].items():
        rec = node["recommended_gpu_memory_utilization"]
        tokens = node["kv_cache_tokens"]
        lines.append(
            f"{host:<16} {node['role']:<7} {('-' if rec is None else f'{rec:.2f}'):>11} "
            f"{node['peak_gib']:>9.2f} {node['limit_gib']:>9.2f} {node['headroom_gib']:>8.2f} "
            f"{node['kv_cache_gib']:>7.2f} {('unknown' if tokens is None else tokens):>10}"
        )
    kv = f"KV cache per rank (vLLM uses the smallest): {plan['kv_cache_gib']:.2f} GiB"
    if plan["kv_cache_tokens"] is None:
        kv += (
            ", tokens unknown: no config.json at sparkops_model_path yet, so"
            + (f" max_model_len {max_model_len}" if max_model_len else " max_model_len")
            + " is not checked against it"
        )
    else:
        kv += f", {plan['kv_cache_tokens']} tokens"
    lines.append(kv)
    lines.append("vLLM args: " + " ".join(plan["vllm_args"]))
    if plan["env"]:
        lines.append("env: " + " ".join(f"{k}={v}" for k, v in sorted(plan["env"].items())))
    else:
        lines.append(
            "env: nothing to set (RAY_memory_monitor_refresh_ms unset: Ray's memory monitor stays on)"
        )
    if plan["ray_memory_monitor"]:
        lines.append("earlyoom: not needed, Ray's memory monitor guards the nodes")
    else:
        lines.append(
            "earlyoom: Ray's memory monitor is off, the ray_cluster stage runs earlyoom on every node with "
            f"EARLYOOM_ARGS={plan.get('earlyoom_args')} (the limits above are its SIGTERM threshold)"
        )
    if plan.get("drop_caches"):
        lines.append(
            "page cache: to be dropped right before each Ray unit start and, on every node, before serve "
            "starts (sync; echo 1 > /proc/sys/vm/drop_caches); the serve summary says where it was"
        )
    lines.extend(f"note: {note}" for note in plan["notes"])
    lines.extend(f"risk: {risk}" for risk in plan["risks"])
    return lines
