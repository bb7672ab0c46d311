"""main() of plugins/modules/support_logs_info.py and support_bundle.py with patched exit_json/fail_json."""

import os
import stat
import tarfile

import pytest
import yaml
from ansible_collections.sparkops.vllm.plugins.module_utils import _support_bundle as support
from ansible_collections.sparkops.vllm.plugins.modules import support_bundle, support_logs_info
from conftest import FIXTURES
from test_meminfo_module import run_module

JOURNAL = (FIXTURES / "support_bundle" / "journal_vllm_startup_short.log").read_text()
KEY = "Zq4TgW8rN2vKx7LmP0aB3cD5eF6hJ9sY"


def test_logs_info_reads_files_and_dirs_and_notes_what_is_missing(monkeypatch, tmp_path):
    # No systemd here: unit states come from a patched systemctl, journals from the captured journal.
    def fake_run(argv, timeout=120):
        if argv[0] == "systemctl":
            return (
                0,
                "LoadState=loaded\nActiveState=activating\nSubState=auto-restart\nResult=exit-code\nNRestarts=3\n",
                "",
            )
        return 0, JOURNAL, ""

    monkeypatch.setattr(support, "_run", fake_run)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "raylet.out").write_text("raylet\n")
    (tmp_path / "launch.sh").write_text('exec vllm serve /m --api-key "${VLLM_API_KEY}"\n')
    result = run_module(
        monkeypatch,
        {
            "units": ["sparkops-lab-vllm.service"],
            "files": [str(tmp_path / "launch.sh"), str(tmp_path / "nope.json")],
            "log_dirs": [str(tmp_path / "logs")],
        },
        main=support_logs_info.main,
    )
    assert result["changed"] is False
    assert result["units"] == [
        {
            "unit": "sparkops-lab-vllm.service",
            "load_state": "loaded",
            "active_state": "activating",
            "sub_state": "auto-restart",
            "result": "exit-code",
            "restarts": 3,
        }
    ]
    names = [f["name"] for f in result["files"]]
    assert names == [
        "journal/sparkops-lab-vllm.service.log",
        "config/" + str(tmp_path / "launch.sh").lstrip("/"),
        "ray/raylet.out",
    ]
    assert result["notes"] == [
        {"source": str(tmp_path / "nope.json"), "note": "cannot be read: No such file or directory"}
    ]


def test_logs_info_redacts_on_the_node_before_returning(monkeypatch, tmp_path):
    # Filtered before it is registered: the result holds no secret, by value or by form.
    def fake_run(argv, timeout=120):
        if argv[0] == "systemctl":
            return (
                0,
                "LoadState=loaded\nActiveState=active\nSubState=running\nResult=success\nNRestarts=0\n",
                "",
            )
        return 0, f"non-default args: {{'api_key': ['{KEY}']}}\nkey again {KEY.lower()}\nHF_TOKEN=hf_x\n", ""

    monkeypatch.setattr(support, "_run", fake_run)
    (tmp_path / "serve-secrets.env").write_text(f"VLLM_API_KEY={KEY}\n")
    result = run_module(
        monkeypatch,
        {
            "units": ["sparkops-lab-vllm.service"],
            "files": [str(tmp_path / "serve-secrets.env")],
            "secrets": [KEY],
        },
        main=support_logs_info.main,
    )
    text = repr(result)
    assert KEY not in text and KEY.lower() not in text
    assert "HF_TOKEN=[REDACTED]" in text
    assert "'api_key': [[REDACTED]]" in text


def test_bundle_module_stages_then_packs(monkeypatch, tmp_path):
    staging = str(tmp_path / "support" / ".staging")
    staged = run_module(
        monkeypatch,
        {
            "state": "staged",
            "staging": staging,
            "secrets": [KEY],
            "collected": {
                "spark-1": {"files": [{"name": "journal/x.log", "content": f"--api-key {KEY}\n" + JOURNAL}]}
            },
        },
        main=support_bundle.main,
    )
    assert staged["paths"] == [staging + "/spark-1/journal/x.log"]
    assert staged["path_hosts"] == {staging + "/spark-1/journal/x.log": "spark-1"}
    bundle = str(tmp_path / "support" / "sparkops-lab-x.tar.gz")
    packed = run_module(
        monkeypatch,
        {
            "state": "packed",
            "staging": staging,
            "bundle": bundle,
            "secrets": [KEY],
            "extra_files": {"report.txt": f"key {KEY}"},
        },
        main=support_bundle.main,
    )
    assert packed["bundle"] == bundle and stat.S_IMODE(os.stat(bundle).st_mode) == 0o600
    with tarfile.open(bundle) as tar:
        texts = [tar.extractfile(m).read().decode() for m in tar.getmembers()]
    assert all(KEY not in text for text in texts) and len(texts) == 2


def test_bundle_module_needs_a_bundle_path_to_pack(monkeypatch, tmp_path):
    result = run_module(
        monkeypatch,
        {"state": "packed", "staging": str(tmp_path)},
        expect="fail_json",
        main=support_bundle.main,
    )
    assert "bundle" in result["msg"]


def test_bundle_module_refuses_a_name_that_leaves_staging(monkeypatch, tmp_path):
    result = run_module(
        monkeypatch,
        {
            "state": "staged",
            "staging": str(tmp_path / "s"),
            "collected": {"h": {"files": [{"name": "../../x", "content": ""}]}},
        },
        expect="fail_json",
        main=support_bundle.main,
    )
    assert result["msg"].startswith("support bundle: file name '../../x' leaves")


@pytest.mark.parametrize("module", [support_bundle, support_logs_info])
def test_documentation_parses(module):
    for block in (module.DOCUMENTATION, module.EXAMPLES, module.RETURN):
        assert yaml.safe_load(block)
