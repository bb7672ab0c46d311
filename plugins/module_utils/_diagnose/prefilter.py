# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The prefilter: which lines are worth a close look, decided for whole blocks at once.

A line holding none of the trigger tokens matches no rule and no marker. The block
prefilter finds the lines that hold one with a few regex passes per block; the rules
a line may match follow from the tokens it holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.precedence import (
    _JUNCTION,
    _RECORD_STARTS,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.rule_syntax import Rule
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.rules import RULES

# A line is looked at closely only when it holds one of these lower-case words: every
# rule's anchors, the CUDA graph capture and weight loading markers, and the memory lines quoted in
# summaries. Everything else is noise and costs only these substring tests.
_MARKER_TOKENS = (
    "capturing",
    "profiling cuda graph",
    "capture_",
    "torch.cuda.graph",
    "cudagraph",
    "graph_capture",
    "cuda_graph",
    "init engine",
    "api server",
    "startup complete",
    # weight loading (rules._LOAD_START_SOURCE; "Model loading took" and "Loading
    # weights took" hold "took", a memory token). Only the shard bar's first print: the
    # bar repeats once per shard and a token on every print would cost (bench/diagnose).
    "to load model",
    "completed | 0/",
    "process_weights_after",
)
_MEMORY_TOKENS = ("took", "kv cache memory", "kv cache size", "actual usage", "free memory", "takes")
_ALL_TOKENS = list(
    dict.fromkeys([anchor for rule in RULES for anchor in rule.anchors] + [*_MARKER_TOKENS, *_MEMORY_TOKENS])
)
# A token that contains another adds nothing to the filter ("node_out_of_memory" and
# "memory"); dropping it keeps the per-line cost down.
TRIGGER_TOKENS: tuple[str, ...] = tuple(
    token for token in _ALL_TOKENS if not any(other != token and other in token for other in _ALL_TOKENS)
)

# Each anchor with the rules (by index, in table order) it opens.
_ANCHOR_RULES: tuple[tuple[str, tuple[int, ...]], ...] = tuple(
    (anchor, tuple(index for index, rule in enumerate(RULES) if anchor in rule.anchors))
    for anchor in dict.fromkeys(anchor for rule in RULES for anchor in rule.anchors)
)
# Every anchor holds a trigger token: a line's tokens name the only anchors to test.
_TOKEN_ANCHORS: dict[str, tuple[tuple[str, tuple[int, ...]], ...]] = {
    token: tuple(entry for entry in _ANCHOR_RULES if token in entry[0]) for token in TRIGGER_TOKENS
}


def _ascii_lower(text: str) -> str:
    """``text.lower()``, with any non-ASCII character replaced by ``?``.

    It holds exactly the ASCII words the lower-cased text holds (no token has a
    ``?``), and substring tests on an ASCII string are much cheaper.
    """
    low = text.lower()
    return low if low.isascii() else low.encode("ascii", "replace").decode("ascii")


# -- the block prefilter ------------------------------------------------------
#
# A file is read in blocks of whole lines. Instead of testing every line for every
# trigger token, a few regex passes over the whole block (lower-cased, line breaks
# removed, so a token a terminal cut in two is found too) name the few lines that
# hold a token or sit next to one; only those take the per-line path. Each pass
# looks for one "pivot" letter, rare in logs, and checks the tokens around it.
_PIVOT_PREFERENCE = "kvbfgudlo"
# Bytes of the last _JUNCTION characters of a line, at most (UTF-8).
_TAIL_BYTES = 4 * _JUNCTION


def _pivot_rank(char: str) -> int:
    found = _PIVOT_PREFERENCE.find(char)
    return found if found >= 0 else len(_PIVOT_PREFERENCE) + ord(char)


def _trie_source(node: dict[str, Any]) -> str:
    alternatives = []
    for key in sorted(node):
        if key == "":
            alternatives.extend(f"(?<={re.escape(token)})" for token in sorted(node[key]))
        else:
            alternatives.append(re.escape(key) + _trie_source(node[key]))
    return alternatives[0] if len(alternatives) == 1 else "(?:" + "|".join(alternatives) + ")"


def _pivot_scanners(
    tokens: Iterable[str],
) -> tuple[tuple[re.Pattern[bytes], int, int, tuple[str, ...], tuple[tuple[int, bytes], ...]], ...]:
    """One ``(regex, before, after, tokens, spans)`` per pivot letter.

    The regex matches the pivot letter of any of ``tokens`` (the rest of the token is
    checked by look-ahead and look-behind, so overlapping tokens are all found, and a
    line holds one of ``tokens`` only where the regex matches); the token lies within
    ``before`` bytes before and ``after`` bytes from the match start.
    """
    groups: dict[str, list[tuple[int, str]]] = {}
    for token in tokens:
        if not token.isascii() or token != token.lower():
            raise ValueError(f"trigger token {token!r} is not lower-case ASCII")
        index = min(range(len(token)), key=lambda at, token=token: _pivot_rank(token[at]))
        groups.setdefault(token[index], []).append((index, token))
    scanners = []
    for pivot, items in sorted(groups.items()):
        tree: dict[str, Any] = {}
        for index, token in items:
            node = tree
            for char in token[index + 1 :]:
                node = node.setdefault(char, {})
            node.setdefault("", set()).add(token)
        source = re.escape(pivot) + "(?=" + _trie_source(tree) + ")"
        before = max(index for index, _ in items)
        after = max(len(token) - index for index, token in items)
        ordered = tuple(token for _, token in items)
        spans = tuple((index, token.encode("ascii")) for index, token in items)
        scanners.append((re.compile(source.encode("ascii")), before, after, ordered, spans))
    return tuple(scanners)


_PIVOT_SCANNERS = _pivot_scanners(TRIGGER_TOKENS)


def _matched_span(joined: bytes, at: int, spans: tuple[tuple[int, bytes], ...]) -> tuple[int, int]:
    """``(before, after)`` of the tokens that really match at pivot ``at`` of ``joined``.

    A scanner's own ``before`` / ``after`` hold for its longest token; a match near a
    line's edge is measured exactly, so a long token in the same pass does not make
    every short one look as if it reached into the next line.
    """
    before = after = 0
    for index, token in spans:
        start = at - index
        if start >= 0 and joined.startswith(token, start):
            before = max(before, index)
            after = max(after, len(token) - index)
    return before, after


# The tokens of the scanners in a bit mask (bit i: _PIVOT_SCANNERS[i]), filled on use.
_MASK_TOKENS: dict[int, tuple[str, ...]] = {}


def _mask_tokens(mask: int) -> tuple[str, ...]:
    tokens = _MASK_TOKENS.get(mask)
    if tokens is None:
        chosen = {token for bit, entry in enumerate(_PIVOT_SCANNERS) if mask >> bit & 1 for token in entry[3]}
        tokens = _MASK_TOKENS[mask] = tuple(token for token in TRIGGER_TOKENS if token in chosen)
    return tokens


# Characters whose str.lower() holds ASCII letters (U+0130, U+212A), UTF-8 encoded: a
# line with one could hold a token that the bytes do not spell out.
_LOWER_TO_ASCII = (b"\xc4\xb0", b"\xe2\x84\xaa")
# ip= after an ASCII non-word byte or at a line start; after a non-ASCII character
# whether \b holds depends on the character, so those lines take the per-line path.
# (Both open with the literal "ip=", which the regex engine finds fast.)
_IP_BYTES = re.compile(rb"ip=(?<![A-Za-z0-9_\x80-\xff]ip=)([0-9A-Fa-f.:]+)")
_IP_AFTER_NON_ASCII = re.compile(rb"ip=(?<=[\x80-\xff]ip=)")
_RECORD_STARTS_BYTES = tuple(start.encode("ascii") for start in _RECORD_STARTS)
_E_LINE = re.compile(rb"\nE   ")


def _candidate_rules(text: str, low: str, tokens: Iterable[str] | None = None) -> list[Rule]:
    """The rules, in table order, whose anchor ``low`` holds and that ``text`` may match.

    ``low`` is :func:`_ascii_lower` of ``text``; ``tokens``, when given, are the
    trigger tokens of a line ``text`` was cut from (only anchors holding one can be
    in ``low``). A rule whose ``needs`` an ASCII ``text`` lacks cannot match it and
    is left out; for any other text only the anchors decide.
    """
    if tokens is None:
        anchors = _ANCHOR_RULES
    else:
        anchors = tuple(dict.fromkeys(entry for token in tokens for entry in _TOKEN_ANCHORS[token]))
    opened = [indexes for anchor, indexes in anchors if anchor in low]
    if not opened:
        return []
    order = opened[0] if len(opened) == 1 else sorted(set().union(*opened))
    if not text.isascii():
        return [RULES[index] for index in order]
    rules = []
    for index in order:
        rule = RULES[index]
        for word in rule.needs:
            if word not in low:
                break
        else:
            rules.append(rule)
    return rules


def _may_match(gate: tuple[tuple[str, ...], ...] | None, low: str, plain: bool) -> bool:
    """False only when an ASCII (``plain``) line lacks a word of every branch of ``gate``."""
    if gate is None or not plain:
        return True
    for words in gate:
        for word in words:
            if word not in low:
                break
        else:
            return True
    return False
