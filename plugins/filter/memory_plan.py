# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Filters over memory_plan results: the preflight's cluster-wide memory decision."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkops.vllm.plugins.module_utils import _cluster_memory_plan as cluster
from ansible_collections.sparkops.vllm.plugins.module_utils import _memory_guard as guard


def memory_plan_measured(text, model_id, tensor_parallel_size, pipeline_parallel_size, vllm_version=None):
    """The last start's measured figures (the head's measured file), when they apply; and a note."""
    return cluster.measured_from_record(
        text, model_id, tensor_parallel_size, pipeline_parallel_size, vllm_version
    )


def memory_plan_utilization(recommendations, given=None, current=None):
    """The cluster's utilization: the given one, the deployed one while it still fits, or the nodes' smallest."""
    try:
        return cluster.choose_utilization(dict(recommendations), given, current)
    except cluster.ClusterPlanError as exc:
        raise AnsibleFilterError(f"memory_plan_utilization: {exc}") from exc


def memory_plan_report(plan, host, role="node", utilization_source=None):
    """Lines saying why a memory_plan result does not fit on host: numbers, reasons, levers."""
    return cluster.failure_report(host, role, plan, utilization_source)


def memory_plan_cluster(nodes, choice, notes=None):
    """The cluster's plan (the fact later stages read) from every node's plan at one utilization."""
    try:
        return cluster.cluster_plan(dict(nodes), dict(choice), notes)
    except cluster.ClusterPlanError as exc:
        raise AnsibleFilterError(f"memory_plan_cluster: {exc}") from exc


def memory_plan_summary(plan, cluster_name=None, max_model_len=None):
    """A one-screen summary of the cluster's plan, as lines."""
    return cluster.summary_lines(plan, cluster_name, max_model_len)


def memory_plan_version_check(image_version, planned_version, host="the head"):
    """ "" when the image's vLLM release is the one the plan assumed, else the failure with its fix."""
    return cluster.version_mismatch(image_version, planned_version, host)


def memory_plan_drop_caches_command(what, form="exec"):
    """The command a unit's ExecStartPre (``exec``) or the serve stage (``argv``) runs to drop the page cache."""
    try:
        return guard.drop_caches_command(what, form)
    except ValueError as exc:
        raise AnsibleFilterError(f"memory_plan_drop_caches_command: {exc}") from exc


def memory_plan_page_cache_outcome(text):
    """``{dropped, what}`` of the last drop line in a text, or None when it holds none."""
    return guard.page_cache_outcome(str(text or ""))


def memory_plan_page_cache(outputs):
    """The serve summary's page-cache line from ``{host: text, or a registered command result}``."""

    def text(value):
        if isinstance(value, dict):
            return "" if value.get("skipped") else str(value.get("stdout") or "")
        return str(value or "")

    return guard.page_cache_report({h: guard.page_cache_outcome(text(v)) for h, v in dict(outputs).items()})


class FilterModule:
    """sparkops.vllm memory plan filters."""

    def filters(self):
        return {
            "memory_plan_measured": memory_plan_measured,
            "memory_plan_utilization": memory_plan_utilization,
            "memory_plan_report": memory_plan_report,
            "memory_plan_cluster": memory_plan_cluster,
            "memory_plan_summary": memory_plan_summary,
            "memory_plan_version_check": memory_plan_version_check,
            "memory_plan_drop_caches_command": memory_plan_drop_caches_command,
            "memory_plan_page_cache": memory_plan_page_cache,
            "memory_plan_page_cache_outcome": memory_plan_page_cache_outcome,
        }
