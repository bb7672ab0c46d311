# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The RoCE link of a node: its RDMA devices and what its firewall lets through.

Two independent parts, both pure (no Ansible, no subprocess), so tests feed them
fixture trees and captured texts:

- ``roce_devices``: the RDMA devices behind a network interface, read from sysfs
  (``/sys/class/infiniband/<dev>/...``), with their GID tables, ``NCCL_IB_HCA``,
  and the GID NCCL takes on each (``_nccl_gid``; no NCCL_IB_GID_INDEX unless pinned).
- ``firewall_blocks``: which of the cluster's ports a new TCP connection (and an
  ICMP echo) from the RoCE subnet cannot reach, read from ``nft -j list ruleset``
  or ``iptables-save`` and ``ufw status verbose``.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex

try:
    from ansible_collections.sparkops.vllm.plugins.module_utils._nccl_gid import (
        gid_summary,
        nccl_gids,
        pinned_gid_problems,
    )
except ImportError:  # a plain module beside _nccl_gid.py (the lab's vLLM image; _ib_recheck.BUNDLE on a node)
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _nccl_gid import gid_summary, nccl_gids, pinned_gid_problems  # type: ignore[no-redef]

# ---------------------------------------------------------------------------
# RDMA devices
# ---------------------------------------------------------------------------

# A DGX Spark's ConnectX-7 reaches the GB10 over two PCIe links, so each port
# shows up twice: rocep1s0f1 (netdev enp1s0f1np1) and roceP2p1s0f1 (netdev
# enP2p1s0f1np1). The twin's names differ only in the PCI domain marker
# ``P<n>``; NCCL needs both devices in NCCL_IB_HCA to use the whole link.
_DOMAIN_MARKER = re.compile(r"^(roce|en|ib|mlx5_)P\d+(?=p)")

ROCE_V2 = "RoCE v2"
ROCE_V1 = "IB/RoCE v1"


def twin_key(name):
    """The name with its PCI domain marker removed: twins share this key."""
    return _DOMAIN_MARKER.sub(r"\1", name)


def _read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        # The kernel answers EINVAL for the type and ndev of an empty GID slot.
        return None


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _numeric(names):
    return sorted((n for n in names if n.isdigit()), key=int)


def parse_gid(text):
    """``{gid, ip}`` for a sysfs GID text; ``ip`` is the IPv4 of a ::ffff:a.b.c.d GID."""
    if not text:
        return None
    try:
        address = ipaddress.IPv6Address(text)
    except ValueError:
        return None
    if address == ipaddress.IPv6Address(0):
        return None
    mapped = address.ipv4_mapped
    return {"gid": str(address), "ip": str(mapped) if mapped else str(address)}


def read_device(sysfs_root, name):
    """One RDMA device: its netdevs and, per port, the GID table."""
    base = os.path.join(sysfs_root, "class", "infiniband", name)
    netdevs = set(_listdir(os.path.join(base, "device", "net")))
    ports = []
    for port in _numeric(_listdir(os.path.join(base, "ports"))):
        pbase = os.path.join(base, "ports", port)
        gids = []
        for index in _numeric(_listdir(os.path.join(pbase, "gids"))):
            gid = parse_gid(_read(os.path.join(pbase, "gids", index)))
            if gid is None:
                continue
            ndev = _read(os.path.join(pbase, "gid_attrs", "ndevs", index))
            if ndev:
                netdevs.add(ndev)
            gids.append(
                {
                    "index": int(index),
                    "gid": gid["gid"],
                    "ip": gid["ip"],
                    "type": _read(os.path.join(pbase, "gid_attrs", "types", index)),
                    "ndev": ndev,
                }
            )
        ports.append(
            {
                "port": int(port),
                "state": _read(os.path.join(pbase, "state")),
                "link_layer": _read(os.path.join(pbase, "link_layer")),
                "gids": gids,
                # The kernel lists every slot of the table, empty ones too: NCCL walks them all.
                "gid_table_len": len(_numeric(_listdir(os.path.join(pbase, "gids")))),
            }
        )
    return {"name": name, "netdevs": sorted(netdevs), "ports": ports}


def roce_devices(sysfs_root, interface, address=None, *, hca=None, gid_index=None):
    """``_devices_of`` with what NCCL makes of them: its GID per device and a pinned index checked.

    ``hca`` is the NCCL_IB_HCA in force when the inventory overrides the detected list;
    ``gid_index`` an operator's pinned NCCL_IB_GID_INDEX (None: unset, NCCL picks per device).
    """
    found = _devices_of(sysfs_root, interface, address)
    found["nccl_gids"] = nccl_gids(found["devices"], hca)
    found["nccl_gid_summary"] = gid_summary(found["nccl_gids"])
    found["pinned_gid_problems"] = pinned_gid_problems(
        found["devices"], hca or found["nccl_ib_hca"], gid_index, found["address_gid_indices"]
    )
    return found


def _devices_of(sysfs_root, interface, address=None):
    """The RDMA devices behind ``interface`` and the NCCL settings for them.

    Returns a dict with ``devices`` (those of the interface, twins included,
    each marked ``twin``), ``all_devices`` (names of every RDMA device on the
    node with their netdevs), ``nccl_ib_hca``,
    ``address_gid_indices`` (device -> index of the RoCE v2 GID holding
    ``address``) and ``warnings``. No NCCL_IB_GID_INDEX is derived: one index
    for every device is wrong on a Spark's unaddressed twin.
    """
    names = _listdir(os.path.join(sysfs_root, "class", "infiniband"))
    every = [read_device(sysfs_root, name) for name in names]
    key = twin_key(interface)
    chosen = []
    for device in every:
        if interface in device["netdevs"]:
            chosen.append(dict(device, twin=False))
        elif any(twin_key(n) == key for n in device["netdevs"]):
            chosen.append(dict(device, twin=True))
    # Devices on the interface itself first, then their twins; by name within.
    chosen.sort(key=lambda d: (d["twin"], d["name"].lower()))
    warnings = []
    result = {
        "devices": chosen,
        "all_devices": [{"name": d["name"], "netdevs": d["netdevs"]} for d in every],
        "nccl_ib_hca": ",".join(d["name"] for d in chosen),
        "address_gid_indices": {},
        "warnings": warnings,
    }
    if not every:
        warnings.append(
            f"No RDMA device under {os.path.join(sysfs_root, 'class', 'infiniband')}: this host has no RoCE "
            f"device (or the mlx5_ib driver is not loaded), so NCCL_IB_HCA stays unset and NCCL uses TCP "
            f"sockets over {interface}. Expected in the lab; on a DGX Spark check `ibdev2netdev` and "
            f"`lsmod | grep mlx5_ib`."
        )
        return result
    if not chosen:
        listing = (
            ", ".join(f"{d['name']} ({', '.join(d['netdevs']) or 'no netdev'})" for d in every) or "none"
        )
        warnings.append(
            f"No RDMA device is bound to {interface} (devices: {listing}), so NCCL_IB_HCA stays unset and "
            f"NCCL uses TCP sockets. Fix: set ib_interface to the netdev of the cabled RoCE port "
            f"(`ibdev2netdev` maps each device to its netdev)."
        )
        return result
    if address:
        want = str(ipaddress.ip_address(address))
        per_device = {}
        for device in chosen:
            for port in device["ports"]:
                for gid in port["gids"]:
                    if gid["type"] == ROCE_V2 and gid["ip"] == want:
                        per_device.setdefault(device["name"], gid["index"])
        result["address_gid_indices"] = per_device
        if not per_device:
            v1 = any(
                gid["ip"] == want and gid["type"] != ROCE_V2
                for device in chosen
                for port in device["ports"]
                for gid in port["gids"]
            )
            warnings.append(
                f"No RoCE v2 GID of {', '.join(d['name'] for d in chosen)} holds {want}"
                + (" (only a RoCE v1 entry does; NCCL needs RoCE v2)" if v1 else "")
                + f", so NCCL finds no IPv4 RoCE v2 GID for it. Fix: give {interface} its address {want} "
                f"(the roce_network stage does in configure mode) and check it with `ip -br addr show {interface}`."
            )
    return result


# ---------------------------------------------------------------------------
# Firewall
# ---------------------------------------------------------------------------

_PROTO_NUMBERS = {"1": "icmp", "6": "tcp", "17": "udp"}


class _Rule:
    """One rule as far as this evaluation understands it.

    ``saddr``/``daddr``: list of networks (or None: any); ``negate_*`` flags;
    ``iif``: interface names (None: any); ``proto``: "tcp"/"udp"/"icmp"/None;
    ``dports``: list of (lo, hi) (None: any); ``ctstate``: set of states
    (None: any); ``unknown``: a match this evaluation cannot read;
    ``verdict``: accept, drop, reject, jump, goto, return or None (no verdict).
    """

    def __init__(self, text):
        self.text = text
        self.saddr = None
        self.negate_saddr = False
        self.iif = None
        self.negate_iif = False
        self.proto = None
        self.dports = None
        self.negate_dports = False
        self.ctstate = None
        self.unknown = []
        self.verdict = None
        self.target = None
        self.comment = None
        self.never = False

    def matches(self, packet):
        """True, False, or None when a match the evaluation cannot read decides."""
        verdicts = [
            not self.never,
            self._source_matches(packet),
            self.iif is None or (packet["iif"] in self.iif) != self.negate_iif,
            self.proto is None or self.proto == packet["proto"],
            self._port_matches(packet),
            self.ctstate is None or "new" in self.ctstate,
        ]
        if False in verdicts:
            return False
        if None in verdicts or self.unknown:
            return None
        return True

    def _source_matches(self, packet):
        if self.saddr is None:
            return True
        nets = [net for net in self.saddr if net.version == packet["version"]]
        inside = any(packet["src_net"].subnet_of(net) for net in nets)
        overlaps = any(packet["src_net"].overlaps(net) for net in nets)
        if inside:
            return not self.negate_saddr
        # Part of the subnet only: some peers match, some do not.
        return None if overlaps else self.negate_saddr

    def _port_matches(self, packet):
        if self.dports is None:
            return True
        if packet["dport"] is None:
            return False
        return any(lo <= packet["dport"] <= hi for lo, hi in self.dports) != self.negate_dports


def _network(text):
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def _ports(text):
    out = []
    for raw in str(text).split(","):
        part = raw.strip()
        if not part:
            continue
        lo, _, hi = part.replace("-", ":").partition(":")
        out.append((int(lo), int(hi or lo)))
    return out


# iptables-save ---------------------------------------------------------------


def parse_iptables_save(text):
    """``{chains: {name: {policy, rules}}}`` of the filter table of ``iptables-save`` output."""
    chains, table = {}, None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("*"):
            table = line[1:]
            continue
        if table != "filter":
            continue
        if line.startswith(":"):
            name, policy = line[1:].split()[:2]
            chains[name] = {"policy": None if policy == "-" else policy.lower(), "rules": []}
        elif line.startswith("-A "):
            args = shlex.split(line)
            chain = args[1]
            chains.setdefault(chain, {"policy": None, "rules": []})["rules"].append(
                _iptables_rule(line, args[2:])
            )
    return {"family": "ip", "table": "filter", "chains": chains}


def _iptables_rule(text, args):
    rule = _Rule(text)
    negate = False
    i = 0
    while i < len(args):
        arg = args[i]
        value = args[i + 1] if i + 1 < len(args) else None
        if arg == "!":
            negate = True
            i += 1
            continue
        if arg in ("-s", "--source"):
            rule.saddr = [n for n in (_network(v) for v in value.split(",")) if n]
            rule.negate_saddr = negate
        elif arg in ("-i", "--in-interface"):
            rule.iif = [value]
            rule.negate_iif = negate
        elif arg in ("-p", "--protocol"):
            proto = _PROTO_NUMBERS.get(value, value.lower())
            if negate:
                rule.unknown.append(f"! -p {value}")
            elif proto != "all":
                rule.proto = proto
        elif arg in ("--dport", "--destination-port", "--dports", "--destination-ports"):
            rule.dports = _ports(value)
            rule.negate_dports = negate
        elif arg in ("--ctstate", "--state"):
            if negate:
                rule.unknown.append(f"! {arg} {value}")
            else:
                rule.ctstate = {s.lower() for s in value.split(",")}
        elif arg in ("-j", "--jump", "-g", "--goto"):
            target = value.upper()
            if target in ("ACCEPT", "DROP", "REJECT", "RETURN"):
                rule.verdict = target.lower()
            elif arg in ("-j", "--jump") and value in ("LOG", "NFLOG", "CT", "MARK", "CONNMARK"):
                rule.verdict = None
            else:
                rule.verdict = "jump" if arg in ("-j", "--jump") else "goto"
                rule.target = value
            i += 2
            # The target's own options (--reject-with ...) do not decide a match.
            break
        elif arg in ("-m", "--match"):
            i += 2
            negate = False
            continue
        elif arg == "--comment":
            rule.comment = value
        elif arg in ("-d", "--destination"):
            # The traffic is addressed to this node's ib address: a
            # destination match is read as matching.
            pass
        elif arg == "--dst-type":
            # Unicast to this node is LOCAL (ufw's ufw-not-local chain).
            if (value.upper() == "LOCAL") == negate:
                rule.never = True
        elif arg in ("--icmp-type", "--icmpv6-type"):
            if not (value in ("8", "echo-request", "128") and not negate):
                rule.unknown.append(f"{arg} {value}")
        elif arg.startswith("-"):
            rule.unknown.append(f"{arg} {value}" if value and not value.startswith("-") else arg)
            if value is None or value.startswith("-"):
                i += 1
                negate = False
                continue
        i += 2
        negate = False
    return rule


# nft -j list ruleset ------------------------------------------------------------


def parse_nft_ruleset(text):
    """Every table's chains from ``nft -j list ruleset``: a list of ``{family, table, chains}``."""
    data = json.loads(text) if isinstance(text, str) else text
    tables, by_key = [], {}
    for item in data.get("nftables", []):
        if "table" in item:
            table = item["table"]
            entry = {"family": table["family"], "table": table["name"], "chains": {}}
            by_key[(table["family"], table["name"])] = entry
            tables.append(entry)
        elif "chain" in item:
            chain = item["chain"]
            entry = by_key.get((chain["family"], chain["table"]))
            if entry is None:
                continue
            entry["chains"][chain["name"]] = {
                "policy": chain.get("policy") if chain.get("hook") else None,
                "hook": chain.get("hook"),
                "prio": chain.get("prio", 0),
                "type": chain.get("type"),
                "rules": [],
            }
        elif "rule" in item:
            rule = item["rule"]
            entry = by_key.get((rule["family"], rule["table"]))
            if entry is None or rule["chain"] not in entry["chains"]:
                continue
            entry["chains"][rule["chain"]]["rules"].append(_nft_rule(rule))
    return tables


def _nft_value(right):
    """A set of networks or port ranges from an nft JSON right-hand side."""
    items = right["set"] if isinstance(right, dict) and "set" in right else [right]
    out = []
    for item in items:
        if isinstance(item, dict) and "prefix" in item:
            out.append(("net", f"{item['prefix']['addr']}/{item['prefix']['len']}"))
        elif isinstance(item, dict) and "range" in item:
            out.append(("range", tuple(item["range"])))
        elif isinstance(item, list) and len(item) == 2:
            out.append(("range", tuple(item)))
        else:
            out.append(("scalar", item))
    return out


def _nft_rule(rule):
    text = f"{rule['family']} {rule['table']} {rule['chain']} handle {rule.get('handle')}"
    parsed = _Rule(text)
    parsed.comment = rule.get("comment")
    described = []
    for expr in rule.get("expr", []):
        if "match" in expr:
            match = expr["match"]
            left, right, op = match["left"], match["right"], match.get("op", "==")
            negate = op == "!="
            values = _nft_value(right)
            described.append(_describe_match(left, op, right))
            if isinstance(left, dict) and "payload" in left:
                field = left["payload"].get("field")
                proto = left["payload"].get("protocol")
                if field == "saddr" and proto in ("ip", "ip6"):
                    parsed.saddr = [
                        _network(v if kind == "net" else str(v))
                        for kind, v in values
                        if kind in ("net", "scalar")
                    ]
                    parsed.saddr = [n for n in parsed.saddr if n]
                    parsed.negate_saddr = negate
                elif field == "dport" and proto in ("tcp", "udp", "th"):
                    if proto != "th":
                        parsed.proto = proto
                    parsed.dports = [
                        (int(v[0]), int(v[1])) if kind == "range" else (int(v), int(v)) for kind, v in values
                    ]
                    parsed.negate_dports = negate
                elif field == "daddr":
                    continue
                elif field == "type" and proto in ("icmp", "icmpv6") and not negate:
                    parsed.proto = proto
                    if any(v not in ("echo-request",) for _kind, v in values):
                        parsed.unknown.append(described[-1])
                else:
                    parsed.unknown.append(described[-1])
            elif isinstance(left, dict) and "meta" in left:
                key = left["meta"].get("key")
                if key in ("iifname", "iif"):
                    parsed.iif = [str(v) for _kind, v in values]
                    parsed.negate_iif = negate
                elif key in ("l4proto", "protocol", "nfproto") and key == "l4proto":
                    names = {_PROTO_NUMBERS.get(str(v), str(v)) for _kind, v in values}
                    if negate or len(names) != 1:
                        parsed.unknown.append(described[-1])
                    else:
                        parsed.proto = names.pop()
                else:
                    parsed.unknown.append(described[-1])
            elif isinstance(left, dict) and "ct" in left and left["ct"].get("key") == "state":
                states = (
                    right
                    if isinstance(right, list)
                    else (right.get("set") if isinstance(right, dict) else [right])
                )
                if negate:
                    parsed.unknown.append(described[-1])
                else:
                    parsed.ctstate = {str(s) for s in states}
            else:
                parsed.unknown.append(described[-1])
        elif "accept" in expr:
            parsed.verdict = "accept"
        elif "drop" in expr:
            parsed.verdict = "drop"
        elif "reject" in expr:
            parsed.verdict = "reject"
        elif "return" in expr:
            parsed.verdict = "return"
        elif "jump" in expr:
            parsed.verdict, parsed.target = "jump", expr["jump"]["target"]
        elif "goto" in expr:
            parsed.verdict, parsed.target = "goto", expr["goto"]["target"]
        elif "xt" in expr:
            # iptables-nft extensions nft cannot translate (e.g. -m comment is fine, others not).
            if expr["xt"].get("type") == "target":
                name = expr["xt"].get("name", "")
                if name.upper() in ("ACCEPT", "DROP", "REJECT"):
                    parsed.verdict = name.lower()
            elif expr["xt"].get("name") != "comment":
                parsed.unknown.append(f"xt {expr['xt'].get('name')}")
    if described:
        parsed.text = f"{text}: {' '.join(described)} {parsed.verdict or ''}".strip()
    else:
        parsed.text = f"{text}: {parsed.verdict or '(no verdict)'}"
    return parsed


def _describe_match(left, op, right):
    if isinstance(left, dict) and "payload" in left:
        name = f"{left['payload'].get('protocol')} {left['payload'].get('field')}"
    elif isinstance(left, dict) and "meta" in left:
        name = f"meta {left['meta'].get('key')}"
    elif isinstance(left, dict) and "ct" in left:
        name = f"ct {left['ct'].get('key')}"
    else:
        name = json.dumps(left, sort_keys=True)
    return f"{name} {'!= ' if op == '!=' else ''}{json.dumps(right, sort_keys=True)}"


# Evaluation ---------------------------------------------------------------------


def _walk(table, chain_name, packet, depth=0):
    """The verdict of ``chain_name`` for ``packet``: (verdict, rule text, certain)."""
    chain = table["chains"].get(chain_name)
    if chain is None or depth > 16:
        return None, None, True
    certain = True
    for rule in chain["rules"]:
        hit = rule.matches(packet)
        if hit is False:
            continue
        if hit is None:
            # A rule this evaluation cannot read fully: it may or may not
            # match. Accepts are not counted (they may not apply); drops are
            # reported as possible blocks.
            if rule.verdict in ("drop", "reject"):
                return rule.verdict, rule.text, False
            if rule.verdict == "accept":
                certain = False
            continue
        if rule.verdict in ("accept", "drop", "reject"):
            return rule.verdict, rule.text, certain
        if rule.verdict == "return":
            return None, None, certain
        if rule.verdict in ("jump", "goto"):
            verdict, text, sure = _walk(table, rule.target, packet, depth + 1)
            certain = certain and sure
            if verdict is not None or rule.verdict == "goto":
                return verdict, text, certain
    return None, None, certain


def _base_input_chains(tables, family):
    out = []
    for table in tables:
        if table["family"] not in ("inet", family):
            continue
        for name, chain in table["chains"].items():
            if chain.get("hook") == "input" and chain.get("type", "filter") == "filter":
                out.append((chain.get("prio", 0), table, name))
    out.sort(key=lambda item: item[0])
    return out


def evaluate(tables, packet):
    """Every base input chain's verdict for ``packet``, in hook order.

    nftables runs every base chain on the input hook; an accept ends only the
    chain it is in, a drop ends the packet. So the packet is dropped when any
    base chain drops it, whatever another chain (of ours or not) accepts.
    """
    drops = []
    for _prio, table, name in _base_input_chains(tables, "ip6" if packet["version"] == 6 else "ip"):
        verdict, text, certain = _walk(table, name, packet)
        chain = table["chains"][name]
        if verdict is None:
            if chain.get("policy") == "drop":
                drops.append(
                    {
                        "family": table["family"],
                        "table": table["table"],
                        "chain": name,
                        "kind": "policy",
                        "rule": f"{table['family']} {table['table']} {name}: policy drop",
                        "certain": certain,
                    }
                )
        elif verdict in ("drop", "reject"):
            drops.append(
                {
                    "family": table["family"],
                    "table": table["table"],
                    "chain": name,
                    "kind": "rule",
                    "rule": text,
                    "certain": certain,
                }
            )
    return drops


def iptables_tables(text):
    """iptables-save's filter table in the shape of parse_nft_ruleset's tables."""
    parsed = parse_iptables_save(text)
    for name, chain in parsed["chains"].items():
        if name == "INPUT":
            chain["hook"], chain["prio"], chain["type"] = "input", 0, "filter"
    return [parsed]


def parse_ufw_status(text):
    """``{active, default_incoming, rules}`` from ``ufw status verbose``."""
    active = bool(re.search(r"^Status:\s*active", text or "", re.M))
    default = re.search(r"^Default:\s*(\w+)\s*\(incoming\)", text or "", re.M)
    rules = [line.strip() for line in (text or "").splitlines() if re.search(r"\bALLOW\b", line)]
    return {"active": active, "default_incoming": default.group(1) if default else None, "rules": rules}


def cluster_services(ray_ports, ephemeral_range, ssh_port=22):
    """The services the cluster needs, each ``{name, proto, ports: [(lo, hi)]}``."""
    services = []
    for name, value in ray_ports.items():
        services.append({"name": f"Ray {name.replace('_', ' ')}", "proto": "tcp", "ports": _ports(value)})
    lo, hi = (int(p) for p in str(ephemeral_range).split())
    services.append(
        {"name": "NCCL/Gloo/torch ephemeral (ip_local_port_range)", "proto": "tcp", "ports": [(lo, hi)]}
    )
    services.append({"name": "SSH (rsync of the model)", "proto": "tcp", "ports": [(ssh_port, ssh_port)]})
    services.append({"name": "ICMP echo (the ping check)", "proto": "icmp", "ports": None})
    return services


def firewall_blocks(services, subnet, interface, *, nft_json=None, iptables_save=None, ufw_status=None):
    """What blocks each service for new traffic from ``subnet`` arriving on ``interface``.

    Returns ``{source, blocks: [{service, proto, ports, family, table, chain,
    kind, rule, certain}], ufw}``. ``kind`` is ``policy`` (a default drop, which
    roce_network_firewall_open can open) or ``rule`` (an explicit drop or reject
    that matches the cluster's traffic, which it never overrides).
    """
    network = ipaddress.ip_network(subnet, strict=False)
    if nft_json:
        tables, source = parse_nft_ruleset(nft_json), "nftables"
    elif iptables_save:
        tables, source = iptables_tables(iptables_save), "iptables"
    else:
        tables, source = [], None
    ufw = (
        parse_ufw_status(ufw_status)
        if ufw_status
        else {"active": False, "default_incoming": None, "rules": []}
    )
    blocks = []
    for service in services:
        probes = service["ports"] or [(None, None)]
        seen = set()
        for lo, hi in probes:
            # Probing both ends of a range finds a rule that covers part of it.
            for port in sorted({lo, hi}, key=lambda p: -1 if p is None else p):
                packet = {
                    "src_net": network,
                    "version": network.version,
                    "iif": interface,
                    "proto": service["proto"],
                    "dport": port,
                }
                for drop in evaluate(tables, packet):
                    key = (drop["family"], drop["table"], drop["chain"], drop["rule"])
                    if key in seen:
                        continue
                    seen.add(key)
                    blocks.append(
                        dict(
                            drop,
                            service=service["name"],
                            proto=service["proto"],
                            ports=format_ports(service["ports"]),
                        )
                    )
    return {"source": source, "blocks": blocks, "ufw": ufw}


def format_ports(ports):
    """``[(6379, 6379), (10002, 10999)]`` as ``6379,10002-10999``; ICMP as ``-``."""
    if not ports:
        return "-"
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ports)


def merged_ports(services, proto="tcp"):
    """Every port of ``proto`` the services need, merged into sorted ranges."""
    spans = sorted(span for s in services if s["proto"] == proto for span in (s["ports"] or []))
    merged = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


def firewall_summary(found, services):
    """firewall_blocks' result with what the role needs to report and to open."""
    blocks = found["blocks"]
    policy_chains = []
    for block in blocks:
        key = {"family": block["family"], "table": block["table"], "chain": block["chain"]}
        if block["kind"] == "policy" and key not in policy_chains:
            policy_chains.append(key)
    # iptables can address its own chain (ip filter INPUT); any other chain is
    # native nftables, opened with `nft insert rule`.
    for chain in policy_chains:
        chain["iptables"] = (
            chain["family"] == "ip" and chain["table"] == "filter" and chain["chain"] == "INPUT"
        )
    tcp = merged_ports(services, "tcp")
    return {
        "source": found["source"],
        "ufw_active": found["ufw"]["active"],
        "blocked": bool(blocks),
        "blocks": blocks,
        "explicit": [b for b in blocks if b["kind"] == "rule"],
        "policy_chains": policy_chains,
        "services": [dict(s, ports=format_ports(s["ports"])) for s in services],
        "tcp_ranges": [f"{lo}:{hi}" if lo != hi else str(lo) for lo, hi in tcp],
        "tcp_nft": ", ".join(f"{lo}-{hi}" if lo != hi else str(lo) for lo, hi in tcp),
    }
