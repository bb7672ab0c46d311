# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The deployment's names and paths (plugins/module_utils/_layout.py), as a filter."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkops.vllm.plugins.module_utils import _layout


def layout(
    cluster,
    *,
    state_dir=None,
    model_path=None,
    manifest_path=None,
    model_sync_config_dir=None,
    measured_path=None,
    role=None,
):
    """Every unit, container, directory and file name of the cluster's deployment."""
    try:
        return _layout.layout(
            cluster,
            state_dir=state_dir,
            model_path=model_path,
            manifest_path=manifest_path,
            model_sync_config_dir=model_sync_config_dir,
            measured_path=measured_path,
            role=role,
        )
    except _layout.LayoutError as exc:
        raise AnsibleFilterError(f"layout: {exc}") from exc


class FilterModule:
    """sparkops.vllm layout filter."""

    def filters(self):
        return {"layout": layout}
