# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Filter of the roce_network stage: the twin addressing plan of every node (opt-in)."""

from __future__ import annotations

from ansible_collections.sparkops.vllm.plugins.module_utils._roce_twin import twin_plan


def roce_twin_plan(hosts, hostvars):
    """:func:`_roce_twin.twin_plan` over ``hosts``, reading each one's settings from ``hostvars``."""
    table = {}
    for host in hosts:
        values = hostvars[host]
        table[str(host)] = {
            "ib_interface": values.get("ib_interface"),
            "ib_subnet": values.get("sparkops_ib_subnet"),
            "twin_subnet": values.get("roce_network_twin_subnet"),
            "twin_address": values.get("roce_network_twin_address"),
            "twin_interface": values.get("roce_network_twin_interface"),
        }
    return twin_plan(table)


class FilterModule:
    """sparkops.vllm twin addressing filter."""

    def filters(self):
        return {"roce_twin_plan": roce_twin_plan}
