# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The watchdog's decisions: one tick's observations and the persisted state in, the
action, the new state, the journal line and the textfile gauges out. Pure: the program
on the head does the I/O (HTTP, ssh, systemctl) and calls ``tick``.

Stdlib only: the head's own python3 imports it, without Ansible.

Signals and their sources:
- tokens frozen: ``vllm:generation_tokens_total`` unchanged while
  ``vllm:num_requests_running`` > 0, for ``frozen_ticks`` ticks in a row (vLLM 0.17.1
  ``vllm/v1/metrics/loggers.py``, PrometheusStatLogger: ``counter_generation_tokens`` is
  ``vllm:generation_tokens`` (``_total`` in the exposition), ``gauge_scheduler_running``
  is ``vllm:num_requests_running``). No requests running with flat tokens is idle, not
  frozen.
- the GB10 wedge: tokens frozen, GPU power under the floor, one rank dead while the API
  process lives (https://github.com/eugr/spark-vllm-docker/issues/260). Frozen tokens with
  an idle GPU, a node missing from Ray, or a rank dead need the whole cluster restarted;
  a failing canary, frozen tokens on a busy GPU, or MemAvailable under the plan's floor
  restart serve.

The tick's own cost: the program measures the CPU seconds it used (its own and its
children's: ssh, nvidia-smi, sh) and its wall seconds at the end of every tick
(``cpu_seconds``); ``tick_cost`` records them in the state and ``tick_cost_warning`` judges
them against ``tick_cpu_budget_s``. Over budget is journaled, never a finding: the
watchdog's own cost is not a failure of the cluster and restarts nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

STATE_VERSION = 1

NONE = "none"
RESTART_SERVE = "restart_serve"
RESTART_CLUSTER = "restart_cluster"
BACKOFF = "backoff"
GAVE_UP = "gave_up"
PAUSED = "paused"
DECISIONS = (NONE, RESTART_SERVE, RESTART_CLUSTER, BACKOFF, GAVE_UP, PAUSED)
SCOPES = ("serve", "cluster")

# The defaults of the watchdog role's settings (roles/watchdog/defaults/main.yml carries
# them to the config; these only fill a config that leaves one out).
DEFAULTS: dict[str, Any] = {
    "frozen_ticks": 3,
    "budget_restarts": 3,
    "budget_window_s": 6 * 3600,
    "backoff_initial_s": 300,
    # eugr/spark-vllm-docker#260: a wedged GB10 draws under 30 W with tokens frozen.
    "gpu_power_floor_w": 30.0,
    "gpu_utilization_floor_pct": 10.0,
    # Issue 18: a tick is cheap, under a second of CPU (the head's share: the tick, its
    # ssh clients and the head's nvidia-smi).
    "tick_cpu_budget_s": 1.0,
}


class WatchdogError(ValueError):
    """A config or observation the watchdog cannot use."""


@dataclass(frozen=True)
class Finding:
    signal: str
    scope: str
    detail: str


@dataclass
class Observation:
    """What one tick saw. ``None`` means not observed (the source did not answer or
    does not report it); the decision treats an unobserved value as no evidence."""

    now: float
    canary: str  # "ok", "timeout" or "error"
    canary_detail: str = ""
    generation_tokens: float | None = None
    requests_running: float | None = None
    ray_nodes: Mapping[str, bool] = field(default_factory=dict)
    ranks: Mapping[str, bool] = field(default_factory=dict)
    memavailable_bytes: Mapping[str, int | None] = field(default_factory=dict)
    gpu_power_w: Mapping[str, float | None] = field(default_factory=dict)
    gpu_utilization_pct: Mapping[str, float | None] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "now": self.now,
            "canary": self.canary,
            "canary_detail": self.canary_detail,
            "generation_tokens": self.generation_tokens,
            "requests_running": self.requests_running,
            "ray_nodes": dict(self.ray_nodes),
            "ranks": dict(self.ranks),
            "memavailable_bytes": dict(self.memavailable_bytes),
            "gpu_power_w": dict(self.gpu_power_w),
            "gpu_utilization_pct": dict(self.gpu_utilization_pct),
        }


def new_state() -> dict[str, Any]:
    return {
        "version": STATE_VERSION,
        "paused": False,
        "paused_reason": "",
        "gave_up": None,
        "frozen_ticks": 0,
        "last_tokens": None,
        "restarts": [],
        "restarts_total": {scope: 0 for scope in SCOPES},
        "episode": None,
        "last_tick": None,
        "last_decision": None,
        "last_findings": [],
        "ray_nodes": {},
        # The last tick's cost (tick_cost): cpu_s, wall_s, cpu_budget_s, over_budget.
        "last_tick_cost": None,
    }


def load_state(text: str | None) -> tuple[dict[str, Any], str | None]:
    """The state from its file's text; a missing, corrupt or foreign file gives a fresh
    state and the reason it was not used (the program journals it)."""
    if text is None:
        return new_state(), None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        return new_state(), f"the state file is not JSON ({exc}); starting from a fresh state"
    if not isinstance(doc, dict) or doc.get("version") != STATE_VERSION:
        return new_state(), f"the state file is not version {STATE_VERSION}; starting from a fresh state"
    state = new_state()
    for key, default in state.items():
        value = doc.get(key, default)
        if default is not None and not isinstance(value, type(default)):
            return (
                new_state(),
                f"the state file's {key!r} is {type(value).__name__}; starting from a fresh state",
            )
        state[key] = value
    try:
        state["restarts"] = [
            {"at": float(r["at"]), "scope": str(r["scope"]), "reason": str(r["reason"])}
            for r in state["restarts"]
        ]
        state["frozen_ticks"] = int(state["frozen_ticks"])
    except (KeyError, TypeError, ValueError) as exc:
        return new_state(), f"the state file's restarts are unreadable ({exc}); starting from a fresh state"
    state["last_tick_cost"] = _cost_or_none(state["last_tick_cost"])
    return state, None


def _cost_or_none(cost: Any) -> dict[str, Any] | None:
    """A recorded tick cost, or None when it is not one (the next tick writes a fresh one)."""
    if not isinstance(cost, dict):
        return None
    numbers = ("cpu_s", "wall_s", "cpu_budget_s")
    if any(isinstance(cost.get(k), bool) or not isinstance(cost.get(k), (int, float)) for k in numbers):
        return None
    return {**{k: float(cost[k]) for k in numbers}, "over_budget": bool(cost.get("over_budget"))}


def dump_state(state: Mapping[str, Any]) -> str:
    return json.dumps(state, indent=2, sort_keys=True) + "\n"


def settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The thresholds from the config, defaults filled, each checked."""
    out = {key: config.get(key, default) for key, default in DEFAULTS.items()}
    for key in ("frozen_ticks", "budget_restarts"):
        if not isinstance(out[key], int) or isinstance(out[key], bool) or out[key] < 1:
            raise WatchdogError(f"{key} is {out[key]!r}; it is a whole number of at least 1")
    for key in ("budget_window_s", "backoff_initial_s", "gpu_power_floor_w", "gpu_utilization_floor_pct"):
        value = out[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or math.isnan(value):
            raise WatchdogError(f"{key} is {value!r}; it is a number of at least 0")
    budget = out["tick_cpu_budget_s"]
    if (
        isinstance(budget, bool)
        or not isinstance(budget, (int, float))
        or not budget > 0
        or math.isinf(budget)
    ):
        raise WatchdogError(f"tick_cpu_budget_s is {budget!r}; it is a number of seconds above 0")
    return out


def frozen_count(state: Mapping[str, Any], obs: Observation) -> int:
    """The frozen-token tick counter after this tick."""
    tokens, running = obs.generation_tokens, obs.requests_running
    if tokens is None or running is None or state.get("last_tokens") is None:
        return 0
    if running > 0 and tokens == state["last_tokens"]:
        return int(state.get("frozen_ticks", 0)) + 1
    return 0


def _gpu_idle(obs: Observation, node: str, cfg: Mapping[str, Any]) -> bool:
    """Power under the floor, and utilization (where the driver reports it) under its
    floor too: GB10's nvidia-smi reports power; a node without a reading is no evidence."""
    power = obs.gpu_power_w.get(node)
    if power is None or math.isnan(power) or power >= cfg["gpu_power_floor_w"]:
        return False
    util = obs.gpu_utilization_pct.get(node)
    return util is None or math.isnan(util) or util < cfg["gpu_utilization_floor_pct"]


def findings(
    obs: Observation,
    frozen: int,
    nodes: Sequence[str],
    floors: Mapping[str, int | None],
    cfg: Mapping[str, Any],
) -> list[Finding]:
    """Every failing signal of this tick, in a fixed order."""
    out: list[Finding] = []
    for node in nodes:
        if obs.ray_nodes.get(node) is False:
            out.append(Finding("ray_node_missing", "cluster", f"Ray does not report node {node}"))
    for node in nodes:
        if obs.ranks.get(node) is False:
            out.append(Finding("rank_dead", "cluster", f"the vLLM rank on {node} is not alive"))
    if frozen >= cfg["frozen_ticks"]:
        idle = [node for node in nodes if _gpu_idle(obs, node, cfg)]
        if idle:
            out.append(
                Finding(
                    "gpu_wedge",
                    "cluster",
                    f"generation tokens frozen for {frozen} ticks with "
                    f"{obs.requests_running:g} requests running, GPU under "
                    f"{cfg['gpu_power_floor_w']:g} W on {', '.join(idle)}",
                )
            )
        else:
            out.append(
                Finding(
                    "tokens_frozen",
                    "serve",
                    f"generation tokens frozen for {frozen} ticks with {obs.requests_running:g} requests running",
                )
            )
    if obs.canary != "ok":
        out.append(
            Finding(
                f"canary_{obs.canary}", "serve", obs.canary_detail or f"the canary completion: {obs.canary}"
            )
        )
    for node in nodes:
        avail, floor = obs.memavailable_bytes.get(node), floors.get(node)
        if avail is not None and floor is not None and avail < floor:
            out.append(
                Finding(
                    "memory_low",
                    "serve",
                    f"MemAvailable on {node} is {avail} bytes, under the plan's floor of {floor} bytes",
                )
            )
    return out


def backoff_s(restarts_in_window: int, cfg: Mapping[str, Any]) -> float:
    """The wait after the n-th restart in the window: initial, then doubling."""
    if restarts_in_window < 1:
        return 0.0
    return float(cfg["backoff_initial_s"]) * 2 ** (restarts_in_window - 1)


@dataclass
class Decision:
    action: str
    scope: str | None
    reason: str
    findings: list[Finding]
    capture_bundle: bool
    state: dict[str, Any]
    journal: str


def journal_line(action: str, scope: str | None, reason: str, in_window: int, budget: int) -> str:
    scope_part = f" scope={scope}" if scope else ""
    return f"watchdog action={action}{scope_part} restarts_in_window={in_window}/{budget} reason={json.dumps(reason)}"


# -- the tick's own cost ----------------------------------------------------------------


def cpu_seconds(self_usage: Any, children_usage: Any) -> float:
    """User plus system CPU seconds of the program and of the children it waited for, from
    ``resource.getrusage(RUSAGE_SELF)`` and ``resource.getrusage(RUSAGE_CHILDREN)`` (anything
    with ``ru_utime`` and ``ru_stime``). The children's share holds every ``ssh`` client,
    ``sh -c`` and the head's ``nvidia-smi`` of the tick (each is waited for, so the kernel
    adds it); what a worker spends answering (its sshd, its nvidia-smi) is not in it."""
    return sum(float(usage.ru_utime) + float(usage.ru_stime) for usage in (self_usage, children_usage))


def tick_cost(cpu_s: float, wall_s: float, config: Mapping[str, Any]) -> dict[str, Any]:
    """The state's ``last_tick_cost``: the tick's CPU and wall seconds (to the millisecond),
    the budget (``tick_cpu_budget_s``) and whether the CPU went over it."""
    budget = float(settings(config)["tick_cpu_budget_s"])
    cpu, wall = round(float(cpu_s), 3), round(float(wall_s), 3)
    return {"cpu_s": cpu, "wall_s": wall, "cpu_budget_s": budget, "over_budget": cpu > budget}


def tick_cost_fields(cost: Mapping[str, Any]) -> str:
    """The cost as the tick's last journal line ends: ``cpu_seconds=... wall_seconds=... cpu_budget_seconds=...``."""
    return (
        f"cpu_seconds={cost['cpu_s']:g} wall_seconds={cost['wall_s']:g} "
        f"cpu_budget_seconds={cost['cpu_budget_s']:g}"
    )


def tick_cost_warning(cost: Mapping[str, Any], action: str) -> str | None:
    """The journal's warning for a tick over its CPU budget, naming the measured value and
    the budget; None within it. Only a warning: the watchdog's own cost is no failure of
    the cluster, so it is never a finding and never restarts anything."""
    if not cost.get("over_budget"):
        return None
    return (
        f"watchdog warning=tick_over_cpu_budget action={action} {tick_cost_fields(cost)}: "
        f"the tick used {cost['cpu_s']:g} s of CPU, over its budget of {cost['cpu_budget_s']:g} s "
        "(watchdog_tick_cpu_budget_seconds); this is the watchdog's own cost, not a failure of "
        f'the cluster: nothing is restarted. {RUNBOOK}, "The tick\'s own cost"'
    )


def tick(
    state_in: Mapping[str, Any],
    obs: Observation,
    nodes: Sequence[str],
    floors: Mapping[str, int | None],
    config: Mapping[str, Any],
) -> Decision:
    """One tick. The returned state records the restart as done when the action is a
    restart (the program runs it next; a failed restart is the next tick's failure)."""
    cfg = settings(config)
    state = json.loads(json.dumps(state_in))
    state["last_tick"] = obs.now
    window = [r for r in state["restarts"] if obs.now - r["at"] < cfg["budget_window_s"]]
    state["restarts"] = window
    budget = cfg["budget_restarts"]

    def done(
        action: str, scope: str | None, reason: str, found: list[Finding], bundle: bool = False
    ) -> Decision:
        state["last_decision"] = action
        state["last_findings"] = [f.__dict__ for f in found]
        return Decision(
            action,
            scope,
            reason,
            found,
            bundle,
            state,
            journal_line(action, scope, reason, len(window), budget),
        )

    if state["paused"]:
        return done(PAUSED, None, state["paused_reason"] or "paused by an operator", [])
    if state["gave_up"]:
        return done(GAVE_UP, None, state["gave_up"]["reason"], [])

    frozen = frozen_count(state, obs)
    state["frozen_ticks"] = frozen
    # Which Ray nodes answered this tick (the textfile's sparkops_watchdog_ray_node_up).
    state["ray_nodes"] = {str(node): bool(up) for node, up in obs.ray_nodes.items()}
    state["last_tokens"] = obs.generation_tokens
    found = findings(obs, frozen, nodes, floors, cfg)
    if not found:
        state["episode"] = None
        return done(NONE, None, "every signal is healthy", [])

    scope = "cluster" if any(f.scope == "cluster" for f in found) else "serve"
    reason = "; ".join(f.detail for f in found)
    first = state["episode"] is None
    if first:
        state["episode"] = {"started": obs.now, "bundle": None}
    # The last restart gets its backoff to work before the budget is judged.
    if window:
        wait = backoff_s(len(window), cfg)
        ready = window[-1]["at"] + wait
        if obs.now < ready:
            return done(
                BACKOFF, scope, f"backing off {wait:g} s after the last restart: {reason}", found, first
            )
    if len(window) >= budget:
        state["gave_up"] = {
            "at": obs.now,
            "reason": f"{len(window)} restarts in {cfg['budget_window_s']:g} s did not help: {reason}",
            "bundle": state["episode"].get("bundle"),
        }
        return done(GAVE_UP, None, state["gave_up"]["reason"], found, first)
    state["restarts"] = [*window, {"at": obs.now, "scope": scope, "reason": reason}]
    state["restarts_total"][scope] = int(state["restarts_total"].get(scope, 0)) + 1
    action = RESTART_CLUSTER if scope == "cluster" else RESTART_SERVE
    decision = done(action, scope, reason, found, first)
    decision.journal = journal_line(action, scope, reason, len(state["restarts"]), budget)
    return decision


def restart_steps(
    scope: str, head: str, head_units: Sequence[str], workers: Mapping[str, Sequence[str]]
) -> list[tuple]:
    """The ordered restart from the layout's ``node_units`` (each node's units in stop
    order: the head's serve then its Ray head, a worker's Ray worker). Serve scope: the
    head's units above its Ray unit, down and up. Cluster scope: serve down, workers'
    Ray down, head's Ray down; head up, workers up, wait for every node, serve up."""
    if scope not in SCOPES:
        raise WatchdogError(f"the restart scope is {scope!r}; it is one of {', '.join(SCOPES)}")
    if not head_units:
        raise WatchdogError("the head has no units in the layout's node_units")
    above, ray_head = list(head_units[:-1]), head_units[-1]
    if scope == "serve":
        return [("stop", head, u) for u in above] + [("start", head, u) for u in reversed(above)]
    steps: list[tuple] = [("stop", head, u) for u in above]
    for node, units in workers.items():
        steps += [("stop", node, u) for u in units]
    steps.append(("stop", head, ray_head))
    steps.append(("start", head, ray_head))
    for node, units in workers.items():
        steps += [("start", node, u) for u in reversed(units)]
    steps.append(("wait_nodes", head, ""))
    steps += [("start", head, u) for u in reversed(above)]
    return steps


def textfile(cluster: str, state: Mapping[str, Any], now: float) -> str:
    """The node-exporter textfile gauges: non-secret numbers only."""
    label = f'cluster="{_escape(cluster)}"'
    totals = state.get("restarts_total") or {}
    lines = [
        "# HELP sparkops_watchdog_last_tick_timestamp_seconds When the watchdog last ticked.",
        "# TYPE sparkops_watchdog_last_tick_timestamp_seconds gauge",
        f"sparkops_watchdog_last_tick_timestamp_seconds{{{label}}} {now:.3f}",
        "# HELP sparkops_watchdog_gave_up 1 when the restart budget is spent and the watchdog stopped acting.",
        "# TYPE sparkops_watchdog_gave_up gauge",
        f"sparkops_watchdog_gave_up{{{label}}} {1 if state.get('gave_up') else 0}",
        "# HELP sparkops_watchdog_paused 1 when an operator paused the watchdog.",
        "# TYPE sparkops_watchdog_paused gauge",
        f"sparkops_watchdog_paused{{{label}}} {1 if state.get('paused') else 0}",
        "# HELP sparkops_watchdog_tokens_frozen_ticks Ticks in a row with generation tokens frozen.",
        "# TYPE sparkops_watchdog_tokens_frozen_ticks gauge",
        f"sparkops_watchdog_tokens_frozen_ticks{{{label}}} {int(state.get('frozen_ticks', 0))}",
        "# HELP sparkops_watchdog_restarts_total Restarts the watchdog ran, by scope.",
        "# TYPE sparkops_watchdog_restarts_total counter",
    ]
    lines += [
        f'sparkops_watchdog_restarts_total{{{label},scope="{scope}"}} {int(totals.get(scope, 0))}'
        for scope in SCOPES
    ]
    # Each Ray node of the inventory as the last observing tick saw its raylet (1 answered).
    # The monitoring stage's "node missing from Ray" alert reads it: Ray's own metrics port is
    # not served by an image without ray[default] (roles/monitoring/defaults, monitoring_scrape_ray).
    ray_nodes = state.get("ray_nodes") or {}
    if ray_nodes:
        lines += [
            "# HELP sparkops_watchdog_ray_node_up 1 when the node's raylet answered the watchdog's last tick.",
            "# TYPE sparkops_watchdog_ray_node_up gauge",
        ]
        lines += [
            f'sparkops_watchdog_ray_node_up{{{label},ray_node="{_escape(node)}"}} {1 if up else 0}'
            for node, up in sorted(ray_nodes.items())
        ]
    # The last tick's own cost (tick_cost), for the "under a second of CPU" figure and its alert.
    cost = state.get("last_tick_cost")
    if isinstance(cost, Mapping):
        lines += [
            "# HELP sparkops_watchdog_tick_cpu_seconds CPU seconds (user and system, with its ssh and "
            "nvidia-smi children) the watchdog's last tick used on the head.",
            "# TYPE sparkops_watchdog_tick_cpu_seconds gauge",
            f"sparkops_watchdog_tick_cpu_seconds{{{label}}} {float(cost['cpu_s']):.3f}",
            "# HELP sparkops_watchdog_tick_duration_seconds Wall seconds the watchdog's last tick took.",
            "# TYPE sparkops_watchdog_tick_duration_seconds gauge",
            f"sparkops_watchdog_tick_duration_seconds{{{label}}} {float(cost['wall_s']):.3f}",
            "# HELP sparkops_watchdog_tick_cpu_budget_seconds The CPU budget of one tick "
            "(watchdog_tick_cpu_budget_seconds).",
            "# TYPE sparkops_watchdog_tick_cpu_budget_seconds gauge",
            f"sparkops_watchdog_tick_cpu_budget_seconds{{{label}}} {float(cost['cpu_budget_s']):g}",
        ]
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    """A label value as the exposition format writes it (backslash, quote, newline escaped)."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


RUNBOOK = "docs/runbooks/watchdog.md"


def summary(status_text: str | None, timer_state: str | None, now: float) -> dict[str, Any]:
    """What ``status`` and ``sparkops watchdog status`` show, from the program's ``status``
    JSON and ``systemctl is-active`` of the timer: ``state`` (not installed / disabled /
    enabled / paused / gave up), the reason and bundle of a give-up, the last tick, the
    restarts in the window, and ``problems`` (a give-up is one; a corrupt state file too)."""
    out: dict[str, Any] = {
        "state": "not installed",
        "timer": timer_state,
        "paused_reason": None,
        "gave_up_reason": None,
        "bundle": None,
        "last_tick": None,
        "last_tick_age_s": None,
        "last_decision": None,
        "restarts_in_window": 0,
        "last_tick_cpu_s": None,
        "last_tick_wall_s": None,
        "tick_cpu_budget_s": None,
        "last_tick_over_budget": False,
        "problems": [],
    }
    if not status_text:
        return out
    try:
        doc = json.loads(status_text)
        state = doc["state"]
    except (ValueError, KeyError, TypeError):
        out["problems"].append(f"watchdog: its status is unreadable: {str(status_text)[:200]!r}")
        return out
    if doc.get("state_note"):
        out["problems"].append(f"watchdog: {doc['state_note']} ({doc.get('state_file')})")
    out["last_tick"] = state.get("last_tick")
    if isinstance(out["last_tick"], (int, float)):
        out["last_tick_age_s"] = round(now - out["last_tick"], 1)
    out["last_decision"] = state.get("last_decision")
    out["restarts_in_window"] = len(state.get("restarts") or [])
    cost = state.get("last_tick_cost")
    if isinstance(cost, Mapping):
        out["last_tick_cpu_s"] = cost.get("cpu_s")
        out["last_tick_wall_s"] = cost.get("wall_s")
        out["tick_cpu_budget_s"] = cost.get("cpu_budget_s")
        out["last_tick_over_budget"] = bool(cost.get("over_budget"))
    out["bundle"] = (state.get("episode") or {}).get("bundle")
    if state.get("gave_up"):
        out["state"] = "gave up"
        out["gave_up_reason"] = state["gave_up"].get("reason")
        out["bundle"] = state["gave_up"].get("bundle") or out["bundle"]
        out["problems"].append(
            f"watchdog: gave up: {out['gave_up_reason']} Support bundle: {out['bundle'] or 'none captured'}. "
            f"Fix: {RUNBOOK} (find the cause, then `sparkops watchdog resume`)."
        )
    elif state.get("paused"):
        out["state"] = "paused"
        out["paused_reason"] = state.get("paused_reason")
    elif timer_state == "active":
        out["state"] = "enabled"
    else:
        out["state"] = "disabled"
    return out


def summary_line(summary_doc: Mapping[str, Any]) -> str:
    """One line for the status table and the CLI."""
    line = f"Watchdog: {summary_doc.get('state')}"
    if summary_doc.get("paused_reason"):
        line += f" ({summary_doc['paused_reason']})"
    if summary_doc.get("gave_up_reason"):
        line += f" ({summary_doc['gave_up_reason']} Bundle: {summary_doc.get('bundle') or 'none'})"
    if summary_doc.get("last_tick_age_s") is not None:
        line += f"; last tick {summary_doc['last_tick_age_s']:g} s ago ({summary_doc.get('last_decision')}"
        cpu, wall = summary_doc.get("last_tick_cpu_s"), summary_doc.get("last_tick_wall_s")
        if isinstance(cpu, (int, float)) and isinstance(wall, (int, float)):
            line += f", {cpu:g} s CPU"
            budget = summary_doc.get("tick_cpu_budget_s")
            if summary_doc.get("last_tick_over_budget") and isinstance(budget, (int, float)):
                line += f" over its {budget:g} s budget"
            line += f", {wall:g} s wall"
        line += ")"
    return line + f"; {summary_doc.get('restarts_in_window', 0)} restart(s) in the window"
