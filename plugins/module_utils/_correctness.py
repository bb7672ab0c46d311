# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The correctness probe: identical greedy requests sent at once must give identical answers,
equal to the reference recorded for the running deployment.

vLLM's greedy sampling (``temperature: 0``) with a fixed per-request ``seed`` gives one
answer per prompt, but its batch-invariance is not guaranteed: "vLLM does not guarantee the
reproducibility of the results by default", and the same request can give another answer
when batched differently (docs/bench.md cites the sources). The probe sends N identical
requests *at once* per prompt, so they share batches, and asks:

1. every request succeeded and answered non-empty text;
2. its ``usage.completion_tokens`` is within [min_tokens, max_tokens] (the tokens-per-answer
   sanity check: an engine that stops at once, or ignores max_tokens, fails here);
3. the N answers of each prompt are identical;
4. the answers equal the reference recorded in the head's deployed record (section
   ``correctness``) for the same deployment key. The key is a digest of what decides the
   answers: the image's ID, the model and served name, serve's launch argv (no secret: it
   names the key only as ``${VLLM_API_KEY}``) and the probe's own request (prompts, seed,
   max_tokens). With no reference for that key, this run's answers become the reference.

The HTTP part is stdlib ``urllib`` and threads: this is a correctness check, not a load
generator (roles/bench runs llama-benchy for that).
"""

from __future__ import annotations

import hashlib
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

SECTION = "correctness"
ERROR_CHARS = 300


def _digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def probe_request(prompts: Sequence[str], *, seed: int, max_tokens: int) -> dict[str, Any]:
    """What the probe asks, as it is keyed: the prompts, their seed and their length."""
    return {"prompts": list(prompts), "seed": int(seed), "max_tokens": int(max_tokens), "temperature": 0}


def deployment_inputs(record: Mapping[str, Any]) -> dict[str, Any]:
    """What decides the answers, from the head's deployed record (docs/deployed-record.md)."""
    sections = record.get("sections") if isinstance(record, Mapping) else None
    sections = sections if isinstance(sections, Mapping) else {}
    image = sections.get("image") if isinstance(sections.get("image"), Mapping) else {}
    serve = sections.get("serve") if isinstance(sections.get("serve"), Mapping) else {}
    return {
        "image_id": image.get("id"),
        "image": serve.get("image") or image.get("ref"),
        "model": serve.get("model"),
        "served_model_name": serve.get("served_model_name"),
        "argv_digest": _digest(serve.get("argv") or []),
    }


def deployment_key(inputs: Mapping[str, Any], request: Mapping[str, Any]) -> str:
    return _digest({"deployment": dict(inputs), "request": dict(request)})


def missing_inputs(inputs: Mapping[str, Any]) -> list[str]:
    """Inputs the record lacks: without them the key cannot tell two deployments apart."""
    return [name for name in ("image_id", "model", "served_model_name") if not inputs.get(name)]


def reference_of(record: Mapping[str, Any]) -> dict[str, Any]:
    sections = record.get("sections") if isinstance(record, Mapping) else None
    found = sections.get(SECTION) if isinstance(sections, Mapping) else None
    return dict(found) if isinstance(found, Mapping) else {}


def answer_of(response: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """The text and completion tokens of a chat completion, None where absent."""
    choices = response.get("choices")
    text = None
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        message = choices[0].get("message")
        if isinstance(message, Mapping) and isinstance(message.get("content"), str):
            text = message["content"]
    usage = response.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, Mapping) else None
    return text, tokens if isinstance(tokens, int) else None


def judge(
    prompts: Sequence[str],
    results: Sequence[Sequence[Mapping[str, Any]]],
    *,
    key: str,
    reference: Mapping[str, Any],
    min_tokens: int,
    max_tokens: int,
) -> dict[str, Any]:
    """The verdict on one probe: results[i] are the N results of prompts[i], each
    {"error": str|None, "text": str|None, "completion_tokens": int|None}."""
    problems: list[str] = []
    answers: list[dict[str, Any]] = []
    # What the upgrade's gate reads (_upgrade.probe_input): each kind of problem apart.
    other: list[str] = []
    identical = tokens_sane = True
    for index, (prompt, replies) in enumerate(zip(prompts, results, strict=True)):
        label = f"prompt {index + 1}"
        errors = [r["error"] for r in replies if r.get("error")]
        for error in dict.fromkeys(errors):
            other.append(f"{label}: {errors.count(error)} of {len(replies)} request(s) failed: {error}")
            problems.append(other[-1])
        good = [r for r in replies if not r.get("error")]
        texts = [r.get("text") for r in good]
        if any(not (text or "").strip() for text in texts):
            tokens_sane = False
            problems.append(f"{label}: an answer is empty")
        for tokens in sorted({r.get("completion_tokens") for r in good}, key=lambda t: (t is None, t or 0)):
            if tokens is None:
                tokens_sane = False
                problems.append(f"{label}: an answer has no usage.completion_tokens")
            elif not min_tokens <= tokens <= max_tokens:
                tokens_sane = False
                problems.append(f"{label}: {tokens} completion tokens, outside [{min_tokens}, {max_tokens}]")
        distinct = list(dict.fromkeys(texts))
        if len(distinct) > 1:
            identical = False
            problems.append(
                f"{label}: {len(distinct)} different answers to {len(good)} identical requests sent at once "
                f"(temperature 0, fixed seed)"
            )
        answers.append(
            {
                "prompt": prompt,
                "text": distinct[0] if len(distinct) == 1 else None,
                "completion_tokens": good[0].get("completion_tokens") if len(distinct) == 1 else None,
                "variants": len(distinct),
            }
        )
    consistent = not problems
    digest = _digest([a["text"] for a in answers]) if consistent else None
    recorded = reference.get("deployment_key") == key and bool(reference.get("answers"))
    if consistent and recorded and reference.get("digest") != digest:
        for index, (mine, theirs) in enumerate(zip(answers, reference["answers"], strict=False)):
            if not isinstance(theirs, Mapping) or mine["text"] != theirs.get("text"):
                problems.append(
                    f"prompt {index + 1}: the answer differs from the reference recorded at "
                    f"{reference.get('recorded_at', 'an unknown time')} for this deployment"
                )
        if len(reference["answers"]) != len(answers) or not problems:
            problems.append("the answers differ from the reference recorded for this deployment")
    ok = not problems
    return {
        "ok": ok,
        "problems": problems,
        "identical": identical,
        "tokens_sane": tokens_sane,
        # Only meaningful when compared_with_reference: the consistent answers equal the reference.
        "matches_reference": recorded and consistent and reference.get("digest") == digest,
        "other_problems": other,
        "answers": answers,
        "digest": digest,
        "deployment_key": key,
        # A reference is written only when none exists for this deployment, from consistent answers.
        "record_reference": ok and not recorded,
        "compared_with_reference": recorded,
    }


def reference_section(
    verdict: Mapping[str, Any], inputs: Mapping[str, Any], request: Mapping[str, Any]
) -> dict:
    """The ``correctness`` section of the deployed record (no secret: prompts, answers, digests)."""
    return {
        "deployment_key": verdict["deployment_key"],
        "inputs": dict(inputs),
        "request": {k: v for k, v in request.items() if k != "prompts"},
        "answers": [
            {"prompt": a["prompt"], "text": a["text"], "completion_tokens": a["completion_tokens"]}
            for a in verdict["answers"]
        ],
        "digest": verdict["digest"],
    }


def send_identical(
    url: str,
    body: Mapping[str, Any],
    *,
    count: int,
    timeout: float,
    api_key: str = "",
) -> list[dict[str, Any]]:
    """POST the same body ``count`` times at once (threads released together); one result each."""
    data = json.dumps(body).encode("utf-8")
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    results: list[dict[str, Any]] = [{"error": "not sent", "text": None, "completion_tokens": None}] * count
    gate = threading.Barrier(count)

    def one(index: int) -> None:
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")
        try:
            gate.wait(timeout)
            with urllib.request.urlopen(request, timeout=timeout) as response:
                text, tokens = answer_of(json.loads(response.read().decode("utf-8")))
            results[index] = {"error": None, "text": text, "completion_tokens": tokens}
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:ERROR_CHARS]
            results[index] = {"error": f"HTTP {exc.code}: {detail}", "text": None, "completion_tokens": None}
        except (OSError, ValueError, threading.BrokenBarrierError) as exc:
            results[index] = {
                "error": f"{type(exc).__name__}: {exc}",
                "text": None,
                "completion_tokens": None,
            }

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout * 2 + 5)
    return results


def chat_body(model: str, prompt: str, *, seed: int, max_tokens: int) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "seed": seed,
        "max_tokens": max_tokens,
    }
