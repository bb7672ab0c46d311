# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""restart.yml's role and the watchdog restart in the same order.

The watchdog computes its steps from the layout's ``node_units``
(``_watchdog.restart_steps``); ``roles/cluster_restart`` runs them as tasks in
lockstep across hosts. The order is written once in Python; this test reads the
role's tasks back into steps and fails when the two part.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible_collections.sparkops.vllm.plugins.module_utils import _layout, _watchdog

ROOT = Path(__file__).resolve().parents[3]
TASKS = ROOT / "roles" / "cluster_restart" / "tasks" / "main.yml"
HEAD, WORKER = "spark-1", "spark-2"


def _role_steps(whole: bool) -> list[tuple[str, str, str]]:
    """(action, host, unit) per systemd task of the role, in order, for a head and one worker."""
    head = _layout.layout("lab", role="head")
    worker = _layout.layout("lab", role="worker")
    units = {
        "{{ _cluster_restart_serve_unit }}": {HEAD: head["units"]["serve"]},
        "{{ _cluster_restart_ray_unit }}": {HEAD: head["ray_unit"], WORKER: worker["ray_unit"]},
    }
    steps = []
    for task in yaml.safe_load(TASKS.read_text()):
        when = (
            " ".join(task.get("when", []))
            if isinstance(task.get("when"), list)
            else str(task.get("when", ""))
        )
        if "_cluster_restart_whole" in when and not whole:
            continue
        if "ansible.builtin.systemd_service" in task:
            args = task["ansible.builtin.systemd_service"]
            action = {"stopped": "stop", "started": "start"}[args["state"]]
            for host, unit in units[args["name"]].items():
                is_head = host == HEAD
                if "not _cluster_restart_is_head" in when and is_head:
                    continue
                if (
                    "_cluster_restart_is_head" in when
                    and "not _cluster_restart_is_head" not in when
                    and not is_head
                ):
                    continue
                steps.append((action, host, unit))
        elif "ansible.builtin.include_role" in task:
            target = task["ansible.builtin.include_role"]
            if (target["name"], target["tasks_from"]) == ("sparkops.vllm.ray_cluster", "wait"):
                steps.append(("wait_nodes", HEAD, ""))
            elif (target["name"], target["tasks_from"]) == ("sparkops.vllm.vllm_serve", "start"):
                steps.append(("start", HEAD, head["units"]["serve"]))
    return steps


@pytest.mark.parametrize(("scope", "whole"), [("cluster", True), ("serve", False)])
def test_the_role_restarts_in_the_watchdog_s_order(scope, whole):
    head = _layout.layout("lab", role="head")["node_units"]
    worker = _layout.layout("lab", role="worker")["node_units"]
    expected = _watchdog.restart_steps(scope, HEAD, head, {WORKER: worker})
    assert _role_steps(whole) == [tuple(step) for step in expected]
