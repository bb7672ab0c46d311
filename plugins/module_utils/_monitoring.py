# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The monitoring stage's logic: Prometheus's scrape config, the plan textfile, PromQL's metric names.

- ``scrape_config`` builds Prometheus's configuration from the inventory: vLLM's
  ``/metrics`` on the head's serve address, Ray's metrics export port and the node
  exporter on every node's ib address, each target labelled ``node`` (the inventory
  host) and ``cluster``.
- ``plan_textfile`` writes the node exporter textfile that carries the node's planned
  memory limit (``sparkops_memory_plan_limit_bytes``) from its deployed record.
- ``metric_names`` is a small PromQL tokenizer that returns the metric names an
  expression reads; ``dashboard_metric_names`` and ``rules_metric_names`` apply it to
  a Grafana dashboard and a Prometheus rules file; ``missing_metrics`` compares them
  with the metric names of a real scrape.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.sparkops.vllm.plugins.module_utils._deployed_record import plan_limit_bytes

PLAN_METRIC = "sparkops_memory_plan_limit_bytes"
JOBS = ("vllm", "ray", "node")


class MonitoringError(ValueError):
    """An input that cannot give a monitoring config (the message names the setting and the fix)."""


def _is_unspecified(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_unspecified
    except ValueError:
        return False


def hostport(address: str, port: int) -> str:
    """``address:port``, an IPv6 address in brackets (Prometheus's and the node exporter's listen form)."""
    try:
        if ipaddress.ip_address(address).version == 6:
            return f"[{address}]:{int(port)}"
    except ValueError:
        pass
    return f"{address}:{int(port)}"


def serve_target(serve_host: str, head_ib_address: str, *, prometheus_on_head: bool) -> str:
    """The address Prometheus scrapes vLLM on: the head's ib address when serve listens on every address.

    A loopback ``vllm_serve_host`` is reachable only from the head itself.
    """
    host = str(serve_host or "").strip()
    if not host or _is_unspecified(host):
        return head_ib_address
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if loopback and not prometheus_on_head:
        raise MonitoringError(
            f"vllm_serve_host is {host}, reachable only on the head, but Prometheus runs on another node; "
            "set monitoring_prometheus_host to the head, or vllm_serve_host to an address that node can reach"
        )
    return host


def scrape_config(
    *,
    cluster: str,
    nodes: Mapping[str, str],
    head: str,
    prometheus_host: str,
    serve_host: str,
    serve_port: int,
    ray_metrics_port: int | None,
    node_exporter_port: int,
    scrape_interval: str,
    rule_files: Iterable[str],
) -> dict[str, Any]:
    """Prometheus's configuration: one job per source, each target labelled ``node`` and ``cluster``.

    ``nodes`` maps every inventory host of the cluster to its ib address. ``ray_metrics_port``
    None leaves Ray's job out: Ray serves its metrics export port only from the dashboard
    agent's reporter module, which imports ray[default]'s dependencies (opencensus,
    prometheus_client, opentelemetry: ray 2.60.0 ``ray/dashboard/modules/reporter/reporter_agent.py``
    lines 13-22, the MetricsAgent at 533-556), and vLLM's CUDA image installs ``ray[cgraph]``
    only (vLLM 0.17.1 ``requirements/cuda.txt``): its agent loads no module and the port
    stays closed (the lab's dashboard_agent.log: "Available modules: []").
    """
    if not nodes:
        raise MonitoringError("the cluster has no node; the inventory's cluster group is empty")
    missing = sorted(host for host, address in nodes.items() if not address)
    if missing:
        raise MonitoringError(f"{', '.join(missing)} have no ib_address; set it in the inventory")
    if head not in nodes:
        raise MonitoringError(f"the head {head} is not in the cluster group")
    if prometheus_host not in nodes:
        raise MonitoringError(
            f"monitoring_prometheus_host is {prometheus_host!r}, not a host of the cluster group; name one of "
            + ", ".join(sorted(nodes))
        )

    def group(host: str, address: str, port: int) -> dict[str, Any]:
        return {"targets": [hostport(address, port)], "labels": {"node": host, "cluster": cluster}}

    vllm_address = serve_target(serve_host, nodes[head], prometheus_on_head=prometheus_host == head)
    hosts = sorted(nodes)
    return {
        "global": {
            "scrape_interval": scrape_interval,
            "evaluation_interval": scrape_interval,
            "external_labels": {"cluster": cluster},
        },
        "rule_files": list(rule_files),
        "scrape_configs": [
            {
                "job_name": "vllm",
                "metrics_path": "/metrics",
                "static_configs": [group(head, vllm_address, serve_port)],
            },
            *(
                [
                    {
                        "job_name": "ray",
                        "metrics_path": "/metrics",
                        "static_configs": [group(host, nodes[host], ray_metrics_port) for host in hosts],
                    }
                ]
                if ray_metrics_port is not None
                else []
            ),
            {
                "job_name": "node",
                "metrics_path": "/metrics",
                "static_configs": [group(host, nodes[host], node_exporter_port) for host in hosts],
            },
        ],
    }


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def plan_textfile(cluster: str, record: Mapping[str, Any] | None) -> str:
    """The node exporter textfile of the node's planned memory limit (no sample without a plan)."""
    lines = [
        f"# HELP {PLAN_METRIC} The memory limit the deployed plan keeps the node's use under "
        "(MemTotal less MemAvailable), from the deployed record.",
        f"# TYPE {PLAN_METRIC} gauge",
    ]
    limit = plan_limit_bytes(record)
    if limit is not None:
        lines.append(f'{PLAN_METRIC}{{cluster="{_label_value(cluster)}"}} {limit}')
    return "\n".join(lines) + "\n"


# PromQL's words that are not metric names (prometheus/promql/parser/lex.go, v2.42.0).
KEYWORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "atan2",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "offset",
        "inf",
        "nan",
        # Aggregation operators: keywords to the lexer, followed by ``by (...)`` or their arguments.
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
    }
)
# Followed by a parenthesised list of label names, not expressions.
_LABEL_LIST_WORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_NUMBER = re.compile(r"0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_DURATION = re.compile(r"(?:\d+(?:ms|[smhdwy]))+")


def _skip_closing(expr: str, start: int, opening: str, closing: str) -> int:
    """The index after the bracket that closes the one at ``start`` (strings inside skipped)."""
    depth = 0
    i = start
    while i < len(expr):
        char = expr[i]
        if char in "\"'`":
            i = _skip_string(expr, i)
            continue
        if char == opening:
            depth += 1
        elif char == closing:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise MonitoringError(f"unbalanced {opening!r} in {expr!r}")


def _skip_string(expr: str, start: int) -> int:
    quote = expr[start]
    i = start + 1
    while i < len(expr):
        if expr[i] == "\\" and quote != "`":
            i += 2
            continue
        if expr[i] == quote:
            return i + 1
        i += 1
    raise MonitoringError(f"unterminated string in {expr!r}")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads.

    Skipped: function names (an identifier before ``(``), keywords, label matchers
    (``{...}``), ranges and subqueries (``[...]``), the label lists after ``by``,
    ``without``, ``on``, ``ignoring``, ``group_left`` and ``group_right``, the duration
    after ``offset``, strings, numbers and Grafana's ``$variables``. A name given as
    ``{__name__="x"}`` is counted too.
    """
    names: set[str] = set()
    i = 0
    pending_label_list = False
    after_offset = False
    while i < len(expr):
        char = expr[i]
        if char.isspace():
            i += 1
            continue
        if char == "#":  # a comment runs to the end of the line
            end = expr.find("\n", i)
            i = len(expr) if end < 0 else end + 1
            continue
        if char in "\"'`":
            i = _skip_string(expr, i)
            continue
        if char == "{":
            end = _skip_closing(expr, i, "{", "}")
            for match in re.finditer(r"__name__\s*=\s*[\"'`]([A-Za-z_:][A-Za-z0-9_:]*)[\"'`]", expr[i:end]):
                names.add(match.group(1))
            i = end
            continue
        if char == "[":
            i = _skip_closing(expr, i, "[", "]")
            continue
        if char == "(" and pending_label_list:
            i = _skip_closing(expr, i, "(", ")")
            pending_label_list = False
            continue
        if char == "$":
            match = re.compile(r"\$\{[^}]*\}|\$[A-Za-z0-9_]+").match(expr, i)
            i = match.end() if match else i + 1
            continue
        if after_offset:
            match = _DURATION.match(expr, i) or (re.compile(r"-").match(expr, i))
            after_offset = False
            if match:
                i = match.end()
                continue
        if char.isdigit() or (char == "." and i + 1 < len(expr) and expr[i + 1].isdigit()):
            match = _DURATION.match(expr, i)
            number = _NUMBER.match(expr, i)
            i = max(match.end() if match else i, number.end() if number else i + 1)
            continue
        match = _IDENT.match(expr, i)
        if match:
            word = match.group(0)
            i = match.end()
            rest = expr[i:].lstrip()
            if word.lower() in KEYWORDS:
                pending_label_list = word.lower() in _LABEL_LIST_WORDS
                after_offset = word.lower() == "offset"
                continue
            if rest.startswith("("):  # a function or an aggregation
                continue
            names.add(word)
            continue
        i += 1
    return names


def _panel_exprs(panels: Iterable[Mapping[str, Any]]) -> Iterable[str]:
    for panel in panels or []:
        for target in panel.get("targets") or []:
            if target.get("expr"):
                yield str(target["expr"])
        yield from _panel_exprs(panel.get("panels") or [])


def dashboard_exprs(dashboard: Mapping[str, Any]) -> list[str]:
    """Every PromQL expression of a Grafana dashboard's panels (rows' panels included)."""
    return list(_panel_exprs(dashboard.get("panels") or []))


def rules_exprs(rules: Mapping[str, Any]) -> list[str]:
    """Every expression of a Prometheus rules file (alerts and recordings)."""
    return [str(rule["expr"]) for group in rules.get("groups") or [] for rule in group.get("rules") or []]


def rules_recorded(rules: Mapping[str, Any]) -> set[str]:
    """The names a rules file records itself (not read from a scrape)."""
    return {
        str(rule["record"])
        for group in rules.get("groups") or []
        for rule in group.get("rules") or []
        if "record" in rule
    }


def dashboard_metric_names(dashboard: Mapping[str, Any]) -> set[str]:
    """The metric names a Grafana dashboard's queries read."""
    return set().union(*(metric_names(expr) for expr in dashboard_exprs(dashboard)))


def rules_metric_names(rules: Mapping[str, Any]) -> set[str]:
    """The metric names a rules file's expressions read from the scrape (its own recordings left out)."""
    return set().union(*(metric_names(expr) for expr in rules_exprs(rules))) - rules_recorded(rules)


# Series Prometheus makes itself for every target (prometheus/scrape/scrape.go, v2.42.0):
# never in a target's page, always in Prometheus's.
SYNTHETIC = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_series_added"})


def missing_metrics(
    needed: Iterable[str], scraped: Iterable[str], exceptions: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Compare the metric names a dashboard or rules need with a scrape's names.

    ``exceptions`` maps a name the scrape cannot hold to the documented reason; an
    exception that the scrape does hold is reported as ``stale_exceptions`` (the reason
    no longer applies). ``ok`` is true when nothing is missing and no exception is stale.
    """
    exceptions = dict(exceptions or {})
    have = set(scraped) | SYNTHETIC
    need = set(needed)
    missing = sorted(need - have - set(exceptions))
    stale = sorted(name for name in exceptions if name in have)
    return {
        "ok": not missing and not stale,
        "missing": missing,
        "excepted": {name: exceptions[name] for name in sorted(need & set(exceptions))},
        "stale_exceptions": stale,
    }
