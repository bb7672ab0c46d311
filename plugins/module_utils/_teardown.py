# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""What teardown may remove: a model only when it is the project's, and the firewall rules it added.

The model (``teardown_remove_model``) is removed only when ``sparkops_model_path`` is a real
directory (not a link: a link is never followed out of the model directory), deeper than a
system directory, and model_sync's manifest for it is a regular file beside it. A Hugging Face
snapshot (``.../models--<org>--<name>/snapshots/<rev>``) takes its whole cache folder, found by
the path's own text, never through a link. Anything else is kept, with the reason and the
command that removes it.

The firewall rules ``roce_network_firewall_open`` added carry its comment; they are found in
``iptables -S INPUT``, ``nft -a list ruleset`` and ``ufw status numbered`` output by it.
"""

from __future__ import annotations

import re
import shlex
import itertools

from ansible_collections.sparkops.vllm.plugins.module_utils._inventory_contract_safety import system_directory
from ansible_collections.sparkops.vllm.plugins.module_utils._layout import manifest_beside

_HF_SNAPSHOT = re.compile(r"^(?P<cache>.*/models--[^/]+)/snapshots/[^/]+/?$")


def _is_system(path):
    """A system directory by the inventory contract's one rule (or any top-level directory)."""
    normal = "/" + "/".join(part for part in str(path).split("/") if part)
    return normal.count("/") < 2 or system_directory(normal) is not None


def model_removal(path, path_stat, manifest, manifest_stat):
    """``{remove: [paths], kept: reason or None}`` for the model at ``path``; stats as ansible.builtin.stat gives them."""
    path_stat, manifest_stat = path_stat or {}, manifest_stat or {}
    path = str(path or "")
    if not path_stat.get("exists"):
        return {"remove": [], "kept": None}
    remove_by_hand = f"remove it yourself (`rm -r -- {shlex.quote(path)}`) if it is not needed"
    if not path.startswith("/") or _is_system(path):
        return {"remove": [], "kept": f"{path} is a system directory, never a model's own: kept"}
    if path_stat.get("islnk"):
        target = path_stat.get("lnk_source") or "its target"
        return {
            "remove": [],
            "kept": f"{path} is a link to {target}; teardown never follows a link out of the model directory: "
            f"kept. Remove the link and {target} yourself if they are not needed",
        }
    if not path_stat.get("isdir"):
        return {"remove": [], "kept": f"{path} is not a directory: kept; {remove_by_hand}"}
    if not (manifest_stat.get("exists") and manifest_stat.get("isreg") and not manifest_stat.get("islnk")):
        return {
            "remove": [],
            "kept": f"{path} has no sparkops manifest ({manifest}), so the project did not copy it: kept; "
            f"{remove_by_hand}",
        }
    snapshot = _HF_SNAPSHOT.match(path)
    folder = snapshot.group("cache") if snapshot and not _is_system(snapshot.group("cache")) else path
    return {"remove": sorted({folder, path, str(manifest)}), "kept": None}


def iptables_rules(lines, comment):
    """The ``iptables -D`` argv (after ``iptables -w 10``) of each ``-A`` rule that carries ``comment``."""
    found = []
    for line in lines or []:
        if not line.startswith("-A "):
            continue
        words = shlex.split(line)
        if any(a == "--comment" and b == comment for a, b in itertools.pairwise(words)):
            found.append(["-D", *words[1:]])
    return found


_NFT_TABLE = re.compile(r"^\s*table\s+(?P<family>\S+)\s+(?P<table>\S+)\s*\{")
_NFT_CHAIN = re.compile(r"^\s*chain\s+(?P<chain>\S+)\s*\{")
_NFT_HANDLE = re.compile(r"#\s*handle\s+(?P<handle>\d+)\s*$")


def nft_rules(text, comment):
    """``[family, table, chain, handle]`` of each nftables rule whose comment is ``comment`` (``nft -a list ruleset``)."""
    found, family, table, chain = [], None, None, None
    needle = f'comment "{comment}"'
    for line in (text or "").splitlines():
        match = _NFT_TABLE.match(line)
        if match:
            family, table, chain = match.group("family"), match.group("table"), None
            continue
        match = _NFT_CHAIN.match(line)
        if match:
            chain = match.group("chain")
            continue
        handle = _NFT_HANDLE.search(line)
        if needle in line and handle and family and table and chain:
            found.append([family, table, chain, handle.group("handle")])
    return found


_UFW_RULE = re.compile(r"^\[\s*(?P<number>\d+)\]\s.*#\s*(?P<comment>.*?)\s*$")


def ufw_rules(text, comment):
    """The numbers of ufw's rules commented ``comment``, highest first (so deleting one keeps the others')."""
    numbers = []
    for line in (text or "").splitlines():
        match = _UFW_RULE.match(line.strip())
        if match and match.group("comment") == comment:
            numbers.append(int(match.group("number")))
    return sorted(numbers, reverse=True)


def kept_model_files(paths):
    """Each model directory an upgrade keeps (``upgrade_images.kept_models``) and model_sync's manifest beside it."""
    return [item for path in paths or [] for item in (str(path), manifest_beside(str(path)))]


def kept_model_removal(paths, stats):
    """``{remove, kept: [reasons]}`` for the kept model directories; ``stats`` in ``kept_model_files`` order.

    Each directory by ``model_removal``'s rule (a real directory with its manifest beside it, never
    a link or a system directory).
    """
    paths = [str(path) for path in paths or []]
    stats = list(stats or [])
    remove, kept = [], []
    for index, path in enumerate(paths):
        path_stat = stats[2 * index] if 2 * index < len(stats) else {}
        manifest_stat = stats[2 * index + 1] if 2 * index + 1 < len(stats) else {}
        decision = model_removal(path, path_stat, manifest_beside(path), manifest_stat)
        remove.extend(item for item in decision["remove"] if item not in remove)
        if decision["kept"]:
            kept.append(decision["kept"])
    return {"remove": remove, "kept": kept}
