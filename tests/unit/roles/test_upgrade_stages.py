# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""An upgrade's switch runs the stages deploy.yml runs, in deploy.yml's order.

playbooks/upgrade_switch.yml puts an image on every node and restarts in order
(docs/upgrades.md, "How an upgrade runs"): it imports the stage playbooks up to
the model, then runs Ray and serve through the upgrade role's ``restart`` entry
point (one play per stage, so a failure becomes the gate's "not healthy"
instead of ending the run). A stage added to deploy.yml, or moved in it, must
be added to or moved in the switch as well, or excluded here with its reason;
this test fails until one of the two is done.
"""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy.yml"
SWITCH = ROOT / "playbooks" / "upgrade_switch.yml"
UPGRADE = ROOT / "playbooks" / "upgrade.yml"
ROLLBACK = ROOT / "playbooks" / "rollback.yml"
UPGRADE_ROLE = "sparkops.vllm.upgrade"

# The switch covers deploy.yml from the first stage that touches a node to serve.
FIRST, LAST = "preflight", "vllm_serve"
# Stages of deploy.yml an image change does not run again:
# - validate checks the inventory on the controller only: it changes nothing on a
#   node and publishes no fact a later stage reads, and the inventory did not change
#   (the upgrade's own settings are checked by the role's decide step);
# - watchdog and monitoring are not restarted by an image change: their units do not
#   run the image (the upgrade pauses the watchdog around the restart and resumes it);
# - probe (the correctness probe after serve) is the gate's own step: the gate runs the
#   probe role itself and decides on its result instead of failing the run.
NOT_SWITCHED = {"validate", "probe", "watchdog", "monitoring"}
# Restarted through the upgrade role after begin (serve stopped); everything before
# them, model_sync included, runs while the old deployment still serves.
RESTARTED_AFTER = "vllm_image"
BEFORE_BEGIN = {"model_sync"}


def _load(path: Path):
    return yaml.safe_load(path.read_text())


def _stage_of_import(importer: Path, target: str) -> str:
    """The stage a play imports, by its playbook file's stem; the file must exist."""
    path = (importer.parent / target).resolve()
    assert path.is_file(), f"{importer.name} imports {target}, which does not exist"
    assert path.parent == (ROOT / "playbooks").resolve(), f"{target} is not a stage playbook"
    return path.stem


def _deploy_stages() -> list[str]:
    plays = _load(DEPLOY)
    assert all("ansible.builtin.import_playbook" in play for play in plays), "deploy.yml only imports stages"
    return [_stage_of_import(DEPLOY, play["ansible.builtin.import_playbook"]) for play in plays]


def _upgrade_calls(play: dict) -> list[tuple[str, dict]]:
    """(tasks_from, vars) of every task of a play that includes the upgrade role."""
    calls = []
    for task in play.get("tasks") or []:
        include = task.get("ansible.builtin.include_role") or {}
        if include.get("name") == UPGRADE_ROLE:
            calls.append((include.get("tasks_from", "main"), task.get("vars") or {}))
    return calls


def _switch_steps() -> list[tuple[str, str]]:
    """The switch's plays in order: ("import", stage), ("restart", stage) or ("upgrade", tasks_from)."""
    steps = []
    for play in _load(SWITCH):
        if "ansible.builtin.import_playbook" in play:
            steps.append(("import", _stage_of_import(SWITCH, play["ansible.builtin.import_playbook"])))
            continue
        calls = _upgrade_calls(play)
        assert len(calls) == 1, f"the switch's play {play.get('name')!r} runs one step of the upgrade role"
        ((tasks_from, variables),) = calls
        # assess is the head's alone (roles/upgrade/tasks/assess.yml); every other step every node's.
        hosts = "head" if tasks_from == "assess" else "cluster"
        assert play["hosts"] == hosts, f"{play.get('name')!r} runs on {hosts}"
        if tasks_from == "restart":
            steps.append(("restart", variables["upgrade_stage"]))
        else:
            steps.append(("upgrade", tasks_from))
    return steps


def _switched() -> tuple[list[str], list[str]]:
    """What the switch must import, and what it must restart, from deploy.yml's order."""
    stages = _deploy_stages()
    covered = stages[stages.index(FIRST) : stages.index(LAST) + 1]
    restarted = [
        stage for stage in covered[covered.index(RESTARTED_AFTER) + 1 :] if stage not in BEFORE_BEGIN
    ]
    imported = [stage for stage in covered if stage not in restarted]
    return imported, restarted


def test_deploy_stages_outside_the_switch_are_the_known_ones():
    stages = _deploy_stages()
    assert stages.index(FIRST) < stages.index(RESTARTED_AFTER) < stages.index(LAST)
    covered = stages[stages.index(FIRST) : stages.index(LAST) + 1]
    assert set(stages) - set(covered) == NOT_SWITCHED


def test_the_switch_imports_deploys_stages_up_to_the_model_in_deploys_order():
    imported, _ = _switched()
    assert imported == ["preflight", "roce_network", "vllm_image", "model_sync"]
    assert [stage for kind, stage in _switch_steps() if kind == "import"] == imported


def test_the_switch_restarts_ray_then_serve_in_deploys_order():
    _, restarted = _switched()
    assert restarted == ["ray_cluster", "vllm_serve"]
    assert [stage for kind, stage in _switch_steps() if kind == "restart"] == restarted


def test_every_stage_from_preflight_to_serve_is_switched_once():
    imported, restarted = _switched()
    switched = [stage for kind, stage in _switch_steps() if kind in ("import", "restart")]
    assert sorted(switched) == sorted(imported + restarted)
    assert len(switched) == len(set(switched))


def test_the_switch_aims_imports_begins_restarts_then_gates():
    imported, restarted = _switched()
    expected = (
        [("upgrade", "target")]
        + [("import", stage) for stage in imported]
        + [("upgrade", "begin")]
        + [("restart", stage) for stage in restarted]
        + [("upgrade", "assess"), ("upgrade", "gate")]
    )
    assert _switch_steps() == expected


def test_a_rescued_failure_cannot_drop_a_node_from_the_switch():
    # ansible-core's linear strategy (lib/ansible/plugins/strategy/linear.py, 2.19.14):
    # in an any_errors_fatal play, a host's failure inside a block, even one its rescue
    # handles, marks every other host of the play failed. The plays whose steps rescue
    # failures (assess: the probe and the bench; restart: the stages) must not be
    # any_errors_fatal, and the gate asserts that every node is still in the run.
    rescuing = {"assess", "restart"}
    for play in _load(SWITCH):
        for tasks_from, _ in _upgrade_calls(play):
            if tasks_from in rescuing:
                assert not play.get("any_errors_fatal"), f"{play['name']!r} rescues failures"
            for task in _load(ROOT / "roles" / "upgrade" / "tasks" / f"{tasks_from}.yml"):
                if "rescue" in task:
                    assert tasks_from in rescuing, f"{tasks_from}.yml rescues; its play must not be fatal"
    gate = _load(ROOT / "roles" / "upgrade" / "tasks" / "gate.yml")
    assert (
        "ansible_play_hosts | sort == groups['cluster'] | sort" in gate[0]["ansible.builtin.assert"]["that"]
    )


def test_the_restart_entry_point_takes_exactly_the_restarted_stages():
    _, restarted = _switched()
    specs = _load(ROOT / "roles" / "upgrade" / "meta" / "argument_specs.yml")["argument_specs"]
    assert specs["restart"]["options"]["upgrade_stage"]["choices"] == restarted


def _switch_imports(path: Path) -> list[str]:
    """The ``when`` of each import of upgrade_switch.yml, in order."""
    whens = []
    for play in _load(path):
        target = play.get("ansible.builtin.import_playbook")
        if target and (path.parent / target).resolve() == SWITCH.resolve():
            when = play.get("when")
            whens.append(" and ".join(when) if isinstance(when, list) else str(when or ""))
    return whens


def test_upgrade_imports_the_switch_twice_and_rollback_once_each_when_switching():
    # upgrade.yml: the upgrade, then the rollback its failed gate asks for (gate.yml sets
    # _upgrade_switching again); rollback.yml: the rollback. Nothing switches otherwise.
    upgrade, rollback = _switch_imports(UPGRADE), _switch_imports(ROLLBACK)
    assert len(upgrade) == 2 and len(rollback) == 1
    for when in upgrade + rollback:
        assert "_upgrade_switching" in when


def test_upgrade_imports_the_rollback_right_after_the_upgrade():
    plays = _load(UPGRADE)
    positions = [
        index
        for index, play in enumerate(plays)
        if play.get("ansible.builtin.import_playbook")
        and (UPGRADE.parent / play["ansible.builtin.import_playbook"]).resolve() == SWITCH.resolve()
    ]
    assert positions[1] == positions[0] + 1
