"""lab/build-vllm-image and its variants (lab/vllm/variants), against a fake docker CLI.

The tag contract of the normal image is unchanged (a hash of its sources and the base
image's ID, the last stdout line); ``--variant NAME`` prints or builds
``sparkops/vllm-lab:<hash>-NAME`` FROM the normal image, the hash over the normal image's
tag and the variant's definition; an unknown name is refused with the known ones. The
variants file is parsed here on its own, and each variant's environment is given to the
stand-in, which must read it as the switch the variant is named for.
"""
# The stand-in's fixtures (env, model_dir, serve) come from test_vllm_standin; a test
# naming one as its argument is not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._launch_script import render_command
from fake_docker import install
from test_vllm_standin import (  # noqa: F401 - fixtures
    PROBE_PROMPT,
    chat,
    concurrent_answers,
    env,
    load_standin,
    model_dir,
    serve,
)

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "lab" / "build-vllm-image"
VARIANTS = ROOT / "lab" / "vllm" / "variants"
STANDIN = ROOT / "lab" / "vllm" / "vllm"
BASE = "local/debian-systemd:12"
BASE_ID = "sha256:" + "b" * 64
# What the script hashes for the normal image's tag, in its order (then the base image's ID).
SOURCES = [
    "lab/vllm-image.Dockerfile",
    "lab/vllm/vllm",
    "lab/vllm/requirements-ray.txt",
    "plugins/module_utils/_roce.py",
    "plugins/module_utils/_nccl_gid.py",
]
VARIANT_TAG = re.compile(r"^sparkops/vllm-lab:[0-9a-f]{12}-([a-z0-9-]+)$")
# The switches the stand-in reads, by the name of the variant that bakes each in.
SWITCH_OF = {"fail-health": "SPARKOPS_LAB_VLLM_FAIL_HEALTH", "garble": "SPARKOPS_LAB_VLLM_GARBLE_CONCURRENCY"}


def parse_variants(text: str) -> dict[str, dict[str, str]]:
    """{name: {KEY: VALUE}} of a variants file: one variant a line, '-' for no environment."""
    variants: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        name, settings = words[0], words[1:]
        assert re.fullmatch(r"[a-z0-9][a-z0-9-]{0,63}", name), line
        assert name not in variants, f"{name} twice"
        assert settings, f"{name}: no environment ('-' for none)"
        if settings == ["-"]:
            variants[name] = {}
            continue
        pairs = [re.fullmatch(r"([A-Z_][A-Z0-9_]*)=([A-Za-z0-9._:/-]*)", word) for word in settings]
        assert all(pairs), line
        variants[name] = {pair.group(1): pair.group(2) for pair in pairs}
    return variants


def normal_tag(root: Path, base_id: str = BASE_ID) -> str:
    hexes = [hashlib.sha256((root / path).read_bytes()).hexdigest() for path in SOURCES]
    return (
        "sparkops/vllm-lab:" + hashlib.sha256(("\n".join([*hexes, base_id]) + "\n").encode()).hexdigest()[:12]
    )


class Docker:
    """The fake engine's state and call log, and a way to run the script against it."""

    def __init__(self, tmp: Path, script: Path = SCRIPT) -> None:
        self.script = script
        self.state_path = tmp / "docker-state.json"
        self.log_path = tmp / "docker-calls.jsonl"
        self.bin = install(tmp / "bin").parent
        self.images = {BASE: {"Id": BASE_ID, "Labels": {}}}

    @property
    def images(self) -> dict:
        return json.loads(self.state_path.read_text())["images"]

    @images.setter
    def images(self, value: dict) -> None:
        state = json.loads(self.state_path.read_text()) if self.state_path.exists() else {"builds": []}
        self.state_path.write_text(json.dumps({**state, "images": value}))

    @property
    def builds(self) -> list[dict]:
        return json.loads(self.state_path.read_text())["builds"]

    def calls(self) -> list[list[str]]:
        if not self.log_path.exists():
            return []
        return [json.loads(line) for line in self.log_path.read_text().splitlines()]

    def run(self, *args: str) -> subprocess.CompletedProcess:
        environ = {
            **os.environ,
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "FAKE_DOCKER_STATE": str(self.state_path),
            "FAKE_DOCKER_LOG": str(self.log_path),
        }
        return subprocess.run(
            [str(self.script), *args], capture_output=True, text=True, env=environ, timeout=60, check=False
        )


@pytest.fixture
def docker(tmp_path: Path) -> Docker:
    return Docker(tmp_path)


def copy_tree(tmp: Path) -> Path:
    """The script and what it hashes, in a tree of their own (to change the variants file)."""
    root = tmp / "repo"
    for path in [*SOURCES, "lab/build-vllm-image", "lab/vllm/variants"]:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, root / path)
    return root


def last_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()[-1]


# --- the variants file ------------------------------------------------------------------


def test_the_variants_are_next_fail_health_and_garble():
    variants = parse_variants(VARIANTS.read_text())
    assert list(variants) == ["next", "fail-health", "garble"]
    assert variants["next"] == {}  # a good release: only the label sets it apart
    assert variants["fail-health"] == {"SPARKOPS_LAB_VLLM_FAIL_HEALTH": "1"}
    assert variants["garble"] == {"SPARKOPS_LAB_VLLM_GARBLE_CONCURRENCY": "2"}


def test_every_variant_sets_switches_the_stand_in_reads(monkeypatch):
    standin = load_standin()
    text = STANDIN.read_text()
    for name, settings in parse_variants(VARIANTS.read_text()).items():
        for key, value in settings.items():
            assert f'"{key}"' in text, f"{name}: the stand-in reads no {key}"
            # The stand-in's own parser of the switches takes the value, and it turns the switch on.
            monkeypatch.setenv(key, value)
            assert standin.env_int(key) > 0, f"{name}: {key}={value} leaves the switch off"
        if name in SWITCH_OF:
            assert SWITCH_OF[name] in settings


def test_the_stand_in_names_the_switches_it_reads():
    standin = load_standin()
    read = {"fail-health": standin.FAIL_HEALTH_ENV, "garble": standin.GARBLE_CONCURRENCY_ENV}
    assert read == SWITCH_OF


# --- tags -------------------------------------------------------------------------------


def test_tag_only_keeps_the_normal_images_contract(docker):
    result = docker.run("--tag-only")
    assert last_line(result) == normal_tag(ROOT)
    assert docker.calls() == [["image", "inspect", "--format", "{{.Id}}", BASE]]


def test_tag_only_with_a_variant_names_it_and_builds_nothing(docker):
    tags = {}
    for name in parse_variants(VARIANTS.read_text()):
        tags[name] = last_line(docker.run("--tag-only", "--variant", name))
        assert VARIANT_TAG.match(tags[name]).group(1) == name
        assert last_line(docker.run("--tag-only", f"--variant={name}")) == tags[name]  # both spellings
    assert len({tag.split(":")[1][:12] for tag in tags.values()}) == len(tags)
    assert normal_tag(ROOT) not in tags.values()
    assert all(call[:2] == ["image", "inspect"] for call in docker.calls())
    assert docker.builds == []


def test_a_variants_tag_follows_the_normal_images_tag(docker):
    before = last_line(docker.run("--tag-only", "--variant", "garble"))
    docker.images = {BASE: {"Id": "sha256:" + "c" * 64, "Labels": {}}}  # a rebuilt base: a new normal tag
    after = last_line(docker.run("--tag-only", "--variant", "garble"))
    assert before != after and VARIANT_TAG.match(after).group(1) == "garble"


def test_a_variants_tag_follows_its_definition(tmp_path):
    root = copy_tree(tmp_path)
    docker = Docker(tmp_path, root / "lab" / "build-vllm-image")
    assert last_line(docker.run("--tag-only")) == normal_tag(ROOT)  # the copy is the same image
    before = {name: last_line(docker.run("--tag-only", "--variant", name)) for name in ("next", "garble")}
    variants = root / "lab" / "vllm" / "variants"
    variants.write_text(variants.read_text().replace("GARBLE_CONCURRENCY=2", "GARBLE_CONCURRENCY=3"))
    assert last_line(docker.run("--tag-only", "--variant", "garble")) != before["garble"]
    assert last_line(docker.run("--tag-only", "--variant", "next")) == before["next"]


def test_an_unknown_variant_is_refused_naming_the_known_ones(docker):
    result = docker.run("--tag-only", "--variant", "bogus")
    assert result.returncode == 2
    assert result.stdout == ""
    known = ", ".join(parse_variants(VARIANTS.read_text()))
    assert f"unknown variant 'bogus'; the known variants (lab/vllm/variants): {known}" in result.stderr
    assert docker.calls() == []  # refused before anything is asked of docker


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("garble  SPARKOPS_LAB_VLLM_GARBLE_CONCURRENCY=2\n", "variant 'garble' is defined twice"),
        ("broken  lower=case\n", "'lower=case' is not KEY=VALUE"),
        ("broken  KEY='quoted'\n", "is not KEY=VALUE"),
        ("Broken  -\n", "variant name 'Broken'"),
        ("broken\n", "variant 'broken' has no environment (write '-' for none)"),
    ],
)
def test_a_malformed_variants_file_is_refused_with_its_line(tmp_path, line, says):
    root = copy_tree(tmp_path)
    variants = root / "lab" / "vllm" / "variants"
    variants.write_text(variants.read_text() + line)
    count = len(variants.read_text().splitlines())
    result = Docker(tmp_path, root / "lab" / "build-vllm-image").run("--tag-only", "--variant", "next")
    assert result.returncode == 1
    assert f"{variants}:{count}: " in result.stderr and says in result.stderr


# --- building ---------------------------------------------------------------------------


def archive_config(path: Path) -> str:
    with tarfile.open(path) as tar:
        return json.load(tar.extractfile("manifest.json"))[0]["Config"]


def test_a_variant_is_built_from_the_normal_image_saved_and_then_reused(docker, tmp_path):
    normal = normal_tag(ROOT)
    normal_id = "sha256:" + "a" * 64
    docker.images = {**docker.images, normal: {"Id": normal_id, "Labels": {"io.sparkops.vllm.lab": "true"}}}
    archive = tmp_path / "images" / "vllm-lab-garble.tar"

    result = docker.run("--variant", "garble", "--save", str(archive))
    tag = last_line(result)
    assert tag == last_line(docker.run("--tag-only", "--variant", "garble"))
    assert f"image {normal} present, reused" in result.stderr
    assert f"built {tag} in " in result.stderr and f"saved {tag} to {archive}" in result.stderr
    [build] = docker.builds
    assert build["tag"] == tag
    assert build["dockerfile"].splitlines() == [
        f"FROM {normal}",
        f'LABEL io.sparkops.vllm.lab.variant="garble" io.sparkops.vllm.lab.variant-of="{normal}"',
        "ENV SPARKOPS_LAB_VLLM_GARBLE_CONCURRENCY=2",
    ]
    assert build["labels"] == {"io.sparkops.vllm.lab.variant-parent-id": normal_id}
    image = docker.images[tag]
    assert image["Id"] != normal_id and image["Labels"]["io.sparkops.vllm.lab"] == "true"
    [save] = [call for call in docker.calls() if call[0] == "save"]
    assert save[:2] == ["save", "-o"] and save[2].startswith(f"{archive}.tmp.") and save[3] == tag
    assert archive_config(archive) == image["Id"].split(":")[1] + ".json"

    again = docker.run("--variant", "garble", "--save", str(archive))
    assert last_line(again) == tag
    assert f"image {tag} present, reused" in again.stderr
    assert f"archive {archive} already holds {tag}, kept" in again.stderr
    assert not re.search(r"build-vllm-image: (built|saved) ", again.stderr)  # the role's changed_when
    assert len(docker.builds) == 1

    # The normal image rebuilt under its tag: the variant is built again FROM it.
    docker.images = {**docker.images, normal: {"Id": "sha256:" + "d" * 64, "Labels": {}}}
    rebuilt = docker.run("--variant", "garble")
    assert last_line(rebuilt) == tag
    assert f"image {tag} was not built from the {normal} present ({normal_id})" in rebuilt.stderr
    assert docker.builds[-1]["labels"] == {"io.sparkops.vllm.lab.variant-parent-id": "sha256:" + "d" * 64}


def test_a_variant_present_is_reused_without_its_normal_image(docker):
    tag = last_line(docker.run("--tag-only", "--variant", "next"))
    parent = {"io.sparkops.vllm.lab.variant-parent-id": "sha256:" + "a" * 64}
    docker.images = {**docker.images, tag: {"Id": "sha256:" + "e" * 64, "Labels": parent}}
    result = docker.run("--variant", "next")
    assert last_line(result) == tag
    assert f"image {tag} present, reused" in result.stderr
    assert docker.builds == []


def test_next_differs_from_the_normal_image_by_its_label_only(docker):
    normal = normal_tag(ROOT)
    docker.images = {**docker.images, normal: {"Id": "sha256:" + "a" * 64, "Labels": {}}}
    tag = last_line(docker.run("--variant", "next"))
    [build] = docker.builds
    assert build["dockerfile"].splitlines() == [
        f"FROM {normal}",
        f'LABEL io.sparkops.vllm.lab.variant="next" io.sparkops.vllm.lab.variant-of="{normal}"',
    ]
    assert docker.images[tag]["Id"] != docker.images[normal]["Id"]


# --- the variants' environment in the stand-in ------------------------------------------


def variant_env(name: str) -> dict[str, str]:
    return parse_variants(VARIANTS.read_text())[name]


def test_next_serves_as_the_normal_image(serve, env):
    server = serve(environ={**env, **variant_env("next"), "SPARKOPS_LAB_VLLM_TOKEN_S": "0.02"})
    assert server.request("GET", "/health")[0] == 200
    alone = chat(server, PROBE_PROMPT, 16)[1]["choices"][0]["message"]["content"]
    assert {text for text, _ in concurrent_answers(server, 4, PROBE_PROMPT)} == {alone}
    assert server.stop() == 0


def test_fail_health_never_becomes_healthy(serve, env):
    server = serve(environ={**env, **variant_env("fail-health")})
    assert server.request("GET", "/health")[0] == 503
    assert server.stop() == 0


def test_garble_answers_alone_but_garbles_two_requests_at_once(serve, env):
    server = serve(environ={**env, **variant_env("garble"), "SPARKOPS_LAB_VLLM_TOKEN_S": "0.02"})
    alone = chat(server, PROBE_PROMPT, 16)[1]["choices"][0]["message"]["content"]
    assert "garbled" not in alone
    texts = [text for text, _ in concurrent_answers(server, 2, PROBE_PROMPT)]
    assert all("garbled-" in text for text in texts) and len(set(texts)) == 2
    assert server.stop() == 0


# --- how the image's environment reaches serve (lab/README.md, "Image variants") ---------


def test_serve_runs_a_container_of_the_image_that_execs_vllm():
    """Serve is `docker run <image>` of a bash launch script that execs vllm: the image's ENV is its environment."""
    unit = (ROOT / "roles" / "vllm_serve" / "templates" / "vllm.service.j2").read_text()
    start = unit[unit.index("\nExecStart=") + 1 : unit.index("\nExecStop=")]
    assert start.startswith("ExecStart=/usr/bin/docker run --rm ")
    assert "docker exec" not in start
    assert start.rstrip().endswith(
        "--entrypoint /bin/bash \\\n  {{ vllm_serve_image }} {{ _vllm_serve_layout.launch_script_mount }}"
    )
    launch = (ROOT / "templates" / "vllm-launch.sh.j2").read_text()
    assert launch.rstrip().endswith("set -euo pipefail\n{{ launch_script_command }}")
    assert render_command(["serve", "/models/tiny"]) == "exec vllm serve /models/tiny"
    assert not re.search(r"\benv -i\b|\bunset\b", launch)


def test_nothing_the_product_writes_overrides_a_baked_in_switch():
    """No role, template, plugin or inventory names a stand-in switch (an --env-file line would win over ENV)."""
    found = [
        str(path.relative_to(ROOT))
        for top in ("roles", "templates", "plugins", "inventory", "playbooks")
        for path in sorted((ROOT / top).rglob("*"))
        if path.is_file()
        and path.suffix in {".yml", ".j2", ".py", ".sh"}
        and "SPARKOPS_LAB_VLLM_" in path.read_text()
    ]
    assert found == []
