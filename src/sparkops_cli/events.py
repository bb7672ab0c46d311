# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""What a run did, from ansible-runner's events: progress lines, stats, outcome.

:class:`RunEvents` is fed every event as it arrives (live, or replayed from a
run's ``job_events``); it returns the progress lines worth showing and keeps
what the summary needs: per-host counts (from the final ``playbook_on_stats``,
or counted from the task results when a run was cut short), the duration of
each stage (play), and the failures with their messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# Exit codes, one per outcome; the order of OUTCOMES is the precedence: an
# unreachable host makes the run "unreachable" even when another host failed,
# because what was not reached was not checked at all, and the fix (network,
# SSH) comes before any other.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CHANGED = 2
EXIT_UNREACHABLE = 3
EXIT_USAGE = 4
EXIT_INTERRUPTED = 130
OUTCOMES = {
    "unreachable": EXIT_UNREACHABLE,
    "failed": EXIT_FAILED,
    "changed": EXIT_CHANGED,
    "ok": EXIT_OK,
}

COUNTERS = ("ok", "changed", "failed", "unreachable", "skipped", "rescued", "ignored")
# playbook_on_stats names two of them differently.
_STATS_KEYS = {"failed": "failures", "unreachable": "dark"}

_META_ACTIONS = {"meta", "ansible.builtin.meta", "ansible.legacy.meta"}
_RESULT_EVENTS = {
    "runner_on_ok",
    "runner_on_failed",
    "runner_on_unreachable",
    "runner_on_skipped",
}


def _created(event: Mapping[str, Any]) -> datetime | None:
    value = event.get("created")
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


def result_message(res: Mapping[str, Any] | None) -> str:
    """The message a failed or unreachable result carries, looking into loop items."""
    if not isinstance(res, Mapping):
        return ""
    for item in res.get("results") or []:
        if isinstance(item, Mapping) and item.get("failed") and not item.get("skipped"):
            return result_message(item)
    msg = res.get("msg")
    if msg and msg != "One or more items failed":
        if isinstance(msg, list | tuple):
            return "\n".join(str(part) for part in msg)
        return str(msg)
    for key in ("stderr", "module_stderr", "stdout", "reason"):
        if res.get(key):
            return str(res[key]).strip()
    return str(msg or "")


@dataclass
class Stage:
    name: str
    start: datetime | None
    end: datetime | None = None
    hosts: list[str] = field(default_factory=list)

    @property
    def seconds(self) -> float | None:
        if self.start is None or self.end is None:
            return None
        return round((self.end - self.start).total_seconds(), 1)


@dataclass
class Problem:
    """A failed or unreachable task result."""

    kind: str  # failed | unreachable
    host: str
    stage: str
    task: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {
            "kind": self.kind,
            "host": self.host,
            "stage": self.stage,
            "task": self.task,
            "message": self.message,
        }


class RunEvents:
    """Accumulates one playbook run's events."""

    def __init__(self, reports: bool = False) -> None:
        self.reports = reports
        self.stages: list[Stage] = []
        self.stats: dict[str, dict[str, int]] | None = None
        self.counted: dict[str, dict[str, int]] = {}
        self.problems: list[Problem] = []
        self.errors: list[str] = []
        self.last_created: datetime | None = None
        self.events = 0

    # -- feeding ------------------------------------------------------------

    def feed(self, event: Mapping[str, Any]) -> list[str]:
        """Take one event; return the progress lines it is worth (often none)."""
        self.events += 1
        created = _created(event)
        if created is not None:
            self.last_created = created
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            return self._play_start(data, created)
        if kind == "playbook_on_stats":
            self._close_stage(created)
            self.stats = {
                counter: dict(data.get(_STATS_KEYS.get(counter, counter)) or {}) for counter in COUNTERS
            }
            return []
        if kind in _RESULT_EVENTS:
            return self._result(kind, data)
        if kind == "error":
            text = str(event.get("stdout") or "").strip()
            if text:
                self.errors.append(text)
                return [text]
        return []

    def feed_all(self, events: Iterable[Mapping[str, Any]]) -> list[str]:
        lines: list[str] = []
        for event in events:
            lines += self.feed(event)
        return lines

    def _close_stage(self, created: datetime | None) -> None:
        if self.stages and self.stages[-1].end is None:
            self.stages[-1].end = created

    def _play_start(self, data: Mapping[str, Any], created: datetime | None) -> list[str]:
        self._close_stage(created)
        name = str(data.get("name") or data.get("play") or data.get("play_pattern") or "play")
        self.stages.append(Stage(name=name, start=created))
        return ["", f"== {name}"]

    def _count(self, host: str, counter: str) -> None:
        counts = self.counted.setdefault(host, dict.fromkeys(COUNTERS, 0))
        counts[counter] += 1

    def _result(self, kind: str, data: Mapping[str, Any]) -> list[str]:
        host = str(data.get("host") or "?")
        task = str(data.get("task") or data.get("task_action") or "task")
        res = data.get("res") or {}
        stage = self.stages[-1] if self.stages else None
        if stage is not None and host not in stage.hosts:
            stage.hosts.append(host)
        if kind == "runner_on_skipped":
            # Ansible's stats do not count a skipped meta task (e.g. end_host).
            if data.get("task_action") not in _META_ACTIONS:
                self._count(host, "skipped")
            return []
        if kind == "runner_on_failed" and data.get("ignore_errors"):
            self._count(host, "ignored")
            return []
        if kind in ("runner_on_unreachable", "runner_on_failed"):
            state = "unreachable" if kind == "runner_on_unreachable" else "failed"
            self._count(host, state)
            message = result_message(res)
            self.problems.append(Problem(state, host, stage.name if stage else "", task, message))
            return self._lines(host, state.upper(), task, message)
        self._count(host, "ok")
        if isinstance(res, Mapping) and res.get("changed"):
            self._count(host, "changed")
            return self._lines(host, "changed", task, "")
        if self.reports and data.get("task_action") in {"debug", "ansible.builtin.debug"}:
            return self._report(host, task, res)
        return []

    @staticmethod
    def _lines(host: str, state: str, task: str, message: str) -> list[str]:
        lines = [f"  {host:<20} {state:<11} {task}"]
        lines += [f"      {line}" for line in message.splitlines() if line.strip()]
        return lines

    @staticmethod
    def _report(host: str, task: str, res: Mapping[str, Any]) -> list[str]:
        msg = res.get("msg") if isinstance(res, Mapping) else None
        if msg is None or msg == "":
            return []
        text = "\n".join(str(part) for part in msg) if isinstance(msg, list | tuple) else str(msg)
        return [f"  {host:<20} {'report':<11} {task}"] + [f"      {line}" for line in text.splitlines()]

    # -- results ------------------------------------------------------------

    def host_stats(self) -> dict[str, dict[str, int]]:
        """Per host: ok, changed, failed, unreachable, skipped, rescued, ignored."""
        if self.stats is None:
            return {host: dict(counts) for host, counts in sorted(self.counted.items())}
        hosts = sorted({host for counts in self.stats.values() for host in counts})
        return {
            host: {counter: int(self.stats[counter].get(host, 0)) for counter in COUNTERS} for host in hosts
        }

    def unreachable_hosts(self) -> list[str]:
        return sorted({problem.host for problem in self.problems if problem.kind == "unreachable"})

    def stage_durations(self) -> list[dict[str, Any]]:
        if self.stages and self.stages[-1].end is None:
            self.stages[-1].end = self.last_created
        return [
            {"stage": stage.name, "seconds": stage.seconds, "hosts": sorted(stage.hosts)}
            for stage in self.stages
        ]

    def outcome(self, rc: int | None, status: str | None = None) -> str:
        """ok, changed, failed or unreachable (see OUTCOMES for the precedence)."""
        stats = self.host_stats()
        # A task with ignore_unreachable counts as ok+ignored in Ansible's stats,
        # but its host was not reached all the same: its event decides.
        if any(counts["unreachable"] for counts in stats.values()) or self.unreachable_hosts():
            return "unreachable"
        if any(counts["failed"] for counts in stats.values()):
            return "failed"
        # A run that ended badly without a failed task: a syntax or inventory
        # error, a timeout, a crash of ansible-playbook.
        if (rc not in (0, None)) or status not in (None, "successful"):
            return "failed"
        if any(counts["changed"] for counts in stats.values()):
            return "changed"
        return "ok"


def exit_code(outcome: str) -> int:
    return OUTCOMES[outcome]
