# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The image's vLLM release decides the plan: the mismatch check between the image and the inventory."""

import pytest
from ansible_collections.sparkops.vllm.plugins.filter.memory_plan import FilterModule
from ansible_collections.sparkops.vllm.plugins.module_utils._cluster_memory_plan import version_mismatch

CHECK = FilterModule().filters()["memory_plan_version_check"]

# (image's `vllm --version`, sparkops_vllm_version, mismatch?)
CASES = [
    ("0.17.1", "0.17.1", False),
    ("0.17.1+sparkops.lab", "0.17.1", False),  # the lab image's local tag
    ("0.17.1rc1", "0.17.1", False),  # a pre-release of the same release
    ("v0.17.1", "0.17.1", False),
    ("0.17", "0.17.0", False),
    ("0.22.0", "0.17.1", True),  # the case: CUDA graphs move into the claim from 0.21
    ("0.11.2", "0.12.0", True),  # MemFree before about 0.12, MemAvailable after
    ("0.17.2", "0.17.1", True),
    ("0.17.1", None, False),  # nothing planned to compare with
    (None, "0.17.1", False),  # the image stage has not run (a --tags run)
    ("not a version", "0.17.1", False),
    ("", "", False),
]


@pytest.mark.parametrize(("image", "planned", "mismatch"), CASES)
def test_version_mismatch(image, planned, mismatch):
    message = version_mismatch(image, planned, "spark-1")
    assert bool(message) is mismatch
    if mismatch:
        assert message.startswith("spark-1: the image holds vLLM " + image)
        assert f"sparkops_vllm_version {planned}" in message
        assert "Fix: set sparkops_vllm_version:" in message


def test_the_fix_names_the_image_release_without_local_tags():
    message = version_mismatch("0.22.0+cu130", "0.17.1", "spark-2")
    assert 'Fix: set sparkops_vllm_version: "0.22.0"' in message


def test_the_filter_is_the_same_check():
    assert CHECK("0.22.0", "0.17.1", "spark-1") == version_mismatch("0.22.0", "0.17.1", "spark-1")
    assert CHECK("0.17.1", "0.17.1") == ""
    assert CHECK("0.22.0", "0.17.1").startswith("the head: ")
