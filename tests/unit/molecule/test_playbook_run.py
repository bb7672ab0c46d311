"""The filter the Molecule scenarios read nested runs with, over real json-callback documents."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "playbook_json"
_spec = importlib.util.spec_from_file_location(
    "playbook_run", ROOT / "molecule" / "shared" / "filter_plugins" / "playbook_run.py"
)
playbook_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(playbook_run)

PLAN_ASSERT = "Plan | The cluster's utilization fits on the node"


def _run(name, rc):
    return playbook_run.playbook_run((FIXTURES / name).read_text(), rc)


def test_a_failed_preflight_names_each_host_its_task_and_role():
    run = _run("deploy_preflight_util099_fails.json", 2)
    assert run["complete"] and run["rc"] == 2
    assert [(f["host"], f["role"], f["task"]) for f in run["failed"]] == [
        ("spark-1", "sparkops.vllm.preflight", PLAN_ASSERT),
        ("spark-2", "sparkops.vllm.preflight", PLAN_ASSERT),
    ]
    assert playbook_run.failed_hosts(run) == ["spark-1", "spark-2"]
    assert playbook_run.failed_hosts(run, "no such task") == []
    assert run["stats"]["spark-1"]["failures"] == 1 and run["stats"]["localhost"]["failures"] == 0
    # Nothing after preflight ran: the plays reached are stage 0 and 1.
    assert [p["name"] for p in run["plays"]] == ["Stage 0 · validate the inventory", "Stage 1 · preflight"]
    # The failed result keeps its data and its message.
    first = run["failed"][0]
    assert first["result"]["action"] == "ansible.builtin.assert"
    assert "0.99" in first["msg"]


def test_a_task_result_is_there_per_host_as_the_module_returned_it():
    run = _run("deploy_preflight_util099_fails.json", 2)
    plans = run["results"]["Plan | Plan the node's memory at the cluster's utilization"]
    assert sorted(plans) == ["spark-1", "spark-2"]
    for result in plans.values():
        assert not result.get("failed") and not result.get("skipped")
        assert "_ansible_no_log" not in result
    assert run["ran"][PLAN_ASSERT] == ["spark-1", "spark-2"]


def test_a_rerun_is_unchanged_on_every_host():
    run = _run("deploy_roce_network_rerun.json", 0)
    assert run["failed"] == [] and run["changed"] == []
    assert playbook_run.recap_unchanged(run) == sorted(run["stats"]) == ["localhost", "spark-1", "spark-2"]
    # Tasks skipped on a host are kept in `tasks` but not in `ran` or `results`.
    skipped = [(t["name"], h) for t in run["tasks"] for h, r in t["hosts"].items() if r.get("skipped")]
    assert skipped
    for name, host in skipped:
        if host not in run["ran"].get(name, []):
            assert host not in run["results"].get(name, {})


def test_a_changed_result_is_listed_and_the_host_is_not_unchanged():
    doc = json.loads((FIXTURES / "deploy_roce_network_rerun.json").read_text())
    task = next(t for p in doc["plays"] for t in p["tasks"] if "spark-2" in t["hosts"])
    task["hosts"]["spark-2"]["changed"] = True
    doc["stats"]["spark-2"]["changed"] = 1
    run = playbook_run.playbook_run(json.dumps(doc), 0)
    assert [c["host"] for c in run["changed"]] == ["spark-2"]
    assert "spark-2" not in playbook_run.recap_unchanged(run)


@pytest.mark.parametrize(
    "stdout",
    ["", "Terminated\n", '{"plays": [{"play": {"name": "Stage 0', '{"custom_stats": {}}', "[1, 2]"],
    ids=["nothing", "no-json", "cut-off", "no-stats", "not-a-document"],
)
def test_a_run_that_did_not_finish_has_no_document(stdout):
    run = playbook_run.playbook_run(stdout, -15)
    assert run["complete"] is False and run["rc"] == -15
    assert run["stats"] == {} and run["failed"] == [] and playbook_run.recap_unchanged(run) == []


@pytest.mark.parametrize(
    ("full", "role", "task"),
    [
        (
            "sparkops.vllm.preflight : Plan | Show the memory plan",
            "sparkops.vllm.preflight",
            "Plan | Show the memory plan",
        ),
        (
            "Run deploy.yml : a colon in a play-level task",
            None,
            "Run deploy.yml : a colon in a play-level task",
        ),
        ("Gathering Facts", None, "Gathering Facts"),
    ],
)
def test_the_role_is_split_from_the_task_name(full, role, task):
    assert playbook_run._split_name(full) == (role, task)


def test_a_failed_loop_reports_its_failed_item():
    result = {
        "failed": True,
        "results": [{"failed": False, "msg": "ok"}, {"failed": True, "msg": "item 2 broke"}],
    }
    assert playbook_run._message(result) == "item 2 broke"
    assert playbook_run._message({"failed": True, "stderr": "boom"}) == "boom"
