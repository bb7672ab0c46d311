# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The running stack's host memory from its containers' cgroups (a rerun's add-back)."""

import pytest
from ansible_collections.sparkops.vllm.plugins.filter.memory_plan import FilterModule
from ansible_collections.sparkops.vllm.plugins.module_utils._meminfo import cgroup_host_bytes

FILTERS = FilterModule().filters()
MIB = 1024**2

# Lines as roles/preflight/tasks/plan.yml prints them: id, memory.current, memory.stat's file.
CASES = [
    ("", 0, []),
    # The Ray head (GCS, raylet, dashboard, 0.9 GiB cache of the Ray wheels) and vLLM's
    # container (API server, engine core; 2 GiB of the model's files in cache).
    (
        f"3f2a9c1b7e4d {3200 * MIB} {900 * MIB}\n9b8c7d6e5f4a {4300 * MIB} {2048 * MIB}\n",
        (3200 - 900 + 4300 - 2048) * MIB,
        [],
    ),
    # A container that stopped between docker ps and the read: cat printed nothing.
    (f"3f2a9c1b7e4d {3200 * MIB} {900 * MIB}\n77aa  \n", (3200 - 900) * MIB, ["77aa"]),
    # A cgroup v1 host: no 0:: line, the path is /sys/fs/cgroup itself, nothing to read.
    ("5e5e5e5e5e5e  \n", 0, ["5e5e5e5e5e5e"]),
    # More page cache than memory.current can never be negative host memory.
    (f"aa {100 * MIB} {150 * MIB}\n", 0, []),
]


@pytest.mark.parametrize("text,expected,skipped", CASES)
def test_cgroup_host_bytes(text, expected, skipped):
    result = cgroup_host_bytes(text)
    assert result["bytes"] == expected
    assert result["skipped"] == skipped


def test_filter_gives_gib():
    text = f"3f2a9c1b7e4d {3200 * MIB} {900 * MIB}\n9b8c7d6e5f4a {4300 * MIB} {2048 * MIB}\n"
    assert FILTERS["memory_plan_own_host"](text) == round((3200 - 900 + 4300 - 2048) / 1024, 3)
    assert FILTERS["memory_plan_own_host"](None) == 0.0
