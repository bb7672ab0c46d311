"""Every role's meta/argument_specs.yml mirrors its defaults/main.yml (prometheus-community's drift test).

A default that is a template (``{{ ... }}``) is documented in the option's description
instead of a ``default`` the spec validator would try to render.
"""

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
ROLES = sorted(p.parent.parent.name for p in ROOT.glob("roles/*/defaults/main.yml"))
TYPES = {"str": str, "path": str, "int": int, "float": (int, float), "bool": bool, "dict": dict, "list": list}


def _load(path):
    return yaml.safe_load(path.read_text()) or {}


def _options(role):
    specs = _load(ROOT / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]
    options = {}
    for entry in specs.values():
        options.update(entry.get("options") or {})
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
