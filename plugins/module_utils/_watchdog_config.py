# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The watchdog's JSON config, built on the controller from the layout and the inventory.

The program on the head (``_watchdog_tick.py``) reads it; nothing in it is secret (the
API key stays in serve's secrets file, which the config names). Every name and path comes
from the layout the role passes; each node's units are its layout ``node_units`` (stop order), and each
node's MemAvailable floor is ``_deployed_record.memavailable_floor_bytes`` of its
deployed record and its MemTotal (``memory_info``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.sparkops.vllm.plugins.module_utils import (
    _deployed_record,
    _serve_endpoint,
    _watchdog,
)


class WatchdogConfigError(ValueError):
    pass


def _floor(record_text: str | None, mem_total_bytes: int | None) -> int | None:
    if not record_text or not mem_total_bytes:
        return None
    return _deployed_record.memavailable_floor_bytes(_deployed_record.load(record_text), int(mem_total_bytes))


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def build(
    cluster: str,
    *,
    head: str,
    nodes: Sequence[Mapping[str, Any]],
    layout: Mapping[str, Any],
    head_units: Sequence[str],
    worker_units: Sequence[str],
    settings: Mapping[str, Any],
) -> dict[str, Any]:
    """``head``: the head's inventory name; ``nodes``: every node of the cluster as
    ``{"name", "ib", "record" (its deployed record's text), "mem_total_bytes"}``;
    ``layout``: the cluster's layout; ``head_units``/``worker_units``: the layout's
    ``node_units`` with ``role=head``/``worker`` (stop order);
    ``settings``: the role's values (roles/watchdog/vars/main.yml ``_watchdog_settings``)."""
    by_name = {str(n.get("name")): n for n in nodes}
    if head not in by_name:
        raise WatchdogConfigError(f"the head {head!r} is not among the nodes {sorted(by_name)}")
    workers = [n for name, n in by_name.items() if name != head]
    head_node = by_name[head]
    for node in nodes:
        if not node.get("name") or not node.get("ib"):
            raise WatchdogConfigError(f"node {node.get('name')!r} has no name or ib address")
    whole = layout
    try:
        thresholds = {
            "frozen_ticks": int(settings["frozen_ticks"]),
            "budget_restarts": int(settings["budget_restarts"]),
            "budget_window_s": int(settings["budget_window_s"]),
            "backoff_initial_s": int(settings["backoff_initial_s"]),
            "gpu_power_floor_w": float(settings["gpu_power_floor_w"]),
            "gpu_utilization_floor_pct": float(settings["gpu_utilization_floor_pct"]),
            "tick_cpu_budget_s": float(settings["tick_cpu_budget_s"]),
        }
        timeouts = {
            key: int(settings[key])
            for key in (
                "canary_timeout_s",
                "probe_timeout_s",
                "ready_timeout_s",
                "wait_nodes_timeout_s",
                "unit_timeout_s",
            )
        }
        port, serve_port = int(settings["ray_node_manager_port"]), int(settings["serve_port"])
    except (KeyError, TypeError, ValueError) as exc:
        raise WatchdogConfigError(f"a setting is missing or not a number: {exc}") from exc
    try:
        _watchdog.settings(thresholds)
        # serve as a client on the head reaches it (plugins/module_utils/_serve_endpoint.py).
        endpoint = _serve_endpoint.on_head(settings.get("serve_host"), serve_port)
    except (_watchdog.WatchdogError, _serve_endpoint.EndpointError) as exc:
        raise WatchdogConfigError(str(exc)) from exc
    return {
        "cluster": cluster,
        "head": {"name": head, "ib": head_node["ib"], "units": list(head_units)},
        "workers": [{"name": w["name"], "ib": w["ib"], "units": list(worker_units)} for w in workers],
        "endpoint": endpoint,
        "served_model_name": str(settings["served_model_name"]),
        "canary_prompt": str(settings["canary_prompt"]),
        **timeouts,
        "secrets_file": whole["serve_secrets_file"],
        "ray_node_manager_port": port,
        "ssh": {
            "key": str(settings["ssh_key"]),
            "known_hosts": str(settings["ssh_known_hosts"]),
            "user": "root",
            "connect_timeout_s": timeouts["probe_timeout_s"],
        },
        "state_file": whole["watchdog_state_file"],
        "bundle_dir": whole["watchdog_bundle_dir"],
        "textfile": whole["watchdog_textfile"],
        "journal_units": [whole["units"][key] for key in ("serve", "ray_head", "ray_firewall", "watchdog")],
        "memavailable_floor_bytes": {
            name: _floor(n.get("record"), _int(n.get("mem_total_bytes"))) for name, n in by_name.items()
        },
        "thresholds": thresholds,
    }
