"""Ray's ports answer on the ib network and localhost only (ray_cluster_restrict_ports).

Ray 2.60 listens on 0.0.0.0 for GCS, the raylet and the object manager; the
ray_cluster role's firewall unit drops those ports on every interface but lo
and ib_interface. Each node probes its peers' ports on both of their addresses.
"""

import os
import re

import pytest
from testinfra.utils.ansible_runner import AnsibleRunner

testinfra_hosts = ["ansible://cluster"]

INVENTORY = AnsibleRunner(os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"]))
HEAD = INVENTORY.get_hosts("head")[0]
NODES = INVENTORY.get_hosts("cluster")
CLUSTER = "lab"
FIREWALL_UNIT = f"sparkops-{CLUSTER}-ray-firewall"
# A representative set of Ray's ports: GCS (the head's), and every node's
# raylet (node manager and object manager).
PORT_PATTERNS = {
    "gcs": r"(?:--port=|--address=[^\s:]+:)(\d+)\b",
    "node_manager": r"--node-manager-port=(\d+)\b",
    "object_manager": r"--object-manager-port=(\d+)\b",
}


def _addresses(name):
    hostvars = INVENTORY.get_variables(name)
    return hostvars["ansible_host"], hostvars["ib_address"]


def _ray_unit(name):
    return f"sparkops-{CLUSTER}-ray-{'head' if name == HEAD else 'worker'}"


def _ray_ports(host, name):
    """The cluster's pinned Ray ports, read from the Ray unit systemd loaded on this node."""
    unit = host.check_output(f"systemctl cat {_ray_unit(name)}")
    ports = {}
    for key, pattern in PORT_PATTERNS.items():
        found = re.search(pattern, unit)
        assert found, f"{_ray_unit(name)} pins no {key} port"
        ports[key] = int(found.group(1))
    return ports


def _connects(host, address, port):
    # bash's /dev/tcp: rc 0 when the connection opens; a dropped SYN ends in
    # timeout's 124, a closed port in 1.
    return host.run(f"timeout 2 bash -c 'exec 3<>/dev/tcp/{address}/{port}'").rc == 0


@pytest.fixture(scope="module")
def name(host):
    return host.ansible.get_variables()["inventory_hostname"]


def test_firewall_unit_active_enabled_and_required_by_ray(host, name):
    unit = host.service(FIREWALL_UNIT)
    assert unit.is_running
    assert unit.is_enabled
    requires = host.check_output(f"systemctl show -p Requires --value {_ray_unit(name)}")
    assert f"{FIREWALL_UNIT}.service" in requires.split()


def test_firewall_chain_is_in_place(host):
    out = host.check_output(f"/etc/sparkops/{CLUSTER}/ray-firewall check")
    assert out.strip() == "in place"
    rules = host.check_output("iptables -S INPUT")
    assert re.search(r"-m multiport --dports \S*6379\S* .*-j SPARKOPS-RAY-lab$", rules, re.M), rules


def test_ray_still_listens_on_all_interfaces(host, name):
    """What the firewall is for: Ray 2.60 binds 0.0.0.0 (docs/ray-binding.md)."""
    listening = host.check_output("ss -Hltn")
    ports = _ray_ports(host, name)
    if name != HEAD:
        del ports["gcs"]
    for key, port in ports.items():
        assert re.search(rf"\s(0\.0\.0\.0|{re.escape(_addresses(name)[1])}):{port}\s", listening), key


def test_peers_ray_ports_answer_on_ib_only(host, name):
    """From this node, every peer's Ray ports open on its ib address and not on its management address."""
    ports = _ray_ports(host, name)
    peers = [peer for peer in NODES if peer != name]
    assert peers
    for peer in peers:
        mgmt, ib = _addresses(peer)
        for key, port in ports.items():
            if key == "gcs" and peer != HEAD:
                continue
            assert _connects(host, ib, port), f"{peer} {key} {ib}:{port} does not answer on the ib network"
            assert not _connects(host, mgmt, port), (
                f"{peer} {key} {mgmt}:{port} answers on the management network"
            )


def test_head_gcs_from_the_worker(host, name):
    if name == HEAD:
        pytest.skip("probed from the workers")
    mgmt, ib = _addresses(HEAD)
    gcs = _ray_ports(host, name)["gcs"]
    assert _connects(host, ib, gcs)
    assert not _connects(host, mgmt, gcs)


def test_vllm_api_stays_reachable_on_the_management_network(host, name):
    if name == HEAD:
        pytest.skip("probed from the workers")
    mgmt, _ib = _addresses(HEAD)
    code = host.check_output(
        f"curl -s -o /dev/null -w '%{{http_code}}' --max-time 10 http://{mgmt}:8000/health"
    )
    assert code == "200"
