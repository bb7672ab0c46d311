# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Read a ``docker save`` archive's manifest: the image ID and tags it holds, without loading it.

Docker writes ``manifest.json`` at the archive's root: a list with one entry per
image, each naming its config blob (``<hex>.json`` before Docker 25,
``blobs/sha256/<hex>`` in the OCI layout of Docker 25 and later), its
``RepoTags`` and its ``Layers``. The image ID Docker reports after ``docker load``
(``docker image inspect --format '{{.Id}}'``) is ``sha256:`` and the config
blob's digest, which is the hex in that name.
"""

from __future__ import annotations

import json
import re
import tarfile

_CONFIG_NAME = re.compile(r"^(?:blobs/sha256/)?([0-9a-f]{64})(?:\.json)?$")


class ImageArchiveError(Exception):
    """The archive or its manifest is not a ``docker save`` archive this can read."""


def images_from_manifest(text):
    """The images of a ``manifest.json``: ``[{image_id, repo_tags, layers}]`` in archive order."""
    try:
        entries = json.loads(text)
    except ValueError as exc:
        raise ImageArchiveError(f"manifest.json is not JSON ({exc})") from None
    if not isinstance(entries, list) or not entries:
        raise ImageArchiveError("manifest.json lists no image")
    images = []
    for number, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict) or not isinstance(entry.get("Config"), str):
            raise ImageArchiveError(f"manifest.json entry {number} has no Config")
        match = _CONFIG_NAME.match(entry["Config"])
        if not match:
            raise ImageArchiveError(
                f"manifest.json entry {number}: config {entry['Config']!r} is not named by its sha256 digest"
            )
        tags = entry.get("RepoTags") or []
        layers = entry.get("Layers") or []
        if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
            raise ImageArchiveError(f"manifest.json entry {number}: RepoTags is not a list of strings")
        images.append({"image_id": "sha256:" + match.group(1), "repo_tags": tags, "layers": len(layers)})
    return images


def read_manifest(path):
    """The text of ``manifest.json`` in the (plain or compressed) tar archive at ``path``.

    The archive is opened seekable, so tarfile reads each member's header and seeks
    over its data: finding the manifest in a plain archive (what ``docker save``
    writes) reads a few kilobytes, however large the layers; Docker writes the
    manifest near the end. A compressed archive is decompressed up to the manifest.
    """
    try:
        with tarfile.open(path, mode="r:*") as archive:
            for member in archive:
                if member.name.lstrip("./") == "manifest.json" and member.isfile():
                    handle = archive.extractfile(member)
                    return handle.read().decode("utf-8")
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise ImageArchiveError(f"cannot read {path} as a tar archive ({exc})") from None
    raise ImageArchiveError(f"{path} has no manifest.json: it is not a `docker save` archive")


def image_for_reference(images, reference):
    """The image of ``images`` tagged ``reference``; the only image when ``reference`` is empty."""
    if reference:
        wanted = reference if ":" in reference.rsplit("/", 1)[-1] else reference + ":latest"
        for image in images:
            if wanted in image["repo_tags"]:
                return image
        tags = sorted(tag for image in images for tag in image["repo_tags"])
        raise ImageArchiveError(
            f"the archive holds no image tagged {reference} (its tags: {', '.join(tags) or 'none'})"
        )
    if len(images) != 1:
        raise ImageArchiveError(f"the archive holds {len(images)} images; name the one to use")
    return images[0]
