"""Ray's firewall chain, rendered as the stage renders it from roles/firewall_chain.

ray_cluster calls roles/firewall_chain (``present``) with its chain, ports and accepts; one
ansible-playbook run renders the script and unit with the inputs ray_cluster's
tasks/firewall.yml passes (read from that file), against the lab's inventory. The chain is
the one it was before the script became shared: the same rules, ports and comment.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
TEMPLATES = ROOT / "roles" / "firewall_chain" / "templates"
# roles/roce_network's defaults: the lab's pinned Ray ports.
RAY_PORTS = yaml.safe_load((ROOT / "roles" / "roce_network" / "defaults" / "main.yml").read_text())[
    "roce_network_ray_ports"
]
ROLES = ("ray_cluster",)


def _present_vars(role):
    """The vars the role's tasks/firewall.yml passes to firewall_chain's present entry point."""
    for task in yaml.safe_load((ROOT / "roles" / role / "tasks" / "firewall.yml").read_text()):
        include = task.get("ansible.builtin.include_role") or {}
        if include.get("name") == "sparkops.vllm.firewall_chain" and include.get("tasks_from") == "present":
            return task["vars"]
    raise AssertionError(f"roles/{role}/tasks/firewall.yml does not call firewall_chain's present")


def _play(role):
    return {
        "name": f"Render {role}'s chain as the stage does",
        "hosts": "cluster",
        "gather_facts": False,
        "connection": "local",
        "vars_files": [
            str(ROOT / "roles" / role / "defaults" / "main.yml"),
            str(ROOT / "roles" / role / "vars" / "main.yml"),
        ],
        "tasks": [
            {
                "name": f"Render the {kind}",
                "vars": _present_vars(role),
                "ansible.builtin.template": {
                    "src": str(TEMPLATES / f"firewall-chain.{kind}.j2"),
                    "dest": f"{{{{ out_dir }}}}/{{{{ inventory_hostname }}}}-{role}.{kind}",
                    "mode": "0700",
                },
            }
            for kind in ("sh", "service")
        ],
    }


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = tmp_path_factory.mktemp("firewall_chain")
    playbook = out / "render.yml"
    playbook.write_text(yaml.safe_dump([_play(role) for role in ROLES], sort_keys=False))
    extra = {"out_dir": str(out), "sparkops_ray_ports": RAY_PORTS}
    result = subprocess.run(
        [
            str(ANSIBLE_PLAYBOOK),
            "-i",
            str(ROOT / "inventory" / "lab"),
            str(playbook),
            "-e",
            json.dumps(extra),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out


def _value(script, name):
    return next(line.split("=", 1)[1] for line in script.splitlines() if line.startswith(f"{name}="))


def _heredoc(script):
    """The lines of the script's rules() with $CHAIN expanded (what `iptables -S <chain>` must print)."""
    lines = script.splitlines()
    start = lines.index("  cat <<EOF") + 1
    chain = _value(script, "CHAIN")
    return [line.replace("$CHAIN", chain) for line in lines[start : lines.index("EOF", start)]]


def _build(script):
    """The `ipt -A` lines of the script's build()."""
    lines = script.splitlines()
    start = lines.index("build() {") + 1
    return [line.strip() for line in lines[start : lines.index("}", start)]]


def _unit(text, key):
    return next(line.split("=", 1)[1] for line in text.splitlines() if line.startswith(f"{key}="))


# Ray's chain as it was before the script became roles/firewall_chain's (docs/ray-binding.md).
RAY_RULES = [
    "-N SPARKOPS-RAY-lab",
    "-A SPARKOPS-RAY-lab -i lo -j RETURN",
    "-A SPARKOPS-RAY-lab -i enp1s0f1np1 -j RETURN",
    "-A SPARKOPS-RAY-lab -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
    "-A SPARKOPS-RAY-lab -j DROP",
]
RAY_PORTS_MULTIPORT = "10001,8265,6383,6384,6379,6385,6380,6381,6382,10002:10999"


@pytest.mark.parametrize("host", ["spark-1", "spark-2"])
def test_rays_chain_is_the_one_it_was(rendered, host):
    script = (rendered / f"{host}-ray_cluster.sh").read_text()
    assert _value(script, "CHAIN") == "SPARKOPS-RAY-lab"
    assert _value(script, "PORTS") == RAY_PORTS_MULTIPORT
    assert _value(script, "COMMENT") == '"sparkops lab ray ports"'
    assert _heredoc(script) == RAY_RULES
    assert _build(script) == [f'ipt -A "$CHAIN" {line.split(" ", 2)[2]}' for line in RAY_RULES[1:]]
    unit = (rendered / f"{host}-ray_cluster.service").read_text()
    ray_unit = "sparkops-lab-ray-head.service" if host == "spark-1" else "sparkops-lab-ray-worker.service"
    assert _unit(unit, "Before") == _unit(unit, "RequiredBy") == ray_unit
    assert _unit(unit, "ExecStart") == "/etc/sparkops/lab/ray-firewall start"
    assert _unit(unit, "ExecReload") == "/etc/sparkops/lab/ray-firewall reload"
    assert _unit(unit, "ExecStop") == "/etc/sparkops/lab/ray-firewall stop"


@pytest.mark.parametrize("name", [f"{host}-{role}.sh" for host in ("spark-1", "spark-2") for role in ROLES])
def test_the_scripts_are_bash(rendered, name):
    result = subprocess.run(["bash", "-n", str(rendered / name)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


# -- the rendered script against a real iptables, where this runs as root -----------


def _netns_available():
    if shutil.which("unshare") is None or shutil.which("iptables") is None:
        return False
    probe = subprocess.run(["unshare", "-n", "iptables", "-w", "5", "-S"], capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.skipif(
    not _netns_available(), reason="needs root, unshare and iptables (a private network namespace)"
)
def test_the_script_builds_checks_rebuilds_and_removes_its_chain(rendered):
    script = rendered / "spark-1-ray_cluster.sh"
    chain = "SPARKOPS-RAY-lab"
    steps = f"""
    set -e
    {script} check && exit 11 || true
    {script} start
    {script} check
    [ "$(iptables -S {chain})" = "{chr(10).join(RAY_RULES)}" ]
    {script} start
    {script} check
    [ "$(iptables -S INPUT | grep -c -- '-j {chain}')" = 1 ]
    iptables -F INPUT
    {script} check && exit 12 || true
    {script} reload
    {script} check
    iptables -D {chain} -j DROP
    {script} check && exit 13 || true
    {script} reload
    {script} check
    {script} stop
    ! iptables -S {chain} 2>/dev/null
    [ "$(iptables -S INPUT | grep -c -- SPARKOPS)" = 0 ]
    """
    result = subprocess.run(
        ["unshare", "-n", "bash", "-c", steps], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("in place") == 4
