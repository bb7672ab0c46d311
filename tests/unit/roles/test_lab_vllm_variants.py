"""roles/lab tasks/vllm_variants.yml, run by ansible-playbook against a fake docker CLI.

The entry point a Molecule scenario calls to get variants of the lab image for an upgrade
test: each named variant built and saved (lab/build-vllm-image --variant NAME --save), its
reference and archive as the fact lab_vllm_variant_images; a rerun changes nothing; check
mode builds and saves nothing; an unknown name fails with the known ones.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "unit" / "lab"))
from fake_docker import install

ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
SCRIPT = ROOT / "lab" / "build-vllm-image"
BASE_ID = "sha256:" + "b" * 64
NORMAL_ID = "sha256:" + "a" * 64

PLAYBOOK = """
- name: Variants of the lab image
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Build them
      ansible.builtin.include_role:
        name: lab
        tasks_from: vllm_variants
      vars:
        lab_vllm_variants: {variants}
    - name: Keep the fact
      ansible.builtin.copy:
        content: "{{{{ lab_vllm_variant_images | to_json }}}}"
        dest: "{out}"
        mode: "0600"
      check_mode: false
      changed_when: false
"""


class Lab:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.bin = install(work / "bin").parent
        self.state = work / "docker-state.json"
        self.log = work / "docker-calls.jsonl"
        self.lab_dir = work / "lab"
        self.environ = {
            "PATH": f"{self.bin}:{ANSIBLE_PLAYBOOK.parent}:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(work),
            "ANSIBLE_NOCOLOR": "1",
            "SPARKOPS_LAB_DIR": str(self.lab_dir),
            "FAKE_DOCKER_STATE": str(self.state),
            "FAKE_DOCKER_LOG": str(self.log),
        }
        base = {"local/debian-systemd:12": {"Id": BASE_ID, "Labels": {}}}
        self.state.write_text(json.dumps({"images": base, "builds": []}))
        self.normal = self.tag()
        # The normal image is present: only the variants are built.
        self.state.write_text(json.dumps({"images": {**base, self.normal: {"Id": NORMAL_ID}}, "builds": []}))

    def tag(self, variant: str = "") -> str:
        done = subprocess.run(
            [str(SCRIPT), "--tag-only", *(["--variant", variant] if variant else [])],
            env=self.environ,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.splitlines()[-1]

    def builds(self) -> list[dict]:
        return json.loads(self.state.read_text())["builds"]

    def play(self, variants: list[str], *extra: str) -> tuple[subprocess.CompletedProcess, dict | None]:
        out = self.work / "facts.json"
        out.unlink(missing_ok=True)
        playbook = self.work / "variants.yml"
        playbook.write_text(PLAYBOOK.format(variants=json.dumps(variants), out=out))
        run = subprocess.run(
            [
                str(ANSIBLE_PLAYBOOK),
                "-i",
                "localhost,",
                "-e",
                f"ansible_python_interpreter={sys.executable}",
                str(playbook),
                *extra,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=self.environ,
            timeout=300,
            check=False,
        )
        return run, (json.loads(out.read_text()) if out.exists() else None)


def changed(run: subprocess.CompletedProcess) -> int:
    return int(re.search(r"localhost\s+: ok=\d+\s+changed=(\d+)", run.stdout).group(1))


@pytest.fixture
def lab(tmp_path: Path) -> Lab:
    return Lab(tmp_path)


def test_variants_are_built_saved_and_recorded_then_kept(lab):
    images = lab.lab_dir / "images"
    expected = {
        name: {"ref": lab.tag(name), "archive": f"{images}/vllm-lab-{name}.tar"}
        for name in ("next", "garble")
    }

    checked, facts = lab.play(["next", "garble"], "--check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert facts == expected
    assert changed(checked) == 0 and lab.builds() == [] and not images.exists()

    built, facts = lab.play(["next", "garble"])
    assert built.returncode == 0, built.stdout + built.stderr
    assert facts == expected
    assert changed(built) == 1  # the recap counts the build task once, its items below
    assert built.stdout.count("changed: [localhost] => (item=") == 2
    assert [build["tag"] for build in lab.builds()] == [expected["next"]["ref"], expected["garble"]["ref"]]
    assert all(build["dockerfile"].startswith(f"FROM {lab.normal}\n") for build in lab.builds())
    assert sorted(path.name for path in images.iterdir()) == ["vllm-lab-garble.tar", "vllm-lab-next.tar"]

    again, facts = lab.play(["next", "garble"])
    assert again.returncode == 0, again.stdout + again.stderr
    assert facts == expected
    assert changed(again) == 0 and len(lab.builds()) == 2


def test_an_unknown_variant_fails_naming_the_known_ones(lab):
    run, facts = lab.play(["next", "bogus"])
    assert run.returncode == 2, run.stdout
    assert facts is None
    # The script's message, in the failed item's stderr (YAML output: folded, quotes doubled).
    said = " ".join(run.stdout.split()).replace("''", "'")
    assert (
        "unknown variant 'bogus'; the known variants (lab/vllm/variants): next, fail-health, garble" in said
    )
