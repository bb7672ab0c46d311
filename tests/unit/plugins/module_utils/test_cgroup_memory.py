# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""_cgroup_memory: the running stack's host memory from real cgroup v1 and v2 captures."""

import itertools
import json
import shutil

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _cgroup_memory as cg
from cgroup_fixture import CGROUP, H200, LAB, LAB_LABEL, FakeLookup, lab_lookup


def stat_of(path):
    return cg.parse_memory_stat(path.read_text())


def lab_stat(container_id):
    return stat_of(LAB / "sys/fs/cgroup/memory/docker" / container_id / "memory.stat")


# (captured /proc/<pid>/cgroup, expected (version, path))
CGROUP_LINES = [
    pytest.param(
        (LAB / "proc/976/cgroup").read_text(),
        (1, "/docker/caddcd351aefc17a28f2a8f31c144baff0fef3057478d61a1a91fc153496dbeb"),
        id="lab-v1-with-unified-line",
    ),
    pytest.param(
        (H200 / "proc/4242/cgroup").read_text(), (2, "/process_api/7a38f2c89baafefc6f584b6fb695e985"), id="v2"
    ),
    pytest.param(
        "0::/system.slice/docker-" + "a" * 64 + ".scope\n",
        (2, "/system.slice/docker-" + "a" * 64 + ".scope"),
        id="v2-systemd-driver",
    ),
    pytest.param(
        "12:cpu,cpuacct:/x\n11:memory:/kubepods/pod1/" + "b" * 64 + "\n",
        (1, "/kubepods/pod1/" + "b" * 64),
        id="v1-kubepods",
    ),
    pytest.param("12:cpu,cpuacct:/docker/x\n1:name=systemd:/docker/x\n", None, id="v1-without-memory"),
    pytest.param("", None, id="empty"),
    pytest.param("garbage\n0:/only-two-fields\n", None, id="garbage"),
]


@pytest.mark.parametrize(("text", "expected"), CGROUP_LINES)
def test_memory_cgroup(text, expected):
    assert cg.memory_cgroup(text) == expected


def test_cgroup_dir_per_version():
    assert cg.cgroup_dir("/sys/fs/cgroup", 1, "/docker/x") == "/sys/fs/cgroup/memory/docker/x"
    assert (
        cg.cgroup_dir("/sys/fs/cgroup", 2, "/system.slice/x.scope") == "/sys/fs/cgroup/system.slice/x.scope"
    )


def test_v2_rule_tracks_memavailable_in_the_real_experiment():
    """The H200 capture: each step's MemAvailable drop against the rule and the old ``current - file``."""
    data = json.loads((CGROUP / "h200_cgroup_v2_experiment.json").read_text())
    snaps = data["snapshots"]
    for before, after in itertools.pairwise(snaps):

        def held(snap):
            return cg.held_bytes(
                2,
                {"active_file": snap["active_file"], "inactive_file": snap["inactive_file"]},
                snap["current"],
            )

        rule = (held(after) - held(before)) / cg.GIB
        drop = (before["MemAvailable"] - after["MemAvailable"]) / cg.GIB
        assert rule == pytest.approx(drop, abs=0.12), after["tag"]
    shm_before, shm_after = snaps[1], snaps[2]
    assert shm_after["tag"] == "shm 1 GiB"
    old_rule = (
        (shm_after["current"] - shm_after["file"]) - (shm_before["current"] - shm_before["file"])
    ) / cg.GIB
    assert old_rule < 0.1  # what the old reading missed: /dev/shm is in "file"


def test_v1_rule_tracks_memavailable_in_the_real_experiment():
    data = json.loads((CGROUP / "debian12_docker_cgroup_v1_experiment.json").read_text())
    snaps = data["snapshots"]
    for before, after in itertools.pairwise(snaps):
        rule = (cg.held_bytes(1, after) - cg.held_bytes(1, before)) / cg.GIB
        drop = (before["MemAvailable"] - after["MemAvailable"]) / cg.GIB
        assert rule == pytest.approx(drop, abs=0.12), after["tag"]
    # The raw memory.stat parses and holds every key the v1 rule needs.
    assert cg.held_bytes(1, cg.parse_memory_stat(data["memory_stat_raw"])) is not None


def test_held_bytes_missing_figures_are_none_not_zero():
    assert cg.held_bytes(2, {"active_file": 1, "inactive_file": 1}, None) is None
    assert cg.held_bytes(2, {"active_file": 1}, 10) is None
    assert cg.held_bytes(1, {"rss": 5, "cache": 5}) is None  # not hierarchical: a wrong figure
    # Never negative (a racing read of current and stat).
    assert cg.held_bytes(2, {"active_file": 8, "inactive_file": 8}, 10) == 0


def test_parse_memory_stat_skips_malformed_lines():
    assert cg.parse_memory_stat("anon 10\nbad line here\nfile x\n\nshmem 4\n") == {"anon": 10, "shmem": 4}


def test_lab_node_finds_its_own_containers_by_label():
    lookup = lab_lookup()
    result = cg.stack_host_memory(LAB_LABEL, lookup, str(LAB / "proc"), str(LAB / "sys/fs/cgroup"))
    head = "caddcd351aefc17a28f2a8f31c144baff0fef3057478d61a1a91fc153496dbeb"
    serve = "c972dc0e74dbfa3b626dd86d96b34b3b8400a1f403f4b13847b2477e6da7ff25"
    expected = {
        name: cg.held_bytes(1, lab_stat(cid))
        for name, cid in (("sparkops-lab-ray-head", head), ("sparkops-lab-vllm", serve))
    }
    assert {k: v["bytes"] for k, v in result["containers"].items()} == expected
    assert result["containers"]["sparkops-lab-ray-head"]["cgroup"] == f"v1:/docker/{head}"
    assert result["bytes"] == sum(expected.values()) > 0
    assert result["gib"] == round(result["bytes"] / cg.GIB, 3)
    assert result["warnings"] == []
    # The node's own PID 1 (the lab node's container) was asked about and left out.
    node = "5bfded6b02c9d2378ccaa10909beab89691e320554adef19217ac37d807a66df"
    assert node in lookup.asked
    # Each container is inspected once, however many PIDs it has.
    assert len(lookup.asked) == len(set(lookup.asked))


def test_another_clusters_label_reads_nothing():
    result = cg.stack_host_memory(
        "io.sparkops.vllm.cluster=other", lab_lookup(), str(LAB / "proc"), str(LAB / "sys/fs/cgroup")
    )
    assert result == {"bytes": 0, "gib": 0.0, "containers": {}, "warnings": []}


def test_a_label_key_without_value_matches_any_value():
    result = cg.stack_host_memory(
        "io.sparkops.vllm.cluster", lab_lookup(), str(LAB / "proc"), str(LAB / "sys/fs/cgroup")
    )
    assert len(result["containers"]) == 2


def test_an_unreadable_cgroup_is_named_and_adds_nothing(tmp_path):
    tree = tmp_path / "lab"
    shutil.copytree(LAB, tree)
    head = "caddcd351aefc17a28f2a8f31c144baff0fef3057478d61a1a91fc153496dbeb"
    (tree / "sys/fs/cgroup/memory/docker" / head / "memory.stat").unlink()
    result = cg.stack_host_memory(LAB_LABEL, lab_lookup(), str(tree / "proc"), str(tree / "sys/fs/cgroup"))
    assert list(result["containers"]) == ["sparkops-lab-vllm"]
    assert len(result["warnings"]) == 1
    assert "sparkops-lab-ray-head" in result["warnings"][0]
    assert "not added back" in result["warnings"][0]


def test_v2_tree_reads_current_less_file_lru(tmp_path):
    """A v2 container (the H200 capture's cgroup under a Docker-like ID)."""
    cid = "d" * 64
    proc = tmp_path / "proc" / "77"
    proc.mkdir(parents=True)
    path = f"/system.slice/docker-{cid}.scope"
    (proc / "cgroup").write_text(f"0::{path}\n")
    src = H200 / "sys/fs/cgroup/process_api/7a38f2c89baafefc6f584b6fb695e985"
    dst = tmp_path / "cg" / path.lstrip("/")
    shutil.copytree(src, dst)
    lookup = FakeLookup(
        {cid: {"id": cid, "name": "sparkops-x-ray-head", "labels": {"io.sparkops.vllm.cluster": "x"}}}
    )
    result = cg.stack_host_memory(
        "io.sparkops.vllm.cluster=x", lookup, str(tmp_path / "proc"), str(tmp_path / "cg")
    )
    stat = stat_of(src / "memory.stat")
    current = int((src / "memory.current").read_text())
    assert (
        result["containers"]["sparkops-x-ray-head"]["bytes"]
        == current - stat["active_file"] - stat["inactive_file"]
    )
    assert result["containers"]["sparkops-x-ray-head"]["cgroup"] == f"v2:{path}"


def test_no_proc_tree_reads_nothing(tmp_path):
    result = cg.stack_host_memory(LAB_LABEL, lab_lookup(), str(tmp_path / "absent"), str(tmp_path))
    assert result["containers"] == {}
    assert result["bytes"] == 0


def test_docker_lookup_warnings_are_passed_on():
    lookup = lab_lookup()
    lookup.warnings.append("docker SDK unavailable (X); using the docker CLI")
    result = cg.stack_host_memory(LAB_LABEL, lookup, str(LAB / "proc"), str(LAB / "sys/fs/cgroup"))
    assert result["warnings"] == ["docker SDK unavailable (X); using the docker CLI"]
