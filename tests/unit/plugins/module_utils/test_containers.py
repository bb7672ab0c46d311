"""plugins/module_utils/_containers.py: cgroup forms, a fake /proc tree, the docker SDK and CLI."""

import json
from functools import partial
from types import SimpleNamespace

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._containers import (
    DockerLookup,
    container_for_pid,
    container_from_cgroup,
    docker_client_factory,
    process_name_from_proc,
)
from conftest import FIXTURES

CID = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa99887766554433221100"
INNER = "aa" * 32


@pytest.mark.parametrize(
    ("cgroup", "expected"),
    [
        # cgroup v1 (the lab's Docker: "…:/docker/<id>" on every controller line)
        (
            f"12:memory:/docker/{CID}\n11:cpuset:/docker/{CID}\n0::/docker/{CID}\n",
            {"runtime": "docker", "id": CID},
        ),
        # cgroup v2 with the systemd driver
        (f"0::/system.slice/docker-{CID}.scope\n", {"runtime": "docker", "id": CID}),
        # Docker inside a lab node's container: the innermost one is the process's
        (f"4:pids:/docker/{CID}/docker/{INNER}\n", {"runtime": "docker", "id": INNER}),
        (
            f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1a2b.slice/cri-containerd-{CID}.scope\n",
            {"runtime": "containerd", "id": CID},
        ),
        (
            f"0::/kubepods/burstable/pod1a2b3c4d-0000-1111-2222-333344445555/{CID}\n",
            {"runtime": "kubepods", "id": CID},
        ),
        (f"0::/machine.slice/libpod-{CID}.scope/container\n", {"runtime": "podman", "id": CID}),
        (f"0::/kubepods.slice/crio-{CID}.scope\n", {"runtime": "cri-o", "id": CID}),
        # the host, a user session, and the real H200 VM's process_api cgroup
        ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
        ("12:memory:/\n0::/\n", None),
        ((FIXTURES / "real_h200" / "load_pid_cgroup.txt").read_text().splitlines()[2] + "\n", None),
        # a truncated ID is no ID
        ("0::/system.slice/docker-3f4e5d6c.scope\n", None),
    ],
)
def test_container_from_cgroup(cgroup, expected):
    assert container_from_cgroup(cgroup) == expected


def make_proc(root, pid, cgroup=None, cmdline=None, comm=None):
    directory = root / str(pid)
    directory.mkdir(parents=True)
    if cgroup is not None:
        (directory / "cgroup").write_text(cgroup)
    if cmdline is not None:
        (directory / "cmdline").write_bytes(cmdline)
    if comm is not None:
        (directory / "comm").write_text(comm)
    return root


class FakeApi:
    def __init__(self, containers):
        self.containers = containers
        self.calls = []

    def inspect_container(self, container_id):
        self.calls.append(container_id)
        if container_id not in self.containers:
            raise type("NotFound", (Exception,), {})(f"No such container: {container_id}")
        return self.containers[container_id]


INSPECT = {
    "Id": CID,
    "Name": "/embeddings",
    "Image": "sha256:0123",
    "Config": {"Image": "ghcr.io/example/embeddings:1.2", "Labels": {"com.example.app": "embeddings"}},
}


def test_docker_sdk_lookup_is_cached(tmp_path):
    api = FakeApi({CID: INSPECT})
    lookup = DockerLookup(client_factory=partial(SimpleNamespace, api=api))
    proc = make_proc(tmp_path, 4242, cgroup=f"0::/system.slice/docker-{CID}.scope\n")
    expected = {
        "id": CID,
        "name": "embeddings",
        "image": "ghcr.io/example/embeddings:1.2",
        "labels": {"com.example.app": "embeddings"},
    }
    assert container_for_pid(str(proc), 4242, lookup) == expected
    assert container_for_pid(str(proc), 4242, lookup) == expected
    assert api.calls == [CID]


def test_docker_sdk_unknown_container_keeps_the_id(tmp_path):
    lookup = DockerLookup(client_factory=partial(SimpleNamespace, api=FakeApi({})))
    proc = make_proc(tmp_path, 7, cgroup=f"12:memory:/docker/{CID}\n")
    assert container_for_pid(str(proc), 7, lookup) == {"id": CID, "name": None, "image": None, "labels": {}}
    assert lookup.warnings == []


def test_docker_sdk_failure_falls_back_to_cli(tmp_path):
    def broken_factory():
        raise ConnectionError("Error while fetching server API version")

    calls = []

    def run(argv):
        calls.append(argv)
        return 0, json.dumps([INSPECT]), ""

    lookup = DockerLookup(run_command=run, docker_bin="/usr/bin/docker", client_factory=broken_factory)
    proc = make_proc(tmp_path, 7, cgroup=f"12:memory:/docker/{CID}\n")
    assert container_for_pid(str(proc), 7, lookup)["name"] == "embeddings"
    assert calls == [["/usr/bin/docker", "inspect", "--type", "container", CID]]
    assert len(lookup.warnings) == 1
    assert "using the docker CLI" in lookup.warnings[0]


@pytest.mark.parametrize(
    ("rc", "out", "err", "warned"),
    [
        (1, "[]", f"Error: No such container: {CID}", False),
        (1, "", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock", True),
        (0, "not json", "", True),
    ],
)
def test_docker_cli_failures_keep_the_id(tmp_path, rc, out, err, warned):
    lookup = DockerLookup(run_command=lambda argv: (rc, out, err), docker_bin="/usr/bin/docker")
    proc = make_proc(tmp_path, 7, cgroup=f"0::/system.slice/docker-{CID}.scope\n")
    assert container_for_pid(str(proc), 7, lookup) == {"id": CID, "name": None, "image": None, "labels": {}}
    assert bool(lookup.warnings) is warned


def test_non_docker_runtime_is_not_asked_to_docker(tmp_path):
    lookup = DockerLookup(run_command=lambda argv: pytest.fail(f"ran {argv}"), docker_bin="/usr/bin/docker")
    proc = make_proc(tmp_path, 9, cgroup=f"0::/kubepods.slice/cri-containerd-{CID}.scope\n")
    assert container_for_pid(str(proc), 9, lookup) == {"id": CID, "name": None, "image": None, "labels": {}}


def test_host_process_and_vanished_pid_have_no_container(tmp_path):
    proc = make_proc(tmp_path, 1, cgroup="0::/init.scope\n")
    assert container_for_pid(str(proc), 1, None) is None
    assert container_for_pid(str(proc), 99999, None) is None


def test_process_name_from_proc(tmp_path):
    make_proc(tmp_path, 10, cmdline=b"/usr/lib/firefox/firefox\0-contentproc\0")
    make_proc(tmp_path, 11, cmdline=b"", comm="kworker/0:1\n")
    assert process_name_from_proc(str(tmp_path), 10) == "/usr/lib/firefox/firefox"
    assert process_name_from_proc(str(tmp_path), 11) == "kworker/0:1"
    assert process_name_from_proc(str(tmp_path), 12) is None


def test_docker_client_factory_uses_the_sdk():
    # The docker SDK is in the project's venv (requirements.txt); it is not called here.
    docker = pytest.importorskip("docker")

    assert docker_client_factory() is docker.from_env
