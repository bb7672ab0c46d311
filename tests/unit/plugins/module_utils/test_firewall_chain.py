"""The rules of the project's iptables chains, and the checks of the sources they let in (_firewall_chain.py)."""

import pytest
from ansible_collections.sparkops.vllm.plugins.filter.firewall_chain import (
    firewall_chain,
    firewall_sources_problems,
)
from ansible_collections.sparkops.vllm.plugins.module_utils import _firewall_chain, _layout

TAIL = [
    ["-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "RETURN"],
    ["-j", "DROP"],
]
# roles/roce_network's defaults, in the order ray_cluster passes them (dictsort by name).
RAY_PORTS = {
    "client_server": 10001,
    "dashboard": 8265,
    "dashboard_agent_grpc": 6383,
    "dashboard_agent_http": 6384,
    "gcs": 6379,
    "metrics_export": 6385,
    "node_manager": 6380,
    "object_manager": 6381,
    "runtime_env_agent": 6382,
    "worker_ports": "10002-10999",
}


def test_rays_chain():
    got = _firewall_chain.chain(
        "SPARKOPS-RAY-lab",
        ports=list(RAY_PORTS.values()),
        comment="sparkops lab ray ports",
        accept=[{"interface": "lo"}, {"interface": "enp1s0f1np1"}],
    )
    assert got == {
        "chain": "SPARKOPS-RAY-lab",
        "comment": "sparkops lab ray ports",
        "ports": ["10001", "8265", "6383", "6384", "6379", "6385", "6380", "6381", "6382", "10002:10999"],
        "multiport": "10001,8265,6383,6384,6379,6385,6380,6381,6382,10002:10999",
        "slots": 11,
        "rules": [["-i", "lo", "-j", "RETURN"], ["-i", "enp1s0f1np1", "-j", "RETURN"], *TAIL],
        "problems": [],
    }


def test_the_monitoring_chain():
    got = firewall_chain(
        "SPARKOPS-MON-lab",
        [9100, 9090],
        "sparkops lab monitoring ports",
        [{"interface": "lo"}, {"source": "192.168.200.0/24", "interface": "enp1s0f1np1"}],
        sources=["10.20.0.0/16", "172.29.10.99/32"],
    )
    assert got["multiport"] == "9100,9090"
    assert got["rules"] == [
        ["-i", "lo", "-j", "RETURN"],
        # iptables -S prints -s before -i
        ["-s", "192.168.200.0/24", "-i", "enp1s0f1np1", "-j", "RETURN"],
        ["-s", "10.20.0.0/16", "-j", "RETURN"],
        ["-s", "172.29.10.99/32", "-j", "RETURN"],
        *TAIL,
    ]
    assert got["problems"] == []


def test_no_allowed_sources_leaves_the_ib_subnet_only():
    got = firewall_chain(
        "SPARKOPS-MON-lab",
        [9100],
        "sparkops lab monitoring ports",
        [{"interface": "lo"}, {"source": "192.168.200.0/24", "interface": "eth1"}],
    )
    assert got["rules"] == [
        ["-i", "lo", "-j", "RETURN"],
        ["-s", "192.168.200.0/24", "-i", "eth1", "-j", "RETURN"],
        *TAIL,
    ]


def test_a_port_or_a_rule_given_twice_is_listed_once():
    got = _firewall_chain.chain(
        "C",
        ports=[9100, "9100", "10002-10999", "10002:10999"],
        comment="c",
        accept=[{"interface": "lo"}],
        sources=["10.0.0.0/8", "10.0.0.0/8"],
    )
    assert got["ports"] == ["9100", "10002:10999"]
    assert got["slots"] == 3
    assert got["rules"] == [["-i", "lo", "-j", "RETURN"], ["-s", "10.0.0.0/8", "-j", "RETURN"], *TAIL]


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"ports": []}, "no port to guard"),
        ({"ports": [0]}, "the port 0 is not a port from 1 to 65535 or a range low-high"),
        ({"ports": ["10999-10002"]}, "the port '10999-10002' is not a port"),
        ({"ports": [True]}, "the port True is not a port"),
        ({"ports": ["80,443"]}, "the port '80,443' is not a port"),
        (
            {"ports": [f"{p}-{p + 1}" for p in range(1000, 1016, 2)]},
            "take 16 multiport slots (at most 15, a range counting as two); make the pinned ports contiguous ranges",
        ),
        (
            {"name": "SPARKOPS-MON-a-cluster-name-too-long"},
            "the chain name 'SPARKOPS-MON-a-cluster-name-too-long'",
        ),
        ({"name": "-X"}, "the chain name '-X'"),
        ({"comment": 'a "quoted" $comment'}, "the comment"),
        ({"accept": [{}]}, "names neither a source nor an interface"),
        (
            {"accept": [{"interface": "eth1; reboot"}]},
            "the interface 'eth1; reboot' is not an interface name",
        ),
        ({"accept": [{"interface": "a-name-of-16-chr"}]}, "is not an interface name"),
        ({"accept": [{"source": "10.0.0.5/24"}]}, "the source '10.0.0.5/24' has host bits set"),
        ({"sources": ["fd00::/64"]}, "the source 'fd00::/64' is IPv6"),
    ],
)
def test_what_keeps_a_chain_from_being_built(kwargs, problem):
    args = {
        "name": "SPARKOPS-MON-lab",
        "ports": [9100],
        "comment": "c",
        "accept": [{"interface": "lo"}],
    } | kwargs
    name = args.pop("name")
    got = _firewall_chain.chain(name, **args)
    assert any(problem in line for line in got["problems"]), got["problems"]


@pytest.mark.parametrize(
    ("item", "fault"),
    [
        ("10.0.0.0/24", None),
        ("10.0.1.7/32", None),
        (" 10.0.0.0/24 ", None),
        (
            "10.0.1.7",
            "has no prefix; write 10.0.1.7/32 for that one machine, or its network, e.g. 10.0.0.0/24",
        ),
        (
            "10.0.1.7/24",
            "has host bits set (iptables would let in all of 10.0.1.0/24); write 10.0.1.0/24 for the network, "
            "or 10.0.1.7/32 for that one machine",
        ),
        ("0.0.0.0/0", "lets every address in, so the chain would guard nothing"),
        ("fd00::/64", "is IPv6; the chain is built with iptables, which filters IPv4 only"),
        ("::1", "is IPv6"),
        ("grafana.example.com", "is not an IPv4 network in CIDR form (address/prefix), e.g. 10.0.0.0/24"),
        ("10.0.0.0/33", "is not an IPv4 network in CIDR form"),
        ("", "is not an IPv4 network in CIDR form"),
        (10, "is not a string"),
        (None, "is not a string"),
        ({"source": "10.0.0.0/24"}, "is not a string"),
    ],
)
def test_each_source(item, fault):
    got = _firewall_chain.source_fault(item)
    if fault is None:
        assert got is None
    else:
        assert fault in (got or "")


FIX = (
    "Fix: list IPv4 networks in CIDR form, e.g. monitoring_allowed_sources: [10.0.0.0/24, 10.0.1.7/32] "
    "(group_vars/all/monitoring.yml)"
)


@pytest.mark.parametrize(
    ("value", "problems"),
    [
        ([], []),
        (None, []),
        (["10.0.0.0/24", "10.0.1.7/32"], []),
        (
            ["10.0.0.0/24", "10.0.1.7"],
            [
                "monitoring_allowed_sources item '10.0.1.7' has no prefix; write 10.0.1.7/32 for that one machine, "
                f"or its network, e.g. 10.0.0.0/24. {FIX}"
            ],
        ),
        # a string where a list belongs: the most likely slip
        ("10.0.0.0/24", [f'monitoring_allowed_sources "10.0.0.0/24" is not a list. {FIX}']),
        (
            {"grafana": "10.0.0.9/32"},
            [f'monitoring_allowed_sources {{"grafana": "10.0.0.9/32"}} is not a list. {FIX}'],
        ),
    ],
)
def test_a_sources_setting(value, problems):
    assert (
        firewall_sources_problems(value, "monitoring_allowed_sources", "group_vars/all/monitoring.yml")
        == problems
    )


def test_every_problem_of_a_sources_setting_is_named():
    got = _firewall_chain.sources_problems(
        ["10.0.1.7", "fd00::/64", 7], "monitoring_allowed_sources", "f.yml"
    )
    assert [line.split(" ", 3)[2] for line in got] == ["'10.0.1.7'", "'fd00::/64'", "7"]
    assert all(". Fix: " in line for line in got)


# -- the chains' names (the layout) ------------------------------------------------


@pytest.mark.parametrize("purpose", ["ray", "monitoring"])
@pytest.mark.parametrize("cluster", ["lab", "a-cluster-named-with-32-chars-xy", "exactly-15-char"])
def test_every_chain_name_the_layout_gives_can_be_built(purpose, cluster):
    name = _layout.firewall_chain(cluster, purpose)
    assert len(name) <= _firewall_chain.CHAIN_NAME_MAX
    assert (
        _firewall_chain.chain(name, ports=[1], comment=f"sparkops {cluster} ray ports", accept=[])["problems"]
        == []
    )


def test_the_monitoring_chain_is_not_rays():
    names = _layout.layout("lab")
    assert names["monitoring_firewall_chain"] == "SPARKOPS-MON-lab"
    assert names["ray_firewall_chain"] == "SPARKOPS-RAY-lab"
    long = _layout.layout("a-cluster-named-with-32-chars-xy")
    assert long["monitoring_firewall_chain"] != long["ray_firewall_chain"]
