# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Which /etc/netplan files configure ``ib_interface`` besides the roce_network stage's own, and what that does.

netplan reads every ``/etc/netplan/*.yaml`` in lexical order of the file names, and
"lexicographically later files amend (new mapping keys) or override (same mapping keys)
previous ones" (netplan(5), "General structure"; netplan-generate(8), "Handling multiple
files", netplan.io 0.106). The stage's file is ``60-sparkops-roce.yaml``: a file sorting
after it overrides the keys it sets (``mtu``, ``dhcp4``, ``addresses``), and any file adds
the keys it does not set. Such keys move the GID table: ``link-local: [ipv4]`` (what NVIDIA's
"connect two Sparks" playbook writes for the cabled ports) gives the port a 169.254 address,
so an IPv4 RoCE v2 GID appears beside ib_address's and the indices shift (field reports:
tonyd2wild/DeepSeek-v4-Flash-Vision-Exp-DSpark-1M-NVFP4-KV-2x-DGX-Spark #38 and PR #40,
"netplan re-apply moves RoCEv2 IPv4-mapped GIDs": FujitsuPolycom/sparkring #290).

The rule (docs/rdma.md, "Other netplan files"), per other file that configures the interface:

- error: it sorts after the stage's file (it overrides what the stage set), or it gives
  the interface an IPv4 address other than ib_address, DHCPv4, or IPv4 link-local (each an
  IPv4 GID NCCL may take instead of ib_address's);
- warning: anything else (it sorts before, and sets only keys the stage's file overrides,
  or keys that do not touch IPv4: the first-listed renderer, IPv6 settings).

A definition configures the interface when its ID is the interface's name and it has no
``match``, when its ``set-name`` is the name, or when its ``match: name`` glob matches the
name (netplan(5), "Device configuration IDs"; a match on a MAC address counts when
``macaddress`` is given and equal). A file that is not YAML is reported: netplan refuses to
apply anything then.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import posixpath

import yaml

# The device types whose definitions take an address (netplan(5)); ethernets is what a Spark's port is.
_TYPES = ("ethernets", "bonds", "bridges", "vlans")


def _configures(conf_id, definition, interface, macaddress):
    if not isinstance(definition, dict):
        return False
    if definition.get("set-name") == interface:
        return True
    match = definition.get("match")
    if not isinstance(match, dict):
        return conf_id == interface
    name, mac = match.get("name"), match.get("macaddress")
    # match: {} selects every device of the type.
    by_name = name is None or fnmatch.fnmatchcase(interface, str(name))
    by_mac = mac is None or (bool(macaddress) and str(mac).lower() == str(macaddress).lower())
    return by_name and by_mac


def definitions(path, text, interface, macaddress=None):
    """The definitions of ``interface`` in one file: ``[{file, type, id, keys}]``; raises ValueError for bad YAML."""
    try:
        doc = yaml.safe_load(text) if text and text.strip() else None
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not YAML ({str(exc).splitlines()[0]})") from exc
    network = (doc or {}).get("network") if isinstance(doc, dict) else None
    if not isinstance(network, dict):
        return []
    found = []
    for kind in _TYPES:
        section = network.get(kind)
        if not isinstance(section, dict):
            continue
        for conf_id, definition in section.items():
            if _configures(str(conf_id), definition, interface, macaddress):
                found.append({"file": path, "type": kind, "id": str(conf_id), "keys": dict(definition)})
    return found


def _ipv4_effects(keys, address):
    """What a definition adds to the interface's IPv4 (each an IPv4 GID beside ib_address's)."""
    effects = []
    for item in keys.get("addresses") or []:
        text = next(iter(item)) if isinstance(item, dict) else str(item)
        try:
            ip = ipaddress.ip_interface(text).ip
        except ValueError:
            continue
        if ip.version == 4 and str(ip) != address:
            effects.append(f"the address {text}")
    if keys.get("dhcp4") in (True, "true", "yes", "on"):
        effects.append("dhcp4: true")
    link_local = keys.get("link-local")
    if isinstance(link_local, list) and "ipv4" in [str(x) for x in link_local]:
        effects.append("link-local: [ipv4] (a 169.254 address)")
    return effects


def conflicts(files, interface, address, own_file, macaddress=None):
    """Other netplan files that configure ``interface``: ``{errors, warnings, definitions}``.

    ``files`` maps each /etc/netplan/*.yaml path to its text; ``own_file`` is
    roce_network_netplan_file (it may be absent: verify mode writes none). Each message names
    the file, what it sets and the fix; the host is the caller's to add. ``own_file`` empty
    (verify mode) makes only the IPv4 additions errors.
    """
    own_file = own_file or ""
    own_name = posixpath.basename(own_file)
    errors, warnings, found = [], [], []
    for path in sorted(files, key=posixpath.basename):
        if path == own_file:
            continue
        try:
            found_here = definitions(path, files[path], interface, macaddress)
        except ValueError as exc:
            errors.append(
                f"{exc}: netplan refuses to apply any file while one is broken. Fix: repair or remove it."
            )
            continue
        for item in found_here:
            found.append(item)
            keys = sorted(item["keys"])
            where = f"{path} configures {interface} (as {item['type']}.{item['id']}: {', '.join(keys) or 'no keys'})"
            # No file of the stage (verify mode): nothing of it to override.
            later = bool(own_name) and posixpath.basename(path) > own_name
            effects = _ipv4_effects(item["keys"], address)
            fix = (
                f"Fix: remove {interface} from {path} (netplan merges every file, the later one winning), keep "
                f"{own_file} as its only configuration, and rerun the roce_network stage."
            )
            if later:
                errors.append(
                    f"{where}; it sorts after {own_name}, so netplan takes its keys over the stage's "
                    f"(netplan(5): later files override the same keys). {fix}"
                )
            elif effects:
                errors.append(
                    f"{where}; it adds {', '.join(effects)} beside ib_address {address}: another IPv4 GID on the "
                    f"port, which shifts the GID index and which NCCL may pick instead. {fix}"
                )
            else:
                order = (
                    f"it sorts before {own_name}, whose keys override it"
                    if own_name
                    else "the stage writes no file"
                )
                warnings.append(f"{where}; {order}, and it sets nothing IPv4 beside ib_address.")
    return {"errors": errors, "warnings": warnings, "definitions": found}


def management_problems(links, routes, interface, management_addresses):
    """Why ``interface`` must not get the stage's netplan file: it carries the management connection.

    ``links`` is ``ip -j addr show``, ``routes`` ``ip -j route show default`` (both parsed),
    ``management_addresses`` the node's addresses the controller reaches it by (ansible_host
    when it is an address, the server side of SSH_CONNECTION). The stage's file sets
    ``dhcp4: false`` and only ib_address on the interface: applied to the management
    interface it would drop the address the controller is connected to.
    """
    problems = []
    for route in routes or []:
        if route.get("dev") == interface and route.get("dst") in ("default", "0.0.0.0/0", None):
            problems.append(
                f"{interface} carries the default route (via {route.get('gateway') or 'a direct link'})"
            )
            break
    link = next((item for item in links or [] if item.get("ifname") == interface), None)
    held = {item.get("local") for item in (link or {}).get("addr_info") or [] if item.get("local")}
    # ansible_host and SSH_CONNECTION's server side are usually the same address: name it once.
    for address in dict.fromkeys(management_addresses or []):
        if address and address in held:
            problems.append(f"{interface} holds {address}, the address the controller connects to")
    return problems
