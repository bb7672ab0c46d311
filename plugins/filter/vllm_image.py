# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Filters of the vllm_image stage: versions of the tools in the image, and nodes that differ."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkops.vllm.plugins.module_utils import _image_consistency as consistency


def image_tool_version(output, tool):
    """The version printed by ``ray --version`` or ``vllm --version`` (None when there is none)."""
    try:
        return consistency.tool_version(output, tool)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from None


def image_differences(values, reference_host):
    """``[{host, value}]`` of the hosts whose value differs from the reference host's."""
    if not isinstance(values, dict):
        raise AnsibleFilterError(
            f"image_differences expects a mapping of host to value, got {type(values).__name__}"
        )
    try:
        return consistency.differences(values, reference_host)
    except KeyError as exc:
        raise AnsibleFilterError(f"image_differences: {exc.args[0]}") from None


def image_mismatch_report(values, reference_host, what="the image"):
    """One line per differing host, naming it and both values."""
    image_differences(values, reference_host)
    return consistency.mismatch_report(values, reference_host, what)


class FilterModule:
    """sparkops.vllm image filters."""

    def filters(self):
        return {
            "image_tool_version": image_tool_version,
            "image_differences": image_differences,
            "image_mismatch_report": image_mismatch_report,
        }
