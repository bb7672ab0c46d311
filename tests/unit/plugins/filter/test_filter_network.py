"""Tables for the sparkops.vllm network filters (plugins/filter/network.py)."""

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkops.vllm.plugins.filter import network

SUBNET = "192.168.200.0/24"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("192.168.200.12", True),
        ("10.1.230.180", True),
        ("fd00:200::12", True),
        ("192.168.200.12/24", False),  # a CIDR, not an address
        ("192.168.200.256", False),
        ("192.168.200", False),
        ("192.168.200.012", False),  # leading zeros are ambiguous (octal) and refused
        (" 192.168.200.12", False),  # would break every command line it lands in
        ("spark-2", False),
        ("", False),
        (None, False),
        (3232286732, False),  # an integer is not a written address
        (True, False),
        (["192.168.200.12"], False),
    ],
)
def test_is_ip(value, expected):
    assert network.is_ip(value) is expected


@pytest.mark.parametrize(
    ("value", "strict", "expected"),
    [
        ("192.168.200.0/24", True, True),
        ("192.168.200.0/31", True, True),
        ("fd00:200::/64", True, True),
        ("192.168.200.5/24", True, False),  # host bits set
        ("192.168.200.5/24", False, True),
        ("192.168.200.0", True, False),  # no prefix
        ("192.168.200.0/33", True, False),
        ("192.168.200.0/", True, False),
        ("192.168.200.0/24 ", True, False),
        ("", True, False),
        (None, True, False),
        (24, True, False),
    ],
)
def test_is_cidr(value, strict, expected):
    assert network.is_cidr(value, strict=strict) is expected


def test_is_cidr_is_strict_by_default():
    assert network.is_cidr("192.168.200.5/24") is False


@pytest.mark.parametrize(
    ("address", "subnet", "usable", "expected"),
    [
        ("192.168.200.13", SUBNET, False, True),
        ("192.168.200.13", SUBNET, True, True),
        ("192.168.100.13", SUBNET, False, False),
        ("192.168.200.0", SUBNET, False, True),
        ("192.168.200.0", SUBNET, True, False),  # network address
        ("192.168.200.255", SUBNET, False, True),
        ("192.168.200.255", SUBNET, True, False),  # broadcast address
        ("192.168.200.1", SUBNET, True, True),
        ("192.168.200.254", SUBNET, True, True),
        ("192.168.200.0", "192.168.200.0/31", True, True),  # RFC 3021: both usable
        ("192.168.200.1", "192.168.200.0/31", True, True),
        ("192.168.200.7", "192.168.200.7/32", True, True),
        ("192.168.200.13", "192.168.200.12/24", False, True),  # host bits in the subnet are ignored
        ("192.168.200.20", "192.168.200.0/28", False, False),
        ("fd00:200::12", "fd00:200::/64", True, True),
        ("fd00:200::", "fd00:200::/64", True, False),  # Subnet-Router anycast
        ("192.168.200.13", "fd00:200::/64", False, False),  # versions differ
        ("192.168.200.13/24", SUBNET, False, False),  # not an address
        ("not-an-ip", SUBNET, False, False),
        (None, SUBNET, False, False),
        ("192.168.200.13", "192.168.200.0", False, False),  # not a CIDR
        ("192.168.200.13", None, False, False),
    ],
)
def test_ip_in_subnet(address, subnet, usable, expected):
    assert network.ip_in_subnet(address, subnet, usable=usable) is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            SUBNET,
            {
                "cidr": SUBNET,
                "network": "192.168.200.0",
                "prefix": 24,
                "version": 4,
                "broadcast": "192.168.200.255",
                "first_host": "192.168.200.1",
                "last_host": "192.168.200.254",
                "num_hosts": 254,
            },
        ),
        (
            "192.168.200.12/28",
            {
                "cidr": "192.168.200.0/28",
                "network": "192.168.200.0",
                "prefix": 28,
                "version": 4,
                "broadcast": "192.168.200.15",
                "first_host": "192.168.200.1",
                "last_host": "192.168.200.14",
                "num_hosts": 14,
            },
        ),
        (
            "10.0.0.0/31",
            {
                "cidr": "10.0.0.0/31",
                "network": "10.0.0.0",
                "prefix": 31,
                "version": 4,
                "broadcast": None,
                "first_host": "10.0.0.0",
                "last_host": "10.0.0.1",
                "num_hosts": 2,
            },
        ),
        (
            "fd00:200::/126",
            {
                "cidr": "fd00:200::/126",
                "network": "fd00:200::",
                "prefix": 126,
                "version": 6,
                "broadcast": None,
                "first_host": "fd00:200::1",
                "last_host": "fd00:200::3",
                "num_hosts": 3,
            },
        ),
    ],
)
def test_subnet_info(value, expected):
    assert network.subnet_info(value) == expected


@pytest.mark.parametrize("value", ["192.168.200.0", "nonsense", "", None, 24])
def test_subnet_info_refuses_a_non_cidr(value):
    with pytest.raises(AnsibleFilterError, match="is not a CIDR"):
        network.subnet_info(value)


def test_filter_module_exports_the_documented_filters():
    filters = network.FilterModule().filters()
    assert set(filters) == {
        "is_ip",
        "is_cidr",
        "ip_in_subnet",
        "subnet_info",
        "netplan_conflicts",
        "netplan_management_problems",
    }


def test_every_filter_has_its_documentation_file():
    here = Path(network.__file__).parent
    for name in network.FilterModule().filters():
        doc = yaml.safe_load((here / f"{name}.yml").read_text())
        assert doc["DOCUMENTATION"]["name"] == name
        assert doc["EXAMPLES"].strip()
        assert "_value" in doc["RETURN"]
