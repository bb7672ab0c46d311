"""roce_network applies netplan only when its file changed, and refuses the management interface first.

Read from the role's YAML (what Ansible runs): `netplan apply` is one handler, notified by
the template of the stage's file alone; the refusals (tasks/netplan.yml) run before any
task that writes (tasks/address.yml).
"""

import yaml
from conftest import ROOT

ROLE = ROOT / "roles" / "roce_network"


def _load(path):
    return yaml.safe_load(path.read_text()) or []


def _tasks(tasks):
    for task in tasks:
        yield task
        yield from _tasks(task.get("block") or [])


def test_netplan_apply_is_one_handler_notified_only_by_the_template_of_the_stages_file():
    handlers = _load(ROLE / "handlers" / "main.yml")
    applies = [
        h for h in handlers if (h.get("ansible.builtin.command") or {}).get("argv") == ["netplan", "apply"]
    ]
    assert len(applies) == 1
    listen = applies[0]["listen"]
    notifiers = []
    for path in sorted((ROLE / "tasks").glob("*.yml")):
        for task in _tasks(_load(path)):
            assert "netplan" not in str((task.get("ansible.builtin.command") or {}).get("argv", [""])[:1]), (
                path
            )
            if task.get("notify"):
                notifiers.append((path.name, task))
    assert [(name, list(task)) for name, task in notifiers if task["notify"] == listen] == [
        (
            "address.yml",
            ["name", "ansible.builtin.template", "register", "notify"],
        )
    ]
    template = notifiers[0][1]["ansible.builtin.template"]
    assert template["dest"] == "{{ roce_network_netplan_file }}"


def test_the_refusals_run_before_anything_is_written():
    order = [task["ansible.builtin.import_tasks"] for task in _load(ROLE / "tasks" / "main.yml")]
    assert order.index("netplan.yml") < order.index("address.yml")
    checks = _load(ROLE / "tasks" / "netplan.yml")
    modules = {key for task in checks for key in task if key.startswith(("ansible.", "community."))}
    # Reads and asserts only.
    assert modules <= {
        "ansible.builtin.command",
        "ansible.builtin.assert",
        "ansible.builtin.stat",
        "ansible.builtin.find",
        "ansible.builtin.slurp",
        "ansible.builtin.set_fact",
        "ansible.builtin.debug",
    }
    for task in checks:
        if "ansible.builtin.command" in task:
            assert task["changed_when"] is False and task["check_mode"] is False
    names = [task["name"] for task in checks]
    assert "Netplan | ib_interface does not carry the management connection" in names
    assert "Netplan | No other netplan file fights the stage's for ib_interface" in names
