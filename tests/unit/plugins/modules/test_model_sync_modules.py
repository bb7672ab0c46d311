"""main() of model_manifest, model_sync_copy and model_sync_synthetic, with patched exit_json/fail_json."""

import json
import os
import stat
import sys

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _model_sync_copy as cp
from ansible_collections.sparkops.vllm.plugins.modules import (
    model_manifest,
    model_sync_copy,
    model_sync_synthetic,
)
from test_meminfo_module import run_module


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "models" / "m"
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"model_type": "x"}')
    (path / "w.safetensors").write_bytes(b"\0" * 4096)
    return path


def test_manifest_writes_once_then_changes_nothing(monkeypatch, model):
    first = run_module(monkeypatch, {"path": str(model)}, main=model_manifest.main)
    assert first["changed"] is True
    assert first["manifest_path"] == str(model.parent / ".m.sparkops-manifest.json")
    assert sorted(first["hashed"]) == ["config.json", "w.safetensors"]
    assert "w.safetensors 4096 " in first["diff"]["after"] and first["diff"]["before"] == ""
    saved = json.loads((model.parent / ".m.sparkops-manifest.json").read_text())
    assert saved["files"]["w.safetensors"]["size"] == 4096
    again = run_module(monkeypatch, {"path": str(model)}, main=model_manifest.main)
    assert again["changed"] is False and again["hashed"] == []
    assert again["diff"]["before"] == again["diff"]["after"]


def test_manifest_check_mode_writes_nothing(monkeypatch, model):
    result = run_module(
        monkeypatch, {"path": str(model), "_ansible_check_mode": True}, main=model_manifest.main
    )
    assert result["changed"] is True
    assert not (model.parent / ".m.sparkops-manifest.json").exists()


def test_manifest_compares_a_worker_copy(monkeypatch, model, tmp_path):
    head = run_module(monkeypatch, {"path": str(model)}, main=model_manifest.main)
    worker = tmp_path / "worker" / "m"
    worker.mkdir(parents=True)
    (worker / "config.json").write_text('{"model_type": "x"}')
    (worker / "w.safetensors").write_bytes(b"\0" * 100)
    result = run_module(
        monkeypatch, {"path": str(worker), "expected": head["manifest"]}, main=model_manifest.main
    )
    assert result["mismatches"] == [
        {"path": "w.safetensors", "reason": "truncated", "expected_size": 4096, "actual_size": 100}
    ]
    assert result["missing_bytes"] == 4096
    assert result["avail_bytes"] > 0


def test_manifest_missing_folder(monkeypatch, tmp_path, model):
    head = run_module(monkeypatch, {"path": str(model)}, main=model_manifest.main)
    absent = str(tmp_path / "nowhere" / "m")
    result = run_module(
        monkeypatch,
        {"path": absent, "expected": head["manifest"], "missing_ok": True},
        main=model_manifest.main,
    )
    assert result["changed"] is False
    assert [m["reason"] for m in result["mismatches"]] == ["missing", "missing"]
    assert not os.path.exists(absent)
    failed = run_module(monkeypatch, {"path": absent}, expect="fail_json", main=model_manifest.main)
    assert "does not exist" in failed["msg"]


FAKE_RSYNC = """#!{python}
import os, signal, sys
files = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--files-from=")][0]
names = open(files).read().split()
if os.environ.get("FAKE_RSYNC_DIE") and "b" in names:
    sys.stderr.write("rsync: connection unexpectedly closed\\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
sys.stdout.write("\\r          0   0%    0.00kB/s    0:00:00")
sys.stdout.write("\\r      1,000 100%  1.00MB/s    0:00:00 (xfr#1, to-chk=0/1)\\n")
"""


@pytest.fixture
def fake_rsync(tmp_path):
    path = tmp_path / "rsync"
    path.write_text(FAKE_RSYNC.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def _copy_args(tmp_path, fake_rsync, files):
    return dict(
        src=str(tmp_path),
        dest="/m",
        host="10.0.0.2",
        files=files,
        sizes={name: 1000 for name in files},
        transport="rsyncd",
        streams=2,
        rsync=fake_rsync,
        rsyncd={"user": "u", "password": "p", "port": 873, "module": "mod"},
        progress_path=str(tmp_path / "progress.log"),
        label="spark-2",
        interval=0.05,
    )


def test_copy_runs_streams_and_reports_progress(tmp_path, fake_rsync):
    result = cp.copy(**_copy_args(tmp_path, fake_rsync, ["a", "b"]))
    assert result["files"] == ["a", "b"] and result["bytes"] == 2000
    assert [s["rc"] for s in result["streams"]] == [0, 0]
    assert all(s["argv"][-1] == "rsync://u@10.0.0.2:873/mod/" for s in result["streams"])
    # The password is in the environment only, never in argv.
    assert not any(a == "p" for s in result["streams"] for a in s["argv"])
    lines = (tmp_path / "progress.log").read_text().splitlines()
    last = json.loads(lines[-1][lines[-1].index("{") :])
    assert last["final"] is True and last["bytes_done"] == 2000 and last["percent"] == 100.0


def test_copy_failure_names_the_stream_and_the_resume(tmp_path, fake_rsync, monkeypatch):
    monkeypatch.setenv("FAKE_RSYNC_DIE", "1")
    with pytest.raises(cp.CopyError) as caught:
        cp.copy(**_copy_args(tmp_path, fake_rsync, ["a", "b"]))
    message, partial = caught.value.args
    assert "1 of 2 rsync stream(s) to spark-2 (10.0.0.2) failed; the first (killed by signal 9)" in message
    assert "was copying b" in message and "connection unexpectedly closed" in message
    assert "a rerun resumes them" in message
    assert sorted(s["rc"] for s in partial["streams"]) == [-9, 0]


def test_copy_module_check_mode_and_nothing_to_do(monkeypatch):
    args = {
        "src": "/m",
        "dest": "/m",
        "host": "10.0.0.2",
        "files": ["a"],
        "sizes": {"a": {"size": 5, "sha256": "x"}},
        "rsyncd_password": "secret",
        "_ansible_check_mode": True,
    }
    result = run_module(monkeypatch, args, main=model_sync_copy.main)
    assert result["changed"] is True and result["bytes"] == 5
    args.update(files=[], _ansible_check_mode=False)
    assert run_module(monkeypatch, args, main=model_sync_copy.main)["changed"] is False
    args.update(files=["zzz"])
    assert (
        "sizes has no entry for zzz"
        in run_module(monkeypatch, args, expect="fail_json", main=model_sync_copy.main)["msg"]
    )


def test_synthetic_module_creates_then_changes_nothing(monkeypatch, tmp_path):
    args = {
        "cache_dir": str(tmp_path / "hub"),
        "repo_id": "lab/t",
        "shards": 2,
        "shard_mib": 1,
        "link": str(tmp_path / "t"),
    }
    checked = run_module(monkeypatch, dict(args, _ansible_check_mode=True), main=model_sync_synthetic.main)
    assert checked["changed"] is True and not (tmp_path / "hub").exists()
    first = run_module(monkeypatch, args, main=model_sync_synthetic.main)
    assert first["changed"] is True and len(first["created"]) == 5
    again = run_module(monkeypatch, args, main=model_sync_synthetic.main)
    assert again["changed"] is False and again["created"] == []
    bad = run_module(
        monkeypatch, dict(args, repo_id="nope"), expect="fail_json", main=model_sync_synthetic.main
    )
    assert "org/name" in bad["msg"]
