# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Commands with a time limit: a probe that hangs (nvidia-smi on a wedged driver, docker on a stuck daemon)
fails with the command and the bound instead of hanging the deploy.

The command runs in its own session; on timeout the whole process group is killed, so a child that
keeps the pipes open (nvidia-smi's helpers, docker's plugins) cannot keep the caller waiting either.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess

DEFAULT_TIMEOUT_SECONDS = 30


class CommandTimedOut(Exception):
    """``cmd`` did not finish within ``seconds``; it and its children were killed."""

    def __init__(self, cmd, seconds):
        self.cmd = list(cmd)
        self.seconds = seconds
        super().__init__(
            f"`{shlex.join(self.cmd)}` did not answer within {seconds} s and was killed "
            "(a hung driver or daemon: check it on the node; the bound is the module's timeout option)"
        )


def run(argv, timeout=DEFAULT_TIMEOUT_SECONDS, env_update=None):
    """``(rc, stdout, stderr)`` of argv, text; rc 127 when it is missing; CommandTimedOut past ``timeout``."""
    env = dict(os.environ)
    env.update(env_update or {})
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        return 127, "", str(exc)
    except PermissionError as exc:
        return 126, "", str(exc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.kill()
        # A grandchild that left the group may still hold the pipes: give up on them after 5 s.
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=5)
        raise CommandTimedOut(argv, timeout) from None
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
