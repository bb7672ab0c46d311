"""Print, as JSON, the /dev/shm entries matching the patterns in argv that no process holds.

An entry counts as held when a process has it open (a /proc/<pid>/fd link)
or mapped (a /proc/<pid>/maps line). Read-only.
"""

import contextlib
import fnmatch
import json
import os
import sys

SHM = "/dev/shm"


def held_paths():
    held = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    held.add(os.readlink(f"/proc/{pid}/fd/{fd}").removesuffix(" (deleted)"))
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
                for line in maps:
                    parts = line.split(None, 5)
                    if len(parts) == 6:
                        held.add(parts[5].strip().removesuffix(" (deleted)"))
        except OSError:
            continue
    return held


def main(patterns):
    names = sorted(os.listdir(SHM)) if os.path.isdir(SHM) else []
    matching = [name for name in names if any(fnmatch.fnmatchcase(name, p) for p in patterns)]
    held = held_paths() if matching else set()
    paths = [os.path.join(SHM, name) for name in matching]
    print(
        json.dumps(
            {"leftovers": [p for p in paths if p not in held], "held": [p for p in paths if p in held]}
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
