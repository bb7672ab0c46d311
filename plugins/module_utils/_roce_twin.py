# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Addressing the twin of a Spark's cabled port (opt-in): its netdev, address and checks.

A DGX Spark's ConnectX-7 port shows up as two netdevs, one per PCI domain
(``enp1s0f1np1`` and ``enP2p1s0f1np1``: NVIDIA/daqiri PR #108,
docs/tutorials/system_configuration.md, "PCIe-segment views of one CX-7 port"). netplan
addresses only ``ib_interface`` by default, so the twin's RDMA device holds no IPv4 GID and
NCCL uses its link-local RoCE v1 GID there (``_nccl_gid.py``). With
``roce_network_twin_subnet`` set, the roce_network stage gives every twin an address of its
own on that subnet, with the cabled port's MTU, in the same netplan file: the twin then has
IPv4 RoCE v2 GIDs like the primary (docs/rdma.md, "Addressing the twin").
"""

from __future__ import annotations

import ipaddress
import re

# en[P<domain>]p<bus>s<slot>f<fn>np<port>: a Spark's ConnectX-7 netdev.
_SPARK_NETDEV = re.compile(r"^en(?P<domain>P\d+)?(?P<rest>p\d+s\d+f\d+np\d+)$")


def twin_netdev(name):
    """The twin of a domain-0 Spark netdev (``enp1s0f1np1`` -> ``enP2p1s0f1np1``), else None."""
    match = _SPARK_NETDEV.match(str(name or ""))
    if not match or match["domain"]:
        return None
    return f"enP2{match['rest']}"


def _network(text):
    try:
        return ipaddress.ip_network(str(text), strict=False)
    except ValueError:
        return None


def twin_plan(hosts):
    """Each host's twin interface and address, and every problem before anything changes.

    ``hosts`` maps a host name to ``{ib_interface, ib_subnet, twin_subnet, twin_address,
    twin_interface}`` (the last three may be None). Returns ``{enabled, hosts: {name:
    {interface, address, prefix}}, problems: [..]}``; problems name the host, the value and
    the fix. Disabled (no host sets ``twin_subnet``) gives no hosts and no problems.
    """
    problems = []
    planned = {}
    subnets = {h: v.get("twin_subnet") for h, v in hosts.items() if v.get("twin_subnet") not in (None, "")}
    if not subnets:
        return {"enabled": False, "hosts": {}, "problems": []}
    seen = {}
    for host, values in sorted(hosts.items()):
        subnet_text = values.get("twin_subnet")
        if subnet_text in (None, ""):
            problems.append(
                f"{host}: roce_network_twin_subnet is not set while other nodes set it "
                f"({', '.join(sorted(subnets))}). Fix: set it for the whole group cluster, or on none."
            )
            continue
        subnet = _network(subnet_text)
        if subnet is None or subnet.version != 4:
            problems.append(
                f"{host}: roce_network_twin_subnet {subnet_text!r} is not an IPv4 CIDR. Fix: a subnet of its own, "
                "e.g. 192.168.201.0/24."
            )
            continue
        ib_subnet = _network(values.get("ib_subnet"))
        if ib_subnet is not None and subnet.overlaps(ib_subnet):
            problems.append(
                f"{host}: roce_network_twin_subnet {subnet} overlaps sparkops_ib_subnet {ib_subnet}: two netdevs on "
                "one subnet make the kernel answer for either from both. Fix: a subnet of its own."
            )
            continue
        interface = values.get("twin_interface") or twin_netdev(values.get("ib_interface"))
        if not interface:
            problems.append(
                f"{host}: ib_interface {values.get('ib_interface')!r} is not a Spark ConnectX-7 netdev, so its twin "
                "cannot be named. Fix: set roce_network_twin_interface to the twin's netdev (ibdev2netdev lists it)."
            )
            continue
        if interface == values.get("ib_interface"):
            problems.append(
                f"{host}: roce_network_twin_interface {interface!r} is ib_interface itself. Fix: name the twin netdev."
            )
            continue
        address_text = values.get("twin_address")
        try:
            address = ipaddress.ip_address(str(address_text))
        except ValueError:
            problems.append(
                f"{host}: roce_network_twin_address {address_text!r} is not an IPv4 address. Fix: set one in "
                f"{subnet} for every node (host_vars)."
            )
            continue
        if address not in subnet or address in (subnet.network_address, subnet.broadcast_address):
            problems.append(
                f"{host}: roce_network_twin_address {address} is not a host address of roce_network_twin_subnet "
                f"{subnet}. Fix: pick one inside it."
            )
            continue
        if str(address) in seen:
            problems.append(
                f"{host}: roce_network_twin_address {address} is also {seen[str(address)]}'s. Fix: one per node."
            )
            continue
        seen[str(address)] = host
        planned[host] = {"interface": interface, "address": str(address), "prefix": subnet.prefixlen}
    return {"enabled": True, "hosts": planned, "problems": problems}
