"""plugins/module_utils/_watchdog_tick.py: the program's tick with fake HTTP, ssh and systemctl."""

import json
import os
import shutil
import subprocess
import sys
import tarfile
import types
from pathlib import Path

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _layout
from ansible_collections.sparkops.vllm.plugins.module_utils import _prometheus_text as pt
from ansible_collections.sparkops.vllm.plugins.module_utils import _watchdog as wd
from ansible_collections.sparkops.vllm.plugins.module_utils import _watchdog_tick as prog
from conftest import ROOT

KEY = "sk-watchdog-canary-secret-0123456789"
GIB = 1024**3
MEMINFO = "MemTotal:       125000000 kB\nMemFree:        40000000 kB\nMemAvailable:   {avail} kB\n"


def metrics(tokens, running):
    return (
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{engine="0",model_name="tiny"}} {running}\n'
        "# TYPE vllm:generation_tokens_total counter\n"
        f'vllm:generation_tokens_total{{engine="0",model_name="tiny"}} {tokens}\n'
    ).encode()


class FakeIo(prog.Io):
    def __init__(
        self, tmp_path, *, tokens=10.0, running=1.0, canary="ok", ray_down=(), apps=None, power=45.0
    ):
        self.clock = 1000.0
        self.tokens, self.running, self.canary = tokens, running, canary
        self.ray_down, self.apps, self.power = set(ray_down), apps or {}, power
        self.argvs, self.requests, self.lines, self.files = [], [], [], {}
        self.tmp = tmp_path
        # What the tick measures of itself at its end (Io.usage); None: measure for real.
        self.cost = (0.25, 1.5)

    def now(self):
        return self.clock

    def sleep(self, seconds):
        self.clock += seconds

    def http(self, method, url, headers, body, timeout):
        self.requests.append((method, url, dict(headers), body))
        if url.endswith("/metrics"):
            return 200, metrics(self.tokens, self.running)
        if url.endswith("/health"):
            return 200, b""
        if self.canary == "timeout":
            raise TimeoutError("timed out")
        return 200, json.dumps({"choices": [{"message": {"content": "O"}}]}).encode()

    def run(self, argv, timeout):
        assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
        assert timeout > 0
        self.argvs.append(argv)
        if argv[:2] == ["sh", "-c"] or (argv[0] == "ssh" and argv[-1] == prog.NODE_PROBE):
            node = "spark-1" if argv[0] == "sh" else argv[-2].split("@")[1]
            apps = self.apps.get(node, "4242\n")
            out = f"{MEMINFO.format(avail=40 * 1024 * 1024)}{prog.SEPARATOR}\n{self.power}, 97\n{prog.SEPARATOR}\n{apps}"
            return 0, out, ""
        return 0, "", ""

    def tcp(self, host, port, timeout):
        assert port == 8076
        return host not in self.ray_down

    def read(self, path):
        if path in self.files:
            return self.files[path]
        return super().read(path)

    def write_atomic(self, path, text, mode):
        self.files[path] = text
        self.files[path + ":mode"] = mode

    def log(self, line):
        self.lines.append(line)

    def warn(self, line):
        self.lines.append("WARNING " + line)

    def usage(self):
        return self.cost if self.cost is not None else super().usage()


@pytest.fixture
def config(tmp_path):
    secrets = tmp_path / "serve-secrets.env"
    secrets.write_text(f"# Secrets\nVLLM_API_KEY={KEY}\nHF_TOKEN=\n")
    return {
        "cluster": "lab",
        "head": {
            "name": "spark-1",
            "ib": "10.10.0.1",
            "units": ["sparkops-lab-vllm", "sparkops-lab-ray-head"],
        },
        "workers": [{"name": "spark-2", "ib": "10.10.0.2", "units": ["sparkops-lab-ray-worker"]}],
        "endpoint": "http://127.0.0.1:8000",
        "served_model_name": "tiny",
        "secrets_file": str(secrets),
        "ray_node_manager_port": 8076,
        "ssh": {
            "key": "/root/.ssh/sparkops_lab_ed25519",
            "known_hosts": "/root/.ssh/sparkops_lab_known_hosts",
        },
        "state_file": str(tmp_path / "state" / "watchdog" / "state.json"),
        "bundle_dir": str(tmp_path / "state" / "watchdog" / "bundles"),
        "textfile": str(tmp_path / "textfile" / "sparkops-lab-watchdog.prom"),
        "journal_units": ["sparkops-lab-vllm", "sparkops-lab-ray-head"],
        "memavailable_floor_bytes": {"spark-1": 8 * GIB, "spark-2": 8 * GIB},
        "thresholds": {
            "frozen_ticks": 3,
            "budget_restarts": 3,
            "budget_window_s": 21600,
            "backoff_initial_s": 300,
        },
    }


def state_of(io, config):
    return json.loads(io.files[config["state_file"]])


def test_healthy_tick_observes_every_signal_and_acts_on_none(config, tmp_path):
    io = FakeIo(tmp_path)
    assert prog.run_tick(io, config) == 0
    assert state_of(io, config)["last_decision"] == wd.NONE
    assert io.requests[0][1] == "http://127.0.0.1:8000/metrics"
    canary = io.requests[1]
    assert canary[1].endswith("/v1/chat/completions")
    assert canary[2]["Authorization"] == f"Bearer {KEY}"
    assert json.loads(canary[3])["max_tokens"] == 1
    assert ["sh", "-c", prog.NODE_PROBE] in io.argvs
    assert [
        "ssh",
        "-i",
        "/root/.ssh/sparkops_lab_ed25519",
        "-o",
        "UserKnownHostsFile=/root/.ssh/sparkops_lab_known_hosts",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=5",
        "root@10.10.0.2",
        prog.NODE_PROBE,
    ] in io.argvs
    assert not any(a[0] == "systemctl" for a in io.argvs)
    assert io.files[config["textfile"] + ":mode"] == 0o644
    assert pt.parse(io.files[config["textfile"]]).total("sparkops_watchdog_gave_up") == 0.0


def test_frozen_tokens_restart_serve_on_the_third_tick(config, tmp_path):
    io = FakeIo(tmp_path)
    for _ in range(3):
        prog.run_tick(io, config)
        io.clock += 10
        assert not any(a[0] == "systemctl" for a in io.argvs)
    prog.run_tick(io, config)
    assert state_of(io, config)["last_decision"] == wd.RESTART_SERVE
    assert [a for a in io.argvs if a[0] == "systemctl"] == [
        ["systemctl", "stop", "sparkops-lab-vllm"],
        ["systemctl", "start", "sparkops-lab-vllm"],
    ]
    assert any("action=restart_serve" in line for line in io.lines)


def test_node_missing_restarts_the_cluster_in_order_over_ssh(config, tmp_path):
    io = FakeIo(tmp_path, ray_down={"10.10.0.2"})
    prog.run_tick(io, config)
    calls = [
        a if a[0] == "systemctl" else a[-1] for a in io.argvs if a[0] == "systemctl" or "systemctl" in a[-1]
    ]
    assert calls == [
        ["systemctl", "stop", "sparkops-lab-vllm"],
        "systemctl stop sparkops-lab-ray-worker",
        ["systemctl", "stop", "sparkops-lab-ray-head"],
        ["systemctl", "start", "sparkops-lab-ray-head"],
        "systemctl start sparkops-lab-ray-worker",
        ["systemctl", "start", "sparkops-lab-vllm"],
    ]
    assert state_of(io, config)["restarts_total"] == {"serve": 0, "cluster": 1}


def test_dead_rank_is_a_cluster_restart(config, tmp_path):
    io = FakeIo(tmp_path, apps={"10.10.0.2": ""})
    prog.run_tick(io, config)
    assert state_of(io, config)["last_findings"][0]["signal"] == "rank_dead"


def test_canary_timeout_bundle_has_no_key_and_is_private(config, tmp_path):
    config["bundle_dir"] = str(tmp_path / "bundles")
    io = FakeIo(tmp_path, canary="timeout")
    io.write_atomic = prog.Io.write_atomic.__get__(io)
    prog.run_tick(io, config)
    state = json.loads((tmp_path / "state" / "watchdog" / "state.json").read_text())
    bundle = state["episode"]["bundle"]
    assert bundle and os.stat(bundle).st_mode & 0o777 == 0o600
    assert os.stat(config["bundle_dir"]).st_mode & 0o777 == 0o700
    with tarfile.open(bundle) as tar:
        texts = [tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()]
    assert any("canary" in t for t in texts)
    assert not any(KEY in t for t in texts)
    assert not any(KEY in " ".join(a) for a in io.argvs)
    assert not any(KEY in line for line in io.lines)
    assert KEY not in (tmp_path / "state" / "watchdog" / "state.json").read_text()


def test_paused_and_gave_up_observe_nothing(config, tmp_path):
    io = FakeIo(tmp_path, canary="timeout")
    prog.run_pause(io, config, "maintenance")
    prog.run_tick(io, config)
    assert io.requests == [] and io.argvs == []
    assert state_of(io, config)["last_decision"] == wd.PAUSED
    assert pt.parse(io.files[config["textfile"]]).total("sparkops_watchdog_paused") == 1.0
    prog.run_resume(io, config)
    assert state_of(io, config)["paused"] is False


def test_resume_clears_gave_up_and_the_window(config, tmp_path):
    io = FakeIo(tmp_path)
    state = wd.new_state()
    state["gave_up"] = {"at": 1.0, "reason": "r", "bundle": None}
    state["restarts"] = [{"at": 1.0, "scope": "serve", "reason": "r"}]
    io.files[config["state_file"]] = wd.dump_state(state)
    prog.run_resume(io, config)
    after = state_of(io, config)
    assert after["gave_up"] is None and after["restarts"] == []


def test_corrupt_state_file_is_journaled_and_replaced(config, tmp_path):
    io = FakeIo(tmp_path)
    io.files[config["state_file"]] = "{half"
    prog.run_tick(io, config)
    assert any("not JSON" in line for line in io.lines)
    assert state_of(io, config)["version"] == wd.STATE_VERSION


def test_api_key_quoted_and_absent(tmp_path):
    io = prog.Io()
    path = tmp_path / "s.env"
    path.write_text("VLLM_API_KEY='abc'\n")
    assert prog.api_key(io, str(path)) == "abc"
    assert prog.api_key(io, str(tmp_path / "none")) == ""


def test_config_problems(config):
    assert prog.check_config(config) == []
    broken = dict(config, workers=[{"name": "spark-2", "ib": ""}])
    del broken["endpoint"]
    assert prog.check_config(broken) == ["the config has no 'endpoint'"]
    assert prog.check_config(dict(config, workers=[{"name": "spark-2", "ib": "", "units": ["u"]}])) == [
        "node 'spark-2' has no 'ib'"
    ]


def test_the_bundle_runs_as_a_plain_script_without_ansible(tmp_path):
    for name in _layout.WATCHDOG_BUNDLE:
        shutil.copy(ROOT / "plugins" / "module_utils" / name, tmp_path / name)
    (tmp_path / "config.json").write_text("{}")
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            str(tmp_path / "_watchdog_tick.py"),
            "--config",
            str(tmp_path / "config.json"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "the config is unusable" in done.stdout


def test_a_worker_command_reaches_ssh_quoted():
    calls = []

    class Io:
        def run(self, argv, timeout):
            calls.append(argv)
            return 0, "", ""

    config = {
        "head": {"name": "spark-1"},
        "ssh": {"key": "/k", "known_hosts": "/kh", "user": "root", "connect_timeout_s": 5},
    }
    worker = {"name": "spark-2", "ib": "192.168.200.13"}
    prog.on_node(Io(), config, worker, ["systemctl", "stop", "a b;c"], 5)
    assert calls[0][-1] == "systemctl stop 'a b;c'"
    prog.on_node(Io(), config, {"name": "spark-1", "ib": "x"}, ["systemctl", "stop", "u"], 5)
    assert calls[1] == ["systemctl", "stop", "u"]


# -- the tick's own cost ------------------------------------------------------------------


def test_every_tick_ends_with_its_cost_in_the_journal_the_state_and_the_textfile(config, tmp_path):
    io = FakeIo(tmp_path)
    prog.run_tick(io, config)
    assert io.lines[-1] == (
        'watchdog action=none restarts_in_window=0/3 reason="every signal is healthy" '
        "cpu_seconds=0.25 wall_seconds=1.5 cpu_budget_seconds=1"
    )
    assert not any(line.startswith("WARNING") for line in io.lines)
    assert state_of(io, config)["last_tick_cost"] == {
        "cpu_s": 0.25,
        "wall_s": 1.5,
        "cpu_budget_s": 1.0,
        "over_budget": False,
    }
    text = pt.parse(io.files[config["textfile"]])
    assert text.total("sparkops_watchdog_tick_cpu_seconds") == 0.25
    assert text.total("sparkops_watchdog_tick_duration_seconds") == 1.5
    assert text.total("sparkops_watchdog_tick_cpu_budget_seconds") == 1.0


def test_a_tick_over_its_cpu_budget_warns_and_restarts_nothing(config, tmp_path):
    config["thresholds"]["tick_cpu_budget_s"] = 0.5
    io = FakeIo(tmp_path)
    io.cost = (0.75, 2.0)
    assert prog.run_tick(io, config) == 0
    warnings = [line for line in io.lines if line.startswith("WARNING")]
    assert len(warnings) == 1
    assert "the tick used 0.75 s of CPU, over its budget of 0.5 s" in warnings[0]
    assert not any(a[0] == "systemctl" or "systemctl" in a[-1] for a in io.argvs)
    state = state_of(io, config)
    assert state["last_decision"] == wd.NONE and state["restarts"] == []
    assert state["last_tick_cost"]["over_budget"] is True
    # The next tick, within its budget, does not warn: the figure is per tick.
    io.cost, io.lines = (0.1, 1.0), []
    prog.run_tick(io, config)
    assert not any(line.startswith("WARNING") for line in io.lines)
    assert state_of(io, config)["last_tick_cost"]["over_budget"] is False


def test_a_restart_tick_journals_its_decision_first_and_its_cost_after_the_restart(config, tmp_path):
    io = FakeIo(tmp_path, canary="timeout")
    io.cost = (0.4, 95.0)
    assert prog.run_tick(io, config) == 0
    decision = next(i for i, line in enumerate(io.lines) if "action=restart_serve" in line)
    assert "cpu_seconds" not in io.lines[decision]
    assert io.lines[-1] == "restart scope=serve done cpu_seconds=0.4 wall_seconds=95 cpu_budget_seconds=1"
    assert state_of(io, config)["last_tick_cost"]["wall_s"] == 95.0


def test_a_paused_tick_records_its_cost_too(config, tmp_path):
    io = FakeIo(tmp_path)
    prog.run_pause(io, config, "maintenance")
    io.cost = (0.05, 0.06)
    prog.run_tick(io, config)
    assert io.lines[-1].endswith("cpu_seconds=0.05 wall_seconds=0.06 cpu_budget_seconds=1")
    assert state_of(io, config)["last_tick_cost"]["cpu_s"] == 0.05


def test_the_measurement_reads_getrusage_of_itself_and_its_children(monkeypatch):
    asked = []

    def getrusage(who):
        asked.append(who)
        if who == prog.resource.RUSAGE_SELF:
            return types.SimpleNamespace(ru_utime=0.07, ru_stime=0.02)
        return types.SimpleNamespace(ru_utime=0.11, ru_stime=0.05)

    monkeypatch.setattr(prog.resource, "getrusage", getrusage)
    monkeypatch.setattr(prog, "STARTED", prog.time.monotonic() - 2.0)
    cpu, wall = prog.Io().usage()
    assert sorted(asked) == sorted([prog.resource.RUSAGE_SELF, prog.resource.RUSAGE_CHILDREN])
    assert cpu == pytest.approx(0.25)
    assert 2.0 <= wall < 60

    # Without /proc the wall time still counts, from the program's first line.
    def no_sysconf(name):
        raise ValueError(f"unrecognized configuration name {name}")

    monkeypatch.setattr(prog.os, "sysconf", no_sysconf)
    assert 2.0 <= prog.Io().usage()[1] < 60


# /proc/self/stat of a python3 whose command name holds a space and a parenthesis
# (proc(5): field 22, starttime, 81234 clock ticks after boot).
STAT = (
    "4242 (py (tick) 3) S 1 4242 4242 0 -1 4194560 1234 0 0 0 5 2 0 0 30 10 1 0 81234 "
    "27000000 2500 18446744073709551615 1 1 0 0 0 0 0 16781312 2 0 0 0 17 3 0 0 0 0 0\n"
)


def test_the_process_s_age_comes_from_its_start_time_in_proc():
    assert prog.process_age_s(STAT, 812.5, 100) == pytest.approx(0.16)


@pytest.mark.parametrize(
    ("since_first_line", "age", "wall"),
    [
        pytest.param(1.2, 1.25, 1.25, id="the interpreter's start counted"),
        pytest.param(1.2, None, 1.2, id="no /proc: from the first line"),
        pytest.param(1.2, 1.0, 1.2, id="an age under the first line's: not believed"),
        pytest.param(1.2, 86400.0, 1.2, id="an age from another clock: not believed"),
    ],
)
def test_the_wall_seconds(since_first_line, age, wall):
    assert prog.wall_seconds(since_first_line, age) == wall


def test_a_real_measurement_counts_a_child_it_waited_for(config, tmp_path):
    """Io.usage for real: a child's CPU (here a busy python) is in the tick's figure."""
    before, _ = prog.Io().usage()
    spin = "import time\nend = time.process_time() + 0.2\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", spin], check=True, timeout=60)
    after, wall = prog.Io().usage()
    assert after - before >= 0.2
    assert wall > 0
    io = FakeIo(tmp_path)
    io.cost = None
    prog.run_tick(io, config)
    cost = state_of(io, config)["last_tick_cost"]
    assert cost["cpu_s"] >= after - 0.001 and cost["wall_s"] >= wall - 0.001


def test_a_warning_reaches_the_journal_at_warning_priority(capsys):
    prog.Io().warn("watchdog warning=tick_over_cpu_budget")
    assert capsys.readouterr().out == "<4>sparkops watchdog: watchdog warning=tick_over_cpu_budget\n"


def test_the_shipped_program_measures_its_own_tick(config, tmp_path):
    """The bundle as the head runs it (plain script, no Ansible): a paused tick observes
    nothing, and still measures and records what it cost."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    for name in _layout.WATCHDOG_BUNDLE:
        shutil.copy(ROOT / "plugins" / "module_utils" / name, bundle / name)
    state = wd.new_state()
    state.update(paused=True, paused_reason="maintenance")
    os.makedirs(os.path.dirname(config["state_file"]))
    with open(config["state_file"], "w", encoding="utf-8") as handle:
        handle.write(wd.dump_state(state))
    (tmp_path / "config.json").write_text(json.dumps(config))
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            str(bundle / "_watchdog_tick.py"),
            "--config",
            str(tmp_path / "config.json"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    cost = json.loads(Path(config["state_file"]).read_text(encoding="utf-8"))["last_tick_cost"]
    assert 0 < cost["cpu_s"] < cost["cpu_budget_s"] and cost["wall_s"] > 0
    assert done.stdout.splitlines()[-1].endswith(
        f"cpu_seconds={cost['cpu_s']:g} wall_seconds={cost['wall_s']:g} cpu_budget_seconds=1"
    )
    text = pt.parse(Path(config["textfile"]).read_text(encoding="utf-8"))
    assert text.total("sparkops_watchdog_tick_cpu_seconds") == cost["cpu_s"]
