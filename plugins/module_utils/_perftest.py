# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""perftest's ``ib_write_bw``: the bounded command lines and the parse of its report.

The report format is perftest's own (linux-rdma/perftest, tag v4.5-0.17, the version
Debian bookworm's ``perftest`` 4.5+0.17-1 ships; unchanged in v4.5-0.20):

- ``src/perftest_parameters.h``: the header is ``RESULT_FMT`` (``BW peak[MB/sec]``,
  ``BW average[MB/sec]``) or, with ``--report_gbits``, ``RESULT_FMT_G`` (``[Gb/sec]``),
  each followed by ``MsgRate[Mpps]``; a row is ``REPORT_FMT``
  (``" %-7lu    %-10" PRIu64 "       %-7.2lf            %-7.2lf\t\t   %-7.6lf"``): bytes,
  iterations, peak, average, message rate. Rows sit between ``RESULT_LINE`` dashes.
- ``src/perftest_parameters.c`` (``print_report_bw``): ``format_factor`` is ``0x100000``
  bytes for MB/sec and ``125000000`` bytes (1e9 bits) for Gb/sec.
- With ``-D`` (duration) the peak column is not measured (0.00: linux-rdma/perftest issue
  #234, "ib_write_bw doesnt show BW peak"), so the verdict uses the average.

Real captured reports are the unit tables (tests/unit/plugins/module_utils/test_perftest.py).
"""

from __future__ import annotations

import re
from typing import Any

# Bytes per reported unit (perftest_parameters.c, print_report_bw's format_factor).
_UNIT_BYTES = {"MB/sec": 0x100000, "Gb/sec": 125_000_000}
_HEADER_RE = re.compile(
    r"#bytes\s+#?iterations\s+BW peak\[(?P<unit>MB/sec|Gb/sec)\]\s+BW average\[(?P=unit)\]"
)
_ROW_RE = re.compile(
    r"^\s*(?P<bytes>\d+)\s+(?P<iters>\d+)\s+(?P<peak>\d+(?:\.\d+)?)\s+(?P<avg>\d+(?:\.\d+)?)\s+(?P<rate>\d+(?:\.\d+)?)"
)
# Two fields can share a line ("Dual-port : OFF\t\tDevice : mlx5_0").
_FIELD_RE = re.compile(r"(?:^|\s)(?P<key>Device|Link type|GID index|Mtu|Number of qps)\s*:\s*(?P<value>\S+)")
_FIELDS = {
    "Device": "device",
    "Link type": "link_type",
    "GID index": "gid_index",
    "Mtu": "mtu",
    "Number of qps": "qps",
}

# perftest's default TCP port for the exchange of queue-pair data (perftest_parameters.h, DEF_PORT).
DEFAULT_PORT = 18515
# Bounds the fabric check keeps: a short test (a guess: long enough to settle, short enough
# for a check), and perftest's own largest message (perftest_parameters.h MAX_SIZE, 8388608;
# its default for bandwidth tests, DEF_SIZE_BW, is 65536). ib_write_bw registers one buffer of
# the message size per queue pair, so the memory it takes stays in megabytes.
DEFAULT_MESSAGE_BYTES = 65536
MAX_DURATION_SECONDS = 60
MAX_MESSAGE_BYTES = 8 << 20


class PerftestError(ValueError):
    """A report that holds no result, or a bad bound."""


def to_gbps(value: float, unit: str) -> float:
    """A perftest bandwidth in ``unit`` as Gb/s (1e9 bits per second)."""
    return value * _UNIT_BYTES[unit] * 8 / 1e9


def parse_bw(text: str) -> dict[str, Any]:
    """The result of one ``ib_write_bw`` side (server or client) from its stdout.

    Returns ``{device, link_type, gid_index, mtu, qps, unit, rows, bw_average_gbps,
    bw_peak_gbps}``; ``rows`` as printed (each ``{bytes, iterations, bw_peak, bw_average,
    msg_rate_mpps}`` in ``unit``); the two ``*_gbps`` are the last row's (the largest
    message size with ``-a``). Raises :class:`PerftestError` when no result row is there.
    """
    found: dict[str, Any] = {name: None for name in _FIELDS.values()}
    unit = None
    rows: list[dict[str, Any]] = []
    for line in text.splitlines():
        fields = list(_FIELD_RE.finditer(line)) if unit is None else []
        for field in fields:
            if found[_FIELDS[field.group("key")]] is None:
                found[_FIELDS[field.group("key")]] = field.group("value")
        if fields:
            continue
        header = _HEADER_RE.search(line)
        if header:
            unit = header.group("unit")
            continue
        if unit is None:
            continue
        row = _ROW_RE.match(line)
        if row:
            rows.append(
                {
                    "bytes": int(row.group("bytes")),
                    "iterations": int(row.group("iters")),
                    "bw_peak": float(row.group("peak")),
                    "bw_average": float(row.group("avg")),
                    "msg_rate_mpps": float(row.group("rate")),
                }
            )
    if unit is None:
        raise PerftestError("no ib_write_bw result header (#bytes ... BW average) in the output")
    if not rows:
        raise PerftestError(f"ib_write_bw printed its header ({unit}) but no result row")
    for key in ("gid_index", "mtu", "qps"):
        if found[key] is not None:
            number = re.match(r"\d+", found[key])
            found[key] = int(number.group(0)) if number else None
    last = rows[-1]
    return {
        **found,
        "unit": unit,
        "rows": rows,
        "bw_average_gbps": round(to_gbps(last["bw_average"], unit), 2),
        "bw_peak_gbps": round(to_gbps(last["bw_peak"], unit), 2),
    }


def check_bounds(duration_seconds: int, message_bytes: int) -> None:
    if not 1 <= duration_seconds <= MAX_DURATION_SECONDS:
        raise PerftestError(
            f"ib_write_bw duration {duration_seconds} s must be between 1 and {MAX_DURATION_SECONDS}; lower it"
        )
    if not 1 <= message_bytes <= MAX_MESSAGE_BYTES:
        raise PerftestError(
            f"ib_write_bw message size {message_bytes} must be between 1 and {MAX_MESSAGE_BYTES} bytes; lower it"
        )


def argv(
    device: str,
    *,
    duration_seconds: int,
    message_bytes: int,
    port: int = DEFAULT_PORT,
    server: str | None = None,
    gid_index: int | None = None,
) -> list[str]:
    """``ib_write_bw``'s argv: the server side without ``server``, the client with its address.

    ``-D`` bounds the run in time, ``-F`` keeps a CPU-frequency warning from failing it,
    ``--report_gbits`` reports in Gb/s. Without ``gid_index`` perftest picks the GID itself,
    as NCCL does when no ``NCCL_IB_GID_INDEX`` is set (docs/rdma.md).
    """
    check_bounds(duration_seconds, message_bytes)
    args = [
        "ib_write_bw",
        "-d",
        device,
        "-D",
        str(duration_seconds),
        "-s",
        str(message_bytes),
        "-p",
        str(port),
        "-F",
        "--report_gbits",
    ]
    if gid_index is not None:
        args += ["-x", str(gid_index)]
    if server:
        args.append(server)
    return args
