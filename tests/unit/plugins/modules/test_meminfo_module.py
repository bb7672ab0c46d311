"""main() of plugins/modules/memory_info.py with patched exit_json/fail_json."""

import json

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.sparkops.vllm.plugins.modules import memory_info
from conftest import FIXTURES


class Exited(Exception):
    def __init__(self, how, kwargs):
        super().__init__(how)
        self.how = how
        self.kwargs = kwargs


def run_module(monkeypatch, args, expect="exit_json", main=memory_info.main):
    """Run a module's ``main()`` with ``args``; the kwargs it passed to exit_json or fail_json."""
    for how in ("exit_json", "fail_json"):

        def done(_module, _how=how, **kwargs):
            raise Exited(_how, kwargs)

        monkeypatch.setattr(basic.AnsibleModule, how, done)
    with patch_module_args(args), pytest.raises(Exited) as caught:
        main()
    assert caught.value.how == expect, caught.value.kwargs
    return caught.value.kwargs


def meminfo_file(tmp_path, name):
    lines = (FIXTURES / "meminfo" / name).read_text().splitlines()
    path = tmp_path / "meminfo"
    path.write_text("\n".join(lines[1:]) + "\n")
    return path


def test_reads_the_given_meminfo(monkeypatch, tmp_path):
    result = run_module(monkeypatch, {"meminfo_path": str(meminfo_file(tmp_path, "gb10_dgx_spark.txt"))})
    assert result["changed"] is False
    assert result["memory"]["total_bytes"] == 127600748 * 1024
    assert result["memory"]["available_bytes"] == 118566368 * 1024
    json.dumps(result)


def test_check_mode_reads_the_same(monkeypatch, tmp_path):
    path = str(meminfo_file(tmp_path, "gb10_dgx_spark.txt"))
    normal = run_module(monkeypatch, {"meminfo_path": path})
    checked = run_module(monkeypatch, {"meminfo_path": path, "_ansible_check_mode": True})
    assert checked["memory"] == normal["memory"]


def test_old_kernel_warns(monkeypatch, tmp_path):
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda _module, text: warnings.append(text))
    result = run_module(
        monkeypatch, {"meminfo_path": str(meminfo_file(tmp_path, "old_kernel_no_memavailable.txt"))}
    )
    assert result["memory"]["available_estimated"] is True
    assert len(warnings) == 1


def test_missing_file_fails_with_the_fix(monkeypatch, tmp_path):
    result = run_module(monkeypatch, {"meminfo_path": str(tmp_path / "absent")}, expect="fail_json")
    assert result["msg"].startswith(f"Cannot read {tmp_path / 'absent'}")
    assert "meminfo_path" in result["msg"]


def test_not_a_meminfo_fails(monkeypatch, tmp_path):
    path = tmp_path / "free.txt"
    path.write_text("Mem:    6742351462 6712542003  298094592\n")
    result = run_module(monkeypatch, {"meminfo_path": str(path)}, expect="fail_json")
    assert "lacks MemTotal, MemFree" in result["msg"]


def test_the_real_proc_meminfo(monkeypatch):
    result = run_module(monkeypatch, {})
    assert result["memory"]["total_bytes"] > 0
    assert 0 < result["memory"]["available_bytes"] <= result["memory"]["total_bytes"]
