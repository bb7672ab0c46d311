# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Open only regular files: a FIFO, a device or a directory given as a path is refused, never waited on.

``open()`` of a FIFO blocks until a writer appears, and reading a character device such as
/dev/zero never ends; a module pointed at one would hang its task. The path is opened with
O_NONBLOCK (which makes opening a FIFO return at once), checked with fstat on the open
descriptor (so a swap between check and open is not possible), and only then read.
/proc and /sys files are regular files and pass.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISSOCK, "a socket"),
)


class NotRegularFile(OSError):
    """The path is not a regular file; ``strerror`` says what it is."""


def _kind(mode):
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def open_regular(path, mode="rb", encoding=None, errors=None):
    """``path`` opened for reading when it is a regular file (links followed); NotRegularFile otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(errno.EINVAL, f"it is {_kind(info.st_mode)}, not a regular file", str(path))
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        return os.fdopen(fd, mode, encoding=encoding, errors=errors)
    except BaseException:
        os.close(fd)
        raise


def read_text(path, max_bytes=16 * 1024 * 1024):
    """The text of a regular file, at most max_bytes of it (UTF-8, bad bytes replaced)."""
    with open_regular(path, "rb") as handle:
        return handle.read(max_bytes).decode("utf-8", "replace")
