"""Paths that are not regular files are refused at once, never waited on (a FIFO would block open())."""

import os
import socket

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _safe_read, _support_bundle
from test_meminfo_module import run_module


def _fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def _socket(tmp_path):
    path = tmp_path / "sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    return path


KINDS = [
    (_fifo, "a FIFO"),
    (lambda tmp_path: tmp_path, "a directory"),
    (lambda tmp_path: "/dev/zero", "a character device"),
    (lambda tmp_path: "/dev/null", "a character device"),
    (_socket, None),  # a socket cannot even be opened: refused all the same
]


@pytest.mark.parametrize(("make", "what"), KINDS)
def test_open_regular_refuses_what_is_not_a_regular_file(tmp_path, make, what):
    with pytest.raises(OSError) as caught:
        _safe_read.read_text(make(tmp_path))
    if what:
        assert isinstance(caught.value, _safe_read.NotRegularFile)
        assert what in caught.value.strerror


def test_a_link_to_a_fifo_is_refused_too(tmp_path):
    link = tmp_path / "link"
    link.symlink_to(_fifo(tmp_path))
    with pytest.raises(_safe_read.NotRegularFile):
        _safe_read.read_text(link)


def test_regular_and_proc_files_are_read(tmp_path):
    (tmp_path / "f").write_text("x" * 10)
    assert _safe_read.read_text(tmp_path / "f", max_bytes=4) == "xxxx"
    assert "MemTotal" in _safe_read.read_text("/proc/meminfo")


@pytest.mark.parametrize(("make", "what"), KINDS[:3])
def test_memory_info_fails_on_a_fifo_or_device_with_what_it_is(monkeypatch, tmp_path, make, what):
    path = str(make(tmp_path))
    result = run_module(monkeypatch, {"meminfo_path": path}, expect="fail_json")
    assert path in result["msg"] and what in result["msg"]


def test_support_files_note_a_fifo_instead_of_hanging(tmp_path):
    files, notes = _support_bundle.collect_files([str(_fifo(tmp_path))], 1024)
    assert files == []
    assert "a FIFO" in notes[0]["note"]


# Every other reader of a path an operator or a node can plant: given a FIFO it refuses
# at once instead of blocking in open() (issue 14: modules refuse paths that are not
# regular files).
def _manifest_reader(path):
    from ansible_collections.sparkops.vllm.plugins.module_utils import _model_manifest  # noqa: PLC0415

    return _model_manifest.sha256_file(str(path))


def _model_config_reader(path):
    from ansible_collections.sparkops.vllm.plugins.module_utils import _memory_plan_model  # noqa: PLC0415

    return _memory_plan_model.load_model_config(str(path))


@pytest.mark.parametrize(
    "reader", [_manifest_reader, _model_config_reader], ids=["sha256_file", "model_config"]
)
def test_the_model_readers_refuse_a_fifo(tmp_path, reader):
    with pytest.raises(Exception) as caught:  # each reader wraps the refusal its own way
        reader(_fifo(tmp_path))
    assert "not a regular file" in str(caught.value)


def test_a_manifest_that_is_a_fifo_counts_as_no_manifest(tmp_path):
    from ansible_collections.sparkops.vllm.plugins.module_utils import _model_manifest  # noqa: PLC0415

    assert _model_manifest.load_manifest(str(_fifo(tmp_path)))["files"] == {}
