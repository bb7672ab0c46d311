# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The cluster's health from what status.yml gathered on every node: one record per node, a verdict, a table.

Each node's raw facts (what the commands and modules of the cluster_status role returned, unparsed) go in;
out come the node records (``reachable``, ``healthy``, ``problems`` and the fields of the table), the
cluster's record (endpoint, health, served model) and the report status.yml prints and writes as JSON.
Every problem names the host, the value found, what was expected and the fix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ansible_collections.sparkops.vllm.plugins.module_utils import _deployed_record as deployed_record
from ansible_collections.sparkops.vllm.plugins.module_utils import _nccl_transport as nccl_transport
from ansible_collections.sparkops.vllm.plugins.module_utils import _ib_recheck, _watchdog

GIB = 1024**3

# -- parsers of what the nodes printed ----------------------------------------


def parse_ip_addr(text: str) -> dict[str, Any]:
    """``ip -j addr show dev IF`` to ``{addresses: [a.b.c.d/nn, ...], mtu, state}``; empty dict when unreadable."""
    try:
        links = json.loads(text or "")
    except ValueError:
        return {}
    if not isinstance(links, list) or not links:
        return {}
    link = links[0]
    addresses = [
        f"{item.get('local')}/{item.get('prefixlen')}"
        for item in link.get("addr_info") or []
        if item.get("family") == "inet" and item.get("local")
    ]
    return {"addresses": addresses, "mtu": link.get("mtu"), "state": link.get("operstate")}


def parse_systemctl_show(text: str) -> dict[str, str]:
    """``systemctl show -p A,B UNIT`` output (``Key=value`` lines) to a dict."""
    values = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values


def parse_ray_nodes(text: str) -> list[dict[str, Any]] | None:
    """The output of roles/ray_cluster/files/ray_nodes.py (a JSON list); None when it is not one."""
    try:
        nodes = json.loads((text or "").strip().splitlines()[-1]) if (text or "").strip() else None
    except ValueError:
        return None
    return nodes if isinstance(nodes, list) else None


# -- one node ----------------------------------------------------------------


def _gib(value: float | int | None) -> float | None:
    return None if value is None else round(float(value) / GIB, 2)


def _consumer_label(item: Mapping[str, Any]) -> str:
    container = item.get("container") or {}
    name = container.get("name") or (container.get("id") or "")[:12]
    where = f" in {name}" if name else ""
    used = item.get("used_memory_mib")
    return (
        f"PID {item.get('pid')} {item.get('process_name')}{where} ({used if used is not None else '?'} MiB)"
    )


def _ib(node: dict, raw: Mapping[str, Any], problems: list[str]) -> None:
    ib = raw.get("ib") or {}
    interface = ib.get("interface")
    expected_address = ib.get("expected_address")
    expected_mtu = ib.get("expected_mtu")
    node.update(ib_interface=interface, ib_address_expected=expected_address, ib_mtu_expected=expected_mtu)
    parsed = parse_ip_addr(ib.get("stdout", "")) if ib.get("rc", 1) == 0 else {}
    addresses = parsed.get("addresses") or []
    node["ib_addresses"] = addresses
    node["ib_address"] = next(
        (a.split("/")[0] for a in addresses if a.split("/")[0] == expected_address),
        addresses[0].split("/")[0] if addresses else None,
    )
    node["ib_mtu"] = parsed.get("mtu")
    node["ib_state"] = parsed.get("state")
    host = node["host"]
    if not parsed:
        problems.append(
            f"{host}: interface {interface} not found ({(ib.get('stderr') or '').strip() or 'no output'}). "
            f"Fix: check ib_interface for {host} (`ip -br link` on the node) and rerun the roce_network stage."
        )
        return
    if expected_address and expected_address not in [a.split("/")[0] for a in addresses]:
        problems.append(
            f"{host}: {interface} holds {', '.join(addresses) or 'no IPv4 address'}, not its ib_address "
            f"{expected_address}. Fix: rerun the roce_network stage (`ansible-playbook deploy.yml --tags "
            f"roce_network`), or correct ib_address in the inventory."
        )
    if expected_mtu is not None and parsed.get("mtu") != int(expected_mtu):
        problems.append(
            f"{host}: {interface} has MTU {parsed.get('mtu')}, the inventory's ib_mtu is {expected_mtu}. "
            f"Fix: rerun the roce_network stage; a switch port with a smaller MTU drops RoCE frames."
        )


def _link_recheck(node: dict, raw: Mapping[str, Any], problems: list[str], *, address_ok: bool) -> None:
    """What the Ray unit's re-check (module_utils/_ib_recheck.py) finds, and other netplan files of ib_interface.

    The inventory's address and MTU are _ib's; the re-check adds the deployed prefix and the GID NCCL
    will use, so its address problems count only where _ib found none (one problem, one line).
    """
    ib = raw.get("ib") or {}
    host = node["host"]
    recheck = ib.get("recheck") or {}
    try:
        result = json.loads((recheck.get("stdout") or "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        result = None
    if not isinstance(result, dict):
        reason = (recheck.get("stderr") or recheck.get("stdout") or "").strip() or "no output"
        problems.append(
            f"{host}: the link re-check did not run ({reason}). Fix: rerun the ray_cluster stage "
            f"(`ansible-playbook deploy.yml --tags roce_network,ray_cluster`), which ships it to the node."
        )
        node["ib_recheck"] = None
        return
    node["nccl_gid_summary"] = result.get("nccl_gid_summary")
    if result.get("error"):
        found = list(result.get("problems") or [])
    else:
        found = list(result.get("gid_problems") or []) + (
            list(result.get("address_problems") or []) if address_ok else []
        )
    found = [p.removeprefix(f"{_ib_recheck.PREFIX}: ") for p in found]
    node["ib_recheck"] = found
    problems.extend(found)
    netplan = ib.get("netplan") or {}
    node["netplan_conflicts"] = list(netplan.get("errors") or [])
    problems.extend(f"{host}: {message}" for message in netplan.get("errors") or [])


def _gpu(node: dict, raw: Mapping[str, Any], problems: list[str]) -> None:
    gpu = raw.get("gpu") or {}
    host = node["host"]
    if gpu.get("failed"):
        node.update(driver_version=None, gpu_consumers=[], own_consumers=0, stale_consumers=0)
        problems.append(f"{host}: the GPU cannot be read: {gpu.get('msg')}. See docs/runbooks/ (driver).")
        return
    consumers = [
        {
            "pid": item.get("pid"),
            "process_name": item.get("process_name"),
            "container": (item.get("container") or {}).get("name"),
            "used_memory_mib": item.get("used_memory_mib"),
            "verdict": item.get("verdict"),
            "why": item.get("why"),
        }
        for item in gpu.get("consumers") or []
    ]
    node["driver_version"] = gpu.get("driver_version")
    node["gpu_consumers"] = consumers
    node["own_consumers"] = sum(1 for item in consumers if item["verdict"] == "own")
    stale = [item for item in gpu.get("consumers") or [] if item.get("verdict") == "stale"]
    node["stale_consumers"] = len(stale)
    for item in stale:
        name = (item.get("container") or {}).get("name")
        stop = (
            f"`ansible-playbook playbooks/reclaim.yml -e reclaim_confirm={name}` stops the container"
            if name
            else f"`kill {item.get('pid')}` on {host}: it runs in no container"
        )
        problems.append(
            f"{host}: stale GPU consumer {_consumer_label(item)}: {item.get('why')}. Fix: stop it "
            f"({stop}), or allowlist it in preflight_gpu_consumer_allowlist."
        )


def _memory(node: dict, raw: Mapping[str, Any], ctx: Mapping[str, Any], problems: list[str]) -> None:
    host = node["host"]
    memory = raw.get("memory") or {}
    gpu = raw.get("gpu") or {}
    info = memory.get("memory") or {}
    if memory.get("failed") or not info:
        node.update(mem_available_gib=None, mem_total_gib=None, mem_needed_gib=None)
        problems.append(f"{host}: /proc/meminfo cannot be read: {memory.get('msg')}.")
        return
    total = info.get("total_bytes") or 0
    available = info.get("available_bytes") or 0
    gpus = gpu.get("gpus") or []
    unified = any(item.get("unified_memory") for item in gpus) or not gpus
    own_mib = sum(
        item.get("used_memory_mib") or 0
        for item in gpu.get("consumers") or []
        if item.get("verdict") == "own"
    )
    if unified:
        device_total = total
        device_room = available + own_mib * 1024**2
    else:
        totals = [item.get("memory_total_mib") or 0 for item in gpus]
        used = [item.get("memory_used_mib") or 0 for item in gpus]
        device_total = min(totals) * 1024**2
        device_room = (min(totals) - max(used) + own_mib) * 1024**2
    utilization = ctx.get("utilization")
    margin = float(ctx.get("memory_margin_gib") or 0)
    needed = utilization * device_total if utilization is not None else None
    node.update(
        mem_total_gib=_gib(total),
        mem_available_gib=_gib(available),
        mem_own_gib=round(own_mib / 1024, 2),
        mem_needed_gib=_gib(needed),
        gpu_memory_utilization=utilization,
    )
    if needed is not None and device_room < needed + margin * GIB:
        problems.append(
            f"{host}: MemAvailable {_gib(available)} GiB (+ {round(own_mib / 1024, 2)} GiB held by this cluster's "
            f"own containers) is below the plan's {_gib(needed)} GiB (gpu_memory_utilization {utilization} of "
            f"{_gib(device_total)} GiB, from {ctx.get('utilization_source')}) plus the {margin} GiB margin: vLLM "
            f"would refuse to start on it. Fix: stop what else holds memory (stale consumers, page cache: "
            f"`sync; echo 3 > /proc/sys/vm/drop_caches`), or rerun deploy.yml so the memory plan picks a "
            f"utilization that fits."
        )
    if ctx.get("ray_memory_monitor") and total:
        threshold = float(ctx.get("ray_memory_threshold") or 0.95)
        used_fraction = (total - available) / total
        node["ray_memory_headroom_gib"] = _gib(available - (1 - threshold) * total)
        if used_fraction >= threshold:
            problems.append(
                f"{host}: {round(used_fraction * 100, 1)}% of memory is in use, at or over Ray's memory threshold "
                f"{threshold}: Ray's monitor kills workers now. Fix: stop what else holds memory, or raise "
                f"sparkops_ray_memory_threshold; see docs/runbooks/ (Ray OOM kill)."
            )


def _unit(raw_unit: Mapping[str, Any] | None) -> dict[str, Any]:
    values = parse_systemctl_show((raw_unit or {}).get("stdout", ""))
    state = values.get("ActiveState") or "unknown"
    if values.get("LoadState") == "not-found":
        state = "not-installed"
    return {
        "name": (raw_unit or {}).get("name"),
        "state": state,
        "sub_state": values.get("SubState"),
        "restarts": int(values["NRestarts"]) if values.get("NRestarts", "").isdigit() else None,
    }


def _units(node: dict, raw: Mapping[str, Any], problems: list[str]) -> None:
    host = node["host"]
    for key in ("ray_unit", "serve_unit"):
        if raw.get(key) is None:
            continue
        unit = _unit(raw[key])
        node[key] = unit["name"]
        node[f"{key}_state"] = unit["state"]
        node[f"{key}_restarts"] = unit["restarts"]
        if unit["state"] != "active":
            what = "not installed (run deploy.yml)" if unit["state"] == "not-installed" else unit["state"]
            problems.append(
                f"{host}: {unit['name']} is {what}. Fix: `systemctl start {unit['name']}` on {host} and read "
                f"`journalctl -u {unit['name']}`, or run `ansible-playbook playbooks/diagnose.yml` for the cause."
            )


def _ray_count(node: dict, raw: Mapping[str, Any], ctx: Mapping[str, Any], problems: list[str]) -> None:
    host = node["host"]
    ray = ctx.get("ray_nodes") or {}
    nodes = ray.get("nodes")
    expected = (raw.get("ib") or {}).get("expected_address")
    if nodes is None:
        node["ray_counted"] = None
        return
    mine = [item for item in nodes if item.get("ip") == expected]
    node["ray_counted"] = bool(mine)
    node["ray_gpus"] = sum(float(item.get("gpus") or 0) for item in mine)
    if not mine:
        management = raw.get("ansible_host")
        wrong = [item for item in nodes if management and item.get("ip") == management]
        why = (
            f" Ray counts it by its management address {management} instead: the unit's --node-ip-address"
            if wrong
            else ""
        )
        problems.append(
            f"{host}: Ray does not count the node by its ib_address {expected} (Ray's alive nodes: "
            f"{', '.join(item.get('ip', '?') for item in nodes) or 'none'}).{why} Fix: `systemctl restart "
            f"{node.get('ray_unit')}` on {host}; if it stays out, run playbooks/diagnose.yml (wrong node IP, firewall)."
        )
    elif node["ray_gpus"] < float(ctx.get("gpus_per_node") or 0):
        problems.append(
            f"{host}: Ray counts {node['ray_gpus']:g} GPU(s) on the node, sparkops_gpus_per_node is "
            f"{ctx.get('gpus_per_node')}. Fix: restart {node.get('ray_unit')} on {host} after checking `nvidia-smi`."
        )


def _image(node: dict, raw: Mapping[str, Any], ctx: Mapping[str, Any], problems: list[str]) -> None:
    host = node["host"]
    image = raw.get("image") or {}
    node["image"] = image.get("ref") or None
    node["image_id"] = (image.get("id") or "").strip() or None
    node["running_image_id"] = (image.get("running_id") or "").strip() or None
    expected = ctx.get("expected_image_id") or None
    node["image_id_expected"] = expected
    if not node["image"]:
        problems.append(
            f"{host}: no image in the node's deployed record (deployed.json). Fix: run deploy.yml."
        )
        return
    if not node["image_id"]:
        problems.append(
            f"{host}: the node holds no image {node['image']}. Fix: rerun the vllm_image stage "
            f"(`ansible-playbook deploy.yml --tags vllm_image`)."
        )
        return
    if expected and node["image_id"] != expected:
        problems.append(
            f"{host}: image {node['image']} is {node['image_id']}, not the expected {expected}. Fix: rerun the "
            f"vllm_image stage (set vllm_image_fix_mismatch: true to send the head's image)."
        )
    if node["running_image_id"] and node["running_image_id"] != node["image_id"]:
        problems.append(
            f"{host}: {node.get('ray_unit')} runs image {node['running_image_id']}, but {node['image']} is now "
            f"{node['image_id']}. Fix: `ansible-playbook deploy.yml` restarts it on the new image."
        )


def _manifest(node: dict, raw: Mapping[str, Any], problems: list[str]) -> None:
    host = node["host"]
    manifest = raw.get("manifest") or {}
    if manifest.get("disabled"):
        node["model"] = "not checked"
        return
    if manifest.get("skipped"):
        node["model"] = "unknown"
        node["model_problem"] = manifest.get("msg")
        problems.append(f"{host}: the model manifest cannot be checked: {manifest.get('msg')}")
        return
    if manifest.get("failed"):
        node["model"] = "error"
        problems.append(
            f"{host}: the model cannot be read: {manifest.get('msg')}. Fix: rerun the model_sync stage "
            f"(`ansible-playbook deploy.yml --tags model_sync`)."
        )
        return
    mismatches = manifest.get("mismatches") or []
    node["model_files"] = manifest.get("files")
    node["model_bytes"] = manifest.get("total_bytes")
    node["model_mismatches"] = [item.get("path") for item in mismatches]
    if mismatches:
        node["model"] = f"{len(mismatches)} differ"
        shown = ", ".join(f"{item.get('path')} ({item.get('reason')})" for item in mismatches[:5])
        more = f" and {len(mismatches) - 5} more" if len(mismatches) > 5 else ""
        problems.append(
            f"{host}: {len(mismatches)} model file(s) differ from the head's manifest: {shown}{more}. Fix: rerun "
            f"the model_sync stage (`ansible-playbook deploy.yml --tags model_sync`)."
        )
    elif manifest.get("hashed"):
        hashed = manifest["hashed"]
        node["model"] = "unrecorded"
        problems.append(
            f"{host}: the model's files differ from the manifest on disk ({len(hashed)} file(s) new or changed"
            f"{': ' + ', '.join(hashed[:3]) if hashed else ''}). Fix: rerun the model_sync stage, which records "
            f"the manifest and copies the model to the workers again."
        )
    else:
        node["model"] = "ok"


def node_status(raw: Mapping[str, Any], ctx: Mapping[str, Any]) -> dict[str, Any]:
    """One node's record: the fields of the table, ``problems`` (each with its fix) and ``healthy``."""
    host = str(raw.get("host"))
    node: dict[str, Any] = {"host": host, "role": raw.get("role"), "reachable": bool(raw.get("reachable"))}
    problems: list[str] = []
    if not node["reachable"]:
        problems.append(
            f"{host}: unreachable over SSH ({raw.get('msg') or 'no answer'}). Fix: check the node is up and "
            f"`ssh {raw.get('ansible_host') or host}` works from the controller."
        )
    elif raw.get("error"):
        problems.append(
            f"{host}: status could not read the node: {raw['error']}. Fix: run the status again with -vvv; "
            f"check the node's Docker engine and systemd answer."
        )
    else:
        before = len(problems)
        _ib(node, raw, problems)
        _link_recheck(node, raw, problems, address_ok=len(problems) == before)
        _gpu(node, raw, problems)
        _memory(node, raw, ctx, problems)
        _units(node, raw, problems)
        _ray_count(node, raw, ctx, problems)
        _image(node, raw, ctx, problems)
        _manifest(node, raw, problems)
    node["problems"] = problems
    node["healthy"] = not problems
    return node


# -- the cluster -------------------------------------------------------------


def cluster_status(raw: Mapping[str, Any], ctx: Mapping[str, Any]) -> dict[str, Any]:
    """The endpoint's /health and the served model (from /v1/models), with problems."""
    endpoint = raw.get("endpoint")
    expected_model = raw.get("served_model_name")
    health = raw.get("health") or {}
    models = raw.get("models") or {}
    problems: list[str] = []
    health_status = health.get("status")
    served = [item.get("id") for item in (models.get("json") or {}).get("data") or [] if item.get("id")]
    record: dict[str, Any] = {
        "endpoint": endpoint,
        "health_status": health_status if health_status not in (None, -1) else None,
        "served_models": served,
        "served_model": (expected_model if expected_model in served else (served[0] if served else None)),
        "served_model_expected": expected_model,
    }
    if health_status != 200:
        problems.append(
            f"cluster: {endpoint}/health answered {health_status if health_status not in (None, -1) else 'nothing'}"
            f" ({(health.get('msg') or '').strip() or 'no answer'}). Fix: read the nodes' problems above; run "
            f"`ansible-playbook playbooks/diagnose.yml` for the cause."
        )
    elif models.get("status") != 200:
        problems.append(
            f"cluster: {endpoint}/v1/models answered {models.get('status')} ({(models.get('msg') or '').strip()}). "
            f"Fix: check sparkops_api_key matches the key the deploy gave vLLM (rerun deploy.yml)."
        )
    elif expected_model not in served:
        problems.append(
            f"cluster: the endpoint serves {', '.join(served) or 'no model'}, not {expected_model}. Fix: rerun "
            f"deploy.yml (the vllm_serve stage restarts serve with sparkops_served_model_name)."
        )
    transport = ctx.get("transport") or {}
    record["transport"] = {
        key: transport.get(key) for key in ("verdict", "summary", "enforced", "ok", "nccl_versions")
    }
    record["transport"]["ranks"] = [
        {k: r.get(k) for k in ("rank", "host", "verdict", "network", "ib_devices_used", "socket_interfaces")}
        for r in transport.get("ranks") or []
    ]
    if transport and not transport.get("ok"):
        problems.extend(
            f"cluster: {transport['summary']}. {problem.removeprefix('[error] ').removeprefix('[warning] ')} "
            f"(docs/runbooks/nccl-errors.md)"
            for problem in transport.get("problems") or [transport["summary"]]
        )
    ray = ctx.get("ray_nodes") or {}
    if ray.get("nodes") is None:
        problems.append(
            f"cluster: Ray could not be asked for its nodes on the head ({(ray.get('msg') or '').strip() or 'no answer'})."
            f" Fix: start the head's Ray unit; status cannot tell which nodes Ray counts until it answers."
        )
    watchdog = raw.get("watchdog") or {}
    record["watchdog"] = _watchdog.summary(
        watchdog.get("status") or None, watchdog.get("timer") or None, float(watchdog.get("now") or 0)
    )
    problems.extend(record["watchdog"]["problems"])
    record["problems"] = problems
    record["healthy"] = not problems
    return record


def _last_line(text: str) -> str:
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def context(
    raw_nodes: list[Mapping[str, Any]], raw_cluster: Mapping[str, Any], settings: Mapping[str, Any]
) -> dict:
    """What every node is compared with: the plan's utilization, Ray's nodes, the expected image ID."""
    utilization = deployed_record.serve_utilization(
        deployed_record.load(raw_cluster.get("deployed_record") or "")
    )
    source = "the deployed record"
    if utilization is None and settings.get("gpu_memory_utilization") not in (None, ""):
        utilization = float(settings["gpu_memory_utilization"])
        source = "sparkops_gpu_memory_utilization (serve is not deployed)"
    ray = raw_cluster.get("ray_nodes") or {}
    ray_nodes = parse_ray_nodes(ray.get("stdout") or "") if ray.get("rc") == 0 else None
    head_ids = [
        ((raw.get("image") or {}).get("id") or "").strip()
        for raw in raw_nodes
        if raw.get("role") == "head" and raw.get("reachable")
    ]
    # Every rank's NCCL transport, from the head's serve log of its current start (only
    # enforced when the ranks span nodes that were all deployed with RDMA devices).
    hcas = [str(raw.get("nccl_ib_hca") or "") for raw in raw_nodes]
    world = int(settings.get("world_size") or 1)
    head_log = next((str(raw.get("serve_log") or "") for raw in raw_nodes if raw.get("role") == "head"), "")
    transport = nccl_transport.serve_transport(
        head_log,
        [d for hca in hcas for d in hca.split(",") if d],
        world,
        len(raw_nodes) > 1 and world > int(settings.get("gpus_per_node") or 1) and all(hcas),
        started=False,
    )
    return {
        "transport": transport,
        "utilization": utilization,
        "utilization_source": source,
        "memory_margin_gib": float(settings.get("memory_margin_gib") or 0),
        "ray_memory_monitor": bool(settings.get("ray_memory_monitor")),
        "ray_memory_threshold": float(settings.get("ray_memory_threshold") or 0.95),
        "gpus_per_node": int(settings.get("gpus_per_node") or 0),
        "expected_image_id": (settings.get("image_id") or "") or next((i for i in head_ids if i), None),
        "ray_nodes": {
            "nodes": ray_nodes,
            "msg": _last_line(ray.get("stderr") or ray.get("msg") or ray.get("stdout") or ""),
        },
    }


def report(
    raw_nodes: list[Mapping[str, Any]], raw_cluster: Mapping[str, Any], settings: Mapping[str, Any]
) -> dict[str, Any]:
    """The whole report: ``healthy``, ``problems`` (nodes' then cluster's), ``cluster``, ``nodes``."""
    ctx = context(raw_nodes, raw_cluster, settings)
    nodes = [node_status(raw, ctx) for raw in raw_nodes]
    cluster = cluster_status(raw_cluster, ctx)
    problems = [problem for node in nodes for problem in node["problems"]] + cluster["problems"]
    return {"healthy": not problems, "problems": problems, "cluster": cluster, "nodes": nodes}


# -- the table ---------------------------------------------------------------

_COLUMNS = (
    "HOST",
    "SSH",
    "IB ADDRESS / MTU",
    "GPU CONSUMERS",
    "MEM AVAIL / PLAN",
    "RAY",
    "IMAGE",
    "MODEL",
    "OK",
)


def _cells(node: Mapping[str, Any]) -> list[str]:
    if not node.get("reachable"):
        return [node["host"], "down", "-", "-", "-", "-", "-", "-", "NO"]
    ib = f"{node.get('ib_address') or 'none'} / {node.get('ib_mtu') or '?'}"
    consumers = f"{node.get('own_consumers', 0)} own, {node.get('stale_consumers', 0)} stale"
    needed = node.get("mem_needed_gib")
    memory = (
        f"{node.get('mem_available_gib')} / {needed} GiB"
        if needed is not None
        else f"{node.get('mem_available_gib')} GiB, no plan"
    )
    counted = {True: "counted", False: "NOT counted", None: "?"}[node.get("ray_counted")]
    ray = f"{node.get('ray_unit_state', '?')}, {counted}"
    if node.get("serve_unit"):
        ray += f"; serve {node.get('serve_unit_state')}"
    image_id = node.get("image_id") or "none"
    image = image_id.split(":")[-1][:12]
    return [
        node["host"],
        "ok",
        ib,
        consumers,
        memory,
        ray,
        image,
        str(node.get("model")),
        "yes" if node["healthy"] else "NO",
    ]


def table(result: Mapping[str, Any]) -> list[str]:
    """The report as lines: one table row per node, the cluster line, then every problem with its fix."""
    rows = [list(_COLUMNS)] + [_cells(node) for node in result.get("nodes") or []]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    cluster = result.get("cluster") or {}
    health = cluster.get("health_status")
    lines.append(
        f"Endpoint {cluster.get('endpoint')}: /health {health if health is not None else 'no answer'}, "
        f"serving {cluster.get('served_model') or 'nothing'}"
    )
    transport = cluster.get("transport") or {}
    if transport.get("ranks") or transport.get("enforced"):
        lines.append(transport["summary"])
    if (cluster.get("watchdog") or {}).get("state", "not installed") != "not installed":
        lines.append(_watchdog.summary_line(cluster["watchdog"]))
    if result.get("healthy"):
        lines.append("Healthy: every node and the endpoint.")
    else:
        lines.append(f"UNHEALTHY: {len(result.get('problems') or [])} problem(s):")
        lines.extend(f"- {problem}" for problem in result.get("problems") or [])
    return lines
