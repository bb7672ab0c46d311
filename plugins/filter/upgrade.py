# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The upgrade's gate, record readers and image for a version (plugins/module_utils/_upgrade.py, docs/upgrades.md)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkops.vllm.plugins.module_utils import _upgrade


def upgrade_gate(health, probe, bench, baseline, tolerance):
    """``{passed, reasons, warnings, checks}`` for a deployment's health, probe and benchmark results."""
    try:
        return _upgrade.gate(health, probe, bench, baseline, float(tolerance))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"upgrade_gate: {exc}") from None


def upgrade_kept_images(section):
    """The image references every node keeps for a rollback, from the head's ``upgrade`` section."""
    return _upgrade.kept_images(section)


def upgrade_image_for_version(version, template, host):
    """The image ``--vllm-version`` asks for: the inventory's ``upgrade_image_ref_template`` with the version in it."""
    try:
        return _upgrade.image_for_version(version, template, host=str(host))
    except _upgrade.UpgradeRefused as exc:
        raise AnsibleFilterError(f"upgrade_image_for_version: {exc}") from None


class FilterModule:
    """sparkops.vllm upgrade filters."""

    def filters(self):
        return {
            "upgrade_gate": upgrade_gate,
            "upgrade_kept_images": upgrade_kept_images,
            "upgrade_image_for_version": upgrade_image_for_version,
        }
