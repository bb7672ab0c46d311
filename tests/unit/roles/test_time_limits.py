"""Every probe has a time limit: a task that runs docker, nvidia-smi, curl or netplan sets `timeout:`,
every curl sets --max-time, and every wait_for names its timeout. A hung daemon or driver then fails
its task (Ansible: "failed to execute in the expected time frame (N)") instead of hanging the deploy.
"""

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
FILES = sorted(
    [
        *(ROOT / "roles").glob("*/tasks/*.yml"),
        *(ROOT / "roles").glob("*/handlers/*.yml"),
        *(ROOT / "playbooks").glob("*.yml"),
    ]
)
PROBES = re.compile(r"(?:^|[\s/;(&|])(docker|nvidia-smi|curl|netplan)(?=\s|$)")
COMMANDS = ("ansible.builtin.command", "ansible.builtin.shell", "command", "shell")


def _tasks(items):
    for item in items or []:
        if not isinstance(item, dict):
            continue
        yield item
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            yield from _tasks(item.get(key))


def _command_text(task):
    for module in COMMANDS:
        if module in task:
            args = task[module]
            if isinstance(args, dict):
                return " ".join(map(str, args.get("argv") or [])) + " " + str(args.get("cmd") or "")
            return str(args)
    return None


def _collect():
    probes, waits = [], []
    for path in FILES:
        if "/roles/lab/" in str(path):
            continue  # the lab's own bring-up on the controller, not a node
        for task in _tasks(yaml.safe_load(path.read_text()) or []):
            text = _command_text(task)
            if text is not None and PROBES.search(text):
                probes.append((f"{path.relative_to(ROOT)}:{task.get('name')}", task, text))
            if "ansible.builtin.wait_for" in task:
                waits.append((f"{path.relative_to(ROOT)}:{task.get('name')}", task))
    return probes, waits


PROBE_TASKS, WAIT_TASKS = _collect()


def test_the_scan_finds_the_probes():
    names = " ".join(name for name, _, _ in PROBE_TASKS)
    for expected in (
        "vllm_serve/tasks/ready.yml",
        "roce_network/handlers/main.yml",
        "teardown/tasks/main.yml",
    ):
        assert expected in names


@pytest.mark.parametrize(("name", "task", "text"), PROBE_TASKS, ids=[n for n, _, _ in PROBE_TASKS])
def test_a_probe_task_has_a_time_limit(name, task, text):
    assert task.get("timeout"), f"{name} runs `{text.strip()[:60]}` without timeout:"


@pytest.mark.parametrize(
    ("name", "task", "text"),
    [p for p in PROBE_TASKS if re.search(r"\bcurl\b", p[2])],
    ids=[n for n, _, t in PROBE_TASKS if re.search(r"\bcurl\b", t)],
)
def test_every_curl_has_its_own_bound(name, task, text):
    assert "--max-time" in text and "--connect-timeout" in text, name


@pytest.mark.parametrize(("name", "task"), WAIT_TASKS, ids=[n for n, _ in WAIT_TASKS])
def test_every_wait_for_names_its_timeout(name, task):
    assert "timeout" in task["ansible.builtin.wait_for"], name
