# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Which transport every NCCL rank really uses, read from NCCL's own INFO log.

Run NCCL with ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET`` (one file per process with
``NCCL_DEBUG_FILE=dir/nccl.%h.%p.log``) and feed the lines here. The line formats are
NCCL's, read from its source (NVIDIA/nccl, tags v2.21.5-1, v2.27.7-1, v2.28.9-1 and master
of 2026-06; file and line below are v2.28.9-1's):

- header, ``src/debug.cc:349-363``: ``host:pid:tid [cudaDev] NCCL INFO msg`` and
  ``host:pid:tid [cudaDev] file.cc:line NCCL WARN msg``; the version line
  ``NCCL version 2.28.9+cuda13.0`` has no header (``NCCL_LOG_VERSION``, ``init.cc:603``).
  Ray puts ``(RayWorkerWrapper pid=…, ip=…)`` in front; :mod:`_log_lines` peels that.
- ``Using network IB|Socket|IBext_v10`` (``init.cc:428``): the net plugin a communicator
  got. ``IBext_v*`` is the external RDMA plugin of NVIDIA's images (field log of two DGX
  Sparks, github.com/mark-ramsey-ri/vllm-dgx-spark/issues/1: ``via NET/IBext_v10/1``).
- ``NET/IB : Using [0]mlx5_0:1/RoCE [1]…; OOB eth0:10.0.0.1<0>`` and
  ``NET/IB : No device found.`` (``transport/net_ib.cc:826-839``); ``NCCL_IB_HCA set to X``
  (``net_ib.cc:702``, printed under NET); ``NET/IB : Unable to open device X``
  (``net_ib.cc:715``); ``Failed to open libibverbs.so[.1]`` (``misc/ibvsymbols.cc:81``).
- ``NET/Socket : Using [0]eth0:10.0.0.1<0>`` (``transport/net_socket.cc:76``).
- channel set-up, one line per channel and peer:
  ``Channel 02/0 : 0[0] -> 1[1] via P2P/CUMEM/read`` (``transport/p2p.cc:386-406``:
  ``P2P/direct pointer``, ``P2P/CUMEM``, ``P2P/IPC``, ``P2P/indirect/…``),
  ``Channel 00 : 0[0] -> 1[1] via SHM/direct/direct`` (``transport/shm.cc:128``),
  ``Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA`` and
  ``… 1[1] -> 0[0] [receive] via NET/Socket/0`` (``transport/net.cc:313-359``). The numbers
  are ``rank[nvmlDev]`` since 2.19; up to 2.18 NCCL printed ``rank[busId]`` in hex
  (v2.18.1-1 ``p2p.cc:366``), which is accepted too.
  ``[receive]`` lines name the peer first, so the local rank is the right-hand one.
- ``NET/IB: NCCL Dev 0 IbDev 1 Port 1 qpn 123 mtu 5 GID 3 (…/…)`` (``net_ib.cc:1490``,
  ``net_ib/connect.cc:968`` on master): the GID index a RoCE queue pair really used.
- ``comm 0x… rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0`` (``init.cc:1170``)
  and ``… rank 0 nranks 2 cudaDev 0 … - Init COMPLETE`` (``init.cc`` on master: 1945).
- ``Call to ibv_reg_mr failed with error Cannot allocate memory`` (``misc/ibvwrap.cc:40``),
  ``Call to ibv_modify_qp failed with …`` (``misc/ibvwrap.cc:307``; field report
  github.com/NVIDIA/nccl/issues/799, and nccl-tests issue #185 "Network is unreachable").

What "NET/IB : No device found." means is the maintainer's word in
github.com/NVIDIA/nccl/issues/958: the OS shows NCCL no usable RDMA NIC.

Every rank's verdict is one of ``rdma``, ``rdma_unexpected_devices``, ``intra_node``,
``socket_fallback`` and ``unknown``; :func:`classify` gives them per rank and overall,
with findings (severity, cause, fix) for the operator.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

try:
    from ansible_collections.sparkops.vllm.plugins.module_utils._log_lines import iter_log_lines
except ImportError:  # run as a plain script beside _log_lines.py (inside an image, say)
    from _log_lines import iter_log_lines  # type: ignore[no-redef]

__all__ = [
    "VERDICTS",
    "ProcessLog",
    "classify",
    "classify_logs",
    "parse_log",
    "serve_transport",
]

VERDICTS = ("rdma", "rdma_unexpected_devices", "intra_node", "socket_fallback", "unknown")

# The verdict that speaks for the whole job is the worst of its ranks'.
_WORST_FIRST = ("socket_fallback", "rdma_unexpected_devices", "unknown", "rdma", "intra_node")

# "host:pid:tid [dev] NCCL INFO msg" or "host:pid:tid [dev] file.cc:123 NCCL WARN msg",
# searched anywhere so outer prefixes (Ray's, docker's) need not be known here.
_HEADER_RE = re.compile(
    # "<cluster_name>" stands for a host a reporter redacted (github.com/NVIDIA/nccl/issues/952).
    r"(?P<host><?[A-Za-z0-9][\w.-]*>?):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
    r"(?:(?P<where>\S+:\d+) )?NCCL (?P<level>INFO|WARN) ?(?P<msg>.*)$"
)
_VERSION_RE = re.compile(
    r"NCCL version (?P<version>\d+\.\d+\.\d+)(?P<suffix>[^+\s]*)(?:\+cuda(?P<cuda>[\d.]+))?"
)
_USING_NETWORK_RE = re.compile(r"^Using network (?P<name>\S+)")
_IB_USING_RE = re.compile(r"^NET/IB ?: ?Using(?P<devs>.*?)(?:;\s*OOB (?P<oob>\S+))?\s*$")
_IB_DEV_RE = re.compile(
    r"\[(?P<index>\d+)\](?P<name>[^:\s\[\]]+):(?P<port>\d+)/(?P<link>IB|RoCE|UNSPECIFIED)"
)
_SOCKET_USING_RE = re.compile(r"^NET/Socket ?: ?Using(?P<ifs>.*)$")
_SOCKET_IF_RE = re.compile(r"\[(?P<index>\d+)\](?P<name>[^:\s\[\]]+):(?P<addr>\S+)")
_CHANNEL_RE = re.compile(
    r"^Channel (?P<channel>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)\[(?P<src_dev>[0-9a-fA-Fx]+)\] -> "
    r"(?P<dst>\d+)\[(?P<dst_dev>[0-9a-fA-Fx]+)\](?: \[(?P<dir>send|receive)\])? via (?P<via>\S.*?)\s*$"
)
_NET_VIA_RE = re.compile(r"^NET/(?P<net>[^/]+)/(?P<dev>\d+)(?:\((?P<proxy>\d+)\))?(?P<rest>.*)$")
_COMM_RE = re.compile(
    r"\bcomm (?P<comm>(?:0x)?[0-9a-fA-F]+) rank (?P<rank>\d+) n[Rr]anks (?P<nranks>\d+)"
    r"(?: nNodes (?P<nnodes>\d+))?"
)
_GID_RE = re.compile(
    r"IbDev (?P<ibdev>\d+) Port (?P<port>\d+) (?:qpn|qp_num) \d+ mtu \d+ GID (?P<gid>-?\d+) \("
)
_HCA_ENV_RE = re.compile(r"^NCCL_IB_HCA set (?:by environment )?to (?P<value>\S+)")
# "NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'" (graph/topo.cc:1357); the field log
# of two Sparks has "(DMABUF) enabled" and names the HCA behind each net device index. The
# same line exists for sockets ("NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'",
# seen on the H200), which names no RDMA device.
_GDR_RE = re.compile(
    r"^NET/IB\S* ?: ?GPU Direct RDMA (?:\(DMABUF\) )?\w+ for HCA (?P<index>\d+) '(?P<name>[^'\s]+)"
)
_OPEN_FAILED_RE = re.compile(r"^NET/IB ?: ?Unable to open device (?P<name>\S+)")
_IBV_CALL_RE = re.compile(r"^Call to (?P<call>ibv_\w+)(?:\(\))? failed with (?:error )?(?P<error>.*)$")


@dataclass
class ProcessLog:
    """What one NCCL process (one ``host:pid``) said about its transports."""

    host: str
    pid: int
    source: str | None = None
    cuda_dev: int | None = None
    version: str | None = None
    ranks: dict[str, tuple[int, int, int | None]] = field(default_factory=dict)
    networks: list[str] = field(default_factory=list)
    ib_devices: dict[int, dict] = field(default_factory=dict)
    ib_oob: str | None = None
    ib_none: bool = False
    ib_hca_env: str | None = None
    ib_open_failed: list[str] = field(default_factory=list)
    libibverbs_missing: bool = False
    ib_plugin_failed: bool = False
    socket_ifs: dict[int, dict] = field(default_factory=dict)
    channels: list[dict] = field(default_factory=list)
    gids: list[dict] = field(default_factory=list)
    ibv_errors: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.host}:{self.pid}"

    @property
    def rank(self) -> int | None:
        """The rank in this process's largest communicator (vLLM opens several)."""
        if self.ranks:
            return max(self.ranks.values(), key=lambda item: (item[1], -item[0]))[0]
        # No comm line (an excerpt, say): the channel lines name the local rank too.
        local = [chan["rank"] for chan in self.channels]
        return max(set(local), key=local.count) if local else None


_VIA_PREFIXES = (("P2P", "p2p"), ("SHM", "shm"), ("NVLS", "nvls"), ("CollNet", "collnet"))


def _via_kind(via: str) -> tuple[str, dict]:
    """Sort one channel's ``via`` text into a transport kind and its details."""
    match = _NET_VIA_RE.match(via)
    if not match:
        return next((kind for prefix, kind in _VIA_PREFIXES if via.startswith(prefix)), "other"), {}
    net = match.group("net")
    detail = {"net": net, "net_dev": int(match.group("dev")), "gdr": "/GDRDMA" in match.group("rest")}
    kind = "net_ib" if net.startswith("IB") else ("net_socket" if net == "Socket" else "net_other")
    return kind, detail


_INTRA_KINDS = {"p2p", "shm", "nvls"}


def parse_log(lines: Iterable[str], source: str | None = None) -> list[ProcessLog]:
    """Parse NCCL log lines (one file or many interleaved) into one record per process.

    ``source`` names the file the lines came from; a version line, which carries no
    header, belongs to the process whose lines surround it in that file.
    """
    processes: dict[tuple[str, int], ProcessLog] = {}
    pending_version: str | None = None
    last: ProcessLog | None = None
    for line in iter_log_lines(lines):
        version = _VERSION_RE.search(line.raw)
        header = _HEADER_RE.search(line.raw)
        if version and not header:
            pending_version = version.group("version") + version.group("suffix")
            if (
                last is not None
                and last.version is None
                and line.source is not None
                and line.source == last.source
            ):
                last.version = pending_version
            continue
        if not header:
            continue
        key = (header.group("host"), int(header.group("pid")))
        proc = processes.get(key)
        if proc is None:
            proc = processes[key] = ProcessLog(host=key[0], pid=key[1], source=source or line.source)
        last = proc
        if proc.version is None and pending_version is not None:
            proc.version = pending_version
        if proc.cuda_dev is None:
            proc.cuda_dev = int(header.group("dev"))
        msg = header.group("msg").strip()
        if version and proc.version is None:
            # Written to NCCL_DEBUG_FILE, the version line does carry the header (seen with
            # NCCL 2.28.9 on the project's H200: "vm:637:637 [0] NCCL INFO NCCL version …").
            proc.version = version.group("version") + version.group("suffix")
        if header.group("level") == "WARN":
            proc.warnings.append(msg)
            _parse_failure(proc, msg)
            continue
        _parse_info(proc, msg)
    return list(processes.values())


def _parse_failure(proc: ProcessLog, msg: str) -> None:
    match = _IBV_CALL_RE.match(msg)
    if match:
        proc.ibv_errors.append({"call": match.group("call"), "error": match.group("error")})
        return
    match = _OPEN_FAILED_RE.match(msg)
    if match:
        proc.ib_open_failed.append(match.group("name"))


def _parse_channel(proc: ProcessLog, msg: str) -> None:
    match = _CHANNEL_RE.match(msg)
    if not match:
        return
    direction = match.group("dir")
    local, peer = ("dst", "src") if direction == "receive" else ("src", "dst")
    kind, detail = _via_kind(match.group("via"))
    proc.channels.append(
        {
            "channel": int(match.group("channel")),
            "rank": int(match.group(local)),
            "peer": int(match.group(peer)),
            "direction": direction or "send",
            "via": match.group("via"),
            "kind": kind,
            **detail,
        }
    )


def _parse_comm(proc: ProcessLog, match: re.Match) -> None:
    known = proc.ranks.get(match.group("comm"), (0, 0, None))[2]
    nnodes = match.group("nnodes")
    proc.ranks[match.group("comm")] = (
        int(match.group("rank")),
        int(match.group("nranks")),
        int(nnodes) if nnodes is not None else known,
    )


def _parse_info(proc: ProcessLog, msg: str) -> None:
    if msg.startswith("Channel "):
        _parse_channel(proc, msg)
    elif msg.startswith("NET/IB"):
        _parse_net_ib(proc, msg)
    elif msg.startswith("Failed to open libibverbs"):
        proc.libibverbs_missing = True
    elif msg.startswith("Failed to initialize NET plugin IB"):
        proc.ib_plugin_failed = True
    elif match := _USING_NETWORK_RE.match(msg):
        if match.group("name") not in proc.networks:
            proc.networks.append(match.group("name"))
    elif match := _SOCKET_USING_RE.match(msg):
        for found in _SOCKET_IF_RE.finditer(match.group("ifs")):
            proc.socket_ifs[int(found.group("index"))] = {
                "name": found.group("name"),
                "address": found.group("addr"),
            }
    elif match := _COMM_RE.search(msg):
        _parse_comm(proc, match)
    elif match := _HCA_ENV_RE.match(msg):
        proc.ib_hca_env = match.group("value")
    elif match := _IBV_CALL_RE.match(msg):  # ibv_modify_qp retries are INFO before the final WARN
        proc.ibv_errors.append({"call": match.group("call"), "error": match.group("error")})
    elif match := _GDR_RE.match(msg):
        proc.ib_devices.setdefault(
            int(match.group("index")), {"name": match.group("name"), "port": None, "link": None}
        )


def _parse_net_ib(proc: ProcessLog, msg: str) -> None:
    if re.match(r"NET/IB ?: ?No device found", msg):
        proc.ib_none = True
        return
    match = _IB_USING_RE.match(msg)
    if match:
        for found in _IB_DEV_RE.finditer(match.group("devs")):
            proc.ib_devices[int(found.group("index"))] = {
                "name": found.group("name"),
                "port": int(found.group("port")),
                "link": found.group("link"),
            }
        proc.ib_oob = match.group("oob")
        return
    match = _GID_RE.search(msg)
    if match:
        device = proc.ib_devices.get(int(match.group("ibdev")), {}).get("name")
        entry = {"device": device, "port": int(match.group("port")), "gid_index": int(match.group("gid"))}
        if entry not in proc.gids:
            proc.gids.append(entry)
        return
    match = _OPEN_FAILED_RE.match(msg)
    if match:
        proc.ib_open_failed.append(match.group("name"))
        return
    match = _GDR_RE.match(msg)
    if match:
        proc.ib_devices.setdefault(
            int(match.group("index")), {"name": match.group("name"), "port": None, "link": None}
        )


def _devices_used(proc: ProcessLog) -> list[str]:
    names = []
    for chan in proc.channels:
        if chan["kind"] != "net_ib":
            continue
        name = proc.ib_devices.get(chan["net_dev"], {}).get("name", f"net device {chan['net_dev']}")
        if name not in names:
            names.append(name)
    return names


def _memlock_errors(proc: ProcessLog) -> list[dict]:
    return [
        e for e in proc.ibv_errors if e["call"] in ("ibv_reg_mr", "ibv_create_cq") and "memory" in e["error"]
    ]


def _socket_cause(proc: ProcessLog) -> tuple[str, str]:
    """Why NCCL of this process had no RDMA device, from what it logged; and the fix.

    The first piece of evidence found, in this order, names the cause.
    """
    memlock = _memlock_errors(proc)
    modify = [e for e in proc.ibv_errors if e["call"] == "ibv_modify_qp"]
    checks = (
        (
            proc.libibverbs_missing,
            "the image has no libibverbs (NCCL logged 'Failed to open libibverbs.so[.1]')",
            "use an image with rdma-core's libibverbs1 and libmlx5 (NVIDIA's vLLM images carry them)",
        ),
        (
            proc.ib_open_failed,
            f"NCCL could not open RDMA device {', '.join(proc.ib_open_failed)}: the container has no "
            "/dev/infiniband (uverbs) nodes",
            "start the container with --device=/dev/infiniband (and --ulimit memlock=-1)",
        ),
        (
            memlock,
            f"{memlock[0]['call']} failed with '{memlock[0]['error']}': the locked-memory limit is too low"
            if memlock
            else "",
            "raise the memlock limit: docker run --ulimit memlock=-1:-1, or LimitMEMLOCK=infinity in the unit",
        ),
        (
            modify,
            f"ibv_modify_qp failed with '{modify[0]['error']}': the GID index has no usable RoCE v2 address "
            "on one of the listed devices"
            if modify
            else "",
            "leave NCCL_IB_GID_INDEX unset so NCCL picks a GID per device, or give every device in "
            "NCCL_IB_HCA an IPv4 address on the RoCE link",
        ),
        (
            proc.ib_none and proc.ib_hca_env,
            # NCCL prints "NCCL_IB_HCA set to" before it looks for devices (net_ib.cc:702 in
            # v2.28.9-1), so the log cannot tell a wrong list from a container without devices.
            f"NCCL_IB_HCA={proc.ib_hca_env} matches no RDMA device NCCL can use ('NET/IB : No device found.'): "
            "the names match no active port, or the container sees no /dev/infiniband uverbs nodes",
            "check that NCCL_IB_HCA names the cabled port's devices (ibdev2netdev, /sys/class/infiniband) and "
            "that the containers get --device=/dev/infiniband (ray_cluster_rdma_devices)",
        ),
        (
            proc.ib_none,
            "NCCL found no RDMA device ('NET/IB : No device found.'): the container sees no "
            "/dev/infiniband or the host has no RDMA driver loaded",
            "check ibv_devinfo on the host, then start the container with --device=/dev/infiniband "
            "and --ulimit memlock=-1",
        ),
        (
            proc.ib_devices,
            "RDMA devices were found but NCCL chose sockets: NCCL_NET=Socket or NCCL_IB_DISABLE=1 is set",
            "unset NCCL_NET and NCCL_IB_DISABLE in the serve environment",
        ),
    )
    for evidence, cause, fix in checks:
        if evidence:
            return cause, fix
    return (
        "the log shows no NET/IB initialisation (IB disabled, or NCCL_DEBUG_SUBSYS lacks NET)",
        "unset NCCL_IB_DISABLE/NCCL_NET and log with NCCL_DEBUG_SUBSYS=INIT,NET to see why",
    )


def _process_result(proc: ProcessLog, expected: list[str] | None) -> tuple[dict, list[dict]]:
    kinds = sorted({chan["kind"] for chan in proc.channels})
    used = _devices_used(proc)
    findings: list[dict] = []
    where = f"rank {proc.rank} ({proc.key})" if proc.rank is not None else proc.key
    if "net_socket" in kinds:
        verdict = "socket_fallback"
        ifaces = sorted(
            {
                proc.socket_ifs.get(c["net_dev"], {}).get("name", f"net device {c['net_dev']}")
                for c in proc.channels
                if c["kind"] == "net_socket"
            }
        )
        cause, fix = _socket_cause(proc)
        findings.append(
            {
                "severity": "error",
                "code": "nccl_socket_fallback",
                "rank": proc.rank,
                "process": proc.key,
                "message": f"{where} sends over NET/Socket (interface {', '.join(ifaces)}), not RDMA",
                "cause": cause,
                "fix": fix,
            }
        )
    elif "net_ib" in kinds:
        verdict = "rdma"
        if expected and not set(used) <= set(expected):
            verdict = "rdma_unexpected_devices"
            findings.append(
                {
                    "severity": "error",
                    "code": "nccl_ib_unexpected_devices",
                    "rank": proc.rank,
                    "process": proc.key,
                    "message": f"{where} uses RDMA devices {', '.join(used)}, expected {', '.join(expected)}",
                    "cause": "NCCL_IB_HCA lists other devices, or the node is cabled on the other port",
                    "fix": "set NCCL_IB_HCA to the devices of the cabled port on every node",
                }
            )
    elif kinds and set(kinds) <= _INTRA_KINDS:
        verdict = "intra_node"
    else:
        verdict = "unknown"
    if verdict in ("intra_node", "unknown") and (
        proc.ib_none or proc.libibverbs_missing or proc.ib_open_failed
    ):
        cause, fix = _socket_cause(proc)
        findings.append(
            {
                "severity": "warning",
                "code": "nccl_no_rdma_device",
                "rank": proc.rank,
                "process": proc.key,
                "message": f"{where}: NCCL has no RDMA device, so traffic between nodes would use "
                f"{'/'.join(proc.networks) or 'sockets'}",
                "cause": cause,
                "fix": fix,
            }
        )
    if proc.ibv_errors and verdict != "socket_fallback":
        cause, fix = _socket_cause(proc)
        failed = proc.ibv_errors[-1]
        findings.append(
            {
                "severity": "error",
                "code": "nccl_ibv_call_failed",
                "rank": proc.rank,
                "process": proc.key,
                "message": f"{where}: {failed['call']} failed with {failed['error']}",
                "cause": cause,
                "fix": fix,
            }
        )
    result = {
        "process": proc.key,
        "host": proc.host,
        "pid": proc.pid,
        "rank": proc.rank,
        "nranks": max((item[1] for item in proc.ranks.values()), default=None),
        "nnodes": max((item[2] for item in proc.ranks.values() if item[2] is not None), default=None),
        "cuda_dev": proc.cuda_dev,
        "nccl_version": proc.version,
        "verdict": verdict,
        "network": proc.networks[-1] if proc.networks else None,
        "transports": kinds,
        "vias": sorted({chan["via"] for chan in proc.channels}),
        "channels": len(proc.channels),
        "ib_devices": [
            "/".join(part for part in (dev["name"], dev["link"]) if part)
            for _, dev in sorted(proc.ib_devices.items())
        ],
        "ib_devices_used": used,
        "ib_no_device": proc.ib_none,
        "ib_plugin_failed": proc.ib_plugin_failed,
        "ib_hca_env": proc.ib_hca_env,
        "gid_indices": proc.gids,
        "socket_interfaces": [f"{v['name']}:{v['address']}" for _, v in sorted(proc.socket_ifs.items())],
        "warnings": proc.warnings,
    }
    if verdict == "unknown":
        if proc.channels:
            result["reason"] = f"channels use transports this check does not know: {', '.join(kinds)}"
        elif result["nranks"] == 1:
            result["reason"] = "a communicator of one rank: NCCL connects no peer, so no transport is used"
        else:
            result["reason"] = "no channel was set up in this log: it ends before the first collective"
    return result, findings


def classify(
    processes: Iterable[ProcessLog],
    expected_devices: Iterable[str] | None = None,
    expected_ranks: int | None = None,
) -> dict:
    """Verdict per rank and overall. ``expected_devices``: the HCAs RDMA must run on."""
    expected = [name for name in expected_devices or () if name]
    ranks = []
    findings: list[dict] = []
    for proc in sorted(processes, key=lambda p: (p.rank if p.rank is not None else 1 << 30, p.key)):
        result, found = _process_result(proc, expected or None)
        ranks.append(result)
        findings.extend(found)
    verdicts = {r["verdict"] for r in ranks}
    overall = next((v for v in _WORST_FIRST if v in verdicts), "unknown")
    if expected_ranks is not None and len(ranks) < expected_ranks:
        findings.append(
            {
                "severity": "warning",
                "code": "nccl_ranks_missing",
                "message": f"NCCL logs of {len(ranks)} of {expected_ranks} ranks were found",
                "cause": "a rank's NCCL_DEBUG_FILE was not written or not collected",
                "fix": "check that every rank runs with NCCL_DEBUG=INFO and NCCL_DEBUG_FILE set",
            }
        )
        if overall != "socket_fallback":
            overall = "unknown"
    if not ranks:
        overall = "unknown"
    severity = (
        "error"
        if overall in ("socket_fallback", "rdma_unexpected_devices")
        else ("warning" if overall == "unknown" else "ok")
    )
    versions = sorted({r["nccl_version"] for r in ranks if r["nccl_version"]})
    return {
        "verdict": overall,
        "severity": severity,
        "nccl_versions": versions,
        "ranks": ranks,
        "findings": findings,
    }


def classify_logs(
    logs: Mapping[str, str] | Iterable[str],
    expected_devices: Iterable[str] | None = None,
    expected_ranks: int | None = None,
) -> dict:
    """:func:`classify` over log texts: a mapping of file name to text, or texts."""
    items = logs.items() if isinstance(logs, Mapping) else ((None, text) for text in logs)
    processes: list[ProcessLog] = []
    for name, text in items:
        processes.extend(parse_log(text.splitlines(), source=name))
    return classify(processes, expected_devices, expected_ranks)


def serve_transport(
    text: str,
    expected_devices: Iterable[str] | None,
    expected_ranks: int,
    rdma_expected: bool | None,
    started: bool = True,
) -> dict:
    """The readiness verdict of a serve start from its log: :func:`classify_logs` plus the decision.

    ``rdma_expected``: every node has RDMA devices in its NCCL_IB_HCA and the ranks span
    nodes, so anything but ``rdma`` fails readiness. Otherwise (one node, or a cluster the
    roce_network stage found no RDMA device on) the verdict is reported, not enforced.
    None (a run that did not detect the network, restart.yml): taken from the log, where
    the deploy's NCCL_IB_HCA is what every rank logged (``NCCL_IB_HCA set to``) and the
    ranks span nodes when a communicator says ``nNodes`` above 1.
    ``started``: the run started serve, so its log must hold NCCL's lines; a serve that has
    run since an earlier start may have had them rotated out of the journal, which is then
    reported, not failed. Adds ``ok``, ``summary`` (one line for the deploy's summary) and
    ``problems`` (one line per finding, with its cause and fix).
    """
    result = classify_logs([text], expected_devices, expected_ranks)
    ranks = result["ranks"]
    if rdma_expected is None:
        rdma_expected = (
            bool(ranks) and all(r["ib_hca_env"] for r in ranks) and max(r["nnodes"] or 1 for r in ranks) > 1
        )
    per_rank = "; ".join(
        f"rank {r['rank']} {r['host']}: "
        + (
            f"NET/IB on {','.join(r['ib_devices_used'])}"
            if r["verdict"] in ("rdma", "rdma_unexpected_devices")
            else ("NET/Socket" if r["verdict"] == "socket_fallback" else r["verdict"].replace("_", " "))
        )
        for r in ranks
    )
    rotated = not ranks and not started
    result["ok"] = result["verdict"] == "rdma" or not rdma_expected or rotated
    result["enforced"] = rdma_expected and not rotated
    result["summary"] = (
        f"NCCL transport: {result['verdict']} ({per_rank or 'no NCCL lines in the log'})"
        + ("" if rdma_expected else "; not enforced: the ranks do not span nodes with RDMA devices")
        + (
            "; not enforced: serve was not started by this run and its start's lines are no longer in the journal"
            if rotated and rdma_expected
            else ""
        )
    )
    result["problems"] = [
        f"[{f['severity']}] {f['message']}: {f['cause']}. Fix: {f['fix']}" for f in result["findings"]
    ]
    if rotated:
        result["problems"] = []  # nothing to read, and the summary says why
    if not ranks and result["enforced"]:
        result["problems"].append(
            "[error] no NCCL line in serve's log: NCCL did not log its init (NCCL_DEBUG is not INFO, or "
            "NCCL_DEBUG_SUBSYS lacks INIT and NET). Fix: keep ray_cluster_nccl_transport_log true"
        )
    return result
