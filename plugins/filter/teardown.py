# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Teardown's decisions (module_utils/_teardown.py): the model it may remove, the firewall rules it added."""

from __future__ import annotations

from ansible_collections.sparkops.vllm.plugins.module_utils import _teardown


def teardown_model_removal(path, path_stat, manifest, manifest_stat):
    """``{remove, kept}``: the paths teardown_remove_model removes, or why the model is kept."""
    return _teardown.model_removal(path, dict(path_stat or {}), manifest, dict(manifest_stat or {}))


def teardown_kept_model_files(paths):
    """The model directories an upgrade keeps and the manifest beside each, to stat in that order."""
    return _teardown.kept_model_files(paths)


def teardown_kept_model_removal(paths, stats):
    """``{remove, kept}`` for the model directories an upgrade keeps (each by teardown_model_removal's rule)."""
    return _teardown.kept_model_removal(paths, stats)


def teardown_firewall_rules(output, kind, comment):
    """The rules ``roce_network_firewall_open`` added (by its comment) in iptables, nft or ufw output."""
    if kind == "iptables":
        return _teardown.iptables_rules(str(output or "").splitlines(), comment)
    if kind == "nft":
        return _teardown.nft_rules(str(output or ""), comment)
    if kind == "ufw":
        return _teardown.ufw_rules(str(output or ""), comment)
    raise ValueError(f"teardown_firewall_rules: kind is {kind!r}; give iptables, nft or ufw")


class FilterModule:
    """sparkops.vllm teardown filters."""

    def filters(self):
        return {
            "teardown_model_removal": teardown_model_removal,
            "teardown_firewall_rules": teardown_firewall_rules,
            "teardown_kept_model_files": teardown_kept_model_files,
            "teardown_kept_model_removal": teardown_kept_model_removal,
        }
