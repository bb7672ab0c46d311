# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The end of a run: the summary table, and the one JSON document of ``--json``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkops_cli.events import COUNTERS, RunEvents, exit_code


def result_document(
    *,
    command: str,
    playbook: str,
    argv: list[str],
    inventory: list[str],
    check: bool,
    rc: int | None,
    runner_status: str | None,
    events: RunEvents,
    artifacts: str,
    report: Any = None,
    report_path: str | None = None,
    started: str | None = None,
    finished: str | None = None,
) -> dict[str, Any]:
    """Everything a script needs about one run; ``argv`` is already redacted."""
    outcome = events.outcome(rc, runner_status)
    if command == "diagnose" and outcome in ("ok", "changed") and error_findings(report):
        # The run itself went well; what it found is a failure of the cluster,
        # and a script must not have to read diagnose.json to learn that.
        outcome = "failed"
    return {
        "command": command,
        "playbook": playbook,
        "argv": argv,
        "inventory": inventory or None,
        "check": check,
        "rc": rc,
        "runner_status": runner_status,
        "outcome": outcome,
        "exit_code": exit_code(outcome),
        "hosts": events.host_stats(),
        "stages": events.stage_durations(),
        "problems": [problem.as_dict() for problem in events.problems],
        "errors": list(events.errors),
        "artifacts": artifacts,
        "report_path": report_path,
        "report": report,
        "started": started,
        "finished": finished,
    }


def error_findings(report: Any) -> list[Mapping[str, Any]]:
    """The error-severity findings of a diagnose report (``diagnose.json``), if any."""
    if not isinstance(report, Mapping):
        return []
    findings = report.get("findings") or []
    return [f for f in findings if isinstance(f, Mapping) and f.get("severity") == "error"]


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(str(row[col])) for row in [header, *rows]) for col in range(len(header))]

    def line(row: list[str]) -> str:
        cells = [
            str(cell).rjust(width) if col in right else str(cell).ljust(width)
            for col, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    return [line(header), line(["-" * width for width in widths]), *(line(row) for row in rows)]


def summary_text(doc: Mapping[str, Any]) -> str:
    """The human summary: hosts, stages, problems, outcome, artifacts."""
    out: list[str] = []
    hosts = doc.get("hosts") or {}
    if hosts:
        rows = [
            [host, *(str(counts.get(counter, 0)) for counter in COUNTERS)] for host, counts in hosts.items()
        ]
        out += _table(["host", *COUNTERS], rows, right=set(range(1, len(COUNTERS) + 1)))
    else:
        out.append("no host ran a task")
    stages = doc.get("stages") or []
    if stages:
        out.append("")
        rows = [
            [
                stage["stage"],
                "-" if stage.get("seconds") is None else f"{stage['seconds']:.1f}",
                ", ".join(stage.get("hosts") or []) or "-",
            ]
            for stage in stages
        ]
        out += _table(["stage", "seconds", "hosts"], rows, right={1})
    problems = doc.get("problems") or []
    if problems:
        out.append("")
        out.append("problems:")
        for problem in problems:
            first = (problem["message"].splitlines() or [""])[0]
            out.append(
                f"  {problem['host']}: {problem['kind']} in {problem['stage']} / {problem['task']}: {first}"
            )
    if doc.get("errors"):
        out.append("")
        out.append("errors:")
        out += [f"  {line}" for error in doc["errors"] for line in error.splitlines()]
    out.append("")
    mode = " (check mode: nothing was changed)" if doc.get("check") else ""
    out.append(f"result: {doc['outcome']} (exit {doc['exit_code']}){mode}")
    if doc.get("report_path"):
        out.append(f"report: {doc['report_path']}")
    out.append(f"artifacts: {doc['artifacts']}")
    return "\n".join(out)


def diagnose_document(result: Mapping[str, Any], files: list[str]) -> dict[str, Any]:
    """``sparkops diagnose FILE... --json``: the parser's result with the outcome."""
    errors = [finding for finding in result.get("findings") or [] if finding.get("severity") == "error"]
    return {
        "command": "diagnose",
        "files": files,
        "outcome": "failed" if errors else "ok",
        "exit_code": 1 if errors else 0,
        **dict(result),
    }
