"""The sparkops.vllm known-bad platform filters (plugins/filter/known_bad_platforms.py)."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkops.vllm.plugins.filter import known_bad_platforms as kbp
from conftest import FIXTURES

PROBE = FIXTURES / "known_bad" / "h200_nccl_probe.txt"


def test_probe_argv_runs_the_probe_text_with_the_images_python_without_network():
    argv = kbp.nccl_probe_argv("sparkops/vllm:test", ["--label", "io.sparkops.vllm.cluster=lab"])
    assert argv[:8] == ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python3", "--label"]
    assert argv[9:12] == ["sparkops/vllm:test", "-c", argv[11]]
    ast.parse(argv[11])  # the probe's own source, whole


def test_the_probe_text_runs_here_and_prints_its_json():
    """This interpreter has no torch: the probe still answers, as in the lab's image."""
    argv = kbp.nccl_probe_argv("unused")
    out = subprocess.run([sys.executable, "-c", argv[-1]], capture_output=True, text=True, check=True).stdout
    data = json.loads(out)
    assert set(data) == {"python", "torch", "pip", "system"}


def test_known_bad_image_on_the_h200_probe():
    stdout = "\n".join(line for line in PROBE.read_text().splitlines() if not line.startswith("#"))
    image = kbp.known_bad_image(stdout, "spark-1", True, 2, 1)
    assert image["nccl"]["loaded_version"] == "2.28.9"
    assert [row["status"] for row in image["results"]] == ["warn", "warn"]
    assert kbp.known_bad_failures(image["results"]) == []


def test_a_probe_that_printed_no_json_names_the_host_and_its_stderr():
    stderr = 'docker: Error response from daemon: exec: "python3": executable file not found in $PATH'
    with pytest.raises(
        AnsibleFilterError, match=r"spark-1: the NCCL probe printed no JSON object: ''; stderr: .*python3"
    ):
        kbp.known_bad_image("", "spark-1", True, 2, 1, stderr)


def test_the_lab_images_probe_output_is_read_whole():
    """The lab image's probe output (same as the development machine's, run on spark-1 2026-12-03)."""
    stdout = (FIXTURES / "known_bad" / "field_probe_no_nccl.txt").read_text().splitlines()[-1] + "\n"
    image = kbp.known_bad_image(stdout, "spark-1", True, 2, 1, "")
    assert [row["status"] for row in image["results"]] == ["not_applicable", "not_applicable"]


def test_known_bad_node_refuses_an_unknown_row_to_accept():
    with pytest.raises(AnsibleFilterError, match="spark-2: preflight_known_bad_accept names unknown rows"):
        kbp.known_bad_node("spark-2", True, "580.95.05", accept=["no_such_row"])


def test_every_filter_has_its_documentation_file():
    here = Path(kbp.__file__).parent
    for name in kbp.FilterModule().filters():
        doc = yaml.safe_load((here / f"{name}.yml").read_text())
        assert doc["DOCUMENTATION"]["name"] == name
        assert doc["EXAMPLES"].strip()
        assert "_value" in doc["RETURN"]
