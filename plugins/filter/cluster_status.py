# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Filters of status.yml: the cluster's report and its table."""

from __future__ import annotations

from ansible_collections.sparkops.vllm.plugins.module_utils import _cluster_status as status


def cluster_status_report(hosts, hostvars, cluster, settings):
    """The report of every host in ``hosts`` from its ``cluster_status_raw`` fact and the cluster's raw facts."""
    raw_nodes = []
    for host in hosts:
        host_vars = hostvars[host]
        raw = host_vars.get("cluster_status_raw")
        if raw is None:
            # The node left the play before it recorded anything (it failed in a way the role does not expect).
            raw = {"host": host, "reachable": False, "msg": "the node left the run before status read it"}
        raw_nodes.append(dict(raw, ansible_host=str(host_vars.get("ansible_host") or host)))
    return status.report(raw_nodes, dict(cluster), dict(settings))


def cluster_status_table(report):
    """The report as the lines status.yml prints: the table, the endpoint, each problem with its fix."""
    return status.table(report)


class FilterModule:
    """sparkops.vllm cluster status filters."""

    def filters(self):
        return {
            "cluster_status_report": cluster_status_report,
            "cluster_status_table": cluster_status_table,
        }
