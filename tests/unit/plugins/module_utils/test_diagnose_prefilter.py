# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The fast paths of diagnose change no result.

``diagnose_paths`` reads a file in blocks and feeds only the lines a block-wide
prefilter picks; :meth:`Scanner.feed_lines` feeds every line and is the reference.
Rule and marker regexes are skipped on lines that lack the words they spell out.
These properties compare each fast path with the plain computation on lines from
every fixture, dressed up with prefixes, colours, wrapping and awkward characters.
"""

import sys

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _diagnose as diagnose
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose import (
    RULES,
    TRIGGER_TOKENS,
    Scanner,
    prefilter,
    rules,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.rules_runtime import PROVENANCE
from ansible_collections.sparkops.vllm.plugins.module_utils._log_lines import (
    clean_physical,
    iter_path_chunks,
    iter_path_lines,
    normalize,
)
from conftest import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FIXTURE_LINES = sorted(
    {
        line
        for path in sorted(FIXTURES.glob("*/*"))
        if path.is_file() and path.suffix in {".txt", ".log"}
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
        if line.strip()
    }
)
# Lines that hold a trigger token: where the work (and the risk) is.
TOKEN_LINES = [line for line in FIXTURE_LINES if any(token in line.lower() for token in TRIGGER_TOKENS)]
NOISE = [
    '(APIServer pid=301) INFO:     192.168.200.1:51422 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "(EngineCore_DP0 pid=412) (RayWorkerWrapper pid=588, ip=192.168.200.13) spark-2:588:588 [0] NCCL INFO "
    "Channel 02/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA",
    "\x1b[32mINFO\x1b[0m 04-09 02:11:12 [async_llm.py:271] Added request chatcmpl-1.",
    "Loading safetensors checkpoint shards:  50% Completed | 3/39 [00:12<01:10,  1.93it/s]",
    "",
    "   ",
]

_prefix = st.sampled_from(
    [
        "",
        "(EngineCore_DP0 pid=1) ",
        "(RayWorkerWrapper pid=2, ip=10.0.0.2) ",
        "(raylet, ip=192.168.200.13) ",
        "INFO 04-09 01:15:03 [core.py:708] ",
        "2026-04-09T01:15:02.553211Z ",
        "Apr 09 01:15:02 spark-1 vllm[2211]: ",
        "E   ",
        "E       ",
        "vllm-head-1  | ",
        "h100-15:139:1092 [7] ",
        "\x1b[36m",
        "\x1b[0m(pid=3, ip=10.0.0.3)\x1b[0m ",
        "\x1b]0;title\x07",
    ]
)
# Characters that make the bytes of a line say less than its text: colours, carriage
# returns, the two characters whose lower case is ASCII, other non-ASCII letters,
# an unterminated escape, and a non-ASCII letter right before ip=.
_oddity = st.sampled_from(
    ["", "\x1b[1;31m", "\r", "\r   \r", "\u0130", "\u212a", "\u00e9", "\u2588", "\x1b", "\u00e9ip=10.9.9.9 "]
)


@st.composite
def _physical_lines(draw):
    base = draw(
        st.sampled_from(TOKEN_LINES) if draw(st.booleans()) else st.sampled_from(FIXTURE_LINES + NOISE)
    )
    line = draw(_prefix) + draw(_prefix) + base
    if draw(st.integers(0, 4)) == 0:
        # A fixture's provenance line (the line path skips it), colour-dressed, or a near miss.
        line = draw(st.sampled_from([PROVENANCE, "\x1b[0m" + PROVENANCE, PROVENANCE.rstrip()])) + line
    if line and draw(st.integers(0, 3)) == 0:
        # Replace a letter with a look-alike or insert an escape code mid-word.
        at = draw(st.integers(0, len(line) - 1))
        line = line[:at] + draw(_oddity) + line[at + draw(st.integers(0, 1)) :]
    if draw(st.integers(0, 5)) == 0:
        line += draw(st.sampled_from([" [repeated 3x across cluster]", "\r", "\x1b[0m", "\r\x1b[0m"]))
    if line and draw(st.integers(0, 2)) == 0:
        # A terminal wrapped it: two physical lines, the cut anywhere (mid-token too).
        at = draw(st.integers(1, len(line)))
        return [line[:at], draw(st.sampled_from(["", "", "E   "])) + line[at:]]
    return [line]


_logs = st.lists(_physical_lines(), min_size=1, max_size=40).map(lambda parts: [x for p in parts for x in p])


def _state(scanner):
    hosts = scanner._seen_hosts if len(scanner._seen_hosts) < 64 else len(scanner._seen_hosts) >= 64
    return {
        "lines_read": scanner.lines_read,
        "bytes_read": scanner.bytes_read,
        "hosts": hosts,
        "memory_lines": list(scanner._memory_lines),
        "prev": (scanner._prev_line, scanner._prev_number, scanner._prev_matched),
        "result": scanner.finish(),
    }


def _both(tmp_path, lines, block_size, end="\n"):
    path = tmp_path / "serve.log"
    path.write_bytes(("\n".join(lines) + end).encode("utf-8", errors="surrogatepass"))
    reference = Scanner()
    reference.start_path(str(path))
    reference.feed_lines(iter_path_lines(str(path)))
    fast = Scanner()
    fast.start_path(str(path))
    fast.feed_file(str(path), block_size)
    return _state(fast), _state(reference)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=_logs, block_size=st.sampled_from([1, 7, 64, 300, 1 << 20]), end=st.sampled_from(["\n", ""]))
def test_block_prefilter_feeds_what_the_line_path_would(tmp_path, lines, block_size, end):
    fast, reference = _both(tmp_path, lines, block_size, end)
    assert fast == reference


# A provenance line ("# Source: ...", a fixture's description of the log) leaves the
# line path with nothing to join to. The block path restores that state itself for a
# line it does not feed one by one: the last line of the file, the last of a block, the
# one before a picked line. It used to restore the provenance text instead.
_EARLYOOM_SOURCE = (
    "# Source: Debian 12 (bookworm) package earlyoom 1.7-1+b1 on a lab node (spark-2), 2026-12-01:"
)


@pytest.mark.parametrize("end", ["\n", ""])
@pytest.mark.parametrize("block_size", [1, 7, 64, 300, 1 << 20])
@pytest.mark.parametrize(
    "lines",
    [
        pytest.param([_EARLYOOM_SOURCE], id="found-by-hypothesis"),
        pytest.param(["# Source: a log", ""], id="before-an-empty-last-line"),
        pytest.param([NOISE[0], "# Source: a log"], id="last-after-noise"),
        pytest.param(["\x1b[0m# Source: a log"], id="colour-dressed"),
        pytest.param(["# Source: a log", NOISE[0], TOKEN_LINES[0]], id="first-of-many"),
        pytest.param(["# Source: a log", "CUDA error: out of memory"], id="before-a-picked-line"),
        pytest.param(["# Source:a log"], id="near-miss-no-space"),
    ],
)
def test_a_provenance_line_not_fed_leaves_what_the_line_path_leaves(tmp_path, lines, block_size, end):
    fast, reference = _both(tmp_path, lines, block_size, end)
    assert fast == reference


@pytest.mark.parametrize("block_size", [1, 7, 64, 1 << 20])
def test_a_provenance_line_joins_no_wrapped_phrase(tmp_path, block_size):
    # Cut across two blocks, the provenance line and the next one spelled "CUDA out of
    # memory" at their seam: the block path reported a cuda_oom the line path never sees.
    lines = ["# Source: CUDA out of mem", "ory. Tried to allocate 2.00 GiB"]
    fast, reference = _both(tmp_path, lines, block_size)
    assert fast == reference
    assert fast["result"]["findings"] == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    line=st.sampled_from(TOKEN_LINES),
    cut=st.integers(1, 400),
    dress=st.tuples(
        st.sampled_from(["", "E   ", "(pid=1) ", " "]),
        st.sampled_from(["", " [repeated 2x across cluster]", "\x1b[0m"]),
    ),
    block_size=st.sampled_from([1, 50, 1 << 20]),
)
def test_every_seam_of_a_wrapped_token_line(tmp_path, line, cut, dress, block_size):
    head, tail = dress
    cut = min(cut, len(line))
    lines = [NOISE[0], line[:cut] + tail, head + line[cut:], NOISE[2]]
    fast, reference = _both(tmp_path, lines, block_size)
    assert fast == reference


def test_fixtures_and_a_long_noisy_log_give_the_same_result(tmp_path):
    for path in sorted(FIXTURES.glob("*/*")):
        if not path.is_file():
            continue
        reference = Scanner()
        reference.start_path(str(path))
        reference.feed_lines(iter_path_lines(str(path)))
        fast = Scanner()
        fast.start_path(str(path))
        fast.feed_file(str(path), 4096)
        assert _state(fast) == _state(reference), path.name
    lines = [NOISE[index % 4] for index in range(3000)]
    lines[1500:1500] = TOKEN_LINES[:200]
    fast, reference = _both(tmp_path, lines, 8192)
    assert fast == reference
    assert fast["result"]["findings"]


def test_more_than_64_hosts_still_make_a_multi_node_log(tmp_path):
    lines = [f"(RayWorkerWrapper pid={n}, ip=10.0.{n // 200}.{n % 200}) NCCL INFO hello" for n in range(300)]
    lines.append("spark-2:588:588 [0] NCCL INFO NET/IB : No device found.")
    fast, reference = _both(tmp_path, lines, 1000)
    assert fast["result"] == reference["result"]
    assert [item["id"] for item in fast["result"]["findings"]] == ["nccl_ib_error"]


def test_blocks_are_whole_lines(tmp_path):
    path = tmp_path / "log"
    content = b"a\r\nbb\n\n" + b"x" * 5000 + b"\nlast without newline"
    path.write_bytes(content)
    for size in (1, 2, 3, 100, 1 << 20):
        blocks = list(iter_path_chunks(str(path), size))
        assert b"".join(blocks) == content
        assert all(block.endswith(b"\n") for block in blocks[:-1])
        lines = [line for block in blocks for line in block.split(b"\n")[: block.count(b"\n")]]
        lines.append(blocks[-1].rsplit(b"\n", 1)[-1])
        assert [line.decode() for line in lines] == [line.rstrip("\n") for line in iter_path_lines(str(path))]


def test_only_two_characters_lower_to_ascii():
    odd = {
        chr(code).encode("utf-8")
        for code in range(0x80, sys.maxunicode + 1)
        if any(c < "\x80" for c in chr(code).lower())
    }
    assert odd == set(prefilter._LOWER_TO_ASCII)


# --- skipping regexes changes no match ---------------------------------------------


def _first_rule_reference(text):
    """The original loop: the first rule, in table order, with an anchor and a match."""
    low = text.lower()
    for rule in RULES:
        if any(anchor in low for anchor in rule.anchors):
            found = rule.pattern.search(text)
            if found:
                return rule, found.span(), found.groups()
    return None


def _first_rule_fast(text, tokens):
    for rule in prefilter._candidate_rules(text, prefilter._ascii_lower(text), tokens):
        found = rule.pattern.search(text)
        if found:
            return rule, found.span(), found.groups()
    return None


_texts = st.one_of(
    st.sampled_from(FIXTURE_LINES),
    st.builds(
        lambda line, at, oddity, upper: (
            (line[:at] + oddity + line[at:]).upper() if upper else line[:at] + oddity + line[at:]
        ),
        st.sampled_from(TOKEN_LINES),
        st.integers(0, 300),
        st.sampled_from(["", " ", "  ", "\u017f", "\u212a", "\u0130", "\u0131", "\u00e9", "\t"]),
        st.booleans(),
    ),
)


@settings(max_examples=600, deadline=None)
@given(text=_texts)
def test_candidate_rules_pick_the_rule_the_table_loop_picks(text):
    text = normalize(clean_physical(text))[0]
    line_tokens = tuple(token for token in TRIGGER_TOKENS if token in prefilter._ascii_lower(text))
    assert _first_rule_fast(text, line_tokens) == _first_rule_reference(text)
    assert _first_rule_fast(text, None) == _first_rule_reference(text)


@settings(max_examples=600, deadline=None)
@given(text=_texts)
def test_marker_gates_never_hide_a_match(text):
    low, plain = prefilter._ascii_lower(text), text.isascii()
    for gate, pattern in (
        (rules._CAPTURE_START_GATE, rules._CAPTURE_START),
        (rules._CAPTURE_FRAME_GATE, rules._CAPTURE_FRAME),
        (rules._CAPTURE_END_GATE, rules._CAPTURE_END),
    ):
        if pattern.search(text):
            assert prefilter._may_match(gate, low, plain)


def test_rule_needs_hold_on_every_matching_fixture_line():
    for line in FIXTURE_LINES:
        if not line.isascii():
            continue
        low = line.lower()
        for rule in RULES:
            if rule.pattern.search(line):
                assert all(word in low for word in rule.needs), (rule.kind, line)


def test_pivot_scanners_cover_every_token():
    for token in TRIGGER_TOKENS:
        text = f"xx {token} yy".encode()
        found = [entry for entry in prefilter._PIVOT_SCANNERS if entry[0].search(text)]
        assert [token in entry[3] for entry in found] == [True], token
    every = (1 << len(prefilter._PIVOT_SCANNERS)) - 1
    assert prefilter._mask_tokens(every) == TRIGGER_TOKENS


def test_a_phrase_cut_inside_its_trigger_word_is_found_in_and_across_blocks(tmp_path):
    # The seam of two lines may fall between two blocks, where no block's passes see it.
    checked = 0
    for line in TOKEN_LINES:
        if not line.isascii() or not diagnose.diagnose_text(line)["findings"]:
            continue
        low = line.lower()
        at = min(low.find(token) for token in TRIGGER_TOKENS if token in low)
        length = max(len(token) for token in TRIGGER_TOKENS if low.find(token) == at)
        for cut in range(at + 1, at + length):
            lines = [NOISE[0], line[:cut], line[cut:], NOISE[2]]
            for block_size in (1, len(NOISE[0]) + cut + 2, 1 << 20):
                fast, reference = _both(tmp_path, lines, block_size)
                assert fast == reference, (line, cut, block_size)
        checked += 1
    assert checked > 30


def test_every_pivot_is_a_rare_letter():
    # One regex pass per pivot letter over every block: a token whose letters are all
    # common (a, e, s, t, ...) would add a pass that matches nearly everywhere.
    pivots = {entry[0].pattern[:1].decode() for entry in prefilter._PIVOT_SCANNERS}
    assert pivots <= set(prefilter._PIVOT_PREFERENCE)
