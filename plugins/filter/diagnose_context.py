# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The host context sparkops.vllm.diagnose uses to tell a management address from an ib address."""

from __future__ import annotations


def diagnose_hosts(hosts, hostvars):
    """Map each host to its ib address and management address(es), for diagnose's ``context.hosts``."""
    context = {}
    for host in hosts:
        host_vars = hostvars[host]
        management = host_vars.get("ansible_host") or host
        context[host] = {
            "ib_address": host_vars.get("ib_address"),
            "management_addresses": [str(management)],
        }
    return context


class FilterModule:
    """sparkops.vllm diagnose context filters."""

    def filters(self):
        return {"diagnose_hosts": diagnose_hosts}
