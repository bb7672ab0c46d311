"""The roce_network_faults scenario's reading of the RoCE stage's ping probes.

roles/roce_network/tasks/reachability.yml registers one line per peer from its probe:
``<peer> <address> <rc at full size> <rc at 56 bytes, -1 when not needed> <ping's last words>``.
The scenario asserts on these fields (a path MTU below ib_mtu: the full-size ping with
don't-fragment fails, the small one passes), not on the stage's message.
"""


def roce_probes(stdout_lines):
    """``{peer: {address, full_rc, small_rc, said}}`` from the probe's lines; a line that is not a probe's is skipped."""
    probes = {}
    for line in stdout_lines or []:
        fields = str(line).split(" ", 4)
        if len(fields) < 4:
            continue
        try:
            full, small = int(fields[2]), int(fields[3])
        except ValueError:
            continue
        probes[fields[0]] = {
            "address": fields[1],
            "full_rc": full,
            "small_rc": small,
            "said": fields[4].strip() if len(fields) > 4 else "",
        }
    return probes


class FilterModule:
    """roce_probes (the roce_network_faults scenario only)."""

    def filters(self):
        return {"roce_probes": roce_probes}
