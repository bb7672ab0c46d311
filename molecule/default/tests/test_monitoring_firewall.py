"""The monitoring ports answer only on lo, from the ib subnet on the ib interface, and from
monitoring_allowed_sources (monitoring_restrict_ports; docs/monitoring.md, "Binding and firewall").

Prometheus and the node exporter bind the ib address, but Linux answers a packet for a local
address on any interface (the weak host model). Each node proves its chain: its peer's node
exporter answers over the ib link, and a probe network namespace on the node itself, joined
by a veth pair and outside the ib subnet, reaches the node's ib address on SSH (which listens
on every address: the path works) and not on the monitoring ports (the chain drops them).
"""

import os

import pytest
from testinfra.utils.ansible_runner import AnsibleRunner

testinfra_hosts = ["ansible://cluster"]

INVENTORY = AnsibleRunner(os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"]))
HEAD = INVENTORY.get_hosts("head")[0]
NODES = INVENTORY.get_hosts("cluster")
CLUSTER = "lab"
UNIT = f"sparkops-{CLUSTER}-monitoring-firewall"
SCRIPT = f"/etc/sparkops/{CLUSTER}/monitoring-firewall"
CHAIN = f"SPARKOPS-MON-{CLUSTER}"
# The lab's defaults (roles/monitoring/defaults/main.yml): Prometheus on the head.
NODE_EXPORTER_PORT = 9100
PROMETHEUS_PORT = 9090
# The probe's own network, outside the lab's management and ib networks.
PROBE_NET = "10.254.77"


@pytest.fixture(scope="module")
def hostvars(host):
    return host.ansible.get_variables()


@pytest.fixture(autouse=True)
def _monitoring_deployed(hostvars):
    # The scale scenario runs these tests on its own lab (molecule/scale/molecule.yml), whose
    # inventory (inventory/lab-scale) leaves the opt-in monitoring stage off and names another
    # cluster: there is no monitoring chain to prove.
    if hostvars.get("monitoring_enabled") is not True or hostvars.get("sparkops_cluster_name") != CLUSTER:
        pytest.skip("monitoring is not deployed on this inventory (monitoring_enabled is not true)")


def _ports(name):
    return [NODE_EXPORTER_PORT] + ([PROMETHEUS_PORT] if name == HEAD else [])


def _connects(host, address, port, netns=None):
    # bash's /dev/tcp: rc 0 when the connection opens; a dropped SYN ends in timeout's 124.
    prefix = f"ip netns exec {netns} " if netns else ""
    return host.run(f"{prefix}timeout 2 bash -c 'exec 3<>/dev/tcp/{address}/{port}'").rc == 0


def test_the_unit_is_active_enabled_and_required_by_the_monitoring_services(host, hostvars):
    unit = host.service(UNIT)
    assert unit.is_running
    assert unit.is_enabled
    services = ["prometheus-node-exporter"] + (
        ["prometheus"] if hostvars["inventory_hostname"] == HEAD else []
    )
    for service in services:
        requires = host.check_output(f"systemctl show -p Requires --value {service}")
        assert f"{UNIT}.service" in requires.split(), service


def test_the_chain_is_in_place_with_exactly_its_rules(host, hostvars):
    assert host.check_output(f"{SCRIPT} check").strip() == "in place"
    allowed = [
        f"-A {CHAIN} -s {source} -j RETURN" for source in hostvars.get("monitoring_allowed_sources") or []
    ]
    assert host.check_output(f"iptables -S {CHAIN}").splitlines() == [
        f"-N {CHAIN}",
        f"-A {CHAIN} -i lo -j RETURN",
        f"-A {CHAIN} -s {hostvars['sparkops_ib_subnet']} -i {hostvars['ib_interface']} -j RETURN",
        *allowed,
        f"-A {CHAIN} -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
        f"-A {CHAIN} -j DROP",
    ]
    ports = ",".join(map(str, _ports(hostvars["inventory_hostname"])))
    jumps = [
        line for line in host.check_output("iptables -S INPUT").splitlines() if line.endswith(f"-j {CHAIN}")
    ]
    assert jumps == [
        f'-A INPUT -p tcp -m multiport --dports {ports} -m comment --comment "sparkops {CLUSTER} monitoring ports"'
        f" -j {CHAIN}"
    ]


def test_the_peers_node_exporter_answers_over_the_ib_link(host, hostvars):
    peers = [peer for peer in NODES if peer != hostvars["inventory_hostname"]]
    assert peers
    for peer in peers:
        ib = INVENTORY.get_variables(peer)["ib_address"]
        assert _connects(host, ib, NODE_EXPORTER_PORT), f"{peer}'s node exporter does not answer on {ib}"


def test_the_monitoring_ports_drop_what_arrives_from_elsewhere(host, hostvars):
    """A source outside the ib subnet, on another interface, reaches SSH on the ib address but not these ports."""
    name, ib = hostvars["inventory_hostname"], hostvars["ib_address"]
    netns, veth = "sparkops-probe", "sp-probe"
    setup = (
        f"ip netns add {netns} && ip link add {veth}0 type veth peer name {veth}1 && "
        f"ip link set {veth}1 netns {netns} && ip addr add {PROBE_NET}.1/30 dev {veth}0 && ip link set {veth}0 up && "
        f"ip -n {netns} addr add {PROBE_NET}.2/30 dev {veth}1 && ip -n {netns} link set {veth}1 up && "
        f"ip -n {netns} link set lo up && ip -n {netns} route add default via {PROBE_NET}.1"
    )
    try:
        created = host.run(setup)
        assert created.rc == 0, created.stderr
        assert _connects(host, ib, 22, netns), (
            "the probe cannot reach SSH on the ib address: the probe is broken"
        )
        for port in _ports(name):
            assert not _connects(host, ib, port, netns), (
                f"{name}:{port} answers a source outside the ib subnet"
            )
    finally:
        host.run(f"ip link del {veth}0; ip netns del {netns}")
