# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""A rerun's add-back from the containers' cgroups, and the image's vLLM release deciding the plan."""

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


# The image stage records `vllm --version`; preflight planned with sparkops_vllm_version.
# (image, inventory, mismatch?)
VERSION_TABLE = [
    ("0.17.1+sparkops.lab", "0.17.1", False),  # the lab's stand-in
    ("0.17.1rc1", "0.17.1", False),  # the seeds' image
    ("0.22.0", "0.17.1", True),  # the case: graphs move into the claim from 0.21
    ("0.17.2", "0.17.1", True),
    (None, "0.17.1", False),  # the image stage has not looked yet (check mode before the image)
    ("0.17.1", None, False),
    ("not a version", "0.17.1", False),
]


@pytest.mark.parametrize("image,planned,mismatch", VERSION_TABLE)
def test_the_images_vllm_decides(image, planned, mismatch):
    message = FILTERS["memory_plan_version_check"](image, planned, "spark-1")
    assert bool(message) is mismatch
    if mismatch:
        assert message.startswith(f"spark-1: the image holds vLLM {image}, but the memory plan was made for")
        assert 'Fix: set sparkops_vllm_version: "' in message
