# Copyright (c) sparkops.vllm maintainers
# SPDX-License-Identifier: Apache-2.0
"""Address checks for the RoCE link, on Python's ipaddress and nothing else.

ansible.utils' ipaddr filters need the netaddr library, which the `ansible`
bundle does not install; these four filters cover what the inventory
validation needs without adding a controller dependency. Each filter is
documented in the YAML file of the same name next to this one.
"""

from __future__ import annotations

import base64
import ipaddress

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkops.vllm.plugins.module_utils import _netplan
from ansible_collections.sparkops.vllm.plugins.module_utils._inventory_contract_safety import (
    network as _network,  # the one parser of address/prefix strings
)


def _address(value):
    """Return an ip_address for a plain address string, else None."""
    if not isinstance(value, str) or "/" in value:
        return None
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return None


def _has_broadcast(network):
    # RFC 3021 (/31) and host routes (/32) have no network or broadcast
    # address to avoid; IPv6 has no broadcast at all.
    return network.version == 4 and network.prefixlen < 31


def _reserved_network_address(network):
    # IPv6 reserves the all-zero host part as the Subnet-Router anycast
    # address (RFC 4291 2.6.1), IPv4 as the network address.
    if network.version == 4:
        return _has_broadcast(network)
    return network.prefixlen < 127


def is_ip(value):
    """True when ``value`` is an IPv4 or IPv6 address without a prefix."""
    return _address(value) is not None


def is_cidr(value, strict=True):
    """True when ``value`` is ``address/prefix``; strict also refuses host bits."""
    return _network(value, strict=bool(strict)) is not None


def ip_in_subnet(value, subnet, usable=False):
    """True when the address ``value`` lies in ``subnet``.

    With ``usable``, the network and broadcast addresses do not count. Any input
    that is not an address or a CIDR gives False, so that a template can test
    validity and membership separately and report each in its own words.
    """
    address = _address(value)
    network = _network(subnet, strict=False)
    if address is None or network is None or address.version != network.version:
        return False
    if address not in network:
        return False
    if usable:
        if _reserved_network_address(network) and address == network.network_address:
            return False
        if _has_broadcast(network) and address == network.broadcast_address:
            return False
    return True


def subnet_info(value):
    """Describe the network of an ``address/prefix`` string (host bits allowed)."""
    network = _network(value, strict=False)
    if network is None:
        raise AnsibleFilterError(
            f"subnet_info: {value!r} is not a CIDR such as 192.168.200.0/24; "
            "test it with sparkops.vllm.is_cidr first"
        )
    hosts = network.num_addresses
    first = network.network_address
    last = network.broadcast_address
    if _reserved_network_address(network):
        hosts -= 1
        first += 1
    if _has_broadcast(network):
        hosts -= 1
        last -= 1
    return {
        "cidr": str(network),
        "network": str(network.network_address),
        "prefix": network.prefixlen,
        "version": network.version,
        "broadcast": str(network.broadcast_address) if _has_broadcast(network) else None,
        "first_host": str(first),
        "last_host": str(last),
        "num_hosts": hosts,
    }


def netplan_conflicts(files, interface, address, own_file, macaddress=None):
    """The other /etc/netplan files that configure ``interface`` (module_utils/_netplan.py has the rule).

    ``files`` is a mapping of path to text, or the results of a looped ``slurp``.
    """
    if isinstance(files, list):
        files = {
            item["source"]: base64.b64decode(item["content"]).decode("utf-8", "replace")
            for item in files
            if isinstance(item, dict) and item.get("content") is not None and item.get("source")
        }
    return _netplan.conflicts(dict(files or {}), interface, address, own_file, macaddress)


def netplan_management_problems(links, routes, interface, management_addresses):
    """Why ``interface`` carries the management connection (module_utils/_netplan.py); empty: it does not."""
    return _netplan.management_problems(
        links, routes, interface, [a for a in management_addresses or [] if a]
    )


class FilterModule:
    """sparkops.vllm network filters."""

    def filters(self):
        return {
            "is_ip": is_ip,
            "is_cidr": is_cidr,
            "ip_in_subnet": ip_in_subnet,
            "subnet_info": subnet_info,
            "netplan_conflicts": netplan_conflicts,
            "netplan_management_problems": netplan_management_problems,
        }
