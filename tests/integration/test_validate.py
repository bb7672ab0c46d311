"""Stage 0 (playbooks/validate.yml) against real inventories, through ansible-playbook.

Every case writes an inventory whose hosts are reachable only through a
tripwire: ``ansible_ssh_executable`` points at a script that leaves a marker
file and exits 255. Validation must never touch it, pass or fail. The baseline
inventory passes; each bad case changes it in one way and expects the one
failure to name the host, the variable, the value and the fix. The full tables
of bad inventories run against the Python contract itself, in milliseconds, in
tests/unit/plugins/module_utils/test_inventory_contract.py.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible_collections.sparkops.vllm.plugins.module_utils import _inventory_contract as contract

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "playbooks" / "validate.yml"
ANSIBLE_PLAYBOOK = ROOT / ".venv" / "bin" / "ansible-playbook"
ANSIBLE_VAULT = ROOT / ".venv" / "bin" / "ansible-vault"
SAMPLE = ROOT / "inventory" / "sample"
ROLE = ROOT / "roles" / "validate"
# The messages write products with the multiplication sign.
TIMES = "\u00d7"

SETTINGS = {
    "sparkops_cluster_name": "spark-vllm",
    "sparkops_gpus_per_node": 1,
    "sparkops_tensor_parallel_size": 2,
    "sparkops_pipeline_parallel_size": 1,
    "sparkops_model_id": "Qwen/Qwen3.5-122B-A10B-FP8",
    "sparkops_model_path": "/srv/models/Qwen3.5-122B-A10B-FP8",
    "sparkops_served_model_name": "qwen3.5-122b",
    "sparkops_max_model_len": 32768,
    "sparkops_gpu_memory_utilization": None,
    "sparkops_cuda_graphs": True,
    "sparkops_ray_memory_monitor": True,
    "sparkops_ray_memory_threshold": 0.95,
    "sparkops_vllm_version": "0.17.1",
    "sparkops_api_key": "sk-0123456789abcdefghijklmnopqrstu",
    "sparkops_hf_token": None,
}


def baseline():
    """Two Sparks as in inventory/sample, in one file."""
    return {
        "all": {
            "vars": copy.deepcopy(SETTINGS),
            "children": {
                "cluster": {
                    "vars": {
                        "sparkops_ib_subnet": "192.168.200.0/24",
                        "ib_interface": "enp1s0f1np1",
                        "ib_mtu": 9000,
                    },
                    "children": {
                        "head": {
                            "hosts": {
                                "spark-1": {"ansible_host": "10.1.230.180", "ib_address": "192.168.200.12"}
                            }
                        },
                        "workers": {
                            "hosts": {
                                "spark-2": {"ansible_host": "10.1.230.181", "ib_address": "192.168.200.13"}
                            }
                        },
                    },
                }
            },
        }
    }


# -- mutations of the baseline ------------------------------------------------


def _cluster(inv):
    return inv["all"]["children"]["cluster"]


def _host(inv, name):
    def walk(group):
        hosts = group.get("hosts") or {}
        if name in hosts:
            return hosts[name]
        for child in (group.get("children") or {}).values():
            found = walk(child or {})
            if found is not None:
                return found
        return None

    found = walk(inv["all"])
    assert found is not None, f"{name} is not in the inventory"
    return found


def setting(name, value):
    def mutate(inv):
        inv["all"]["vars"][name] = value

    return mutate


def host_var(host, name, value):
    def mutate(inv):
        _host(inv, host)[name] = value

    return mutate


def group_hosts(group, hosts):
    """Put exactly these hosts (name -> vars) in a child group of cluster."""

    def mutate(inv):
        _cluster(inv)["children"][group] = {"hosts": copy.deepcopy(hosts)}

    return mutate


def compose(*mutations):
    def mutate(inv):
        for mutation in mutations:
            mutation(inv)

    return mutate


# A few of the bad inventories of tests/unit/plugins/module_utils/test_inventory_contract.py
# end to end: id, mutation, number of problems reported, fragments of the failure message.
BAD = [
    (
        "duplicate_ib_address",
        host_var("spark-2", "ib_address", "192.168.200.12"),
        1,
        [
            "spark-1, spark-2: share ib_address '192.168.200.12'",
            "Fix: give each of spark-1, spark-2 a different address in 192.168.200.0/24",
        ],
    ),
    (
        "host_vars_typos",
        compose(
            host_var("spark-1", "ib_address", "192.168.200.12/24"),
            host_var("spark-1", "ib_interface", "enp1s0f1np1 "),
            host_var("spark-2", "ib_address", "spark-2-ib"),
        ),
        3,
        [
            "spark-1: ib_address '192.168.200.12/24' is not an IP address: it carries a prefix.",
            "Fix: write the bare address '192.168.200.12'",
            "spark-1: ib_interface 'enp1s0f1np1 ' is not a valid Linux interface name",
            "spark-2: ib_address 'spark-2-ib' is not an IP address.",
            "e.g. 192.168.200.1",
        ],
    ),
    (
        "numbers_and_strings_swapped",
        compose(setting("sparkops_gpu_memory_utilization", "0.9x"), setting("sparkops_vllm_version", 0.1)),
        2,
        [
            "cluster: sparkops_gpu_memory_utilization is the string '0.9x', not a number.",
            "Fix: write a number, e.g. sparkops_gpu_memory_utilization: null",
            "cluster: sparkops_vllm_version is the number 0.1, not a string",
            'Fix: quote it, e.g. sparkops_vllm_version: "0.17.1"',
        ],
    ),
    (
        "setting_missing_and_secret_of_wrong_type",
        compose(
            lambda inv: inv["all"]["vars"].pop("sparkops_served_model_name"),
            setting("sparkops_api_key", 12345),
        ),
        2,
        [
            "cluster: sparkops_served_model_name is not set. "
            "Fix: add sparkops_served_model_name: qwen3.5-122b",
            "cluster: sparkops_api_key is a number, not a string",
        ],
    ),
    (
        "hostile_values_of_every_class_before_any_contact",
        compose(
            setting("sparkops_api_key", "sk-0123456789abcdef\nLD_PRELOAD=/tmp/evil.so"),
            setting("sparkops_model_path", "/usr/"),
            setting("model_sync_rsyncd_port", "22"),
            setting("sparkops_ray_memory_threshold", ".nan"),
            lambda inv: _cluster(inv)["vars"].update(sparkops_ib_subnet="0.0.0.0/0"),
            host_var("spark-2", "ansible_host", "10.1.230.180"),
        ),
        6,
        [
            "cluster: sparkops_api_key (value not shown) has a newline",
            "cluster: sparkops_model_path '/usr/' is a system directory (/usr)",
            "cluster: model_sync_rsyncd_port 22 and SSH's port 22 (roce_network_ssh_port, cluster_ssh_port) share port 22",
            "cluster: sparkops_ray_memory_threshold is the string '.nan', not a number",
            "cluster: sparkops_ib_subnet '0.0.0.0/0' has a /0 prefix, shorter than /16",
            "spark-1, spark-2: share the management address '10.1.230.180'",
        ],
    ),
    (
        "cluster_wide_setting_overridden_per_host",
        host_var("spark-2", "sparkops_model_path", "/data/qwen"),
        1,
        [
            'spark-2: sparkops_model_path has "/data/qwen" on spark-2 '
            'but "/srv/models/Qwen3.5-122B-A10B-FP8" on spark-1',
            "Fix: set it once in group_vars/all/model.yml "
            "and remove the per-host value from spark-2's host vars",
        ],
    ),
]


@pytest.fixture
def tripwire(tmp_path):
    """An ssh stand-in that records any attempt to reach a host."""
    marker = tmp_path / "host-contacted"
    script = tmp_path / "tripwire"
    script.write_text(f'#!/bin/sh\necho "$@" >> {marker}\nexit 255\n')
    script.chmod(0o755)
    return script, marker


def arm(inventory, script):
    """Give every host of the inventory the tripwire as its only way in."""

    def walk(group):
        for name, hostvars in list((group.get("hosts") or {}).items()):
            group["hosts"][name] = {
                **(hostvars or {}),
                "ansible_connection": "ssh",
                "ansible_ssh_executable": str(script),
            }
        for child in (group.get("children") or {}).values():
            walk(child or {})

    walk(inventory["all"])
    return inventory


def run_playbook(inventory_path, playbook=PLAYBOOK, *extra):
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_NOCOLOR": "1",
    }
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(inventory_path), str(playbook), *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def task_results(proc):
    """(task name, result) for localhost, from the json callback."""
    report = json.loads(proc.stdout)
    return [
        (task["task"]["name"], task["hosts"]["localhost"])
        for play in report["plays"]
        for task in play["tasks"]
        if "localhost" in task["hosts"]
    ]


def failure(proc):
    failed = [result for _, result in task_results(proc) if result.get("failed")]
    assert len(failed) == 1, proc.stdout + proc.stderr
    return failed[0]["msg"]


def problems(msg):
    return [line[2:] for line in msg.splitlines() if line.startswith("- ")]


def write_inventory(tmp_path, inventory):
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("mutate", "count", "fragments"), [case[1:] for case in BAD], ids=[case[0] for case in BAD]
)
def test_bad_inventory_fails_with_every_problem_named(tmp_path, tripwire, mutate, count, fragments):
    script, marker = tripwire
    inventory = baseline()
    mutate(inventory)
    proc = run_playbook(write_inventory(tmp_path, arm(inventory, script)))

    assert proc.returncode != 0
    assert not marker.exists(), f"validation contacted a host: {marker.read_text()}"
    msg = failure(proc)
    listed = problems(msg)
    assert msg.startswith(
        f"The inventory has {count} problem{'' if count == 1 else 's'}; no host was contacted"
    ), msg
    assert len(listed) == count, msg
    for fragment in fragments:
        assert fragment in msg, f"{fragment!r} not in:\n{msg}"
    assert "LD_PRELOAD" not in proc.stdout + proc.stderr, "a secret was echoed"


def test_baseline_inventory_passes(tmp_path, tripwire):
    script, marker = tripwire
    proc = run_playbook(write_inventory(tmp_path, arm(baseline(), script)))

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not marker.exists()
    [(_, result)] = [
        (n, r) for n, r in task_results(proc) if n.endswith("Inventory is valid for a sparkops.vllm cluster")
    ]
    assert result["msg"].startswith(
        f"Inventory OK: 2 nodes (head spark-1, workers spark-2), TP 2 {TIMES} PP 1"
    ), result["msg"]


def test_single_node_cluster_passes(tmp_path, tripwire):
    script, marker = tripwire
    inventory = baseline()
    compose(group_hosts("workers", {}), setting("sparkops_tensor_parallel_size", 1))(inventory)
    proc = run_playbook(write_inventory(tmp_path, arm(inventory, script)))

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not marker.exists()


def copy_sample(tmp_path, script, api_key="sk-0123456789abcdefghijklmnopqrstu"):
    """inventory/sample with the tripwire added as host_vars (the sample itself is untouched), and a key."""
    inventory = tmp_path / "sample"
    shutil.copytree(SAMPLE, inventory)
    secrets = inventory / "group_vars" / "all" / "secrets.yml"
    assert 'sparkops_api_key: ""\n' in secrets.read_text()
    if api_key is not None:
        secrets.write_text(
            secrets.read_text().replace('sparkops_api_key: ""\n', f"sparkops_api_key: {api_key}\n")
        )
    (inventory / "host_vars").mkdir()
    for host in ("spark-1", "spark-2"):
        (inventory / "host_vars" / f"{host}.yml").write_text(
            yaml.safe_dump({"ansible_connection": "ssh", "ansible_ssh_executable": str(script)})
        )
    return inventory


def test_sample_inventory_passes(tmp_path, tripwire):
    script, marker = tripwire
    proc = run_playbook(copy_sample(tmp_path, script) / "hosts.yml")

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not marker.exists()


def test_the_sample_as_shipped_refuses_its_empty_key(tmp_path, tripwire):
    """The sample's key is empty and vLLM listens on 0.0.0.0 by default: an open API must be chosen."""
    script, marker = tripwire
    proc = run_playbook(copy_sample(tmp_path, script, api_key=None) / "hosts.yml")

    assert proc.returncode != 0
    assert not marker.exists()
    assert problems(failure(proc)) == [
        "cluster: sparkops_api_key is empty while vLLM's API listens on 0.0.0.0:8000 (vllm_serve_host), beyond "
        "loopback: anyone who reaches that port can use the model. Fix: set a key of at least 16 characters "
        "(group_vars/all/secrets.yml, vaulted), or bind the API to 127.0.0.1 with vllm_serve_host, or set "
        "vllm_serve_allow_unauthenticated: true to serve it open on purpose (group_vars/all/vllm_serve.yml)"
    ]
    # Either choice in the inventory passes.
    for choice in ("vllm_serve_allow_unauthenticated=true", "vllm_serve_host=127.0.0.1"):
        name, value = choice.split("=")
        proc = run_playbook(
            copy_sample(tmp_path / name, script, api_key=None) / "hosts.yml",
            PLAYBOOK,
            "-e",
            json.dumps({name: value == "true" or value}),
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_role_defaults_are_read_from_the_roles(tmp_path, tripwire):
    """Settings of later stages left unset are checked with their role's default (roce_network's Ray ports)."""
    script, marker = tripwire
    proc = run_playbook(
        write_inventory(tmp_path, arm(baseline(), script)), PLAYBOOK, "-e", "vllm_serve_port=6379"
    )

    assert proc.returncode != 0
    assert not marker.exists()
    assert "cluster: vllm_serve_port 6379 and roce_network_ray_ports.gcs 6379 share port 6379" in failure(
        proc
    ), failure(proc)


def test_vaulted_secret_needs_no_vault_password(tmp_path, tripwire):
    """Stage 0 leaves vaulted values encrypted: no --vault-password-file here."""
    script, marker = tripwire
    inventory = copy_sample(tmp_path, script, api_key=None)
    password = tmp_path / "vault-password"
    password.write_text("not-a-real-password\n")
    encrypted = subprocess.run(
        [
            str(ANSIBLE_VAULT),
            "encrypt_string",
            "--vault-password-file",
            str(password),
            "--name",
            "sparkops_api_key",
            "sk-test",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    secrets = inventory / "group_vars" / "all" / "secrets.yml"
    text = secrets.read_text().replace('sparkops_api_key: ""\n', encrypted)
    assert "!vault" in text
    secrets.write_text(text)

    proc = run_playbook(inventory / "hosts.yml")

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not marker.exists()


def test_problems_are_sorted_and_reported_together(tmp_path, tripwire):
    script, marker = tripwire
    inventory = baseline()
    compose(
        host_var("spark-2", "ib_address", "192.168.100.13"),
        host_var("spark-1", "ib_mtu", 1500),
        setting("sparkops_gpu_memory_utilization", 0),
        setting("sparkops_pipeline_parallel_size", 2),
    )(inventory)
    proc = run_playbook(write_inventory(tmp_path, arm(inventory, script)))

    assert proc.returncode != 0
    assert not marker.exists()
    listed = problems(failure(proc))
    assert listed == sorted(listed)
    assert [line.split(":", 1)[0] for line in listed] == ["cluster", "cluster", "spark-1, spark-2", "spark-2"]


def test_a_failed_validation_ends_the_run_before_later_stages(tmp_path, tripwire):
    """deploy.yml imports this playbook first: its failure must stop every later play."""
    script, marker = tripwire
    wrapper = tmp_path / "deploy.yml"
    wrapper.write_text(
        yaml.safe_dump(
            [
                {"ansible.builtin.import_playbook": str(PLAYBOOK)},
                {
                    "name": "A later stage",
                    "hosts": "cluster",
                    "gather_facts": False,
                    "tasks": [{"name": "Reach the node", "ansible.builtin.ping": {}}],
                },
            ]
        )
    )
    bad = baseline()
    host_var("spark-2", "ib_address", "192.168.200.12")(bad)
    proc = run_playbook(write_inventory(tmp_path, arm(bad, script)), wrapper)
    assert proc.returncode != 0
    assert not marker.exists(), "a later play ran after stage 0 failed"

    # The same wrapper with a good inventory does reach the hosts, through the
    # tripwire: proof that the marker above would have caught a contact.
    proc = run_playbook(write_inventory(tmp_path, arm(baseline(), script)), wrapper)
    assert proc.returncode != 0
    assert marker.exists()


def test_vars_hold_no_jinja_program():
    """The contract is Python (plugins/module_utils/_inventory_contract.py), not templates in vars/."""
    for path in ROLE.rglob("*.yml"):
        assert "{%" not in path.read_text(), path


def test_argument_specs_mirror_the_defaults():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    options = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"][
        "options"
    ]
    assert set(options) == set(defaults)
    for name, spec in options.items():
        assert spec["default"] == defaults[name], name
        assert spec["description"], name


def test_sample_inventory_documents_every_setting_where_the_messages_point():
    """Each fix message names the sample file of its setting; the sample must hold it there, commented."""
    expected = {s.name: s.file for s in contract.SETTINGS}
    expected.update(ib_interface="group_vars/cluster/network.yml", ib_mtu="group_vars/cluster/network.yml")

    def is_setting(line):
        return bool(line) and not line.startswith((" ", "#", "-")) and ":" in line

    found = {}
    for path in sorted((SAMPLE / "group_vars").rglob("*.yml")):
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if is_setting(line):
                name = line.split(":", 1)[0]
                assert name not in found, f"{name} is set twice in the sample"
                found[name] = str(path.relative_to(SAMPLE))
                # A setting opens with a comment, or follows one it shares it with.
                above = number - 1
                while above > 0 and is_setting(lines[above]):
                    above -= 1
                assert lines[above].startswith("#"), f"{name} in {path.name} has no comment above it"
    for name, file in expected.items():
        assert found.get(name) == file, f"{name}: expected in {file}, found in {found.get(name)}"

    hosts = yaml.safe_load((SAMPLE / "hosts.yml").read_text())
    assert set(hosts["cluster"]["children"]) == {"head", "workers"}
    for group in ("head", "workers"):
        for name, hostvars in hosts["cluster"]["children"][group]["hosts"].items():
            assert {"ansible_host", "ib_address"} <= set(hostvars), name


def test_numbers_given_as_key_value_on_the_command_line_are_accepted(tmp_path, tripwire):
    """`-e NAME=8192` reaches Ansible as a string; one that is exactly a number is taken as the number."""
    script, marker = tripwire
    inventory = write_inventory(tmp_path, arm(baseline(), script))
    proc = run_playbook(
        inventory,
        PLAYBOOK,
        "-e",
        "sparkops_max_model_len=8192",
        "-e",
        "sparkops_gpu_memory_utilization=0.5",
        "-e",
        "ib_mtu=1500",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not marker.exists()
    [(_, result)] = [
        (n, r) for n, r in task_results(proc) if n.endswith("Inventory is valid for a sparkops.vllm cluster")
    ]
    assert "at MTU 1500" in result["msg"], result["msg"]

    proc = run_playbook(inventory, PLAYBOOK, "-e", "sparkops_max_model_len=8k")
    assert proc.returncode != 0
    assert not marker.exists()
    assert "cluster: sparkops_max_model_len is the string '8k', not a whole number." in failure(proc)


def test_a_value_that_cannot_be_evaluated_is_named_and_a_secrets_error_is_not_shown(tmp_path, tripwire):
    script, marker = tripwire
    inventory = baseline()
    setting("sparkops_served_model_name", "{{ no_such_variable }}")(inventory)
    setting("sparkops_api_key", "{{ 'sk-' ~ no_such_secret_source }}")(inventory)
    proc = run_playbook(write_inventory(tmp_path, arm(inventory, script)))

    assert proc.returncode != 0
    assert not marker.exists()
    msg = failure(proc)
    assert "spark-1: sparkops_served_model_name cannot be evaluated (" in msg, msg
    assert "no_such_variable" in msg, msg
    assert "spark-1: sparkops_api_key cannot be evaluated (the error is not shown for a secret)" in msg, msg
    assert "no_such_secret_source" not in msg, msg
