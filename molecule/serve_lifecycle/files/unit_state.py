#!/usr/bin/python3
"""Print, as JSON, each named unit's systemd state and its container's start time.

Usage: unit_state.py UNIT... (each unit runs a container of the same name).
"""

import json
import subprocess
import sys

PROPERTIES = "ActiveState,MainPID,ActiveEnterTimestampMonotonic,NRestarts"


def _run(argv):
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def main():
    state = {}
    for unit in sys.argv[1:]:
        shown = _run(["systemctl", "show", "-p", PROPERTIES, unit]).stdout
        props = dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)
        started = _run(["docker", "inspect", "-f", "{{.State.StartedAt}}", unit])
        props["ContainerStartedAt"] = started.stdout.strip() if started.returncode == 0 else None
        state[unit] = props
    print(json.dumps(state, sort_keys=True))


if __name__ == "__main__":
    main()
