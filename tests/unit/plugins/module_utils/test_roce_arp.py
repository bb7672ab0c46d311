"""The ARP settings an addressed twin pair needs: parsed from real ``grep -H .`` output, judged by the kernel's rule."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.sparkops.vllm.plugins.filter.roce_arp import roce_arp_paths, roce_arp_problems
from ansible_collections.sparkops.vllm.plugins.module_utils._roce_twin import (
    arp_flux_problems,
    arp_paths,
    parse_arp_settings,
)

FIXTURES = Path(__file__).parents[3] / "fixtures" / "arp_sysctl"
# Captured on a Debian 12 host (the kernel's defaults: 0 everywhere), with a netdev that
# does not exist among the files (grep's messages went to stderr, rc 2).
DEBIAN_DEFAULTS = (FIXTURES / "debian12_defaults.txt").read_text(encoding="utf-8")
SYSCTL_FILE = "/etc/sysctl.d/60-sparkops-roce.conf"


def _with(text, **values):
    """The real capture with some files' values changed: ``eth0_arp_ignore=1``, ``all_arp_announce=2``."""
    out = []
    for line in text.splitlines():
        kept = line
        for name, value in values.items():
            dev, key = name.split("_", 1)
            if line.startswith(f"/proc/sys/net/ipv4/conf/{dev}/{key}:"):
                kept = f"/proc/sys/net/ipv4/conf/{dev}/{key}:{value}"
        out.append(kept)
    return "\n".join(out) + "\n"


def test_the_real_capture_parses_every_file_it_holds():
    assert parse_arp_settings(DEBIAN_DEFAULTS) == {
        "all": {"arp_ignore": 0, "arp_announce": 0},
        "eth0": {"arp_ignore": 0, "arp_announce": 0},
        "docker0": {"arp_ignore": 0, "arp_announce": 0},
    }


def test_the_paths_are_the_ones_the_parser_reads():
    paths = arp_paths(["eth0", "docker0"])
    assert paths[:2] == ["/proc/sys/net/ipv4/conf/all/arp_ignore", "/proc/sys/net/ipv4/conf/all/arp_announce"]
    assert len(paths) == 6
    assert roce_arp_paths(["eth0", "docker0"]) == paths
    assert all(DEBIAN_DEFAULTS.count(path + ":") == 1 for path in paths)


def test_the_kernel_defaults_are_refused_per_netdev_and_setting_naming_host_value_and_fix():
    problems = arp_flux_problems(
        "spark-1", ["eth0", "docker0"], parse_arp_settings(DEBIAN_DEFAULTS), SYSCTL_FILE
    )
    assert len(problems) == 4
    assert problems[0].startswith("spark-1: net.ipv4.conf.eth0.arp_ignore is effectively 0 (all 0, eth0 0)")
    assert "ARP flux" in problems[0]
    assert SYSCTL_FILE in problems[0] and "net.ipv4.conf.eth0.arp_ignore = 1" in problems[0]
    assert "net.ipv4.conf.docker0.arp_announce = 2" in problems[3]


@pytest.mark.parametrize(
    ("values", "left"),
    [
        # conf/all raises every interface (the max of all and the netdev): what the lab sets.
        ({"all_arp_ignore": 1, "all_arp_announce": 2}, []),
        # per netdev, what configure mode writes.
        (
            {
                "eth0_arp_ignore": 1,
                "eth0_arp_announce": 2,
                "docker0_arp_ignore": 1,
                "docker0_arp_announce": 2,
            },
            [],
        ),
        # 2 also refuses to answer for another netdev's address.
        ({"all_arp_ignore": 2, "all_arp_announce": 2}, []),
        # one netdev right, the other not.
        ({"eth0_arp_ignore": 1, "eth0_arp_announce": 2}, ["docker0.arp_ignore", "docker0.arp_announce"]),
        # announce only: the replies still flux.
        ({"all_arp_announce": 2}, ["eth0.arp_ignore", "docker0.arp_ignore"]),
        # arp_announce 1 is not enough; arp_ignore 8 answers nothing at all, 3 is about scopes.
        ({"all_arp_ignore": 1, "all_arp_announce": 1}, ["eth0.arp_announce", "docker0.arp_announce"]),
        ({"all_arp_ignore": 8, "all_arp_announce": 2}, ["eth0.arp_ignore", "docker0.arp_ignore"]),
        ({"eth0_arp_ignore": 3, "all_arp_announce": 2, "docker0_arp_ignore": 1}, ["eth0.arp_ignore"]),
    ],
)
def test_the_effective_value_is_the_larger_of_all_and_the_netdev(values, left):
    problems = arp_flux_problems(
        "spark-2", ["eth0", "docker0"], parse_arp_settings(_with(DEBIAN_DEFAULTS, **values)), SYSCTL_FILE
    )
    assert [p.split("net.ipv4.conf.", 1)[1].split(" ", 1)[0] for p in problems] == left
    assert all(p.startswith("spark-2: ") for p in problems)


def test_a_netdev_that_could_not_be_read_is_named():
    problems = roce_arp_problems(DEBIAN_DEFAULTS, "spark-1", ["eth0", "nosuch"], SYSCTL_FILE)
    assert any(p.startswith("spark-1: the ARP settings of nosuch could not be read") for p in problems)
    assert any("ip link show nosuch" in p for p in problems)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "grep: /proc/sys/net/ipv4/conf/eth0/arp_ignore: No such file or directory\n",
        "/proc/sys/net/ipv4/conf/eth0/arp_ignore:one\n",
        "/proc/sys/net/ipv4/conf/../arp_ignore:1\n",
        "/proc/sys/net/ipv4/conf/eth0/rp_filter:1\n",
    ],
)
def test_other_lines_are_not_read_as_settings(text):
    assert parse_arp_settings(text) == {}
    assert len(arp_flux_problems("spark-1", ["eth0"], parse_arp_settings(text), SYSCTL_FILE)) == 1


def test_the_lab_node_with_docker_sysctls_on_all_passes_for_a_netdev_made_after_start():
    text = (FIXTURES / "lab_node_docker_sysctl.txt").read_text(encoding="utf-8")
    settings = parse_arp_settings(text)
    assert settings["tw0"] == {"arp_ignore": 0, "arp_announce": 0}
    assert arp_flux_problems("scale-3", ["eth0", "tw0"], settings, SYSCTL_FILE) == []
