"""The correctness probe's decisions (plugins/module_utils/_correctness.py)."""

from __future__ import annotations

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._correctness import (
    answer_of,
    deployment_inputs,
    deployment_key,
    judge,
    missing_inputs,
    probe_request,
    reference_of,
    reference_section,
)

PROMPTS = ["p1", "p2"]
REQUEST = probe_request(PROMPTS, seed=1234, max_tokens=32)
RECORD = {
    "schema": 1,
    "sections": {
        "image": {"ref": "sparkops/vllm-lab:ef23", "id": "sha256:b43c"},
        "serve": {
            "argv": ["vllm", "serve", "/srv/models/m", "--api-key", "${VLLM_API_KEY}"],
            "image": "sparkops/vllm-lab:ef23",
            "model": "/srv/models/m",
            "served_model_name": "m",
        },
    },
}
INPUTS = deployment_inputs(RECORD)
KEY = deployment_key(INPUTS, REQUEST)


def ok(text: str, tokens: int = 5) -> dict:
    return {"error": None, "text": text, "completion_tokens": tokens}


def verdict(results, reference=None, min_tokens=1, max_tokens=32):
    return judge(
        PROMPTS, results, key=KEY, reference=reference or {}, min_tokens=min_tokens, max_tokens=max_tokens
    )


CONSISTENT = [[ok("a")] * 4, [ok("b", 7)] * 4]
REFERENCE = reference_section(verdict(CONSISTENT), INPUTS, REQUEST) | {"recorded_at": "2026-12-04T12:00:00Z"}


@pytest.mark.parametrize(
    ("results", "reference", "problems", "record"),
    [
        # First probe of a deployment: consistent answers become the reference.
        (CONSISTENT, {}, [], True),
        # The same answers again: compared, nothing to record (a rerun of deploy stays changed=0).
        (CONSISTENT, REFERENCE, [], False),
        # A reference of another deployment (a new image): this run's answers are the new reference.
        (CONSISTENT, REFERENCE | {"deployment_key": "sha256:other"}, [], True),
        (
            [[ok("a"), ok("a"), ok("a!"), ok("a")], [ok("b", 7)] * 4],
            {},
            [
                "prompt 1: 2 different answers to 4 identical requests sent at once (temperature 0, fixed seed)"
            ],
            False,
        ),
        (
            [[ok("a")] * 4, [ok("c", 7)] * 4],
            REFERENCE,
            [
                "prompt 2: the answer differs from the reference recorded at 2026-12-04T12:00:00Z for this deployment"
            ],
            False,
        ),
        (
            [
                [ok("a")] * 3 + [{"error": "HTTP 503: down", "text": None, "completion_tokens": None}],
                [ok("b", 7)] * 4,
            ],
            {},
            ["prompt 1: 1 of 4 request(s) failed: HTTP 503: down"],
            False,
        ),
        ([[ok("  ")] * 4, [ok("b", 7)] * 4], {}, ["prompt 1: an answer is empty"], False),
        (
            [[ok("a", 0)] * 4, [ok("b", 33)] * 4],
            {},
            [
                "prompt 1: 0 completion tokens, outside [1, 32]",
                "prompt 2: 33 completion tokens, outside [1, 32]",
            ],
            False,
        ),
        (
            [[ok("a", None)] * 4, [ok("b", 7)] * 4],
            {},
            ["prompt 1: an answer has no usage.completion_tokens"],
            False,
        ),
    ],
    ids=[
        "first",
        "same",
        "new-deployment",
        "batch-variance",
        "drift",
        "error",
        "empty",
        "token-bounds",
        "no-usage",
    ],
)
def test_judge(results, reference, problems, record):
    result = verdict(results, reference)
    assert result["problems"] == problems
    assert result["ok"] is (not problems)
    assert result["record_reference"] is record


def test_token_floor_is_a_setting():
    assert verdict(CONSISTENT, min_tokens=6)["problems"] == ["prompt 1: 5 completion tokens, outside [6, 32]"]


def test_key_moves_with_what_decides_the_answers():
    other_image = {**RECORD, "sections": {**RECORD["sections"], "image": {"id": "sha256:ffff"}}}
    assert deployment_key(deployment_inputs(other_image), REQUEST) != KEY
    assert deployment_key(INPUTS, probe_request(PROMPTS, seed=1, max_tokens=32)) != KEY
    assert deployment_key(INPUTS, probe_request(PROMPTS, seed=1234, max_tokens=16)) != KEY
    assert deployment_key(deployment_inputs(RECORD), REQUEST) == KEY


def test_reference_section_holds_no_secret_and_no_prompt_copy_in_request():
    section = reference_section(verdict(CONSISTENT), INPUTS, REQUEST)
    assert section["answers"] == [
        {"prompt": "p1", "text": "a", "completion_tokens": 5},
        {"prompt": "p2", "text": "b", "completion_tokens": 7},
    ]
    assert section["request"] == {"seed": 1234, "max_tokens": 32, "temperature": 0}
    assert "VLLM_API_KEY" not in str(section)  # the argv is kept as a digest only
    assert section["digest"].startswith("sha256:")


@pytest.mark.parametrize(
    ("record", "missing"),
    [
        ({}, ["image_id", "model", "served_model_name"]),
        ("garbage", ["image_id", "model", "served_model_name"]),
        (RECORD, []),
    ],
)
def test_missing_inputs(record, missing):
    assert missing_inputs(deployment_inputs(record)) == missing


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ({"choices": [{"message": {"content": "hi"}}], "usage": {"completion_tokens": 1}}, ("hi", 1)),
        ({"choices": [], "usage": {}}, (None, None)),
        ({"choices": [{"message": {"content": None}}]}, (None, None)),
    ],
)
def test_answer_of(response, expected):
    assert answer_of(response) == expected


def test_reference_of_reads_the_section_or_nothing():
    assert reference_of({"sections": {"correctness": {"digest": "x"}}}) == {"digest": "x"}
    assert reference_of({"sections": {"correctness": "bad"}}) == {}
    assert reference_of({}) == {}


@pytest.mark.parametrize(
    ("results", "reference", "flags"),
    [
        (CONSISTENT, {}, (True, True, False, [])),
        (CONSISTENT, REFERENCE, (True, True, True, [])),
        ([[ok("a"), ok("a!")] * 2, [ok("b", 7)] * 4], REFERENCE, (False, True, False, [])),
        ([[ok("a")] * 4, [ok("c", 7)] * 4], REFERENCE, (True, True, False, [])),
        ([[ok("a", 0)] * 4, [ok("b", 7)] * 4], {}, (True, False, False, [])),
        ([[ok("  ")] * 4, [ok("b", 7)] * 4], {}, (True, False, False, [])),
        (
            [
                [ok("a")] * 3 + [{"error": "HTTP 503: down", "text": None, "completion_tokens": None}],
                [ok("b", 7)] * 4,
            ],
            {},
            (True, True, False, ["prompt 1: 1 of 4 request(s) failed: HTTP 503: down"]),
        ),
    ],
    ids=["first", "same", "garbled", "drift", "tokens", "empty", "error"],
)
def test_judge_reports_each_kind_of_problem_apart_for_the_upgrade_gate(results, reference, flags):
    # (identical, tokens_sane, matches_reference, other_problems): what _upgrade.probe_input reads.
    result = verdict(results, reference)
    assert (
        result["identical"],
        result["tokens_sane"],
        result["matches_reference"],
        result["other_problems"],
    ) == flags
