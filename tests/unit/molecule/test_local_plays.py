# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""A scenario play with ``connection: local`` never delegates to a lab node.

A play's ``connection`` keyword applies to every task of the play, the ones delegated
to another host too: ``delegate_to: spark-2`` under ``connection: local`` runs on the
machine running the tests, not on spark-2. stale_consumer's known-bad case did that
(its plant landed in the test machine's /etc and preflight on spark-2 never saw it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import iter_tasks

ROOT = Path(__file__).resolve().parents[3]
LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}


def _delegations(play: dict) -> list[str]:
    return [
        str(task["delegate_to"])
        for task in iter_tasks([play])
        if "delegate_to" in task
        and str(task["delegate_to"]) not in LOCAL_NAMES
        # A task that names its own connection (vllm_image: ssh) is not affected.
        and task.get("connection", "local") == "local"
    ]


def _plays():
    for path in sorted((ROOT / "molecule").glob("**/*.yml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(doc, list):
            continue
        for play in doc:
            if isinstance(play, dict) and "hosts" in play:
                yield path.relative_to(ROOT), play


PLAYS = list(_plays())


def test_the_scan_sees_the_scenarios():
    # Guards the scan itself: it must read local plays and delegating plays.
    assert any(play.get("connection") == "local" for _, play in PLAYS)
    assert any(_delegations(play) for _, play in PLAYS)


@pytest.mark.parametrize(("path", "play"), PLAYS, ids=[f"{p}:{play.get('name')}" for p, play in PLAYS])
def test_no_delegation_to_a_node_under_connection_local(path, play):
    if play.get("connection") != "local":
        return
    assert _delegations(play) == [], (
        f"{path}: play {play.get('name')!r} has connection: local and delegates to "
        f"{_delegations(play)}: those tasks would run on the test machine. Drop the play's "
        "connection keyword (the implicit localhost is local) or move the tasks to a play on that host."
    )


def test_the_rule_catches_the_old_known_bad_play():
    play = {
        "hosts": "localhost",
        "connection": "local",
        "tasks": [{"block": [{"ansible.builtin.copy": {}, "delegate_to": "spark-2"}]}],
    }
    assert _delegations(play) == ["spark-2"]
    play["tasks"][0]["block"][0]["connection"] = "ssh"
    assert _delegations(play) == []
