"""The roce_network role's netplan file: golden renders, each accepted by `netplan generate`.

One ansible-playbook run renders the role's own template with its defaults and
vars for every case (one local host per case), so the prefix and renderer
logic of vars/main.yml is exercised as in a deploy. netplan.io must be
installed (.ci/run installs it): this test fails rather than skip without it.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import FIXTURES, ROOT

ROLE = ROOT / "roles" / "roce_network"
GOLDEN = FIXTURES / "netplan"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"

CASES = {
    "networkd_24_mtu9000": {
        "roce_network_netplan_renderer": "networkd",
        "sparkops_ib_subnet": "192.168.200.0/24",
        "ib_address": "192.168.200.12",
        "ib_interface": "enp1s0f1np1",
        "ib_mtu": 9000,
    },
    "networkmanager_16_mtu1500": {
        "roce_network_netplan_renderer": "NetworkManager",
        "sparkops_ib_subnet": "10.20.0.0/16",
        "ib_address": "10.20.3.4",
        "ib_interface": "enP2p1s0f1np1",
        "ib_mtu": 1500,
    },
    "auto_networkmanager_active": {
        "roce_network_netplan_renderer": "auto",
        "__roce_network_nm": {"stdout": "active", "rc": 0},
        "sparkops_ib_subnet": "192.168.200.0/24",
        "ib_address": "192.168.200.13",
        "ib_interface": "enp1s0f1np1",
        "ib_mtu": 9000,
    },
    "networkd_twin_addressed": {
        "roce_network_netplan_renderer": "networkd",
        "sparkops_ib_subnet": "192.168.200.0/24",
        "ib_address": "192.168.200.15",
        "ib_interface": "enp1s0f1np1",
        "ib_mtu": 9000,
        "roce_network_twin_subnet": "192.168.201.0/24",
        "roce_network_twin_address": "192.168.201.15",
    },
    "auto_networkd_ib_prefix_16": {
        "roce_network_netplan_renderer": "auto",
        "__roce_network_nm": {"stdout": "inactive", "rc": 3},
        "sparkops_ib_subnet": "192.168.200.0/24",
        "ib_prefix": 16,
        "ib_address": "192.168.200.14",
        "ib_interface": "enp1s0f0np0",
        "ib_mtu": 9000,
    },
}

PLAYBOOK = """
- name: Render the roce_network netplan template for every case
  hosts: cases
  gather_facts: false
  # The role's defaults are the inventory's group `all` (below the hosts'
  # values, as role defaults are); its vars/ rank above, as role vars do.
  vars_files:
    - {role}/vars/main.yml
  tasks:
    - name: Render
      ansible.builtin.template:
        src: {role}/templates/60-sparkops-roce.yaml.j2
        dest: "{{{{ out_dir }}}}/{{{{ inventory_hostname }}}}.yaml"
        mode: "0600"
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    work = tmp_path_factory.mktemp("netplan")
    hosts = {
        name: dict(values, ansible_connection="local", ansible_python_interpreter=sys.executable)
        for name, values in CASES.items()
    }
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    inventory = {"all": {"vars": defaults, "children": {"cases": {"hosts": hosts}}}}
    (work / "inventory.yml").write_text(json.dumps(inventory))
    (work / "render.yml").write_text(PLAYBOOK.format(role=ROLE))
    out = work / "out"
    out.mkdir()
    run = subprocess.run(
        [
            str(ANSIBLE_PLAYBOOK),
            "-i",
            str(work / "inventory.yml"),
            str(work / "render.yml"),
            "-e",
            f"out_dir={out}",
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
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_render_matches_golden(rendered, case):
    assert (rendered / f"{case}.yaml").read_text() == (GOLDEN / f"{case}.yaml").read_text()


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_is_what_the_case_asks(case):
    values = CASES[case]
    doc = yaml.safe_load((GOLDEN / f"{case}.yaml").read_text())["network"]
    link = doc["ethernets"][values["ib_interface"]]
    prefix = values.get("ib_prefix") or int(values["sparkops_ib_subnet"].split("/")[1])
    assert link["addresses"] == [f"{values['ib_address']}/{prefix}"]
    assert link["mtu"] == values["ib_mtu"]
    want = values["roce_network_netplan_renderer"]
    if want == "auto":
        want = "NetworkManager" if values["__roce_network_nm"]["stdout"] == "active" else "networkd"
    assert doc["renderer"] == want


@pytest.mark.parametrize("case", sorted(CASES))
def test_netplan_generate_accepts_it(tmp_path, case):
    netplan = shutil.which("netplan", path="/usr/sbin:/usr/bin:/sbin:/bin")
    assert netplan, (
        "netplan is not installed: apt-get install netplan.io (scripts/setup and .ci/run install it)"
    )
    values = CASES[case]
    conf = tmp_path / "etc" / "netplan"
    conf.mkdir(parents=True)
    target = conf / "60-sparkops-roce.yaml"
    shutil.copy(GOLDEN / f"{case}.yaml", target)
    target.chmod(0o600)
    run = subprocess.run(
        [netplan, "generate", "--root-dir", str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    iface, mtu = values["ib_interface"], values["ib_mtu"]
    if "NetworkManager" in target.read_text():
        keyfile = next((tmp_path / "run" / "NetworkManager" / "system-connections").glob(f"*{iface}*"))
        text = keyfile.read_text()
        assert f"mtu={mtu}" in text and values["ib_address"] in text
    else:
        unit = (tmp_path / "run" / "systemd" / "network" / f"10-netplan-{iface}.network").read_text()
        assert f"Address={values['ib_address']}/" in unit
        link = (tmp_path / "run" / "systemd" / "network" / f"10-netplan-{iface}.link").read_text()
        assert f"MTUBytes={mtu}" in link
    if values.get("roce_network_twin_subnet"):
        # The twin netdev has its own address and the cabled port's MTU (networkd case).
        unit = (tmp_path / "run" / "systemd" / "network" / "10-netplan-enP2p1s0f1np1.network").read_text()
        assert f"Address={values['roce_network_twin_address']}/24" in unit
        link = (tmp_path / "run" / "systemd" / "network" / "10-netplan-enP2p1s0f1np1.link").read_text()
        assert f"MTUBytes={mtu}" in link
