"""The serve container's env file as Ansible renders the role's task: each secret on a line of its own.

A "\\n" inside a folded scalar's Jinja string stays two characters under ansible-core 2.19,
which once put ``VLLM_API_KEY=…`` inside the header comment: the container got no key and
the lab's API answered without one. This renders the role's own task content with Ansible's
own templar and the collection's filter, in a child process (the collection loader it
installs is global).
"""

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
CONFIGURE = ROOT / "roles" / "vllm_serve" / "tasks" / "configure.yml"
KEY = "Zq4TgW8rN2vKx7LmP0aB3cD5eF6hJ9sY"
SETTINGS = {"VLLM_API_KEY": "sparkops_api_key", "HF_TOKEN": "sparkops_hf_token"}
RENDER = """
import json, sys
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
_AnsibleCollectionFinder(paths=[sys.argv[1]])._install()
template, variables = json.load(sys.stdin)
print(json.dumps(Templar(loader=DataLoader(), variables=variables).template(trust_as_template(template))))
"""


def _content_template():
    tasks = yaml.safe_load(CONFIGURE.read_text())
    task = next(
        t for t in tasks if t.get("ansible.builtin.copy", {}).get("dest") == "{{ _vllm_serve_secrets_file }}"
    )
    return task["ansible.builtin.copy"]["content"]


def _render(values):
    variables = {"_vllm_serve_secrets_env": values, "_vllm_serve_secrets_settings": SETTINGS}
    done = subprocess.run(
        [sys.executable, "-c", RENDER, str(ROOT / ".collections")],
        input=json.dumps([_content_template(), variables]),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_api_key_is_a_line_of_its_own():
    lines = _render({"VLLM_API_KEY": KEY, "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz"}).splitlines()
    assert lines[0].startswith("# ")
    assert f"VLLM_API_KEY={KEY}" in lines
    assert "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz" in lines
    # What docker --env-file reads: every line is a comment, empty, or NAME=value.
    assert all(line.startswith("#") or not line or "=" in line for line in lines)


def test_an_empty_secret_sets_no_line():
    lines = _render({"VLLM_API_KEY": KEY, "HF_TOKEN": ""}).splitlines()
    assert f"VLLM_API_KEY={KEY}" in lines
    assert not [line for line in lines if line.startswith("HF_TOKEN=")]
