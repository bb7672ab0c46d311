"""-e values: Ansible's forms, the files they become, and what may be shown."""

from __future__ import annotations

import json
import stat

import pytest
import yaml

from sparkops_cli.extravars import (
    REDACTED,
    ExtraVarsError,
    is_secret,
    parse_extra_var,
    parse_extra_vars,
    redact,
    redact_environment,
    write_extra_vars,
)


def test_key_value_pairs_become_json(tmp_path):
    item = parse_extra_var("cluster_restart_scope=serve teardown_remove_model=false", tmp_path)
    assert json.loads(item.text) == {"cluster_restart_scope": "serve", "teardown_remove_model": "false"}
    assert item.display == "cluster_restart_scope=serve teardown_remove_model=false"


def test_json_text_is_kept_as_given(tmp_path):
    text = '{"preflight_gpu_consumer_allowlist": [{"container": "^emb$"}]}'
    item = parse_extra_var(text, tmp_path)
    assert item.text == text
    assert json.loads(item.display) == {"preflight_gpu_consumer_allowlist": [{"container": "^emb$"}]}


def test_yaml_flow_text_is_accepted(tmp_path):
    item = parse_extra_var("{a: 1, b: [x, y]}", tmp_path)
    assert yaml.safe_load(item.text) == {"a": 1, "b": ["x", "y"]}


def test_at_file_is_resolved_from_the_callers_directory(tmp_path):
    (tmp_path / "vars.yml").write_text("a: 1\n")
    item = parse_extra_var("@vars.yml", tmp_path)
    assert item.file == tmp_path / "vars.yml"
    assert item.text is None
    assert item.display == f"@{tmp_path / 'vars.yml'}"


@pytest.mark.parametrize("value", ["", "./vars.yml", "/etc/vars.yml", "word", "[1]", "{a: [", "@missing.yml"])
def test_values_ansible_would_refuse(value, tmp_path):
    with pytest.raises(ExtraVarsError):
        parse_extra_var(value, tmp_path)


@pytest.mark.parametrize(
    ("name", "value", "secret"),
    [
        ("sparkops_api_key", "abc", True),
        ("sparkops_hf_token", "x", True),
        ("ansible_become_password", "x", True),
        ("ansible_ssh_pass", "x", True),
        ("aws_secret_access_key", "x", True),
        ("some_private_key", "x", True),
        ("hf", "hf_abcdefghijklmnopqrstu", True),
        ("header", "Bearer abc.def", True),
        ("note", "$ANSIBLE_VAULT;1.1;AES256", True),
        ("cluster_restart_scope", "serve", False),
        ("cluster_ssh_authorized_keys", "/root/.ssh/authorized_keys2", False),
        ("passthrough_mode", "on", False),
        ("sparkops_model_id", "hf_small", False),
    ],
)
def test_what_counts_as_secret(name, value, secret):
    assert is_secret(name, value) is secret


def test_secrets_are_redacted_at_any_depth_and_in_display(tmp_path):
    data = {"a": 1, "nested": {"sparkops_api_key": "s3cr3t", "list": [{"token": "t"}, "plain"]}}
    assert redact(data) == {
        "a": 1,
        "nested": {"sparkops_api_key": REDACTED, "list": [{"token": REDACTED}, "plain"]},
    }
    pairs = parse_extra_var("sparkops_api_key=s3cr3t model=tiny", tmp_path)
    assert pairs.display == f"sparkops_api_key={REDACTED} model=tiny"
    blob = parse_extra_var('{"cfg": {"sparkops_hf_token": "hf_0123456789abcdefghij"}}', tmp_path)
    assert "hf_0123" not in blob.display
    assert REDACTED in blob.display


def test_written_files_are_private_and_in_order(tmp_path):
    (tmp_path / "given.yml").write_text("a: 0\n")
    items = parse_extra_vars(["a=1", "@given.yml", '{"a": 3}'], tmp_path)
    private = tmp_path / "private"
    private.mkdir()
    args = write_extra_vars(items, private)
    assert args[0::2] == ["-e", "-e", "-e"]
    paths = [arg[1:] for arg in args[1::2]]
    assert paths[1] == str(tmp_path / "given.yml")
    assert yaml.safe_load((tmp_path / paths[0]).read_text()) == {"a": "1"}
    assert yaml.safe_load((tmp_path / paths[2]).read_text()) == {"a": 3}
    for path in (paths[0], paths[2]):
        assert stat.S_IMODE((tmp_path / path).stat().st_mode) == 0o600
    assert all("s3cr3t" not in arg for arg in args)


def test_environment_keeps_names_and_hides_secret_values():
    env = redact_environment({"PATH": "/bin", "HF_TOKEN": "hf_x", "SPARKOPS_API_KEY": "k", "HOME": "/root"})
    assert env == {"PATH": "/bin", "HF_TOKEN": REDACTED, "SPARKOPS_API_KEY": REDACTED, "HOME": "/root"}
