"""The correctness probe's playbook runs its role on the head, and records only what is new."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]


def _load(path: str):
    return yaml.safe_load((ROOT / path).read_text())


def test_the_probe_play_runs_the_role_on_the_head():
    (play,) = _load("playbooks/probe.yml")
    assert play["hosts"] == "head" and play["any_errors_fatal"] is True
    assert play["roles"] == [{"role": "sparkops.vllm.correctness_probe"}]


def test_the_reference_is_written_only_when_new():
    (task,) = _load("roles/correctness_probe/tasks/record.yml")
    record = task["sparkops.vllm.deployed_record"]
    assert record["section"] == "correctness" and record["compare"] == ["deployment_key"]
    assert "__correctness_probe.record_reference" in task["when"]
