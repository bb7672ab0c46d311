# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Diagnose failed vLLM / Ray / NCCL / driver starts from their logs.

The parser streams: every physical line is looked at once, noise lines cost a
handful of substring tests, and what is kept (findings, a few evidence lines each,
a short window of recent lines) is bounded, so a 100 MB log runs in constant memory.

Matching is on stable key phrases searched anywhere in the message, never on whole
lines, so new prefixes, loggers and wording around the phrase do not matter. Phrases
that a terminal wrapped over two physical lines are found across the line break.

The package, by concern: ``precedence`` (what explains what), ``rule_syntax`` and
``rules`` (the key phrases), ``prefilter`` (which lines get a close look),
``state`` and ``scanner`` (streaming), ``summaries`` and ``fixes`` (the report).
It imports nothing from Ansible: the module ``sparkops.vllm.diagnose``, the runbooks
and ``sparkops diagnose FILE...`` all call :func:`diagnose_paths` /
:func:`diagnose_text`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, BinaryIO

from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.precedence import (
    FINDING_IDS,
    MAX_EVIDENCE,
    PRECEDENCE,
    SEVERITIES,
    WRAPPERS,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.prefilter import TRIGGER_TOKENS
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.rules import RULES
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.scanner import Scanner

__all__ = [
    "FINDING_IDS",
    "MAX_EVIDENCE",
    "PRECEDENCE",
    "RULES",
    "SEVERITIES",
    "TRIGGER_TOKENS",
    "WRAPPERS",
    "Scanner",
    "diagnose_lines",
    "diagnose_paths",
    "diagnose_stream",
    "diagnose_text",
    "format_report",
]


def diagnose_lines(lines: Iterable[str], context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Diagnose an iterable of physical lines (one log)."""
    scanner = Scanner(context)
    scanner.start_path(None)
    scanner.feed_lines(lines)
    return scanner.finish()


def diagnose_text(content: str, context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Diagnose a log held in a string."""
    return diagnose_lines(content.split("\n"), context)


def diagnose_paths(paths: Iterable[str], context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Diagnose one or more log files, streaming each; findings span all files.

    Evidence items carry ``path`` so lines from different files stay apart; a file
    given in ``context.path_hosts`` lends its host to lines that name none. Only
    regular files are read (OSError otherwise, naming what the path is).
    """
    scanner = Scanner(context)
    for path in paths:
        scanner.start_path(str(path))
        scanner.feed_file(str(path))
    return scanner.finish()


def diagnose_stream(handle: BinaryIO, context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Diagnose a log read from a binary stream (standard input), bounded as files are."""
    scanner = Scanner(context)
    scanner.start_path(None)
    scanner.feed_stream(handle)
    return scanner.finish()


def format_report(result: Mapping[str, Any]) -> str:
    """A readable report of a diagnosis result."""
    findings = result.get("findings") or []
    out = []
    if not findings:
        out.append(f"No findings in {result.get('lines_read', 0)} lines.")
    for number, finding in enumerate(findings, 1):
        out.append(f"{number}. [{finding['severity'].upper()}] {finding['id']}")
        out.append(f"   {finding['summary']}")
        out.append(f"   Fix: {finding['fix']}")
        for item in finding["evidence"]:
            where = f"{item['path']}:" if item.get("path") else "line "
            host = f" [{item['host']}]" if item.get("host") else ""
            out.append(f"     {where}{item['line']}{host}: {item['text'][:200]}")
    for item in result.get("explained") or []:
        if not item["reported"]:
            out.append(f"(hidden: {item['id']}, explained by {', '.join(item['explained_by'])})")
    return "\n".join(out)
