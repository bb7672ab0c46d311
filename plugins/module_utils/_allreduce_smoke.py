# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""All-reduce smoke test through ``torch.distributed``: correct sum, bandwidth, transport.

Shipped as a plain script that runs inside the deployed image's container, with
``_nccl_transport.py`` and ``_log_lines.py`` copied beside it (:data:`BUNDLE` names the
three; they import each other as siblings when they are not in the collection). Run it:

- one host, N local processes (the script spawns them)::

      python3 _allreduce_smoke.py --backend nccl --nproc 2 --log-dir /tmp/smoke

- one process per node under ``torchrun`` (``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` set)::

      torchrun --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-addr 10.0.0.1 \\
          --master-port 29555 _allreduce_smoke.py --backend gloo --ifname enp1s0f1np1

``--backend nccl`` puts one buffer per rank on its GPU and runs NCCL with
``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET`` and ``NCCL_DEBUG_FILE`` per rank in
``--log-dir``; rank 0 gathers every rank's log and classifies it with
:func:`_nccl_transport.classify_logs`. ``--backend gloo`` all-reduces CPU tensors over
TCP, bound to ``--ifname`` (``GLOO_SOCKET_IFNAME``) and reports that interface's address.
``--backend tcp`` needs no torch (the lab's image has none: the torch wheel
the development machine's pip index offers is 555 MB without its dependencies): a reduce-and-broadcast over plain TCP sockets
between the ranks, every socket bound to ``--bind-address`` (the node's ib address), the
sums in Python; it reports every socket's two ends (``sockets``) so a caller can prove
the traffic ran between the ib addresses. One process per node, with ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` set as under torchrun.

Rank 0 prints one JSON object (and writes it to ``--json-out``): backend, world size,
size, time per all-reduce, ``algbw_gbps`` and ``busbw_gbps`` as nccl-tests defines them
(NVIDIA/nccl-tests doc/PERFORMANCE.md: ``algbw = S/t``; for all-reduce
``busbw = algbw * 2(n-1)/n``; GB/s are 1e9 bytes/s), whether every element held the
right sum, and with NCCL the ``transport`` classification. The exit status is 0 when
the sum was right, 1 when it was not, 2 for bad arguments.

The buffer is capped (:data:`MAX_BYTES`): on a DGX Spark GPU memory is the host's unified
memory, which a running vLLM has mostly taken, so the test must not be able to ask for
much. The buffer is float64 and starts at ``rank + 1`` on every rank; after k in-place
all-reduces each element is ``n**(k-1) * n(n+1)/2``, so every iteration's result is
checked at the end and the values stay finite for the iteration counts allowed.
"""

from __future__ import annotations

import argparse
import array
import fcntl
import json
import math
import os
import socket
import struct
import sys
import tempfile
import time
from operator import add

try:
    from ansible_collections.sparkops.vllm.plugins.module_utils import _nccl_transport
except ImportError:  # run as a plain script, with the BUNDLE files beside it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _nccl_transport  # type: ignore[no-redef]

BUNDLE = ("_allreduce_smoke.py", "_nccl_transport.py", "_log_lines.py")

DEFAULT_BYTES = 64 << 20
MAX_BYTES = 1 << 30
MAX_ITERS = 200
DTYPE_BYTES = 8  # float64
# Largest float64 exponent we let n**k reach (float64 overflows past 2**1024).
_MAX_EXPONENT = 900

NCCL_LOG_NAME = "nccl.%h.%p.log"
# Settings that decide the transport, copied into the report so a result explains itself.
_REPORTED_ENV = ("NCCL_", "GLOO_SOCKET_IFNAME", "TORCH_SYMM_MEM", "NVSHMEM_DISABLE_NVLS")


class SmokeError(ValueError):
    """Bad arguments: the message says which and the fix."""


def bus_bandwidth(algbw: float, world_size: int) -> float:
    """nccl-tests' all-reduce bus bandwidth: ``algbw * 2(n-1)/n``."""
    if world_size < 1:
        raise SmokeError(f"world size must be at least 1, got {world_size}")
    return algbw * 2 * (world_size - 1) / world_size


def bandwidths(size_bytes: int, seconds_per_iter: float, world_size: int) -> dict:
    """Time per all-reduce in microseconds, algbw and busbw in GB/s (1e9 bytes/s)."""
    if seconds_per_iter <= 0:
        raise SmokeError(f"time per all-reduce must be positive, got {seconds_per_iter}")
    algbw = size_bytes / seconds_per_iter / 1e9
    return {
        "time_us": round(seconds_per_iter * 1e6, 3),
        "algbw_gbps": round(algbw, 3),
        "busbw_gbps": round(bus_bandwidth(algbw, world_size), 3),
    }


def _gathered_report(args, backend: str, world_size: int, gathered: list) -> dict:
    """The report's common part from every rank's result; the slowest rank bounds the collective."""
    slowest = max(item["seconds"] for item in gathered)
    return {
        "backend": backend,
        "world_size": world_size,
        "size_bytes": args.size_bytes,
        "dtype": "float64",
        "warmup": args.warmup,
        "iters": args.iters,
        **bandwidths(args.size_bytes, slowest, world_size),
        "correct": all(item["correct"] for item in gathered),
        "max_rel_error": max(item["max_rel_error"] for item in gathered),
        "hosts": [item["host"] for item in gathered],
    }


def expected_value(world_size: int, total_iters: int) -> float:
    """Every element after ``total_iters`` in-place sums of buffers that start at rank + 1."""
    return float(world_size) ** (total_iters - 1) * world_size * (world_size + 1) / 2


def check_plan(size_bytes: int, warmup: int, iters: int, world_size: int, max_bytes: int = MAX_BYTES) -> int:
    """Validate sizes and counts before anything is allocated; return the element count."""
    if max_bytes > MAX_BYTES:
        raise SmokeError(f"--max-bytes {max_bytes} is above the hard cap {MAX_BYTES}; lower it")
    if size_bytes <= 0 or size_bytes > max_bytes:
        raise SmokeError(f"--size-bytes {size_bytes} must be between 1 and {max_bytes}; lower it")
    if size_bytes % DTYPE_BYTES:
        raise SmokeError(f"--size-bytes {size_bytes} must be a multiple of {DTYPE_BYTES} (float64 elements)")
    if warmup < 0 or iters < 1 or warmup + iters > MAX_ITERS:
        raise SmokeError(
            f"--warmup {warmup} --iters {iters}: need iters >= 1 and warmup + iters <= {MAX_ITERS}"
        )
    if world_size > 1 and (warmup + iters + 1) * math.log2(world_size) > _MAX_EXPONENT:
        raise SmokeError(
            f"{warmup + iters} iterations over {world_size} ranks would overflow the check's float64 sum; "
            "run fewer iterations"
        )
    return size_bytes // DTYPE_BYTES


def interface_address(ifname: str) -> str | None:
    """The IPv4 address of ``ifname`` (SIOCGIFADDR), or None when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", ifname[:15].encode()))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def nccl_environment(log_dir: str) -> dict:
    """What NCCL must see before its first init for the transport to be logged per rank."""
    return {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        "NCCL_DEBUG_FILE": os.path.join(log_dir, NCCL_LOG_NAME),
    }


def _read_own_log(log_dir: str) -> dict:
    """This process's NCCL log. NCCL's ``%h`` is the host name cut at its first dot
    (``getHostName(…, '.')`` in src/debug.cc), so the file is found by its pid."""
    suffix = f".{os.getpid()}.log"
    logs = {}
    for name in sorted(os.listdir(log_dir)):
        if name.startswith("nccl.") and name.endswith(suffix):
            with open(os.path.join(log_dir, name), encoding="utf-8", errors="replace") as handle:
                logs[name] = handle.read()
    return logs


def run_rank(rank: int, world_size: int, args: argparse.Namespace) -> dict | None:
    """One rank's part. Returns the report on rank 0, None elsewhere."""
    if args.backend == "nccl":
        os.makedirs(args.log_dir, exist_ok=True)
        os.environ.update(nccl_environment(args.log_dir))
    elif args.ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = args.ifname
    # torch is imported only where the test runs (the image), not where Ansible loads this file.
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    elements = check_plan(args.size_bytes, args.warmup, args.iters, world_size, args.max_bytes)
    if args.backend == "nccl":
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend=args.backend, rank=rank, world_size=world_size, device_id=None)
    # Logs and results travel over a separate Gloo group, so they still reach rank 0
    # after the NCCL communicator is gone.
    meta = dist.new_group(backend="gloo")
    buf = torch.full((elements,), float(rank + 1), dtype=torch.float64, device=device)
    for _ in range(args.warmup):
        dist.all_reduce(buf)
    if args.backend == "nccl":
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.iters):
            dist.all_reduce(buf)
        end.record()
        torch.cuda.synchronize()
        seconds = start.elapsed_time(end) / 1000 / args.iters
    else:
        dist.barrier(group=meta)
        began = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(buf)
        seconds = (time.perf_counter() - began) / args.iters
    want = expected_value(world_size, args.warmup + args.iters)
    error = ((buf - want).abs().max() / want).item()
    own = {
        "rank": rank,
        "host": socket.gethostname(),
        "correct": error < 1e-9,
        "max_rel_error": error,
        "seconds": seconds,
        "logs": _read_own_log(args.log_dir) if args.backend == "nccl" else {},
        "ifname": args.ifname,
        "address": interface_address(args.ifname) if args.ifname else None,
    }
    gathered: list = [None] * world_size
    dist.all_gather_object(gathered, own, group=meta)
    dist.barrier(group=meta)
    dist.destroy_process_group()
    if rank != 0:
        return None
    # The slowest rank bounds the collective, as nccl-tests reports it.
    report = {
        **_gathered_report(args, args.backend, world_size, gathered),
        "torch_version": torch.__version__,
        "environment": {key: os.environ[key] for key in sorted(os.environ) if key.startswith(_REPORTED_ENV)},
    }
    if args.backend == "nccl":
        version = torch.cuda.nccl.version()
        report["nccl_version"] = (
            ".".join(str(part) for part in version) if isinstance(version, tuple) else version
        )
        logs = {name: text for item in gathered for name, text in item["logs"].items()}
        expected = [name for name in (args.expect_devices or "").split(",") if name]
        report["transport"] = _nccl_transport.classify_logs(logs, expected, expected_ranks=world_size)
    else:
        report["interfaces"] = [
            {"rank": item["rank"], "ifname": item["ifname"], "address": item["address"]} for item in gathered
        ]
    return report


# --backend tcp: the wire format is a 4-byte big-endian length, then the payload.
_TCP_CONNECT_SECONDS = 60.0


def _send_frame(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(struct.pack("!I", len(payload)) + payload)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise ConnectionError("the peer closed the connection mid-message")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _recv_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack("!I", _recv_exact(sock, 4))
    return _recv_exact(sock, size)


def _tcp_connections(rank: int, world_size: int, bind_address: str, timeout: float) -> list[socket.socket]:
    """Rank 0 listens on ``bind_address:MASTER_PORT`` and accepts every other rank, which
    connects from ``bind_address`` to ``MASTER_ADDR:MASTER_PORT``. Returns rank 0's
    connections in rank order, or the one connection of another rank."""
    port = int(os.environ["MASTER_PORT"])
    if rank == 0:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((bind_address, port))
            listener.listen(world_size)
            listener.settimeout(timeout)
            peers: dict[int, socket.socket] = {}
            while len(peers) < world_size - 1:
                conn, _addr = listener.accept()
                conn.settimeout(timeout)
                (peer_rank,) = struct.unpack("!I", _recv_exact(conn, 4))
                peers[peer_rank] = conn
        return [peers[r] for r in sorted(peers)]
    deadline = time.monotonic() + timeout
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.bind((bind_address, 0))
        try:
            sock.connect((os.environ["MASTER_ADDR"], port))
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
            continue
        sock.sendall(struct.pack("!I", rank))
        return [sock]


def _tcp_allreduce(rank: int, conns: list[socket.socket], buf: array.array) -> array.array:
    """One all-reduce: every rank's buffer summed on rank 0 and sent back to all."""
    if rank == 0:
        total = buf
        for conn in conns:
            other = array.array("d")
            other.frombytes(_recv_frame(conn))
            total = array.array("d", map(add, total, other))
        payload = total.tobytes()
        for conn in conns:
            _send_frame(conn, payload)
        return total
    _send_frame(conns[0], buf.tobytes())
    result = array.array("d")
    result.frombytes(_recv_frame(conns[0]))
    return result


def run_tcp_rank(rank: int, world_size: int, args: argparse.Namespace) -> dict | None:
    """``--backend tcp``: one rank of a reduce-and-broadcast over TCP; the report on rank 0."""
    elements = check_plan(args.size_bytes, args.warmup, args.iters, world_size, args.max_bytes)
    conns = _tcp_connections(rank, world_size, args.bind_address, args.timeout)
    try:
        buf = array.array("d", [float(rank + 1)]) * elements
        for _ in range(args.warmup):
            buf = _tcp_allreduce(rank, conns, buf)
        began = time.perf_counter()
        for _ in range(args.iters):
            buf = _tcp_allreduce(rank, conns, buf)
        seconds = (time.perf_counter() - began) / args.iters
        want = expected_value(world_size, args.warmup + args.iters)
        error = max(abs(value - want) for value in buf) / want
        own = {
            "rank": rank,
            "host": socket.gethostname(),
            "correct": error < 1e-9,
            "max_rel_error": error,
            "seconds": seconds,
            "sockets": [
                {"rank": rank, "local": conn.getsockname()[0], "peer": conn.getpeername()[0]}
                for conn in conns
            ],
        }
        if rank != 0:
            _send_frame(conns[0], json.dumps(own).encode())
            return None
        gathered = [own] + [json.loads(_recv_frame(conn)) for conn in conns]
    finally:
        for conn in conns:
            conn.close()
    return {
        **_gathered_report(args, "tcp", world_size, gathered),
        "bind_address": args.bind_address,
        "sockets": [entry for item in gathered for entry in item["sockets"]],
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _spawned(rank: int, world_size: int, args: argparse.Namespace, report_path: str) -> None:
    # A file, not a queue: a report larger than a pipe's buffer would block rank 0's
    # put while the parent waits in join.
    report = run_rank(rank, world_size, args)
    if report is not None:
        with open(report_path, "w", encoding="utf-8") as handle:
            json.dump(report, handle)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--backend", choices=("nccl", "gloo", "tcp"), required=True)
    parser.add_argument("--size-bytes", type=int, default=DEFAULT_BYTES, help="buffer per rank")
    parser.add_argument(
        "--max-bytes", type=int, default=MAX_BYTES, help=f"refuse buffers above this (<= {MAX_BYTES})"
    )
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument(
        "--nproc", type=int, default=None, help="spawn this many local ranks (not under torchrun)"
    )
    parser.add_argument("--ifname", default=None, help="gloo: the interface to bind (GLOO_SOCKET_IFNAME)")
    parser.add_argument(
        "--log-dir", default="/tmp/sparkops-allreduce", help="nccl: NCCL_DEBUG_FILE directory"
    )
    parser.add_argument("--expect-devices", default=None, help="nccl: comma list of HCAs RDMA must use")
    parser.add_argument("--json-out", default=None, help="rank 0 also writes the report here")
    parser.add_argument(
        "--bind-address", default=None, help="tcp: the address every socket binds to (the node's ib address)"
    )
    parser.add_argument(
        "--timeout", type=float, default=_TCP_CONNECT_SECONDS, help="tcp: seconds to connect and per receive"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    world_size = int(os.environ["WORLD_SIZE"]) if torchrun else (args.nproc or 1)
    try:
        check_plan(args.size_bytes, args.warmup, args.iters, world_size, args.max_bytes)
    except SmokeError as exc:
        print(json.dumps({"error": str(exc)}), file=sys.stderr)
        return 2
    if args.backend == "tcp":
        if not (
            torchrun and args.bind_address and "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ
        ):
            print(
                json.dumps(
                    {
                        "error": "--backend tcp needs --bind-address and RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT"
                    }
                ),
                file=sys.stderr,
            )
            return 2
        report = run_tcp_rank(int(os.environ["RANK"]), world_size, args)
    elif torchrun:
        report = run_rank(int(os.environ["RANK"]), world_size, args)
    else:
        import torch.multiprocessing as mp  # noqa: PLC0415

        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
        with tempfile.TemporaryDirectory() as scratch:
            report_path = os.path.join(scratch, "report.json")
            mp.start_processes(
                _spawned,
                args=(world_size, args, report_path),
                nprocs=world_size,
                join=True,
                start_method="spawn",
            )
            with open(report_path, encoding="utf-8") as handle:
                report = json.load(handle)
    if report is None:
        return 0
    text = json.dumps(report, indent=2, sort_keys=True)
    print(text)
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    return 0 if report["correct"] else 1


if __name__ == "__main__":
    sys.exit(main())
