"""PlaybookRun end to end: a real ansible-runner run of a small playbook on localhost.

It proves what the recorded lab events cannot: the -e order is Ansible's (later
wins), no -e value reaches a command line or an artifact, ansible.cfg's host key
checking stands (ansible-runner would turn it off), and the artifacts' layout.
"""

from __future__ import annotations

import io
import json
import stat
from pathlib import Path

import pytest
from conftest import write_local_project

from sparkops_cli.extravars import parse_extra_vars
from sparkops_cli.run import PlaybookRun, prepare_run_dir

SECRET = "s3cr3t-never-shown"

PLAYBOOK = """\
- name: Stage A · one changed task
  hosts: alpha
  gather_facts: false
  tasks:
    - name: The -e values as Ansible merged them
      ansible.builtin.assert:
        that:
          - order == 'third'
          - sparkops_api_key == 's3cr3t-never-shown'
        quiet: true
    - name: Write a file
      ansible.builtin.copy:
        content: "{{ order }}\\n"
        dest: "{{ out_dir }}/out.txt"
        mode: "0600"

- name: Stage B · fail when asked
  hosts: alpha
  gather_facts: false
  tasks:
    - name: Fail when asked
      ansible.builtin.fail:
        msg: "alpha: fail_now is {{ fail_now }}; set fail_now=false"
      when: fail_now | bool
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    # The CLI honours a caller's ANSIBLE_CONFIG (`make test` exports the
    # repository's); this project's own ansible.cfg must be the one read here.
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    root = tmp_path / "project"
    root.mkdir()
    write_local_project(root)
    (root / "play.yml").write_text(PLAYBOOK)
    return root


def run(project: Path, tmp_path: Path, name: str, *extra: str) -> tuple[dict, str]:
    (tmp_path / "vars.yml").write_text("order: second\n")
    progress = io.StringIO()
    playbook_run = PlaybookRun(
        command="deploy",
        project=project,
        playbook="play.yml",
        run_dir=prepare_run_dir(tmp_path / name),
        display_argv=["sparkops", "deploy"],
        extra=parse_extra_vars(
            [
                f"order=first sparkops_api_key={SECRET} out_dir={tmp_path}",
                "@vars.yml",
                '{"order": "third"}',
                *extra,
            ],
            tmp_path,
        ),
        progress=progress,
    )
    return playbook_run.execute(), progress.getvalue()


def test_a_changed_run(project, tmp_path):
    doc, progress = run(project, tmp_path, "changed", "fail_now=false")
    assert (doc["outcome"], doc["exit_code"], doc["rc"]) == ("changed", 2, 0)
    assert (tmp_path / "out.txt").read_text() == "third\n"  # the last -e won, as with ansible-playbook
    assert doc["hosts"] == {
        "alpha": {
            "ok": 2,
            "changed": 1,
            "failed": 0,
            "unreachable": 0,
            "skipped": 1,
            "rescued": 0,
            "ignored": 0,
        }
    }
    assert [stage["stage"] for stage in doc["stages"]] == [
        "Stage A · one changed task",
        "Stage B · fail when asked",
    ]
    assert "== Stage A · one changed task" in progress
    assert "alpha                changed     Write a file" in progress
    artifacts = Path(doc["artifacts"])
    assert stat.S_IMODE(artifacts.stat().st_mode) == 0o700
    assert json.loads((artifacts / "summary.json").read_text()) == doc
    assert "result: changed (exit 2)" in (artifacts / "summary.txt").read_text()
    assert "PLAY RECAP" in (artifacts / "runner" / "stdout").read_text()
    assert list((artifacts / "runner" / "job_events").glob("*.json"))
    command = json.loads((artifacts / "runner" / "command").read_text())
    assert command["cwd"] == str(project)
    assert command["env"]["ANSIBLE_CONFIG"] == str(project / "ansible.cfg")
    assert command["env"]["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    # Every -e is a file on the command line; the private ones are gone after the run.
    assert [arg for arg in command["command"] if arg.startswith("@")]
    assert all("=" not in arg for arg in command["command"] if not arg.startswith("{"))
    leaked = [
        path for path in artifacts.rglob("*") if path.is_file() and SECRET in path.read_text(errors="replace")
    ]
    assert leaked == []
    assert SECRET not in progress


def test_a_failed_run_names_host_task_and_message(project, tmp_path):
    doc, progress = run(project, tmp_path, "failed", "fail_now=true")
    assert (doc["outcome"], doc["exit_code"], doc["rc"]) == ("failed", 1, 2)
    assert doc["problems"] == [
        {
            "kind": "failed",
            "host": "alpha",
            "stage": "Stage B · fail when asked",
            "task": "Fail when asked",
            "message": "alpha: fail_now is true; set fail_now=false",
        }
    ]
    assert "alpha                FAILED      Fail when asked" in progress
    assert "      alpha: fail_now is true; set fail_now=false" in progress


def test_a_playbook_that_cannot_run_is_failed(project, tmp_path):
    (project / "play.yml").write_text("- name: broken\n  hosts: alpha\n  tasks:\n    - no_such_module: {}\n")
    doc, _ = run(project, tmp_path, "broken", "fail_now=false")
    assert doc["rc"] != 0
    assert (doc["outcome"], doc["exit_code"]) == ("failed", 1)
    assert doc["hosts"] == {}
