"""The inventory contract (plugins/module_utils/_inventory_contract.py) as tables.

Each case changes the baseline (two Sparks, as inventory/sample has them) in
one way and expects every problem named with the host, the variable, the value
and the fix. tests/integration/test_validate.py runs a few of them end to end
through ansible-playbook with the no-contact tripwire.
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.sparkops.vllm.plugins.module_utils import _inventory_contract as contract
from ansible_collections.sparkops.vllm.plugins.module_utils._layout import layout

TIMES = "\u00d7"

SETTINGS = {
    "sparkops_cluster_name": "spark-vllm",
    "sparkops_gpus_per_node": 1,
    "sparkops_tensor_parallel_size": 2,
    "sparkops_pipeline_parallel_size": 1,
    "sparkops_model_id": "Qwen/Qwen3.5-122B-A10B-FP8",
    "sparkops_model_path": "/srv/models/Qwen3.5-122B-A10B-FP8",
    "sparkops_served_model_name": "qwen3.5-122b",
    "sparkops_max_model_len": 32768,
    "sparkops_gpu_memory_utilization": None,
    "sparkops_cuda_graphs": True,
    "sparkops_ray_memory_monitor": True,
    "sparkops_ray_memory_threshold": 0.95,
    "sparkops_vllm_version": "0.17.1",
    "sparkops_api_key": "sk-0123456789abcdefghijklmnopqrstu",
    "sparkops_hf_token": None,
    "sparkops_ib_subnet": "192.168.200.0/24",
    "ib_interface": "enp1s0f1np1",
    "ib_mtu": 9000,
}
ROOT = Path(__file__).resolve().parents[4]


def role_defaults():
    """The defaults of ROLE_SETTINGS as the action plugin reads them (templates rendered for spark-vllm)."""
    values = {}
    for s in contract.ROLE_SETTINGS:
        defaults = yaml.safe_load((ROOT / "roles" / s.role / "defaults" / "main.yml").read_text())
        value = defaults[s.name]
        if isinstance(value, str) and "{{" in value:
            # the defaults that come from the layout (plugins/module_utils/_layout.py)
            names = layout(SETTINGS["sparkops_cluster_name"])
            value = {
                "ray_cluster_ports": {},
                "ray_cluster_state_dir": names["state_dir"],
                "teardown_state_dir": names["state_dir"],
                "model_sync_rsyncd_config_dir": names["model_sync_config_dir"],
                "model_sync_progress_dir": names["log_dir"],
            }[s.name]
        values[s.name] = value
    return values


SETTINGS.update(role_defaults())
SPARK_1 = {"ansible_host": "10.1.230.180", "ib_address": "192.168.200.12"}
SPARK_2 = {"ansible_host": "10.1.230.181", "ib_address": "192.168.200.13"}
SPARK_3 = {"ansible_host": "10.1.230.182", "ib_address": "192.168.200.14"}


def baseline():
    return contract.Inventory(
        head=["spark-1"],
        workers=["spark-2"],
        cluster=["spark-1", "spark-2"],
        hostvars={
            "spark-1": {**copy.deepcopy(SETTINGS), **SPARK_1},
            "spark-2": {**copy.deepcopy(SETTINGS), **SPARK_2},
        },
    )


# -- mutations of the baseline --------------------------------------------------


def setting(name, value):
    """A group_vars value: the same on every host."""

    def mutate(inv):
        for values in inv.hostvars.values():
            values[name] = value

    return mutate


def unset(name):
    def mutate(inv):
        for values in inv.hostvars.values():
            values.pop(name, None)

    return mutate


def host_var(host, name, value):
    def mutate(inv):
        inv.hostvars[host][name] = value

    return mutate


def drop_host_var(host, name):
    def mutate(inv):
        inv.hostvars[host].pop(name)

    return mutate


def groups(head=None, workers=None, cluster=None, hosts=None):
    """Set group members; ``hosts`` adds hosts (name -> own vars) over the settings."""

    def mutate(inv):
        for name, own in (hosts or {}).items():
            inv.hostvars[name] = {**copy.deepcopy(SETTINGS), **own}
        if head is not None:
            inv.head = list(head)
        if workers is not None:
            inv.workers = list(workers)
        if cluster is not None:
            inv.cluster = list(cluster)

    return mutate


def compose(*mutations):
    def mutate(inv):
        for mutation in mutations:
            mutation(inv)

    return mutate


def run(*mutations):
    inv = baseline()
    compose(*mutations)(inv)
    return contract.check(inv)


# id, mutation, number of problems reported, fragments of the failure message.
BAD = [
    (
        "two_heads",
        groups(head=["spark-1", "spark-2"], workers=[]),
        1,
        [
            "spark-1, spark-2: group 'head' has 2 hosts (spark-1, spark-2); it needs exactly one.",
            "Fix: keep spark-1 in head and move spark-2 to workers",
        ],
    ),
    (
        "no_head",
        groups(head=[], workers=["spark-1", "spark-2"]),
        1,
        ["inventory: group 'head' has no host; it needs exactly one.", "Fix: put the node"],
    ),
    (
        "no_cluster_group",
        groups(head=[], workers=[], cluster=[]),
        2,
        ["inventory: group 'cluster' is missing or has no host.", "inventory: group 'head' has no host"],
    ),
    (
        "head_and_workers_not_children_of_cluster",
        groups(cluster=[]),
        3,
        [
            "spark-1: is in group head but not in group cluster. Fix: make head and workers children of cluster",
            "spark-2: is in group workers but not in group cluster.",
        ],
    ),
    (
        "host_in_neither_head_nor_workers",
        compose(
            groups(cluster=["spark-1", "spark-2", "spark-3"], hosts={"spark-3": SPARK_3}),
            setting("sparkops_tensor_parallel_size", 3),
        ),
        1,
        [
            "spark-3: is in group cluster but in neither head nor workers",
            "Fix: add spark-3 to workers (or to head)",
        ],
    ),
    (
        "host_in_head_and_workers",
        groups(workers=["spark-1", "spark-2"]),
        1,
        ["spark-1: is in both head and workers.", "Fix: remove spark-1 from one of the two groups"],
    ),
    (
        "missing_ib_address",
        drop_host_var("spark-2", "ib_address"),
        1,
        [
            "spark-2: ib_address is not set.",
            "Fix: give spark-2 its address on the RoCE link in 192.168.200.0/24 "
            "in hosts.yml or host_vars/spark-2.yml",
        ],
    ),
    (
        "ib_address_not_a_string",
        host_var("spark-2", "ib_address", 3232286733),
        1,
        ["spark-2: ib_address 3232286733 is not an IP address. Fix: write the address as a string"],
    ),
    (
        "duplicate_ib_address",
        host_var("spark-2", "ib_address", "192.168.200.12"),
        1,
        [
            "spark-1, spark-2: share ib_address '192.168.200.12'",
            "Fix: give each of spark-1, spark-2 a different address in 192.168.200.0/24",
        ],
    ),
    (
        "ib_address_outside_subnet",
        host_var("spark-2", "ib_address", "192.168.100.13"),
        1,
        [
            "spark-2: ib_address '192.168.100.13' is outside sparkops_ib_subnet 192.168.200.0/24. "
            "Fix: give spark-2 an address in 192.168.200.0/24 in hosts.yml or host_vars/spark-2.yml",
        ],
    ),
    (
        "host_vars_typos",
        compose(
            host_var("spark-1", "ib_address", "192.168.200.12/24"),
            host_var("spark-1", "ib_interface", "enp1s0f1np1 "),
            host_var("spark-2", "ib_address", "spark-2-ib"),
        ),
        3,
        [
            "spark-1: ib_address '192.168.200.12/24' is not an IP address: it carries a prefix.",
            "Fix: write the bare address '192.168.200.12'",
            "spark-1: ib_interface 'enp1s0f1np1 ' is not a valid Linux interface name",
            "spark-2: ib_address 'spark-2-ib' is not an IP address.",
            "e.g. 192.168.200.1",
        ],
    ),
    (
        "ib_address_network_and_broadcast",
        compose(
            host_var("spark-1", "ib_address", "192.168.200.0"),
            host_var("spark-2", "ib_address", "192.168.200.255"),
        ),
        2,
        [
            "spark-1: ib_address '192.168.200.0' is the network address of 192.168.200.0/24",
            "spark-2: ib_address '192.168.200.255' is the broadcast address of 192.168.200.0/24",
            "Fix: give spark-2 an address from 192.168.200.1 to 192.168.200.254",
        ],
    ),
    (
        "ib_address_is_the_management_address",
        host_var("spark-1", "ib_address", "10.1.230.180"),
        1,
        [
            "spark-1: ib_address '10.1.230.180' is the management address (ansible_host)",
            "Fix: set ib_address to spark-1's address on the RoCE link in 192.168.200.0/24",
        ],
    ),
    (
        "subnet_not_a_cidr",
        setting("sparkops_ib_subnet", "192.168.200.0"),
        1,
        [
            "cluster: sparkops_ib_subnet '192.168.200.0' is not a CIDR (network/prefix).",
            "e.g. sparkops_ib_subnet: 192.168.200.0/24",
        ],
    ),
    (
        "subnet_with_host_bits",
        setting("sparkops_ib_subnet", "192.168.200.1/24"),
        1,
        [
            "cluster: sparkops_ib_subnet '192.168.200.1/24' has host bits set",
            "Fix: write sparkops_ib_subnet: 192.168.200.0/24",
        ],
    ),
    (
        "ib_interface_missing_or_an_rdma_device",
        compose(setting("ib_interface", ""), host_var("spark-1", "ib_interface", "rocep1s0f1")),
        2,
        [
            "spark-1: ib_interface 'rocep1s0f1' is an RDMA device name, not a network interface",
            "Fix: use the interface that `ibdev2netdev` maps rocep1s0f1 to",
            "spark-2: ib_interface is not set. Fix: set it to the network interface of the RoCE port",
        ],
    ),
    (
        "ib_interface_loopback_and_not_a_string",
        compose(host_var("spark-1", "ib_interface", "lo"), host_var("spark-2", "ib_interface", 0)),
        2,
        [
            "spark-1: ib_interface 'lo' is the loopback interface",
            "spark-2: ib_interface 0 is not an interface name.",
        ],
    ),
    (
        "mtu_mismatch",
        host_var("spark-2", "ib_mtu", 1500),
        1,
        [
            "spark-1, spark-2: ib_mtu differs between nodes (spark-1=9000, spark-2=1500)",
            "Fix: use one MTU on every node: set ib_mtu once in group_vars/cluster/network.yml",
        ],
    ),
    (
        "mtu_out_of_range_and_missing",
        compose(host_var("spark-1", "ib_mtu", 9600), drop_host_var("spark-2", "ib_mtu")),
        2,
        [
            "spark-1: ib_mtu 9600 is outside 576..9216. Fix: use 9000",
            "spark-2: ib_mtu is not set. Fix: set ib_mtu for the whole group cluster",
        ],
    ),
    (
        "parallelism_does_not_match_gpus",
        setting("sparkops_tensor_parallel_size", 4),
        1,
        [
            f"cluster: sparkops_tensor_parallel_size {TIMES} sparkops_pipeline_parallel_size "
            f"= 4 {TIMES} 1 = 4, "
            f"but the cluster has 2 GPUs (2 nodes {TIMES} sparkops_gpus_per_node 1).",
            "Fix: set the product to 2, e.g. sparkops_tensor_parallel_size: 2 "
            "and sparkops_pipeline_parallel_size: 1",
            "or change the inventory to 4 nodes (4 GPUs at 1 per node)",
        ],
    ),
    (
        "parallelism_product_not_a_multiple_of_gpus_per_node",
        compose(setting("sparkops_gpus_per_node", 2), setting("sparkops_tensor_parallel_size", 3)),
        1,
        [f"or change the inventory to a node count whose GPUs (nodes {TIMES} 2) equal the product"],
    ),
    (
        "fractions_out_of_range",
        compose(
            setting("sparkops_gpu_memory_utilization", 1.5), setting("sparkops_ray_memory_threshold", 1.0)
        ),
        2,
        [
            "cluster: sparkops_gpu_memory_utilization 1.5 is outside (0, 1]",
            "Fix: set a fraction such as 0.85, or null to let the memory plan recommend one",
            "cluster: sparkops_ray_memory_threshold 1.0 is outside (0, 1)",
            "Fix: use a fraction such as 0.95",
        ],
    ),
    (
        "version_read_as_a_number",
        setting("sparkops_vllm_version", 0.1),
        1,
        [
            "cluster: sparkops_vllm_version is the number 0.1, not a string",
            'Fix: quote it, e.g. sparkops_vllm_version: "0.17.1"',
        ],
    ),
    (
        "version_with_a_v",
        setting("sparkops_vllm_version", "v0.17.1"),
        1,
        ["cluster: sparkops_vllm_version 'v0.17.1' is not a vLLM release version", "without the leading 'v'"],
    ),
    (
        "model_settings_missing",
        compose(
            setting("sparkops_model_path", "models/qwen"),
            setting("sparkops_model_id", ""),
            setting("sparkops_served_model_name", ""),
            setting("sparkops_max_model_len", 0),
        ),
        4,
        [
            "cluster: sparkops_model_path 'models/qwen' is relative; it must be absolute",
            "cluster: sparkops_model_id is empty. Fix: set the Hugging Face repository id",
            "cluster: sparkops_served_model_name '' is empty or contains whitespace",
            "cluster: sparkops_max_model_len 0 is not a positive integer.",
        ],
    ),
    (
        "model_id_a_url_and_path_with_dots_and_spaces",
        compose(
            setting("sparkops_model_id", "https://huggingface.co/Qwen/Qwen3"),
            setting("sparkops_model_path", "/srv/models/../x"),
            setting("sparkops_served_model_name", "my model"),
        ),
        3,
        [
            "cluster: sparkops_model_id 'https://huggingface.co/Qwen/Qwen3' is not a Hugging Face repository id",
            "cluster: sparkops_model_path '/srv/models/../x' is not a model directory",
            "cluster: sparkops_served_model_name 'my model' is empty or contains whitespace",
        ],
    ),
    (
        "model_path_empty",
        setting("sparkops_model_path", ""),
        1,
        ["cluster: sparkops_model_path is empty. Fix: set the absolute path of the model directory"],
    ),
    (
        "model_path_with_whitespace",
        setting("sparkops_model_path", "/srv/my models/qwen"),
        1,
        ["cluster: sparkops_model_path '/srv/my models/qwen' contains whitespace"],
    ),
    (
        "boolean_given_as_string",
        compose(setting("sparkops_cuda_graphs", "false"), setting("sparkops_ray_memory_monitor", "no")),
        2,
        [
            "cluster: sparkops_cuda_graphs is the string 'false', not a boolean; "
            "Jinja treats every non-empty string as true",
            "Fix: write it unquoted: sparkops_cuda_graphs: false (group_vars/all/memory.yml)",
            "Fix: write it unquoted: sparkops_ray_memory_monitor: false (group_vars/all/ray.yml)",
        ],
    ),
    (
        "boolean_given_as_a_number",
        setting("sparkops_cuda_graphs", 1),
        1,
        ["cluster: sparkops_cuda_graphs is the number 1, not a boolean. Fix: write true or false, unquoted"],
    ),
    (
        "null_where_a_value_is_needed",
        setting("sparkops_model_id", None),
        1,
        ["cluster: sparkops_model_id is null (empty). Fix: give it a value, e.g. sparkops_model_id: Qwen/"],
    ),
    (
        "cluster_name_invalid",
        setting("sparkops_cluster_name", "Spark_VLLM"),
        1,
        ["cluster: sparkops_cluster_name 'Spark_VLLM' is not a valid name", "e.g. 'spark-vllm'"],
    ),
    (
        "cluster_name_too_long",
        setting("sparkops_cluster_name", "a" * 40),
        1,
        ["at most 32 characters, e.g. '" + "a" * 32 + "'"],
    ),
    (
        "setting_missing_and_secret_of_wrong_type",
        compose(unset("sparkops_served_model_name"), setting("sparkops_api_key", 12345)),
        2,
        [
            "cluster: sparkops_served_model_name is not set. "
            "Fix: add sparkops_served_model_name: qwen3.5-122b",
            "cluster: sparkops_api_key is a number, not a string",
        ],
    ),
    (
        "cluster_wide_setting_overridden_per_host",
        host_var("spark-2", "sparkops_model_path", "/data/qwen"),
        1,
        [
            'spark-2: sparkops_model_path has "/data/qwen" on spark-2 '
            'but "/srv/models/Qwen3.5-122B-A10B-FP8" on spark-1',
            "Fix: set it once in group_vars/all/model.yml "
            "and remove the per-host value from spark-2's host vars",
        ],
    ),
    (
        "secret_overridden_per_host_is_not_echoed",
        host_var("spark-2", "sparkops_hf_token", "hf_abcdefghijklmnopqrstuvwxyz"),
        1,
        ["spark-2: sparkops_hf_token has a different value than on spark-1"],
    ),
    (
        "ib_prefix_leaves_out_a_peer",
        host_var("spark-2", "ib_prefix", 32),
        1,
        [
            "spark-2: ib_prefix 32 makes spark-2's on-link network 192.168.200.13/32, "
            "which leaves out spark-1 (192.168.200.12)",
            "Fix: remove ib_prefix to use the prefix of sparkops_ib_subnet (/24), or widen it",
        ],
    ),
    (
        "ib_prefix_out_of_range_or_not_a_number",
        compose(host_var("spark-1", "ib_prefix", 33), host_var("spark-2", "ib_prefix", "wide")),
        2,
        ["spark-1: ib_prefix 33 is outside 1..32.", 'spark-2: ib_prefix "wide" is not a whole number.'],
    ),
]


@pytest.mark.parametrize(("mutate", "count", "fragments"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_inventory_names_every_problem(mutate, count, fragments):
    problems = run(mutate)
    text = "\n".join(problems)
    assert len(problems) == count, text
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in:\n{text}"
    assert all(". Fix: " in problem for problem in problems), text


def test_baseline_passes_with_its_summary():
    inv = baseline()
    assert contract.check(inv) == []
    assert contract.summary(inv) == (
        f"Inventory OK: 2 nodes (head spark-1, workers spark-2), TP 2 {TIMES} PP 1, RoCE 192.168.200.0/24 "
        "at MTU 9000, model Qwen/Qwen3.5-122B-A10B-FP8 served as qwen3.5-122b."
    )


def test_single_node_cluster_passes():
    assert run(groups(workers=[], cluster=["spark-1"]), setting("sparkops_tensor_parallel_size", 1)) == []


def test_vaulted_values_are_not_read():
    assert (
        run(
            setting("sparkops_api_key", contract.VAULTED),
            host_var("spark-2", "sparkops_hf_token", contract.VAULTED),
        )
        == []
    )


def test_problems_are_sorted_and_unique():
    problems = run(
        host_var("spark-2", "ib_address", "192.168.100.13"),
        host_var("spark-1", "ib_mtu", 1500),
        setting("sparkops_gpu_memory_utilization", 0),
        setting("sparkops_pipeline_parallel_size", 2),
    )
    assert problems == sorted(set(problems))
    assert [line.split(":", 1)[0] for line in problems] == [
        "cluster",
        "cluster",
        "spark-1, spark-2",
        "spark-2",
    ]


def test_failure_message_counts_the_problems():
    assert contract.failure_message(["a. Fix: b"]) == (
        "The inventory has 1 problem; no host was contacted or changed:\n- a. Fix: b"
    )


def test_every_setting_has_a_sample_file_and_an_example():
    for s in contract.SETTINGS:
        assert s.file.startswith("group_vars/"), s.name
        assert s.example, s.name
        assert s.kind in ("string", "int", "number", "bool"), s.name


# -- numbers given as strings (issue 20: `-e NAME=VALUE` always passes a string) --

# Every numeric variable of the contract: numeric strings it accepts as its number.
NUMERIC_ACCEPTED = {
    "sparkops_gpus_per_node": ["1"],
    "sparkops_tensor_parallel_size": ["2"],
    "sparkops_pipeline_parallel_size": ["1"],
    "sparkops_max_model_len": ["32768", "8192"],
    "sparkops_model_size_gib": ["111", "111.5", "1e2"],
    "sparkops_gpu_memory_utilization": ["0.85", ".85", "1", "1.0"],
    "sparkops_ray_memory_threshold": ["0.95", "9.5e-1"],
    "ib_mtu": ["9000", "1500"],
    "ib_prefix": ["24", "16"],
    "ansible_port": ["22", "2222"],
    "vllm_serve_port": ["8000", "8443"],
    "vllm_serve_max_num_seqs": ["64"],
    "vllm_serve_start_timeout_seconds": ["1800"],
    "vllm_serve_stop_timeout_seconds": ["60"],
    "vllm_serve_ready_timeout_seconds": ["1800"],
    "roce_network_ssh_port": ["22"],
    "roce_network_ping_timeout": ["2"],
    "ray_cluster_start_timeout_seconds": ["300"],
    "ray_cluster_stop_timeout_seconds": ["60"],
    "ray_cluster_wait_timeout_seconds": ["180"],
    "cluster_ssh_port": ["22"],
    "model_sync_rsyncd_port": ["873"],
    "model_sync_streams": ["0", "4"],
    "model_sync_hash_workers": ["0", "8"],
    "model_sync_io_timeout": ["120"],
    "model_sync_bwlimit_kib": ["0", "50000"],
    "model_sync_disk_margin_gib": ["1", "0.5"],
    "model_sync_timeout_seconds": ["21600"],
    "model_sync_poll_seconds": ["5"],
    "preflight_plan_safety_margin_gib": ["1.0", "2"],
    "preflight_plan_activation_reserve_gib": ["2.0"],
    "preflight_plan_non_torch_reserve_gib": ["3"],
    "preflight_plan_cuda_graph_reserve_gib": ["3.5"],
    "preflight_plan_cuda_context_reserve_gib": [".5"],
}
# Strings that are not exactly a number; int settings also refuse decimals.
NOT_A_NUMBER = [
    "8k",
    " 8",
    "8 ",
    "1_000",
    "nan",
    "inf",
    "-inf",
    "0x10",
    "\u0661\u0662",
    "",
    "1,5",
    "+-1",
    "1e",
]
NOT_AN_INTEGER = ["1.5", "2.0", "1e3"]


def test_the_numeric_table_covers_every_numeric_variable():
    assert set(NUMERIC_ACCEPTED) == set(contract.NUMERIC)


@pytest.mark.parametrize(("name", "text"), [(n, t) for n, texts in NUMERIC_ACCEPTED.items() for t in texts])
def test_a_numeric_string_is_taken_as_its_number(name, text):
    assert run(setting(name, text)) == []


@pytest.mark.parametrize(
    ("name", "text"),
    [(n, t) for n in NUMERIC_ACCEPTED for t in NOT_A_NUMBER]
    + [(n, t) for n, kind in contract.NUMERIC.items() if kind == "int" for t in NOT_AN_INTEGER],
)
def test_any_other_string_is_refused_naming_it(name, text):
    problems = run(setting(name, text))
    mine = [p for p in problems if f"{name} " in p and (f"'{text}'" in p or contract._json(text) in p)]
    assert mine, problems
    assert all(re.search(r"not a whole number|not a number|is not a port", p) for p in mine), mine


def test_numeric_strings_count_for_the_cross_checks():
    """ "4" for the tensor-parallel size is 4: the product check sees it."""
    assert any("= 4 \u00d7 1 = 4" in p for p in run(setting("sparkops_tensor_parallel_size", "4")))
    assert run(host_var("spark-2", "ib_mtu", "9000")) == []
    assert any("ib_mtu differs" in p for p in run(host_var("spark-2", "ib_mtu", "1500")))


# -- issue 14: hostile and careless input, by class --------------------------------


def problems_naming(problems, *words):
    return [p for p in problems if all(w in p for w in words)]


KEY = SETTINGS["sparkops_api_key"]
BAD_SECRETS = [
    KEY + "\nLD_PRELOAD=/tmp/x.so",
    KEY + "\r",
    KEY[:10] + "\0" + KEY[10:],
    " " + KEY,
    KEY + "\t",
    KEY + "\x1b[2J",
    KEY + "\u0085",
    "\u043a\u043b\u044e\u0447" * 5,
    KEY + '"',
    KEY + "$(id)",
    KEY + " x",
    "a=b" + KEY,
]


@pytest.mark.parametrize("name", ["sparkops_api_key", "sparkops_hf_token"])
@pytest.mark.parametrize("value", BAD_SECRETS, ids=range(len(BAD_SECRETS)))
def test_a_secret_that_is_not_one_plain_token_is_refused_unechoed(name, value):
    problems = run(setting(name, value))
    mine = problems_naming(problems, f"cluster: {name} (value not shown) has ")
    assert len(mine) == 1, problems
    text = "\n".join(problems)
    for piece in (value, value.strip(), KEY):
        assert piece not in text


@pytest.mark.parametrize("length", [1, 8, 15])
def test_a_short_api_key_is_refused(length):
    [problem] = run(setting("sparkops_api_key", "k" * length))
    assert "fewer than 16 characters" in problem
    assert "k" * length + " " not in problem


@pytest.mark.parametrize(
    "value",
    ["k" * 16, "sk-" + "A1" * 20, "abc.DEF_ghi~jkl+mno/pqr==", "hf_" + "x" * 34, "Aa0" * 11],
)
def test_plain_tokens_pass(value):
    assert run(setting("sparkops_api_key", value), setting("sparkops_hf_token", value)) == []


@pytest.mark.parametrize("empty", ["", None])
@pytest.mark.parametrize(
    ("extra", "refused"),
    [
        ({}, True),
        ({"vllm_serve_host": "10.1.230.180"}, True),
        ({"vllm_serve_host": "::"}, True),
        ({"vllm_serve_host": "127.0.0.1"}, False),
        ({"vllm_serve_host": "127.1.2.3"}, False),
        ({"vllm_serve_host": "::1"}, False),
        ({"vllm_serve_host": "localhost"}, False),
        ({"vllm_serve_allow_unauthenticated": True}, False),
        ({"vllm_serve_allow_unauthenticated": "true"}, True),
    ],
)
def test_an_empty_api_key_beyond_loopback_is_a_choice(empty, extra, refused):
    mutations = [setting("sparkops_api_key", empty)] + [setting(k, v) for k, v in extra.items()]
    open_api = problems_naming(
        run(*mutations), "cluster: sparkops_api_key is empty while vLLM's API listens on"
    )
    assert bool(open_api) is refused, open_api


def test_a_vaulted_key_is_not_judged():
    assert run(setting("sparkops_api_key", contract.VAULTED)) == []


PATH_SETTINGS = [
    "sparkops_model_path",
    "ray_cluster_state_dir",
    "teardown_state_dir",
    "model_sync_rsyncd_config_dir",
    "model_sync_progress_dir",
]
SYSTEM_PATHS = [
    "/", "//", "/usr", "/usr/", "//usr", "/usr//", "/etc", "/etc/", "/var", "/home", "/home/alice", "/home/alice/",
    "/root", "/boot", "/opt", "/srv", "/srv/", "/bin", "/sbin", "/lib", "/lib64", "/libx32", "/lib32",
    "/proc/self", "/sys/kernel", "/dev/shm", "/run/user/0", "/tmp", "/tmp/", "/var/lib", "/var/log",
    "/var/lib/docker", "/usr/local", "/usr/share", "/etc/systemd", "/etc/sparkops", "/var/lib/sparkops/",
    "/media", "/mnt", "/snap",
]  # fmt: skip
NOT_PLAIN_PATHS = [
    "", "   ", "relative/dir", "./dir", "dir", "~/models", "/srv/../usr", "/srv/./x", "/srv/x/..", "/srv/a b",
    "/srv/a\nb", "/srv/a\0b", "/srv/a\tb", "/srv/x\u200b", "/srv/x\u2028y", 5, ["/srv/x"],
]  # fmt: skip


@pytest.mark.parametrize("name", PATH_SETTINGS)
@pytest.mark.parametrize("value", SYSTEM_PATHS + NOT_PLAIN_PATHS)
def test_a_directory_setting_refuses_system_and_odd_paths(name, value):
    problems = run(setting(name, value))
    assert problems_naming(problems, f"{name} "), problems


@pytest.mark.parametrize("name", PATH_SETTINGS)
@pytest.mark.parametrize(
    "value", ["/srv/sparkops/x", "/data/models/q", "/models", "/tmp/sparkops-x", "/var/tmp/y/z"]
)
def test_a_directory_of_its_own_passes(name, value):
    # give the others directories of their own too
    others = [setting(n, f"/srv/own/{n}") for n in PATH_SETTINGS if n != name]
    assert run(*others, setting(name, value)) == []


@pytest.mark.parametrize(
    ("mutations", "fragment"),
    [
        ([setting("ray_cluster_state_dir", "/srv/models/Qwen3.5-122B-A10B-FP8")], "sparkops_model_path"),
        (
            [setting("sparkops_model_path", "/etc/sparkops/spark-vllm/model")],
            "config directory /etc/sparkops/spark-vllm holds sparkops_model_path",
        ),
        (
            [setting("model_sync_rsyncd_config_dir", "/etc/sparkops/spark-vllm")],
            "the cluster's config directory",
        ),
        (
            [setting("model_sync_progress_dir", "/var/lib/sparkops/spark-vllm/log")],
            "ray_cluster_state_dir /var/lib/sparkops/spark-vllm holds model_sync_progress_dir",
        ),
        (
            [
                setting("sparkops_model_path", "/srv/state/model"),
                setting("ray_cluster_state_dir", "/srv/state"),
            ],
            "sparkops_model_path /srv/state/model is inside ray_cluster_state_dir /srv/state",
        ),
    ],
)
def test_the_projects_directories_do_not_overlap(mutations, fragment):
    problems = run(*mutations)
    assert problems_naming(problems, fragment), problems


def test_a_state_dir_shared_with_teardown_is_expected():
    assert run(setting("ray_cluster_state_dir", "/srv/s"), setting("teardown_state_dir", "/srv/s")) == []


def test_a_cluster_named_like_the_projects_own_directory_is_refused():
    problems = run(setting("sparkops_cluster_name", "model-sync"))
    assert problems == [
        "cluster: sparkops_cluster_name 'model-sync' is the name of the project's own directory "
        "/etc/sparkops/model-sync, the model copy's rsync daemon configuration; the cluster's directories would "
        "share it. Fix: choose another name (group_vars/all/cluster.yml)"
    ]


@pytest.mark.parametrize(
    "subnet",
    [
        "0.0.0.0/0", "10.0.0.0/8", "192.168.0.0/15", "172.16.0.0/12", "127.0.0.0/16", "169.254.0.0/16",
        "224.0.0.0/24", "239.1.0.0/16", "240.0.0.0/24", "255.255.255.0/24", "0.0.0.0/16", "fd00::/64", "::/0",
        "2001:db8::/32",
    ],
)  # fmt: skip
def test_a_ib_subnet_that_is_not_a_private_link_is_refused(subnet):
    problems = run(setting("sparkops_ib_subnet", subnet))
    assert problems_naming(problems, f"cluster: sparkops_ib_subnet '{subnet}' "), problems


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "169.254.1.1",
        "224.0.0.1",
        "255.255.255.255",
        "0.0.0.0",
        "240.0.0.1",
        "fe80::1",
        "fd00::12",
        "::1",
        "::",
    ],
)
def test_a_special_or_ipv6_ib_address_is_refused(address):
    problems = run(host_var("spark-2", "ib_address", address))
    assert problems_naming(problems, f"spark-2: ib_address '{address}' is "), problems


def test_ipv6_is_refused_by_name():
    [problem] = [p for p in run(setting("sparkops_ib_subnet", "fd00::/64")) if p.startswith("cluster:")]
    assert "is IPv6; the project is IPv4 end to end" in problem


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "255.255.255.255",
        "169.254.0.5",
        "::1",
        "fe80::1",
        "::",
        "240.1.1.1",
        "::ffff:127.0.0.1",
    ],
)
def test_a_management_address_that_is_no_other_machine_is_refused(address):
    problems = run(host_var("spark-2", "ansible_host", address))
    assert problems_naming(problems, f"spark-2: ansible_host '{address}' is not a unicast address"), problems


@pytest.mark.parametrize("address", ["10.1.230.181", "spark-2.lan", "2001:db8::5", "fd00:1::2"])
def test_a_management_address_of_another_machine_passes(address):
    assert run(host_var("spark-2", "ansible_host", address)) == []


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("10.1.230.180", "10.1.230.180"),
        ("spark.lan", "SPARK.lan."),
        ("2001:db8::1", "2001:db8:0::1"),
        ("10.1.230.180", " 10.1.230.180"),
    ],
)
def test_two_hosts_with_one_management_address_are_refused(first, second):
    problems = run(
        host_var("spark-1", "ansible_host", first),
        host_var("spark-2", "ansible_host", second),
    )
    assert problems_naming(problems, "spark-1, spark-2: share the management address"), problems


def test_hosts_without_a_network_connection_have_no_management_address_to_share():
    mutations = [host_var(h, "ansible_connection", "community.docker.docker") for h in ("spark-1", "spark-2")]
    assert run(*mutations, host_var("spark-2", "ansible_host", "10.1.230.180")) == []


def test_a_management_address_that_is_another_nodes_ib_address_is_refused():
    problems = run(host_var("spark-2", "ansible_host", "192.168.200.12"))
    assert problems_naming(problems, "spark-2: ansible_host '192.168.200.12' is spark-1's ib_address"), (
        problems
    )


def test_a_short_ib_prefix_is_refused():
    problems = run(host_var("spark-1", "ib_prefix", 8))
    assert problems_naming(problems, "spark-1: ib_prefix 8 is shorter than /16"), problems


@pytest.mark.parametrize(
    "name",
    [
        "vllm_serve_port",
        "model_sync_rsyncd_port",
        "roce_network_ssh_port",
        "cluster_ssh_port",
        "ansible_port",
    ],
)
@pytest.mark.parametrize("value", [0, -1, 65536, 99999, 8000.5, True, "http", "80 ", float("nan"), [80]])
def test_a_port_is_an_integer_from_1_to_65535(name, value):
    problems = run(setting(name, value))
    assert problems_naming(problems, f"{name} ", "is not a port"), problems


@pytest.mark.parametrize(
    ("ports", "fragment"),
    [
        (
            {"worker_ports": "10999-10002"},
            "roce_network_ray_ports.worker_ports '10999-10002' is a reversed range",
        ),
        ({"worker_ports": "1-70000"}, 'roce_network_ray_ports.worker_ports "1-70000" is not a port'),
        ({"gcs": "abc"}, 'roce_network_ray_ports.gcs "abc" is not a port'),
        ({"gcs": 0}, "roce_network_ray_ports.gcs 0 is not a port"),
        ({"gcs": 8000}, "vllm_serve_port 8000 and roce_network_ray_ports.gcs 8000 share port 8000"),
        (
            {"gcs": 10500},
            "roce_network_ray_ports.gcs 10500 and roce_network_ray_ports.worker_ports 10002-10999 share",
        ),
        (
            {"metrics_export": 6379},
            "roce_network_ray_ports.gcs 6379 and roce_network_ray_ports.metrics_export 6379",
        ),
        ({"client_server": 22}, "share port 22"),
    ],
)
def test_ray_ports_are_valid_and_distinct(ports, fragment):
    merged = {**SETTINGS["roce_network_ray_ports"], **ports}
    problems = run(setting("roce_network_ray_ports", merged))
    assert problems_naming(problems, fragment), problems


def test_ray_cluster_ports_override_roce_networks():
    problems = run(setting("ray_cluster_ports", {"gcs": 873}))
    assert problems_naming(
        problems, "model_sync_rsyncd_port 873 and ray_cluster_ports.gcs 873 share port 873"
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("model_sync_rsyncd_port", 22),
        ("vllm_serve_port", 22),
        ("vllm_serve_port", 873),
        ("cluster_ssh_port", 8000),
    ],
)
def test_services_do_not_share_a_port(name, value):
    assert problems_naming(run(setting(name, value)), f"share port {value}")


def test_ssh_ports_may_be_one_port():
    assert (
        run(
            setting("cluster_ssh_port", 2222),
            setting("roce_network_ssh_port", 2222),
            setting("ansible_port", 2222),
        )
        == []
    )


@pytest.mark.parametrize(
    "name", ["sparkops_gpu_memory_utilization", "sparkops_ray_memory_threshold", "sparkops_model_size_gib"]
)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), "1e999", -1, -0.5])
def test_a_fraction_or_size_that_is_not_finite_or_negative_is_refused_by_name(name, value):
    problems = run(setting(name, value))
    mine = problems_naming(problems, f"cluster: {name} ")
    assert len(mine) == 1, problems
    assert "differs" not in mine[0] and " has " not in mine[0], mine


@pytest.mark.parametrize(
    "name", [n for n, s in contract.safety.ROLE_SETTING.items() if s.kind in ("int", "number")]
)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1, "-1", "nan", -1e9])
def test_role_numbers_refuse_nan_infinity_and_negatives_by_name(name, value):
    problems = run(setting(name, value))
    assert problems_naming(problems, f"{name} "), problems


@pytest.mark.parametrize("value", [{"head": -1}, {"worker": float("nan")}, {"head": "x"}, [1.0], "3"])
def test_the_ray_reserves_are_a_mapping_of_finite_numbers(value):
    assert problems_naming(
        run(setting("preflight_plan_ray_reserve_gib", value)), "preflight_plan_ray_reserve_gib "
    )


def test_the_ray_reserves_accept_numbers():
    assert run(setting("preflight_plan_ray_reserve_gib", {"head": 4.2, "worker": "1.8"})) == []


def test_the_monitoring_ports_extra_sources_are_ipv4_networks():
    """Refused in stage 0, with the words the monitoring stage's preflight uses (_firewall_chain.py)."""
    assert run(setting("monitoring_allowed_sources", ["10.0.0.0/24", "10.0.1.7/32"])) == []
    problems = run(host_var("spark-2", "monitoring_allowed_sources", ["10.0.1.7", "10.0.0.0/24"]))
    assert problems == [
        "spark-2: monitoring_allowed_sources item '10.0.1.7' has no prefix; write 10.0.1.7/32 for that one "
        "machine, or its network, e.g. 10.0.0.0/24. Fix: list IPv4 networks in CIDR form, e.g. "
        "monitoring_allowed_sources: [10.0.0.0/24, 10.0.1.7/32] (group_vars/all/monitoring.yml)"
    ]
    problems = run(setting("monitoring_allowed_sources", "10.0.0.0/24"))
    assert len(problems) == 1 and problems[0].startswith(
        'cluster: monitoring_allowed_sources "10.0.0.0/24" is not a list. Fix: '
    ), problems


def test_nan_everywhere_is_still_one_value():
    """NaN != NaN in Python: the consistency check must not call two NaNs different."""
    problems = run(setting("sparkops_gpu_memory_utilization", math.nan))
    assert problems == [p for p in problems if "not a finite number" in p] and len(problems) == 1, problems


def test_the_role_defaults_pass_as_they_are():
    """The baseline holds every role setting at its default: all of them must pass."""
    assert set(contract.safety.ROLE_SETTING) <= set(baseline().hostvars["spark-1"])
    assert contract.check(baseline()) == []


ODD_VALUES = [
    None,
    True,
    False,
    0,
    -1,
    1.5,
    math.nan,
    math.inf,
    "",
    " ",
    "x\n",
    "\0",
    [],
    {},
    [1],
    {"a": 1},
    "/",
    "..",
    "1-2",
]
EVERY_NAME = (
    [s.name for s in contract.SETTINGS]
    + list(contract.HOST_VARIABLES)
    + [s.name for s in contract.ROLE_SETTINGS]
)


@pytest.mark.parametrize("name", EVERY_NAME)
def test_no_value_of_any_type_crashes_the_contract(name):
    """Whatever a variable holds, the contract answers with problems (or none), never an exception."""
    for value in ODD_VALUES:
        for mutate in (setting(name, value), host_var("spark-2", name, value)):
            problems = run(mutate)
            assert all(isinstance(p, str) and ". Fix: " in p for p in problems), (name, value, problems)


@pytest.mark.parametrize(
    "value",
    ["0.0.0.0;id", "$(reboot)", "spark-1/x", "[::1]", "-h", "a..b", "é.lan", "10.0.0.1:8000", "x" * 64],
)
def test_a_serve_host_that_is_no_address_is_refused_before_anything_runs(value):
    # vllm_serve_host becomes vLLM's --host and the URL of every client of the endpoint,
    # one of them on a shell line (plugins/module_utils/_serve_endpoint.py).
    mine = problems_naming(run(setting("vllm_serve_host", value)), "vllm_serve_host", "neither an IP address")
    assert len(mine) == 1 and mine[0].startswith("cluster: ") and "Fix: 0.0.0.0" in mine[0]


@pytest.mark.parametrize(
    "value", ["0.0.0.0", "::", "127.0.0.1", "10.1.230.180", "fd00::1", "spark-1.lan", "localhost"]
)
def test_a_serve_host_that_is_an_address_or_a_name_passes(value):
    assert problems_naming(run(setting("vllm_serve_host", value)), "vllm_serve_host") == []
