# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Re-check the RoCE link of a node against its deployed record: the address, and the GID NCCL will use.

The roce_network stage checks the link when it runs; a reboot, a NetworkManager restart or
another netplan file can change it afterwards (the GID moving 3 -> 4 within 30 minutes:
tonyd2wild/DeepSeek-v4-Flash-Vision-Exp-DSpark-1M-NVFP4-KV-2x-DGX-Spark #38; NVIDIA/nccl
#1333 on a ConnectX-7: "the gid index changed from 3 to 4/8"). So the same check runs again
at every start of the Ray unit (an ``ExecStartPre``) and in ``status``:

- ``ib_interface`` still holds ``ib_address`` with the deployed prefix, and has the MTU;
- with ``NCCL_IB_GID_INDEX`` pinned, that index is still a RoCE v2 GID on every device of
  ``NCCL_IB_HCA`` and, where a device holds ``ib_address``, it is that GID
  (:func:`_nccl_gid.pinned_gid_problems`, the rule preflight applies);
- unpinned, the GID NCCL picks on each device of ``ib_interface`` itself
  (:func:`_nccl_gid.nccl_gids`) is still the IPv4 RoCE v2 GID of ``ib_address``: another
  IPv4 address on the port (a 169.254 link-local one from ``link-local: [ipv4]``) can sit
  at a lower index, and NCCL's walk keeps the first valid IPv4 RoCE v2 GID it meets.
  Twins are not held to it: netplan gives them no address (docs/rdma.md, "Twins").

Shipped to the node as a plain script with :data:`BUNDLE` beside it (the ray_cluster stage
copies them into the layout's ``ib_recheck_dir``); run there it reads the deployed record,
``ip -j addr show`` and ``/sys``, prints one line per problem (host, value found, fix) and
exits 1, so systemd does not start Ray on a link NCCL cannot use. ``--json`` prints the
result as JSON (status reads it). Exit 2: the record has no network section.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

try:
    from ansible_collections.sparkops.vllm.plugins.module_utils import _nccl_gid, _roce
except ImportError:  # run as a plain script, with the BUNDLE files beside it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _nccl_gid  # type: ignore[no-redef]
    import _roce  # type: ignore[no-redef]

BUNDLE = ("_ib_recheck.py", "_roce.py", "_nccl_gid.py")
# Every line it prints starts with this and the host: `journalctl -u <ray unit> | grep` finds them.
PREFIX = "sparkops ib recheck"

FIX_ADDRESS = (
    "Fix: rerun the roce_network stage (`ansible-playbook deploy.yml --tags roce_network,ray_cluster`), "
    "which rewrites its netplan file and applies it; check that no other /etc/netplan file configures "
    '{interface} (docs/runbooks/wrong-node-ip-or-interface.md, "Address drift").'
)
FIX_PINNED = (
    "Fix: leave roce_network_nccl_ib_gid_index unset so NCCL picks the GID per device, and rerun "
    '`ansible-playbook deploy.yml --tags roce_network,ray_cluster` (docs/runbooks/nccl-errors.md, "GID drift").'
)
FIX_CHOICE = (
    "Fix: remove the other IPv4 address from {interface} (`ip -br addr show {interface}`; a `link-local: [ipv4]` "
    "in another /etc/netplan file adds a 169.254 one), then rerun `ansible-playbook deploy.yml --tags "
    'roce_network,ray_cluster` (docs/runbooks/nccl-errors.md, "GID drift").'
)


def _int(value):
    try:
        return int(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


def link_of(links, interface):
    """The ``ip -j addr show`` entry of ``interface``, or None."""
    return next((link for link in links or [] if link.get("ifname") == interface), None)


def _inet(link):
    return [
        (item.get("local"), _int(item.get("prefixlen")))
        for item in (link or {}).get("addr_info") or []
        if item.get("family") == "inet" and item.get("local")
    ]


def address_problems(links, interface, address, *, prefix=None, mtu=None):
    """What differs on ``interface`` from ``address``/``prefix`` and ``mtu`` (each None: not checked)."""
    link = link_of(links, interface)
    fix = FIX_ADDRESS.format(interface=interface)
    if link is None:
        names = ", ".join(sorted(item.get("ifname") or "?" for item in links or [])) or "none"
        return [f"{interface} does not exist (interfaces: {names}). {fix}"]
    held = _inet(link)
    shown = ", ".join(f"{ip}/{length}" for ip, length in held) or "no IPv4 address"
    problems = []
    lengths = [length for ip, length in held if ip == address]
    if not lengths:
        problems.append(f"{interface} holds {shown}, not ib_address {address}. {fix}")
    elif prefix is not None and _int(prefix) not in lengths:
        problems.append(
            f"{interface} holds {address}/{'/'.join(str(x) for x in lengths)}, the deployed prefix is "
            f"/{_int(prefix)}. {fix}"
        )
    if _int(mtu) is not None and _int(link.get("mtu")) != _int(mtu):
        problems.append(f"{interface} has MTU {link.get('mtu')}, the deployed MTU is {_int(mtu)}. {fix}")
    return problems


def gid_problems(found, interface, address, *, hca=None, gid_index=None):
    """Whether the GID NCCL will use carries ``address``; ``found`` is :func:`_roce.roce_devices`' result.

    ``hca`` and ``gid_index`` are the deployed NCCL_IB_HCA and NCCL_IB_GID_INDEX (None: unset).
    """
    if gid_index not in (None, ""):
        return [
            f"NCCL_IB_GID_INDEX {gid_index} no longer holds: {problem}. {FIX_PINNED}"
            for problem in found.get("pinned_gid_problems") or []
        ]
    problems = []
    present = {d["name"] for d in found.get("devices") or []}
    listed = _nccl_gid._names(hca, found.get("devices") or []) if hca else []
    missing = [name for name in listed if name not in present]
    if missing:
        now = found.get("nccl_ib_hca") or "none"
        problems.append(
            f"NCCL_IB_HCA names {', '.join(missing)}, which is no RDMA device of {interface} now (devices: {now}). "
            f"Fix: check `ibdev2netdev` and `lsmod | grep mlx5_ib`, then rerun `ansible-playbook deploy.yml --tags "
            f'roce_network,ray_cluster` (docs/runbooks/nccl-errors.md, "GID drift").'
        )
    primaries = {d["name"] for d in found.get("devices") or [] if not d.get("twin")}
    fix = FIX_CHOICE.format(interface=interface)
    for choice in found.get("nccl_gids") or []:
        if choice["device"] not in primaries:
            continue
        if choice["ipv4_roce_v2"] and choice.get("ip") == address:
            continue
        what = (
            f"{choice.get('type') or 'an empty slot'} {choice.get('ip') or choice.get('gid') or ''}".strip()
        )
        problems.append(
            f"NCCL picks GID {choice['index']} on {choice['device']} port {choice['port']} ({what}), not the "
            f"RoCE v2 GID of ib_address {address}. {fix}"
        )
    return problems


def recheck(network, links, sysfs_root):
    """Every problem of the node's link against the deployed ``network`` section (an empty list: it holds)."""
    interface = network.get("interface")
    address = network.get("address")
    env = network.get("env") or {}
    on_address = address_problems(
        links, interface, address, prefix=network.get("prefix"), mtu=network.get("mtu")
    )
    hca = env.get("NCCL_IB_HCA") or None
    gid_index = env.get("NCCL_IB_GID_INDEX")
    found = _roce.roce_devices(sysfs_root, interface, address, hca=hca, gid_index=gid_index)
    on_gid = gid_problems(found, interface, address, hca=hca, gid_index=gid_index)
    return {
        "interface": interface,
        "address": address,
        "nccl_gid_summary": found.get("nccl_gid_summary"),
        "address_problems": on_address,
        "gid_problems": on_gid,
        "problems": on_address + on_gid,
    }


def _read_links():
    ip = shutil.which("ip", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))
    if ip is None:
        raise OSError("the `ip` command (iproute2) is not installed")
    done = subprocess.run(
        [ip, "-j", "addr", "show"],
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, LC_ALL="C"),
    )
    if done.returncode != 0:
        raise OSError(f"`ip -j addr show` failed: {done.stderr.strip()}")
    return json.loads(done.stdout or "[]")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", required=True, help="the node's deployed.json")
    parser.add_argument("--host", required=True, help="the node's inventory name, for the messages")
    parser.add_argument(
        "--sysfs-root",
        help="where the RDMA devices are read; default: the record's network.sysfs_root "
        "(roce_network_sysfs_root when the node was deployed: the lab's simulated tree), else /sys",
    )
    parser.add_argument("--ip-json", help="a file of `ip -j addr show` output instead of running it")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = parser.parse_args(argv)
    prefix = f"{PREFIX}: {args.host}:"
    try:
        with open(args.record, encoding="utf-8") as handle:
            record = json.load(handle)
        network = ((record.get("sections") or {}).get("network")) or {}
    except (OSError, ValueError) as exc:
        network, error = {}, str(exc)
    else:
        error = "it has no network section"
    if not network.get("interface") or not network.get("address"):
        message = (
            f"{prefix} the deployed record {args.record} cannot be read ({error}). Fix: rerun "
            f"`ansible-playbook deploy.yml --tags roce_network,ray_cluster`, which writes it."
        )
        print(json.dumps({"problems": [message], "error": True}) if args.json else message)
        return 2
    try:
        if args.ip_json:
            with open(args.ip_json, encoding="utf-8") as handle:
                links = json.load(handle)
        else:
            links = _read_links()
    except (OSError, ValueError) as exc:
        message = f"{prefix} the node's addresses cannot be read ({exc}). Fix: install iproute2."
        print(json.dumps({"problems": [message], "error": True}) if args.json else message)
        return 2
    result = recheck(network, links, args.sysfs_root or network.get("sysfs_root") or "/sys")
    for key in ("problems", "address_problems", "gid_problems"):
        result[key] = [f"{prefix} {problem}" for problem in result[key]]
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        for line in result["problems"]:
            print(line, file=sys.stderr)
        if not result["problems"]:
            print(f"{prefix} {result['interface']} holds {result['address']}; {result['nccl_gid_summary']}")
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
