# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The rules of the project's own iptables chains, and the checks of the sources they let in.

A chain of its own guards a set of TCP ports: INPUT jumps to it for those ports (one
``multiport`` match, with a comment that names the cluster), and the chain RETURNs what may
reach them (to INPUT and the host's other rules, so the chain never accepts anything itself),
then RETURNs the replies of established connections and DROPs the rest. Two roles build one:
ray_cluster for Ray's ports (let in on ``lo`` and ``ib_interface``) and monitoring for
Prometheus's and the node exporter's (let in on ``lo``, from ``sparkops_ib_subnet`` on
``ib_interface``, and from ``monitoring_allowed_sources``). Both render the same script
(roles/firewall_chain) from ``chain()``; the chain's and the units' names come from the
layout (``_layout.py``).

``chain()`` writes every rule exactly as ``iptables -S`` prints it (``-s`` before ``-i``,
a network with its host bits cleared and its prefix, ``/32`` included), so the script's
``check`` compares the kernel's rules with its own text and a rerun finds nothing to do.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

# xtables' XT_EXTENSION_MAXNAMELEN (29) with its NUL.
CHAIN_NAME_MAX = 28
# One multiport match takes at most 15 ports, a range counting as two (xt_multiport.h XT_MULTI_PORTS).
MULTIPORT_SLOTS = 15
# What iptables and the script take as a chain name, an interface and a comment without quoting.
_CHAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# Linux interface names: at most 15 characters (IFNAMSIZ 16); validate's ib_interface_pattern.
_INTERFACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,14}")
_COMMENT = re.compile(r"[A-Za-z0-9 _.:/-]{1,255}")
_PORT = re.compile(r"([0-9]{1,5})(?:[-:]([0-9]{1,5}))?")

# After the accepts: the replies of connections the node opened, then every other packet.
_TAIL = (
    ["-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "RETURN"],
    ["-j", "DROP"],
)


def _port_entry(value: Any) -> tuple[int, int] | None:
    """(low, high) of a port (6379, "6379") or a range ("10002-10999", "10002:10999"), or None."""
    if isinstance(value, bool):
        return None
    match = _PORT.fullmatch(str(value).strip()) if isinstance(value, (int, str)) else None
    if not match:
        return None
    low = int(match[1])
    high = int(match[2]) if match[2] else low
    return (low, high) if 1 <= low <= high <= 65535 else None


def _multiport(entry: tuple[int, int]) -> str:
    low, high = entry
    return str(low) if low == high else f"{low}:{high}"


def source_fault(item: Any) -> str | None:  # noqa: PLR0911 - one fault per class, the first that applies
    """What is wrong with one source to let in (words after the item), or None for an IPv4 CIDR."""
    if not isinstance(item, str):
        return "is not a string; write each source as an IPv4 network in CIDR form, e.g. 10.0.0.0/24"
    text = item.strip()
    try:
        network = ipaddress.ip_network(text, strict=False)
    except ValueError:
        return "is not an IPv4 network in CIDR form (address/prefix), e.g. 10.0.0.0/24"
    if network.version != 4:
        return "is IPv6; the chain is built with iptables, which filters IPv4 only (the project is IPv4 end to end)"
    if "/" not in text:
        return f"has no prefix; write {text}/32 for that one machine, or its network, e.g. 10.0.0.0/24"
    if str(network) != text:
        address = text.split("/")[0]
        return (
            f"has host bits set (iptables would let in all of {network}); write {network} for the network, "
            f"or {address}/32 for that one machine"
        )
    if network.prefixlen == 0:
        return "lets every address in, so the chain would guard nothing; name the machines or networks that need the ports"
    return None


def sources_problems(value: Any, setting: str, fix_file: str) -> list[str]:
    """One line per fault of a list of sources: "<setting> ... <what is wrong>. Fix: ..." (empty when valid)."""
    fix = f"Fix: list IPv4 networks in CIDR form, e.g. {setting}: [10.0.0.0/24, 10.0.1.7/32] ({fix_file})"
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        return [f"{setting} {json.dumps(value, default=str)} is not a list. {fix}"]
    problems = []
    for item in value:
        fault = source_fault(item)
        if fault:
            problems.append(f"{setting} item {item!r} {fault}. {fix}")
    return problems


def _accept_rule(entry: Mapping[str, Any]) -> tuple[list[str], str | None]:
    """The words of one accept (a RETURN) in ``iptables -S`` order, and what is wrong with it."""
    words: list[str] = []
    source, interface = entry.get("source"), entry.get("interface")
    if source is None and interface is None:
        return [], f"the accept {dict(entry)!r} names neither a source nor an interface"
    if source is not None:
        fault = source_fault(source)
        if fault:
            return [], f"the source {source!r} {fault}"
        words += ["-s", str(ipaddress.ip_network(str(source).strip()))]
    if interface is not None:
        if not isinstance(interface, str) or not _INTERFACE.fullmatch(interface):
            return [], f"the interface {interface!r} is not an interface name"
        words += ["-i", interface]
    return [*words, "-j", "RETURN"], None


def chain(
    name: str,
    *,
    ports: Iterable[Any],
    comment: str,
    accept: Iterable[Mapping[str, Any]],
    sources: Iterable[Any] = (),
) -> dict[str, Any]:
    """The chain ``name``: the ports its INPUT jump matches, and its rules.

    ``ports``: ports or ranges ("lo-hi"), in the order the jump lists them; each once.
    ``accept``: what the chain lets through, in order, each ``{source?, interface?}``
    (a RETURN for the source's network, on the interface when given); then ``sources``,
    networks let through on any interface (an operator's setting, e.g.
    ``monitoring_allowed_sources``).

    Returns ``{chain, comment, ports, multiport, slots, rules, problems}``: ``ports`` in
    multiport form ("lo:hi"), ``multiport`` joined with commas, ``slots`` what they take of
    one multiport match, ``rules`` the words after ``-A <chain>`` of each rule as
    ``iptables -S`` prints them, and ``problems`` what keeps the chain from being built
    (empty when it can be).
    """
    problems: list[str] = []
    if not isinstance(name, str) or not _CHAIN.fullmatch(name) or len(name) > CHAIN_NAME_MAX:
        problems.append(
            f"the chain name {name!r} is not 1 to {CHAIN_NAME_MAX} letters, digits, '_', '.' or '-'"
        )
    if not isinstance(comment, str) or not _COMMENT.fullmatch(comment):
        problems.append(f"the comment {comment!r} is not 1 to 255 letters, digits, spaces and _ . : / -")
    entries: list[tuple[int, int]] = []
    values = list(ports or [])
    for value in values:
        entry = _port_entry(value)
        if entry is None:
            problems.append(f"the port {value!r} is not a port from 1 to 65535 or a range low-high")
        elif entry not in entries:
            entries.append(entry)
    if not values:
        problems.append("no port to guard")
    slots = sum(1 if low == high else 2 for low, high in entries)
    if slots > MULTIPORT_SLOTS:
        problems.append(
            f"the ports {','.join(map(_multiport, entries))} take {slots} multiport slots (at most "
            f"{MULTIPORT_SLOTS}, a range counting as two); make the pinned ports contiguous ranges"
        )
    rules: list[list[str]] = []
    entries_to_accept = [entry if isinstance(entry, Mapping) else {} for entry in accept or []]
    entries_to_accept += [{"source": source} for source in sources or []]
    for entry in entries_to_accept:
        words, fault = _accept_rule(entry)
        if fault:
            problems.append(fault)
        elif words not in rules:
            rules.append(words)
    rules += [list(rule) for rule in _TAIL]
    multiport = [_multiport(entry) for entry in entries]
    return {
        "chain": name,
        "comment": comment,
        "ports": multiport,
        "multiport": ",".join(multiport),
        "slots": slots,
        "rules": rules,
        "problems": problems,
    }
