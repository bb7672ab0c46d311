# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Debian's real earlyoom parses the guard's EARLYOOM_ARGS as the plan means them.

The fixtures are earlyoom 1.7's startup lines (Debian 12's package) from
``earlyoom --dryrun`` run on a lab node with the arguments below (each file
names its command). The plan's limit assumes earlyoom's SIGTERM threshold is
``-m``'s first percentage: these show earlyoom reporting exactly that.
"""

import shlex

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._memory_guard import (
    DEFAULT_EARLYOOM_KILL_PERCENT,
    DEFAULT_EARLYOOM_TERM_PERCENT,
    EARLYOOM_AVOID,
    EARLYOOM_PREFER,
    GuardError,
    check_percents,
    earlyoom_args,
    parse_earlyoom_startup,
)
from conftest import FIXTURES

EARLYOOM = FIXTURES / "earlyoom"


def _output(name):
    return "\n".join(line for line in (EARLYOOM / name).read_text().splitlines() if not line.startswith("#"))


def _asked(args):
    """The -m percentages, --prefer and --avoid of an EARLYOOM_ARGS string."""
    argv = shlex.split(args)
    term, kill = (float(x) for x in argv[argv.index("-m") + 1].split(","))
    option = {name: argv[argv.index(name) + 1] if name in argv else None for name in ("--prefer", "--avoid")}
    return {
        "term_percent": term,
        "kill_percent": kill,
        "prefer": option["--prefer"],
        "avoid": option["--avoid"],
    }


def test_the_plans_args_are_what_earlyoom_reports():
    got = parse_earlyoom_startup(_output("dryrun_plan_args_v1.7_debian12.txt"))
    asked = _asked(earlyoom_args())
    assert {key: got[key] for key in asked} == asked
    assert asked == {
        "term_percent": DEFAULT_EARLYOOM_TERM_PERCENT,
        "kill_percent": DEFAULT_EARLYOOM_KILL_PERCENT,
        "prefer": EARLYOOM_PREFER,
        "avoid": EARLYOOM_AVOID,
    }
    assert got["dryrun"] and got["warnings"] == []
    assert got["version"] == "1.7"
    assert got["mem_total_mib"] == 24105


def test_other_thresholds_are_reported_as_given():
    got = parse_earlyoom_startup(_output("dryrun_7.5_3_v1.7_debian12.txt"))
    assert (got["term_percent"], got["kill_percent"]) == (7.5, 3.0)
    assert got["prefer"] is None and got["avoid"] is None
    assert got["dryrun"]


def test_earlyoom_silently_moves_a_term_below_kill_so_the_guard_refuses_it_first():
    # earlyoom would run with SIGTERM at 5 %, not the 4 % a plan's limit assumed.
    got = parse_earlyoom_startup(_output("term_below_kill_v1.7_debian12.txt"))
    assert got["term_percent"] == 5.0 and got["warnings"]
    assert not got["dryrun"]
    with pytest.raises(GuardError, match="earlyoom_kill_percent 5 is above earlyoom_term_percent 4"):
        check_percents(4, 5)


def test_output_without_thresholds_is_refused():
    with pytest.raises(GuardError, match="no SIGTERM threshold"):
        parse_earlyoom_startup("earlyoom: cannot open /proc/meminfo")
