# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Debian's real earlyoom parses the guard's EARLYOOM_ARGS as the plan means them.

The fixtures are earlyoom 1.7's startup lines (Debian 12's package) from
``earlyoom --dryrun`` run on a lab node with the arguments below (each file
names its command). The plan's limit assumes earlyoom's SIGTERM threshold is
``-m``'s first percentage: these show earlyoom reporting exactly that.
"""

import re
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
    earlyoom_badness,
    parse_earlyoom_startup,
    parse_earlyoom_victims,
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


# ------------------------------------------------------------------ the victim on a serving lab node

OLD_PREFER = r"^(ray::.*|VLLM::.*|vllm|pt_main_thread)$"  # until 2026-12-02


def _processes(node):
    rows = []
    for line in (EARLYOOM / f"comm_lab_{node}_serving.tsv").read_text().splitlines():
        if line.startswith("#"):
            continue
        pid, comm, _rss_kb, oom_score, _oom_adj, argv0 = line.split("\t")
        rows.append({"pid": int(pid), "comm": comm, "oom_score": int(oom_score), "argv0": argv0})
    return rows


@pytest.mark.parametrize("node", ["spark-1", "spark-2"])
def test_dryrun_on_a_serving_node_picks_the_ray_gpu_worker(node):
    """earlyoom's real choice with the plan's regexes, and the same choice from its badness rule."""
    text = _output(f"dryrun_victim_lab_{node}_v1.7.txt")
    startup = parse_earlyoom_startup(text)
    assert (startup["prefer"], startup["avoid"]) == (EARLYOOM_PREFER, EARLYOOM_AVOID)
    victims = parse_earlyoom_victims(text)
    assert victims, "earlyoom chose no victim"
    assert {v["comm"] for v in victims} == {"ray::RayWorkerW"}
    rows = _processes(node)
    holder = next(r for r in rows if r["pid"] == victims[0]["pid"])
    assert holder["argv0"] == "ray::RayWorkerWrapper"  # the vLLM rank's Ray actor
    ranked = sorted(rows, key=lambda r: earlyoom_badness(r["comm"], r["oom_score"]), reverse=True)
    assert ranked[0]["pid"] == victims[0]["pid"]
    assert earlyoom_badness(holder["comm"], holder["oom_score"]) == victims[0]["badness"]


@pytest.mark.parametrize("node", ["spark-1", "spark-2"])
def test_no_avoided_process_ranks_above_one_that_is_not(node):
    rows = _processes(node)
    avoided = [r for r in rows if re.search(EARLYOOM_AVOID, r["comm"])]
    others = [r for r in rows if not re.search(EARLYOOM_AVOID, r["comm"])]
    assert {r["comm"] for r in avoided} >= {"sshd", "systemd", "dockerd", "raylet", "ray", "ray::DashboardA"}
    top_avoided = max(earlyoom_badness(r["comm"], r["oom_score"]) for r in avoided)
    assert all(earlyoom_badness(r["comm"], r["oom_score"]) > top_avoided for r in others)


def test_rays_agents_are_avoided_because_the_raylet_fate_shares_with_them():
    log = (EARLYOOM / "ray_2.60_dashboard_agent_killed_raylet.out").read_text()
    assert "raylet fate-shares with it" in log
    assert "sending SIGKILL to pgid" in log  # the node's vLLM rank went with it
    for comm in ("ray::DashboardA", "ray::RuntimeEnv", "ray"):
        assert re.search(OLD_PREFER, comm) or comm == "ray"  # the old regex preferred the agents
        assert not re.search(EARLYOOM_PREFER, comm)
        assert re.search(EARLYOOM_AVOID, comm)


def test_victim_lines_parse_and_junk_does_not():
    line = 'sending SIGTERM to process 42 uid 1000 "VLLM::EngineCor": badness 968, VmRSS 2048 MiB'
    assert parse_earlyoom_victims(line) == [
        {
            "signal": "SIGTERM",
            "pid": 42,
            "uid": 1000,
            "comm": "VLLM::EngineCor",
            "badness": 968,
            "rss_mib": 2048,
        }
    ]
    assert parse_earlyoom_victims("mem avail: 22725 of 24105 MiB (94.28%)") == []
    assert parse_earlyoom_victims(None) == []
