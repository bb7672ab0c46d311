# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The inventory contract of stage 0 (roles/validate), as plain Python.

``check(inventory)`` takes the inventory as plain data (groups and each host's
variables, read on the controller; nothing here contacts a host) and returns
every problem at once, sorted. Each problem is one line
"<subject>: <variable> <value> <what is wrong>. Fix: <what to do>", where the
subject is the host (or hosts) concerned, ``cluster`` for a cluster-wide
setting, or ``inventory`` for a missing group.

The cluster-wide settings are one table (SETTINGS): name, type, whether null is
allowed, whether the setting must be set, whether it is secret (never echoed),
the file of the sample inventory that holds it (the fix names it), an example,
and its range. Each check group is one function; ``check`` runs them all.
"""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass, field

from ansible_collections.sparkops.vllm.plugins.module_utils import _inventory_contract_safety as safety
from ansible_collections.sparkops.vllm.plugins.module_utils._inventory_contract_safety import (
    VAULTED,  # noqa: F401 - part of this module's interface (the action plugin marks vaulted values with it)
    Vaulted,
    numeric,
    same,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._inventory_contract_safety import (
    address as _address,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._inventory_contract_safety import (
    describe as _describe,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._inventory_contract_safety import (
    is_int as _is_int,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._inventory_contract_safety import (
    network as _network,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._inventory_contract_safety import to_json as _json
from ansible_collections.sparkops.vllm.plugins.module_utils._inventory_contract_safety import (
    usable_range as _usable_range,
)

# Where each host's own variables go in the sample layout (inventory/sample/).
HOST_FILE = "hosts.yml or host_vars/{host}.yml"
NETWORK_FILE = "group_vars/cluster/network.yml"
TIMES = "\u00d7"


@dataclass(frozen=True)
class Range:
    """Bounds of a numeric setting and the words of its refusal."""

    minimum: float | None = None
    maximum: float | None = None
    min_open: bool = False
    max_open: bool = False
    # "<value> <wrong>. Fix: <fix>"
    wrong: str = ""
    fix: str = ""

    def holds(self, value):
        if self.minimum is not None and (value <= self.minimum if self.min_open else value < self.minimum):
            return False
        return self.maximum is None or (value < self.maximum if self.max_open else value <= self.maximum)


POSITIVE = Range(minimum=1, wrong="is not a positive integer", fix="set it to 1 or more")


@dataclass(frozen=True)
class Setting:
    name: str
    kind: str  # string, int, number, bool
    file: str
    example: str
    nullable: bool = False
    optional: bool = False
    secret: bool = False
    range: Range | None = None


SETTINGS = (
    Setting("sparkops_cluster_name", "string", "group_vars/all/cluster.yml", "spark-vllm"),
    Setting("sparkops_gpus_per_node", "int", "group_vars/all/cluster.yml", "1", range=POSITIVE),
    Setting("sparkops_tensor_parallel_size", "int", "group_vars/all/cluster.yml", "2", range=POSITIVE),
    Setting("sparkops_pipeline_parallel_size", "int", "group_vars/all/cluster.yml", "1", range=POSITIVE),
    Setting("sparkops_ib_subnet", "string", NETWORK_FILE, "192.168.200.0/24"),
    Setting("sparkops_model_id", "string", "group_vars/all/model.yml", "Qwen/Qwen3.5-122B-A10B-FP8"),
    Setting("sparkops_model_path", "string", "group_vars/all/model.yml", "/srv/models/Qwen3.5-122B-A10B-FP8"),
    Setting("sparkops_served_model_name", "string", "group_vars/all/model.yml", "qwen3.5-122b"),
    Setting("sparkops_max_model_len", "int", "group_vars/all/model.yml", "32768", range=POSITIVE),
    Setting(
        "sparkops_model_size_gib",
        "number",
        "group_vars/all/model.yml",
        "111",
        nullable=True,
        optional=True,
        range=Range(
            minimum=0,
            min_open=True,
            wrong="is not a positive size in GiB",
            fix="set the model's size on disk, or null",
        ),
    ),
    Setting(
        "sparkops_gpu_memory_utilization",
        "number",
        "group_vars/all/memory.yml",
        "null",
        nullable=True,
        range=Range(
            minimum=0,
            maximum=1,
            min_open=True,
            wrong="is outside (0, 1]; it is the fraction of GPU memory vLLM may claim",
            fix="set a fraction such as 0.85, or null to let the memory plan recommend one",
        ),
    ),
    Setting("sparkops_cuda_graphs", "bool", "group_vars/all/memory.yml", "true"),
    Setting("sparkops_ray_memory_monitor", "bool", "group_vars/all/ray.yml", "true"),
    Setting(
        "sparkops_ray_memory_threshold",
        "number",
        "group_vars/all/ray.yml",
        "0.95",
        range=Range(
            minimum=0,
            maximum=1,
            min_open=True,
            max_open=True,
            wrong="is outside (0, 1); it is the fraction of the node's memory at which Ray kills workers",
            fix="use a fraction such as 0.95, Ray's default",
        ),
    ),
    Setting("sparkops_vllm_version", "string", "group_vars/all/vllm.yml", '"0.17.1"'),
    Setting("sparkops_api_key", "string", "group_vars/all/secrets.yml", '""', nullable=True, secret=True),
    Setting(
        "sparkops_hf_token",
        "string",
        "group_vars/all/secrets.yml",
        "null",
        nullable=True,
        secret=True,
        optional=True,
    ),
)
SETTING = {s.name: s for s in SETTINGS}

# The per-host variables the contract reads, and the other roles' settings it
# checks (read from the inventory, else from the role's defaults/main.yml).
HOST_VARIABLES = (
    "ansible_host",
    "ansible_port",
    "ansible_connection",
    "ib_address",
    "ib_interface",
    "ib_mtu",
    "ib_prefix",
)
ROLE_SETTINGS = safety.ROLE_SETTINGS

# The options of roles/validate (defaults/main.yml), with the same defaults.
DEFAULT_OPTIONS = {
    "ib_mtu_min": 576,
    "ib_mtu_max": 9216,
    "ib_interface_pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$",
    "ib_interface_rdma_pattern": "^(mlx[0-9]+_[0-9]+|[Rr][Oo][Cc][Ee][A-Za-z0-9]+|rxe[0-9]+)$",
    "cluster_name_max_length": 32,
    "ib_subnet_min_prefix": 16,
}

CLUSTER_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")
MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
VLLM_VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?")


@dataclass
class Inventory:
    """The inventory as plain data: group members in inventory order, and each host's variables.

    A host's variables hold only the names the contract reads that the host has;
    a vaulted value is VAULTED.
    """

    head: list = field(default_factory=list)
    workers: list = field(default_factory=list)
    cluster: list = field(default_factory=list)
    hostvars: dict = field(default_factory=dict)
    options: dict = field(default_factory=lambda: dict(DEFAULT_OPTIONS))

    @property
    def hosts(self):
        """`cluster` plus anything put in head or workers outside it, in inventory order."""
        seen = []
        for host in self.cluster + self.head + self.workers:
            if host not in seen:
                seen.append(host)
        return seen

    @property
    def ref_host(self):
        """The host cluster-wide settings are read from: the head, or else the first host."""
        pool = self.head if len(self.head) == 1 else self.hosts
        return pool[0] if pool else ""

    def vars(self, host):
        return self.hostvars.get(host) or {}

    @property
    def ref(self):
        return self.vars(self.ref_host)


# -- helpers --------------------------------------------------------------------


def ib_subnet(inv):
    """The RoCE network (host bits cleared), or None when the setting is not a CIDR."""
    return _network(inv.ref.get("sparkops_ib_subnet"), strict=False)


def effective(inv, name):
    """The cluster-wide value of a setting (read on the reference host), or None."""
    value = inv.ref.get(name)
    return None if isinstance(value, Vaulted) else value


# -- check groups ---------------------------------------------------------------


def check_groups(inv):
    """Exactly one head, every cluster host in exactly one of head/workers."""
    p = []
    if not inv.cluster:
        p.append(
            "inventory: group 'cluster' is missing or has no host. Fix: define the group cluster with the "
            "children head and workers, as inventory/sample/hosts.yml does"
        )
    if not inv.head:
        p.append(
            "inventory: group 'head' has no host; it needs exactly one. Fix: put the node that runs the Ray "
            "head and the vLLM API in head (a child of cluster)"
        )
    elif len(inv.head) > 1:
        heads = sorted(inv.head)
        names = ", ".join(heads)
        p.append(
            f"{names}: group 'head' has {len(heads)} hosts ({names}); it needs exactly one. "
            f"Fix: keep {heads[0]} in head and move {', '.join(heads[1:])} to workers"
        )
    for h in inv.hosts:
        if h in inv.head and h in inv.workers:
            p.append(f"{h}: is in both head and workers. Fix: remove {h} from one of the two groups")
        elif h not in inv.head and h not in inv.workers:
            p.append(
                f"{h}: is in group cluster but in neither head nor workers, so no stage would set it up. "
                f"Fix: add {h} to workers (or to head)"
            )
        if h not in inv.cluster:
            group = "head" if h in inv.head else "workers"
            p.append(
                f"{h}: is in group {group} but not in group cluster. Fix: make head and workers children of "
                "cluster (cluster: children: head: ..., workers: ...)"
            )
    return p


def _type_problem(s, value):  # noqa: PLR0911 - one refusal per type, the first that applies
    """The problem of a cluster-wide value of the wrong type, or None."""
    fix_in = f" ({s.file})"
    what = _describe(value, s.secret)
    if value is None:
        if s.nullable:
            return None
        return f"cluster: {s.name} is null (empty). Fix: give it a value, e.g. {s.name}: {s.example}{fix_in}"
    if s.kind == "bool" and not isinstance(value, bool):
        if isinstance(value, str):
            meant = "false" if value.strip().lower() in ("false", "no", "off", "n", "0", "") else "true"
            return (
                f"cluster: {s.name} is the string '{value}', not a boolean; Jinja treats every non-empty string "
                f"as true, so '{value}' would mean true. Fix: write it unquoted: {s.name}: {meant}{fix_in}"
            )
        return f"cluster: {s.name} is {what}, not a boolean. Fix: write true or false, unquoted{fix_in}"
    if s.kind in ("int", "number") and numeric(s.kind, value) is None:
        noun, article = ("a whole number", "an integer") if s.kind == "int" else ("a number", "a number")
        return f"cluster: {s.name} is {what}, not {noun}. Fix: write {article}, e.g. {s.name}: {s.example}{fix_in}"
    if s.kind == "string" and not isinstance(value, str):
        return (
            f"cluster: {s.name} is {what}, not a string; YAML read the unquoted value as another type. "
            f"Fix: quote it, e.g. {s.name}: {s.example}{fix_in}"
        )
    return None


def check_settings(inv):
    """Every cluster-wide setting is set and of its type; numbers within their range."""
    p = []
    if not inv.ref_host:
        return p
    cfg = inv.ref
    for s in SETTINGS:
        if s.name not in cfg:
            if not s.optional:
                p.append(f"cluster: {s.name} is not set. Fix: add {s.name}: {s.example} ({s.file})")
            continue
        value = cfg[s.name]
        if isinstance(value, Vaulted):
            continue
        problem = _type_problem(s, value)
        if problem:
            p.append(problem)
        elif s.kind == "number" and value is not None and not math.isfinite(value):
            p.append(
                f"cluster: {s.name} {value} is not a finite number. Fix: write a number, e.g. {s.name}: {s.example} ({s.file})"
            )
        elif s.range and value is not None and not s.range.holds(value):
            p.append(f"cluster: {s.name} {value} {s.range.wrong}. Fix: {s.range.fix} ({s.file})")
    return p


def check_consistency(inv):
    """Cluster-wide settings are equal on every host (a host_vars override makes nodes disagree)."""
    p = []
    if not inv.ref_host:
        return p
    ref = inv.ref
    notset = "(not set)"
    for s in SETTINGS:
        rv = ref.get(s.name, notset)
        for h in inv.hosts:
            if h == inv.ref_host:
                continue
            hv = inv.vars(h).get(s.name, notset)
            # comparing vaulted values would need the vault password; stage 0 runs without it
            if isinstance(rv, Vaulted) or isinstance(hv, Vaulted):
                continue
            if same(hv, rv):
                continue
            if s.secret:
                values = f"a different value than on {inv.ref_host}"
            else:
                values = f"{_json(hv)} on {h} but {_json(rv)} on {inv.ref_host}"
            p.append(
                f"{h}: {s.name} has {values}; it is a cluster-wide setting and must be the same on every node. "
                f"Fix: set it once in {s.file} and remove the per-host value from {h}'s host vars"
            )
    return p


def _check_ib_address(inv, h, net):  # noqa: PLR0911 - one refusal per address, the first that applies
    hv = inv.vars(h)
    where = " in " + HOST_FILE.format(host=h)
    in_subnet = f" in {net}" if net else ""
    a = hv.get("ib_address")
    if a is None or (isinstance(a, str) and a.strip() == ""):
        return [f"{h}: ib_address is not set. Fix: give {h} its address on the RoCE link{in_subnet}{where}"]
    first, last = _usable_range(net) if net else (None, None)
    if not isinstance(a, str):
        example = first or "192.168.200.12"
        return [
            f"{h}: ib_address {_json(a)} is not an IP address. Fix: write the address as a string, e.g. ib_address: {example}{where}"
        ]
    if _network(a) is not None:
        return [
            f"{h}: ib_address '{a}' is not an IP address: it carries a prefix. Fix: write the bare address "
            f"'{a.split('/')[0]}'{where}; the prefix comes from sparkops_ib_subnet (or ib_prefix)"
        ]
    address = _address(a)
    if address is None:
        example = f", e.g. {first}" if net else ""
        return [
            f"{h}: ib_address '{a}' is not an IP address. Fix: give {h} its address on the RoCE link{in_subnet}{example}{where}"
        ]
    mgmt = hv.get("ansible_host")
    if isinstance(mgmt, str) and mgmt == a:
        return [
            f"{h}: ib_address '{a}' is the management address (ansible_host); Ray, NCCL and vLLM would then talk "
            f"over the management network instead of the RoCE link. Fix: set ib_address to {h}'s address on the "
            f"RoCE link{in_subnet}{where}"
        ]
    if net is not None:
        if address.version != net.version or address not in net:
            return [
                f"{h}: ib_address '{a}' is outside sparkops_ib_subnet {net}. Fix: give {h} an address in {net}"
                f"{where} (or correct sparkops_ib_subnet)"
            ]
        if not first <= address <= last:
            which = "network" if address == net.network_address else "broadcast"
            return [
                f"{h}: ib_address '{a}' is the {which} address of {net}, which no host can use. Fix: give {h} an "
                f"address from {first} to {last}{where}"
            ]
    return []


def _check_ib_interface(inv, h):
    where = " in " + HOST_FILE.format(host=h)
    i = inv.vars(h).get("ib_interface")
    example = " (e.g. enp1s0f1np1; `ibdev2netdev` or `ip -br link` lists them)"
    if i is None or (isinstance(i, str) and i.strip() == ""):
        return [
            f"{h}: ib_interface is not set. Fix: set it to the network interface of the RoCE port{example}{where}"
        ]
    if not isinstance(i, str):
        return [
            f"{h}: ib_interface {_json(i)} is not an interface name. Fix: set it to the network interface of the "
            f"RoCE port{example}{where}"
        ]
    if re.match(inv.options["ib_interface_rdma_pattern"], i):
        return [
            f"{h}: ib_interface '{i}' is an RDMA device name, not a network interface; NCCL_SOCKET_IFNAME and the "
            f"address need the netdev. Fix: use the interface that `ibdev2netdev` maps {i} to (e.g. enp1s0f1np1){where}"
        ]
    if i == "lo":
        return [
            f"{h}: ib_interface 'lo' is the loopback interface, which no other node can reach. Fix: use the RoCE "
            f"port's interface{example}{where}"
        ]
    if not re.match(inv.options["ib_interface_pattern"], i):
        return [
            f"{h}: ib_interface '{i}' is not a valid Linux interface name (1 to 15 letters, digits, '-', '_' or "
            f"'.', no spaces, '/' or ':'). Fix: use the RoCE port's interface{example}{where}"
        ]
    return []


def _check_ib_mtu(inv, h):
    lo, hi = inv.options["ib_mtu_min"], inv.options["ib_mtu_max"]
    mtu_range = f"{lo}..{hi}"
    m = inv.vars(h).get("ib_mtu")
    if m is None:
        return [
            f"{h}: ib_mtu is not set. Fix: set ib_mtu for the whole group cluster in {NETWORK_FILE}, e.g. ib_mtu: 9000"
        ]
    if not _is_int(m):
        return [
            f"{h}: ib_mtu {_json(m)} is not a whole number. Fix: write an integer in {mtu_range}, "
            f"e.g. ib_mtu: 9000 ({NETWORK_FILE})"
        ]
    if m < lo or m > hi:
        return [
            f"{h}: ib_mtu {m} is outside {mtu_range}. Fix: use 9000 (jumbo frames, which the RoCE link is meant "
            f"for) or 1500, the same on every node ({NETWORK_FILE})"
        ]
    return []


def _check_ib_prefix(inv, h, net):
    hv = inv.vars(h)
    where = " in " + HOST_FILE.format(host=h)
    pfx = hv.get("ib_prefix")
    if pfx is None:
        return []
    a = hv.get("ib_address")
    subnet_prefix = f" (/{net.prefixlen})" if net else ""
    max_pfx = 128 if isinstance(a, str) and ":" in a else 32
    if not _is_int(pfx):
        return [
            f"{h}: ib_prefix {_json(pfx)} is not a whole number. Fix: write a prefix length, e.g. "
            f"ib_prefix: {net.prefixlen if net else 24}{where}, or remove it to use the prefix of sparkops_ib_subnet"
        ]
    if pfx < 1 or pfx > max_pfx:
        return [
            f"{h}: ib_prefix {pfx} is outside 1..{max_pfx}. Fix: remove ib_prefix to use the prefix of "
            f"sparkops_ib_subnet{subnet_prefix}, or set a valid prefix length{where}"
        ]
    address = _address(a)
    if address is None:
        return []
    onlink = ipaddress.ip_network(f"{a}/{pfx}", strict=False)
    cut = []
    for o in inv.hosts:
        if o == h:
            continue
        oa = inv.vars(o).get("ib_address")
        other = _address(oa)
        if other is not None and (other.version != onlink.version or other not in onlink):
            cut.append(f"{o} ({oa})")
    if cut:
        return [
            f"{h}: ib_prefix {pfx} makes {h}'s on-link network {a}/{pfx}, which leaves out {', '.join(cut)}, so the "
            f"nodes could not reach each other. Fix: remove ib_prefix to use the prefix of sparkops_ib_subnet"
            f"{subnet_prefix}, or widen it{where}"
        ]
    return []


def check_hosts(inv):
    """Per host: the RoCE address, interface, MTU and optional prefix."""
    net = ib_subnet(inv)
    p = []
    for h in inv.hosts:
        p += _check_ib_address(inv, h, net)
        p += _check_ib_interface(inv, h)
        p += _check_ib_mtu(inv, h)
        p += _check_ib_prefix(inv, h, net)
    return p


def check_link(inv):
    """Across hosts: RoCE addresses are unique, and the MTU is the same everywhere."""
    p = []
    net = ib_subnet(inv)
    owners = {}
    mtus = []
    for h in inv.hosts:
        a = inv.vars(h).get("ib_address")
        if isinstance(a, str) and a.strip():
            # one address however it is spelled
            owners.setdefault(str(_address(a.strip()) or a.strip()), []).append(h)
        m = inv.vars(h).get("ib_mtu")
        if _is_int(m):
            mtus.append((h, m))
    for address, hosts in owners.items():
        if len(hosts) > 1:
            names = ", ".join(sorted(hosts))
            in_subnet = f" in {net}" if net else ""
            p.append(
                f"{names}: share ib_address '{address}'; every node needs its own. Fix: give each of {names} a "
                f"different address{in_subnet} in their host vars (hosts.yml or host_vars/)"
            )
    if len({m for _, m in mtus}) > 1:
        listed = sorted(mtus)
        values = ", ".join(f"{h}={m}" for h, m in listed)
        p.append(
            f"{', '.join(h for h, _ in listed)}: ib_mtu differs between nodes ({values}); frames above the smaller "
            f"MTU would be dropped on the RoCE link. Fix: use one MTU on every node: set ib_mtu once in "
            f"{NETWORK_FILE} and remove the per-host values"
        )
    return p


def _check_cluster_name(inv):
    v = effective(inv, "sparkops_cluster_name")
    longest = inv.options["cluster_name_max_length"]
    if not isinstance(v, str) or (CLUSTER_NAME.fullmatch(v) and len(v) <= longest):
        return []
    hint = re.sub(r"^-+", "", re.sub(r"[^a-z0-9-]+", "-", v.lower()))
    hint = re.sub(r"-+$", "", hint[:longest])
    example = f", e.g. '{hint}'" if hint else ", e.g. 'spark-vllm'"
    return [
        f"cluster: sparkops_cluster_name '{v}' is not a valid name; it becomes part of systemd unit and container "
        f"names. Fix: use lowercase letters, digits and '-' (not first or last), at most {longest} characters"
        f"{example} (group_vars/all/cluster.yml)"
    ]


def _check_subnet(inv):
    v = effective(inv, "sparkops_ib_subnet")
    if not isinstance(v, str) or _network(v, strict=True) is not None:
        return []
    loose = _network(v, strict=False)
    if loose is not None:
        return [
            f"cluster: sparkops_ib_subnet '{v}' has host bits set; it must name the network. Fix: write "
            f"sparkops_ib_subnet: {loose} ({NETWORK_FILE})"
        ]
    return [
        f"cluster: sparkops_ib_subnet '{v}' is not a CIDR (network/prefix). Fix: write the RoCE link's network "
        f"with its prefix length, e.g. sparkops_ib_subnet: 192.168.200.0/24 ({NETWORK_FILE})"
    ]


def _check_parallelism(inv):
    """TP x PP must use every GPU of the cluster, no more and no fewer."""
    tp = effective(inv, "sparkops_tensor_parallel_size")
    pp = effective(inv, "sparkops_pipeline_parallel_size")
    gpn = effective(inv, "sparkops_gpus_per_node")
    if not all(_is_int(v) and v > 0 for v in (tp, pp, gpn)):
        return []
    nodes = len(inv.hosts)
    gpus = nodes * gpn
    if tp * pp == gpus:
        return []
    fix_pp = pp if gpus % pp == 0 else 1
    if (tp * pp) % gpn == 0:
        fix_nodes = f"or change the inventory to {(tp * pp) // gpn} nodes ({tp * pp} GPUs at {gpn} per node)"
    else:
        fix_nodes = (
            f"or change the inventory to a node count whose GPUs (nodes {TIMES} {gpn}) equal the product"
        )
    return [
        f"cluster: sparkops_tensor_parallel_size {TIMES} sparkops_pipeline_parallel_size = {tp} {TIMES} {pp} = "
        f"{tp * pp}, but the cluster has {gpus} GPUs ({nodes} nodes {TIMES} sparkops_gpus_per_node {gpn}). Fix: set "
        f"the product to {gpus}, e.g. sparkops_tensor_parallel_size: {gpus // fix_pp} and "
        f"sparkops_pipeline_parallel_size: {fix_pp} (group_vars/all/cluster.yml), {fix_nodes}"
    ]


def _check_model(inv):
    p = []
    v = effective(inv, "sparkops_model_path")
    path_fix = (
        " Fix: set the absolute path of the model directory, the same on every node, e.g. "
        "/srv/models/Qwen3.5-122B-A10B-FP8 (group_vars/all/model.yml)"
    )
    if isinstance(v, str):
        if v.strip() == "":
            p.append("cluster: sparkops_model_path is empty." + path_fix)
        elif not v.startswith("/"):
            p.append(
                f"cluster: sparkops_model_path '{v}' is relative; it must be absolute because the same path is "
                "mounted into the containers on every node." + path_fix
            )
        elif v.rstrip("/") == "" or re.search(r"(^|/)\.\.?(/|$)", v):
            p.append(
                f"cluster: sparkops_model_path '{v}' is not a model directory (the root, or a path with '.' or '..' "
                "in it); the model stage syncs this directory to every worker." + path_fix
            )
        elif any(not c.isprintable() and c != " " for c in v):
            p.append(
                "cluster: sparkops_model_path contains a control character (a newline, a tab or NUL), which no "
                "mount, unit file or script reads as one path." + path_fix
            )
        elif re.search(r"\s", v):
            p.append(
                f"cluster: sparkops_model_path '{v}' contains whitespace, which container mounts and launch scripts "
                "would split." + path_fix
            )
    v = effective(inv, "sparkops_model_id")
    if isinstance(v, str) and v.strip() == "":
        p.append(
            "cluster: sparkops_model_id is empty. Fix: set the Hugging Face repository id, e.g. "
            "sparkops_model_id: Qwen/Qwen3.5-122B-A10B-FP8 (group_vars/all/model.yml)"
        )
    elif isinstance(v, str) and not MODEL_ID.fullmatch(v):
        p.append(
            f"cluster: sparkops_model_id '{v}' is not a Hugging Face repository id (organisation/name). Fix: write "
            "only the id, e.g. sparkops_model_id: Qwen/Qwen3.5-122B-A10B-FP8, not a URL or a local path "
            "(group_vars/all/model.yml)"
        )
    v = effective(inv, "sparkops_served_model_name")
    if isinstance(v, str) and (v.strip() == "" or re.search(r"\s", v)):
        p.append(
            f"cluster: sparkops_served_model_name '{v}' is empty or contains whitespace; clients send it as "
            '"model" in every request. Fix: set a short name without spaces, e.g. sparkops_served_model_name: '
            "qwen3.5-122b (group_vars/all/model.yml)"
        )
    return p


def _check_vllm_version(inv):
    v = effective(inv, "sparkops_vllm_version")
    if not isinstance(v, str) or VLLM_VERSION.fullmatch(v):
        return []
    no_v = " and without the leading 'v'" if v.startswith("v") else ""
    return [
        f"cluster: sparkops_vllm_version '{v}' is not a vLLM release version (X.Y.Z, e.g. 0.17.1). Fix: write the "
        f'version quoted{no_v}, e.g. sparkops_vllm_version: "0.17.1" (group_vars/all/vllm.yml)'
    ]


def check_cluster(inv):
    """Values of the cluster-wide settings; each check runs only when the type is right."""
    if not inv.ref_host:
        return []
    return (
        _check_cluster_name(inv)
        + _check_subnet(inv)
        + _check_parallelism(inv)
        + _check_model(inv)
        + _check_vllm_version(inv)
    )


# Numeric variables: their numeric strings are read as numbers before any check.
NUMERIC = (
    {s.name: s.kind for s in SETTINGS if s.kind in ("int", "number")}
    | {"ib_mtu": "int", "ib_prefix": "int", "ansible_port": "int"}
    | safety.NUMERIC_ROLE_SETTINGS
)


def normalise(inv):
    """A copy of ``inv`` with every numeric string of a numeric variable read as its number."""
    hostvars = {}
    for host, own in inv.hostvars.items():
        values = dict(own)
        for name, kind in NUMERIC.items():
            if isinstance(values.get(name), str) and numeric(kind, values[name]) is not None:
                values[name] = numeric(kind, values[name])
        hostvars[host] = values
    return Inventory(inv.head, inv.workers, inv.cluster, hostvars, inv.options)


CHECKS = (
    check_groups,
    check_settings,
    check_consistency,
    check_hosts,
    check_link,
    check_cluster,
    *safety.SAFETY_CHECKS,
)


def check(inv):
    """Every problem of the inventory, once each, sorted."""
    inv = normalise(inv)
    problems = []
    for group in CHECKS:
        problems += group(inv)
    return sorted(set(problems))


def failure_message(problems):
    n = len(problems)
    head = f"The inventory has {n} problem{'' if n == 1 else 's'}; no host was contacted or changed:"
    return "\n".join([head] + [f"- {problem}" for problem in problems])


def summary(inv):
    """The one-line summary of a valid inventory."""
    inv = normalise(inv)
    c = inv.ref
    hosts = inv.hosts
    net = ib_subnet(inv)
    workers = f"workers {', '.join(inv.workers)}" if inv.workers else "no workers"
    head = inv.head[0] if inv.head else "none"
    return (
        f"Inventory OK: {len(hosts)} node{'' if len(hosts) == 1 else 's'} (head {head}, {workers}), "
        f"TP {c.get('sparkops_tensor_parallel_size', '?')} {TIMES} PP {c.get('sparkops_pipeline_parallel_size', '?')}, "
        f"RoCE {net or ''} at MTU {c.get('ib_mtu', '?')}, model {c.get('sparkops_model_id', '?')} served as "
        f"{c.get('sparkops_served_model_name', '?')}."
    )
