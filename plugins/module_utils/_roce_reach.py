# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The roce_network stage's reachability verdict: each peer pinged at the full MTU, from its own MAC.

roles/roce_network/tasks/reachability.yml pings every peer over ``ib_interface`` with
don't-fragment, at the full size and, when that fails, at 56 bytes, and prints one line per
peer: ``NAME ADDRESS RC_FULL RC_SMALL LAST_WORDS`` (``RC_SMALL`` -1 when not needed, the last
words ping's last lines at full size). It then reads ``ip -j neigh show dev IB``. This module
judges both: a full-size failure with a small success is a path MTU below ``ib_mtu``
(ping -M do, iputils: "message too long" locally, silence when a hop drops it); both failing
is an unreachable peer; a pass answered from a MAC other than the peer's own ib netdev's is
another machine (or, with the twins addressed and ARP flux, the twin) holding its address.
"""

from __future__ import annotations

import json


def parse_probe_lines(lines):
    """``[{peer, address, full, small, said}]`` from the probe's lines; a line of another shape is skipped."""
    probes = []
    for line in lines or []:
        fields = str(line).split(" ", 4)
        if len(fields) < 4:
            continue
        try:
            full, small = int(fields[2]), int(fields[3])
        except ValueError:
            continue
        probes.append(
            {
                "peer": fields[0],
                "address": fields[1],
                "full": full,
                "small": small,
                "said": fields[4].strip() if len(fields) > 4 else "",
            }
        )
    return probes


def _neighbours(neigh):
    """``{address: lladdr}`` from ``ip -j neigh show`` (text or parsed); entries without a MAC are left out."""
    entries = json.loads(neigh) if isinstance(neigh, str) else (neigh or [])
    return {str(e.get("dst")): str(e["lladdr"]) for e in entries if isinstance(e, dict) and e.get("lladdr")}


def reachability_problems(host, interface, mtu, probe_lines, neigh, *, peers):
    """Every problem the probes show, each naming the host, the peer, the value and the fix.

    ``peers`` maps each peer's name to ``{interface, mac}`` (its ``ib_interface`` and that
    netdev's MAC as roce_network read it on the peer; an unknown MAC skips the MAC check).
    A peer missing from the probe's lines is a problem too: the probe did not report it.
    """
    problems = []
    probes = parse_probe_lines(probe_lines)
    macs = _neighbours(neigh)
    for probe in probes:
        peer, addr, said = probe["peer"], probe["address"], probe["said"]
        other = peers.get(peer, {})
        if probe["full"] != 0 and probe["small"] == 0:
            problems.append(
                f"path MTU below ib_mtu {mtu} between {host} and {peer} ({addr}): a {mtu}-byte packet with "
                f"don't-fragment fails, a small one passes ({said}); check switch/peer MTU: every hop and "
                f"{peer}'s {other.get('interface')} must pass {mtu} bytes"
            )
        elif probe["full"] != 0:
            problems.append(
                f"{peer} ({addr}) is unreachable from {host} over {interface} ({said}); check the cable/link state "
                f"(`ip -br link`), that {peer} is up with its ib_address, and the firewall"
            )
        else:
            mac, want = macs.get(addr, ""), str(other.get("mac") or "")
            if mac and want and mac.lower() != want.lower():
                problems.append(
                    f"{addr} answers {host} from MAC {mac}, not from {peer}'s {other.get('interface')} ({want}): "
                    f"another machine holds {peer}'s ib_address; find it with `ip neigh` / the switch's MAC table "
                    "and give it another address"
                )
    reported = {p["peer"] for p in probes}
    missing = sorted(set(peers) - reported)
    if missing:
        problems.append(
            f"the ping probe did not report {', '.join(missing)} (it printed {len(probes)} line(s) for "
            f"{len(peers)} peer(s)); read the task's output with -v and rerun"
        )
    return problems
