"""``sparkops logs``: arguments, unit names, the ssh command line, streaming, redaction, exit codes.

The nodes are stood in for by an inventory with ``ansible_connection: local`` and fake
``systemctl`` / ``journalctl`` programs first on PATH, so the real remote command runs
in a real shell; the lab test (molecule/cli) runs it over ssh against the lab.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest

from sparkops_cli import cli, logs
from sparkops_cli.events import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE

ROOT = Path(__file__).resolve().parents[3]
API_KEY = "lab-api-key-0123456789abcdef"
HF_TOKEN = "hf_" + "A" * 30

FAKE_SYSTEMCTL = """\
#!/bin/bash
# systemctl show -p LoadState --value UNIT: loaded for the units in $FAKE_UNITS
for unit in $FAKE_UNITS; do [ "$unit" = "${@: -1}" ] && { echo loaded; exit 0; }; done
echo not-found
"""
FAKE_JOURNALCTL = """\
#!/bin/bash
echo "args: $*"
echo "2026-12-01T18:00:00+0000 spark vllm[7]: --api-key $FAKE_SECRET served"
echo "2026-12-01T18:00:01+0000 spark vllm[7]: Authorization: Bearer abcdefghijk"
echo "2026-12-01T18:00:02+0000 spark vllm[7]: HF_TOKEN=$FAKE_HF and $FAKE_SECRET alone"
case " $* " in *" --follow "*) echo "following"; exec sleep 600 ;; esac
exit "${FAKE_JOURNAL_RC:-0}"
"""


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("systemctl", FAKE_SYSTEMCTL), ("journalctl", FAKE_JOURNALCTL)):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SECRET", API_KEY)
    monkeypatch.setenv("FAKE_HF", HF_TOKEN)
    monkeypatch.setenv("FAKE_UNITS", "sparkops-lab-ray-head.service sparkops-lab-vllm.service")
    monkeypatch.delenv("FAKE_JOURNAL_RC", raising=False)
    return bindir


@pytest.fixture
def inventory(tmp_path):
    """Two local "nodes" named like the lab's, with the secrets in group_vars (one templated)."""
    root = tmp_path / "inventory"
    (root / "group_vars" / "all").mkdir(parents=True)
    (root / "hosts.yml").write_text(
        textwrap.dedent(
            """\
            cluster:
              children:
                head:
                  hosts:
                    spark-1:
                workers:
                  hosts:
                    spark-2:
            """
        )
    )
    (root / "group_vars" / "all" / "main.yml").write_text(
        textwrap.dedent(
            f"""\
            ansible_connection: local
            sparkops_cluster_name: lab
            _key_part: "{API_KEY[:10]}"
            sparkops_api_key: "{{{{ _key_part }}}}{API_KEY[10:]}"
            sparkops_hf_token: "{HF_TOKEN}"
            cluster_diagnose_secrets: []
            """
        )
    )
    return root / "hosts.yml"


def run_cli(argv, capsys):
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- arguments ---------------------------------------------------------------------------------


def test_logs_parses_its_options():
    args = cli.build_parser().parse_args(
        ["logs", "-f", "--node", "spark-1", "--node", "spark-2", "--unit", "serve", "--unit", "ray",
         "--since", "1h ago", "-n", "20", "-i", "inv.yml"]
    )  # fmt: skip
    assert (args.command, args.follow, args.node, args.unit) == (
        "logs",
        True,
        ["spark-1", "spark-2"],
        ["serve", "ray"],
    )
    assert (args.since, args.lines, args.inventory) == ("1h ago", 20, ["inv.yml"])
    defaults = cli.build_parser().parse_args(["logs"])
    assert (defaults.follow, defaults.node, defaults.unit, defaults.since, defaults.lines) == (
        False,
        [],
        [],
        None,
        None,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["logs", "--unit", "vllm"],
        ["logs", "-n", "0"],
        ["logs", "-n", "many"],
        ["logs", "--check"],
        ["logs", "-e", "a=1"],
        ["logs", "--since", "1h; rm -rf /"],
        ["logs", "--since", "$(id)"],
        ["logs", "-i", "/nonexistent/hosts.yml"],
    ],
)
def test_logs_usage_errors_exit_4(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == EXIT_USAGE
    assert "error:" in capsys.readouterr().err


def test_a_node_not_in_the_inventory_is_a_usage_error(inventory, fakes, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["logs", "-i", str(inventory), "--node", "spark-9"])
    assert exc.value.code == EXIT_USAGE
    assert (
        "--node spark-9: not in the inventory's 'cluster' group (spark-1, spark-2)" in capsys.readouterr().err
    )


def test_help_lists_logs_with_its_exit_codes(capsys):
    with pytest.raises(SystemExit):
        cli.main(["logs", "--help"])
    out = capsys.readouterr().out
    assert "--follow" in out and "--unit {serve,ray,watchdog}" in out
    assert "unreachable: ssh could not reach a node" in out


# --- names and the command line -----------------------------------------------------------


def test_unit_names_follow_the_deployment_naming():
    assert logs.deployment_units("lab", is_head=True) == {
        "ray": "sparkops-lab-ray-head.service",
        "watchdog": "sparkops-lab-watchdog.service",
        "serve": "sparkops-lab-vllm.service",
    }
    assert logs.deployment_units("prod", is_head=False) == {
        "ray": "sparkops-prod-ray-worker.service",
        "watchdog": "sparkops-prod-watchdog.service",
    }
    assert logs.wanted_units("lab", False, ["serve"]) == []
    assert logs.wanted_units("lab", True, []) == [
        "sparkops-lab-vllm.service",
        "sparkops-lab-ray-head.service",
        "sparkops-lab-watchdog.service",
    ]


def test_the_ssh_command_line_is_the_inventorys_connection():
    hostvars = {
        "ansible_host": "172.29.10.11",
        "ansible_user": "root",
        "ansible_port": 2222,
        "ansible_ssh_private_key_file": "/lab/ssh/id_ed25519",
        "ansible_ssh_common_args": "-o UserKnownHostsFile=/lab/ssh/known_hosts -o StrictHostKeyChecking=yes",
    }
    config = {"ssh_args": "-o ServerAliveInterval=15", "timeout": 30, "host_key_checking": True}
    assert logs.connection_argv("spark-1", hostvars, config) == [
        "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=30", "-o", "ServerAliveInterval=15",
        "-o", "IdentityFile=/lab/ssh/id_ed25519", "-o", "IdentitiesOnly=yes", "-p", "2222", "-l", "root",
        "-o", "UserKnownHostsFile=/lab/ssh/known_hosts", "-o", "StrictHostKeyChecking=yes",
        "--", "172.29.10.11",
    ]  # fmt: skip
    unchecked = logs.connection_argv("spark-1", {}, {"host_key_checking": False})
    assert unchecked[-4:] == ["-o", "StrictHostKeyChecking=no", "--", "spark-1"]
    assert logs.connection_argv("spark-1", {"ansible_connection": "local"}, {}) == ["bash", "-c"]
    with pytest.raises(logs.LogsUsageError, match="spark-1: ansible_connection=docker is not supported"):
        logs.connection_argv("spark-1", {"ansible_connection": "docker"}, {})


def remote(fakes, units, **options):
    command = logs.remote_command(
        units, **({"since": None, "lines": None, "follow": False, "sudo": False} | options)
    )
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=False)


def test_remote_command_passes_the_existing_units_and_the_options(fakes):
    done = remote(
        fakes,
        ["sparkops-lab-vllm.service", "sparkops-lab-watchdog.service"],
        since="1h ago",
        lines=5,
    )
    assert done.returncode == 0
    assert done.stdout.splitlines()[0] == (
        "args: --no-pager --output=short-iso --since 1h ago --lines 5 -u sparkops-lab-vllm.service"
    )
    assert done.stderr == "no such unit: sparkops-lab-watchdog.service\n"


def test_remote_command_with_no_existing_unit_says_so(fakes):
    done = remote(fakes, ["sparkops-lab-watchdog.service"])
    assert (done.returncode, done.stdout) == (logs.NO_UNIT_STATUS, "")
    assert done.stderr == "no such unit: sparkops-lab-watchdog.service\n"


def test_remote_command_uses_sudo_for_a_user_other_than_root():
    assert " exec sudo -n journalctl " in logs.remote_command(
        ["u"], since=None, lines=None, follow=True, sudo=True
    )


# --- the CLI end to end (local "nodes") ------------------------------------------------------------


def test_logs_prefixes_every_line_and_redacts_every_secret(inventory, fakes, monkeypatch, capsys):
    monkeypatch.setenv(
        "FAKE_UNITS",
        "sparkops-lab-vllm.service sparkops-lab-ray-head.service sparkops-lab-ray-worker.service",
    )
    code, out, err = run_cli(["logs", "-i", str(inventory), "--unit", "serve", "--unit", "ray"], capsys)
    assert code == EXIT_OK, err
    lines = out.splitlines()
    # The nodes stream side by side: their lines interleave as they come.
    assert (
        "spark-1 | args: --no-pager --output=short-iso --lines 100 "
        "-u sparkops-lab-vllm.service -u sparkops-lab-ray-head.service"
    ) in lines
    assert "spark-1 | 2026-12-01T18:00:00+0000 spark vllm[7]: --api-key [REDACTED] served" in lines
    assert "spark-1 | 2026-12-01T18:00:01+0000 spark vllm[7]: Authorization: Bearer [REDACTED]" in lines
    assert (
        "spark-1 | 2026-12-01T18:00:02+0000 spark vllm[7]: HF_TOKEN=[REDACTED] and [REDACTED] alone" in lines
    )
    assert all(line.startswith(("spark-1 | ", "spark-2 | ")) for line in lines)
    assert API_KEY not in out + err and HF_TOKEN not in out + err
    # spark-2 is a worker: no serve there, and its Ray unit is the worker's
    assert (
        "spark-2 | args: --no-pager --output=short-iso --lines 100 -u sparkops-lab-ray-worker.service"
        in lines
    )
    assert err == ""


def test_a_node_without_the_units_fails_the_run(inventory, fakes, capsys):
    code, _out, err = run_cli(["logs", "-i", str(inventory), "--node", "spark-2", "--unit", "ray"], capsys)
    assert code == EXIT_FAILED
    assert "spark-2 | no such unit: sparkops-lab-ray-worker.service" in err
    assert "spark-2 | none of sparkops-lab-ray-worker.service exists on this node" in err


def test_watchdog_that_does_not_exist_is_reported_per_node(inventory, fakes, capsys):
    code, out, err = run_cli(["logs", "-i", str(inventory), "--unit", "watchdog"], capsys)
    assert code == EXIT_FAILED
    assert out == ""
    for node in ("spark-1", "spark-2"):
        assert f"{node} | no such unit: sparkops-lab-watchdog.service" in err


def test_serve_on_a_worker_only_is_nothing_to_read(inventory, fakes, capsys):
    code, _out, err = run_cli(["logs", "-i", str(inventory), "--node", "spark-2", "--unit", "serve"], capsys)
    assert code == EXIT_FAILED
    assert "spark-2 | serve does not run on this node (serve runs on the head)" in err


def test_a_failing_journalctl_fails_the_run(inventory, fakes, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_JOURNAL_RC", "1")
    assert run_cli(["logs", "-i", str(inventory), "--node", "spark-1"], capsys)[0] == EXIT_FAILED


# --- exit codes and signals -------------------------------------------------------------------


def node(name):
    return logs.Node(name=name, argv_prefix=["bash", "-c"], units=["u"])


def plain(text, _secrets):
    return text


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("exit 0", EXIT_OK),
        ("exit 1", EXIT_FAILED),
        ("exit 255", EXIT_UNREACHABLE),  # ssh's own failure
    ],
)
def test_each_nodes_status_makes_the_exit_code(status, expected):
    out, err = io.StringIO(), io.StringIO()
    scripts = {"spark-1": "echo ok", "spark-2": f"echo 'ssh: connect to host' >&2; {status}"}
    streamer = logs.Streamer([node("spark-1"), node("spark-2")], lambda n: scripts[n.name], plain, out, err)
    assert logs.outcome(streamer.run(), follow=False, stopped=False) == expected
    assert "spark-1 | ok\n" in out.getvalue()
    assert "spark-2 | ssh: connect to host\n" in err.getvalue()
    if expected == EXIT_UNREACHABLE:
        assert "spark-2 | UNREACHABLE (ssh failed; its message is above)" in err.getvalue()


def test_unreachable_wins_over_failed_and_nothing_read_is_failed():
    assert logs.outcome({"a": 1, "b": 255}, follow=False, stopped=False) == EXIT_UNREACHABLE
    assert logs.outcome({}, follow=False, stopped=False) == EXIT_FAILED
    assert logs.outcome({"a": None, "b": None}, follow=True, stopped=True) == EXIT_OK
    assert logs.outcome({"a": None}, follow=False, stopped=True) == EXIT_INTERRUPTED
    assert logs.outcome({"a": 1, "b": None}, follow=True, stopped=True) == EXIT_FAILED


class SignalOnLine(io.StringIO):
    """An output that sends this process a signal once every node has printed ``following``."""

    def __init__(self, sig, nodes):
        super().__init__()
        self.sig, self.waiting, self.sent = sig, set(nodes), False

    def write(self, text):
        self.waiting -= {name for name in self.waiting if text.startswith(f"{name} | following")}
        written = super().write(text)
        if not self.waiting and not self.sent:
            self.sent = True
            os.kill(os.getpid(), self.sig)
        return written


@pytest.fixture
def journal_follow(monkeypatch):
    """Every node prints a line, then waits for more, as journalctl --follow does."""
    monkeypatch.setattr(logs, "remote_command", lambda *_a, **_k: "echo following; exec sleep 600")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_follow_ended_by_a_signal_exits_cleanly(sig, journal_follow):
    out, err = SignalOnLine(sig, ["spark-1", "spark-2"]), io.StringIO()
    previous = signal.getsignal(sig)
    code = logs.stream_logs([node("spark-1"), node("spark-2")], plain, since=None, lines=None, follow=True,
                            out=out, err=err)  # fmt: skip
    assert code == EXIT_OK, err.getvalue()
    assert out.getvalue().count("| following") == 2
    assert err.getvalue() == ""
    assert signal.getsignal(sig) == previous  # the handlers are the caller's again


def test_a_signal_without_follow_is_an_interruption(journal_follow):
    out, err = SignalOnLine(signal.SIGINT, ["spark-1"]), io.StringIO()
    code = logs.stream_logs([node("spark-1")], plain, since=None, lines=None, follow=False, out=out, err=err)
    assert code == EXIT_INTERRUPTED


class ClosedAfterOneLine(io.StringIO):
    """A reader that goes away after its first line, as `sparkops logs | head -1`."""

    def write(self, text):
        if self.getvalue():
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)

    def fileno(self):
        raise io.UnsupportedOperation("no file descriptor")


def test_a_reader_that_goes_away_ends_the_run_quietly(journal_follow):
    out, err = ClosedAfterOneLine(), io.StringIO()
    nodes = [node("spark-1"), node("spark-2")]
    code = logs.stream_logs(nodes, plain, since=None, lines=None, follow=True, out=out, err=err)
    assert code == EXIT_OK
    assert out.getvalue().count("\n") == 1
    assert err.getvalue() == ""


def test_the_redaction_is_the_support_bundles():
    redact = logs.load_redact(ROOT)
    assert redact.__code__.co_filename == str(ROOT / "plugins" / "module_utils" / "_redact.py")
    text = f"--api-key {API_KEY} Authorization: Bearer abcdefghijk {HF_TOKEN} custom-secret-value"
    assert redact(text, ["custom-secret-value"]) == (
        "--api-key [REDACTED] Authorization: Bearer [REDACTED] [REDACTED] [REDACTED]"
    )


@pytest.mark.parametrize(
    ("argv", "since"),
    [
        (["logs", "--since", "-1d"], "-1d"),
        (["logs", "--since", "-30min", "-n", "5"], "-30min"),
        (["logs", "--since=-2h"], "-2h"),
        (["logs", "--since", "1h ago"], "1h ago"),
    ],
)
def test_since_takes_a_relative_time_that_starts_with_a_dash(argv, since):
    args = cli.build_parser().parse_args(cli._join_dash_values(argv))
    assert args.since == since


def test_a_dash_value_is_joined_only_after_since():
    assert cli._join_dash_values(["logs", "-n", "5", "--since", "-1d", "-f"]) == [
        "logs",
        "-n",
        "5",
        "--since=-1d",
        "-f",
    ]
