# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The Prometheus text exposition format 0.0.4, read into families of samples.

Stdlib only: the watchdog's program imports it on the head's own python3.

The grammar is the one prometheus/docs ``content/docs/instrumenting/exposition_formats.md``
gives for 0.0.4: ``# HELP name text`` and ``# TYPE name type`` lines, other ``#`` lines
are comments, and a sample is ``name{label="value",...} value [timestamp]`` where a label
value escapes ``\\``, ``\"`` and ``\n`` and a value may be ``NaN``, ``+Inf`` or ``-Inf``.
A histogram's or summary's ``_bucket``/``_sum``/``_count`` samples belong to the family
their ``# TYPE`` names. prometheus_client (which vLLM 0.17.1 uses) writes a counter's
``# TYPE`` with its ``_total`` name in 0.0.4 (prometheus_client ``exposition.py``,
``generate_latest``), so a counter family is found by the ``_total`` name.

A line that cannot be read is recorded in ``errors`` and skipped: one odd line from a
proxy or a newer exporter must not hide every other sample.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

# Bounds that keep a hostile or runaway /metrics cheap to read on every tick.
MAX_BYTES = 8 * 1024 * 1024
MAX_LINE = 64 * 1024
MAX_ERRORS = 50

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_NAME_RE = re.compile(_NAME)
_LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_TYPES = ("counter", "gauge", "histogram", "summary", "untyped")
_SUFFIXES = {
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("_sum", "_count"),
}
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


class PrometheusTextError(ValueError):
    """The text as a whole cannot be read (too large, not text)."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float
    timestamp_ms: int | None = None


@dataclass
class Family:
    name: str
    type: str = "untyped"
    help: str = ""
    samples: list[Sample] = field(default_factory=list)


@dataclass
class Exposition:
    families: dict[str, Family] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def samples(self, name: str) -> list[Sample]:
        """Every sample named ``name`` exactly, whichever family holds it."""
        return [s for fam in self.families.values() for s in fam.samples if s.name == name]

    def total(self, name: str) -> float | None:
        """The sum of every sample named ``name`` (every engine, every model), or None
        when there is none. NaN samples are left out: a NaN is no count."""
        values = [s.value for s in self.samples(name) if not math.isnan(s.value)]
        return math.fsum(values) if values else None


def parse_value(text: str) -> float:
    """A sample value: Go's ParseFloat spellings the format allows."""
    low = text.lower()
    if low in ("nan",):
        return math.nan
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if not re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", text):
        raise ValueError(f"not a sample value: {text!r}")
    return float(text)


def _labels(line: str, pos: int) -> tuple[dict[str, str], int]:
    """Read ``{...}`` from ``line[pos] == '{'``; return the labels and the index after ``}``."""
    labels: dict[str, str] = {}
    pos += 1
    while True:
        while pos < len(line) and line[pos] in " \t":
            pos += 1
        if pos < len(line) and line[pos] == "}":
            return labels, pos + 1
        m = _LABEL_NAME_RE.match(line, pos)
        if not m:
            raise ValueError(f"a label name is expected at column {pos + 1}")
        name = m.group(0)
        pos = m.end()
        while pos < len(line) and line[pos] in " \t":
            pos += 1
        if line[pos : pos + 2] != '="':
            raise ValueError(f'label {name!r} has no ="value"')
        pos += 2
        chars: list[str] = []
        while True:
            if pos >= len(line):
                raise ValueError(f"label {name!r}'s value is not closed")
            ch = line[pos]
            if ch == "\\":
                nxt = line[pos + 1 : pos + 2]
                if nxt not in _ESCAPES:
                    raise ValueError(f"label {name!r} has an unknown escape \\{nxt}")
                chars.append(_ESCAPES[nxt])
                pos += 2
                continue
            if ch == '"':
                pos += 1
                break
            chars.append(ch)
            pos += 1
        if name in labels:
            raise ValueError(f"label {name!r} is given twice")
        labels[name] = "".join(chars)
        while pos < len(line) and line[pos] in " \t":
            pos += 1
        if pos < len(line) and line[pos] == ",":
            pos += 1
            continue
        if pos < len(line) and line[pos] == "}":
            return labels, pos + 1
        raise ValueError(f"',' or '}}' is expected after label {name!r}")


def _sample(line: str) -> Sample:
    m = _NAME_RE.match(line)
    if not m:
        raise ValueError("a metric name is expected")
    name = m.group(0)
    pos = m.end()
    labels: dict[str, str] = {}
    if pos < len(line) and line[pos] == "{":
        labels, pos = _labels(line, pos)
    rest = line[pos:].split()
    if not rest or len(rest) > 2:
        raise ValueError("a sample is 'name{labels} value [timestamp]'")
    value = parse_value(rest[0])
    stamp = None
    if len(rest) == 2:
        if not re.fullmatch(r"-?\d+", rest[1]):
            raise ValueError(f"not a timestamp: {rest[1]!r}")
        stamp = int(rest[1])
    return Sample(name, labels, value, stamp)


def _family_of(name: str, families: dict[str, Family]) -> Family:
    if name in families:
        return families[name]
    for fam in families.values():
        if any(name == fam.name + suffix for suffix in _SUFFIXES.get(fam.type, ())):
            return fam
    fam = Family(name)
    families[name] = fam
    return fam


def parse(text: str | bytes) -> Exposition:
    """Read a whole exposition. Raises PrometheusTextError only when the text as a whole
    is refused; a bad line goes to ``errors`` (the first MAX_ERRORS of them)."""
    if isinstance(text, bytes):
        if len(text) > MAX_BYTES:
            raise PrometheusTextError(f"the exposition is {len(text)} bytes, over {MAX_BYTES}")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PrometheusTextError(f"the exposition is not UTF-8: {exc}") from exc
    if len(text) > MAX_BYTES:
        raise PrometheusTextError(f"the exposition is {len(text)} characters, over {MAX_BYTES}")
    out = Exposition()

    def bad(number: int, why: str) -> None:
        if len(out.errors) < MAX_ERRORS:
            out.errors.append(f"line {number}: {why}")

    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip("\r").strip(" \t")
        if not line:
            continue
        if len(line) > MAX_LINE:
            bad(number, f"longer than {MAX_LINE} characters")
            continue
        if line.startswith("#"):
            parts = line[1:].strip(" \t").split(None, 2)
            if len(parts) >= 2 and parts[0] in ("HELP", "TYPE"):
                if not _NAME_RE.fullmatch(parts[1]):
                    bad(number, f"# {parts[0]} names {parts[1]!r}, not a metric name")
                    continue
                fam = out.families.setdefault(parts[1], Family(parts[1]))
                arg = parts[2] if len(parts) == 3 else ""
                if parts[0] == "TYPE":
                    if arg not in _TYPES:
                        bad(number, f"# TYPE {parts[1]} {arg!r} is not one of {', '.join(_TYPES)}")
                        continue
                    fam.type = arg
                else:
                    fam.help = re.sub(r"\\([\\n])", lambda m: "\n" if m.group(1) == "n" else "\\", arg)
            continue
        try:
            sample = _sample(line)
        except (ValueError, IndexError) as exc:
            bad(number, str(exc))
            continue
        _family_of(sample.name, out.families).samples.append(sample)
    return out
