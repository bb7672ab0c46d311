"""The serve container's env file: one NAME=value per line; a value that would add a line is refused unseen."""

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _env_file

SECRET = "s3cret-value-never-shown"
SETTINGS = {"VLLM_API_KEY": "sparkops_api_key", "HF_TOKEN": "sparkops_hf_token"}


@pytest.mark.parametrize(
    ("value", "what"),
    [
        (f"{SECRET}\nLD_PRELOAD=/tmp/x.so", "a newline"),
        (f"{SECRET}\r\nVLLM_API_KEY=", "a newline"),
        (f"{SECRET}\rX=1", "a carriage return"),
        (f"{SECRET}\x00X=1", "a NUL"),
        (f"\n{SECRET}", "a newline"),
    ],
)
@pytest.mark.parametrize("name", ["VLLM_API_KEY", "HF_TOKEN"])
def test_a_value_that_adds_a_line_is_refused_naming_the_setting_not_the_value(name, value, what):
    found = _env_file.problems({name: value}, SETTINGS)
    assert len(found) == 1
    assert SETTINGS[name] in found[0] and what in found[0]
    assert SECRET not in found[0] and "LD_PRELOAD" not in found[0]
    with pytest.raises(_env_file.EnvFileError) as exc:
        _env_file.render({name: value}, SETTINGS)
    assert SECRET not in str(exc.value)


def test_each_set_value_is_one_line_and_empty_ones_are_left_out():
    text = _env_file.render({"VLLM_API_KEY": "a=b c'\"$x", "HF_TOKEN": "", "OTHER": None})
    assert text == "VLLM_API_KEY=a=b c'\"$x\n"
    assert len(text.splitlines()) == 1


@pytest.mark.parametrize("name", ["", "1X", "A-B", "A B", "A\nB"])
def test_a_bad_variable_name_is_refused(name):
    assert _env_file.problems({name: "v"})


def test_a_non_string_value_is_refused():
    assert "not a string" in _env_file.problems({"VLLM_API_KEY": 123}, SETTINGS)[0]
