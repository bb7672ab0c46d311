# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Filter of the roce_network stage: the verdict on the don't-fragment pings to every peer."""

from __future__ import annotations

from ansible_collections.sparkops.vllm.plugins.module_utils._roce_reach import reachability_problems


def roce_reachability_problems(probe_lines, host, interface, mtu, neigh, *, peers, hostvars):
    """:func:`_roce_reach.reachability_problems`, each peer's ib_interface and its MAC read from ``hostvars``."""
    table = {}
    for peer in peers:
        values = hostvars[peer]
        link = values.get("__roce_network_link") or {}
        table[str(peer)] = {"interface": values.get("ib_interface"), "mac": link.get("address")}
    return reachability_problems(str(host), str(interface), mtu, probe_lines, neigh, peers=table)


class FilterModule:
    """sparkops.vllm reachability filter."""

    def filters(self):
        return {"roce_reachability_problems": roce_reachability_problems}
