"""Argument parsing, usage errors (exit 4) and the help text's exit codes."""

from __future__ import annotations

import pytest

from sparkops_cli import cli
from sparkops_cli.events import EXIT_USAGE
from sparkops_cli.project import PLAYBOOKS


@pytest.mark.parametrize("command", sorted(PLAYBOOKS))
def test_every_command_parses_the_common_options(command):
    args = cli.build_parser().parse_args(
        [command, "-i", "inv/a.yml", "-i", "inv/b.yml", "--check", "-e", "a=1", "-e", '{"b": 2}', "--json"]
    )
    assert args.command == command
    assert args.inventory == ["inv/a.yml", "inv/b.yml"]
    assert args.check is True
    assert args.extra_vars == ["a=1", '{"b": 2}']
    assert args.json is True


def test_defaults_run_against_ansible_cfg_inventory():
    args = cli.build_parser().parse_args(["status"])
    assert args.inventory == []
    assert (args.check, args.json, args.artifacts) == (False, False, None)


def test_diagnose_takes_files():
    args = cli.build_parser().parse_args(["diagnose", "a.log", "b.log", "--json"])
    assert args.files == ["a.log", "b.log"]
    assert cli.build_parser().parse_args(["diagnose"]).files == []


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["launch"],
        ["status", "--bogus"],
        ["status", "-e"],
        ["status", "-e", "./vars.yml"],  # ansible-playbook wants @./vars.yml
        ["status", "-e", "just-a-word"],
        ["status", "-e", "[1, 2]"],
        ["status", "-e", "{not: [closed"],
        ["status", "-e", "@/nonexistent/vars.yml"],
        ["status", "-i", "/nonexistent/hosts.yml"],
        ["status", "--context", "ctx.json"],
        ["diagnose", "-i", "inventory/lab/hosts.yml", "some.log"],
        ["diagnose", "--check", "some.log"],
        ["diagnose", "/nonexistent/serve.log"],
    ],
)
def test_usage_errors_exit_4(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == EXIT_USAGE
    assert "usage: sparkops" in capsys.readouterr().err


def test_help_documents_the_exit_codes(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for line in ("0    ok:", "2    changed:", "1    failed:", "3    unreachable:", "4    usage error:"):
        assert line in out
    assert "this wins over failed" in out
    for command in PLAYBOOKS:
        assert command in out


def test_redacted_argv_shows_what_was_asked_without_secrets():
    args = cli.build_parser().parse_args(["deploy", "--check", "-e", "x", "--json"])
    assert cli.redacted_argv(args, ["sparkops_api_key=<redacted>"]) == [
        "sparkops",
        "deploy",
        "--check",
        "-e",
        "sparkops_api_key=<redacted>",
        "--json",
    ]


def test_fabric_writes_its_report_into_the_run_directory(tmp_path):
    from sparkops_cli.run import PlaybookRun  # noqa: PLC0415

    assert PLAYBOOKS["fabric"] == "playbooks/fabric_check.yml"
    run = PlaybookRun(
        command="fabric",
        project=tmp_path,
        playbook=PLAYBOOKS["fabric"],
        run_dir=tmp_path / "r",
        display_argv=["sparkops", "fabric"],
    )
    assert run.report_vars() == {
        "fabric_check_json_path": str(tmp_path / "r" / "fabric.json"),
        "fabric_check_markdown_path": str(tmp_path / "r" / "fabric.md"),
    }
    args = cli.build_parser().parse_args(["fabric", "--check", "-i", "hosts.yml"])
    assert (args.command, args.check, args.inventory) == ("fabric", True, ["hosts.yml"])


@pytest.mark.parametrize(
    ("argv", "values"),
    [
        (["watchdog"], {"watchdog_command": "status"}),
        (["watchdog", "status"], {"watchdog_command": "status"}),
        (["watchdog", "resume", "--check"], {"watchdog_command": "resume"}),
        (
            ["watchdog", "pause", "--reason", "firmware update"],
            {"watchdog_command": "pause", "watchdog_pause_reason": "firmware update"},
        ),
    ],
)
def test_watchdog_actions_become_the_control_playbooks_variables(argv, values):
    import json  # noqa: PLC0415

    parser = cli.build_parser()
    args = parser.parse_args(argv)
    assert PLAYBOOKS["watchdog"] == "playbooks/watchdog_control.yml"
    assert [json.loads(item) for item in cli.watchdog_extra_vars(args, parser)] == [values]
    assert cli.redacted_argv(args, [])[:3] == ["sparkops", "watchdog", values["watchdog_command"]]


@pytest.mark.parametrize("argv", [["watchdog", "stop"], ["watchdog", "resume", "--reason", "x"]])
def test_watchdog_usage_errors_exit_4(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == EXIT_USAGE


@pytest.mark.parametrize(
    ("command", "playbook", "report_vars"),
    [
        ("bench", "playbooks/bench.yml", {"bench_report_dir": "bench"}),
        ("probe", "playbooks/probe.yml", {"correctness_probe_json_path": "probe.json"}),
    ],
)
def test_bench_and_probe_write_their_reports_into_the_run_directory(tmp_path, command, playbook, report_vars):
    from sparkops_cli.run import PlaybookRun  # noqa: PLC0415

    assert PLAYBOOKS[command] == playbook
    run = PlaybookRun(
        command=command,
        project=tmp_path,
        playbook=playbook,
        run_dir=tmp_path / "r",
        display_argv=["sparkops"],
    )
    assert run.report_vars() == {name: str(tmp_path / "r" / rel) for name, rel in report_vars.items()}
    args = cli.build_parser().parse_args([command, "-i", "hosts.yml"])
    assert args.command == command
