"""The roce_network_faults scenario's filter over the RoCE stage's ping probe lines."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "playbook_json"


def _load(name):
    spec = importlib.util.spec_from_file_location(
        name, ROOT / "molecule" / "shared" / "filter_plugins" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


faults = _load("roce_network_faults")
playbook_run = _load("playbook_run")

PING = "Reachability | Ping every peer over ib_interface with don't-fragment at full size, in parallel"


def test_a_real_probe_of_the_deployed_lab_reaches_the_head_at_full_size():
    run = playbook_run.playbook_run((FIXTURES / "deploy_roce_network_rerun.json").read_text(), 0)
    probes = faults.roce_probes(run["results"][PING]["spark-2"]["stdout_lines"])
    assert list(probes) == ["spark-1"]
    assert probes["spark-1"]["address"] == "192.168.200.12"
    assert (probes["spark-1"]["full_rc"], probes["spark-1"]["small_rc"]) == (0, -1)
    assert probes["spark-1"]["said"].startswith("--- 192.168.200.12 ping statistics ---")


def test_a_path_mtu_below_ib_mtu_fails_at_full_size_and_passes_small():
    line = (
        "spark-1 192.168.200.12 1 0 ping: local error: message too long, mtu=1500 "
        "--- 192.168.200.12 ping statistics --- 1 packets transmitted, 0 received, +1 errors, 100% packet loss"
    )
    probe = faults.roce_probes([line])["spark-1"]
    assert (probe["full_rc"], probe["small_rc"]) == (1, 0)
    assert "mtu=1500" in probe["said"]


def test_an_unreachable_peer_and_lines_that_are_not_probes():
    probes = faults.roce_probes(["spark-3 192.168.200.14 1 1", "", "warning: something", "a b c d"])
    assert probes == {"spark-3": {"address": "192.168.200.14", "full_rc": 1, "small_rc": 1, "said": ""}}
    assert faults.roce_probes(None) == {}


def test_the_filter_is_registered():
    assert faults.FilterModule().filters() == {"roce_probes": faults.roce_probes}
    assert json.dumps(faults.roce_probes(["x 1.2.3.4 0 -1 ok"]))
