"""`sparkops upgrade` and `sparkops rollback`: options, the -e they become, refusals, the shown command, a run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# At collection, as every plugin test does: once test_logs has set up Ansible's collection
# loader in this process, a first import of a module of the collection goes through it.
from ansible_collections.sparkops.vllm.plugins.module_utils import _upgrade
from conftest import write_local_project

from sparkops_cli import cli
from sparkops_cli.events import EXIT_OK, EXIT_USAGE
from sparkops_cli.project import PLAYBOOKS

IMAGE = "example/vllm-spark:0.17.1"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def upgrade_vars(argv: list[str], cwd: Path | None = None) -> dict:
    parser = cli.build_parser()
    args = parser.parse_args(argv)
    values = cli.upgrade_extra_vars(args, parser, _upgrade, cwd)
    assert len(values) == 1
    return json.loads(values[0])


def test_the_commands_and_their_playbooks():
    assert PLAYBOOKS["upgrade"] == "playbooks/upgrade.yml"
    assert PLAYBOOKS["rollback"] == "playbooks/rollback.yml"
    assert set(cli.COMMANDS) == set(PLAYBOOKS)


@pytest.mark.parametrize(
    ("argv", "values"),
    [
        (["upgrade", "--image", IMAGE], {"upgrade_command": "upgrade", "upgrade_image_ref": IMAGE}),
        (
            ["upgrade", "--image", "registry.lab:5000/vllm@sha256:" + "a" * 64, "--check"],
            {"upgrade_command": "upgrade", "upgrade_image_ref": "registry.lab:5000/vllm@sha256:" + "a" * 64},
        ),
        (
            ["upgrade", "--vllm-version", "0.17.1"],
            {"upgrade_command": "upgrade", "upgrade_vllm_version": "0.17.1"},
        ),
        (
            ["upgrade", "--vllm-version", "0.11.0rc1"],
            {"upgrade_command": "upgrade", "upgrade_vllm_version": "0.11.0rc1"},
        ),
        (
            ["upgrade", "--vllm-version", "0.10.1.post1"],
            {"upgrade_command": "upgrade", "upgrade_vllm_version": "0.10.1.post1"},
        ),
        (["upgrade", "--confirm"], {"upgrade_command": "confirm"}),
        (["upgrade", "--confirm", "--check"], {"upgrade_command": "confirm"}),
        (
            ["upgrade", "--model-revision", "main"],
            {"upgrade_command": "upgrade", "upgrade_model_revision": "main"},
        ),
        (
            ["upgrade", "--image", IMAGE, "--model-revision", COMMIT],
            {"upgrade_command": "upgrade", "upgrade_image_ref": IMAGE, "upgrade_model_revision": COMMIT},
        ),
        (
            ["upgrade", "--vllm-version", "0.17.1", "--model-revision", "refs/pr/3"],
            {
                "upgrade_command": "upgrade",
                "upgrade_vllm_version": "0.17.1",
                "upgrade_model_revision": "refs/pr/3",
            },
        ),
    ],
)
def test_options_become_the_upgrade_playbooks_variables(argv, values):
    assert upgrade_vars(argv) == values


def test_an_archive_is_sent_as_an_absolute_path(tmp_path, monkeypatch):
    (tmp_path / "images").mkdir()
    archive = tmp_path / "images" / "vllm.tar"
    archive.write_bytes(b"tar")
    expected = {
        "upgrade_command": "upgrade",
        "upgrade_image_ref": IMAGE,
        "upgrade_image_archive": str(archive),
    }
    assert upgrade_vars(["upgrade", "--image", IMAGE, "--archive", "images/vllm.tar"], tmp_path) == expected
    assert upgrade_vars(["upgrade", "--image", IMAGE, "--archive", str(archive)], Path("/")) == expected
    monkeypatch.chdir(tmp_path / "images")
    assert upgrade_vars(["upgrade", "--archive", "../images/vllm.tar", "--image", IMAGE]) == expected
    (tmp_path / "link.tar").symlink_to(archive)
    assert upgrade_vars(["upgrade", "--image", IMAGE, "--archive", "../link.tar"]) == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["upgrade"], "sparkops upgrade needs --image REF or --vllm-version V"),
        (["upgrade", "--check"], "sparkops upgrade needs --image REF or --vllm-version V"),
        (["upgrade", "--archive", "vllm.tar"], "sparkops upgrade needs --image REF"),
        (["upgrade", "--image", IMAGE, "--vllm-version", "0.17.1"], "not allowed with argument --image"),
        (["upgrade", "--confirm", "--image", IMAGE], "not allowed with argument --confirm"),
        (["upgrade", "--vllm-version", "0.17.1", "--confirm"], "not allowed with argument --vllm-version"),
        (["upgrade", "--confirm", "--archive", "vllm.tar"], "--confirm takes no other upgrade option"),
        (["upgrade", "--confirm", "--model-revision", "main"], "--confirm takes no other upgrade option"),
        (["upgrade", "--vllm-version", "0.17.1", "--archive", "vllm.tar"], "--archive goes with --image REF"),
        (["upgrade", "--model-revision", "main", "--archive", "vllm.tar"], "--archive goes with --image REF"),
        (["upgrade", "--image", ""], "--image '' is not a Docker image reference"),
        (
            ["upgrade", "--image", "Example/VLLM:1"],
            "--image 'Example/VLLM:1' is not a Docker image reference",
        ),
        (["upgrade", "--image", "vllm spark:1"], "is not a Docker image reference"),
        (["upgrade", "--image", "vllm:a:b"], "is not a Docker image reference"),
        (["upgrade", "--vllm-version", "v0.17.1"], "--vllm-version 'v0.17.1' is not a vLLM release version"),
        (["upgrade", "--vllm-version", "0.17"], "is not a vLLM release version"),
        (["upgrade", "--vllm-version", "latest"], "is not a vLLM release version"),
        (["upgrade", "--vllm-version", "0.17.1+cu130"], "is not a vLLM release version"),
        (["upgrade", "--vllm-version", ""], "is not a vLLM release version"),
        (
            ["upgrade", "--model-revision", "main branch"],
            "--model-revision 'main branch' is not a Hugging Face",
        ),
        (["upgrade", "--model-revision", "ma\tin"], "is not a Hugging Face revision"),
        (["upgrade", "--model-revision", "main\x1b[2J"], "is not a Hugging Face revision"),
        (["upgrade", "--model-revision=-rf"], "is not a Hugging Face revision"),
        (["upgrade", "--image", IMAGE, "--model-revision", "../../etc"], "is not a Hugging Face revision"),
        (["upgrade", "--model-revision", ""], "is not a Hugging Face revision"),
        (["rollback", "--image", IMAGE], "unrecognized arguments: --image"),
        (["rollback", "--confirm"], "unrecognized arguments: --confirm"),
    ],
)
def test_usage_errors_exit_4_and_say_why(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert "usage: sparkops" in err
    assert message in err


@pytest.mark.parametrize(("make", "problem"), [(None, "does not exist"), ("dir", "is not a regular file")])
def test_an_archive_that_is_no_file_is_refused_by_name(tmp_path, monkeypatch, capsys, make, problem):
    monkeypatch.chdir(tmp_path)
    if make == "dir":
        (tmp_path / "vllm.tar").mkdir()
    with pytest.raises(SystemExit) as exc:
        upgrade_vars(["upgrade", "--image", IMAGE, "--archive", "vllm.tar"])
    assert exc.value.code == EXIT_USAGE
    assert f"--archive vllm.tar: {tmp_path / 'vllm.tar'} {problem}" in capsys.readouterr().err


def test_a_fifo_is_no_archive(tmp_path, monkeypatch, capsys):
    import os  # noqa: PLC0415

    os.mkfifo(tmp_path / "vllm.tar")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        upgrade_vars(["upgrade", "--image", IMAGE, "--archive", "vllm.tar"])
    assert "is not a regular file" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (
            ["upgrade", "--image", IMAGE, "--archive", "vllm.tar", "-i", "hosts.yml", "--check", "--json"],
            ["upgrade", "--image", IMAGE, "--archive", "vllm.tar", "-i", "hosts.yml", "--check", "--json"],
        ),
        (
            ["upgrade", "--model-revision", "main", "--vllm-version", "0.17.1"],
            ["upgrade", "--vllm-version", "0.17.1", "--model-revision", "main"],
        ),
        (["upgrade", "--confirm", "--check"], ["upgrade", "--confirm", "--check"]),
        (["rollback", "--check", "--artifacts", "runs/r"], ["rollback", "--check", "--artifacts", "runs/r"]),
    ],
)
def test_the_shown_command_has_the_subcommands_own_options(argv, shown):
    args = cli.build_parser().parse_args(argv)
    assert cli.redacted_argv(args, []) == ["sparkops", *shown]


def test_the_shown_command_keeps_the_users_redacted_e():
    args = cli.build_parser().parse_args(["upgrade", "--image", IMAGE, "-e", "sparkops_api_key=x"])
    assert cli.redacted_argv(args, ["sparkops_api_key=<redacted>"]) == [
        "sparkops",
        "upgrade",
        "--image",
        IMAGE,
        "-e",
        "sparkops_api_key=<redacted>",
    ]


def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit):
        cli.main(["upgrade", "--help"])
    out = capsys.readouterr().out
    for option in ("--image REF", "--vllm-version V", "--confirm", "--archive PATH", "--model-revision REV"):
        assert option in out
    assert "4    usage error:" in out


# -- a real run: the variables as the playbook sees them ---------------------------

UPGRADE_PLAYBOOK = """\
- name: Upgrade · what the CLI asked for
  hosts: alpha
  gather_facts: false
  tasks:
    - name: The variables as Ansible merged them
      ansible.builtin.assert:
        that:
          - upgrade_command == 'upgrade'
          - upgrade_image_ref == 'example/vllm-spark:0.17.1'
          - upgrade_image_archive == archive
          - upgrade_model_revision == 'main'
          - kept_from_e == 'mine'
          - ansible_check_mode
        quiet: true
    - name: Report
      ansible.builtin.debug:
        msg: "upgrade to {{ upgrade_image_ref }} from {{ upgrade_image_archive }}"
"""

ROLLBACK_PLAYBOOK = """\
- name: Rollback · no variables from the CLI
  hosts: alpha
  gather_facts: false
  tasks:
    - name: Nothing asked
      ansible.builtin.assert:
        that:
          - upgrade_command is not defined
          - not ansible_check_mode
        quiet: true
"""


ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def project(tmp_path):
    """A checkout with the two playbooks; its .collections links to this repository, as a clone's does."""
    root = tmp_path / "project"
    (root / "playbooks").mkdir(parents=True)
    (root / ".collections" / "ansible_collections" / "sparkops").mkdir(parents=True)
    (root / ".collections" / "ansible_collections" / "sparkops" / "vllm").symlink_to(ROOT)
    (root / "galaxy.yml").write_text("namespace: sparkops\nname: vllm\nversion: 0.0.1\n")
    (root / "deploy.yml").write_text("[]\n")
    write_local_project(root)
    (root / "playbooks" / "upgrade.yml").write_text(UPGRADE_PLAYBOOK)
    (root / "playbooks" / "rollback.yml").write_text(ROLLBACK_PLAYBOOK)
    return root


def sparkops(project: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    """The command in its own process, as a user runs it (progress on stderr, the answer on stdout)."""
    env = {key: value for key, value in os.environ.items() if key != "ANSIBLE_CONFIG"}
    env.update(SPARKOPS_PROJECT_DIR=str(project), PYTHONPATH=str(ROOT / "src"))
    return subprocess.run(
        [sys.executable, "-m", "sparkops_cli", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_run_gets_the_options_over_the_users_e_in_check_mode(project, tmp_path):
    (tmp_path / "vllm.tar").write_bytes(b"tar")
    user_e = {
        "upgrade_command": "confirm",
        "upgrade_image_ref": "other/image:1",
        "kept_from_e": "mine",
        "archive": str(tmp_path / "vllm.tar"),
    }
    argv = ["upgrade", "--image", IMAGE, "--archive", "vllm.tar", "--model-revision", "main"]
    artifacts = str(tmp_path / "run")
    done = sparkops(
        project, tmp_path, *argv, "-e", json.dumps(user_e), "--check", "--json", "--artifacts", artifacts
    )
    doc = json.loads(done.stdout)
    assert (done.returncode, doc["outcome"], doc["exit_code"], doc["check"]) == (
        EXIT_OK,
        "ok",
        EXIT_OK,
        True,
    ), done.stderr
    assert doc["playbook"] == "playbooks/upgrade.yml"
    shown_e = json.dumps(user_e, sort_keys=True)
    assert doc["argv"] == ["sparkops", *argv, "--check", "-e", shown_e, "--json", "--artifacts", artifacts]
    assert f"upgrade to {IMAGE} from {tmp_path / 'vllm.tar'}" in done.stderr  # the playbook's report is shown


def test_rollback_runs_its_playbook_with_no_variables(project, tmp_path):
    done = sparkops(project, tmp_path, "rollback", "--artifacts", str(tmp_path / "run"))
    assert done.returncode == EXIT_OK, done.stderr
    assert "result: ok (exit 0)" in done.stdout
    assert "sparkops rollback: playbooks/rollback.yml" in done.stderr


def test_a_refused_option_runs_nothing(project, tmp_path):
    done = sparkops(
        project, tmp_path, "upgrade", "--vllm-version", "v0.17.1", "--artifacts", str(tmp_path / "run")
    )
    assert done.returncode == EXIT_USAGE
    assert "--vllm-version 'v0.17.1' is not a vLLM release version" in done.stderr
    assert not (tmp_path / "run").exists()
