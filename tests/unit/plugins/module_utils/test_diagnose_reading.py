# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""diagnose reads any file in bounded time and memory, and refuses what is not a file."""

import io
import os
import tracemalloc

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose import (
    diagnose_paths,
    diagnose_stream,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.precedence import MAX_EVIDENCE_CHARS
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.reading import (
    MAX_LINE_BYTES,
    iter_blocks,
)

from sparkops_cli import cli
from sparkops_cli.events import EXIT_USAGE

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "serve.log"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file \\(a FIFO\\)") as raised:
        diagnose_paths([str(fifo)])
    assert raised.value.filename == str(fifo)


@pytest.mark.parametrize(("path", "kind"), [("/dev/null", "a character device"), ("/", "a directory")])
def test_devices_and_directories_are_refused(path, kind):
    with pytest.raises(OSError, match=f"\\({kind}\\)"):
        diagnose_paths([path])


def test_the_cli_names_the_fifo(tmp_path, capsys):
    fifo = tmp_path / "serve.log"
    os.mkfifo(fifo)
    with pytest.raises(SystemExit) as raised:
        cli.main(["diagnose", str(fifo)])
    assert raised.value.code == EXIT_USAGE
    assert f"cannot read {fifo}: not a regular file (a FIFO)" in capsys.readouterr().err


def test_a_newline_free_file_reads_in_bounded_memory(tmp_path):
    log = tmp_path / "blob.log"
    size = 24 * (1 << 20)
    with open(log, "wb") as out:
        out.write(OOM.encode() + b" ")
        chunk = b"x" * (1 << 20)
        for _ in range(size // len(chunk)):
            out.write(chunk)
    tracemalloc.start()
    result = diagnose_paths([str(log)])
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert result["lines_read"] == 1
    assert [item["id"] for item in result["findings"]] == ["cuda_oom"]
    # One block and one capped line, not the file.
    assert peak < 6 * (1 << 20)


def test_an_overlong_line_keeps_the_line_numbers(tmp_path):
    log = tmp_path / "serve.log"
    log.write_bytes(b"INFO start\n" + b"y" * (3 * MAX_LINE_BYTES + 17) + b"\n" + OOM.encode() + b"\n")
    result = diagnose_paths([str(log)])
    assert result["lines_read"] == 3
    assert result["findings"][0]["evidence"][0]["line"] == 3


def test_blocks_cut_each_line_at_the_cap():
    data = b"a\n" + b"b" * 300 + b"\nc\n" + b"d" * 50
    got = b"".join(iter_blocks(io.BytesIO(data), size=64, max_line=100))
    assert got.split(b"\n") == [b"a", b"b" * 100, b"c", b"d" * 50]


def test_standard_input_is_read_the_same_bounded_way():
    stream = io.BytesIO(b"x" * (5 * MAX_LINE_BYTES) + b"\n" + OOM.encode() + b"\n")
    result = diagnose_stream(stream)
    assert result["lines_read"] == 2
    assert result["findings"][0]["evidence"][0]["line"] == 2


def test_evidence_lines_are_capped(tmp_path):
    log = tmp_path / "serve.log"
    log.write_text(OOM + " " + "z" * (3 * MAX_EVIDENCE_CHARS) + "\n", encoding="utf-8")
    text = diagnose_paths([str(log)])["findings"][0]["evidence"][0]["text"]
    assert text.startswith("torch.OutOfMemoryError")
    assert len(text) <= MAX_EVIDENCE_CHARS + len(" [...]")
