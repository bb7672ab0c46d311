"""`sparkops fabric` against the lab (docs/rdma.md, "Fabric qualification"; docs/lab.md).

The lab has no RDMA device and no torch in its image: the report must say, per node,
that RDMA was not tested and why (a warning, fabric_check_require_rdma is false in the
lab), and the all-reduce is the smoke test's tcp backend, a real TCP all-reduce between
the two nodes whose every socket end must be an ib address of the inventory. The CLI
is run as `python -m sparkops_cli` from this checkout's src/, so the branch's CLI is
the one tested whatever the console script points at.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

PROJECT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY") or Path(__file__).resolve().parents[3])
GIVEN = os.environ.get("SPARKOPS_CLI_TEST_INVENTORY")
HOSTS = Path(GIVEN) if GIVEN else PROJECT / "inventory" / "lab" / "hosts.yml"
INVENTORY = yaml.safe_load(HOSTS.read_text())
NODES = {
    name: spec
    for group in ("head", "workers")
    for name, spec in INVENTORY["cluster"]["children"][group]["hosts"].items()
}
IB = {spec["ib_address"] for spec in NODES.values()}

testinfra_hosts = [f"ansible://{name}" for name in NODES]


def fabric(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["ANSIBLE_CONFIG"] = str(PROJECT / "ansible.cfg")
    env["PYTHONPATH"] = str(PROJECT / "src")
    env.setdefault("SPARKOPS_LAB_DIR", str(PROJECT / ".lab"))
    argv = [sys.executable, "-m", "sparkops_cli", "fabric", "-i", str(HOSTS), "--json", *args]
    return subprocess.run(argv, cwd=PROJECT, env=env, capture_output=True, text=True, check=False)


def explain(run: subprocess.CompletedProcess[str]) -> str:
    return f"rc={run.returncode}\n--- stdout\n{run.stdout[-4000:]}\n--- stderr\n{run.stderr[-4000:]}"


def _report(run):
    doc = json.loads(run.stdout)
    artifacts = Path(doc["artifacts"])
    report = json.loads((artifacts / "fabric.json").read_text())
    assert doc["report"] == report
    return doc, report, (artifacts / "fabric.md").read_text()


@functools.cache
def _passing_runs():
    """The check run and rerun in check mode, once for the module (testinfra runs each test per node)."""
    return tuple(fabric(*args) for args in ((), ("--check",)))


def test_fabric_check_passes_over_tcp_between_the_ib_addresses_and_changes_nothing(host):
    for run in _passing_runs():
        # 0: every task ok and nothing changed; a rerun is the same.
        assert run.returncode == 0, explain(run)
        doc, report, markdown = _report(run)
        assert doc["outcome"] == "ok" and all(h["changed"] == 0 for h in doc["hosts"].values()), doc["hosts"]
        assert report["passed"] is True
        allreduce = report["allreduce"]
        assert (allreduce["backend"], allreduce["world_size"], allreduce["correct"]) == (
            "tcp",
            len(NODES),
            True,
        )
        assert allreduce["busbw_gbps"] > 0
        # Both ends of every rank's socket are ib addresses: the traffic ran on the ib network.
        sockets = allreduce["sockets"]
        assert len(sockets) == 2 * (len(NODES) - 1)
        assert {s["local"] for s in sockets} | {s["peer"] for s in sockets} == IB, sockets
        # No real RDMA device in the lab: each node is a finding with its reason, not a pass.
        assert report["rdma"] == []
        found = {(f["host"], f["code"], f["severity"]) for f in report["findings"]}
        assert found == {(name, "rdma_not_tested", "warning") for name in NODES}, report["findings"]
        # The lab's ConnectX-7 is simulated (docs/lab.md): listed, but no verbs to measure.
        assert all("are simulated" in n["rdma_reason"] for n in report["nodes"])
        assert markdown.startswith("# Fabric check: passed\n")
        assert "| tcp | 2 | 1048576 | TCP between ib addresses |" in markdown
    # The temporary files and the rank's container are gone from the node.
    assert host.run("ls -d /tmp/sparkops-fabric-* 2>/dev/null").stdout == ""
    assert host.run("docker ps -aq --filter name=fabric-check").stdout.strip() == ""


def test_fabric_check_fails_below_its_threshold():
    run = fabric("-e", "fabric_check_allreduce_min_busbw_gbps=100000")
    assert run.returncode == 1, explain(run)
    doc, report, markdown = _report(run)
    assert doc["outcome"] == "failed" and report["passed"] is False
    problems = [f["message"] for f in report["findings"] if f["severity"] == "error"]
    assert len(problems) == 1 and "is below 100000.0 GB/s" in problems[0], problems
    assert markdown.startswith("# Fabric check: FAILED\n")
