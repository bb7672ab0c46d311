# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""How the inventory contract reads values, and its checks against hostile or careless input.

Part of plugins/module_utils/_inventory_contract.py (which runs every check
group): the value readers both files share, the table of the other roles'
settings that stage 0 checks (ROLE_SETTINGS: each with the role whose
defaults/main.yml gives its default), and the check groups for secrets, paths,
network addresses, ports, numbers and the sources a firewall chain lets in. Each class is refused by what it is, not
by example: any control character, any system directory however it is
spelled, any special-purpose IPv4 range, any overlap of two ports or ranges.

The project is IPv4 end to end on the RoCE link (the don't-fragment ping's
payload is computed from the IPv4 header, Ray's address is written without
brackets, the Ray firewall is iptables only), so an IPv6 RoCE subnet or
address is refused in stage 0 rather than failing later. The management
address (ansible_host) may be IPv6: only SSH and the API use it.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from dataclasses import dataclass

from ansible_collections.sparkops.vllm.plugins.module_utils import _firewall_chain, _serve_endpoint


class Vaulted:
    """A value that is still vault-encrypted: stage 0 runs without the vault password."""

    def __repr__(self):
        return "Vaulted()"


VAULTED = Vaulted()

# A string that is exactly an integer, or a decimal number: `-e NAME=VALUE`
# always passes a string, and Ansible's own modules accept these for their
# int and float options. Nothing else (no spaces, no '_', no nan or inf words,
# no digits of other scripts: [0-9] is ASCII).
INTEGER = re.compile(r"-?[0-9]+")
DECIMAL = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def numeric(kind, value):
    """The number ``value`` stands for in an ``int`` or ``number`` setting, or None when it is none."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) or (kind == "number" and isinstance(value, float)):
        return value
    if not isinstance(value, str) or len(value) > 40:
        return None
    if INTEGER.fullmatch(value):
        return int(value)
    return float(value) if kind == "number" and DECIMAL.fullmatch(value) else None


def to_json(value):
    return json.dumps(value, ensure_ascii=False, default=lambda _: "(vaulted)")


def describe(value, secret=False):
    if isinstance(value, bool):
        return "a boolean" if secret else f"the boolean {str(value).lower()}"
    if is_number(value):
        return "a number" if secret else f"the number {value}"
    if isinstance(value, str):
        return "a string" if secret else f"the string '{value}'"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return type(value).__name__


def address(value):
    if not isinstance(value, str) or "/" in value:
        return None
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return None


def network(value, strict=False):
    if not isinstance(value, str) or "/" not in value:
        return None
    try:
        return ipaddress.ip_network(value, strict=strict)
    except ValueError:
        return None


def usable_range(net):
    """First and last usable host of a network (RFC 3021: /31 and /32 have no reserved ends)."""
    first, last = net.network_address, net.broadcast_address
    if net.version == 4 and net.prefixlen < 31:
        return first + 1, last - 1
    if net.version == 6 and net.prefixlen < 127:
        return first + 1, last
    return first, last


def same(a, b):
    """Equal values of the same type; NaN equals NaN here, so it is reported as NaN, not as a difference."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b and type(a) is type(b)


# -- the other roles' settings that stage 0 checks --------------------------------


@dataclass(frozen=True)
class RoleSetting:
    name: str
    role: str  # the role whose defaults/main.yml gives the default
    kind: str  # int, number, bool, string, port, ray_ports, path, numbers (a mapping of numbers), sources
    file: str  # the sample file that documents it
    minimum: float | None = None
    nullable: bool = False


_VS = "group_vars/all/vllm_serve.yml"
_RC = "group_vars/all/ray_cluster.yml"
_MS = "group_vars/all/model_sync.yml"
_PF = "group_vars/all/memory.yml"
_NET = "group_vars/cluster/network.yml"

ROLE_SETTINGS = (
    RoleSetting("vllm_serve_host", "vllm_serve", "string", _VS),
    RoleSetting("vllm_serve_port", "vllm_serve", "port", _VS),
    RoleSetting("vllm_serve_allow_unauthenticated", "vllm_serve", "bool", _VS),
    RoleSetting("vllm_serve_max_num_seqs", "vllm_serve", "int", _VS, minimum=1, nullable=True),
    RoleSetting("vllm_serve_start_timeout_seconds", "vllm_serve", "int", _VS, minimum=1),
    RoleSetting("vllm_serve_stop_timeout_seconds", "vllm_serve", "int", _VS, minimum=1),
    RoleSetting("vllm_serve_ready_timeout_seconds", "vllm_serve", "int", _VS, minimum=1),
    RoleSetting("roce_network_ray_ports", "roce_network", "ray_ports", _NET),
    RoleSetting("roce_network_ssh_port", "roce_network", "port", _NET),
    RoleSetting("roce_network_ping_timeout", "roce_network", "int", _NET, minimum=1),
    RoleSetting("ray_cluster_ports", "ray_cluster", "ray_ports", _RC),
    RoleSetting("ray_cluster_state_dir", "ray_cluster", "path", _RC),
    RoleSetting("ray_cluster_start_timeout_seconds", "ray_cluster", "int", _RC, minimum=1),
    RoleSetting("ray_cluster_stop_timeout_seconds", "ray_cluster", "int", _RC, minimum=1),
    RoleSetting("ray_cluster_wait_timeout_seconds", "ray_cluster", "int", _RC, minimum=1),
    RoleSetting("cluster_ssh_port", "cluster_ssh", "port", "group_vars/all/cluster_ssh.yml"),
    RoleSetting("model_sync_rsyncd_port", "model_sync", "port", _MS),
    RoleSetting("model_sync_rsyncd_config_dir", "model_sync", "path", _MS),
    RoleSetting("model_sync_progress_dir", "model_sync", "path", _MS),
    RoleSetting("model_sync_streams", "model_sync", "int", _MS, minimum=0),
    RoleSetting("model_sync_hash_workers", "model_sync", "int", _MS, minimum=0),
    RoleSetting("model_sync_io_timeout", "model_sync", "int", _MS, minimum=1),
    RoleSetting("model_sync_bwlimit_kib", "model_sync", "int", _MS, minimum=0),
    RoleSetting("model_sync_disk_margin_gib", "model_sync", "number", _MS, minimum=0),
    RoleSetting("model_sync_timeout_seconds", "model_sync", "int", _MS, minimum=1),
    RoleSetting("model_sync_poll_seconds", "model_sync", "int", _MS, minimum=1),
    RoleSetting("preflight_plan_safety_margin_gib", "preflight", "number", _PF, minimum=0),
    RoleSetting(
        "preflight_plan_activation_reserve_gib", "preflight", "number", _PF, minimum=0, nullable=True
    ),
    RoleSetting("preflight_plan_non_torch_reserve_gib", "preflight", "number", _PF, minimum=0, nullable=True),
    RoleSetting(
        "preflight_plan_cuda_graph_reserve_gib", "preflight", "number", _PF, minimum=0, nullable=True
    ),
    RoleSetting(
        "preflight_plan_cuda_context_reserve_gib", "preflight", "number", _PF, minimum=0, nullable=True
    ),
    RoleSetting("preflight_plan_ray_reserve_gib", "preflight", "numbers", _PF, minimum=0),
    RoleSetting("teardown_state_dir", "teardown", "path", "group_vars/all/teardown.yml"),
    RoleSetting("monitoring_allowed_sources", "monitoring", "sources", "group_vars/all/monitoring.yml"),
)
ROLE_SETTING = {s.name: s for s in ROLE_SETTINGS}
NUMERIC_ROLE_SETTINGS = {
    s.name: ("int" if s.kind == "port" else s.kind)
    for s in ROLE_SETTINGS
    if s.kind in ("int", "number", "port")
}

API_KEY_MIN_LENGTH = 16
# The API key is sent as "Authorization: Bearer <key>" and a Hugging Face token
# the same way: RFC 6750 section 2.1 allows exactly these characters (b64token).
# Anything else breaks the header or the one line of the env file it is written to.
BEARER_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
BEARER_CHARACTERS = "letters, digits and - . _ ~ + / (and = at the end)"

# Directories no setting of the project may name: the operating system's own
# (teardown removes a state directory, and a model with teardown_remove_model),
# and the parents that every cluster's directories share.
SYSTEM_DIRECTORIES = frozenset(
    [
        "/",
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/lib",
        "/media",
        "/mnt",
        "/opt",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/snap",
        "/srv",
        "/sys",
        "/tmp",
        "/usr",
        "/var",
        "/lost+found",
        "/usr/bin",
        "/usr/include",
        "/usr/lib",
        "/usr/libexec",
        "/usr/local",
        "/usr/local/bin",
        "/usr/local/lib",
        "/usr/local/sbin",
        "/usr/local/share",
        "/usr/sbin",
        "/usr/share",
        "/usr/src",
        "/var/backups",
        "/var/cache",
        "/var/lib",
        "/var/local",
        "/var/lock",
        "/var/log",
        "/var/mail",
        "/var/opt",
        "/var/run",
        "/var/spool",
        "/var/tmp",
        "/var/lib/docker",
        "/var/lib/containerd",
        "/var/lib/systemd",
        "/var/lib/apt",
        "/var/lib/dpkg",
        "/etc/systemd",
        "/etc/ssh",
        "/etc/netplan",
        "/etc/docker",
        "/etc/sparkops",
        "/var/lib/sparkops",
    ]
)
# Kernel and runtime filesystems: nothing beneath them is a place for files.
VIRTUAL_DIRECTORIES = ("/proc", "/sys", "/dev", "/run")
# Directory names the project itself uses beside the clusters' own under
# /etc/sparkops and /var/lib/sparkops: a cluster of that name would share them.
RESERVED_CLUSTER_NAMES = {
    "model-sync": "/etc/sparkops/model-sync, the model copy's rsync daemon configuration"
}

# Special-purpose IPv4 ranges that no RoCE subnet or node address may use
# (RFC 6890): "this network", loopback, link-local, multicast, reserved and
# the limited broadcast address (inside 240.0.0.0/4).
SPECIAL_V4 = (
    (ipaddress.ip_network("0.0.0.0/8"), "the unspecified ('this network') range 0.0.0.0/8"),
    (ipaddress.ip_network("127.0.0.0/8"), "the loopback range 127.0.0.0/8"),
    (ipaddress.ip_network("169.254.0.0/16"), "the link-local range 169.254.0.0/16"),
    (ipaddress.ip_network("224.0.0.0/4"), "the multicast range 224.0.0.0/4"),
    (ipaddress.ip_network("240.0.0.0/4"), "the reserved and broadcast range 240.0.0.0/4"),
)
IPV4_ONLY = (
    "the project is IPv4 end to end on the RoCE link (ping payload, Ray's address, the iptables firewall), so "
    "IPv6 is refused here rather than failing in a later stage"
)
# Connections that reach a host over the network (others, such as docker or
# local, have no management address to compare).
NETWORK_CONNECTIONS = (
    None,
    "ssh",
    "ansible.builtin.ssh",
    "paramiko",
    "paramiko_ssh",
    "ansible.builtin.paramiko_ssh",
    "smart",
)


def _subject(inv, hosts):
    hosts = sorted(hosts)
    return "cluster" if hosts == sorted(inv.hosts) and len(hosts) > 1 else ", ".join(hosts)


def _per_host(inv, texts_of):
    """Run ``texts_of(host)`` on every host; hosts with the same problem share one line."""
    by_text = {}
    for h in inv.hosts:
        for text in texts_of(h):
            by_text.setdefault(text, []).append(h)
    return [f"{_subject(inv, hosts)}: {text}" for text, hosts in by_text.items()]


# -- secrets ----------------------------------------------------------------------


def _secret_faults(value):
    faults = []
    for char, words in (("\n", "a newline"), ("\r", "a carriage return"), ("\0", "a NUL character")):
        if char in value:
            faults.append(words)
    if any(not c.isprintable() and c not in "\n\r\0 " for c in value):
        faults.append("a control character")
    if value != value.strip():
        faults.append("leading or trailing whitespace")
    if not faults and not BEARER_TOKEN.fullmatch(value):
        faults.append(f"a character other than {BEARER_CHARACTERS}")
    return faults


def check_secrets(inv):
    """The API key and the Hugging Face token: one clean line each; the key long enough. Never echoed."""
    p = []
    ref = inv.ref
    for name, min_length in (("sparkops_api_key", API_KEY_MIN_LENGTH), ("sparkops_hf_token", 1)):
        value = ref.get(name)
        if not isinstance(value, str) or value == "":
            continue
        faults = _secret_faults(value)
        if len(value) < min_length:
            faults.append(f"fewer than {min_length} characters")
        if faults:
            p.append(
                f"cluster: {name} (value not shown) has {' and '.join(faults)}; it is written as one line of the "
                "serve container's env file and sent as a Bearer token, so it must be one plain token. Fix: set it "
                f"again with only {BEARER_CHARACTERS}"
                + (f", at least {min_length} characters" if min_length > 1 else "")
                + " (group_vars/all/secrets.yml, vaulted)"
            )
    return p


def unmapped(ip):
    """An IPv4-mapped IPv6 address (::ffff:127.0.0.1) as the IPv4 address it stands for."""
    return ip.ipv4_mapped if ip is not None and ip.version == 6 and ip.ipv4_mapped else ip


def _loopback(host):
    if host == "localhost":
        return True
    ip = unmapped(address(host))
    return ip is not None and ip.is_loopback


def check_open_api(inv):
    """No open API by accident: an empty key only on loopback, or when the operator says so."""
    ref = inv.ref
    key = ref.get("sparkops_api_key")
    if "sparkops_api_key" not in ref or isinstance(key, Vaulted) or (isinstance(key, str) and key != ""):
        return []
    if key is not None and not isinstance(key, str):
        return []
    host = ref.get("vllm_serve_host", "0.0.0.0")
    if ref.get("vllm_serve_allow_unauthenticated") is True or (isinstance(host, str) and _loopback(host)):
        return []
    port = ref.get("vllm_serve_port", _serve_endpoint.DEFAULT_PORT)
    return [
        f"cluster: sparkops_api_key is empty while vLLM's API listens on {host}:{port} (vllm_serve_host), beyond "
        "loopback: anyone who reaches that port can use the model. Fix: set a key of at least "
        f"{API_KEY_MIN_LENGTH} characters (group_vars/all/secrets.yml, vaulted), or bind the API to 127.0.0.1 "
        "with vllm_serve_host, or set vllm_serve_allow_unauthenticated: true to serve it open on purpose "
        f"({_VS})"
    ]


def check_serve_host(inv):
    """vllm_serve_host is an IP address or a host name: it is vLLM's --host, and the URL every
    client of the endpoint builds from it (plugins/module_utils/_serve_endpoint.py)."""

    def texts(h):
        value = inv.vars(h).get("vllm_serve_host")
        # Not a string, or empty: check_role_settings names it (a word without spaces).
        if not isinstance(value, str) or value == "" or _serve_endpoint.valid_host(value):
            return []
        return [
            f"vllm_serve_host {to_json(value)} is neither an IP address nor a host name (RFC 1123: letters, "
            "digits, hyphens, dots). Fix: 0.0.0.0 to listen on every address, 127.0.0.1 for loopback only, or "
            f"the head's one address to serve on ({_VS})"
        ]

    return _per_host(inv, texts)


# -- paths ------------------------------------------------------------------------


def normal_path(value):
    """``value`` without repeated or trailing slashes, when it is an absolute path without '.' or '..'."""
    if not isinstance(value, str) or not value.startswith("/"):
        return None
    parts = [part for part in value.split("/") if part]
    if any(part in (".", "..") for part in parts):
        return None
    return "/" + "/".join(parts)


def system_directory(path):
    """Why a normalised path is a system directory, or None."""
    if path in SYSTEM_DIRECTORIES or re.fullmatch(r"/lib[^/]*", path):
        return "a system directory"
    if any(path.startswith(top + "/") for top in VIRTUAL_DIRECTORIES):
        return "inside a kernel or runtime filesystem"
    if re.fullmatch(r"/home/[^/]+", path):
        return "a user's home directory"
    return None


def path_fault(value):  # noqa: PLR0911 - one fault per class, the first that applies
    """What is wrong with a directory setting (words after its value), or None."""
    if not isinstance(value, str):
        return f"is {describe(value)}, not a path"
    if value.strip() == "":
        return "is empty"
    if any(not c.isprintable() and c != " " for c in value):
        return "contains a control or invisible character (a newline, a tab, NUL, a zero-width space)"
    if re.search(r"\s", value):
        return "contains whitespace, which container mounts and unit files would split"
    if not value.startswith("/"):
        return "is relative; it must be absolute, the same on every node"
    norm = normal_path(value)
    if norm is None:
        return "has a '.' or '..' component, so it is not the directory it names"
    why = system_directory(norm)
    if why:
        return f"is {why} ({norm}); teardown removes what the project keeps there"
    return None


def _directories(inv, h):
    """(setting, value, normalised path) of every directory the project owns on host h."""
    hv = inv.vars(h)
    owned = []
    name = inv.ref.get("sparkops_cluster_name")
    if isinstance(name, str) and re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", name):
        owned.append(("the cluster's config directory", f"/etc/sparkops/{name}", f"/etc/sparkops/{name}"))
    for setting in (
        "sparkops_model_path",
        "ray_cluster_state_dir",
        "teardown_state_dir",
        "model_sync_rsyncd_config_dir",
        "model_sync_progress_dir",
    ):
        value = hv.get(setting)
        if isinstance(value, str) and path_fault(value) is None:
            owned.append((setting, value, normal_path(value)))
    return owned


def check_paths(inv):
    """Directories: absolute, plain, no system directory, and no two of the project's overlapping."""
    name = inv.ref.get("sparkops_cluster_name")
    reserved = isinstance(name, str) and name in RESERVED_CLUSTER_NAMES
    p = []
    if reserved:
        p.append(
            f"cluster: sparkops_cluster_name '{name}' is the name of the project's own directory "
            f"{RESERVED_CLUSTER_NAMES[name]}; the cluster's directories would share it. Fix: choose another name "
            "(group_vars/all/cluster.yml)"
        )

    model = inv.ref.get("sparkops_model_path")
    norm = normal_path(model)
    # the root and '.'/'..' are refused with the model path's own checks
    if norm and norm != "/" and system_directory(norm):
        p.append(
            f"cluster: sparkops_model_path '{model}' is {system_directory(norm)} ({norm}); the model stage writes it "
            "and teardown_remove_model deletes it. Fix: set the model's own directory, e.g. "
            "/srv/models/Qwen3.5-122B-A10B-FP8 (group_vars/all/model.yml)"
        )

    def texts(h):
        out = []
        for s in ROLE_SETTINGS:
            value = inv.vars(h).get(s.name)
            if s.kind == "path" and s.name in inv.vars(h) and path_fault(value):
                out.append(
                    f"{s.name} {to_json(value)} {path_fault(value)}. Fix: use a directory of its own, e.g. "
                    f"the default of roles/{s.role} ({s.file})"
                )
        owned = _directories(inv, h)
        for i, (a_name, a_value, a) in enumerate(owned):
            for b_name, b_value, b in owned[i + 1 :]:
                if {a_name, b_name} == {
                    "ray_cluster_state_dir",
                    "teardown_state_dir",
                } or reserved:
                    continue
                if a == b or a.startswith(b + "/") or b.startswith(a + "/"):
                    how = "is" if a == b else ("is inside" if a.startswith(b + "/") else "holds")
                    out.append(
                        f"{a_name} {a_value} {how} {b_name} {b_value}; each is the project's own directory and "
                        "teardown removes each. Fix: give each its own directory, none inside another"
                    )
        return out

    return p + _per_host(inv, texts)


# -- network ----------------------------------------------------------------------


def special_range(net_or_ip):
    """The special-purpose IPv4 range an address or network overlaps, or None."""
    for special, words in SPECIAL_V4:
        if isinstance(net_or_ip, ipaddress.IPv4Network) and net_or_ip.overlaps(special):
            return words
        if isinstance(net_or_ip, ipaddress.IPv4Address) and net_or_ip in special:
            return words
    return None


def _management_address(inv, h):
    """The normalised address Ansible reaches h at, or None when its connection has none."""
    hv = inv.vars(h)
    if hv.get("ansible_connection") not in NETWORK_CONNECTIONS:
        return None
    value = hv.get("ansible_host", h)
    if not isinstance(value, str) or not value.strip():
        return None
    ip = address(value.strip())
    return str(ip) if ip is not None else value.strip().lower().rstrip(".")


def check_network(inv):
    """The RoCE subnet and addresses are plain IPv4 unicast; management addresses are distinct."""
    p = []
    ref = inv.ref
    min_prefix = inv.options["ib_subnet_min_prefix"]
    subnet = ref.get("sparkops_ib_subnet")
    net = network(subnet) if isinstance(subnet, str) else None
    if net is not None:
        fix = f"Fix: use the RoCE link's own private IPv4 network, e.g. sparkops_ib_subnet: 192.168.200.0/24 ({_NET})"
        if net.version == 6:
            p.append(f"cluster: sparkops_ib_subnet '{subnet}' is IPv6; {IPV4_ONLY}. {fix}")
        elif net.prefixlen < min_prefix:
            p.append(
                f"cluster: sparkops_ib_subnet '{subnet}' has a /{net.prefixlen} prefix, shorter than /{min_prefix}; "
                "netplan would make that whole range on-link over the RoCE port, taking routes from every other "
                f"network in it. {fix}"
            )
        elif special_range(net):
            p.append(f"cluster: sparkops_ib_subnet '{subnet}' overlaps {special_range(net)}. {fix}")
    ib_owner = {}
    for h in inv.hosts:
        hv = inv.vars(h)
        ip = unmapped(address(hv.get("ib_address")))
        where = f"hosts.yml or host_vars/{h}.yml"
        if ip is not None:
            ib_owner.setdefault(str(ip), h)
            if ip.version == 6:
                p.append(
                    f"{h}: ib_address '{hv['ib_address']}' is IPv6; {IPV4_ONLY}. Fix: give {h} an IPv4 address on the RoCE link in {where}"
                )
            elif special_range(ip):
                p.append(
                    f"{h}: ib_address '{hv['ib_address']}' is in {special_range(ip)}, which no node can use on a link. Fix: give {h} a unicast address of sparkops_ib_subnet in {where}"
                )
        pfx = hv.get("ib_prefix")
        if is_int(pfx) and 1 <= pfx < min_prefix:
            p.append(
                f"{h}: ib_prefix {pfx} is shorter than /{min_prefix}; the on-link network would cover far more than the RoCE link. Fix: remove ib_prefix to use the prefix of sparkops_ib_subnet ({where})"
            )
        mgmt = hv.get("ansible_host")
        mip = unmapped(address(mgmt.strip())) if isinstance(mgmt, str) else None
        if mip is not None and (
            mip.is_unspecified
            or mip.is_multicast
            or mip.is_loopback
            or mip.is_link_local
            or mip.is_reserved
            or (mip.version == 4 and mip == ipaddress.ip_address("255.255.255.255"))
        ):
            p.append(
                f"{h}: ansible_host '{mgmt}' is not a unicast address of another machine (loopback, link-local, multicast, broadcast, unspecified or reserved). Fix: set {h}'s management address in {where}"
            )
    mgmt_owners = {}
    for h in inv.hosts:
        m = _management_address(inv, h)
        if m is not None:
            mgmt_owners.setdefault(m, []).append(h)
            other = ib_owner.get(m)
            if other is not None and other != h:
                p.append(
                    f"{h}: ansible_host '{m}' is {other}'s ib_address; the management network and the RoCE link must not share an address. Fix: set {h}'s management address in hosts.yml or host_vars/{h}.yml, or correct {other}'s ib_address"
                )
    for m, hosts in mgmt_owners.items():
        if len(hosts) > 1:
            names = ", ".join(sorted(hosts))
            p.append(
                f"{names}: share the management address '{m}' (ansible_host, or the host name); every stage would set up one machine twice. Fix: give each of {names} its own ansible_host in hosts.yml"
            )
    return p


# -- ports and numbers ------------------------------------------------------------

PORT_RANGE = re.compile(r"([0-9]{1,5})-([0-9]{1,5})")


def _port(value):
    n = numeric("int", value)
    return n if n is not None and 1 <= n <= 65535 else None


def _ray_ports(hv):
    """(setting, mapping) of the Ray ports in effect: ray_cluster_ports when set, else roce_network's."""
    own = hv.get("ray_cluster_ports")
    if isinstance(own, dict) and own:
        return "ray_cluster_ports", own
    if own not in (None, {}, "") and not isinstance(own, Vaulted):
        return "ray_cluster_ports", own
    return "roce_network_ray_ports", hv.get("roce_network_ray_ports")


def _listeners(hv):
    """([(label, low, high, is_ssh)], [fault]) of every port the project listens on or connects to."""
    entries, faults, ssh = [], [], {}
    fix = 'Fix: use an integer from 1 to 65535 (a range as "low-high", low first)'
    for name in (
        "vllm_serve_port",
        "model_sync_rsyncd_port",
        "roce_network_ssh_port",
        "cluster_ssh_port",
        "ansible_port",
    ):
        if name not in hv or hv[name] is None or isinstance(hv[name], Vaulted):
            continue
        port = _port(hv[name])
        if port is None:
            faults.append(f"{name} {to_json(hv[name])} is not a port. {fix}")
        elif name.endswith("ssh_port") or name == "ansible_port":
            ssh.setdefault(port, []).append(name)
        else:
            entries.append((f"{name} {port}", port, port, False))
    # one sshd: its port settings may agree, and then count as one listener
    entries += [(f"SSH's port {port} ({', '.join(names)})", port, port, True) for port, names in ssh.items()]
    setting, ports = _ray_ports(hv)
    if ports is None:
        return entries, faults
    if not isinstance(ports, dict):
        faults.append(f"{setting} {to_json(ports)} is not a mapping of Ray's ports by name. {fix}")
        return entries, faults
    for key, value in ports.items():
        label = f"{setting}.{key}"
        port = _port(value)
        match = PORT_RANGE.fullmatch(value) if isinstance(value, str) else None
        if port is not None:
            entries.append((f"{label} {port}", port, port, False))
        elif match and all(1 <= int(x) <= 65535 for x in match.groups()) and int(match[1]) <= int(match[2]):
            entries.append((f"{label} {value}", int(match[1]), int(match[2]), False))
        elif match and all(1 <= int(x) <= 65535 for x in match.groups()):
            faults.append(
                f"{label} '{value}' is a reversed range. Fix: write it low first: '{match[2]}-{match[1]}'"
            )
        else:
            faults.append(f"{label} {to_json(value)} is not a port or a port range. {fix}")
    return entries, faults


def check_ports(inv):
    """Every port an integer 1..65535, ranges ordered, and no two services on one port."""

    def texts(h):
        entries, out = _listeners(inv.vars(h))
        for i, (a, a_lo, a_hi, a_ssh) in enumerate(entries):
            for b, b_lo, b_hi, b_ssh in entries[i + 1 :]:
                if (a_ssh and b_ssh) or a_hi < b_lo or b_hi < a_lo:
                    continue
                out.append(
                    f"{a} and {b} share port {max(a_lo, b_lo)}; Ray's, vLLM's, rsyncd's and SSH's ports must all "
                    "differ. Fix: move one of them (the sample's network.yml, vllm_serve.yml, model_sync.yml)"
                )
        return out

    return _per_host(inv, texts)


def number_fault(kind, value, minimum, nullable):
    """What is wrong with a numeric value (words after the value), or None."""
    if value is None:
        return None if nullable else "is null"
    n = numeric(kind, value)
    if n is None:
        return f"is {describe(value)}, not {'a whole number' if kind == 'int' else 'a number'}"
    if not math.isfinite(n):
        return "is not a finite number"
    if minimum is not None and n < minimum:
        return f"is below {minimum}"
    return None


KIND_WORDS = {
    "int": "a whole number",
    "number": "a finite number",
    "numbers": "a mapping of finite numbers",
    "bool": "true or false",
    "string": "one word",
}


def check_role_settings(inv):
    """The other roles' settings of the table: types, finite, not negative; a firewall chain's sources."""

    def texts(h):
        out = []
        hv = inv.vars(h)
        for s in ROLE_SETTINGS:
            if s.name not in hv or isinstance(hv[s.name], Vaulted):
                continue
            value = hv[s.name]
            fault = None
            if s.kind == "sources":
                # a firewall chain's extra sources: the monitoring stage's preflight says the same
                out += _firewall_chain.sources_problems(value, s.name, s.file)
                continue
            if s.kind in ("int", "number"):
                fault = number_fault(s.kind, value, s.minimum, s.nullable)
            elif s.kind == "numbers":
                if not isinstance(value, dict):
                    fault = f"is {describe(value)}, not a mapping of numbers"
                else:
                    bad = [
                        f"{k}: {to_json(v)}"
                        for k, v in value.items()
                        if number_fault("number", v, s.minimum, False)
                    ]
                    fault = (
                        f"has values that are not finite numbers of at least {s.minimum} ({', '.join(bad)})"
                        if bad
                        else None
                    )
            elif s.kind == "bool" and not isinstance(value, bool):
                fault = (
                    f"is {describe(value)}, not a boolean (write true or false unquoted; on the command line "
                    f"-e '{{\"{s.name}\": true}}')"
                )
            elif s.kind == "string" and (
                not isinstance(value, str) or not value.strip() or re.search(r"\s", value)
            ):
                fault = f"is {describe(value)}, not a word without spaces"
            if fault:
                floor = f" of at least {s.minimum}" if s.minimum is not None else ""
                wanted = KIND_WORDS[s.kind] + floor + (", or null" if s.nullable else "")
                out.append(
                    f"{s.name} {to_json(value)} {fault}. Fix: set {wanted}, or remove it to use the default of "
                    f"roles/{s.role} ({s.file})"
                )
        return out

    return _per_host(inv, texts)


SAFETY_CHECKS = (
    check_secrets,
    check_open_api,
    check_serve_host,
    check_paths,
    check_network,
    check_ports,
    check_role_settings,
)
