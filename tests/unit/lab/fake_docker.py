"""A stand-in `docker` CLI for the tests of lab/build-vllm-image: no engine, a JSON file of images.

Installed as ``<dir>/docker`` by :func:`install`; the state file (``FAKE_DOCKER_STATE``) maps
references to ``{"Id": ..., "Labels": {...}}`` and keeps every build's Dockerfile; every call's
argv is appended to ``FAKE_DOCKER_LOG`` as one JSON line. It answers only what the script
asks: ``image inspect [--format F] REF``, ``build -q -t TAG --label K=V ... -`` (a Dockerfile on
stdin, no context) and ``save -o PATH REF`` (a tar with docker save's manifest.json).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import sys
import tarfile
from pathlib import Path

LABEL_INDEX = re.compile(r'^\{\{index \.Config\.Labels "([^"]+)"\}\}$')


def _state(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {"images": {}, "builds": []}


def _inspect(state: dict, args: list[str]) -> int:
    fmt = None
    if args[:1] == ["--format"]:
        fmt, args = args[1], args[2:]
    image = state["images"].get(args[0])
    if image is None:
        print(f"Error: No such image: {args[0]}", file=sys.stderr)
        return 1
    if fmt is None:
        print(json.dumps([image]))
    elif fmt == "{{.Id}}":
        print(image["Id"])
    elif match := LABEL_INDEX.match(fmt):
        print(image.get("Labels", {}).get(match.group(1), ""))
    else:
        print(f"fake docker: format {fmt!r} not understood", file=sys.stderr)
        return 125
    return 0


def _build(state: dict, args: list[str]) -> int:
    tag, labels, rest = None, {}, list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "-q":
            continue
        if arg == "-t":
            tag = rest.pop(0)
        elif arg == "--label":
            key, _, value = rest.pop(0).partition("=")
            labels[key] = value
        elif arg == "-" and not rest:
            break
        else:
            print(
                f"fake docker: build argument {arg!r} not understood (only a Dockerfile on stdin)",
                file=sys.stderr,
            )
            return 125
    dockerfile = sys.stdin.read()
    parent = re.search(r"^FROM (\S+)$", dockerfile, re.MULTILINE).group(1)
    if parent not in state["images"]:
        print(f"pull access denied for {parent}", file=sys.stderr)
        return 1
    # LABEL k="v" ... lines of the Dockerfile, over the parent's labels, under --label's.
    merged = dict(state["images"][parent].get("Labels", {}))
    for line in re.findall(r"^LABEL (.*)$", dockerfile, re.MULTILINE):
        merged.update(re.findall(r'(\S+?)="([^"]*)"', line))
    merged.update(labels)
    image_id = (
        "sha256:" + hashlib.sha256((dockerfile + json.dumps(merged, sort_keys=True)).encode()).hexdigest()
    )
    state["images"][tag] = {"Id": image_id, "Labels": merged}
    state["builds"].append({"tag": tag, "dockerfile": dockerfile, "labels": labels})
    print(image_id)
    return 0


def _save(state: dict, args: list[str]) -> int:
    if args[0] != "-o" or len(args) != 3:
        print(f"fake docker: save {args} not understood", file=sys.stderr)
        return 125
    path, ref = args[1], args[2]
    image = state["images"][ref]
    manifest = json.dumps([{"Config": image["Id"].split(":")[1] + ".json", "RepoTags": [ref], "Layers": []}])
    with tarfile.open(path, "w") as tar:
        data = manifest.encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return 0


def main(argv: list[str]) -> int:
    state_path = Path(os.environ["FAKE_DOCKER_STATE"])
    with open(os.environ["FAKE_DOCKER_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps(argv) + "\n")
    state = _state(state_path)
    if argv[:2] == ["image", "inspect"]:
        code = _inspect(state, argv[2:])
    elif argv[:1] == ["build"]:
        code = _build(state, argv[1:])
    elif argv[:1] == ["save"]:
        code = _save(state, argv[1:])
    else:
        print(f"fake docker: {argv} not understood", file=sys.stderr)
        code = 125
    state_path.write_text(json.dumps(state))
    return code


def install(directory: Path) -> Path:
    """``directory/docker``, running this module with the test's Python."""
    directory.mkdir(parents=True, exist_ok=True)
    docker = directory / "docker"
    docker.write_text(
        f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import fake_docker\nsys.exit(fake_docker.main(sys.argv[1:]))\n"
    )
    docker.chmod(0o755)
    return docker


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
