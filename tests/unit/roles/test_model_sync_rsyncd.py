"""model_sync's rsync daemon: bound to the receiver's ib address, authenticated, write-only, short-lived."""

from pathlib import Path

import jinja2
import pytest
import yaml
from ansible.plugins.filter.core import comment

ROLE = Path(__file__).resolve().parents[3] / "roles" / "model_sync"
VARS = {
    "ansible_managed": "Ansible managed",
    "ib_address": "192.168.100.12",
    "_model_sync_head_ib": "192.168.100.11",
    "model_sync_rsyncd_port": 873,
    "_model_sync_streams": 4,
    "_model_sync_rsyncd_module": "sparkops-model",
    "sparkops_model_path": "/srv/models/m",
    "model_sync_rsyncd_user": "sparkops",
    "_model_sync_rsyncd_secrets": "/etc/sparkops/model-sync/rsyncd.secrets",
    "_model_sync_rsyncd_conf": "/etc/sparkops/model-sync/rsyncd.conf",
    "model_sync_timeout_seconds": 21600,
}


def render(name):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["comment"] = comment
    return env.from_string((ROLE / "templates" / name).read_text()).render(**VARS)


def settings(text):
    out = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            out.setdefault(key.strip(), []).append(value.strip())
    return out


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("address", "192.168.100.12"),  # the receiver's ib address only, never 0.0.0.0
        ("hosts allow", "192.168.100.11"),  # only the head's ib address
        ("hosts deny", "*"),
        ("auth users", "sparkops"),
        ("secrets file", "/etc/sparkops/model-sync/rsyncd.secrets"),
        ("strict modes", "yes"),
        ("read only", "no"),
        ("write only", "yes"),  # nothing can be read back
        ("list", "no"),
    ],
)
def test_the_daemon_is_bound_and_authenticated(key, value):
    assert settings(render("rsyncd.conf.j2"))[key] == [value]


def test_the_daemon_refuses_deletions():
    refused = settings(render("rsyncd.conf.j2"))["refuse options"][0].split()
    assert {"delete", "delete-after", "remove-source-files"} <= set(refused)


def test_the_unit_has_a_bounded_lifetime_and_takes_its_secrets_with_it():
    unit = render("sparkops-model-sync-rsyncd.service.j2")
    values = settings(unit)
    # Bounded even if the controller dies mid-copy: the copy's own limit plus a margin.
    assert values["RuntimeMaxSec"] == [str(VARS["model_sync_timeout_seconds"] + 300)]
    assert values["ExecStopPost"] == ["/bin/rm -f /etc/sparkops/model-sync/rsyncd.secrets"]
    assert "[Install]" not in [line.strip() for line in unit.splitlines()]  # never started at boot


def test_the_password_is_new_per_copy_and_never_logged_or_on_a_command_line():
    tasks = yaml.safe_load((ROLE / "tasks" / "rsyncd_start.yml").read_text())
    by_name = {task["name"]: task for task in tasks}
    make = by_name["Rsyncd | Make a password for this copy"]
    assert (
        "/dev/null" in make["ansible.builtin.set_fact"]["__model_sync_rsyncd_password"]
    )  # not stored anywhere
    assert make["no_log"] is True
    write = by_name["Rsyncd | Write the daemon's secrets file (mode 0600, removed after the copy)"]
    assert write["no_log"] is True and write["ansible.builtin.copy"]["mode"] == "0600"
    # The client gets it in RSYNC_PASSWORD (plugins/module_utils/_model_sync_copy.py), never in argv.
    copy_utils = (ROLE.parents[1] / "plugins" / "module_utils" / "_model_sync_copy.py").read_text()
    assert 'env["RSYNC_PASSWORD"] = rsyncd["password"]' in copy_utils
