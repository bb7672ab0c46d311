"""plugins/module_utils/_prometheus_text.py: real vLLM /metrics excerpts and hostile texts."""

import math

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _prometheus_text as pt
from conftest import FIXTURES


def capture(name):
    lines = (FIXTURES / "prometheus" / name).read_text().splitlines()
    assert lines[0].startswith("# Source: https://github.com/")
    return "\n".join(lines[1:]) + "\n"


def test_two_engines_histogram_without_type_is_untyped_per_sample_name():
    got = pt.parse(capture("vllm_issue_22227_engines.txt"))
    assert got.errors == []
    counts = got.samples("vllm:request_generation_tokens_count")
    assert [(s.labels["engine"], s.value) for s in counts] == [("0", 3.0)]
    inf = [s for s in got.samples("vllm:request_generation_tokens_bucket") if s.labels["le"] == "+Inf"]
    assert inf[0].value == 3.0


def test_histogram_buckets_join_their_typed_family():
    got = pt.parse(capture("vllm_production_stack_318.txt"))
    fam = got.families["vllm:request_prompt_tokens"]
    assert fam.type == "histogram"
    assert len(fam.samples) == 4
    assert fam.samples[-1].labels == {"le": "10000.0", "model_name": "Qwen/Qwen2.5-Coder-32B-Instruct"}


def test_counter_family_by_its_total_name_and_help():
    got = pt.parse(capture("ibm_vllm_pr18_process.txt"))
    fam = got.families["python_gc_objects_collected_total"]
    assert (fam.type, fam.help) == ("counter", "Objects collected during gc")
    assert got.total("python_gc_objects_collected_total") == 7522.0 + 4938.0 + 653.0
    assert got.samples("python_info")[0].labels["patchlevel"] == "8"


VLLM_017 = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 2.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 1234.0
vllm:generation_tokens_total{engine="1",model_name="tiny"} 6.0
# TYPE vllm:generation_tokens_created gauge
vllm:generation_tokens_created{engine="0",model_name="tiny"} 1.7e+09
"""


def test_the_two_watchdog_series_sum_over_engines():
    got = pt.parse(VLLM_017)
    assert got.total("vllm:generation_tokens_total") == 1240.0
    assert got.total("vllm:num_requests_running") == 2.0
    assert got.total("vllm:absent") is None


@pytest.mark.parametrize(
    ("text", "value"),
    [("NaN", None), ("+Inf", math.inf), ("-Inf", -math.inf), ("1e3", 1000.0), (".5", 0.5), ("-0", 0.0)],
)
def test_special_values(text, value):
    got = pt.parse(f"m {text}\n")
    sample = got.samples("m")[0]
    if value is None:
        assert math.isnan(sample.value)
        assert got.total("m") is None
    else:
        assert sample.value == value


def test_label_escapes_and_timestamp_and_trailing_comma():
    got = pt.parse('m{a="x\\"y",b="back\\\\slash",c="line\\nfeed",} 1 1700000000000\n')
    s = got.samples("m")[0]
    assert s.labels == {"a": 'x"y', "b": "back\\slash", "c": "line\nfeed"}
    assert s.timestamp_ms == 1700000000000


def test_help_escapes():
    got = pt.parse("# HELP m a\\\\n b\\nc\n")
    assert got.families["m"].help == "a\\n b\nc"


@pytest.mark.parametrize(
    "line",
    [
        'm{a="x} 1',
        "m{a=x} 1",
        'm{a="x",a="y"} 1',
        'm{a="\\q"} 1',
        "m one",
        "m 1 2 3",
        "m 1 1.5",
        '{a="x"} 1',
        "9m 1",
        'm{a="x" b="y"} 1',
        "# TYPE m flavour",
        "# TYPE 9m gauge",
    ],
)
def test_hostile_lines_become_errors_and_keep_the_rest(line):
    got = pt.parse(f"good 1\n{line}\nalso_good 2\n")
    assert len(got.errors) == 1
    assert got.errors[0].startswith("line 2: ")
    assert got.total("good") == 1.0
    assert got.total("also_good") == 2.0


def test_comments_blank_lines_and_crlf():
    got = pt.parse("# just a comment\r\n\r\nm 3\r\n#\n")
    assert got.errors == []
    assert got.total("m") == 3.0


def test_too_large_or_not_utf8_is_refused():
    with pytest.raises(pt.PrometheusTextError, match="over"):
        pt.parse(b"m 1\n" * (pt.MAX_BYTES // 4 + 1))
    with pytest.raises(pt.PrometheusTextError, match="UTF-8"):
        pt.parse(b'm{a="\xff"} 1\n')


def test_errors_are_bounded_and_long_lines_refused():
    got = pt.parse("bad line here\n" * 500 + "m" * (pt.MAX_LINE + 1) + " 1\n")
    assert len(got.errors) == pt.MAX_ERRORS
    got = pt.parse("m" * (pt.MAX_LINE + 1) + " 1\n")
    assert "longer than" in got.errors[0]
