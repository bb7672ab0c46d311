# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Filters of diagnose.yml: findings with host and source, and the one report it prints."""

from __future__ import annotations

from ansible_collections.sparkops.vllm.plugins.module_utils import _support_bundle as support


def support_gathered(hosts, hostvars):
    """The hosts diagnose.yml reached, their units' states and the notes of what could not be read."""
    collected, unreachable = {}, {}
    for host in hosts:
        host_vars = hostvars[host]
        if host_vars.get("cluster_diagnose_collected") is not None:
            collected[host] = host_vars["cluster_diagnose_collected"]
        else:
            unreachable[host] = (host_vars.get("cluster_status_raw") or {}).get("msg")
    return support.gathered(list(hosts), collected, unreachable)


def support_findings(diagnosis, staging):
    """diagnose's findings, root cause first, each with ``host``, ``source`` and bundle-relative evidence paths."""
    return support.findings_for_json(dict(diagnosis), str(staging))


def support_report(findings, units=None, notes=None, lines_read=0, bundle=None):
    """The lines of diagnose.yml's report: findings in order with host, evidence and fix; units; notes; bundle."""
    return support.report_lines(list(findings), list(units or []), list(notes or []), lines_read, bundle)


class FilterModule:
    """sparkops.vllm support bundle filters."""

    def filters(self):
        return {
            "support_gathered": support_gathered,
            "support_findings": support_findings,
            "support_report": support_report,
        }
