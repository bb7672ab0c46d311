"""Teardown removes a model only when it is the project's real directory, and finds the rules it added."""

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _teardown

DIR = {"exists": True, "isdir": True, "islnk": False}
LINK = {"exists": True, "isdir": False, "islnk": True, "lnk_source": "/data/hf/models--Qwen--Q/snapshots/abc"}
REG = {"exists": True, "isreg": True, "islnk": False}
MANIFEST = "/srv/models/.m.sparkops-manifest.json"


@pytest.mark.parametrize(
    ("path", "path_stat", "manifest_stat", "remove", "kept"),
    [
        ("/srv/models/m", DIR, REG, ["/srv/models/.m.sparkops-manifest.json", "/srv/models/m"], None),
        # a link is never followed, whatever it points at
        ("/srv/models/m", LINK, REG, [], "never follows a link"),
        # no manifest: not the project's copy
        ("/srv/models/m", DIR, {"exists": False}, [], "no sparkops manifest"),
        # a manifest that is itself a link does not count
        ("/srv/models/m", DIR, {"exists": True, "isreg": False, "islnk": True}, [], "no sparkops manifest"),
        ("/srv/models/m", {"exists": True, "isdir": False, "isreg": True}, REG, [], "not a directory"),
        ("/srv/models/m", {"exists": False}, REG, [], None),
        # system directories, however written
        ("/usr", DIR, REG, [], "system directory"),
        ("/usr/", DIR, REG, [], "system directory"),
        ("//etc", DIR, REG, [], "system directory"),
        ("/srv", DIR, REG, [], "system directory"),
        ("/", DIR, REG, [], "system directory"),
        ("/var/lib", DIR, REG, [], "system directory"),
        ("/models", DIR, REG, [], "system directory"),
        ("relative/m", DIR, REG, [], "system directory"),
    ],
)
def test_model_removal(path, path_stat, manifest_stat, remove, kept):
    plan = _teardown.model_removal(path, path_stat, MANIFEST, manifest_stat)
    assert plan["remove"] == remove
    if kept is None:
        assert plan["kept"] is None
    else:
        assert kept in plan["kept"] and plan["remove"] == []


def test_a_hugging_face_snapshot_takes_its_cache_folder_by_its_path_not_a_link():
    path = "/data/hf/hub/models--Qwen--Q/snapshots/abc"
    plan = _teardown.model_removal(path, DIR, "/data/hf/hub/models--Qwen--Q/snapshots/.abc.json", REG)
    assert "/data/hf/hub/models--Qwen--Q" in plan["remove"]


IPTABLES = """-P INPUT DROP
-A INPUT -s 192.168.100.0/24 -i enp1s0f0np0 -p icmp -m icmp --icmp-type 8 -m comment --comment "sparkops roce_network" -j ACCEPT
-A INPUT -s 192.168.100.0/24 -i enp1s0f0np0 -p tcp -m multiport --dports 6379,8265 -m comment --comment "sparkops roce_network" -j ACCEPT
-A INPUT -p tcp -m comment --comment "sparkops roce_network other" -j ACCEPT
-A INPUT -j sparkops-lab-ray -m comment --comment "sparkops lab ray ports"
"""

NFT = """table inet filter { # handle 1
	chain input { # handle 1
		type filter hook input priority filter; policy drop;
		iifname "enp1s0f0np0" ip saddr 192.168.100.0/24 tcp dport { 6379, 8265 } accept comment "sparkops roce_network" # handle 7
		iifname "enp1s0f0np0" ip saddr 192.168.100.0/24 icmp type echo-request accept comment "sparkops roce_network" # handle 8
		tcp dport 22 accept # handle 3
	}
}
table ip nat { # handle 2
	chain postrouting { # handle 1
		masquerade comment "something else" # handle 4
	}
}
"""

UFW = """Status: active

     To                         Action      From
     --                         ------      ----
[ 1] 22/tcp                     ALLOW IN    Anywhere
[ 2] 6379/tcp on enp1s0f0np0    ALLOW IN    192.168.100.0/24           # sparkops roce_network
[ 3] 8265/tcp on enp1s0f0np0    ALLOW IN    192.168.100.0/24           # sparkops roce_network
[ 4] 80/tcp                     ALLOW IN    Anywhere                   # web
"""


def test_iptables_rules_with_the_comment_become_deletions():
    rules = _teardown.iptables_rules(IPTABLES.splitlines(), "sparkops roce_network")
    assert len(rules) == 2
    assert rules[1][:3] == ["-D", "INPUT", "-s"]
    assert rules[1][rules[1].index("--comment") + 1] == "sparkops roce_network"


def test_nft_rules_with_the_comment_by_table_chain_and_handle():
    assert _teardown.nft_rules(NFT, "sparkops roce_network") == [
        ["inet", "filter", "input", "7"],
        ["inet", "filter", "input", "8"],
    ]


def test_ufw_rules_with_the_comment_highest_first():
    assert _teardown.ufw_rules(UFW, "sparkops roce_network") == [3, 2]


def test_nothing_found_in_empty_or_foreign_output():
    assert _teardown.iptables_rules([], "c") == []
    assert _teardown.nft_rules("", "c") == []
    assert _teardown.ufw_rules("Status: inactive\n", "c") == []
