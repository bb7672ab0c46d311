"""The alert rules: `promtool check rules`, `promtool test rules`, and a firing and a quiet case per alert.

promtool comes from Debian's `prometheus` package (scripts/setup installs it); without it
these tests fail: they are the only check of the rules' PromQL.
"""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "roles/monitoring/files/sparkops-rules.yml"
RULE_TESTS = Path(__file__).with_name("rules_test.yml")


def _promtool():
    path = shutil.which("promtool")
    assert path, "promtool is not installed: run scripts/setup (Debian's prometheus package holds it)"
    return path


def _run(*args):
    return subprocess.run([_promtool(), *args], capture_output=True, text=True, check=False, timeout=120)


def _alerts():
    return [rule["alert"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_promtool_checks_the_rules():
    result = _run("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in result.stdout


def test_promtool_rule_tests_pass():
    result = _run("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_rule_tests_read_the_role_s_rules():
    doc = yaml.safe_load(RULE_TESTS.read_text())
    assert [(RULE_TESTS.parent / path).resolve() for path in doc["rule_files"]] == [RULES]


def _cases():
    doc = yaml.safe_load(RULE_TESTS.read_text())
    return [case for test in doc["tests"] for case in test.get("alert_rule_test", [])]


@pytest.mark.parametrize("alert", _alerts())
def test_every_alert_has_a_firing_and_a_quiet_case(alert):
    cases = [case for case in _cases() if case["alertname"] == alert]
    assert any(case.get("exp_alerts") for case in cases), f"no rule test in which {alert} fires"
    assert any(not case.get("exp_alerts") for case in cases), f"no rule test in which {alert} stays quiet"


def test_a_broken_expectation_fails(tmp_path):
    """The runner notices a wrong expectation: the rule tests are not vacuous."""
    doc = yaml.safe_load(RULE_TESTS.read_text())
    doc["rule_files"] = [str(RULES)]
    for test in doc["tests"]:
        for case in test.get("alert_rule_test", []):
            case["exp_alerts"] = [] if case.get("exp_alerts") else [{"exp_labels": {"severity": "critical"}}]
    broken = tmp_path / "broken_test.yml"
    broken.write_text(yaml.safe_dump(doc))
    result = _run("test", "rules", str(broken))
    assert result.returncode != 0
    failures = result.stdout + result.stderr
    assert [alert for alert in _alerts() if f"alertname: {alert}," not in failures] == []
