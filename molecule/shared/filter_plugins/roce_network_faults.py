"""The roce_network_faults scenario's reading of the RoCE stage's ping probes.

roles/roce_network/tasks/reachability.yml registers one line per peer from its probe:
``<peer> <address> <rc at full size> <rc at 56 bytes, -1 when not needed> <ping's last words>``.
The scenario asserts on these fields (a path MTU below ib_mtu: the full-size ping with
don't-fragment fails, the small one passes), not on the stage's message.
"""

from __future__ import annotations

from ansible_collections.sparkops.vllm.plugins.module_utils._roce_reach import parse_probe_lines


def roce_probes(stdout_lines):
    """``{peer: {address, full_rc, small_rc, said}}`` from the probe's lines (the stage's own parser,
    ``_roce_reach.parse_probe_lines``); a line that is not a probe's is skipped."""
    return {
        p["peer"]: {"address": p["address"], "full_rc": p["full"], "small_rc": p["small"], "said": p["said"]}
        for p in parse_probe_lines(stdout_lines)
    }


class FilterModule:
    """roce_probes (the roce_network_faults scenario only)."""

    def filters(self):
        return {"roce_probes": roce_probes}
