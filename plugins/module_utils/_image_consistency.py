# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""One vLLM image on every node: version lines of the tools inside it, and nodes that differ."""

from __future__ import annotations

import re

# `ray --version` prints "ray, version 2.60.0" (older: "ray, version 2.9.3\n" after
# warnings); `vllm --version` prints the bare version ("0.17.1", "0.11.1rc2.dev3+gabc",
# "0.17.1+sparkops.lab"), after log lines on some releases.
_RAY = re.compile(r"^ray, version (\S+)\s*$")
_BARE = re.compile(r"^v?(\d+\.\d+(?:\.\d+)?(?:[.+\-a-zA-Z0-9]*)?)\s*$")


def tool_version(output, tool):
    """The version ``<tool> --version`` printed, or None. The last matching line wins."""
    if tool not in ("ray", "vllm"):
        raise ValueError(f"unknown tool {tool!r} (ray or vllm)")
    pattern = _RAY if tool == "ray" else _BARE
    found = None
    for line in str(output or "").splitlines():
        match = pattern.match(line.strip())
        if match:
            found = match.group(1)
    return found


def differences(values, reference_host):
    """The hosts whose value differs from ``reference_host``'s, sorted: ``[{host, value}]``.

    A host with no value (None or empty: the image is absent) differs from any value.
    """
    if reference_host not in values:
        raise KeyError(f"{reference_host} has no value")
    expected = values[reference_host] or None
    return [
        {"host": host, "value": values[host] or None}
        for host in sorted(values)
        if host != reference_host and (values[host] or None) != expected
    ]


def mismatch_report(values, reference_host, what):
    """One line per host that differs from ``reference_host``: both values, named."""
    expected = values.get(reference_host) or "nothing"
    return [
        f"{item['host']} holds {item['value'] or 'nothing'} as {what}, "
        f"the head {reference_host} holds {expected}"
        for item in differences(values, reference_host)
    ]
