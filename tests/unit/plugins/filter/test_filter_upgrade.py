"""The upgrade filters: thin wrappers over module_utils/_upgrade.py, with their documentation."""

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkops.vllm.plugins.filter import upgrade

HEALTHY = {"healthy": True, "detail": "ok"}
PROBE = {"identical": True, "matches_reference": True, "tokens_sane": True, "problems": []}


def test_the_gate_filter_decides_and_takes_a_string_tolerance():
    assert upgrade.upgrade_gate(HEALTHY, PROBE, None, None, "0.1")["passed"] is True
    assert upgrade.upgrade_gate({"healthy": False}, PROBE, None, None, 0.1)["passed"] is False


def test_the_gate_filter_names_itself_on_a_bad_tolerance():
    with pytest.raises(AnsibleFilterError, match="upgrade_gate: the benchmark tolerance"):
        upgrade.upgrade_gate(HEALTHY, PROBE, None, None, 1.5)


def test_the_kept_images_filter():
    section = {
        "phase": "awaiting_confirm",
        "current": {"image_ref": "v:new"},
        "previous": {"image_ref": "v:old"},
    }
    assert upgrade.upgrade_kept_images(section) == ["v:new", "v:old"]
    assert upgrade.upgrade_kept_images({}) == []


def test_every_filter_has_its_documentation_file():
    here = Path(upgrade.__file__).parent
    for name in upgrade.FilterModule().filters():
        doc = yaml.safe_load((here / f"{name}.yml").read_text())
        assert doc["DOCUMENTATION"]["name"] == name
        assert doc["EXAMPLES"].strip()
        assert "_value" in doc["RETURN"]


def test_the_image_for_version_filter():
    assert upgrade.upgrade_image_for_version("0.17.1", "example/vllm-spark:{version}", "spark-1") == (
        "example/vllm-spark:0.17.1"
    )
    with pytest.raises(
        AnsibleFilterError,
        match=r"upgrade_image_for_version: spark-1: upgrade_image_ref_template is empty.*"
        r"Fix: set upgrade_image_ref_template in the inventory, or give --image",
    ):
        upgrade.upgrade_image_for_version("0.17.1", "", "spark-1")


@pytest.mark.parametrize("stored", [None, {}, "", {"phase": "unknown", "current": {"image_ref": "x"}}])
def test_a_record_never_upgraded_reads_as_a_steady_section_with_every_key(stored):
    # report.yml reads (_section.current or {}) on a lab never upgraded: every key must be there.
    assert upgrade.upgrade_section(stored) == {
        "phase": "steady",
        "current": None,
        "previous": None,
        "discarded": None,
        "attempt": None,
    }


def test_a_stored_section_keeps_what_it_holds():
    stored = {"phase": "awaiting_confirm", "current": {"image_ref": "a"}, "previous": {"image_ref": "b"}}
    assert upgrade.upgrade_section(stored) == {**stored, "discarded": None, "attempt": None}
