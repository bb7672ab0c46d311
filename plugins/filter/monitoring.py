# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The monitoring stage's scrape config and plan textfile (plugins/module_utils/_monitoring.py), as filters."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkops.vllm.plugins.module_utils import _deployed_record as record
from ansible_collections.sparkops.vllm.plugins.module_utils import _monitoring


def monitoring_scrape_config(
    nodes,
    *,
    cluster,
    head,
    prometheus_host,
    serve_host,
    serve_port,
    ray_metrics_port,
    node_exporter_port,
    scrape_interval,
    rule_files,
):
    """Prometheus's configuration for the cluster ({host: ib address})."""
    try:
        return _monitoring.scrape_config(
            cluster=cluster,
            nodes=dict(nodes or {}),
            head=head,
            prometheus_host=prometheus_host,
            serve_host=serve_host,
            serve_port=int(serve_port),
            ray_metrics_port=None if ray_metrics_port in (None, "") else int(ray_metrics_port),
            node_exporter_port=int(node_exporter_port),
            scrape_interval=str(scrape_interval),
            rule_files=list(rule_files or []),
        )
    except _monitoring.MonitoringError as exc:
        raise AnsibleFilterError(f"monitoring_scrape_config: {exc}") from exc


def monitoring_plan_textfile(record_text, cluster):
    """The node exporter textfile of the planned memory limit, from the deployed record's text."""
    return _monitoring.plan_textfile(cluster, record.load(record_text))


def monitoring_hostport(address, port):
    """``address:port``, an IPv6 address in brackets."""
    return _monitoring.hostport(str(address), int(port))


class FilterModule:
    """sparkops.vllm monitoring filters."""

    def filters(self):
        return {
            "monitoring_scrape_config": monitoring_scrape_config,
            "monitoring_plan_textfile": monitoring_plan_textfile,
            "monitoring_hostport": monitoring_hostport,
        }
