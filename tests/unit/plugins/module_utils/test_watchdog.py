"""plugins/module_utils/_watchdog.py: every decision as a table."""

import json
import types

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _prometheus_text as pt
from ansible_collections.sparkops.vllm.plugins.module_utils import _watchdog as wd

NODES = ["spark-1", "spark-2"]
GIB = 1024**3
FLOORS = {"spark-1": 8 * GIB, "spark-2": 8 * GIB}
CFG = {"frozen_ticks": 3, "budget_restarts": 3, "budget_window_s": 21600, "backoff_initial_s": 300}


def healthy(now=1000.0, tokens=100.0, running=1.0, **kw):
    base = {
        "now": now,
        "canary": "ok",
        "generation_tokens": tokens,
        "requests_running": running,
        "ray_nodes": {n: True for n in NODES},
        "ranks": {n: True for n in NODES},
        "memavailable_bytes": {n: 40 * GIB for n in NODES},
        "gpu_power_w": {n: 45.0 for n in NODES},
        "gpu_utilization_pct": {n: 95.0 for n in NODES},
    }
    base.update(kw)
    return wd.Observation(**base)


def run(state, obs, cfg=CFG):
    return wd.tick(state, obs, NODES, FLOORS, cfg)


def frozen_state(ticks, tokens=100.0):
    state = wd.new_state()
    state.update(frozen_ticks=ticks, last_tokens=tokens)
    return state


@pytest.mark.parametrize(
    ("state", "obs", "action", "signals"),
    [
        pytest.param(wd.new_state(), healthy(), wd.NONE, [], id="healthy"),
        pytest.param(frozen_state(1), healthy(), wd.NONE, [], id="frozen for N-1 ticks"),
        pytest.param(
            frozen_state(2), healthy(), wd.RESTART_SERVE, ["tokens_frozen"], id="frozen for N ticks"
        ),
        pytest.param(frozen_state(2), healthy(running=0.0), wd.NONE, [], id="no requests, flat tokens: idle"),
        pytest.param(frozen_state(2), healthy(tokens=101.0), wd.NONE, [], id="tokens moved"),
        pytest.param(frozen_state(2), healthy(tokens=None), wd.NONE, [], id="no metrics: no evidence"),
        pytest.param(
            wd.new_state(),
            healthy(canary="timeout", canary_detail="no answer in 20 s"),
            wd.RESTART_SERVE,
            ["canary_timeout"],
            id="canary timeout",
        ),
        pytest.param(
            wd.new_state(), healthy(canary="error"), wd.RESTART_SERVE, ["canary_error"], id="canary error"
        ),
        pytest.param(
            wd.new_state(),
            healthy(ray_nodes={"spark-1": True, "spark-2": False}),
            wd.RESTART_CLUSTER,
            ["ray_node_missing"],
            id="node missing: cluster",
        ),
        pytest.param(
            wd.new_state(),
            healthy(ranks={"spark-1": True, "spark-2": False}),
            wd.RESTART_CLUSTER,
            ["rank_dead"],
            id="rank dead: cluster",
        ),
        pytest.param(
            wd.new_state(),
            healthy(memavailable_bytes={"spark-1": 40 * GIB, "spark-2": 7 * GIB}),
            wd.RESTART_SERVE,
            ["memory_low"],
            id="memory under the floor",
        ),
        pytest.param(
            wd.new_state(),
            healthy(memavailable_bytes={"spark-1": 40 * GIB, "spark-2": 8 * GIB}),
            wd.NONE,
            [],
            id="memory at the floor",
        ),
        pytest.param(
            frozen_state(2),
            healthy(
                gpu_power_w={"spark-1": 45.0, "spark-2": 12.0},
                gpu_utilization_pct={"spark-1": 95.0, "spark-2": None},
            ),
            wd.RESTART_CLUSTER,
            ["gpu_wedge"],
            id="frozen with power under 30 W: the GB10 wedge",
        ),
        pytest.param(
            frozen_state(2),
            healthy(gpu_power_w={"spark-1": 12.0, "spark-2": 12.0}),
            wd.RESTART_SERVE,
            ["tokens_frozen"],
            id="low power but busy GPU: not the wedge",
        ),
        pytest.param(
            frozen_state(0),
            healthy(
                gpu_power_w={"spark-1": 5.0, "spark-2": 5.0},
                gpu_utilization_pct={"spark-1": 0.0, "spark-2": 0.0},
            ),
            wd.NONE,
            [],
            id="low power alone is idle",
        ),
        pytest.param(
            frozen_state(2),
            healthy(
                canary="timeout",
                ranks={"spark-1": True, "spark-2": False},
                gpu_power_w={"spark-1": 20.0, "spark-2": None},
                gpu_utilization_pct={},
            ),
            wd.RESTART_CLUSTER,
            ["rank_dead", "gpu_wedge", "canary_timeout"],
            id="every wedge signal at once",
        ),
    ],
)
def test_decision(state, obs, action, signals):
    got = run(state, obs)
    assert got.action == action
    assert [f.signal for f in got.findings] == signals
    assert got.journal.startswith(f"watchdog action={action}")


def test_paused_does_nothing_even_when_failing():
    state = wd.new_state()
    state.update(paused=True, paused_reason="maintenance")
    got = run(state, healthy(canary="timeout"))
    assert (got.action, got.reason, got.findings) == (wd.PAUSED, "maintenance", [])
    assert got.state["restarts"] == []


def test_first_failure_of_an_episode_captures_a_bundle_and_the_next_does_not():
    first = run(wd.new_state(), healthy(canary="timeout"))
    assert first.capture_bundle and first.state["episode"]["started"] == 1000.0
    second = run(first.state, healthy(now=1060.0, canary="timeout"))
    assert second.action == wd.BACKOFF and not second.capture_bundle
    recovered = run(second.state, healthy(now=1120.0))
    assert recovered.state["episode"] is None


def test_backoff_doubles_and_budget_is_spent_then_gave_up():
    state, now, actions = wd.new_state(), 0.0, []
    for _ in range(40):
        now += 60
        got = run(state, healthy(now=now, canary="timeout"))
        actions.append((now, got.action))
        state = got.state
        if got.action == wd.GAVE_UP:
            break
    restarts = [t for t, a in actions if a == wd.RESTART_SERVE]
    assert restarts == [60.0, 360.0, 960.0]  # +300 s, then +600 s
    assert actions[-1] == (2160.0, wd.GAVE_UP)  # 960 + 1200: the 4th restart is over budget
    assert "3 restarts" in state["gave_up"]["reason"]
    after = run(state, healthy(now=now + 60))
    assert after.action == wd.GAVE_UP and after.findings == []


def test_backoff_table():
    assert [wd.backoff_s(n, CFG) for n in range(5)] == [0.0, 300.0, 600.0, 1200.0, 2400.0]


def test_window_expiry_restores_the_budget():
    state = wd.new_state()
    state["restarts"] = [{"at": t, "scope": "serve", "reason": "x"} for t in (0.0, 100.0, 200.0)]
    state["episode"] = {"started": 0.0, "bundle": None}
    assert run(state, healthy(now=5000.0, canary="error")).action == wd.GAVE_UP
    got = run(state, healthy(now=200.0 + 21600 + 1, canary="error"))
    assert got.action == wd.RESTART_SERVE
    assert len(got.state["restarts"]) == 1
    assert got.state["restarts_total"]["serve"] == 1


def test_state_round_trip_and_corrupt_files():
    got = run(wd.new_state(), healthy(canary="timeout"))
    loaded, why = wd.load_state(wd.dump_state(got.state))
    assert why is None and loaded == got.state
    assert wd.load_state(None) == (wd.new_state(), None)
    for text in (
        "{not json",
        "[]",
        json.dumps({"version": 99}),
        json.dumps({"version": 1, "paused": "yes"}),
        json.dumps({"version": 1, "restarts": [{"at": "soon"}]}),
    ):
        state, why = wd.load_state(text)
        assert state == wd.new_state()
        assert "fresh state" in why


@pytest.mark.parametrize(
    "cfg",
    [{"frozen_ticks": 0}, {"budget_restarts": True}, {"backoff_initial_s": -1}, {"gpu_power_floor_w": "x"}],
)
def test_bad_settings_are_refused(cfg):
    with pytest.raises(wd.WatchdogError):
        wd.settings(cfg)


HEAD_UNITS = ["sparkops-lab-vllm", "sparkops-lab-ray-head"]
WORKERS = {"spark-2": ["sparkops-lab-ray-worker"], "spark-3": ["sparkops-lab-ray-worker"]}


def test_restart_steps_from_node_units():
    assert wd.restart_steps("serve", "spark-1", HEAD_UNITS, WORKERS) == [
        ("stop", "spark-1", "sparkops-lab-vllm"),
        ("start", "spark-1", "sparkops-lab-vllm"),
    ]
    assert wd.restart_steps("cluster", "spark-1", HEAD_UNITS, WORKERS) == [
        ("stop", "spark-1", "sparkops-lab-vllm"),
        ("stop", "spark-2", "sparkops-lab-ray-worker"),
        ("stop", "spark-3", "sparkops-lab-ray-worker"),
        ("stop", "spark-1", "sparkops-lab-ray-head"),
        ("start", "spark-1", "sparkops-lab-ray-head"),
        ("start", "spark-2", "sparkops-lab-ray-worker"),
        ("start", "spark-3", "sparkops-lab-ray-worker"),
        ("wait_nodes", "spark-1", ""),
        ("start", "spark-1", "sparkops-lab-vllm"),
    ]
    with pytest.raises(wd.WatchdogError):
        wd.restart_steps("node", "spark-1", HEAD_UNITS, WORKERS)


def test_textfile_parses_and_carries_the_state():
    state = run(wd.new_state(), healthy(ray_nodes={"spark-1": True, "spark-2": False})).state
    text = wd.textfile('la"b', state, 1234.5)
    got = pt.parse(text)
    assert got.errors == []
    assert got.families["sparkops_watchdog_restarts_total"].type == "counter"
    by_scope = {s.labels["scope"]: s.value for s in got.samples("sparkops_watchdog_restarts_total")}
    assert by_scope == {"serve": 0.0, "cluster": 1.0}
    assert got.samples("sparkops_watchdog_gave_up")[0].labels == {"cluster": 'la"b'}
    assert got.total("sparkops_watchdog_last_tick_timestamp_seconds") == 1234.5
    # Each inventory node's raylet as the tick saw it, for the "node missing from Ray" alert.
    up = {s.labels["ray_node"]: s.value for s in got.samples("sparkops_watchdog_ray_node_up")}
    assert up == {"spark-1": 1.0, "spark-2": 0.0}
    assert got.families["sparkops_watchdog_ray_node_up"].type == "gauge"


def test_textfile_without_an_observation_has_no_ray_node_series():
    got = pt.parse(wd.textfile("lab", wd.new_state(), 1.0))
    assert got.errors == []
    assert got.samples("sparkops_watchdog_ray_node_up") == []


# -- the tick's own cost ------------------------------------------------------------------


def rusage(user, system):
    """What resource.getrusage answers, as far as the measurement reads it."""
    return types.SimpleNamespace(ru_utime=user, ru_stime=system, ru_maxrss=123456)


@pytest.mark.parametrize(
    ("own", "children", "cpu"),
    [
        pytest.param(rusage(0.0, 0.0), rusage(0.0, 0.0), 0.0, id="nothing yet"),
        pytest.param(rusage(0.061, 0.019), rusage(0.0, 0.0), 0.08, id="no child waited for yet"),
        pytest.param(rusage(0.061, 0.019), rusage(0.104, 0.043), 0.227, id="ssh and nvidia-smi added"),
        pytest.param(rusage(0.9, 0.2), rusage(0.3, 0.1), 1.5, id="an expensive tick"),
    ],
)
def test_cpu_seconds_is_user_and_system_of_the_program_and_its_children(own, children, cpu):
    assert wd.cpu_seconds(own, children) == pytest.approx(cpu)


@pytest.mark.parametrize(
    ("cpu", "wall", "config", "over"),
    [
        pytest.param(0.084, 1.2, {}, False, id="a usual tick: under the default second"),
        pytest.param(1.0, 3.0, {}, False, id="exactly the budget is within it"),
        pytest.param(1.0004, 3.0, {}, False, id="within it to the millisecond"),
        pytest.param(1.0006, 3.0, {}, True, id="a millisecond over"),
        pytest.param(2.5, 30.0, {}, True, id="over the default second"),
        pytest.param(2.5, 30.0, {"tick_cpu_budget_s": 3}, False, id="within a larger budget"),
        pytest.param(0.3, 0.5, {"tick_cpu_budget_s": 0.25}, True, id="over a smaller budget"),
    ],
)
def test_the_budget_decision(cpu, wall, config, over):
    cost = wd.tick_cost(cpu, wall, config)
    assert cost["over_budget"] is over
    assert cost["cpu_budget_s"] == float(config.get("tick_cpu_budget_s", 1.0))
    warning = wd.tick_cost_warning(cost, wd.NONE)
    if not over:
        assert warning is None
        return
    # The warning names the measured value and the budget, and says it restarts nothing.
    assert f"the tick used {cost['cpu_s']:g} s of CPU" in warning
    assert f"over its budget of {cost['cpu_budget_s']:g} s" in warning
    assert "nothing is restarted" in warning and "action=none" in warning


def test_the_cost_is_rounded_to_the_millisecond_and_journaled_as_fields():
    cost = wd.tick_cost(0.08449, 1.20351, {})
    assert cost == {"cpu_s": 0.084, "wall_s": 1.204, "cpu_budget_s": 1.0, "over_budget": False}
    assert wd.tick_cost_fields(cost) == "cpu_seconds=0.084 wall_seconds=1.204 cpu_budget_seconds=1"


@pytest.mark.parametrize("budget", [0, -1, True, "1", float("nan"), float("inf")])
def test_a_bad_cpu_budget_is_refused(budget):
    with pytest.raises(wd.WatchdogError, match="tick_cpu_budget_s"):
        wd.settings({"tick_cpu_budget_s": budget})


def test_the_budget_never_becomes_a_finding():
    """An over-budget tick is the watchdog's own cost: the next decision does not see it."""
    state = wd.new_state()
    state["last_tick_cost"] = wd.tick_cost(5.0, 40.0, {})
    got = run(state, healthy())
    assert (got.action, got.findings) == (wd.NONE, [])


def test_the_cost_survives_the_state_file_and_a_bad_one_is_dropped():
    state = wd.new_state()
    state["last_tick_cost"] = wd.tick_cost(0.2, 1.5, {})
    loaded, why = wd.load_state(wd.dump_state(state))
    assert why is None and loaded["last_tick_cost"] == state["last_tick_cost"]
    # A state file from before the measurement has no cost; a mangled cost is dropped, not the state.
    older = {k: v for k, v in wd.new_state().items() if k != "last_tick_cost"}
    assert wd.load_state(json.dumps(older)) == (wd.new_state(), None)
    for bad in ("fast", {"cpu_s": "0.2", "wall_s": 1, "cpu_budget_s": 1}, {"cpu_s": True, "wall_s": 1}):
        mangled = dict(wd.new_state(), restarts_total={"serve": 2, "cluster": 0}, last_tick_cost=bad)
        loaded, why = wd.load_state(json.dumps(mangled))
        assert why is None
        assert loaded["last_tick_cost"] is None and loaded["restarts_total"]["serve"] == 2


def test_the_textfile_carries_the_last_tick_s_cost():
    state = wd.new_state()
    state["last_tick_cost"] = wd.tick_cost(0.2346, 1.5, {"tick_cpu_budget_s": 0.5})
    got = pt.parse(wd.textfile("lab", state, 1.0))
    assert got.errors == []
    assert got.total("sparkops_watchdog_tick_cpu_seconds") == pytest.approx(0.235)
    assert got.total("sparkops_watchdog_tick_duration_seconds") == 1.5
    assert got.total("sparkops_watchdog_tick_cpu_budget_seconds") == 0.5
    for name in ("sparkops_watchdog_tick_cpu_seconds", "sparkops_watchdog_tick_duration_seconds"):
        assert got.families[name].type == "gauge"
        assert got.samples(name)[0].labels == {"cluster": "lab"}


def test_the_textfile_before_a_measured_tick_has_no_cost_series():
    got = pt.parse(wd.textfile("lab", wd.new_state(), 1.0))
    assert got.samples("sparkops_watchdog_tick_cpu_seconds") == []
    assert got.samples("sparkops_watchdog_tick_duration_seconds") == []


def _status(**state):
    doc = dict(wd.new_state(), last_tick=95.0, last_decision="none", **state)
    return json.dumps({"state": doc, "state_note": None, "state_file": "/s"})


@pytest.mark.parametrize(
    ("cost", "line"),
    [
        pytest.param(
            None,
            "Watchdog: enabled; last tick 5 s ago (none); 0 restart(s) in the window",
            id="not measured yet",
        ),
        pytest.param(
            wd.tick_cost(0.084, 1.204, {}),
            "Watchdog: enabled; last tick 5 s ago (none, 0.084 s CPU, 1.204 s wall); 0 restart(s) in the window",
            id="within the budget",
        ),
        pytest.param(
            wd.tick_cost(1.5, 3.25, {}),
            "Watchdog: enabled; last tick 5 s ago (none, 1.5 s CPU over its 1 s budget, 3.25 s wall); "
            "0 restart(s) in the window",
            id="over the budget",
        ),
    ],
)
def test_status_shows_the_last_tick_s_cost_and_it_is_no_problem(cost, line):
    got = wd.summary(_status(last_tick_cost=cost), "active", 100.0)
    assert wd.summary_line(got) == line
    assert got["problems"] == []
    assert got["last_tick_cpu_s"] == (cost or {}).get("cpu_s")
    assert got["last_tick_over_budget"] is bool(cost and cost["over_budget"])
