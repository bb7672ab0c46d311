# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The diagnose module's main(): argument handling, check mode, results, failures."""

import json

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.sparkops.vllm.plugins.modules import diagnose
from conftest import FIXTURES

REAL = FIXTURES / "real"
KV_LOG = REAL / "21_vllm_no_available_memory_cache_blocks_and_engine_init_failed_issue27508.txt"


class ExitJson(Exception):
    pass


class FailJson(Exception):
    pass


def exit_json(self, **kwargs):
    kwargs.setdefault("changed", False)
    raise ExitJson(kwargs)


def fail_json(self, **kwargs):
    kwargs["failed"] = True
    raise FailJson(kwargs)


@pytest.fixture(autouse=True)
def patched_module(monkeypatch):
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)


def run(args):
    with patch_module_args(args), pytest.raises((ExitJson, FailJson)) as raised:
        diagnose.main()
    return raised.value.args[0]


def test_paths_report_root_cause_first():
    result = run({"paths": [str(KV_LOG)]})
    assert result["changed"] is False
    assert result["root_cause"] == "kv_cache_insufficient"
    assert [item["id"] for item in result["findings"]] == ["kv_cache_insufficient"]
    assert set(result["findings"][0]) == {"id", "severity", "summary", "fix", "evidence"}
    assert {"line", "text"} <= set(result["findings"][0]["evidence"][0])


def test_content_with_context_in_check_mode():
    content = "This node has an IP address of 10.1.230.180, but we cannot find a local Raylet.\n"
    context = {
        "hosts": {"spark-1": {"ib_address": "192.168.200.12", "management_addresses": ["10.1.230.180"]}}
    }
    result = run({"content": content, "context": context, "_ansible_check_mode": True})
    assert result["changed"] is False
    finding = result["findings"][0]
    assert finding["id"] == "ray_node_ip_mismatch"
    assert finding["severity"] == "error"
    assert "spark-1's management address, not its ib_address 192.168.200.12" in finding["summary"]
    json.dumps(result)


def test_clean_log_has_no_error():
    result = run({"paths": [str(REAL / "28_vllm_v0.10.2_full_memory_sequence_8xL40S_TP8EP.txt")]})
    assert [item for item in result["findings"] if item["severity"] == "error"] == []
    assert result["root_cause"] is None


def test_missing_file_fails_with_the_fix(tmp_path):
    missing = str(tmp_path / "nope.log")
    result = run({"paths": [missing]})
    assert result["failed"] is True
    assert missing in result["msg"]
    assert "content" in result["msg"]


@pytest.mark.parametrize(
    "args",
    [{}, {"content": "x", "paths": ["/tmp/x"]}],
)
def test_exactly_one_input_is_required(args):
    result = run(args)
    assert result["failed"] is True
    assert "content" in result["msg"]
    assert "paths" in result["msg"]
