# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The watchdog's JSON config, built on the controller from the layout and the inventory.

The program on the head (``_watchdog_tick.py``) reads it; nothing in it is secret (the
API key stays in serve's secrets file, which the config names). Every name and path comes
from the layout; each node's units are its layout ``node_units`` (stop order), and each
node's MemAvailable floor is ``_deployed_record.memavailable_floor_bytes`` of its
deployed record and its MemTotal (``memory_info``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.sparkops.vllm.plugins.module_utils import _deployed_record, _layout, _watchdog


class WatchdogConfigError(ValueError):
    pass


def _floor(record_text: str | None, mem_total_bytes: int | None) -> int | None:
    if not record_text or not mem_total_bytes:
        return None
    return _deployed_record.memavailable_floor_bytes(_deployed_record.load(record_text), int(mem_total_bytes))


def build(
    cluster: str,
    *,
    head: Mapping[str, str],
    workers: Sequence[Mapping[str, str]],
    layout_settings: Mapping[str, Any],
    records: Mapping[str, str | None],
    mem_total_bytes: Mapping[str, int | None],
    settings: Mapping[str, Any],
) -> dict[str, Any]:
    """``head``/``workers``: ``{"name", "ib"}``; ``records``: each host's deployed record
    text; ``mem_total_bytes``: each host's MemTotal (memory_info); ``settings``: the role's values (see roles/watchdog)."""
    for node in [head, *workers]:
        if not node.get("name") or not node.get("ib"):
            raise WatchdogConfigError(f"node {node.get('name')!r} has no name or ib address")
    whole = _layout.layout(cluster, **layout_settings)
    head_layout = _layout.layout(cluster, role="head", **layout_settings)
    worker_layout = _layout.layout(cluster, role="worker", **layout_settings)
    thresholds = {
        "frozen_ticks": settings["frozen_ticks"],
        "budget_restarts": settings["budget_restarts"],
        "budget_window_s": settings["budget_window_s"],
        "backoff_initial_s": settings["backoff_initial_s"],
        "gpu_power_floor_w": settings["gpu_power_floor_w"],
        "gpu_utilization_floor_pct": settings["gpu_utilization_floor_pct"],
    }
    try:
        _watchdog.settings(thresholds)
    except _watchdog.WatchdogError as exc:
        raise WatchdogConfigError(str(exc)) from exc
    names = [head["name"], *(w["name"] for w in workers)]
    return {
        "cluster": cluster,
        "head": {"name": head["name"], "ib": head["ib"], "units": list(head_layout["node_units"])},
        "workers": [{"name": w["name"], "ib": w["ib"], "units": list(worker_layout["node_units"])} for w in workers],
        "endpoint": f"http://127.0.0.1:{int(settings['serve_port'])}",
        "served_model_name": settings["served_model_name"],
        "canary_prompt": settings["canary_prompt"],
        "canary_timeout_s": settings["canary_timeout_s"],
        "probe_timeout_s": settings["probe_timeout_s"],
        "ready_timeout_s": settings["ready_timeout_s"],
        "wait_nodes_timeout_s": settings["wait_nodes_timeout_s"],
        "unit_timeout_s": settings["unit_timeout_s"],
        "secrets_file": whole["serve_secrets_file"],
        "ray_node_manager_port": int(settings["ray_node_manager_port"]),
        "ssh": {
            "key": settings["ssh_key"],
            "known_hosts": settings["ssh_known_hosts"],
            "user": "root",
            "connect_timeout_s": settings["probe_timeout_s"],
        },
        "state_file": whole["watchdog_state_file"],
        "bundle_dir": whole["watchdog_bundle_dir"],
        "textfile": whole["watchdog_textfile"],
        "journal_units": [whole["units"][key] for key in ("serve", "ray_head", "ray_firewall", "watchdog")],
        "memavailable_floor_bytes": {name: _floor(records.get(name), mem_total_bytes.get(name)) for name in names},
        "thresholds": thresholds,
    }
