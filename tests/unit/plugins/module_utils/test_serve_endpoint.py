"""Where vLLM's API answers, for a client on the head and on the controller (_serve_endpoint.py)."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkops.vllm.plugins.filter.serve_endpoint import FilterModule
from ansible_collections.sparkops.vllm.plugins.module_utils import _serve_endpoint

FILTERS = FilterModule().filters()

# (vllm_serve_host, vllm_serve_port, on the head, from the controller with the head at 10.0.0.11)
CASES = [
    ("0.0.0.0", 8000, "http://127.0.0.1:8000", "http://10.0.0.11:8000"),
    (None, None, "http://127.0.0.1:8000", "http://10.0.0.11:8000"),
    ("", "", "http://127.0.0.1:8000", "http://10.0.0.11:8000"),
    ("::", 8001, "http://127.0.0.1:8001", "http://10.0.0.11:8001"),
    (" 0.0.0.0 ", "8000", "http://127.0.0.1:8000", "http://10.0.0.11:8000"),
    # Bound to loopback: the head's own clients use it; the controller cannot reach it at all.
    ("127.0.0.1", 8000, "http://127.0.0.1:8000", "http://10.0.0.11:8000"),
    ("::1", 8000, "http://[::1]:8000", "http://10.0.0.11:8000"),
    ("localhost", 8000, "http://localhost:8000", "http://10.0.0.11:8000"),
    # Bound to one address: 127.0.0.1 would be refused there, so every client uses that address.
    ("192.168.100.11", 8000, "http://192.168.100.11:8000", "http://192.168.100.11:8000"),
    ("fd00:1::11", 9000, "http://[fd00:1::11]:9000", "http://[fd00:1::11]:9000"),
    ("spark-1.lan", 8000, "http://spark-1.lan:8000", "http://spark-1.lan:8000"),
]


@pytest.mark.parametrize(("host", "port", "head", "controller"), CASES)
def test_the_url_each_client_uses(host, port, head, controller):
    assert _serve_endpoint.on_head(host, port) == head
    assert _serve_endpoint.from_controller(host, "10.0.0.11", port) == controller
    assert FILTERS["serve_url_on_head"](host, port) == head
    assert (
        FILTERS["serve_url_from_controller"](
            host, "spark-1", {"spark-1": {"ansible_host": "10.0.0.11"}}, port
        )
        == controller
    )


def test_an_ipv6_head_address_goes_in_brackets():
    assert _serve_endpoint.from_controller("0.0.0.0", "fd00::11", 8000) == "http://[fd00::11]:8000"


@pytest.mark.parametrize(
    "host",
    [
        "x; rm -rf /",
        "$(reboot)",
        "`id`",
        "a b",
        "host/path",
        "user@host",
        "host:8000",
        "-oProxyCommand=x",
        "a..b",
        "é.example",
        "x" * 64,
        "[::1]",
    ],
)
def test_a_hostile_or_malformed_address_never_becomes_a_url(host):
    # The URL reaches a shell line (vllm_serve's readiness wait): only an IP or a host name passes.
    with pytest.raises(_serve_endpoint.EndpointError, match="neither an IP address nor a host name"):
        _serve_endpoint.on_head(host, 8000)
    with pytest.raises(AnsibleFilterError, match="serve_url_from_controller"):
        FILTERS["serve_url_from_controller"](
            host, "spark-1", {"spark-1": {"ansible_host": "10.0.0.11"}}, 8000
        )


@pytest.mark.parametrize("port", [0, 65536, -1, "http", True, 80.5, "8000; id"])
def test_a_port_outside_tcps_range_is_refused_with_the_setting(port):
    with pytest.raises(_serve_endpoint.EndpointError, match="vllm_serve_port is"):
        _serve_endpoint.on_head("0.0.0.0", port)


def test_a_bad_head_address_is_refused():
    with pytest.raises(_serve_endpoint.EndpointError, match="neither"):
        _serve_endpoint.from_controller("0.0.0.0", "head; id", 8000)


@pytest.mark.parametrize(
    ("hostvars", "url"),
    [
        ({"spark-1": {"ansible_host": "10.0.0.11"}}, "http://10.0.0.11:8000"),
        # no ansible_host: Ansible connects to the inventory name, and so does the client
        ({"spark-1": {}}, "http://spark-1:8000"),
        ({"spark-1": {"ansible_host": ""}}, "http://spark-1:8000"),
        ({}, "http://spark-1:8000"),
    ],
)
def test_the_controller_reaches_the_head_by_its_ansible_host_else_its_name(hostvars, url):
    assert FILTERS["serve_url_from_controller"]("0.0.0.0", "spark-1", hostvars, None) == url
