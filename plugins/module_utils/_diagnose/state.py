# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""What the scanner keeps: matched events, one bounded record per finding, the context."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.precedence import (
    _SEVERITY_RANK,
    MAX_EVIDENCE,
    MAX_EVIDENCE_CHARS,
)


@dataclass
class _Event:
    finding: str
    severity: str
    kind: str
    line: int
    text: str
    host: str | None
    path: str | None
    groups: tuple[str | None, ...]
    repeated: int = 1
    during_capture: bool = False
    # "weight_loading", "graph_capture" or None: what the log said was under way.
    phase: str | None = None


@dataclass
class _Finding:
    finding: str
    severity: str = "info"
    first_line: int = 0
    first_path: str | None = None
    count: int = 0
    evidence: list[dict[str, Any]] = field(default_factory=list)
    seen: set[tuple[str, str | None]] = field(default_factory=set)
    kinds: dict[str, tuple[str | None, ...]] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    during_capture: bool = False
    phase: str | None = None

    def add(self, event: _Event) -> None:
        if self.count == 0:
            self.first_line, self.first_path = event.line, event.path
        self.count += event.repeated
        if _SEVERITY_RANK[event.severity] < _SEVERITY_RANK[self.severity]:
            self.severity = event.severity
        # Keep the groups of the most specific match seen for each variant.
        known = self.kinds.get(event.kind)
        if known is None or sum(g is not None for g in event.groups) > sum(g is not None for g in known):
            self.kinds[event.kind] = event.groups
        if event.host and event.host not in self.hosts and len(self.hosts) < 32:
            self.hosts.append(event.host)
        self.during_capture = self.during_capture or event.during_capture
        # The first phase seen, except that a line during capture decides (as during_capture).
        if event.phase is not None and (self.phase is None or event.phase == "graph_capture"):
            self.phase = event.phase
        key = (event.text.strip(), event.host)
        if key in self.seen or len(self.evidence) >= MAX_EVIDENCE:
            return
        self.seen.add(key)
        text = key[0] if len(key[0]) <= MAX_EVIDENCE_CHARS else key[0][:MAX_EVIDENCE_CHARS] + " [...]"
        item: dict[str, Any] = {"line": event.line, "text": text}
        if event.host:
            item["host"] = event.host
        if event.path:
            item["path"] = event.path
        if event.repeated > 1:
            item["repeated"] = event.repeated
        self.evidence.append(item)


class _Context:
    """The optional ``context``: inventory addresses, the memory plan and settings."""

    def __init__(self, context: Mapping[str, Any] | None) -> None:
        context = dict(context or {})
        self.hosts: dict[str, dict[str, Any]] = {
            str(name): dict(values or {}) for name, values in (context.get("hosts") or {}).items()
        }
        self.default_host = context.get("host")
        self.path_hosts = {str(k): str(v) for k, v in (context.get("path_hosts") or {}).items()}
        self.memory_plan = dict(context.get("memory_plan") or {})
        self.settings = dict(context.get("settings") or {})
        self.addresses: dict[str, tuple[str, str]] = {}
        for name, values in self.hosts.items():
            if values.get("ib_address"):
                self.addresses[str(values["ib_address"])] = (name, "ib")
            for address in values.get("management_addresses") or ():
                self.addresses.setdefault(str(address), (name, "management"))
            if values.get("ansible_host"):
                self.addresses.setdefault(str(values["ansible_host"]), (name, "management"))

    def host_name(self, host: str | None) -> str | None:
        if host is None:
            return None
        if host in self.addresses:
            return self.addresses[host][0]
        return host

    def describe_address(self, address: str) -> str:
        """Say whose address this is, per the inventory."""
        owner = self.addresses.get(address)
        if owner is None:
            if not self.hosts:
                return ""
            ib = ", ".join(
                f"{name} {values['ib_address']}"
                for name, values in self.hosts.items()
                if values.get("ib_address")
            )
            return f" {address} is no host's `ib_address` in the inventory ({ib})."
        name, kind = owner
        ib_address = self.hosts[name].get("ib_address")
        if kind == "management":
            return f" {address} is {name}'s management address, not its ib_address {ib_address}."
        return f" {address} is {name}'s ib_address."
