"""Tables for plugins/module_utils/_image_archive.py: docker save manifests, read without loading."""

import io
import json
import tarfile

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._image_archive import (
    ImageArchiveError,
    image_for_reference,
    images_from_manifest,
    read_manifest,
)

HEX = "957c757390ecb03bcfafb100d1ff06f060361706d40e9c62a7d1f1b32203caa1"
OTHER = "a6e5f41634985e96860735c0382d071470cc88161427488d0b439800010da373"

# Real: `docker save local/debian-systemd:12 | tar -xO manifest.json` on Docker 20.10.24.
CLASSIC = (
    '[{"Config":"' + HEX + '.json","RepoTags":["local/debian-systemd:12"],'
    '"Layers":["640bb236089042dda9c6a4649fe3085b1208f850c401f5893043f825805c1f96/layer.tar"]}]'
)
# The OCI layout of Docker 25 and later.
OCI = json.dumps(
    [
        {
            "Config": "blobs/sha256/" + OTHER,
            "RepoTags": ["vllm/vllm-openai:v0.17.1"],
            "Layers": ["blobs/sha256/" + "1" * 64, "blobs/sha256/" + "2" * 64],
            "LayerSources": {},
        }
    ]
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (CLASSIC, [{"image_id": "sha256:" + HEX, "repo_tags": ["local/debian-systemd:12"], "layers": 1}]),
        (OCI, [{"image_id": "sha256:" + OTHER, "repo_tags": ["vllm/vllm-openai:v0.17.1"], "layers": 2}]),
        # `docker save <id>` writes no tags.
        (
            '[{"Config":"' + HEX + '.json","RepoTags":null,"Layers":[]}]',
            [{"image_id": "sha256:" + HEX, "repo_tags": [], "layers": 0}],
        ),
    ],
)
def test_images_from_manifest(text, expected):
    assert images_from_manifest(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not JSON"),
        ("[]", "lists no image"),
        ('{"Config": "x"}', "lists no image"),
        ('[{"RepoTags": []}]', "entry 1 has no Config"),
        ('[{"Config": "config.json"}]', "not named by its sha256 digest"),
        ('[{"Config": "' + HEX + '.json", "RepoTags": "a:b"}]', "RepoTags is not a list"),
    ],
)
def test_images_from_manifest_refuses(text, message):
    with pytest.raises(ImageArchiveError, match=message):
        images_from_manifest(text)


def _archive(path, members, mode="w"):
    with tarfile.open(path, mode) as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("mode", ["w", "w:gz"])
def test_read_manifest_streams_plain_and_compressed(tmp_path, mode):
    path = _archive(
        tmp_path / "image.tar",
        [(HEX + ".json", b"{}"), ("layer/layer.tar", b"\0" * 4096), ("manifest.json", CLASSIC.encode())],
        mode,
    )
    assert read_manifest(path) == CLASSIC


def test_read_manifest_without_manifest(tmp_path):
    path = _archive(tmp_path / "other.tar", [("hello.txt", b"hi")])
    with pytest.raises(ImageArchiveError, match="not a `docker save` archive"):
        read_manifest(path)


def test_read_manifest_of_a_non_archive(tmp_path):
    path = tmp_path / "junk.tar"
    path.write_bytes(b"this is not a tar file" * 40)
    with pytest.raises(ImageArchiveError, match="cannot read"):
        read_manifest(path)


TWO = images_from_manifest(
    json.dumps(
        [
            {
                "Config": HEX + ".json",
                "RepoTags": ["sparkops/vllm-lab:cc9f594b5600", "sparkops/vllm-lab:latest"],
            },
            {"Config": OTHER + ".json", "RepoTags": ["registry:5000/team/vllm:v1"]},
        ]
    )
)


@pytest.mark.parametrize(
    ("reference", "image_id"),
    [
        ("sparkops/vllm-lab:cc9f594b5600", "sha256:" + HEX),
        ("sparkops/vllm-lab", "sha256:" + HEX),  # no tag means latest
        ("registry:5000/team/vllm:v1", "sha256:" + OTHER),  # a registry port is not a tag
    ],
)
def test_image_for_reference(reference, image_id):
    assert image_for_reference(TWO, reference)["image_id"] == image_id


def test_image_for_reference_names_the_tags_it_has():
    with pytest.raises(ImageArchiveError, match=r"no image tagged team/vllm:v2 \(its tags: registry:5000"):
        image_for_reference(TWO, "team/vllm:v2")


def test_image_for_reference_empty_needs_one_image():
    assert image_for_reference(TWO[:1], "")["image_id"] == "sha256:" + HEX
    with pytest.raises(ImageArchiveError, match="holds 2 images"):
        image_for_reference(TWO, "")
