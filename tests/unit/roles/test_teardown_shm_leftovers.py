"""roles/teardown/files/shm_leftovers.py: /dev/shm entries matching the patterns that no process holds."""

import json
import mmap
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "roles" / "teardown" / "files" / "shm_leftovers.py"
SHM = Path("/dev/shm")

pytestmark = pytest.mark.skipif(
    not SHM.is_dir() or not os.access(SHM, os.W_OK), reason="no writable /dev/shm"
)


@pytest.fixture
def prefix():
    tag = f"sparkops-test-{uuid.uuid4().hex[:8]}"
    yield tag
    for path in SHM.glob(f"*{tag}*"):
        path.unlink()


def _run(*patterns):
    out = subprocess.run([sys.executable, str(SCRIPT), *patterns], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def test_only_matching_entries_nobody_holds_are_leftovers(prefix):
    stale = SHM / f"nccl-{prefix}-stale"
    opened = SHM / f"nccl-{prefix}-open"
    mapped = SHM / f"plasma-{prefix}-mapped"
    other = SHM / f"other-{prefix}"
    for path in (stale, opened, mapped, other):
        path.write_bytes(b"\0" * 4096)
    with opened.open("rb"), mapped.open("r+b") as handle:
        view = mmap.mmap(handle.fileno(), 4096)
        result = _run(f"nccl-{prefix}-*", f"plasma-{prefix}-*")
        view.close()
    assert result["leftovers"] == [str(stale)]
    assert sorted(result["held"]) == sorted([str(opened), str(mapped)])


def test_no_match_gives_empty_lists(prefix):
    assert _run(f"nothing-{prefix}-*") == {"leftovers": [], "held": []}
