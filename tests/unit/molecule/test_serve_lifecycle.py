"""The serve_lifecycle scenario's comparisons, over unit states and records shaped as the lab's."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location(
    "serve_lifecycle", ROOT / "molecule" / "shared" / "filter_plugins" / "serve_lifecycle.py"
)
serve_lifecycle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(serve_lifecycle)

LAYOUT = {
    "units": {
        "ray_head": "sparkops-lab-ray-head",
        "ray_worker": "sparkops-lab-ray-worker",
        "serve": "sparkops-lab-vllm",
    }
}
HEAD, WORKER = "spark-1", "spark-2"


def _unit(pid, active="active", at="100", started="2026-12-02T01:00:00Z"):
    return {
        "ActiveState": active,
        "MainPID": str(pid),
        "ActiveEnterTimestampMonotonic": at,
        "NRestarts": "0",
        "ContainerStartedAt": started,
    }


def _state(head_ray=None, serve=None, worker_ray=None):
    return {
        HEAD: {"sparkops-lab-ray-head": head_ray or _unit(11), "sparkops-lab-vllm": serve or _unit(12)},
        WORKER: {"sparkops-lab-ray-worker": worker_ray or _unit(21)},
    }


def test_each_node_runs_its_units_from_the_layout():
    assert serve_lifecycle.lifecycle_units([HEAD, WORKER, "spark-3"], HEAD, LAYOUT) == {
        HEAD: ["sparkops-lab-ray-head", "sparkops-lab-vllm"],
        WORKER: ["sparkops-lab-ray-worker"],
        "spark-3": ["sparkops-lab-ray-worker"],
    }


def test_a_serve_restart_moves_no_ray_unit():
    before = _state()
    after = _state(serve=_unit(99, at="500", started="2026-12-02T02:00:00Z"))
    assert serve_lifecycle.ray_moved(after, before, HEAD, LAYOUT) == []


def test_a_ray_unit_that_restarted_is_named_with_each_key_that_moved():
    before = _state()
    after = _state(worker_ray=_unit(77, at="900", started="2026-12-02T03:00:00Z"))
    assert serve_lifecycle.ray_moved(after, before, HEAD, LAYOUT) == [
        "spark-2 sparkops-lab-ray-worker MainPID",
        "spark-2 sparkops-lab-ray-worker ActiveEnterTimestampMonotonic",
        "spark-2 sparkops-lab-ray-worker ContainerStartedAt",
    ]


def test_a_ray_unit_not_active_after_is_named_with_its_state():
    before = _state()
    after = _state(head_ray=_unit(11, active="failed"))
    assert serve_lifecycle.ray_moved(after, before, HEAD, LAYOUT) == ["spark-1 sparkops-lab-ray-head failed"]


def _record(**sections):
    return {"schema": 1, "sections": sections}


def test_only_the_plan_moving_is_no_move():
    before = {WORKER: _record(plan={"utilization": 0.6}, ray={"image": "a"})}
    after = {WORKER: _record(plan={"utilization": 0.55}, ray={"image": "a"})}
    assert serve_lifecycle.records_moved(after, before) == []


def test_a_section_that_moved_appeared_or_went_is_named():
    before = {WORKER: _record(plan={}, ray={"image": "a"}, nccl={"x": 1})}
    after = {WORKER: _record(plan={}, ray={"image": "b"}, watchdog={"on": True})}
    assert serve_lifecycle.records_moved(after, before) == ["spark-2 nccl", "spark-2 ray", "spark-2 watchdog"]


def test_a_worker_missing_on_one_side_moved_in_every_section():
    before = {WORKER: _record(plan={}, ray={"image": "a"})}
    assert serve_lifecycle.records_moved({}, before) == ["spark-2 ray"]


def test_the_filters_are_registered():
    assert set(serve_lifecycle.FilterModule().filters()) == {"lifecycle_units", "ray_moved", "records_moved"}
