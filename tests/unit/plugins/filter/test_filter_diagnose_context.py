"""The host context diagnose uses to name the host behind an address."""

from ansible_collections.sparkops.vllm.plugins.filter.diagnose_context import diagnose_hosts
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose import diagnose_text


def test_addresses_per_host():
    hostvars = {
        "spark-1": {"ansible_host": "10.1.230.180", "ib_address": "192.168.200.12"},
        "spark-2": {"ib_address": "192.168.200.13"},
    }
    assert diagnose_hosts(["spark-1", "spark-2"], hostvars) == {
        "spark-1": {"ib_address": "192.168.200.12", "management_addresses": ["10.1.230.180"]},
        "spark-2": {"ib_address": "192.168.200.13", "management_addresses": ["spark-2"]},
    }


def test_context_names_the_management_address():
    hostvars = {"spark-1": {"ansible_host": "10.1.230.180", "ib_address": "192.168.200.12"}}
    log = (
        "This node has an IP address of 10.1.230.180, but we cannot find a local Raylet with the same address. "
        "This can happen when you connect to the Ray cluster with a different IP address or connect a container."
    )
    result = diagnose_text(log, context={"hosts": diagnose_hosts(["spark-1"], hostvars)})
    finding = next(f for f in result["findings"] if f["id"] == "ray_node_ip_mismatch")
    assert "spark-1" in finding["summary"] and "192.168.200.12" in finding["summary"]
