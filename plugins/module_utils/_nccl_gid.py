# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Which GID NCCL uses on each RDMA device, and whether a pinned NCCL_IB_GID_INDEX holds.

NCCL picks the GID per device and port (``ncclIbGetGidIndex``; read at NVIDIA/nccl tags
v2.21.5-1 and v2.28.9-1 in ``src/transport/net_ib.cc`` (2.28.9 is the NCCL torch
2.11.0+cu130 loads) and v2.30.4-1 in ``src/transport/net_ib/connect.cc``, the same rule in
all three for RoCE):

- ``NCCL_IB_GID_INDEX`` set (``NCCL_PARAM(IbGidIndex, "IB_GID_INDEX", -1)``): that index
  on every device, whatever it holds there.
- unset: start at index 0 and walk the table (``ncclUpdateGidIndex``): a candidate of the
  wanted address family (``NCCL_IB_ADDR_FAMILY``, default ``AF_INET``) in the wanted range
  (``NCCL_IB_ADDR_RANGE``, default any) replaces one of the other family; among the wanted
  family, a valid (configured, not link-local) candidate of the wanted RoCE version
  (``NCCL_IB_ROCE_VERSION_NUM``, default 2) replaces one of another version or an invalid
  one. So an IPv4-mapped RoCE v2 GID wins wherever the device has one, and a device
  without an IPv4 address keeps index 0 (its link-local RoCE v1 GID on mlx5).

A DGX Spark shows its cabled port as two RDMA devices (twins), and netplan addresses one
netdev: the twin has no IPv4 GID. One pinned index is therefore right on one twin and
empty on the other, and the queue-pair setup fails there (``ibv_modify_qp``; field reports:
MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark PR #10, FujitsuPolycom/sparkring #186 and
#290). The project leaves the index unset unless the operator pins one, and then checks it
on every listed device.
"""

from __future__ import annotations

import ipaddress

ROCE_V2 = "RoCE v2"
AF_INET = "AF_INET"
AF_INET6 = "AF_INET6"
_ZERO = ipaddress.IPv6Address(0)


def _address(gid):
    try:
        return ipaddress.IPv6Address(gid) if gid else _ZERO
    except ValueError:
        return _ZERO


def _words(gid):
    value = int(_address(gid))
    return [(value >> shift) & 0xFFFFFFFF for shift in (96, 64, 32, 0)]


def gid_family(gid):
    """NCCL's getGidAddrFamily: AF_INET for ::ffff:a.b.c.d (and its ff0e:: multicast form)."""
    w = _words(gid)
    mapped = (w[0] | w[1] | (w[2] ^ 0x0000FFFF)) == 0
    mapped_multicast = w[0] == 0xFF0E0000 and (w[1] | (w[2] ^ 0x0000FFFF)) == 0
    return AF_INET if mapped or mapped_multicast else AF_INET6


def gid_valid(gid):
    """NCCL's validGid: configured (not zero, not a bare fe80::) and not link-local."""
    w = _words(gid)
    trailer = w[1] | w[2] | w[3]
    configured = not ((w[0] | trailer) == 0 or (w[0] == 0xFE800000 and trailer == 0))
    link_local = w[0] == 0xFE800000 and w[1] == 0
    return configured and not link_local


def _in_range(family, gid, addr_range):
    """NCCL's matchGidAddrPrefix; ``addr_range`` is NCCL_IB_ADDR_RANGE (None: any)."""
    if not addr_range:
        return True
    try:
        network = ipaddress.ip_network(addr_range, strict=False)
    except ValueError:
        # NCCL ignores a range it cannot parse ("ignoring address").
        return True
    address = _address(gid)
    if family == AF_INET:
        if network.version != 4:
            return True
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF) in network
    if network.version != 6:
        return True
    return address in network


def _version(entry):
    kind = (entry or {}).get("type") or ""
    if kind.startswith("IB/RoCE v1") or kind.startswith("RoCE v1"):
        return 1
    if kind.startswith(ROCE_V2):
        return 2
    return -1


def port_table(port):
    """The port's GID table by index, empty slots as None, as NCCL walks it (0..gid_tbl_len-1)."""
    by_index = {g["index"]: g for g in port.get("gids", [])}
    length = max(port.get("gid_table_len") or 0, max(by_index, default=-1) + 1)
    return [by_index.get(i) for i in range(length)]


def nccl_gid_index(port, *, family=AF_INET, roce_version=2, addr_range=None):
    """The index NCCL takes on this port when NCCL_IB_GID_INDEX is unset (ncclIbGetGidIndex)."""
    table = port_table(port)

    def gid(i):
        return (table[i] or {}).get("gid")

    index = 0
    for candidate in range(1, len(table)):
        current_family = gid_family(gid(index))
        candidate_family = gid_family(gid(candidate))
        in_range = _in_range(family, gid(candidate), addr_range)
        if candidate_family != current_family and candidate_family == family and in_range:
            index = candidate
            continue
        if candidate_family != family or not gid_valid(gid(candidate)) or not in_range:
            continue
        current_version, candidate_version = _version(table[index]), _version(table[candidate])
        if (
            current_version != candidate_version or not gid_valid(gid(index))
        ) and candidate_version == roce_version:
            index = candidate
    return index


def _describe(entry, index):
    if entry is None:
        return f"index {index} is empty"
    return f"index {index} is {entry.get('type') or 'of unknown type'} {entry['gid']}"


def nccl_gids(devices, hca=None):
    """Per listed device and port, the GID NCCL uses with NCCL_IB_GID_INDEX unset.

    ``hca`` is the NCCL_IB_HCA list (names; None: every device given). Each entry carries
    ``ipv4_roce_v2``: whether NCCL's choice is an IPv4-mapped RoCE v2 GID, the only kind a
    routed IPv4 RoCE link carries.
    """
    names = _names(hca, devices)
    out = []
    for device in devices:
        if device["name"] not in names:
            continue
        for port in device.get("ports", []):
            table = port_table(port)
            index = nccl_gid_index(port)
            entry = table[index] if index < len(table) else None
            out.append(
                {
                    "device": device["name"],
                    "port": port["port"],
                    "index": index,
                    "gid": (entry or {}).get("gid"),
                    "ip": (entry or {}).get("ip"),
                    "type": (entry or {}).get("type"),
                    "ipv4_roce_v2": bool(
                        entry and gid_family(entry["gid"]) == AF_INET and _version(entry) == 2
                    ),
                }
            )
    return out


def _names(hca, devices):
    if hca in (None, ""):
        return [d["name"] for d in devices]
    if isinstance(hca, str):
        hca = hca.split(",")
    # NCCL_IB_HCA entries may carry a port (":1") and a leading "^" or "=" (NCCL's syntax).
    return [h.strip().lstrip("^=").split(":")[0] for h in hca if h.strip()]


def pinned_gid_problems(devices, hca, index, address_indices=None):
    """What is wrong with NCCL_IB_GID_INDEX=``index`` on the listed devices: one line per device.

    NCCL uses the pinned index on every device and port it opens; each needs a RoCE v2 GID
    there. On a device that holds the node's address (``address_indices``: device -> index of
    the RoCE v2 GID with ib_address) the pin must be that index: a different one means the
    table moved since the pin was chosen (field reports: 3 -> 4 after a reboot or a
    NetworkManager restart, sparkring #186) or the pin was taken from another node. A listed
    name that is no RDMA device of the node is a problem too.
    """
    address_indices = address_indices or {}
    if index in (None, ""):
        return []
    index = int(index)
    if index < 0:
        return [f"{index} is no GID index (NCCL reads a negative NCCL_IB_GID_INDEX as unset)"]
    known = {d["name"]: d for d in devices}
    names = _names(hca, devices)
    if not names:
        return [
            "no RDMA device is behind ib_interface, so NCCL runs over TCP sockets and a pinned GID index "
            "applies to nothing (is ib_interface the RoCE port? `ibdev2netdev` lists them)"
        ]
    problems = []
    for name in names:
        device = known.get(name)
        if device is None:
            problems.append(f"{name} is in NCCL_IB_HCA but is no RDMA device of ib_interface")
            continue
        for port in device.get("ports", []):
            table = port_table(port)
            entry = table[index] if index < len(table) else None
            if entry is not None and _version(entry) == 2:
                held = address_indices.get(name)
                if held is not None and held != index:
                    problems.append(
                        f"{name} port {port['port']}: {_describe(entry, index)}, but ib_address is at index "
                        f"{held} on this device"
                    )
                continue
            v2 = [g for g in table if g is not None and _version(g) == 2]
            where = ", ".join(f"{g['index']} ({g['gid']})" for g in v2) or "none"
            problems.append(
                f"{name} port {port['port']}: {_describe(entry, index)}, not a RoCE v2 GID "
                f"(its RoCE v2 GIDs: {where})"
            )
    return problems


def gid_summary(choices):
    """One line for the report: the GID NCCL takes on each device."""
    if not choices:
        return "no RDMA device: NCCL uses TCP sockets"
    parts = []
    for c in choices:
        shown = c.get("ip") if c["gid"] and gid_family(c["gid"]) == AF_INET and c.get("ip") else c["gid"]
        what = f"{c['type'] or 'unknown type'} {shown}" if c["gid"] else "empty"
        note = "" if c["ipv4_roce_v2"] else " (no IPv4 RoCE v2 GID on this device)"
        parts.append(f"{c['device']}:{c['port']} GID {c['index']} {what}{note}")
    return "NCCL picks per device: " + "; ".join(parts)
