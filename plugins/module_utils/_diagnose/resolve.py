# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""What is decided only once the whole log is read: severities that depend on the rest.

Each function takes the scanner's findings (and what it noted on the way) and
changes them in place before the precedence table is applied.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.precedence import (
    _EXPLAINS,
    CAUSE_WARNINGS,
    MAX_EVIDENCE,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.state import _Event, _Finding

if TYPE_CHECKING:
    from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.state import _Context

# Inventory settings that say the cluster is meant to talk RoCE (roles/roce_network).
_ROCE_HOST_VARS = ("ib_interface", "ib_address")
_ROCE_SETTINGS = ("roce_network_nccl_ib_hca", "roce_network_nccl_ib_gid_index")


def roce_intended(context: _Context) -> bool:
    """Whether the inventory in ``context`` gives the nodes a RoCE link."""
    if any(context.settings.get(name) for name in _ROCE_SETTINGS):
        return True
    return any(values.get(name) for values in context.hosts.values() for name in _ROCE_HOST_VARS)


def socket_fallback(
    findings: dict[str, _Finding], events: Iterable[_Event], multi_node: bool, context: _Context
) -> None:
    """NCCL on TCP sockets across nodes: a warning, an error when the inventory says RoCE."""
    if not multi_node:
        return
    severity = "error" if roce_intended(context) else "warning"
    for event in events:
        event.finding = "nccl_ib_error"
        event.severity = severity
        findings.setdefault("nccl_ib_error", _Finding("nccl_ib_error")).add(event)


def nccl_versions(findings: dict[str, _Finding], versions: Mapping[str, list[_Event]]) -> None:
    """Version lines that disagree: more than one NCCL in play (a warning on their own)."""
    if len(versions) < 2:
        return
    acc = findings.setdefault("nccl_library_mismatch", _Finding("nccl_library_mismatch"))
    for events in versions.values():
        for event in events[:2]:
            event.finding = "nccl_library_mismatch"
            event.severity = "warning"
            acc.add(event)
    acc.kinds["versions"] = tuple(sorted(versions))


def single_driver_oom_line(findings: dict[str, _Finding]) -> None:
    """One NV_ERR_NO_MEMORY line and nothing else wrong is seen on healthy runs too.

    vllm-project/vllm#56824: three startups that went on to serve logged one such line
    each; a burst of them, or one next to a failure, is what this finding is about.
    """
    acc = findings.get("uma_driver_out_of_memory")
    if acc is None or acc.count > 1:
        return
    others = [item for name, item in findings.items() if name != acc.finding and item.severity == "error"]
    if not others:
        acc.severity = "warning"


def causes_become_errors(findings: dict[str, _Finding]) -> None:
    """A warning that explains an error of the same log is that error's root cause."""
    for name in CAUSE_WARNINGS:
        acc = findings.get(name)
        if acc is None or acc.severity != "warning":
            continue
        if any(findings[effect].severity == "error" for effect in _EXPLAINS[name] if effect in findings):
            acc.severity = "error"


def bounded_append(items: list[_Event], event: _Event) -> None:
    if len(items) < MAX_EVIDENCE:
        items.append(event)
