"""roles/model_sync: meta/argument_specs.yml mirrors defaults/main.yml (names, defaults, types)."""

from pathlib import Path

import yaml

ROLE = Path(__file__).resolve().parents[4] / "roles" / "model_sync"
TYPES = {"str": str, "path": str, "int": int, "bool": bool, "dict": dict, "float": (int, float)}


def _load(name):
    return yaml.safe_load((ROLE / name).read_text())


def test_every_default_is_specified_with_the_same_value_and_type():
    defaults = _load("defaults/main.yml")
    options = _load("meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(options)
    for name, value in defaults.items():
        assert options[name]["default"] == value, name
        assert isinstance(value, TYPES[options[name]["type"]]), name
        assert options[name]["description"], name
        if "choices" in options[name]:
            assert value in options[name]["choices"], name


def test_every_default_is_documented_in_the_sample_inventory():
    sample = Path(__file__).resolve().parents[4] / "inventory/sample/group_vars/all/model_sync.yml"
    assert sorted(yaml.safe_load(sample.read_text())) == sorted(_load("defaults/main.yml"))
