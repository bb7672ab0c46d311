"""Other /etc/netplan files of ib_interface (module_utils/_netplan.py), on real files and on netplan itself.

The merge rule the module follows ("lexicographically later files amend (new mapping keys) or
override (same mapping keys) previous ones", netplan(5)) is checked against `netplan generate`
(netplan.io 0.106, Debian 12; .ci/run installs it, as for test_roce_netplan.py): the test fails
rather than skip without it.
"""

import base64
import json
import shutil
import subprocess

import pytest
from ansible_collections.sparkops.vllm.plugins.filter.network import FilterModule
from ansible_collections.sparkops.vllm.plugins.module_utils import _netplan
from conftest import FIXTURES

OTHER = FIXTURES / "netplan" / "other"
OWN = "/etc/netplan/60-sparkops-roce.yaml"
IF, ADDRESS = "enp1s0f1np1", "192.168.200.12"
FILTERS = FilterModule().filters()


def _source(name):
    # The stage's own file is the golden render of test_roce_netplan.py.
    return (
        FIXTURES
        / "netplan"
        / ("networkd_24_mtu9000.yaml" if name == "60-sparkops-roce.yaml" else f"other/{name}")
    )


def _files(*names):
    return {f"/etc/netplan/{name}": _source(name).read_text() for name in names}


def test_nvidias_connect_two_sparks_file_is_an_error_for_its_ipv4_link_local():
    found = _netplan.conflicts(_files("40-cx7.yaml"), IF, ADDRESS, OWN)
    assert found["warnings"] == []
    [error] = found["errors"]
    assert error.startswith(
        "/etc/netplan/40-cx7.yaml configures enp1s0f1np1 (as ethernets.enp1s0f1np1: link-local); it adds "
        "link-local: [ipv4] (a 169.254 address) beside ib_address 192.168.200.12"
    )
    assert "Fix: remove enp1s0f1np1 from /etc/netplan/40-cx7.yaml" in error
    # Its other port is not ib_interface: nothing about it.
    assert [d["id"] for d in found["definitions"]] == ["enp1s0f1np1"]


def test_a_later_file_is_an_error_whatever_it_sets():
    [error] = _netplan.conflicts(_files("70-operator.yaml"), IF, ADDRESS, OWN)["errors"]
    assert "it sorts after 60-sparkops-roce.yaml, so netplan takes its keys over the stage's" in error
    assert "(as ethernets.enp1s0f1np1: mtu)" in error


def test_the_installers_file_of_the_management_port_is_no_concern():
    found = _netplan.conflicts(_files("50-cloud-init.yaml", "60-sparkops-roce.yaml"), IF, ADDRESS, OWN)
    assert found == {"errors": [], "warnings": [], "definitions": []}
    # The same file seen for the management port itself: matched by set-name and the MAC.
    mgmt = _netplan.conflicts(_files("50-cloud-init.yaml"), "enP7s7", "10.0.0.5", OWN, "4c:bb:47:2c:1e:05")
    assert "it adds dhcp4: true beside ib_address 10.0.0.5" in mgmt["errors"][0]


@pytest.mark.parametrize(
    ("definition", "outcome"),
    [
        # An earlier file setting only keys the stage's file sets too: ours override it.
        ({"mtu": 1500}, "warning"),
        ({"addresses": ["192.168.200.12/24"]}, "warning"),
        ({"addresses": ["192.168.200.99/24"]}, "error"),
        ({"addresses": [{"10.9.0.1/24": {"label": "x"}}]}, "error"),
        ({"dhcp4": True}, "error"),
        ({"link-local": ["ipv6"]}, "warning"),
        ({"link-local": ["ipv4", "ipv6"]}, "error"),
        ({"match": {"name": "enp1s0f*"}, "link-local": ["ipv4"]}, "error"),
        ({"match": {"name": "enP2p*"}, "link-local": ["ipv4"]}, None),
        ({"match": {"macaddress": "aa:bb:cc:dd:ee:ff"}, "dhcp4": True}, None),
        ({"match": {}, "dhcp4": True}, "error"),
    ],
)
def test_the_rule_per_definition(definition, outcome):
    key = IF if "match" not in definition else "anyport"
    text = json.dumps({"network": {"version": 2, "ethernets": {key: definition}}})
    found = _netplan.conflicts({"/etc/netplan/40-x.yaml": text}, IF, ADDRESS, OWN, "00:11:22:33:44:55")
    got = "error" if found["errors"] else "warning" if found["warnings"] else None
    assert got == outcome


def test_verify_mode_has_no_own_file_so_only_ipv4_additions_are_errors():
    found = _netplan.conflicts(_files("70-operator.yaml", "40-cx7.yaml"), IF, ADDRESS, None)
    assert len(found["errors"]) == 1 and "40-cx7.yaml" in found["errors"][0]
    assert found["warnings"] == [
        "/etc/netplan/70-operator.yaml configures enp1s0f1np1 (as ethernets.enp1s0f1np1: mtu); the stage writes "
        "no file, and it sets nothing IPv4 beside ib_address."
    ]


def test_a_broken_file_is_an_error():
    [error] = _netplan.conflicts({"/etc/netplan/10-bad.yaml": "network: [\n"}, IF, ADDRESS, OWN)["errors"]
    assert error.startswith("/etc/netplan/10-bad.yaml is not YAML (")
    assert "netplan refuses to apply any file while one is broken" in error


def test_the_filter_takes_looped_slurp_results():
    results = [
        {
            "source": "/etc/netplan/40-cx7.yaml",
            "content": base64.b64encode((OTHER / "40-cx7.yaml").read_bytes()).decode(),
        },
        {"source": OWN, "content": base64.b64encode(b"network: {version: 2}").decode()},
    ]
    found = FILTERS["netplan_conflicts"](results, IF, ADDRESS, OWN)
    assert len(found["errors"]) == 1


def _generate(tmp_path, names):
    etc = tmp_path / "etc" / "netplan"
    etc.mkdir(parents=True)
    for name in names:
        (etc / name).write_text(_source(name).read_text())
        (etc / name).chmod(0o600)
    netplan = shutil.which("netplan") or "/usr/sbin/netplan"
    subprocess.run([netplan, "generate", "--root-dir", str(tmp_path)], check=True, capture_output=True)
    return (tmp_path / "run" / "systemd" / "network" / f"10-netplan-{IF}.network").read_text()


def test_netplan_merges_as_the_rule_says(tmp_path):
    # A later file's mtu overrides the stage's 9000 ...
    later = _generate(tmp_path / "later", ["60-sparkops-roce.yaml", "70-operator.yaml"])
    assert "MTUBytes=1500" in later and "Address=192.168.200.12/24" in later
    # ... and an earlier file's link-local, a key the stage's file does not set, stays.
    earlier = _generate(tmp_path / "earlier", ["40-cx7.yaml", "60-sparkops-roce.yaml"])
    assert "LinkLocalAddressing=ipv4" in earlier and "MTUBytes=9000" in earlier
    alone = _generate(tmp_path / "alone", ["60-sparkops-roce.yaml"])
    assert "LinkLocalAddressing=ipv6" in alone


LINKS = [
    {"ifname": "lo", "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
    {"ifname": "enP7s7", "addr_info": [{"family": "inet", "local": "10.0.0.5", "prefixlen": 24}]},
    {"ifname": IF, "addr_info": [{"family": "inet", "local": ADDRESS, "prefixlen": 24}]},
]
ROUTES = [{"dst": "default", "gateway": "10.0.0.1", "dev": "enP7s7", "protocol": "dhcp", "flags": []}]


def test_the_management_interface_is_refused_by_route_and_by_address():
    assert _netplan.management_problems(LINKS, ROUTES, IF, ["10.0.0.5"]) == []
    assert _netplan.management_problems(LINKS, ROUTES, "enP7s7", []) == [
        "enP7s7 carries the default route (via 10.0.0.1)"
    ]
    assert FILTERS["netplan_management_problems"](LINKS, [], IF, [ADDRESS, None]) == [
        f"{IF} holds {ADDRESS}, the address the controller connects to"
    ]
