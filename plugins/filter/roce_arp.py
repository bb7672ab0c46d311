# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Filters of the roce_network stage: the ARP settings an addressed twin pair needs (no ARP flux)."""

from __future__ import annotations

from ansible_collections.sparkops.vllm.plugins.module_utils._roce_twin import (
    arp_flux_problems,
    arp_paths,
    parse_arp_settings,
)


def roce_arp_paths(netdevs):
    """:func:`_roce_twin.arp_paths`: the /proc/sys files to read for ``netdevs``."""
    return arp_paths([str(dev) for dev in netdevs])


def roce_arp_problems(text, host, netdevs, sysctl_file):
    """:func:`_roce_twin.arp_flux_problems` over ``grep -H .`` output of :func:`roce_arp_paths`."""
    return arp_flux_problems(
        str(host), [str(dev) for dev in netdevs], parse_arp_settings(text), str(sysctl_file)
    )


class FilterModule:
    """sparkops.vllm ARP settings filters."""

    def filters(self):
        return {"roce_arp_paths": roce_arp_paths, "roce_arp_problems": roce_arp_problems}
