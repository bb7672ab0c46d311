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


# The kernel's Documentation/networking/ip-sysctl.rst ("arp_ignore", "arp_announce"): for
# both, "the max value from conf/{all,interface}/..." applies to the interface. arp_ignore 1
# (reply only for an address of the incoming interface) and 2 (and only when the sender is
# in that address's subnet) stop one netdev answering for its twin's address; 0 answers
# for any local address (the flux), 3 is about scopes, not interfaces, and 8 answers
# nothing. arp_announce 2 takes an ARP request's source from the outgoing netdev's own
# addresses.
ARP_WANTED = {"arp_ignore": (1, 2), "arp_announce": (2,)}
ARP_FIX_VALUES = {"arp_ignore": 1, "arp_announce": 2}
_ARP_LINE = re.compile(
    r"^/proc/sys/net/ipv4/conf/(?P<dev>[^/\s]+)/(?P<key>arp_ignore|arp_announce):(?P<value>-?\d+)\s*$"
)


def arp_paths(netdevs):
    """The /proc/sys files :func:`arp_flux_problems` reads: ``all`` and each netdev's two settings."""
    return [f"/proc/sys/net/ipv4/conf/{dev}/{key}" for dev in ["all", *netdevs] for key in ARP_WANTED]


def parse_arp_settings(text):
    """``{netdev: {key: int}}`` from ``grep -H . FILE...`` over :func:`arp_paths` (``path:value`` lines).

    Lines of any other shape (grep's messages for a netdev that is gone) are ignored: a
    netdev missing from the result is reported by :func:`arp_flux_problems`.
    """
    found = {}
    for line in str(text or "").splitlines():
        match = _ARP_LINE.match(line.strip())
        if match and match["dev"] not in (".", ".."):
            found.setdefault(match["dev"], {})[match["key"]] = int(match["value"])
    return found


def arp_flux_problems(host, netdevs, settings, sysctl_file):
    """Problems with the ARP settings of an addressed twin pair, each naming the host, value and fix.

    ``netdevs`` are ib_interface and its twin, ``settings`` what :func:`parse_arp_settings`
    read. The effective value of each setting is the larger of ``all``'s and the netdev's
    (ip-sysctl.rst); it must be one of :data:`ARP_WANTED`'s.
    """
    problems = []
    common = settings.get("all", {})
    for dev in netdevs:
        own = settings.get(dev)
        if own is None or any(key not in own or key not in common for key in ARP_WANTED):
            problems.append(
                f"{host}: the ARP settings of {dev} could not be read (/proc/sys/net/ipv4/conf/{dev}/). "
                f"Fix: check that {dev} exists (ip link show {dev}) and rerun."
            )
            continue
        for key, allowed in ARP_WANTED.items():
            effective = max(common[key], own[key])
            if effective in allowed:
                continue
            problems.append(
                f"{host}: net.ipv4.conf.{dev}.{key} is effectively {effective} (all {common[key]}, {dev} {own[key]}), "
                f"not {' or '.join(str(v) for v in allowed)}: with the twin addressed, {dev} and its pair share one "
                "wire and each answers ARP for the other's address with its own MAC (ARP flux), so a peer may send "
                f"to the wrong netdev (docs/rdma.md, 'Addressing the twin'). Fix: set roce_network_mode: configure "
                f"(it writes {sysctl_file}), or put net.ipv4.conf.{dev}.{key} = {ARP_FIX_VALUES[key]} in a file "
                "under /etc/sysctl.d/, run sysctl --system, and rerun."
            )
    return problems
