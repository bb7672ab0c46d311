# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Normalise log lines as vLLM, Ray, NCCL and the tools around them really print them.

A line that reaches an operator has usually been through several hands: vLLM's own
logger (``INFO 09-24 20:50:57 [file.py:268]``), a process prefix per worker
(``(EngineCore_DP0 pid=1)``, ``(RayWorkerWrapper pid=2, ip=10.0.0.2)``, ``(raylet)``),
Ray's log deduplication (``[repeated 30x across cluster]``), colour codes, a journald
or syslog header, ``docker logs --timestamps``, pytest's ``E   `` marker, and tqdm's
carriage-return progress bars. This module peels those layers off and keeps what
matters for diagnosis: the message text, the host (from ``ip=``, an NCCL
``host:pid:tid`` header or a syslog header) and the repeat count.

It imports nothing from Ansible, so parsers and their tests use it directly. Other
parsers of vLLM/Ray output reuse it instead of carrying their own copy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = [
    "LogLine",
    "clean_physical",
    "iter_log_lines",
    "iter_path_chunks",
    "iter_path_lines",
    "normalize",
    "strip_ansi",
    "strip_ansi_bytes",
]

# CSI sequences (colours, cursor moves), OSC sequences (titles, hyperlinks) and the
# lone two-byte escapes some loggers emit.
_ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
# The same on undecoded bytes of many lines at once. Only the OSC body could reach past
# a line end, so it stops at ``\n``: every line comes out as _ANSI_RE leaves it alone.
_ANSI_BYTES_RE = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)|[@-Z\\-_])")

# Outer wrappers, peeled repeatedly from the start of a line in any order.
_OUTER_PATTERNS = (
    # pytest's failure marker: "E   " then the original line.
    re.compile(r"E {2,}"),
    # docker logs --timestamps / kubectl --timestamps / ISO timestamps in general.
    re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+"),
    # Bracketed timestamps: "[2025-04-21 07:28:41 TP0] ", "[2026-03-13 22:26:02] ".
    re.compile(r"\[\d{4}-\d\d-\d\d[T ][\d:.,]+[^\]]{0,40}\]\s+"),
    # docker compose service column: "vllm-head-1  | ".
    re.compile(r"[\w.-]+\s+\|\s"),
)

# syslog / journald: "Jul 01 22:55:07 spark-1 kernel: " or "... bash[1234]: ".
_SYSLOG_RE = re.compile(
    r"(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?|\d{4}-\d\d-\d\dT\S+)\s+"
    r"(?P<host>[\w.-]+)\s+[\w./@-]+(?:\[\d+\])?:\s"
)

# Process prefixes: "(EngineCore_DP0 pid=1)", "(RayWorkerWrapper pid=2, ip=10.0.0.2)",
# "(VllmWorker rank=3 pid=1090)", "(raylet)", "(raylet, ip=10.0.0.2)", "(pid=123)",
# "(autoscaler +1m3s)". A bare word in parentheses only counts when it is one of Ray's
# own daemon names, so "(0.95, 45.01 GiB)" at the start of a message is left alone.
_PROC_PREFIX_RE = re.compile(
    r"\((?P<body>"
    r"[A-Za-z_][\w.:/-]*(?:[ ,]+[\w.-]+=[^\s,()]*)*[ ,]+(?:pid|ip|rank|node_id)=[^\s,()]*(?:[ "
    r",]+[\w.-]+=[^\s,()]*)*"
    r"|(?:pid|ip)=[^\s,()]*(?:[ ,]+[\w.-]+=[^\s,()]*)*"
    r"|(?:raylet|gcs_server|autoscaler|dashboard|monitor|log_monitor|dashboard_agent|runtime_env_agent)"
    r"(?:[ ,]+[^()]*)?"
    r")\)\s?"
)
_IP_IN_PREFIX_RE = re.compile(r"\bip=(?P<ip>[0-9A-Fa-f.:]+)")

# vLLM's logger header: "INFO 09-24 20:50:57 [gpu_worker.py:298] " (optionally with
# the year, milliseconds, or a logger name instead of file:line).
_VLLM_HEADER_RE = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d(?:-\d{2,4})?\s+\d\d:\d\d:\d\d(?:[.,]\d+)?"
    r"\s+(?:\[[^\]]*\]\s?)?"
)
# Ray's C++ log header: "[2024-08-07 10:14:35,261 I 727164 727164] file.cc:432: ".
_RAY_CPP_HEADER_RE = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (?P<level>[DIWEF]) \d+ \d+\]\s+")
# NCCL's header: "h100-15:139:1092 [7] " (host:pid:tid [cuda device]).
_NCCL_HEADER_RE = re.compile(r"(?P<host>[A-Za-z0-9][\w.-]*):(?P<pid>\w+):(?P<tid>\w+) \[\d+\]\s")

# Ray's log deduplication suffix, and the one-time notice it appends to the first one.
_REPEATED_RE = re.compile(
    r"\s*\[repeated (?P<n>\d+)x across cluster\]"
    r"(?:\s*\(Ray deduplicates logs by default\.[^)]*\))?\s*$"
)

# Every prefix pattern above, in one alternation: when none matches at the start of
# what is left, a round of peeling cannot change anything and the loop ends at once.
_ANY_PREFIX_RE = re.compile(
    "|".join(
        re.sub(r"\(\?P<\w+>", "(?:", pattern.pattern)
        for pattern in (
            *_OUTER_PATTERNS,
            _SYSLOG_RE,
            _PROC_PREFIX_RE,
            _VLLM_HEADER_RE,
            _RAY_CPP_HEADER_RE,
            _NCCL_HEADER_RE,
        )
    )
)

# First letters of the levels _VLLM_HEADER_RE knows (each entry one character long).
_LEVEL_INITIALS = ("D", "I", "W", "E", "C")

_LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL", "D": "DEBUG", "WARN": "WARNING"}


@dataclass(slots=True)
class LogLine:
    """One physical line, with its layers peeled off.

    ``number`` counts physical lines from 1, as an editor or ``grep -n`` shows them.
    ``text`` is the message without prefixes; ``host`` is the address or name the
    line came from when the line says so; ``source`` names the innermost process
    prefix (``RayWorkerWrapper pid=2, ip=10.0.0.2``) so interleaved output can be
    told apart; ``headed`` says whether the line started a new log record (a logger
    header or process prefix), which a terminal-wrapped continuation never does.
    """

    number: int
    raw: str
    text: str
    host: str | None = None
    source: str | None = None
    level: str | None = None
    repeated: int = 1
    headed: bool = False


def strip_ansi(text: str) -> str:
    """Remove ANSI colour and control sequences."""
    if "\x1b" not in text:
        return text
    return _ANSI_RE.sub("", text)


def strip_ansi_bytes(data: bytes) -> bytes:
    """Remove ANSI sequences from undecoded lines; each line ends up as :func:`strip_ansi` leaves it."""
    if b"\x1b" not in data:
        return data
    return _ANSI_BYTES_RE.sub(b"", data)


def clean_physical(raw: str) -> str:
    """Cheap first pass over a physical line: line ending, ANSI codes, carriage returns.

    tqdm and other progress bars redraw with ``\\r``; a terminal shows only the last
    segment, so that is the one kept.
    """
    line = raw.rstrip("\r\n")
    if "\x1b" in line:
        line = _ANSI_RE.sub("", line)
    if "\r" in line:
        parts = [part for part in line.split("\r") if part.strip()]
        line = parts[-1] if parts else ""
    return line


def normalize(line: str) -> tuple[str, str | None, str | None, str | None, int, bool]:
    """Peel a cleaned physical line.

    Returns ``(text, host, source, level, repeated, headed)``.
    """
    host: str | None = None
    source: str | None = None
    level: str | None = None
    headed = False
    repeated = 1

    if "[repeated " in line:
        match = _REPEATED_RE.search(line)
        if match:
            repeated = int(match.group("n"))
            line = line[: match.start()]

    text = line
    # Prefixes nest and interleave in any order, so peel until nothing changes.
    outer_e, outer_iso, outer_bracket, outer_compose = _OUTER_PATTERNS
    for _ in range(16):
        before = text
        stripped = text.lstrip()
        if not _ANY_PREFIX_RE.match(stripped):
            break
        # Each pattern is tried only where its first character could start it (a
        # cheap test that never rules out a match), in the order and with the effect
        # of trying them all.
        if stripped.startswith("E  "):
            match = outer_e.match(stripped)
            if match:
                stripped = stripped[match.end() :]
        if stripped[:1].isdigit():
            match = outer_iso.match(stripped)
            if match:
                stripped = stripped[match.end() :]
        if stripped.startswith("["):
            match = outer_bracket.match(stripped)
            if match:
                stripped = stripped[match.end() :]
        if "|" in stripped:
            match = outer_compose.match(stripped)
            if match:
                stripped = stripped[match.end() :]
        first = stripped[:1]
        if "A" <= first <= "Z" or first.isdigit():
            match = _SYSLOG_RE.match(stripped)
            if match:
                host = host or match.group("host")
                stripped = stripped[match.end() :]
                headed = True
        if stripped.startswith("("):
            match = _PROC_PREFIX_RE.match(stripped)
            if match:
                body = match.group("body")
                source = body
                ip_match = _IP_IN_PREFIX_RE.search(body)
                if ip_match:
                    # The innermost prefix is the process that printed the line.
                    host = ip_match.group("ip")
                stripped = stripped[match.end() :]
                headed = True
        if stripped[:1] in _LEVEL_INITIALS:
            match = _VLLM_HEADER_RE.match(stripped)
            if match:
                level = _LEVELS.get(match.group("level"), match.group("level"))
                stripped = stripped[match.end() :]
                headed = True
        if stripped.startswith("["):
            match = _RAY_CPP_HEADER_RE.match(stripped)
            if match:
                level = _LEVELS.get(match.group("level"), match.group("level"))
                stripped = stripped[match.end() :]
                headed = True
        first = stripped[:1]
        if first.isascii() and first.isalnum():
            match = _NCCL_HEADER_RE.match(stripped)
            if match:
                host = host or match.group("host")
                stripped = stripped[match.end() :]
                headed = True
        # Keep a traceback's indentation: only strip what the prefixes left behind.
        text = stripped if stripped != text.lstrip() else text
        if text == before:
            break
    return text.rstrip(), host, source, level, repeated, headed


def iter_log_lines(lines: Iterable[str], start: int = 1) -> Iterator[LogLine]:
    """Yield a :class:`LogLine` for every physical line of ``lines``."""
    for number, raw in enumerate(lines, start):
        cleaned = clean_physical(raw)
        text, host, source, level, repeated, headed = normalize(cleaned)
        yield LogLine(number, cleaned, text, host, source, level, repeated, headed)


def iter_path_chunks(path: str, size: int = 1 << 20) -> Iterator[bytes]:
    """Yield a file's bytes in blocks of whole lines, streaming and in constant memory.

    Every block but the last ends with ``\\n``; a block is about ``size`` bytes, or one
    line when a single line is longer. Splitting the blocks on ``\\n`` gives the lines
    :func:`iter_path_lines` yields, undecoded.
    """
    with open(path, "rb") as handle:
        rest = b""
        while True:
            block = handle.read(size)
            if not block:
                if rest:
                    yield rest
                return
            cut = block.rfind(b"\n")
            if cut < 0:
                rest += block
                continue
            yield rest + block[: cut + 1]
            rest = block[cut + 1 :]


def iter_path_lines(path: str) -> Iterator[str]:
    """Yield the decoded physical lines of a file, streaming and in constant memory.

    The file is read as bytes and split on ``\\n`` only, so a ``\\r`` inside a
    progress bar never shifts the line numbers an editor shows. Undecodable bytes
    become U+FFFD rather than an error: a log is evidence, not input to reject.
    """
    with open(path, "rb") as handle:
        for raw in handle:
            yield raw.decode("utf-8", errors="replace")
