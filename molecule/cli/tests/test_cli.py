"""The sparkops CLI against the lab: real runs of the console script, asserted on
their exit codes, the summary on stdout, the progress on stderr and the artifacts.

`host` is the worker (spark-2): one test stops its Ray unit. Every CLI run is a
subprocess on the controller, from the repository root, with the repository's
ansible.cfg (Molecule's own is not what an operator has).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest
import testinfra
import yaml

PROJECT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY") or Path(__file__).resolve().parents[3])
SPARKOPS = Path(sys.executable).parent / "sparkops"
# The lab's inventory, which the CLI uses by default (ansible.cfg). Another lab's
# hosts.yml (with group_vars/ beside it) can stand in for it, to run these tests
# by hand: SPARKOPS_CLI_TEST_INVENTORY=/tmp/mylab/hosts.yml pytest --connection=ansible
# --ansible-inventory=/tmp/mylab/hosts.yml molecule/cli/tests (SPARKOPS_LAB_DIR set).
GIVEN = os.environ.get("SPARKOPS_CLI_TEST_INVENTORY")
HOSTS = Path(GIVEN) if GIVEN else PROJECT / "inventory" / "lab" / "hosts.yml"
INVENTORY = yaml.safe_load(HOSTS.read_text())
HEAD = next(iter(INVENTORY["cluster"]["children"]["head"]["hosts"]))
WORKER = next(iter(INVENTORY["cluster"]["children"]["workers"]["hosts"]))
CLUSTER = yaml.safe_load((HOSTS.parent / "group_vars" / "all" / "cluster.yml").read_text())[
    "sparkops_cluster_name"
]
SECRET = "cli-test-s3cr3t-value"

testinfra_hosts = [f"ansible://{WORKER}"]


def sparkops(*args: str, inventory: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["ANSIBLE_CONFIG"] = str(PROJECT / "ansible.cfg")
    env.setdefault("SPARKOPS_LAB_DIR", str(PROJECT / ".lab"))
    argv = [str(SPARKOPS), *args]
    inventory = inventory or (HOSTS if GIVEN else None)
    if inventory is not None:
        argv[2:2] = ["-i", str(inventory)]
    return subprocess.run(argv, cwd=PROJECT, env=env, capture_output=True, text=True, check=False)


def artifacts_of(run: subprocess.CompletedProcess[str]) -> Path:
    found = re.findall(r"^artifacts: (\S+)$", run.stdout, re.M)
    assert found, run.stdout + run.stderr
    return Path(found[-1])


def explain(run: subprocess.CompletedProcess[str]) -> str:
    return f"rc={run.returncode}\n--- stdout\n{run.stdout[-4000:]}\n--- stderr\n{run.stderr[-4000:]}"


def test_console_script_is_installed():
    assert SPARKOPS.is_file(), "scripts/setup installs the CLI into .venv (pip install -e .)"
    helped = subprocess.run([str(SPARKOPS), "--help"], capture_output=True, text=True, check=False)
    assert helped.returncode == 0
    assert "3    unreachable" in helped.stdout


def test_status_on_the_healthy_lab_is_ok_with_table_and_artifacts():
    run = sparkops("status", "-e", f"sparkops_cli_test_token={SECRET}")
    assert run.returncode == 0, explain(run)
    # The summary table: a row per node with its counts, a row per stage.
    table = run.stdout
    assert re.search(r"^host\s+ok\s+changed\s+failed\s+unreachable\s+skipped", table, re.M), table
    for node in (HEAD, WORKER):
        row = re.search(rf"^{node}\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", table, re.M)
        assert row, table
        assert int(row.group(1)) > 0 and row.group(2, 3, 4) == ("0", "0", "0"), row.group(0)
    assert re.search(r"^stage\s+seconds\s+hosts", table, re.M), table
    assert "result: ok (exit 0)" in table
    # Progress went to stderr, stage by stage.
    assert re.search(r"^== Status", run.stderr, re.M), run.stderr
    # The artifacts: the runner's events and stdout, the status JSON, the summary.
    artifacts = artifacts_of(run)
    assert artifacts.is_relative_to(PROJECT / ".cache" / "sparkops" / "runs")
    events = sorted((artifacts / "runner" / "job_events").glob("*.json"))
    kinds = {json.loads(path.read_text())["event"] for path in events}
    assert {"playbook_on_start", "playbook_on_play_start", "runner_on_ok", "playbook_on_stats"} <= kinds
    assert "PLAY RECAP" in (artifacts / "runner" / "stdout").read_text()
    status = json.loads((artifacts / "status.json").read_text())
    assert status, "status.yml wrote an empty status.json"
    summary = json.loads((artifacts / "summary.json").read_text())
    assert summary["outcome"] == "ok"
    assert summary["report"] == status
    # The secret-looking -e value is in no artifact, and the command shows it redacted.
    assert "sparkops_cli_test_token=<redacted>" in summary["argv"]
    leaked = [
        str(path)
        for path in artifacts.rglob("*")
        if path.is_file() and SECRET in path.read_text(errors="replace")
    ]
    assert leaked == []


def test_status_json_is_one_document_on_stdout():
    run = sparkops("status", "--json")
    assert run.returncode == 0, explain(run)
    doc = json.loads(run.stdout)
    assert (doc["command"], doc["outcome"], doc["exit_code"], doc["rc"]) == ("status", "ok", 0, 0)
    assert doc["playbook"] == "playbooks/status.yml"
    assert set(doc["hosts"]) >= {HEAD, WORKER}
    assert all(stage["seconds"] is not None for stage in doc["stages"])
    assert Path(doc["artifacts"], "status.json").is_file()
    assert doc["report"] == json.loads(Path(doc["artifacts"], "status.json").read_text())
    # The progress stayed on stderr.
    assert "== Status" in run.stderr


def test_a_stopped_worker_ray_unit_fails_status_and_restart_brings_it_back(host):
    unit = f"sparkops-{CLUSTER}-ray-worker.service"
    assert host.service(unit).is_running
    host.run_expect([0], f"systemctl stop {unit}")
    try:
        failed = sparkops("status")
        assert failed.returncode == 1, explain(failed)
        assert "result: failed (exit 1)" in failed.stdout
        # status.json (kept by the CLI in the artifacts) names the worker as
        # unhealthy, with its Ray unit not running and not counted by Ray.
        report = json.loads((artifacts_of(failed) / "status.json").read_text())
        node = next(node for node in report["nodes"] if node["host"] == WORKER)
        assert (node["healthy"], node["ray_counted"]) == (False, False)
        assert node["ray_unit_state"] != "active"
        # ...and so does the progress the operator saw.
        assert any(line.strip().startswith(f"- {WORKER}: ") for line in failed.stderr.splitlines()), (
            failed.stderr
        )
    finally:
        restarted = sparkops("restart")
    assert restarted.returncode == 2, explain(restarted)
    assert "result: changed (exit 2)" in restarted.stdout
    assert host.service(unit).is_running
    healthy = sparkops("status", "--json")
    assert healthy.returncode == 0, explain(healthy)


def test_an_unreachable_worker_exits_3(tmp_path):
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    hosts = json.loads(json.dumps(INVENTORY))
    worker = hosts["cluster"]["children"]["workers"]["hosts"][WORKER]
    used = {
        str(node["ansible_host"])
        for group in hosts["cluster"]["children"].values()
        for node in group["hosts"].values()
    }
    prefix = worker["ansible_host"].rsplit(".", 1)[0]
    unused = next(f"{prefix}.{last}" for last in range(250, 200, -1) if f"{prefix}.{last}" not in used)
    worker["ansible_host"] = unused
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    shutil.copytree(HOSTS.parent / "group_vars", inventory / "group_vars", symlinks=True)
    run = sparkops("status", "--json", inventory=inventory / "hosts.yml")
    assert run.returncode == 3, explain(run)
    doc = json.loads(run.stdout)
    assert (doc["outcome"], doc["exit_code"]) == ("unreachable", 3)
    assert WORKER in {problem["host"] for problem in doc["problems"] if problem["kind"] == "unreachable"}


def _files_holding(root: Path, secret: str) -> list[str]:
    """Every file under root (and every member of a .tar.gz there) whose text holds secret, in any case."""
    found = []
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        if path.name.endswith(".tar.gz"):
            with tarfile.open(path) as bundle:
                for member in bundle.getmembers():
                    data = bundle.extractfile(member) if member.isfile() else None
                    if data is not None and secret.lower() in data.read().decode(errors="replace").lower():
                        found.append(f"{path}:{member.name}")
        elif secret.lower() in path.read_text(errors="replace").lower():
            found.append(str(path))
    return found


def test_the_lab_api_key_is_in_no_artifact_bundle_or_verbose_output():
    """The lab's real key (.lab/api_key): not in a CLI run's artifacts, its support bundle, or -vvv output."""
    key_file = Path(os.environ.get("SPARKOPS_LAB_DIR") or PROJECT / ".lab") / "api_key"
    key = key_file.read_text().strip()
    assert len(key) >= 16, f"{key_file} holds no lab key"
    # A CLI run that collects every journal and container log and packs the support bundle.
    diagnosed = sparkops("diagnose")
    artifacts = artifacts_of(diagnosed)
    bundles = list(artifacts.rglob("*.tar.gz"))
    assert bundles, "diagnose packed no support bundle into its artifacts\n" + explain(diagnosed)
    assert _files_holding(artifacts, key) == []
    # The same runbooks with -vvv, straight through ansible-playbook: every task's arguments and results.
    env = dict(os.environ, ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    env.setdefault("SPARKOPS_LAB_DIR", str(PROJECT / ".lab"))
    playbook = Path(sys.executable).parent / "ansible-playbook"
    for book in ("playbooks/status.yml", "playbooks/diagnose.yml"):
        run = subprocess.run(
            [str(playbook), "-vvv", "-i", str(HOSTS), book],
            cwd=PROJECT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert "PLAY RECAP" in run.stdout, explain(run)
        output = (run.stdout + run.stderr).lower()
        assert key.lower() not in output, f"{book} -vvv printed the lab's API key"


# --- the stand-in vLLM's ranks on the simulated GPU (issue 20) -------------------------------


def own_consumers(report: dict) -> dict[str, list[dict]]:
    return {
        node["host"]: [item for item in node["gpu_consumers"] if item["verdict"] == "own"]
        for node in report["nodes"]
    }


def test_serving_ranks_are_own_gpu_consumers_and_none_after_serve_stops(host):
    head = testinfra.get_host(f"ansible://{HEAD}", ansible_inventory=host.backend.ansible_inventory)
    serve_unit = f"sparkops-{CLUSTER}-vllm.service"
    assert head.service(serve_unit).is_running
    run = sparkops("status", "--json")
    assert run.returncode == 0, explain(run)
    serving = own_consumers(json.loads(run.stdout)["report"])
    for node, remote in ((HEAD, head), (WORKER, host)):
        total_mib = int(remote.check_output("awk '/^MemTotal:/ {print $2}' /proc/meminfo")) // 1024
        ranks = serving[node]
        # One rank per node (TP 2 on two nodes), in the node's Ray container, with the
        # memory vLLM claims: at least the non-torch 3 GiB of a TP>1 rank, at most the node.
        assert len(ranks) == 1, serving
        rank = ranks[0]
        assert rank["container"] == f"sparkops-{CLUSTER}-ray-{'head' if node == HEAD else 'worker'}", rank
        assert 3 * 1024 <= rank["used_memory_mib"] <= total_mib, (rank, total_mib)
        assert remote.run(f"test -d /proc/{rank['pid']}").rc == 0
    # Preflight on the serving cluster: its own ranks are reported and never stale.
    preflight = sparkops("preflight")
    assert preflight.returncode == 0, explain(preflight)
    reported = (artifacts_of(preflight) / "runner" / "stdout").read_text()
    for node in (HEAD, WORKER):
        rank = serving[node][0]
        said = rf"{node}: own: PID {rank['pid']}\s.*?in\s+container\s+{rank['container']}"
        assert re.search(said, reported, re.S), reported
    head.run_expect([0], f"systemctl stop {serve_unit}")
    try:
        # Ray ends the ranks once their driver (serve) is gone; wait (bounded) for that.
        for node, remote in ((HEAD, head), (WORKER, host)):
            pid = serving[node][0]["pid"]
            for _ in range(60):
                if remote.run(f"test -d /proc/{pid}").rc != 0:
                    break
                time.sleep(1)
            assert remote.run(f"test -d /proc/{pid}").rc != 0, f"{node}: rank {pid} outlived serve"
        stopped = sparkops("status", "--json")
        report = json.loads(stopped.stdout)["report"]
        assert own_consumers(report) == {HEAD: [], WORKER: []}, explain(stopped)
        for node in report["nodes"]:
            assert node["own_consumers"] == 0 and node["stale_consumers"] == 0, node
    finally:
        restarted = sparkops("restart", "-e", "cluster_restart_scope=serve")
    assert restarted.returncode in (0, 2), explain(restarted)
    again = own_consumers(json.loads(sparkops("status", "--json").stdout)["report"])
    assert [len(again[HEAD]), len(again[WORKER])] == [1, 1], again


# --- sparkops logs -----------------------------------------------------------------------------


def lab_api_key() -> str:
    lab_dir = Path(os.environ.get("SPARKOPS_LAB_DIR") or PROJECT / ".lab")
    return (lab_dir / "api_key").read_text().split()[0]


def logs_argv(*args: str) -> list[str]:
    argv = [str(SPARKOPS), "logs", *args]
    if GIVEN:
        argv[2:2] = ["-i", str(HOSTS)]
    return argv


def cli_env() -> dict[str, str]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"))
    env.setdefault("SPARKOPS_LAB_DIR", str(PROJECT / ".lab"))
    return env


def test_logs_of_serve_on_the_head_are_prefixed_and_hold_no_secret():
    run = subprocess.run(
        logs_argv("--unit", "serve", "--lines", "400"),
        cwd=PROJECT, env=cli_env(), capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, explain(run)
    lines = run.stdout.splitlines()
    assert lines and all(line.startswith(f"{HEAD} | ") for line in lines), lines[:5]
    assert any("vLLM API server version" in line or "(APIServer pid=" in line for line in lines), lines[-5:]
    # serve runs on the head only: the worker is skipped, said so on stderr.
    assert f"{WORKER} | serve does not run on this node (serve runs on the head)" in run.stderr
    assert lab_api_key() not in run.stdout + run.stderr


def test_logs_of_every_unit_and_the_watchdog_per_node(host):
    head = testinfra.get_host(f"ansible://{HEAD}", ansible_inventory=host.backend.ansible_inventory)
    watchdog = f"sparkops-{CLUSTER}-watchdog.service"
    missing = {
        node
        for node, remote in ((HEAD, head), (WORKER, host))
        if remote.check_output(f"systemctl show -p LoadState --value {watchdog}") == "not-found"
    }
    run = subprocess.run(
        logs_argv("--since", "-1d"), cwd=PROJECT, env=cli_env(), capture_output=True, text=True, check=False,
        timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, explain(run)  # every node has its Ray unit at least
    prefixes = {line.split(" | ", 1)[0].strip() for line in run.stdout.splitlines()}
    assert prefixes == {HEAD, WORKER}, prefixes
    for node in missing:
        assert f"{node} | no such unit: {watchdog}" in run.stderr
    only_watchdog = subprocess.run(
        logs_argv("--unit", "watchdog"), cwd=PROJECT, env=cli_env(), capture_output=True, text=True,
        check=False, timeout=120,
    )  # fmt: skip
    assert only_watchdog.returncode == (1 if missing else 0), explain(only_watchdog)
    assert "Traceback" not in only_watchdog.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_logs_follow_streams_both_nodes_until_a_signal(host, sig):
    head = testinfra.get_host(f"ansible://{HEAD}", ansible_inventory=host.backend.ansible_inventory)
    proc = subprocess.Popen(
        logs_argv("--follow", "--unit", "ray", "--lines", "5"),
        cwd=PROJECT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    seen: set[str] = set()
    both = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            seen.add(line.split(" | ", 1)[0].strip())
            if {HEAD, WORKER} <= seen:
                both.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert both.wait(120), f"lines seen from {seen}; stderr: {proc.stderr.read() if proc.poll() else ''}"
        proc.send_signal(sig)
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    reader.join(30)
    err = proc.stderr.read()
    assert code == 0, err
    assert "Traceback" not in err
    # The remote journalctl ends with its ssh: none is left following on the nodes.
    # ("[j]" keeps pgrep from matching the shell that runs it.)
    for remote in (head, host):
        for _ in range(30):
            left = remote.run("pgrep -af '[j]ournalctl --no-pager --output=short-iso --lines 5 --follow'")
            if left.rc == 1:
                break
            time.sleep(1)
        assert left.rc == 1, left.stdout
