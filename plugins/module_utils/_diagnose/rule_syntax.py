# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""How a rule is written: key phrases compiled loosely, and the words every match holds.

The words let the prefilter and the scanner skip a regex that cannot match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


def _rx(pattern: str) -> re.Pattern[str]:
    """Compile a key phrase: case-insensitive, and any space may be missing or doubled.

    Terminal wrapping and re-flowed copies lose or add blanks; a phrase glued back
    together from two physical lines still matches.
    """
    return re.compile(pattern.replace(" ", r"\s*"), re.IGNORECASE)


_NUM = r"(-?\d+(?:\.\d+)?)"
_ADDR = r"([0-9A-Za-z][\w.:-]*?)"


@dataclass(frozen=True)
class Rule:
    """One key phrase: which finding it feeds, at what severity, and which variant.

    ``anchors`` are lower-case words of which every match contains one (derived from
    the pattern, or given where the derived word is too common); a line without any
    skips the regex, and a line without any rule's anchor is skipped altogether, which
    keeps a busy log cheap.

    ``needs`` are the lower-case words the pattern itself spells out, which every match
    in an ASCII line contains; a line that lacks one cannot match, so the regex is not
    run. Unlike the anchors they change no result, only the cost.
    """

    finding: str
    severity: str
    pattern: re.Pattern[str]
    kind: str
    anchors: tuple[str, ...]
    needs: tuple[str, ...] = ()


def _literal_words(pattern: str, shortest: int = 4) -> list[str] | None:
    """The literal words that every match of ``pattern`` must contain, in pattern order.

    Escapes, character classes, groups and optional or repeated characters are cut
    out, so what is left is spelt letter for letter in every match. ``None`` when an
    alternation outside any group leaves nothing certain.
    """
    text = re.sub(r"\\.", " ", pattern)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    previous = None
    while previous != text:
        previous = text
        text = re.sub(r"\([^()]*\)", " ", text)
    if "|" in text or "(" in text:
        return None
    text = re.sub(r".[?*]", " ", text)
    text = re.sub(r".\{[^}]*\}", " ", text)
    return re.findall(rf"[A-Za-z_/]{{{shortest},}}", text)


def _anchor(pattern: str) -> str | None:
    """The longest word that every match of ``pattern`` must contain, if one is certain."""
    words = _literal_words(pattern)
    return max(words, key=len).lower() if words else None


def _needs(pattern: str) -> tuple[str, ...]:
    """The words of ``pattern`` to test before running it (see :class:`Rule`)."""
    words = _literal_words(pattern, 3) or []
    return tuple(sorted({word.lower() for word in words}, key=len, reverse=True))


def _top_branches(pattern: str) -> list[str]:
    """``pattern`` split at each ``|`` that no group or character class encloses."""
    branches, depth, start, index, in_class = [], 0, 0, 0, False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            # A "]" first in the class (after an optional "^") is a literal.
            if pattern[index + 1 : index + 2] == "^":
                index += 1
            if pattern[index + 1 : index + 2] == "]":
                index += 1
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            branches.append(pattern[start:index])
            start = index + 1
        index += 1
    branches.append(pattern[start:])
    return branches


def _gate(pattern: str) -> tuple[tuple[str, ...], ...] | None:
    """The words of each top-level branch of ``pattern``.

    An ASCII line that lacks a word of every branch cannot match. ``None`` when some
    branch spells out no certain word (the regex must always run).
    """
    gate = []
    for branch in _top_branches(pattern):
        found = _literal_words(branch, 3)
        if not found:
            return None
        gate.append(tuple(sorted({word.lower() for word in found}, key=len, reverse=True)))
    return tuple(gate)


def _rule(finding: str, severity: str, kind: str, pattern: str, *anchors: str) -> Rule:
    derived = _anchor(pattern)
    if not anchors and derived is None:
        raise ValueError(f"rule {finding}/{kind} needs explicit anchors: {pattern}")
    return Rule(finding, severity, _rx(pattern), kind, anchors or (derived,), _needs(pattern))
