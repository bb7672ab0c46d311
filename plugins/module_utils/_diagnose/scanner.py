# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The streaming scanner: physical lines in, findings and the report's data out."""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Mapping
from itertools import accumulate
from typing import Any, BinaryIO

from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.fixes import _fix
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.precedence import (
    _CAPTURE_WINDOW,
    _EXPLAINS,
    _JUNCTION,
    _ORDER,
    _RECORD_STARTS,
    FINDING_IDS,
    PHASE_FINDINGS,
    WRAPPERS,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.prefilter import (
    _E_LINE,
    _IP_AFTER_NON_ASCII,
    _IP_BYTES,
    _LOWER_TO_ASCII,
    _PIVOT_SCANNERS,
    _RECORD_STARTS_BYTES,
    _TAIL_BYTES,
    TRIGGER_TOKENS,
    _ascii_lower,
    _candidate_rules,
    _mask_tokens,
    _matched_span,
    _may_match,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose import resolve
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.reading import (
    BLOCK_BYTES,
    MAX_LINE_BYTES,
    iter_blocks,
    open_regular,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.rule_syntax import Rule
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.rules import (
    _CAPTURE_END,
    _CAPTURE_END_GATE,
    _CAPTURE_FRAME,
    _CAPTURE_FRAME_GATE,
    _CAPTURE_START,
    _CAPTURE_START_GATE,
    _LOAD_END,
    _LOAD_END_GATE,
    _LOAD_START,
    _LOAD_START_GATE,
    _MAX_MEMORY_LINES,
    _MEMORY_HINTS,
    _NODE_IP,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.rules_runtime import (
    NCCL_RELEASE,
    PROVENANCE,
    SYSLOG_ESCAPED_SGR,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.state import _Context, _Event, _Finding
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.summaries import _SUMMARIES
from ansible_collections.sparkops.vllm.plugins.module_utils._log_lines import (
    clean_physical,
    normalize,
    strip_ansi_bytes,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._vllm_memory_log import parse_memory_lines

_PROVENANCE_BYTES = PROVENANCE.encode()


def _clean(raw: str) -> str:
    """:func:`clean_physical`, and colour codes whose ESC byte was escaped (``#033[36m``)."""
    line = clean_physical(raw)
    if "#033[" in line or "ESC[" in line:
        line = SYSLOG_ESCAPED_SGR.sub("", line)
    return line


class Scanner:
    """Streaming diagnosis: :meth:`feed` physical lines, then :meth:`finish`."""

    def __init__(self, context: Mapping[str, Any] | None = None) -> None:
        self.context = _Context(context)
        self.findings: dict[str, _Finding] = {}
        self.lines_read = 0
        self.bytes_read = 0
        self.paths: list[str] = []
        self.memory: dict[str, Any] = {}
        self._memory_lines: list[str] = []
        self._path: str | None = None
        self._path_host: str | None = None
        self._prev_line = ""
        self._prev_number = 0
        self._prev_matched = False
        # The last line normalised and its result: a wrapped continuation joins to it.
        self._normalized: tuple[str, tuple[str, str | None, str | None, str | None, int, bool]] = (
            "",
            normalize(""),
        )
        self._capture_active = False
        self._capture_finished: set[str | None] = set()
        self._capture_frames: deque[int] = deque(maxlen=32)
        # The sources (Ray actor prefixes) of this file whose weights are loading: opened by
        # a loading line, closed by "Model loading took" or the start of graph capture.
        self._loading: set[str | None] = set()
        self._pending_oom: deque[_Event] = deque(maxlen=64)
        self._oom_events: list[_Event] = []
        self._seen_hosts: set[str] = set()
        self._socket_fallback: list[_Event] = []
        # NCCL release -> the version lines that printed it (a few each, a few releases).
        self._nccl_versions: dict[str, list[_Event]] = {}
        # Set once vLLM said it serves: a stalled broadcast after that is a hung rank.
        self._serving = False
        self.nccl_releases: set[str] = set()

    # -- input -----------------------------------------------------------------
    def start_path(self, path: str | None) -> None:
        """Begin a new file: line numbers restart, wrapped lines never join across files."""
        self._path = path
        self._path_host = self.context.path_hosts.get(path or "") or self.context.default_host
        self._prev_line = ""
        self._prev_number = 0
        self._loading.clear()
        if path is not None:
            self.paths.append(path)

    def feed_lines(self, lines: Iterable[str]) -> None:
        """Feed physical lines of the current file, numbering them from 1."""
        feed = self.feed
        for number, raw in enumerate(lines, 1):
            feed(raw, number)

    def feed(self, raw: str, number: int) -> None:
        """Look at one physical line."""
        self.lines_read += 1
        self.bytes_read += len(raw)
        self._look(_clean(raw[:MAX_LINE_BYTES]), number)

    def feed_file(self, path: str, block_size: int = BLOCK_BYTES) -> None:
        """Feed the current file from ``path`` (a regular file only, see ``reading``)."""
        with open_regular(path) as handle:
            self.feed_stream(handle, block_size)

    def feed_stream(self, handle: BinaryIO, block_size: int = BLOCK_BYTES) -> None:
        """Feed the current file from a binary stream: the same as :meth:`feed_lines`, faster.

        The file is read in blocks of whole lines; a few regex passes per block (see
        ``_PIVOT_SCANNERS``) pick the lines that :meth:`feed` would look at closely:
        those holding a trigger token, those a wrapped token may continue into, and
        the few whose bytes do not tell (carriage returns, ``E   `` markers, the
        characters whose lower case is ASCII). Only those are decoded and fed one by
        one; the state every other line would leave behind is restored when needed.
        """
        number = 0
        # The last line of the block before, when it was not fed one by one.
        held: bytes | None = None
        for block in iter_blocks(handle, block_size):
            lines = block.split(b"\n")
            if block.endswith(b"\n"):
                lines.pop()
            count = len(lines)
            self.lines_read += count
            self.bytes_read += len(block) if block.isascii() else len(block.decode("utf-8", "replace"))
            picked = self._pick_lines(block, lines)
            if number:
                # A block's passes cannot see a token cut by the break before its first
                # line: that line's seam test is run as the line path runs it.
                picked.setdefault(0, 0)
            # The index of the last line fed one by one (-1: the line before the block,
            # when it was fed or there is none).
            fed = -1 if held is None else -2
            for index in sorted(picked):
                previous = lines[index - 1] if index else held
                if index != fed + 1 and previous is not None:
                    self._restore(previous, number + index)
                mask = picked[index]
                self._look(
                    _clean(lines[index][:MAX_LINE_BYTES].decode("utf-8", "replace")),
                    number + index + 1,
                    TRIGGER_TOKENS if mask < 0 else _mask_tokens(mask),
                )
                fed = index
            held = None if fed == count - 1 else lines[-1]
            number += count
        if held is not None:
            self._restore(held, number)

    def _restore(self, raw: bytes, number: int) -> None:
        """Leave the state :meth:`feed` leaves after a line it did not look at closely.

        That is the state :meth:`_look` leaves after a line without a trigger token,
        the provenance line included: nothing to join to, as after an empty line.
        """
        line = _clean(raw[:MAX_LINE_BYTES].decode("utf-8", "replace"))
        self._prev_line = "" if line.startswith(PROVENANCE) else line
        self._prev_number = number
        self._prev_matched = False

    def _pick_lines(self, block: bytes, lines: list[bytes]) -> dict[int, int]:
        """The lines of ``block`` that must be fed one by one, by index.

        Each maps to a mask of the scanners that matched in it: the line's tokens are
        among theirs (-1: any token, the bytes do not tell). Notes the hosts (``ip=``)
        of the lines left out on the way.
        """
        stripped = strip_ansi_bytes(block)
        stripped_lines = lines if stripped is block else stripped.split(b"\n")[: len(lines)]
        joined = stripped.lower().replace(b"\n", b"")
        starts = list(accumulate(map(len, stripped_lines), initial=0))
        last_byte = len(joined) - 1
        picked: dict[int, int] = {}
        count = len(lines)
        for bit, (scanner, longest_before, longest_after, _tokens, spans) in enumerate(_PIVOT_SCANNERS):
            flag = 1 << bit
            for match in scanner.finditer(joined):
                at = match.start()
                line = bisect_right(starts, at) - 1
                end = starts[line + 1]
                before, after = longest_before, longest_after
                # Near an edge of the line: measure the token that is there (the seam
                # test below reaches _JUNCTION characters; more bytes only in a line
                # with non-ASCII characters, where the longest is kept).
                if (at - before < starts[line] or at + after > end - _JUNCTION) and stripped_lines[
                    line
                ].isascii():
                    before, after = _matched_span(joined, at, spans)
                if at - before < starts[line] or at + after > end:
                    # The token may cross line breaks: take every line it may touch.
                    first = bisect_right(starts, max(at - before, 0)) - 1
                    line = bisect_right(starts, min(at + after - 1, last_byte)) - 1
                    end = starts[line + 1]
                    for index in range(first, line + 1):
                        picked[index] = picked.get(index, 0) | flag
                else:
                    picked[line] = picked.get(line, 0) | flag
                # The seam test of the next line sees this line's last _JUNCTION
                # characters; it runs on a line that is not empty and starts no record.
                if at + after > end - (_JUNCTION if stripped_lines[line].isascii() else _TAIL_BYTES):
                    following = line + 1
                    if (
                        following < count
                        and stripped_lines[following]
                        and not stripped_lines[following].startswith(_RECORD_STARTS_BYTES)
                    ):
                        picked.setdefault(following, 0)
        plain = stripped.isascii()
        odd = (
            b"\r" in stripped
            or b"#033[" in stripped
            or b"ESC[" in stripped
            or stripped.startswith(b"E   ")
            or _E_LINE.search(stripped) is not None
            or (not plain and any(code[-1:] in stripped and code in stripped for code in _LOWER_TO_ASCII))
        )
        note_hosts = len(self._seen_hosts) < 64 and b"ip=" in stripped
        ambiguous_ip = note_hosts and not plain and _IP_AFTER_NON_ASCII.search(stripped) is not None
        if not odd and not ambiguous_ip:
            if note_hosts:
                # A fixture's provenance line is skipped by the line path too (_look).
                self._add_hosts(
                    host
                    for line in stripped_lines
                    if not line.startswith(_PROVENANCE_BYTES)
                    for host in _IP_BYTES.findall(line)
                )
            return picked
        hosts = []
        for index, line in enumerate(stripped_lines):
            if (
                b"\r" in line
                or b"#033[" in line
                or b"ESC[" in line
                or any(code in line for code in _LOWER_TO_ASCII)
            ):
                picked[index] = -1
                if index + 1 < count:
                    picked.setdefault(index + 1, 0)
                continue
            if line.startswith(b"E   ") or _IP_AFTER_NON_ASCII.search(line):
                picked.setdefault(index, 0)
            if note_hosts and b"ip=" in line and not line.startswith(_PROVENANCE_BYTES):
                hosts.extend(_IP_BYTES.findall(line))
        self._add_hosts(hosts)
        return picked

    def _add_hosts(self, hosts: Iterable[bytes]) -> None:
        # The lines fed one by one note their own hosts. The set is filled a block at a
        # time rather than a line at a time, which can only differ once it holds 64
        # addresses, where all that is read from it (more than one) holds either way.
        if len(self._seen_hosts) < 64:
            self._seen_hosts.update(host.decode("ascii") for host in set(hosts))

    def _look(self, line: str, number: int, among: tuple[str, ...] = TRIGGER_TOKENS) -> None:
        """Look at one cleaned physical line; ``among`` holds every trigger token it may hold."""
        if line.startswith(PROVENANCE):
            # A fixture's source line describes the log; it is not part of it.
            self._prev_line, self._prev_number, self._prev_matched = "", number, False
            return
        low = _ascii_lower(line)
        tokens = tuple(filter(low.__contains__, among))
        if "ip=" in low:
            self._note_hosts(line)
        prev = self._prev_line
        junction = False
        # A line that opens with a process prefix or log level starts a record of its own,
        # so it cannot be the tail of a wrapped phrase.
        if prev and line and not tokens and not line.startswith(_RECORD_STARTS):
            # A key phrase cut in two by a terminal: test the seam only.
            head = line[4:] if line.startswith("E   ") else line
            seam = _ascii_lower(prev[-_JUNCTION:] + head[:_JUNCTION])
            junction = any(map(seam.__contains__, TRIGGER_TOKENS))
        self._prev_matched = self._examine(line, number, prev, tokens) if tokens or junction else False
        self._prev_line = line
        self._prev_number = number

    # -- matching --------------------------------------------------------------
    def _note_hosts(self, line: str) -> None:
        if len(self._seen_hosts) < 64:
            for match in re.finditer(r"\bip=([0-9A-Fa-f.:]+)", line):
                self._seen_hosts.add(match.group(1))

    def _examine(self, line: str, number: int, prev: str, tokens: tuple[str, ...]) -> bool:
        normalized = normalize(line)
        text, host, source, _level, repeated, headed = normalized
        host = self.context.host_name(host or self._path_host)
        low = _ascii_lower(text)
        # Without a token in the line no anchor is in it, and no rule can match.
        matched = bool(tokens) and self._match(
            text, low, tokens=tokens, number=number, host=host, source=source, repeated=repeated
        )
        if not headed and prev and not self._prev_matched:
            # Terminal-wrapped continuation: join it to the line before and keep only
            # a match that crosses the seam (each half was looked at on its own).
            known, prev_normalized = self._normalized
            if known != prev:
                prev_normalized = normalize(prev)
            prev_text, prev_host, prev_source, _l, prev_repeated, _h = prev_normalized
            joined = prev_text + text
            seam = len(prev_text)
            around = _ascii_lower(joined[max(0, seam - _JUNCTION) : seam + _JUNCTION])
            rules = (
                _candidate_rules(joined, _ascii_lower(joined))
                if any(token in around for token in TRIGGER_TOKENS)
                else ()
            )
            for rule in rules:
                found = rule.pattern.search(joined)
                if found and found.start() < seam < found.end():
                    self._record(
                        rule,
                        found=found,
                        text=joined,
                        number=self._prev_number,
                        host=self.context.host_name(prev_host or self._path_host),
                        source=prev_source,
                        repeated=prev_repeated,
                    )
                    matched = True
                    break
        self._normalized = (line, normalized)
        self._markers(text, low, number, source)
        return matched

    def _match(
        self,
        text: str,
        low: str,
        *,
        tokens: tuple[str, ...],
        number: int,
        host: str | None,
        source: str | None,
        repeated: int,
    ) -> bool:
        for rule in _candidate_rules(text, low, tokens):
            found = rule.pattern.search(text)
            if found:
                self._record(
                    rule, found=found, text=text, number=number, host=host, source=source, repeated=repeated
                )
                return True
        return False

    def _record(
        self,
        rule: Rule,
        *,
        found: re.Match[str],
        text: str,
        number: int,
        host: str | None,
        source: str | None,
        repeated: int,
    ) -> None:
        groups = found.groups()
        if rule.finding == "ray_oom_kill" and rule.kind in {"usage", "pressure"} and groups[0]:
            # Ray names the node whose memory ran out; that is the host that matters.
            host = self.context.host_name(groups[0])
        during_capture = self._capture_active and source not in self._capture_finished
        phase = "graph_capture" if during_capture else ("weight_loading" if self._loading else None)
        event = _Event(
            rule.finding,
            rule.severity,
            rule.kind,
            number,
            text,
            host,
            self._path,
            groups,
            repeated,
            during_capture,
            phase,
        )
        if rule.finding == "_oom":
            self._record_oom(event)
        elif rule.finding == "_socket_fallback":
            resolve.bounded_append(self._socket_fallback, event)
        elif rule.finding == "_nccl_version":
            release = NCCL_RELEASE.match(groups[0] or "")
            if release and (release.group(0) in self._nccl_versions or len(self._nccl_versions) < 8):
                resolve.bounded_append(self._nccl_versions.setdefault(release.group(0), []), event)
        elif rule.finding == "gpu_xid_error" and groups[1] == "79":
            # Xid 79: the GPU fell off the bus, so the driver cannot reach it at all.
            event.finding, event.kind = "nvidia_driver_unavailable", "gpu_lost"
            self._add(event)
        elif rule.kind == "broadcast" and not self._serving:
            # During the first compile or load the engine waits on its workers: normal.
            return
        else:
            self._add(event)

    def _record_oom(self, event: _Event) -> None:
        near = any(event.line - frame <= _CAPTURE_WINDOW for frame in self._capture_frames)
        event.during_capture = event.during_capture or near
        if event.during_capture:
            event.phase = "graph_capture"
        if len(self._oom_events) < 256:
            self._oom_events.append(event)
            if not event.during_capture:
                self._pending_oom.append(event)
        else:
            # Bounded memory: past 256 OOM lines only the count grows.
            self._add(
                _Event(
                    "cuda_oom",
                    event.severity,
                    event.kind,
                    event.line,
                    event.text,
                    event.host,
                    event.path,
                    event.groups,
                    event.repeated,
                    phase=event.phase,
                )
            )

    def _markers(self, text: str, low: str, number: int, source: str | None) -> None:
        plain = text.isascii()
        if _may_match(_CAPTURE_START_GATE, low, plain) and _CAPTURE_START.search(text):
            self._capture_active = True
            self._capture_finished.clear()
            self._loading.clear()
        if _may_match(_CAPTURE_FRAME_GATE, low, plain) and _CAPTURE_FRAME.search(text):
            self._capture_frames.append(number)
            # A traceback printed after its exception line (Ray's format): the OOM
            # just above belongs to the capture too.
            for event in self._pending_oom:
                if 0 <= number - event.line <= _CAPTURE_WINDOW and event.path == self._path:
                    event.during_capture = True
                    event.phase = "graph_capture"
        if _may_match(_LOAD_START_GATE, low, plain) and _LOAD_START.search(text):
            self._loading.add(source)
            if "process_weights_after_loading" in low:
                # A traceback printed after its exception line (Ray's format): the OOM
                # just above came from the weights' post-processing.
                for event in self._pending_oom:
                    near = 0 <= number - event.line <= _CAPTURE_WINDOW and event.path == self._path
                    if near and event.phase is None:
                        event.phase = "weight_loading"
        if _may_match(_LOAD_END_GATE, low, plain) and _LOAD_END.search(text):
            # The shard progress bar prints without the actor's prefix (the prefix stands alone
            # on the line above it): a rank's end of loading closes the unprefixed load too.
            self._loading.discard(source)
            self._loading.discard(None)
        if _may_match(_CAPTURE_END_GATE, low, plain) and _CAPTURE_END.search(text):
            self._serving = self._serving or "application startup complete" in low
            if source is None or "graph capturing finished" not in low:
                self._capture_active = False
            else:
                self._capture_finished.add(source)
        if len(self._memory_lines) < _MAX_MEMORY_LINES and any(hint in low for hint in _MEMORY_HINTS):
            self._memory_lines.append(text)

    def _add(self, event: _Event) -> None:
        finding = self.findings.get(event.finding)
        if finding is None:
            finding = self.findings[event.finding] = _Finding(event.finding)
        finding.add(event)

    # -- output ----------------------------------------------------------------
    def _sharpen_with_context(self) -> None:
        """An address the inventory says is wrong turns a Ray hint into an error."""
        acc = self.findings.get("ray_node_ip_mismatch")
        if acc is None or not self.context.hosts:
            return
        for item in acc.evidence:
            found = _NODE_IP.search(item["text"])
            if found and self.context.addresses.get(found.group(1), ("", "unknown"))[1] != "ib":
                acc.severity = "error"

    def _evidence_order(self, item: Mapping[str, Any]) -> tuple[int, int]:
        path = item.get("path")
        return (self.paths.index(path) if path in self.paths else 0, item["line"])

    def finish(self) -> dict[str, Any]:
        """Resolve pending classifications, apply the precedence table, and report."""
        if self._memory_lines:
            self.memory = parse_memory_lines(self._memory_lines)
            self.memory.pop("lines_matched", None)
        for event in self._oom_events:
            event.finding = "cuda_graph_capture_oom" if event.during_capture else "cuda_oom"
            self._add(event)
        self._oom_events.clear()
        multi_node = len(self._seen_hosts) > 1 or len(self.context.hosts) > 1
        resolve.socket_fallback(self.findings, self._socket_fallback, multi_node, self.context)
        self._socket_fallback.clear()
        self.nccl_releases = set(self._nccl_versions)
        resolve.nccl_versions(self.findings, self._nccl_versions)
        self._nccl_versions.clear()
        resolve.single_driver_oom_line(self.findings)

        present = set(self.findings)
        explained_by: dict[str, list[str]] = {}
        for cause in FINDING_IDS:
            if cause not in present:
                continue
            for effect in _EXPLAINS[cause]:
                if effect in present:
                    explained_by.setdefault(effect, []).append(cause)

        self._sharpen_with_context()
        resolve.causes_become_errors(self.findings)
        findings = []
        explained = []
        for finding_id in sorted(present, key=_ORDER.__getitem__):
            acc = self.findings[finding_id]
            causes = explained_by.get(finding_id, [])
            hidden = bool(causes) and finding_id in WRAPPERS
            if causes:
                explained.append({"id": finding_id, "explained_by": causes, "reported": not hidden})
            if hidden:
                continue
            summary = _SUMMARIES[finding_id](acc, self)
            if causes:
                summary += f" Probably a consequence of {', '.join(causes)} (reported above)."
            item = {
                "id": finding_id,
                "severity": acc.severity,
                "summary": summary,
                "fix": _fix(finding_id, acc, self),
                "evidence": sorted(acc.evidence, key=self._evidence_order),
            }
            if acc.phase is not None and finding_id in PHASE_FINDINGS:
                item["phase"] = acc.phase
            findings.append(item)
        return {
            "findings": findings,
            "root_cause": findings[0]["id"] if findings and findings[0]["severity"] == "error" else None,
            "explained": explained,
            "memory": dict(self.memory),
            "lines_read": self.lines_read,
            "paths": list(self.paths),
        }
