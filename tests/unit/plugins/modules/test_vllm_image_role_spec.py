"""roles/vllm_image: meta/argument_specs.yml mirrors defaults/main.yml; the sample sets each."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[4]
ROLE = ROOT / "roles" / "vllm_image"
TYPES = {"str": str, "path": str, "int": int, "bool": bool, "dict": dict, "list": list}


def _load(path):
    return yaml.safe_load(path.read_text())


def test_every_default_is_specified_with_the_same_value_and_type():
    defaults = _load(ROLE / "defaults/main.yml")
    options = _load(ROLE / "meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(options)
    for name, value in defaults.items():
        assert options[name]["default"] == value, name
        assert isinstance(value, TYPES[options[name]["type"]]), name
        assert options[name]["description"], name
        if "choices" in options[name]:
            assert value in options[name]["choices"], name


def test_every_default_is_explained_in_the_sample_inventory():
    text = (ROOT / "inventory/sample/group_vars/all/vllm_image.yml").read_text()
    for name in _load(ROLE / "defaults/main.yml"):
        # set, or shown commented out with its default
        assert f"\n{name}:" in text or f"\n# {name}:" in text, name


def test_the_lab_uses_the_archive_path_without_the_gpu_check():
    lab = _load(ROOT / "inventory/lab/group_vars/all/vllm_image.yml")
    assert lab["vllm_image_source"] == "archive"
    assert lab["vllm_image_lab_build"] is True
    assert lab["vllm_image_require_nvidia_runtime"] is False
    assert set(lab) <= set(_load(ROLE / "defaults/main.yml"))
