"""main() of plugins/modules/deployed_record.py: check mode and diff truthful, a rerun changed=false, mode 0640."""

import json
import stat

from ansible_collections.sparkops.vllm.plugins.modules import deployed_record
from test_meminfo_module import run_module

DATA = {"ref": "sparkops/vllm-lab:ef2343e6f453", "id": "sha256:0123"}


def _args(path, **extra):
    return dict(
        {"path": str(path), "section": "image", "data": DATA, "identity": {"host": "spark-1"}}, **extra
    )


def test_writes_then_reruns_unchanged(monkeypatch, tmp_path):
    path = tmp_path / "deployed.json"
    first = run_module(monkeypatch, _args(path), main=deployed_record.main)
    assert first["changed"] is True
    doc = json.loads(path.read_text())
    assert doc["sections"]["image"]["ref"] == DATA["ref"]
    assert doc["host"] == "spark-1" and doc["schema"] == 1 and doc["recorded_at"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    text = path.read_text()
    second = run_module(monkeypatch, _args(path), main=deployed_record.main)
    assert second["changed"] is False
    assert path.read_text() == text


def test_check_mode_reports_and_writes_nothing(monkeypatch, tmp_path):
    path = tmp_path / "deployed.json"
    checked = run_module(
        monkeypatch, _args(path, _ansible_check_mode=True, _ansible_diff=True), main=deployed_record.main
    )
    assert checked["changed"] is True
    assert not path.exists()
    assert checked["diff"]["before"] == ""
    assert json.loads(checked["diff"]["after"])["sections"]["image"]["id"] == DATA["id"]
    run_module(monkeypatch, _args(path), main=deployed_record.main)
    same = run_module(
        monkeypatch, _args(path, _ansible_check_mode=True, _ansible_diff=True), main=deployed_record.main
    )
    assert same["changed"] is False
    assert same["diff"]["before"] == same["diff"]["after"]
    moved = run_module(
        monkeypatch,
        _args(path, data=dict(DATA, id="sha256:4567"), _ansible_check_mode=True, _ansible_diff=True),
        main=deployed_record.main,
    )
    assert moved["changed"] is True
    assert '"sha256:0123"' in moved["diff"]["before"] and '"sha256:4567"' in moved["diff"]["after"]
    assert '"sha256:0123"' in path.read_text()


def test_a_wrong_mode_alone_is_a_change(monkeypatch, tmp_path):
    path = tmp_path / "deployed.json"
    run_module(monkeypatch, _args(path), main=deployed_record.main)
    path.chmod(0o644)
    result = run_module(monkeypatch, _args(path), main=deployed_record.main)
    assert result["changed"] is True
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_missing_directory_fails_with_the_fix_and_check_mode_reports_it(monkeypatch, tmp_path):
    path = tmp_path / "absent" / "deployed.json"
    failed = run_module(monkeypatch, _args(path), expect="fail_json", main=deployed_record.main)
    assert "ray_cluster_state_dir" in failed["msg"] and str(path.parent) in failed["msg"]
    checked = run_module(monkeypatch, _args(path, _ansible_check_mode=True), main=deployed_record.main)
    assert checked["changed"] is True
