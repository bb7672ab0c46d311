"""One redaction for every text the project writes: each form a secret takes in a log, any case."""

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _redact
from ansible_collections.sparkops.vllm.plugins.module_utils._redact import redact

KEY = "sk-lab-0123456789abcdef"
HF = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
R = "[REDACTED]"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # Python repr (vLLM's non-default args, Ansible -vvv results)
        (f"{{'api_key': '{KEY}', 'x': 1}}", f"{{'api_key': '{R}', 'x': 1}}"),
        (f"{{'api_key': ['{KEY}'], 'port': 8000}}", f"{{'api_key': [{R}], 'port': 8000}}"),
        (f"{{'API_KEY': ['{KEY}', 'other-key-2']}}", f"{{'API_KEY': [{R}]}}"),
        (f"{{'hf_token': {KEY}}}", f"{{'hf_token': {R}}}"),
        # JSON (ansible-runner events, docker inspect)
        (f'{{"api_key": "{KEY}"}}', f'{{"api_key": "{R}"}}'),
        (f'{{"sparkops_api_key": "{KEY}", "n": 2}}', f'{{"sparkops_api_key": "{R}", "n": 2}}'),
        (f'{{"Api_Key": ["{KEY}"]}}', f'{{"Api_Key": [{R}]}}'),
        (f'"Env": ["VLLM_API_KEY={KEY}", "PATH=/usr/bin"]', f'"Env": ["VLLM_API_KEY={R}", "PATH=/usr/bin"]'),
        # env files and YAML, any case
        (f"VLLM_API_KEY={KEY}", f"VLLM_API_KEY={R}"),
        (f"vllm_api_key={KEY}", f"vllm_api_key={R}"),
        (f"HF_TOKEN={HF}", f"HF_TOKEN={R}"),
        (f"export RSYNC_PASSWORD='{KEY}'", f"export RSYNC_PASSWORD='{R}'"),
        (f"sparkops_hf_token: {KEY}", f"sparkops_hf_token: {R}"),
        ("HUGGING_FACE_HUB_TOKEN: 'abc123def'", f"HUGGING_FACE_HUB_TOKEN: '{R}'"),
        # command lines
        (f"  --api-key {KEY} \\", f"  --api-key {R} \\"),
        (f"--API-KEY={KEY}", f"--API-KEY={R}"),
        (f"--hf-token '{KEY}'", f"--hf-token '{R}'"),
        # URL credentials
        (f"rsync://sparkops:{KEY}@192.168.100.11/model/", f"rsync://sparkops:{R}@192.168.100.11/model/"),
        (f"git clone https://u:{KEY}@example.invalid/r", f"git clone https://u:{R}@example.invalid/r"),
        # bearer headers
        (f"curl -H 'Authorization: Bearer {KEY}' http://x", f"curl -H 'Authorization: Bearer {R}' http://x"),
        (f'{{"authorization": "bearer {KEY}"}}', f'{{"authorization": "bearer {R}"}}'),
        (f"AUTHORIZATION: BEARER {KEY}", f"AUTHORIZATION: BEARER {R}"),
        # Hugging Face tokens alone
        (f"token is {HF} here", f"token is {R} here"),
        (f"token is {HF.upper()} here", f"token is {R} here"),
    ],
)
def test_every_form_is_redacted_and_the_name_kept(line, expected):
    assert redact(line) == expected


@pytest.mark.parametrize(
    "line",
    [
        "non-default args: {'api_key': '***', 'max_num_batched_tokens': 8192}",
        "max_model_len=4096 max_num_seqs=8 max_tokens=32 tokenizer=/srv/models/x bos_token_id=1",
        "KV cache: 1.5 GiB, 4096 tokens",
        "{'api_key': None, 'port': 8000}",
        '{"api_key": null}',
        "HF_TOKEN: null",
        "http://127.0.0.1:8000/v1/models",
        'exec vllm serve /m --api-key "${VLLM_API_KEY}"',
        "rsync://192.168.100.11:873/model/",
    ],
)
def test_what_holds_no_secret_is_unchanged(line):
    assert redact(line) == line


@pytest.mark.parametrize(
    "text",
    [
        f"anywhere{KEY}inside",
        f"ANY CASE {KEY.upper()}",
        f'json-escaped "{KEY}"',
        f"started with a {KEY}\nsecond line {KEY}",
    ],
)
def test_the_current_secret_is_redacted_by_value(text):
    out = redact(text, [KEY, None, ""])
    assert KEY not in out and KEY.upper() not in out
    assert R in out


def test_a_secret_with_quotes_is_redacted_in_its_escaped_forms():
    odd = 'pa"ss\\word-123'
    assert odd not in redact(f"x {odd} y", [odd])
    assert 'pa\\"ss\\\\word-123' not in redact('{"k": "pa\\"ss\\\\word-123"}', [odd])


def test_short_values_are_not_redacted_by_value():
    assert redact("lab ray head", ["lab", "", None]) == "lab ray head"
    assert _redact.MIN_SECRET_LENGTH == 6


def test_none_is_empty_text():
    assert redact(None) == ""
