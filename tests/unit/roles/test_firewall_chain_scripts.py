"""The firewall chains of Ray's and the monitoring ports, rendered as the stages render them.

ray_cluster and monitoring both call roles/firewall_chain (``present``) with their own chain,
ports and accepts; one ansible-playbook run renders its script and unit with the inputs each
role's tasks/firewall.yml passes (read from that file), against the lab's inventory, with
``monitoring_allowed_sources`` set. The rules are asserted line by line: the monitoring chain
lets its ports in on lo, from the ib subnet on the ib interface and from the allowed sources,
and drops the rest, for exactly Prometheus's port on its node and the node exporter's on every
node; Ray's chain is the one it was before the script became shared.

``tests/fixtures/firewall_chain/iptables-save.txt`` is the real ``iptables-save`` of a network
namespace where the rendered monitoring and Ray scripts ran (iptables 1.8.9, nf_tables): the
chains the kernel holds must print exactly as the scripts' ``check`` expects, and the preflight's
reading of it (``_roce.firewall_blocks``, what ``roce_firewall_info`` does) must find the ib
subnet let in and another network dropped.
"""

import shutil
import subprocess

import pytest
import yaml
from ansible_collections.sparkops.vllm.plugins.module_utils import _roce
from conftest import FIXTURES, ROOT, run_local_playbook

TEMPLATES = ROOT / "roles" / "firewall_chain" / "templates"
CAPTURE = FIXTURES / "firewall_chain" / "iptables-save.txt"
ALLOWED = ["10.20.0.0/16", "172.29.10.99/32"]
# roles/roce_network's defaults: the lab's pinned Ray ports.
RAY_PORTS = yaml.safe_load((ROOT / "roles" / "roce_network" / "defaults" / "main.yml").read_text())[
    "roce_network_ray_ports"
]
ROLES = ("monitoring", "ray_cluster")


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
    extra = {
        "out_dir": str(out),
        "sparkops_ray_ports": RAY_PORTS,
        "sparkops_serve_endpoint": {"host": "0.0.0.0", "port": 8000},
        "monitoring_allowed_sources": ALLOWED,
    }
    run_local_playbook(playbook, extra)
    return out


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


def _value(script, name):
    return next(line.split("=", 1)[1] for line in script.splitlines() if line.startswith(f"{name}="))


def _unit(text, key):
    return next(line.split("=", 1)[1] for line in text.splitlines() if line.startswith(f"{key}="))


MONITORING_RULES = [
    "-N SPARKOPS-MON-lab",
    "-A SPARKOPS-MON-lab -i lo -j RETURN",
    "-A SPARKOPS-MON-lab -s 192.168.200.0/24 -i enp1s0f1np1 -j RETURN",
    "-A SPARKOPS-MON-lab -s 10.20.0.0/16 -j RETURN",
    "-A SPARKOPS-MON-lab -s 172.29.10.99/32 -j RETURN",
    "-A SPARKOPS-MON-lab -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
    "-A SPARKOPS-MON-lab -j DROP",
]
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
def test_the_monitoring_chain_lets_in_the_ib_subnet_and_the_allowed_sources_and_drops_the_rest(
    rendered, host
):
    script = (rendered / f"{host}-monitoring.sh").read_text()
    assert _value(script, "CHAIN") == "SPARKOPS-MON-lab"
    assert _value(script, "COMMENT") == '"sparkops lab monitoring ports"'
    assert _heredoc(script) == MONITORING_RULES
    # build() appends the same rules, in the same order
    assert _build(script) == [f'ipt -A "$CHAIN" {line.split(" ", 2)[2]}' for line in MONITORING_RULES[1:]]


def test_the_monitoring_chain_guards_exactly_the_ports_of_each_node(rendered):
    # Prometheus runs on the head (spark-1): its port only there; the node exporter's everywhere.
    assert _value((rendered / "spark-1-monitoring.sh").read_text(), "PORTS") == "9100,9090"
    assert _value((rendered / "spark-2-monitoring.sh").read_text(), "PORTS") == "9100"


def test_the_monitoring_unit_runs_before_the_services_it_guards_and_they_require_it(rendered):
    head = (rendered / "spark-1-monitoring.service").read_text()
    worker = (rendered / "spark-2-monitoring.service").read_text()
    assert _unit(head, "RequiredBy") == "prometheus-node-exporter.service prometheus.service"
    assert _unit(head, "Before") == _unit(head, "RequiredBy")
    assert _unit(worker, "RequiredBy") == "prometheus-node-exporter.service"
    assert _unit(worker, "ExecStart") == "/etc/sparkops/lab/monitoring-firewall start"
    assert _unit(worker, "ExecReload") == "/etc/sparkops/lab/monitoring-firewall reload"
    assert _unit(worker, "ExecStop") == "/etc/sparkops/lab/monitoring-firewall stop"
    assert "Type=oneshot" in worker and "RemainAfterExit=yes" in worker


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


@pytest.mark.parametrize("name", [f"{host}-{role}.sh" for host in ("spark-1", "spark-2") for role in ROLES])
def test_the_scripts_are_bash(rendered, name):
    result = subprocess.run(["bash", "-n", str(rendered / name)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


# -- the real chain, and the preflight's reading of it ------------------------------


def _capture():
    return CAPTURE.read_text()


def test_the_kernel_prints_the_chains_as_the_scripts_expect():
    chains = {
        chain: [line for line in _capture().splitlines() if line.startswith(f"-A {chain} ")]
        for chain in ("SPARKOPS-MON-lab", "SPARKOPS-RAY-lab")
    }
    assert chains["SPARKOPS-MON-lab"] == MONITORING_RULES[1:]
    assert chains["SPARKOPS-RAY-lab"] == RAY_RULES[1:]
    jumps = [line for line in _capture().splitlines() if line.startswith("-A INPUT ")]
    assert jumps == [
        f'-A INPUT -p tcp -m multiport --dports {RAY_PORTS_MULTIPORT} -m comment --comment "sparkops lab ray ports"'
        " -j SPARKOPS-RAY-lab",
        '-A INPUT -p tcp -m multiport --dports 9100,9090 -m comment --comment "sparkops lab monitoring ports"'
        " -j SPARKOPS-MON-lab",
    ]


MONITORING_SERVICES = [
    {"name": "monitoring_node_exporter", "proto": "tcp", "ports": [(9100, 9100)]},
    {"name": "monitoring_prometheus", "proto": "tcp", "ports": [(9090, 9090)]},
]


@pytest.mark.parametrize(
    ("source", "interface", "blocked"),
    [
        # the monitoring stage's preflight: the ib subnet on the ib interface
        ("192.168.200.0/24", "enp1s0f1np1", False),
        # an allowed source, on the management interface
        ("172.29.10.99/32", "eth0", False),
        ("10.20.30.0/24", "eth0", False),
        # the management network, and the ib subnet arriving on another interface
        ("172.29.10.0/24", "eth0", True),
        ("192.168.200.0/24", "eth0", True),
    ],
)
def test_the_preflight_reads_the_chain(source, interface, blocked):
    found = _roce.firewall_blocks(MONITORING_SERVICES, source, interface, iptables_save=_capture())
    assert found["source"] == "iptables"
    drops = {(b["service"], b["rule"]) for b in found["blocks"]}
    if blocked:
        assert drops == {(s["name"], "-A SPARKOPS-MON-lab -j DROP") for s in MONITORING_SERVICES}
    else:
        assert drops == set()


# -- the rendered script against a real iptables, where this runs as root -----------


def _netns_available():
    if shutil.which("unshare") is None or shutil.which("iptables") is None:
        return False
    probe = subprocess.run(["unshare", "-n", "iptables", "-w", "5", "-S"], capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.skipif(
    not _netns_available(), reason="needs root, unshare and iptables (a private network namespace)"
)
@pytest.mark.parametrize(("role", "rules"), [("monitoring", MONITORING_RULES), ("ray_cluster", RAY_RULES)])
def test_the_script_builds_checks_rebuilds_and_removes_its_chain(rendered, role, rules):
    script = rendered / f"spark-1-{role}.sh"
    chain = rules[0].split()[1]
    steps = f"""
    set -e
    {script} check && exit 11 || true
    {script} start
    {script} check
    [ "$(iptables -S {chain})" = "{chr(10).join(rules)}" ]
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
