"""Every role's meta/argument_specs.yml mirrors its defaults/main.yml (prometheus-community's drift test).

A default that is a template (``{{ ... }}``) is documented in the option's description
instead of a ``default`` the spec validator would try to render.

Every task file another role or a playbook calls is a declared entry point
(prometheus-community's ``_common`` role): the caller names it as the spec does
(``tasks_from: report``, so Ansible validates the entry point's inputs), passes
only declared inputs, and never registers or sets a variable of the callee's
private names (``_<role>_*``, ``__<role>_*``).
"""

import re
from pathlib import Path

import pytest
import yaml
from conftest import iter_tasks

ROOT = Path(__file__).resolve().parents[3]
ROLES = sorted(p.parent.parent.name for p in ROOT.glob("roles/*/defaults/main.yml"))
TYPES = {"str": str, "path": str, "int": int, "float": (int, float), "bool": bool, "dict": dict, "list": list}


def _load(path):
    return yaml.safe_load(path.read_text()) or {}


def _specs(role):
    return _load(ROOT / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]


def _options(role):
    """The role's settings: every entry point's options, less the inputs only an entry point takes (no default)."""
    defaults = _load(ROOT / "roles" / role / "defaults" / "main.yml")
    options = {}
    for entry in _specs(role).values():
        for name, option in (entry.get("options") or {}).items():
            if name in defaults or not option.get("required"):
                options[name] = option
    return options


def test_every_role_is_covered():
    assert {"preflight", "ray_cluster", "vllm_serve", "validate", "lab"} <= set(ROLES)


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_specs_name_the_same_options(role):
    defaults = _load(ROOT / "roles" / role / "defaults" / "main.yml")
    assert sorted(defaults) == sorted(_options(role))


@pytest.mark.parametrize("role", ROLES)
def test_each_option_is_described_typed_and_defaulted_like_defaults(role):
    defaults = _load(ROOT / "roles" / role / "defaults" / "main.yml")
    for name, option in _options(role).items():
        assert option.get("description"), f"{role}: {name} has no description"
        value = defaults[name]
        if isinstance(value, str) and "{{" in value:
            assert (
                "default" not in option or "{{" in str(option["default"]) or "$" in str(option["default"])
            ), f"{role}: {name} is a template in defaults; its spec default must not claim a fixed value"
            continue
        if value is None:
            continue
        assert option.get("default") == value, (
            f"{role}: {name}: spec default {option.get('default')!r} != {value!r}"
        )
        assert isinstance(value, TYPES[option["type"]]), f"{role}: {name} is not a {option['type']}"
        if "choices" in option:
            assert value in option["choices"], f"{role}: {name}"


# The lab role only runs on the development machine; every stage role's
# settings are explained in the sample inventory (kubespray style).
STAGE_ROLES = [role for role in ROLES if role != "lab"]


@pytest.mark.parametrize("role", STAGE_ROLES)
def test_every_setting_is_explained_in_the_sample_inventory(role):
    sample = "\n".join(p.read_text() for p in sorted(ROOT.glob("inventory/sample/group_vars/*/*.yml")))
    missing = [
        name
        for name in _load(ROOT / "roles" / role / "defaults" / "main.yml")
        if f"\n{name}:" not in sample and f"\n# {name}:" not in sample
    ]
    assert not missing, f"{role}: not in inventory/sample/group_vars: {missing}"


# -- declared entry points ------------------------------------------------------

CALLERS = sorted(
    path
    for pattern in ("roles/*/tasks/*.yml", "playbooks/*.yml", "*.yml")
    for path in ROOT.glob(pattern)
    if path.name not in ("galaxy.yml", "requirements.yml")
)


_tasks = iter_tasks


def _role_calls():
    calls = []
    for path in CALLERS:
        for task in _tasks(yaml.safe_load(path.read_text()) or []):
            for action in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
                if action in task and task[action].get("tasks_from"):
                    role = task[action]["name"].split(".")[-1]
                    calls.append((path.relative_to(ROOT).as_posix(), role, task[action]["tasks_from"], task))
    return calls


def test_the_entry_point_scan_finds_the_callers():
    found = {(caller, role, entry) for caller, role, entry, _ in _role_calls()}
    assert ("playbooks/reclaim.yml", "preflight", "verdicts") in found
    assert ("roles/cluster_restart/tasks/main.yml", "vllm_serve", "ready") in found


@pytest.mark.parametrize("call", _role_calls(), ids=lambda c: f"{c[0]}->{c[1]}:{c[2]}")
def test_every_called_task_file_is_a_declared_entry_point(call):
    caller, role, entry, _ = call
    assert not entry.endswith(".yml"), (
        f"{caller}: tasks_from: {entry}; name the entry point ({entry[:-4]}) so Ansible validates its inputs"
    )
    assert (ROOT / "roles" / role / "tasks" / f"{entry}.yml").is_file(), (
        f"{caller}: {role} has no {entry}.yml"
    )
    specs = _specs(role)
    assert entry in specs, (
        f"{caller} calls {role}:{entry}, which roles/{role}/meta/argument_specs.yml does not declare"
    )
    assert specs[entry].get("short_description")


@pytest.mark.parametrize("call", _role_calls(), ids=lambda c: f"{c[0]}->{c[1]}:{c[2]}")
def test_callers_pass_only_declared_inputs(call):
    caller, role, entry, task = call
    declared = set(_specs(role)[entry].get("options") or {})
    passed = set(task.get("vars") or {})
    assert passed <= declared, (
        f"{caller} passes {sorted(passed - declared)} to {role}:{entry}, which it does not declare"
    )
    required = {
        name for name, opt in (_specs(role)[entry].get("options") or {}).items() if opt.get("required")
    }
    assert required <= passed, f"{caller} does not pass {sorted(required - passed)} to {role}:{entry}"


def _owner(path):
    parts = path.relative_to(ROOT).parts
    return parts[1] if parts[0] == "roles" else None


PRIVATE = re.compile(r"^__?(" + "|".join(sorted(ROLES, key=len, reverse=True)) + r")_")


@pytest.mark.parametrize("path", CALLERS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_nothing_registers_or_sets_another_roles_private_variable(path):
    owner = _owner(path)
    wrong = []
    for task in _tasks(yaml.safe_load(path.read_text()) or []):
        names = [task.get("register")] if task.get("register") else []
        names += list(
            (task.get("ansible.builtin.set_fact") or {})
            if isinstance(task.get("ansible.builtin.set_fact"), dict)
            else []
        )
        names += (
            list(task.get("vars") or {})
            if any(k.endswith("include_role") or k.endswith("import_role") for k in task)
            else []
        )
        for name in names:
            match = PRIVATE.match(str(name))
            if match and match.group(1) != owner:
                wrong.append(f"{task.get('name')}: {name}")
    assert not wrong, f"{path.relative_to(ROOT)} writes another role's private variables: {wrong}"
