# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""``sparkops logs``: the deployment's journald logs from every node, streamed, secrets redacted.

A playbook cannot stream: a module answers once it has finished, so ``journalctl
--follow`` through ansible-runner would print nothing until it ends. ``logs`` therefore
runs ``journalctl`` over ``ssh`` itself, with the connection Ansible would use for the
same host: the inventory is read through Ansible's own inventory and variable managers
(``-i`` or ansible.cfg's default, group_vars and templates included), and each host's
``ansible_host``, ``ansible_port``, ``ansible_user``, ``ansible_ssh_private_key_file``,
``ansible_ssh_common_args`` / ``ansible_ssh_extra_args`` and ansible.cfg's ``ssh_args``,
``timeout`` and ``host_key_checking`` become the ssh command line (docs/cli.md).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from sparkops_cli.events import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREACHABLE

UNIT_CHOICES = ("serve", "ray", "watchdog")
# The inventory's groups, as the playbooks use them (deploy.yml, playbooks/*.yml).
CLUSTER_GROUP = "cluster"
HEAD_GROUP = "head"
# Variables whose values never reach the screen (as roles/cluster_diagnose/vars/main.yml's
# _cluster_diagnose_secrets: the API key, the Hugging Face token, the extra list).
SECRET_VARS = ("sparkops_api_key", "sparkops_hf_token")
SECRET_LIST_VAR = "cluster_diagnose_secrets"
# What journalctl --since accepts (systemd.time(7)): dates, times, "-1h", "2 hours ago",
# "yesterday". Anything else is refused before a node is contacted.
SINCE_RE = re.compile(r"[0-9A-Za-z :+.@\-]{1,64}")  # journalctl --since forms, @EPOCH too
# The remote command's status when none of a node's units exists there.
NO_UNIT_STATUS = 44
SSH_FAILED_STATUS = 255  # ssh(1): "exits with 255 if an error occurred"
NO_SUCH_UNIT = "no such unit: "
REDACTION_SOURCE = "_redact"


class LogsUsageError(ValueError):
    """Bad arguments or an inventory that cannot be used: the CLI's usage exit code."""


def _module_utils(name: str, project: Path | None = None):
    """A standard-library-only file of plugins/module_utils/, loaded by its path.

    Loaded by path rather than as ``ansible_collections.*``: once ``resolve_nodes``
    has set up Ansible's collection loader, those imports go through that loader.
    """
    root = project if project is not None else Path(__file__).resolve().parents[2]
    path = root / "plugins" / "module_utils" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"sparkops_cli._mu_{name}", path)
    if spec is None or spec.loader is None:
        raise LogsUsageError(f"{path}: cannot load it")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def deployment_units(cluster_name: str, is_head: bool, project: Path | None = None) -> dict[str, str]:
    """The systemd units of one node, by the names ``--unit`` takes, from the layout module
    (plugins/module_utils/_layout.py), the one source of the deployment's names."""
    names = _module_utils("_layout", project).layout(cluster_name)["unit_names"]
    units = {
        "ray": names["ray_head" if is_head else "ray_worker"],
        "watchdog": names["watchdog"],
    }
    if is_head:  # serve runs on the head only
        units["serve"] = names["serve"]
    return units


def load_redact(project: Path) -> Callable[[str, Sequence[str]], str]:
    """The project's one redaction, ``redact(text, secrets)`` of plugins/module_utils/_redact.py
    (the support bundle's too)."""
    return _module_utils(REDACTION_SOURCE, project).redact


@dataclass
class Node:
    """One host to read: how to reach it, which units, which values to hide."""

    name: str
    argv_prefix: list[str]  # the connection: ssh ... host, or bash -c for a local host
    units: list[str]
    sudo: bool = False
    secrets: list[str] = field(default_factory=list)
    problem: str | None = None  # set when the host cannot be read (said, not crashed)


def check_since(since: str | None) -> None:
    if since is not None and not SINCE_RE.fullmatch(since):
        raise LogsUsageError(
            f"--since {since!r} is not a journalctl time: use e.g. '1h ago', '-30min', 'today' or "
            "'2026-12-01 18:00:00'"
        )


def remote_command(
    units: Sequence[str], *, since: str | None, lines: int | None, follow: bool, sudo: bool
) -> str:
    """The shell command a node runs: say which units are missing, then journalctl the rest."""
    journal = ["journalctl", "--no-pager", "--output=short-iso"]
    if since is not None:
        journal += ["--since", since]
    if lines is not None:
        journal += ["--lines", str(lines)]
    if follow:
        journal.append("--follow")
    if sudo:
        journal = ["sudo", "-n", *journal]
    quoted = " ".join(shlex.quote(unit) for unit in units)
    return (
        f"set --; for u in {quoted}; do "
        'if [ "$(systemctl show -p LoadState --value "$u" 2>/dev/null)" = not-found ]; '
        f'then echo "{NO_SUCH_UNIT}$u" >&2; else set -- "$@" -u "$u"; fi; done; '
        f'[ "$#" -gt 0 ] || exit {NO_UNIT_STATUS}; '
        f'exec {shlex.join(journal)} "$@"'
    )


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def connection_argv(name: str, hostvars: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """The command that runs a shell command on ``name``, from its connection variables.

    ``config`` holds ansible.cfg's ``ssh_args``, ``timeout`` and ``host_key_checking``.
    """
    kind = str(hostvars.get("ansible_connection") or "ssh")
    if kind == "local":
        return ["bash", "-c"]
    if kind not in ("ssh", "smart", "paramiko"):
        raise LogsUsageError(
            f"{name}: ansible_connection={kind} is not supported by sparkops logs (ssh or local); "
            "read that host's journal with `ansible ... -m ansible.builtin.command -a journalctl`"
        )
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={int(config.get('timeout') or 30)}"]
    argv += shlex.split(str(hostvars.get("ansible_ssh_args") or config.get("ssh_args") or ""))
    if not _truthy(config.get("host_key_checking", True)):
        argv += ["-o", "StrictHostKeyChecking=no"]  # what Ansible passes when checking is off
    key = hostvars.get("ansible_ssh_private_key_file") or hostvars.get("ansible_private_key_file")
    if key:
        argv += ["-o", f"IdentityFile={os.path.expanduser(str(key))}", "-o", "IdentitiesOnly=yes"]
    if hostvars.get("ansible_port"):
        argv += ["-p", str(int(hostvars["ansible_port"]))]
    if hostvars.get("ansible_user"):
        argv += ["-l", str(hostvars["ansible_user"])]
    for var in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        argv += shlex.split(str(hostvars.get(var) or ""))
    argv += ["--", str(hostvars.get("ansible_host") or name)]
    return argv


def wanted_units(
    cluster_name: str, is_head: bool, requested: Sequence[str], project: Path | None = None
) -> list[str]:
    """The node's units for ``--unit`` (all of them when none is given), in a stable order."""
    units = deployment_units(cluster_name, is_head, project)
    return [units[kind] for kind in (requested or UNIT_CHOICES) if kind in units]


def resolve_nodes(
    project: Path, inventory: Sequence[Path], names: Sequence[str], requested: Sequence[str]
) -> list[Node]:
    """The nodes to read, from the inventory as Ansible reads it (templates rendered)."""
    os.environ.setdefault("ANSIBLE_CONFIG", str(project / "ansible.cfg"))
    from ansible import constants as C  # noqa: PLC0415
    from ansible.errors import AnsibleError  # noqa: PLC0415
    from ansible.inventory.manager import InventoryManager  # noqa: PLC0415
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415
    from ansible.plugins.loader import init_plugin_loader  # noqa: PLC0415
    from ansible.template import Templar  # noqa: PLC0415
    from ansible.vars.manager import VariableManager  # noqa: PLC0415

    with warnings.catch_warnings():
        # A second call in one process (the unit tests) only repeats the configuration.
        warnings.filterwarnings("ignore", "AnsibleCollectionFinder has already been configured")
        init_plugin_loader()
    loader = DataLoader()
    loader.set_basedir(str(project))
    sources = [str(path) for path in inventory] or list(C.DEFAULT_HOST_LIST)
    manager = InventoryManager(loader=loader, sources=sources)
    variables = VariableManager(loader=loader, inventory=manager)
    hosts = manager.get_hosts(CLUSTER_GROUP)
    if not hosts:
        raise LogsUsageError(
            f"the inventory ({', '.join(sources)}) has no host in the group {CLUSTER_GROUP!r}"
        )
    unknown = sorted(set(names) - {host.name for host in hosts})
    if unknown:
        raise LogsUsageError(
            f"--node {', '.join(unknown)}: not in the inventory's {CLUSTER_GROUP!r} group "
            f"({', '.join(host.name for host in hosts)})"
        )
    ssh_options = C.config.get_plugin_options("connection", "ssh")
    config = {
        "ssh_args": ssh_options.get("ssh_args"),
        "timeout": ssh_options.get("timeout"),
        "host_key_checking": C.HOST_KEY_CHECKING,
    }
    nodes = []
    for host in hosts:
        if names and host.name not in names:
            continue
        hostvars = variables.get_vars(host=host, include_hostvars=False)
        templar = Templar(loader=loader, variables=hostvars)

        def render(var: str, _templar: Any = templar, _hostvars: Mapping[str, Any] = hostvars) -> Any:
            return _templar.template(_hostvars[var]) if var in _hostvars else None

        is_head = HEAD_GROUP in {group.name for group in host.get_groups()}
        try:
            connection = {
                var: render(var)
                for var in (
                    "ansible_connection",
                    "ansible_host",
                    "ansible_port",
                    "ansible_user",
                    "ansible_ssh_private_key_file",
                    "ansible_private_key_file",
                    "ansible_ssh_args",
                    "ansible_ssh_common_args",
                    "ansible_ssh_extra_args",
                )
            }
            cluster_name = render("sparkops_cluster_name")
        except AnsibleError as exc:
            raise LogsUsageError(f"{host.name}: cannot render its connection variables: {exc}") from exc
        if not cluster_name:
            raise LogsUsageError(f"{host.name}: sparkops_cluster_name is not set in the inventory")
        node = Node(
            name=host.name,
            argv_prefix=connection_argv(host.name, connection, config),
            units=wanted_units(str(cluster_name), is_head, requested, project),
            sudo=str(connection.get("ansible_user") or "root") != "root",
        )
        for var in (*SECRET_VARS, SECRET_LIST_VAR):
            try:
                value = render(var)
            except AnsibleError as exc:  # a vaulted value without the vault password, say
                print(
                    f"sparkops logs: {host.name}: {var} cannot be rendered ({type(exc).__name__}); "
                    "its value is hidden by the redaction patterns only",
                    file=sys.stderr,
                )
                continue
            values = value if isinstance(value, list) else [value]
            node.secrets += [str(item) for item in values if item]
        if not node.units:
            node.problem = f"{', '.join(requested)} does not run on this node (serve runs on the head)"
        nodes.append(node)
    return nodes


# --- streaming --------------------------------------------------------------------------------


def outcome(statuses: Mapping[str, int | None], *, follow: bool, stopped: bool) -> int:
    """The exit code of the whole run from each node's status.

    A status is the node's ssh (or local shell) exit status, or None for a child that
    a signal to ``sparkops logs`` ended. Unreachable wins over failed, as for the other
    subcommands; no node read at all is a failure. ``--follow`` ended by a signal is its
    normal end (0) unless a node failed; without ``--follow`` a signal is an
    interruption (130), as Ctrl-C is for the other subcommands.
    """
    ended = [status for status in statuses.values() if status is not None]
    if any(status == SSH_FAILED_STATUS for status in ended):
        return EXIT_UNREACHABLE
    if stopped and not follow:
        return EXIT_INTERRUPTED
    if not statuses or any(status != 0 for status in ended):
        return EXIT_FAILED
    return EXIT_OK


class Streamer:
    """One child process per node; every line prefixed with its node and redacted once."""

    def __init__(
        self,
        nodes: Sequence[Node],
        command_for: Callable[[Node], str],
        redact: Callable[[str, Sequence[str]], str],
        out: TextIO | None = None,
        err: TextIO | None = None,
    ) -> None:
        self.nodes = list(nodes)
        self.command_for = command_for
        self.redact = redact
        self.out, self.err = out or sys.stdout, err or sys.stderr
        self.width = max((len(node.name) for node in self.nodes), default=0)
        self.lock = threading.Lock()
        self.procs: dict[str, subprocess.Popen] = {}
        self.stopped = threading.Event()
        self.ended_by_us: set[str] = set()
        self.reader_gone = False

    def emit(self, node: Node, line: str, stream: TextIO) -> None:
        text = self.redact(line.rstrip("\n"), node.secrets)
        with self.lock:
            if self.reader_gone:
                return
            try:
                stream.write(f"{node.name:<{self.width}} | {text}\n")
                stream.flush()
            except BrokenPipeError:
                # The reader went away (`sparkops logs | head`): stop reading the nodes,
                # with no traceback and nothing more written to the closed pipe.
                self.reader_gone = True
                with contextlib.suppress(OSError, ValueError):
                    os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
                self.stop()

    def _pump(self, node: Node, pipe: Iterable[str], stream: TextIO) -> None:
        for line in pipe:
            self.emit(node, line, stream)

    def stop(self, *_args: Any) -> None:
        """Stop every child (a signal handler): each ssh ends, and with it its journalctl."""
        self.stopped.set()
        for name, proc in list(self.procs.items()):
            if proc.poll() is None:
                self.ended_by_us.add(name)
                proc.terminate()

    def run(self) -> dict[str, int | None]:
        statuses: dict[str, int | None] = {}
        threads = []
        for node in self.nodes:
            if node.problem:
                self.emit(node, node.problem, self.err)
                continue
            argv = [*node.argv_prefix, self.command_for(node)]
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    errors="replace",
                    bufsize=1,
                    start_new_session=True,  # Ctrl-C reaches us only; we end the children
                )
            except OSError as exc:
                self.emit(node, f"cannot start {argv[0]}: {exc}", self.err)
                statuses[node.name] = EXIT_FAILED
                continue
            self.procs[node.name] = proc
            for pipe, stream in ((proc.stdout, self.out), (proc.stderr, self.err)):
                thread = threading.Thread(target=self._pump, args=(node, pipe, stream), daemon=True)
                thread.start()
                threads.append(thread)
        if self.stopped.is_set():  # a signal came while the children were starting
            self.stop()
        for name, proc in self.procs.items():
            status = proc.wait()
            statuses[name] = None if name in self.ended_by_us else status
        for thread in threads:
            thread.join()
        for node in self.nodes:
            status = statuses.get(node.name)
            if status == NO_UNIT_STATUS:
                self.emit(node, f"none of {', '.join(node.units)} exists on this node", self.err)
            elif status == SSH_FAILED_STATUS:
                self.emit(node, "UNREACHABLE (ssh failed; its message is above)", self.err)
        return statuses


def stream_logs(
    nodes: Sequence[Node],
    redact: Callable[[str, Sequence[str]], str],
    *,
    since: str | None,
    lines: int | None,
    follow: bool,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Stream every node's journal until each ends (or a signal ends them); the exit code."""
    streamer = Streamer(
        nodes,
        lambda node: remote_command(node.units, since=since, lines=lines, follow=follow, sudo=node.sudo),
        redact,
        out,
        err,
    )
    previous = {sig: signal.signal(sig, streamer.stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        statuses = streamer.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if streamer.reader_gone:  # as `journalctl | head`: the reader chose to stop
        return outcome(statuses, follow=True, stopped=True)
    return outcome(statuses, follow=follow, stopped=streamer.stopped.is_set())
