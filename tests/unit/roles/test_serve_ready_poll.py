"""vllm_serve's readiness poll, run for real (bash) with curl and systemctl stood in on PATH.

The poll ends 0 on a 200, 2 when systemd restarted a crashing serve three times, 3 when
/health answers 503 three polls running (vLLM's EngineDeadError: nothing to wait for), and 1
at the timeout. Connection refused (the API server still loading) is waited on.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

ROOT = Path(__file__).parents[3]
READY = ROOT / "roles" / "vllm_serve" / "tasks" / "ready.yml"


def _poll_script():
    tasks = yaml.safe_load(READY.read_text(encoding="utf-8"))
    block = next(t for t in tasks if t.get("name") == "Ready | Wait for /health, the engine loaded")
    poll = next(t for t in block["block"] if t.get("name") == "Ready | Poll /health")
    argv = poll["ansible.builtin.command"]["argv"]
    assert argv[:2] == ["/bin/bash", "-c"]
    return argv[2]


def _run(tmp_path, codes, restarts=None, timeout=60):
    """Run the poll; curl answers ``codes`` in turn (``000``: refused), then the last one."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "codes").write_text("\n".join(codes) + "\n", encoding="utf-8")
    (tmp_path / "restarts").write_text("\n".join(restarts or ["0"]) + "\n", encoding="utf-8")
    # Each call takes the next line of its file (the last one stays).
    take = (
        'f="$1"; first=$(head -n1 "$f"); rest=$(tail -n +2 "$f"); '
        '[ -n "$rest" ] && printf "%s\\n" "$rest" > "$f"; printf "%s" "$first"'
    )
    (bin_dir / "take").write_text(f"#!/bin/bash\n{take}\n", encoding="utf-8")
    (bin_dir / "curl").write_text(
        f'#!/bin/bash\ncode=$(take {tmp_path}/codes)\necho "$@" >> {tmp_path}/curl.log\nprintf "%s" "$code"\n[ "$code" = 000 ] && exit 7\nexit 0\n',
        encoding="utf-8",
    )
    (bin_dir / "systemctl").write_text(f"#!/bin/bash\ntake {tmp_path}/restarts; echo\n", encoding="utf-8")
    (bin_dir / "sleep").write_text("#!/bin/bash\nexit 0\n", encoding="utf-8")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    script = jinja2.Template(_poll_script()).render(
        vllm_serve_ready_timeout_seconds=timeout,
        _vllm_serve_unit="sparkops-lab-vllm.service",
        _vllm_serve_local="http://127.0.0.1:8000",
    )
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["/bin/bash", "-c", script], check=False, env=env, capture_output=True, text=True, timeout=30
    )
    calls = (
        (tmp_path / "curl.log").read_text(encoding="utf-8").splitlines()
        if (tmp_path / "curl.log").exists()
        else []
    )
    return done.returncode, calls


@pytest.mark.parametrize(
    ("codes", "rc", "polls"),
    [
        (["200"], 0, 1),
        (["000", "000", "200"], 0, 3),  # still loading: the port is closed, then it answers
        (["503", "503", "503"], 3, 3),  # the engine is dead
        (["503", "503", "200"], 0, 3),  # two 503s then healthy: not three running
        (["503", "000", "503", "503", "200"], 0, 5),  # a refused poll breaks the run
        (["503", "500", "503", "503", "503"], 3, 5),
    ],
)
def test_the_poll_ends_on_health_or_a_dead_engine(tmp_path, codes, rc, polls):
    got, calls = _run(tmp_path, codes)
    assert got == rc
    assert len(calls) == polls
    assert all(call.endswith("http://127.0.0.1:8000/health") for call in calls)


def test_three_restarts_by_systemd_end_the_wait(tmp_path):
    # NRestarts read at start (1), then after each failed poll: 2, 3, 4 (three more).
    got, calls = _run(tmp_path, ["000"], restarts=["1", "2", "3", "4"])
    assert got == 2
    assert len(calls) == 3


def test_the_timeout_ends_the_wait(tmp_path):
    got, _ = _run(tmp_path, ["000"], timeout=0)
    assert got == 1
