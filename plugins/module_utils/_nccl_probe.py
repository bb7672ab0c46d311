# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Which NCCL libraries an image holds, and which one its torch loads: run inside the image.

The vllm_image stage runs this file's text with the image's own ``python3``
(``docker run --rm --network none --entrypoint python3 IMAGE -c SOURCE``), so it uses
the standard library only and prints one JSON object; the known-bad platform table
(``_known_bad_platforms.py``) reads it. No GPU is needed: ``ncclGetVersion`` and
``torch.cuda.nccl.version()`` only ask the library for its version.

- pip: every installed distribution named ``nvidia-nccl-cu<N>`` (PyTorch's wheels
  depend on one; vLLM #42354 lists ``nvidia-nccl-cu13==2.28.9``), with its
  ``libnccl.so*``;
- system: every ``libnccl.so*`` that ``ldconfig -p`` lists (the DGX OS ``libnccl2``
  package puts it in ``/usr/lib/aarch64-linux-gnu``, vLLM #41725);
- torch: ``torch.cuda.nccl.version()`` and the ``libnccl`` paths mapped into the
  process once torch has loaded it (``/proc/self/maps``). vLLM's own NCCL wrapper opens
  ``libnccl.so.2`` by name (``find_nccl_library`` in vllm/utils, 0.17.1), which the
  dynamic loader answers with the library torch already loaded.

Each library gets its ``ncclGetVersion`` code and its sha256: vLLM #42354 found the
pip wheel and the system library both report 2.28.9 while being different builds.
"""

import ctypes
import hashlib
import json
import os
import re
import subprocess
import sys

_PIP_NAME = re.compile(r"^nvidia[-_]nccl[-_]cu\d+$", re.IGNORECASE)
_LDCONFIG_LINE = re.compile(r"^\s*(?P<name>libnccl\.so[.\d]*)\s.*=>\s*(?P<path>\S+)\s*$")


def _library(path):
    """``{path, realpath, sha256, version_code}`` of one library file."""
    entry = {"path": path, "realpath": os.path.realpath(path), "sha256": None, "version_code": None}
    try:
        digest = hashlib.sha256()
        with open(entry["realpath"], "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        entry["sha256"] = digest.hexdigest()
    except OSError as exc:
        entry["error"] = str(exc)
        return entry
    try:
        code = ctypes.c_int(0)
        if ctypes.CDLL(entry["realpath"]).ncclGetVersion(ctypes.byref(code)) == 0:
            entry["version_code"] = code.value
    except (OSError, AttributeError) as exc:
        entry["error"] = str(exc)
    return entry


def _pip():
    try:
        from importlib import metadata  # noqa: PLC0415 - absent from Python before 3.8
    except ImportError:
        return []
    found = []
    for dist in metadata.distributions():
        name = dist.metadata.get("Name") or ""
        if not _PIP_NAME.match(name):
            continue
        libraries = [
            str(dist.locate_file(item))
            for item in (dist.files or [])
            if os.path.basename(str(item)).startswith("libnccl.so")
        ]
        found.append(
            {
                "package": name,
                "version": dist.version,
                "libraries": [_library(path) for path in sorted(libraries)],
            }
        )
    return found


def _system():
    try:
        out = subprocess.run(
            ["ldconfig", "-p"],
            capture_output=True,
            text=True,
            check=False,
            env={"LC_ALL": "C", "PATH": "/usr/sbin:/sbin:/usr/bin:/bin"},
        ).stdout
    except OSError:
        return []
    paths = sorted({m.group("path") for m in map(_LDCONFIG_LINE.match, out.splitlines()) if m})
    return [_library(path) for path in paths]


def _torch():
    try:
        import torch  # noqa: PLC0415 - optional: an image without torch still answers
    except Exception as exc:  # any import failure means "no torch to ask"
        return {"error": f"{type(exc).__name__}: {exc}"}
    result = {"version": getattr(torch, "__version__", None), "nccl_version": None, "loaded": []}
    try:
        result["nccl_version"] = ".".join(str(part) for part in torch.cuda.nccl.version())
    except Exception as exc:  # a CPU-only torch has no NCCL
        result["error"] = f"{type(exc).__name__}: {exc}"
    try:
        with open("/proc/self/maps", encoding="utf-8") as handle:
            result["loaded"] = sorted({line.split()[-1] for line in handle if "libnccl" in line})
    except OSError:
        pass
    return result


def probe():
    # torch first: reading a library's version loads it into this process, and the
    # maps would then show the probe's own loads instead of torch's.
    loaded_by_torch = _torch()
    return {"python": sys.version.split()[0], "torch": loaded_by_torch, "pip": _pip(), "system": _system()}


if __name__ == "__main__":
    print(json.dumps(probe(), sort_keys=True))
