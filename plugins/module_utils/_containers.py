# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Which container a PID runs in: ``/proc/<pid>/cgroup``, then the Docker API.

The cgroup path names the container ID; Docker names the container, its image and
labels (the project's label is how preflight tells its own vLLM from a stale consumer).
"""

from __future__ import annotations

import json
import os
import re

# Runtime and 64-hex container ID in a cgroup path, most specific first. Nested engines
# (Docker in the lab's systemd containers) stack paths, so the last match wins.
_CGROUP_PATTERNS = (
    ("docker", re.compile(r"/docker-([0-9a-f]{64})\.scope")),  # cgroup v2, systemd driver
    ("docker", re.compile(r"/docker/([0-9a-f]{64})")),  # cgroup v1 or cgroupfs driver
    ("containerd", re.compile(r"/cri-containerd-([0-9a-f]{64})\.scope")),
    ("cri-o", re.compile(r"/crio-([0-9a-f]{64})\.scope")),
    ("podman", re.compile(r"/libpod-([0-9a-f]{64})\.scope")),
    ("kubepods", re.compile(r"/kubepods[^:\n]*/pod[0-9a-f_-]+/([0-9a-f]{64})")),  # cgroupfs driver
)


def container_from_cgroup(text):
    """``{runtime, id}`` of the innermost container in a ``/proc/<pid>/cgroup`` text, or None."""
    best = None
    for line in text.splitlines():
        # "hierarchy-id:controllers:path"; v2 has the single line "0::path".
        path = line.split(":", 2)[-1]
        for runtime, pattern in _CGROUP_PATTERNS:
            for match in pattern.finditer(path):
                if best is None or match.start() >= best[0]:
                    best = (match.start(), runtime, match.group(1))
        if best is not None:
            return {"runtime": best[1], "id": best[2]}
    return None


def read_proc_file(proc_root, pid, name):
    """``/proc/<pid>/<name>`` as text, or None when the PID is gone or not visible."""
    try:
        with open(os.path.join(proc_root, str(pid), name), "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return None


def pid_exists(proc_root, pid):
    return os.path.isdir(os.path.join(proc_root, str(pid)))


def process_name_from_proc(proc_root, pid):
    """The executable path from ``/proc/<pid>/cmdline`` (``comm`` for kernel threads), or None."""
    cmdline = read_proc_file(proc_root, pid, "cmdline")
    if cmdline:
        argv0 = cmdline.split("\0", 1)[0]
        if argv0:
            return argv0
    comm = read_proc_file(proc_root, pid, "comm")
    return (comm.strip() or None) if comm else None


def _from_inspect(data, fallback_id):
    config = data.get("Config") or {}
    return {
        "id": data.get("Id") or fallback_id,
        "name": (data.get("Name") or "").lstrip("/") or None,
        "image": config.get("Image") or data.get("Image") or None,
        "labels": dict(config.get("Labels") or {}),
    }


class DockerLookup:
    """Container details by ID through the docker SDK, else ``docker inspect``; cached.

    ``run_command(argv) -> (rc, stdout, stderr)`` runs the CLI; ``docker_bin`` is its path
    (None when absent). ``client_factory`` makes a docker SDK client (None: SDK unused).
    """

    def __init__(self, run_command=None, docker_bin=None, client_factory=None):
        self._run_command = run_command
        self._docker_bin = docker_bin
        self._client_factory = client_factory
        self._client = None
        self._sdk_failed = client_factory is None
        self._cache = {}
        self.warnings = []

    def _sdk_inspect(self, container_id):
        if self._sdk_failed:
            return None
        try:
            if self._client is None:
                self._client = self._client_factory()
            return self._client.api.inspect_container(container_id)
        except Exception as exc:  # the SDK raises many types; the CLI is the fallback
            if type(exc).__name__ == "NotFound":
                return {}
            self._sdk_failed = True
            self.warnings.append(
                f"docker SDK unavailable ({type(exc).__name__}: {exc}); using the docker CLI"
            )
            return None

    def _cli_inspect(self, container_id):
        if not (self._run_command and self._docker_bin):
            return None
        rc, out, err = self._run_command([self._docker_bin, "inspect", "--type", "container", container_id])
        if rc != 0:
            if "No such" not in (err or ""):
                detail = (err or "").strip()
                self.warnings.append(f"docker inspect {container_id[:12]} failed (rc={rc}): {detail}")
            return {}
        try:
            data = json.loads(out)
        except ValueError:
            self.warnings.append(f"docker inspect {container_id[:12]} printed no JSON")
            return {}
        return data[0] if isinstance(data, list) and data else {}

    def inspect(self, container_id):
        """``{id, name, image, labels}``; name/image None and labels empty when Docker can't tell."""
        if container_id not in self._cache:
            data = self._sdk_inspect(container_id)
            if data is None:
                data = self._cli_inspect(container_id)
            self._cache[container_id] = _from_inspect(data or {}, container_id)
        return self._cache[container_id]


def docker_client_factory():
    """A factory for ``docker.from_env()`` when the docker SDK is importable, else None."""
    try:
        import docker  # noqa: PLC0415 - optional dependency, probed at run time
    except ImportError:
        return None
    return docker.from_env


def container_for_pid(proc_root, pid, docker_lookup):
    """``{id, name, image, labels}`` of the container running ``pid``, or None on the host."""
    cgroup = read_proc_file(proc_root, pid, "cgroup")
    if not cgroup:
        return None
    found = container_from_cgroup(cgroup)
    if found is None:
        return None
    if found["runtime"] == "docker" and docker_lookup is not None:
        return docker_lookup.inspect(found["id"])
    return {"id": found["id"], "name": None, "image": None, "labels": {}}
