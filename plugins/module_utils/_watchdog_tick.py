# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The watchdog's tick on the head: observe, decide (``_watchdog.tick``), act, record.

Shipped to the head as a plain script with the files it imports beside it (the layout's
``watchdog_bundle``; the watchdog role copies them into ``watchdog_dir``) and run by the watchdog's oneshot service
with the host's python3: stdlib only, no Ansible. Its one argument is the JSON config the
role renders (``--config``); no secret is ever on its command line: the canary's API key
is read from serve's secrets env file at run time, and never written anywhere.

Commands:
- ``tick`` (the default): one tick, what the timer runs.
- ``status``: the state as JSON, for ``status`` and ``sparkops watchdog status``.
- ``pause --reason TEXT`` / ``resume``: change the state file (``resume`` also clears a
  "gave up" and the restarts in the window: an operator who resumes takes the budget back).

How each signal is observed (every one bounded by a timeout, none parses ``ray status``,
which costs seconds of CPU):
- the canary: ``POST <endpoint>/v1/chat/completions`` with ``max_tokens`` 1, as
  roles/vllm_serve/tasks/ready.yml asks its readiness completion;
- ``/metrics`` before the canary (the canary's own request would count as running):
  vLLM 0.17.1 serves it without the API key, its AuthenticationMiddleware guards only
  ``/v1`` (``vllm/entrypoints/openai/server_utils.py``; lab/vllm/README.md, "Metrics");
- a Ray node is alive when its raylet's node manager port answers a TCP connect on the
  node's ib address: ``ray start`` passes ``--node_manager_port`` and
  ``--node_ip_address`` to the raylet (Ray 2.60.0, ``ray/_private/services.py``,
  ``start_raylet``), and the GCS and the other raylets reach it there, so the firewall
  (roles/ray_cluster, ``ray_cluster_restrict_ports``) admits it on the ib link;
- a vLLM rank is alive on a node when ``nvidia-smi --query-compute-apps`` lists a process
  there (each rank holds its GPU; the lab's simulated nvidia-smi lists the stand-in's
  ranks: lab/vllm/README.md);
- MemAvailable from ``/proc/meminfo`` (plugins/module_utils/_meminfo.py);
- GPU power and utilization from ``nvidia-smi --query-gpu=power.draw,utilization.gpu``
  (``[N/A]`` where the driver does not report it).
A worker is read over one ``ssh`` per tick with the cluster's key (roles/cluster_ssh).

Every tick ends by measuring its own cost (``Io.usage``): the CPU seconds of the program
and of the children it waited for (``resource.getrusage``, user and system), and its wall
seconds since the process started. They go into the state (``last_tick_cost``), the
tick's last journal line (``cpu_seconds=... wall_seconds=... cpu_budget_seconds=...``) and
the textfile; a tick over ``tick_cpu_budget_s`` journals a warning, and nothing else.
Measured in the program, it needs no systemd CPU accounting.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

# The program's first line on the monotonic clock (its imports come after); Io.usage counts
# the wall time from the process's start where /proc says it, from here where it does not.
STARTED = time.monotonic()

try:
    from ansible_collections.sparkops.vllm.plugins.module_utils import (
        _meminfo,
        _nvidia_smi,
        _prometheus_text,
        _redact,
        _support_bundle,
        _watchdog,
    )
except ImportError:  # run as a plain script, with the layout's watchdog_bundle beside it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _meminfo  # type: ignore[no-redef]
    import _nvidia_smi  # type: ignore[no-redef]
    import _prometheus_text  # type: ignore[no-redef]
    import _redact  # type: ignore[no-redef]
    import _support_bundle  # type: ignore[no-redef]
    import _watchdog  # type: ignore[no-redef]

JOURNAL_PREFIX = "sparkops watchdog"
SEPARATOR = "----sparkops-watchdog----"
# One shell line per node and tick, the same on the head and (through ssh) on a worker:
# a fixed text, nothing from the config in it.
NODE_PROBE = (
    f"cat /proc/meminfo; echo {SEPARATOR}; "
    "nvidia-smi --query-gpu=power.draw,utilization.gpu --format=csv,noheader,nounits; "
    f"echo {SEPARATOR}; nvidia-smi --query-compute-apps=pid --format=csv,noheader"
)
METRICS_MAX_BYTES = _prometheus_text.MAX_BYTES
API_KEY_VARIABLE = "VLLM_API_KEY"
# systemd stores a stdout line that starts with <4> at priority warning (SyslogLevelPrefix=,
# on by default): `journalctl -p warning` finds it.
WARNING_PRIORITY = "<4>"


class Io:
    """The program's contact with the world; the tests replace it."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def http(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, timeout: float
    ) -> tuple[int, bytes]:
        """(status, body); raises TimeoutError on a timeout, OSError when unreachable."""
        request = urllib.request.Request(url, data=body, method=method, headers=dict(headers))
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return answer.status, answer.read(METRICS_MAX_BYTES + 1)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(4096)
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, (socket.timeout, TimeoutError)):
                raise TimeoutError(str(exc.reason)) from exc
            raise OSError(str(exc.reason)) from exc

    def run(self, argv: list[str], timeout: float) -> tuple[int, str, str]:
        # The support bundle's runner: LC_ALL=C, 127 for a missing command, 124 on timeout.
        return _support_bundle._run(argv, timeout)

    def tcp(self, host: str, port: int, timeout: float) -> bool:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return True
        except OSError:
            return False

    def read(self, path: str) -> str | None:
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read()
        except FileNotFoundError:
            return None

    def write_atomic(self, path: str, text: str, mode: int) -> None:
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        descriptor, temp = tempfile.mkstemp(dir=directory, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.chmod(temp, mode)
            os.replace(temp, path)
        except BaseException:
            if os.path.exists(temp):
                os.unlink(temp)
            raise

    def log(self, line: str) -> None:
        print(f"{JOURNAL_PREFIX}: {line}", flush=True)

    def warn(self, line: str) -> None:
        print(f"{WARNING_PRIORITY}{JOURNAL_PREFIX}: {line}", flush=True)

    def usage(self) -> tuple[float, float]:
        """(CPU seconds, wall seconds) the program has used so far: its own and its waited-for
        children's user and system time (_watchdog.cpu_seconds), and the time since the
        process started (the interpreter's start included, as in the CPU figure)."""
        cpu = _watchdog.cpu_seconds(
            resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        )
        since_first_line = time.monotonic() - STARTED
        try:
            with open("/proc/self/stat", encoding="ascii") as handle:
                stat = handle.read()
            age = process_age_s(stat, time.clock_gettime(time.CLOCK_BOOTTIME), os.sysconf("SC_CLK_TCK"))
        except (OSError, ValueError, IndexError, ArithmeticError, AttributeError):
            age = None
        return cpu, wall_seconds(since_first_line, age)


def process_age_s(stat: str, boottime_s: float, clock_ticks: int) -> float:
    """Seconds since the process started, from ``/proc/self/stat`` (field 22, ``starttime``,
    in clock ticks after boot: proc(5)) and CLOCK_BOOTTIME now. The command name (field 2)
    may hold spaces and parentheses: the fields are counted after its last ``)``."""
    fields = stat[stat.rindex(")") + 2 :].split()
    return boottime_s - int(fields[19]) / clock_ticks


def wall_seconds(since_first_line: float, process_age: float | None) -> float:
    """The tick's wall seconds: the process's age, which counts the interpreter's start, when
    /proc gave one that fits (not under the time since the program's first line, nor 10 s
    over it); else the time since the first line."""
    if process_age is None or not since_first_line <= process_age <= since_first_line + 10:
        return since_first_line
    return process_age


# -- the config -----------------------------------------------------------------------

REQUIRED = (
    "cluster",
    "head",
    "workers",
    "endpoint",
    "served_model_name",
    "secrets_file",
    "ray_node_manager_port",
    "ssh",
    "state_file",
    "bundle_dir",
    "textfile",
    "journal_units",
)


def check_config(config: Mapping[str, Any]) -> list[str]:
    """What is missing or wrong in the config (empty when usable)."""
    problems = [f"the config has no {key!r}" for key in REQUIRED if key not in config]
    if problems:
        return problems
    for node in [config["head"], *config["workers"]]:
        for key in ("name", "ib", "units"):
            if not node.get(key):
                problems.append(f"node {node.get('name', '?')!r} has no {key!r}")
    try:
        _watchdog.settings(config.get("thresholds") or {})
    except _watchdog.WatchdogError as exc:
        problems.append(str(exc))
    return problems


def api_key(io: Io, secrets_file: str) -> str:
    """VLLM_API_KEY from serve's secrets env file (roles/vllm_serve writes it, 0600)."""
    text = io.read(secrets_file) or ""
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == API_KEY_VARIABLE:
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            return value
    return ""


def ssh_argv(config: Mapping[str, Any], address: str, command: str) -> list[str]:
    ssh = config["ssh"]
    return [
        "ssh",
        "-i",
        ssh["key"],
        "-o",
        f"UserKnownHostsFile={ssh['known_hosts']}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={int(ssh.get('connect_timeout_s', 5))}",
        f"{ssh.get('user', 'root')}@{address}",
        command,
    ]


def on_node(io: Io, config: Mapping[str, Any], node: Mapping[str, Any], argv: list[str], timeout: float):
    """Run argv on node: directly on the head, through ssh on a worker."""
    if node["name"] == config["head"]["name"]:
        return io.run(argv, timeout)
    # ssh hands the remote shell one string: each word quoted, so a name never splits or expands.
    return io.run(ssh_argv(config, node["ib"], shlex.join(argv)), timeout)


# -- observing --------------------------------------------------------------------------


def read_metrics(io: Io, config: Mapping[str, Any]) -> tuple[float | None, float | None, str]:
    timeout = float(config.get("probe_timeout_s", 5))
    try:
        status, body = io.http("GET", config["endpoint"] + "/metrics", {}, None, timeout)
    except (TimeoutError, OSError) as exc:
        return None, None, f"/metrics did not answer: {exc}"
    if status != 200:
        return None, None, f"/metrics answered {status}"
    try:
        page = _prometheus_text.parse(body)
    except _prometheus_text.PrometheusTextError as exc:
        return None, None, f"/metrics unreadable: {exc}"
    # vLLM 0.17.1 vllm/v1/metrics/loggers.py: counter vllm:generation_tokens (exposed as
    # _total) and gauge vllm:num_requests_running, one series per engine.
    return page.total("vllm:generation_tokens_total"), page.total("vllm:num_requests_running"), ""


def canary(io: Io, config: Mapping[str, Any], key: str) -> tuple[str, str]:
    """("ok" | "timeout" | "error", detail). The detail never holds the key."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    body = json.dumps(
        {
            "model": config["served_model_name"],
            "messages": [{"role": "user", "content": config.get("canary_prompt", "Say OK.")}],
            "max_tokens": 1,
        }
    ).encode()
    timeout = float(config.get("canary_timeout_s", 20))
    try:
        status, answer = io.http("POST", config["endpoint"] + "/v1/chat/completions", headers, body, timeout)
    except TimeoutError:
        return "timeout", f"the canary completion did not answer within {timeout:g} s"
    except OSError as exc:
        return "error", _redact.redact(f"the canary completion failed: {exc}", [key])
    if status != 200:
        return "error", f"the canary completion answered HTTP {status}"
    try:
        choices = json.loads(answer).get("choices")
    except (ValueError, AttributeError):
        choices = None
    if not choices:
        return "error", "the canary completion answered 200 without choices"
    return "ok", ""


def _number(cell: str) -> float | None:
    cell = cell.strip()
    if cell in _nvidia_smi.UNKNOWN_CELLS:
        return None
    try:
        return float(cell)
    except ValueError:
        return None


def read_node(io: Io, config: Mapping[str, Any], node: Mapping[str, Any]) -> dict[str, Any]:
    """MemAvailable, power, utilization and GPU process count of one node; None where unread."""
    timeout = float(config.get("probe_timeout_s", 5)) + float(config["ssh"].get("connect_timeout_s", 5))
    if node["name"] == config["head"]["name"]:
        rc, out, err = io.run(["sh", "-c", NODE_PROBE], timeout)
    else:
        rc, out, err = io.run(ssh_argv(config, node["ib"], NODE_PROBE), timeout)
    got: dict[str, Any] = {
        "memavailable_bytes": None,
        "power_w": None,
        "utilization_pct": None,
        "ranks": None,
    }
    got["raw"] = out[-8192:]
    parts = out.split(SEPARATOR)
    if rc == 255 or len(parts) != 3:
        got["error"] = f"rc {rc}: {err.strip()[-300:]}"
        return got
    try:
        memory, _warnings = _meminfo.memory_from_meminfo(parts[0])
        got["memavailable_bytes"] = memory["available_bytes"]
    except _meminfo.MeminfoError:
        pass
    rows, _warnings = _nvidia_smi.parse_csv(parts[1], ("power.draw", "utilization.gpu"))
    if rows:
        got["power_w"] = _number(rows[0]["power.draw"])
        got["utilization_pct"] = _number(rows[0]["utilization.gpu"])
        # nvidia-smi answered: its process list (empty or not) says whether a rank runs.
        got["ranks"] = len([line for line in parts[2].splitlines() if line.strip().isdigit()])
    return got


def observe(io: Io, config: Mapping[str, Any], key: str) -> tuple[_watchdog.Observation, dict[str, Any]]:
    tokens, running, metrics_note = read_metrics(io, config)
    verdict, detail = canary(io, config, key)
    nodes = [config["head"], *config["workers"]]
    port = int(config["ray_node_manager_port"])
    timeout = float(config.get("probe_timeout_s", 5))
    ray = {n["name"]: io.tcp(n["ib"], port, timeout) for n in nodes}
    facts = {n["name"]: read_node(io, config, n) for n in nodes}
    obs = _watchdog.Observation(
        now=io.now(),
        canary=verdict,
        canary_detail=detail,
        generation_tokens=tokens,
        requests_running=running,
        ray_nodes=ray,
        ranks={name: (None if f["ranks"] is None else f["ranks"] > 0) for name, f in facts.items()},
        memavailable_bytes={name: f["memavailable_bytes"] for name, f in facts.items()},
        gpu_power_w={name: f["power_w"] for name, f in facts.items()},
        gpu_utilization_pct={name: f["utilization_pct"] for name, f in facts.items()},
    )
    raw = {"metrics_note": metrics_note, "nodes": facts}
    return obs, raw


# -- acting -----------------------------------------------------------------------------


def capture_bundle(io: Io, config: Mapping[str, Any], obs, raw, decision, *, key: str) -> str | None:
    """The first failure's support bundle (0600 in a 0700 dir); its path, or None."""
    now = io.now()
    bundle = os.path.join(
        config["bundle_dir"], _support_bundle.bundle_name(f"{config['cluster']}-watchdog", now)
    )
    staging = bundle.removesuffix(".tar.gz") + ".staging"
    files: dict[str, str] = {
        "observations.json": _support_bundle.dumps(obs.as_dict()),
        "decision.json": _support_bundle.dumps(
            {
                "action": decision.action,
                "scope": decision.scope,
                "reason": decision.reason,
                "findings": [f.__dict__ for f in decision.findings],
            }
        ),
    }
    for name, facts in raw["nodes"].items():
        files[f"nodes/{_support_bundle.safe_name(name)}.txt"] = facts.get("raw") or facts.get("error", "")
    for label, argv in (("docker-ps.txt", ["docker", "ps", "-a"]), ("nvidia-smi.txt", ["nvidia-smi"])):
        rc, out, err = io.run(argv, 30)
        files[label] = out if rc == 0 else f"rc {rc}: {err}"
    for unit in config["journal_units"]:
        rc, out, err = io.run(["journalctl", "--no-pager", "--output=short-iso", "-n", "500", "-u", unit], 30)
        files[f"journal/{_support_bundle.safe_name(unit)}.log"] = out if rc == 0 else f"rc {rc}: {err}"
    try:
        _support_bundle.private_dir(staging)
        return _support_bundle.pack(staging, bundle, files, secrets=[key] if key else [])
    except OSError as exc:
        io.log(f"the support bundle could not be written to {bundle}: {exc}")
        return None


def systemctl(io: Io, config: Mapping[str, Any], node: Mapping[str, Any], verb: str, unit: str) -> bool:
    rc, _out, err = on_node(
        io, config, node, ["systemctl", verb, unit], float(config.get("unit_timeout_s", 600))
    )
    if rc != 0:
        io.log(f"systemctl {verb} {unit} on {node['name']} failed (rc {rc}): {err.strip()[-300:]}")
    return rc == 0


def wait_nodes(io: Io, config: Mapping[str, Any]) -> bool:
    deadline = io.now() + float(config.get("wait_nodes_timeout_s", 300))
    port = int(config["ray_node_manager_port"])
    nodes = [config["head"], *config["workers"]]
    while True:
        if all(io.tcp(n["ib"], port, float(config.get("probe_timeout_s", 5))) for n in nodes):
            return True
        if io.now() >= deadline:
            io.log("not every Ray node answered after the restart")
            return False
        io.sleep(5)


def restart(io: Io, config: Mapping[str, Any], scope: str) -> bool:
    """The ordered restart: one order, _watchdog.restart_steps over the layout's node_units."""
    head = config["head"]
    by_name = {n["name"]: n for n in [head, *config["workers"]]}
    steps = _watchdog.restart_steps(
        scope, head["name"], head["units"], {w["name"]: w["units"] for w in config["workers"]}
    )
    ok = True
    for verb, node, unit in steps:
        if verb == "wait_nodes":
            ok = wait_nodes(io, config) and ok
        else:
            ok = systemctl(io, config, by_name[node], verb, unit) and ok
    return wait_ready(io, config) and ok


def wait_ready(io: Io, config: Mapping[str, Any]) -> bool:
    """Serve answers /health again (the model loads): the restart's tick waits for it, so
    the next ticks judge a loaded engine, not one still loading."""
    deadline = io.now() + float(config.get("ready_timeout_s", 900))
    timeout = float(config.get("probe_timeout_s", 5))
    while True:
        try:
            status, _body = io.http("GET", config["endpoint"] + "/health", {}, None, timeout)
            if status == 200:
                return True
        except (TimeoutError, OSError):
            pass
        if io.now() >= deadline:
            io.log("serve did not answer /health after the restart")
            return False
        io.sleep(5)


# -- the commands -------------------------------------------------------------------------


def load(io: Io, config: Mapping[str, Any]) -> dict[str, Any]:
    state, why = _watchdog.load_state(io.read(config["state_file"]))
    if why:
        io.log(why)
    return state


def save(io: Io, config: Mapping[str, Any], state: Mapping[str, Any]) -> None:
    io.write_atomic(config["state_file"], _watchdog.dump_state(state), 0o600)
    try:
        io.write_atomic(config["textfile"], _watchdog.textfile(config["cluster"], state, io.now()), 0o644)
    except OSError as exc:
        io.log(f"the textfile {config['textfile']} could not be written: {exc}")


def finish(
    io: Io, config: Mapping[str, Any], state: dict[str, Any], line: str, *, action: str, rc: int
) -> int:
    """The tick's end: its cost measured (Io.usage) and judged against the budget
    (_watchdog.tick_cost), journaled at the end of the tick's last line, recorded in the
    state and the textfile. Over budget is a warning line, never a restart."""
    cpu_s, wall_s = io.usage()
    cost = _watchdog.tick_cost(cpu_s, wall_s, config.get("thresholds") or {})
    state["last_tick_cost"] = cost
    io.log(f"{line} {_watchdog.tick_cost_fields(cost)}")
    warning = _watchdog.tick_cost_warning(cost, action)
    if warning:
        io.warn(warning)
    save(io, config, state)
    return rc


def run_tick(io: Io, config: Mapping[str, Any]) -> int:
    state = load(io, config)
    thresholds = config.get("thresholds") or {}
    nodes = [n["name"] for n in [config["head"], *config["workers"]]]
    floors = config.get("memavailable_floor_bytes") or {}
    if state["paused"] or state["gave_up"]:
        decision = _watchdog.tick(
            state, _watchdog.Observation(now=io.now(), canary="ok"), nodes, floors, thresholds
        )
        return finish(io, config, decision.state, decision.journal, action=decision.action, rc=0)
    key = api_key(io, config["secrets_file"])
    obs, raw = observe(io, config, key)
    decision = _watchdog.tick(state, obs, nodes, floors, thresholds)
    state = decision.state
    if decision.capture_bundle:
        path = capture_bundle(io, config, obs, raw, decision, key=key)
        state["episode"]["bundle"] = path
        if state.get("gave_up"):
            state["gave_up"]["bundle"] = path
        io.log(f"support bundle: {path}")
    journal = _redact.redact(decision.journal, [key] if key else [])
    if decision.action not in (_watchdog.RESTART_SERVE, _watchdog.RESTART_CLUSTER):
        return finish(io, config, state, journal, action=decision.action, rc=0)
    # The state is saved before acting: a restart that outlives the service's time limit
    # still counts against the budget. The restart's line then ends the tick, with its cost.
    io.log(journal)
    save(io, config, state)
    ok = restart(io, config, decision.scope)
    line = f"restart scope={decision.scope} {'done' if ok else 'incomplete'}"
    return finish(io, config, state, line, action=decision.action, rc=0 if ok else 1)


def run_pause(io: Io, config: Mapping[str, Any], reason: str) -> int:
    state = load(io, config)
    state["paused"], state["paused_reason"] = True, reason or "paused by an operator"
    io.log(f"action=pause reason={json.dumps(state['paused_reason'])}")
    save(io, config, state)
    return 0


def run_resume(io: Io, config: Mapping[str, Any]) -> int:
    state = load(io, config)
    was = state["gave_up"]
    state.update(paused=False, paused_reason="", gave_up=None, restarts=[], episode=None, frozen_ticks=0)
    io.log(f"action=resume{' (cleared gave up: ' + json.dumps(was['reason']) + ')' if was else ''}")
    save(io, config, state)
    return 0


def run_status(io: Io, config: Mapping[str, Any]) -> int:
    state, why = _watchdog.load_state(io.read(config["state_file"]))
    print(json.dumps({"state": state, "state_note": why, "state_file": config["state_file"]}, sort_keys=True))
    return 0


def main(argv: list[str] | None = None, io: Io | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("tick")
    sub.add_parser("status")
    pause = sub.add_parser("pause")
    pause.add_argument("--reason", default="")
    sub.add_parser("resume")
    args = parser.parse_args(argv)
    io = io or Io()
    text = io.read(args.config)
    if text is None:
        io.log(f"no config at {args.config}: rerun playbooks/watchdog.yml")
        return 2
    config = json.loads(text)
    problems = check_config(config)
    if problems:
        io.log("the config is unusable: " + "; ".join(problems))
        return 2
    command: Callable[[], int] = {
        "status": lambda: run_status(io, config),
        "pause": lambda: run_pause(io, config, args.reason),
        "resume": lambda: run_resume(io, config),
    }.get(args.command or "tick", lambda: run_tick(io, config))
    return command()


if __name__ == "__main__":
    sys.exit(main())
