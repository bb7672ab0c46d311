"""No task shows or registers a raw journal or container log: it is no_log, or redacted on the node."""

from pathlib import Path

import pytest
import yaml
from ansible_collections.sparkops.vllm.plugins.filter.redact import redact

ROOT = Path(__file__).resolve().parents[3]
TASK_FILES = sorted([*(ROOT / "roles").glob("*/tasks/*.yml"), *(ROOT / "playbooks").glob("*.yml")])
LOG_READERS = ("journalctl", "docker logs", "dmesg")
NODE_REDACTING = ("sparkops.vllm.support_logs_info",)


def _tasks(items):
    for item in items or []:
        if not isinstance(item, dict):
            continue
        yield item
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            yield from _tasks(item.get(key))


def _reads_logs(task):
    for module in ("ansible.builtin.command", "ansible.builtin.shell", "command", "shell"):
        args = task.get(module)
        if args is None:
            continue
        text = (
            " ".join(map(str, args.get("argv", []))) + str(args.get("cmd", ""))
            if isinstance(args, dict)
            else args
        )
        # journalctl --grep returns only the lines of the project's own pattern (Xid errors): no secret there.
        return any(reader in str(text) for reader in LOG_READERS) and "--grep" not in str(text)
    return False


def _all_tasks():
    for path in TASK_FILES:
        for task in _tasks(yaml.safe_load(path.read_text()) or []):
            yield path.relative_to(ROOT), task


LOG_TASKS = [(str(path), task) for path, task in _all_tasks() if "register" in task and _reads_logs(task)]
REDACTING_TASKS = [
    (str(path), task) for path, task in _all_tasks() if any(name in task for name in NODE_REDACTING)
]


def test_the_scan_finds_the_log_reading_tasks():
    # The journals of vllm_serve's ready check and of ray_cluster's start and wait are among them.
    files = {path for path, _ in LOG_TASKS}
    assert {"roles/vllm_serve/tasks/ready.yml", "roles/ray_cluster/tasks/start.yml"} <= files
    assert REDACTING_TASKS


@pytest.mark.parametrize(("path", "task"), LOG_TASKS, ids=[f"{p}:{t.get('name')}" for p, t in LOG_TASKS])
def test_a_task_that_registers_a_log_is_no_log(path, task):
    assert task.get("no_log") is True, f"{path}: {task.get('name')!r} registers a log without no_log: true"


@pytest.mark.parametrize(
    ("path", "task"), REDACTING_TASKS, ids=[f"{p}:{t.get('name')}" for p, t in REDACTING_TASKS]
)
def test_a_log_collector_redacts_the_secrets_on_the_node(path, task):
    args = next(task[name] for name in NODE_REDACTING if name in task)
    assert "secrets" in args, f"{path}: {task.get('name')!r} collects logs without secrets to redact"


def test_the_filter_redacts_by_value_and_form_and_ignores_empty_values():
    key = "Zq4TgW8rN2vKx7LmP0aB3cD5eF6hJ9sY"
    assert redact(f"x {key.lower()} HF_TOKEN=abcdefgh", [key, "", None]) == "x [REDACTED] HF_TOKEN=[REDACTED]"
    assert redact(f"y {key}", key) == "y [REDACTED]"


# Ansible puts a task's `environment:` on the remote shell's command line
# (`/bin/sh -c 'NAME=value python3 AnsiballZ_...'`): visible in `ps`, /proc/<pid>/cmdline
# and -vvv output even with no_log. A secret never goes there; it goes to a 0600 file.
SECRET_VARS = ("sparkops_api_key", "sparkops_hf_token", "vllm_serve_api_key", "model_sync_rsyncd_password")
ENV_TASKS = [(str(path), task) for path, task in _all_tasks() if isinstance(task.get("environment"), dict)]


def test_the_scan_finds_tasks_with_an_environment():
    assert "roles/model_sync/tasks/download.yml" in {path for path, _ in ENV_TASKS}


@pytest.mark.parametrize(("path", "task"), ENV_TASKS, ids=[f"{p}:{t.get('name')}" for p, t in ENV_TASKS])
def test_no_secret_rides_in_a_task_environment(path, task):
    text = yaml.safe_dump(task["environment"])
    assert not [name for name in SECRET_VARS if name in text], (
        f"{path}: {task.get('name')!r} passes a secret in environment: (it reaches the remote command line)"
    )
