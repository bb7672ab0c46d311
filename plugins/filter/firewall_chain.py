# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The project's own iptables chains (plugins/module_utils/_firewall_chain.py), as filters."""

from __future__ import annotations

from ansible_collections.sparkops.vllm.plugins.module_utils import _firewall_chain


def firewall_chain(name, ports, comment, accept, sources=None):
    """``{chain, comment, ports, multiport, slots, rules, problems}`` of the chain ``name``."""
    return _firewall_chain.chain(
        str(name),
        ports=list(ports or []),
        comment=str(comment),
        accept=[dict(entry) if isinstance(entry, dict) else entry for entry in accept or []],
        sources=list(sources or []),
    )


def firewall_sources_problems(value, setting, fix_file):
    """One line per fault of a list of sources to let in (each an IPv4 CIDR); empty when valid."""
    return _firewall_chain.sources_problems(value, str(setting), str(fix_file))


class FilterModule:
    """sparkops.vllm firewall chain filters."""

    def filters(self):
        return {
            "firewall_chain": firewall_chain,
            "firewall_sources_problems": firewall_sources_problems,
        }
