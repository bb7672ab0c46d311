# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Reading a log in bounded time and memory, whatever the file is.

Only regular files are read: a FIFO or a character device would block the read (or
never end), a directory cannot be read. The check is made on the opened descriptor
(opened non-blocking, so opening a FIFO with no writer cannot hang), not on the
path, so the file cannot be swapped between the check and the read.

Blocks hold whole lines, as ``_log_lines.iter_path_chunks`` gives them, but a line
longer than :data:`MAX_LINE_BYTES` (a newline-free file, a binary blob) is cut there:
its first bytes are kept as one physical line and the rest, up to the next line
break, is dropped. So memory stays at one block plus one capped line, and line
numbers still match ``grep -n``.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from typing import BinaryIO

# The longest physical line diagnose looks at: real log records stay far below it
# (vLLM's "args: Namespace(...)" line is a few KiB); a longer one keeps its head.
MAX_LINE_BYTES = 64 * 1024
BLOCK_BYTES = 1 << 20

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str) -> BinaryIO:
    """Open ``path`` for reading if it is a regular file; else raise OSError naming what it is."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(
                errno.EINVAL, f"not a regular file ({_kind(mode)}); diagnose reads log files only", path
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def iter_blocks(handle: BinaryIO, size: int = BLOCK_BYTES, max_line: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """Yield blocks of whole lines from ``handle``, each line cut at ``max_line`` bytes.

    Every block but the last ends with ``\\n``. A line longer than ``max_line`` that
    does not end inside the block it starts in is yielded as its first ``max_line``
    bytes plus ``\\n``, and what follows of it is skipped.
    """
    rest = b""
    skipping = False
    while True:
        block = handle.read(size)
        if not block:
            if rest:
                yield rest
            return
        if skipping:
            cut = block.find(b"\n")
            if cut < 0:
                continue
            block = block[cut + 1 :]
            skipping = False
        cut = block.rfind(b"\n")
        if cut < 0:
            rest += block
        else:
            head, rest = rest + block[: cut + 1], block[cut + 1 :]
            yield head
        if len(rest) > max_line:
            yield rest[:max_line] + b"\n"
            rest, skipping = b"", True
