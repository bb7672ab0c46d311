"""Moving ray_cluster_state_dir moves the serve container's mount and its wait with Ray's.

``ray_cluster_state_dir`` is a ray_cluster option "shared with serve": the serve
container joins the head's Ray node through the Ray temp dir in it, and its
unit waits for the head's raylet socket there. One ansible-playbook run
renders both units as the deploy does (ray_cluster's play with its defaults
and vars, then vllm_serve's own play, which does not load ray_cluster's
defaults) for the default and for a moved state directory, and checks both
units name the same directory.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
RAY = ROOT / "roles" / "ray_cluster"
SERVE = ROOT / "roles" / "vllm_serve"

CASES = {"default": None, "moved": "/srv/sparkops-state/lab"}

PLAYBOOK = """
- name: Render the unit as the stage does
  hosts: cases
  gather_facts: false
  # The role's defaults are the inventory's group `all` (below the hosts'
  # values, as role defaults are); its vars/ rank above, as role vars do.
  vars_files: ["{role}/vars/main.yml"]
  tasks:
    - name: Render
      ansible.builtin.template:
        src: "{role}/templates/{template}"
        dest: "{{{{ out_dir }}}}/{{{{ inventory_hostname }}}}-{template}"
        mode: "0600"
"""

NODE = {
    "ansible_connection": "local",
    "sparkops_cluster_name": "lab",
    "ib_address": "192.168.200.11",
    "sparkops_model_path": "/models/tiny",
    "sparkops_served_model_name": "tiny",
    "sparkops_gpus_per_node": 1,
    "sparkops_vllm_image": "vllm/vllm-openai:test",
    "sparkops_ray_ports": {
        "gcs": 6379,
        "dashboard": 8265,
        "node_manager": 6380,
        "object_manager": 6381,
        "runtime_env_agent": 6382,
        "dashboard_agent_grpc": 6383,
        "dashboard_agent_http": 6384,
        "metrics_export": 6385,
        "worker_ports": "10002-10100",
    },
}


def _render(work, role, template):
    """One ansible-playbook run per stage: the serve stage's play does not see ray_cluster's defaults."""
    hosts = {}
    for case, state_dir in CASES.items():
        values = dict(NODE, ansible_python_interpreter=sys.executable)
        if state_dir:
            values["ray_cluster_state_dir"] = state_dir
        hosts[case] = values
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    inventory = {
        "all": {
            "vars": defaults,
            "children": {"head": {"hosts": {case: {} for case in CASES}}, "cases": {"hosts": hosts}},
        }
    }
    (work / f"{role.name}.yml").write_text(json.dumps(inventory))
    (work / f"render-{role.name}.yml").write_text(PLAYBOOK.format(role=role, template=template))
    run = subprocess.run(
        [
            str(ANSIBLE_PLAYBOOK),
            "-i",
            str(work / f"{role.name}.yml"),
            str(work / f"render-{role.name}.yml"),
            "-e",
            f"out_dir={work}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={
            "PATH": f"{ANSIBLE_PLAYBOOK.parent}:/usr/sbin:/usr/bin:/sbin:/bin",
            "ANSIBLE_NOCOLOR": "1",
            "HOME": str(work),
        },
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    work = tmp_path_factory.mktemp("state_dir")
    _render(work, RAY, "ray.service.j2")
    _render(work, SERVE, "vllm.service.j2")
    return work


def _mounts(unit):
    return dict(re.findall(r"-v (\S+):(/tmp/ray|/root/\.cache) ", unit))


@pytest.mark.parametrize("case", sorted(CASES))
def test_ray_and_serve_mount_the_same_state_dir(rendered, case):
    state_dir = CASES[case] or "/var/lib/sparkops/lab"
    ray = (rendered / f"{case}-ray.service.j2").read_text()
    serve = (rendered / f"{case}-vllm.service.j2").read_text()
    expected = {f"{state_dir}/ray": "/tmp/ray", f"{state_dir}/cache": "/root/.cache"}
    assert _mounts(ray) == expected
    assert _mounts(serve) == expected


@pytest.mark.parametrize("case", sorted(CASES))
def test_serve_waits_for_the_raylet_socket_in_that_state_dir(rendered, case):
    state_dir = CASES[case] or "/var/lib/sparkops/lab"
    serve = (rendered / f"{case}-vllm.service.j2").read_text()
    wait = next(
        line for line in serve.splitlines() if line.startswith("ExecStartPre=/bin/bash") and "raylet" in line
    )
    assert (
        f'[ -S "{state_dir}/ray/$(basename "$(readlink {state_dir}/ray/session_latest)")/sockets/raylet" ]'
        in wait
    )
    if CASES[case]:
        assert "/var/lib/sparkops" not in serve


def test_the_moved_case_really_moves_it():
    # Guards the table: the two cases must name different directories.
    assert CASES["moved"] and not CASES["moved"].startswith("/var/lib/sparkops")
    assert (
        yaml.safe_load((RAY / "defaults" / "main.yml").read_text())["ray_cluster_state_dir"].count("layout")
        == 1
    )
