"""scripts/setup's version step: the first line of `ansible --version`, and no traceback.

`ansible --version | head -1` made ansible write into a pipe that head had
already closed: "[Errno 32] Broken pipe" and a Python traceback on the first
lines of `make deploy` and `make test` (issue 20).
"""

import subprocess
import sys
from pathlib import Path

from conftest import ROOT

SETUP = ROOT / "scripts" / "setup"


def _first_line(*argv: str) -> subprocess.CompletedProcess:
    # Sourced, scripts/setup only defines its functions (it installs nothing).
    return subprocess.run(
        ["bash", "-c", 'source "$1" && shift && first_line "$@"', "bash", str(SETUP), *argv],
        capture_output=True,
        text=True,
        check=False,
    )


def test_ansible_version_step_prints_the_first_line_and_no_traceback():
    ansible = Path(sys.executable).parent / "ansible"
    done = _first_line(str(ansible), "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ansible [core "), done.stdout
    assert done.stdout.count("\n") == 1
    assert "Traceback" not in done.stderr
    assert "Broken pipe" not in done.stderr


def test_a_writer_of_many_lines_is_read_to_its_end(tmp_path):
    # A writer that flushes line by line and fails on a closed pipe, as ansible
    # does: with `| head -1` it dies with EPIPE; read to its end it does not.
    writer = tmp_path / "writer"
    writer.write_text(
        f"#!{sys.executable}\nimport sys\nfor i in range(20000):\n    print(f'line {{i}}', flush=True)\n"
    )
    writer.chmod(0o755)
    done = _first_line(str(writer))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "line 0\n"
    assert done.stderr == ""


def test_setup_pipes_no_command_into_head():
    lines = [line for line in SETUP.read_text().splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in lines if "| head" in line]
    assert "first_line .venv/bin/ansible --version" in lines[-1]
