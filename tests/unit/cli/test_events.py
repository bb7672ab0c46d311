"""Summary, exit codes and --json from recorded runner events.

fixtures/*.jsonl are the runner's job_events (sorted by counter) of real
`sparkops` runs against a private two-node lab (h5-spark-1 head, h5-spark-2
worker), and *.summary.json the summary.json each run wrote:
  status_ok                  `sparkops status` on the deployed lab (exit 0)
  status_worker_ray_stopped  the same after `systemctl stop sparkops-lab-ray-worker`
                             on h5-spark-2 (exit 1)
  status_worker_unreachable  an inventory copy with h5-spark-2 at an unused address
                             (exit 3; status.yml reaches nodes with ignore_unreachable)
  restart_changed            `sparkops restart`, which brought that cluster back (exit 2)
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sparkops_cli.events import COUNTERS, RunEvents, exit_code, result_message
from sparkops_cli.report import result_document, summary_text

FIXTURES = Path(__file__).parent / "fixtures"
RUNS = ("status_ok", "status_worker_ray_stopped", "status_worker_unreachable", "restart_changed")


def events(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / f"{name}.jsonl").read_text().splitlines()]


def recorded(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.summary.json").read_text())


def replay(name: str, reports: bool = True) -> tuple[RunEvents, list[str]]:
    run = RunEvents(reports=reports)
    return run, run.feed_all(events(name))


def document(name: str) -> dict:
    run, _ = replay(name)
    live = recorded(name)
    return result_document(
        command=live["command"],
        playbook=live["playbook"],
        argv=live["argv"],
        inventory=live["inventory"],
        check=live["check"],
        rc=live["rc"],
        runner_status=live["runner_status"],
        events=run,
        artifacts=live["artifacts"],
        report=live["report"],
        report_path=live["report_path"],
        started=live["started"],
        finished=live["finished"],
    )


@pytest.mark.parametrize("name", RUNS)
def test_replay_gives_the_document_the_live_run_wrote(name):
    assert document(name) == recorded(name)


@pytest.mark.parametrize(
    ("name", "rc", "outcome", "code"),
    [
        ("status_ok", 0, "ok", 0),
        ("status_worker_ray_stopped", 2, "failed", 1),
        ("status_worker_unreachable", 2, "unreachable", 3),
        ("restart_changed", 0, "changed", 2),
    ],
)
def test_outcome_and_exit_code(name, rc, outcome, code):
    run, _ = replay(name)
    assert run.outcome(rc, "successful" if rc == 0 else "failed") == outcome
    assert exit_code(outcome) == code


def test_stats_are_ansibles_play_recap():
    run, _ = replay("status_worker_ray_stopped")
    assert run.host_stats() == {
        "h5-spark-1": {
            "ok": 19,
            "changed": 0,
            "failed": 1,
            "unreachable": 0,
            "skipped": 3,
            "rescued": 0,
            "ignored": 0,
        },
        "h5-spark-2": {
            "ok": 13,
            "changed": 0,
            "failed": 0,
            "unreachable": 0,
            "skipped": 4,
            "rescued": 0,
            "ignored": 0,
        },
    }


@pytest.mark.parametrize("name", ["status_ok", "status_worker_ray_stopped", "restart_changed"])
def test_counting_results_matches_the_stats_when_a_run_is_cut_short(name):
    # Without the final playbook_on_stats (a killed run), the counts come from
    # the task results; they must agree with Ansible's own.
    full, _ = replay(name)
    cut = RunEvents()
    cut.feed_all(event for event in events(name) if event["event"] != "playbook_on_stats")
    assert cut.stats is None
    assert cut.host_stats() == full.host_stats()


def test_unreachable_wins_over_failed_even_when_ignored_in_the_stats():
    run, _ = replay("status_worker_unreachable")
    stats = run.host_stats()
    # status.yml's ping has ignore_unreachable: Ansible counts it ok+ignored...
    assert stats["h5-spark-2"]["unreachable"] == 0
    assert stats["h5-spark-2"]["ignored"] == 1
    # ...and the head's report task failed; the run is still "unreachable".
    assert stats["h5-spark-1"]["failed"] == 1
    assert run.unreachable_hosts() == ["h5-spark-2"]
    assert run.outcome(2, "failed") == "unreachable"


def test_a_nonzero_rc_without_a_failed_task_is_failed():
    run, _ = replay("status_ok")
    assert run.outcome(0, "successful") == "ok"
    assert run.outcome(4, "failed") == "failed"
    assert run.outcome(0, "timeout") == "failed"


def test_stages_are_the_plays_with_durations():
    run, _ = replay("status_ok")
    stages = run.stage_durations()
    assert [stage["stage"] for stage in stages] == [
        "Status · read every node",
        "Status · the cluster's table",
    ]
    assert all(stage["seconds"] > 0 for stage in stages)
    assert stages[0]["hosts"] == ["h5-spark-1", "h5-spark-2"]


def test_progress_shows_stage_headers_changes_and_failures_only():
    _, lines = replay("restart_changed")
    assert lines[:2] == ["", "== Restart the cluster"]
    changed = [line for line in lines if " changed " in line]
    assert changed == [
        "  h5-spark-1           changed     Stop | Stop serve on the head",
        "  h5-spark-1           changed     Stop | Stop the Ray head",
        "  h5-spark-1           changed     Start | Start the Ray head",
        "  h5-spark-2           changed     Start | Start the Ray workers",
        "  h5-spark-1           changed     Start | Start serve, or restart it when its inputs or the Ray cluster changed",
    ]
    # restart is not a report command: nothing but headers and changes.
    quiet, _ = RunEvents(reports=False), None
    assert len(quiet.feed_all(events("restart_changed"))) == 2 + len(changed)


def test_progress_names_the_failed_host_and_the_fix():
    _, lines = replay("status_worker_ray_stopped")
    text = "\n".join(lines)
    assert "  h5-spark-1           FAILED      Report | Every node and the endpoint are healthy" in text
    assert "      Unhealthy: h5-spark-2, the endpoint (3 problem(s)" in text
    # The report (status.yml's table) is shown for status.
    assert re.search(r"h5-spark-2  ok   192\.168\.205\.13 / 9000 .* failed, NOT counted", text)
    assert "`systemctl start sparkops-lab-ray-worker` on h5-spark-2" in text


def test_progress_names_the_unreachable_host_and_why():
    _, lines = replay("status_worker_unreachable")
    at = lines.index("  h5-spark-2           UNREACHABLE Reach | Connect to the node over SSH")
    assert "No route to host" in lines[at + 1]


def test_summary_table():
    text = summary_text(document("status_worker_unreachable"))
    lines = text.splitlines()
    assert re.split(r"\s+", lines[0]) == ["host", *COUNTERS]
    assert re.split(r"\s+", lines[2]) == ["h5-spark-1", "19", "0", "1", "0", "3", "0", "0"]
    assert re.split(r"\s+", lines[3]) == ["h5-spark-2", "4", "0", "0", "0", "0", "0", "1"]
    assert re.match(r"^stage\s+seconds\s+hosts$", lines[5])
    assert re.match(r"^Status · read every node\s+49\.8\s+h5-spark-1, h5-spark-2$", lines[7])
    assert (
        "  h5-spark-2: unreachable in Status · read every node / Reach | Connect to the node over SSH: "
        in text
    )
    assert lines[-3:] == [
        "result: unreachable (exit 3)",
        "report: /tmp/h5lab/runs/status-unreachable/status.json",
        "artifacts: /tmp/h5lab/runs/status-unreachable",
    ]


def test_check_mode_is_said_in_the_summary():
    doc = document("status_ok") | {"check": True}
    assert "result: ok (exit 0) (check mode: nothing was changed)" in summary_text(doc)


def test_json_document_round_trips():
    doc = document("status_worker_ray_stopped")
    again = json.loads(json.dumps(doc))
    assert again == doc
    assert again["report"]["healthy"] is False
    assert {problem["kind"] for problem in again["problems"]} == {"failed"}


@pytest.mark.parametrize(
    ("res", "message"),
    [
        ({"msg": "plain"}, "plain"),
        ({"msg": ["a", "b"]}, "a\nb"),
        (
            {
                "msg": "One or more items failed",
                "results": [{"failed": False}, {"failed": True, "msg": "item 2"}],
            },
            "item 2",
        ),
        ({"msg": "non-zero return code", "stderr": "boom"}, "non-zero return code"),
        ({"stderr": " boom \n"}, "boom"),
        ({}, ""),
        (None, ""),
    ],
)
def test_result_message(res, message):
    assert result_message(res) == message


@pytest.mark.parametrize(
    ("findings", "outcome", "code"),
    [
        ([{"id": "startup_memory_short", "severity": "error", "host": "spark-1"}], "failed", 1),
        ([{"id": "ray_memory_monitor_off", "severity": "warning", "host": "spark-1"}], "ok", 0),
        ([], "ok", 0),
    ],
)
def test_cluster_diagnose_fails_on_an_error_finding(findings, outcome, code):
    """A clean diagnose run that finds an error-severity cause exits 1, like `diagnose FILE...`."""
    run, _ = replay("status_ok")
    live = recorded("status_ok")
    doc = result_document(
        command="diagnose",
        playbook="playbooks/diagnose.yml",
        argv=["sparkops", "diagnose"],
        inventory=[],
        check=False,
        rc=live["rc"],
        runner_status=live["runner_status"],
        events=run,
        artifacts=live["artifacts"],
        report={"findings": findings, "bundle": "/tmp/b.tar.gz"},
    )
    assert (doc["outcome"], doc["exit_code"]) == (outcome, code)
