# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Redaction of secrets from any text the project writes or prints: one function, ``redact``.

Used by the support bundle (``_support_bundle``) and the CLI's log output. It replaces with
``[REDACTED]``, case-insensitively:

- the current secrets by value (the API key, the Hugging Face token, ...), passed in by the caller;
- a value after a secret-named key in every form the project's logs carry: env and YAML
  (``VLLM_API_KEY=...``, ``HF_TOKEN: ...``), Python repr and JSON, quoted strings and lists
  (``'api_key': '...'``, ``'api_key': ['...']``, ``"api_key": "..."``) and command-line flags
  (``--api-key X``, ``--hf-token=X``);
- URL credentials (``rsync://user:pw@host``, ``https://u:p@host``): the password;
- ``Authorization: Bearer ...`` headers and any ``Bearer <token>``;
- Hugging Face tokens on their own (``hf_`` followed by 20 or more letters and digits).

A secret-named key is one whose name ends in api_key/apikey/api-key, token, secret,
password/passwd or access_key (so ``max_num_batched_tokens`` or ``tokenizer`` are not touched).
Values shorter than MIN_SECRET_LENGTH are not redacted by value: they would redact ordinary words.
"""

from __future__ import annotations

import json
import re

REDACTED = "[REDACTED]"
MIN_SECRET_LENGTH = 6

# A key named for a secret; it ends with the secret word (no letter, digit or _ after it).
_NAME = r"[A-Za-z0-9_.-]*?(?:api[_-]?key|token|secret|passw(?:or)?d|access[_-]?key)(?![A-Za-z0-9_])"
_MASKED = r"(?:\*+|\[REDACTED\]|None|null|none|NULL)"

_PATTERNS = (
    # 'api_key': ['k1', 'k2'] / "api_key": ["k"] (Python repr or JSON list): the whole list
    re.compile(rf"(?P<keep>(?P<q>['\"]){_NAME}(?P=q)\s*:\s*\[)(?P<secret>[^\]]*)(?=\])", re.IGNORECASE),
    # 'api_key': 'k' / "api_key": "k" (quoted key, quoted value)
    re.compile(
        rf"(?P<keep>(?P<q>['\"]){_NAME}(?P=q)\s*:\s*(?P<v>['\"]))(?!{_MASKED}(?P=v))(?P<secret>(?:\\.|(?!(?P=v)).)+)(?=(?P=v))",
        re.IGNORECASE,
    ),
    # 'api_key': k (quoted key, bare value: not None/null/***)
    re.compile(
        rf"(?P<keep>(?P<q>['\"]){_NAME}(?P=q)\s*:\s*)(?!{_MASKED}[\s,}}\]]|['\"\[])(?P<secret>[^\s,}}\]]+)",
        re.IGNORECASE,
    ),
    # --api-key X, --api-key=X, --hf-token 'X', --password X (command lines)
    re.compile(
        r"(?P<keep>--(?:api-key|hf-token|token|password|secret)(?:=|\s+)['\"]?)(?!\$\{)(?P<secret>[^\s\"']+)",
        re.IGNORECASE,
    ),
    # VLLM_API_KEY=k, HF_TOKEN: k, export RSYNC_PASSWORD="k" (env files, YAML, docker inspect Env entries)
    re.compile(
        rf"(?P<keep>(?<![A-Za-z0-9_.-]){_NAME}\s*[=:]\s*['\"]?)(?!{_MASKED}(?:['\"\s,}}\]]|$))(?P<secret>[^\s\"',}}\]]+)",
        re.IGNORECASE,
    ),
    # scheme://user:password@host (rsync, https, ...)
    re.compile(r"(?P<keep>\b[a-z][a-z0-9+.-]*://[^\s/:@'\"]*:)(?P<secret>[^\s/@'\"]+)(?=@)", re.IGNORECASE),
    # Authorization: Bearer X, and any Bearer token
    re.compile(r"(?P<keep>\bbearer\s+)(?!\[REDACTED\])(?P<secret>[A-Za-z0-9._~+/=-]+)", re.IGNORECASE),
    # A Hugging Face token on its own
    re.compile(r"(?P<keep>)(?P<secret>\bhf_[A-Za-z0-9]{20,}\b)", re.IGNORECASE),
)


def _forms(value):
    """The ways a secret value is written in logs: as is, JSON-escaped and repr-escaped."""
    forms = {value, json.dumps(value)[1:-1], repr(value)[1:-1]}
    return {form for form in forms if len(form) >= MIN_SECRET_LENGTH}


def redact(text, secrets=()):
    """``text`` with every secret value and every recognised secret form replaced by [REDACTED]."""
    text = "" if text is None else str(text)
    values = set()
    for secret in secrets or ():
        if secret is not None and len(str(secret)) >= MIN_SECRET_LENGTH:
            values |= _forms(str(secret))
    for value in sorted(values, key=len, reverse=True):
        text = re.sub(re.escape(value), REDACTED, text, flags=re.IGNORECASE)
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: m.group("keep") + REDACTED, text)
    return text
