"""Commands with a time limit: a hung command and its children are killed, and the error names both."""

import sys

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _bounded


def test_a_command_that_answers_returns_its_output():
    assert _bounded.run([sys.executable, "-c", "print('ok')"], timeout=30) == (0, "ok\n", "")


def test_a_hung_command_fails_with_the_command_and_the_bound():
    with pytest.raises(_bounded.CommandTimedOut) as caught:
        _bounded.run(["sleep", "600"], timeout=1)
    assert caught.value.cmd == ["sleep", "600"] and caught.value.seconds == 1
    assert "`sleep 600` did not answer within 1 s" in str(caught.value)


def test_a_child_holding_the_pipes_does_not_keep_the_caller_waiting():
    # bash waits on a backgrounded sleep that inherited stdout: the whole group is killed.
    with pytest.raises(_bounded.CommandTimedOut):
        _bounded.run(["bash", "-c", "sleep 600 & wait"], timeout=1)


def test_a_missing_command_is_rc_127():
    rc, _out, err = _bounded.run(["/nonexistent/nvidia-smi"], timeout=5)
    assert rc == 127 and "nonexistent" in err
