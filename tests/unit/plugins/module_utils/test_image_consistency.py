"""Tables for plugins/module_utils/_image_consistency.py and the sparkops.vllm image filters."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkops.vllm.plugins.filter import vllm_image
from ansible_collections.sparkops.vllm.plugins.module_utils._image_consistency import (
    differences,
    mismatch_report,
    tool_version,
)

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64


@pytest.mark.parametrize(
    ("output", "tool", "expected"),
    [
        # Real: `ray --version` in the lab image.
        ("ray, version 2.60.0\n", "ray", "2.60.0"),
        ("2025-01-01 WARNING something\nray, version 2.49.1\n", "ray", "2.49.1"),
        # Real: the lab stand-in, and vLLM releases (a bare version, after log lines on some).
        ("0.17.1+sparkops.lab\n", "vllm", "0.17.1+sparkops.lab"),
        (
            "INFO 01-02 03:04:05 [__init__.py:216] Automatically detected platform cuda.\n0.11.0\n",
            "vllm",
            "0.11.0",
        ),
        ("0.11.1rc2.dev3+gabc1234\n", "vllm", "0.11.1rc2.dev3+gabc1234"),
        ('exec: "ray": executable file not found in $PATH', "ray", None),
        ("", "vllm", None),
        (None, "ray", None),
    ],
)
def test_tool_version(output, tool, expected):
    assert tool_version(output, tool) == expected
    assert vllm_image.image_tool_version(output, tool) == expected


def test_tool_version_unknown_tool():
    with pytest.raises(AnsibleFilterError, match="unknown tool"):
        vllm_image.image_tool_version("1.0", "torch")


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"spark-1": A, "spark-2": A}, []),
        ({"spark-1": A, "spark-2": B, "spark-3": A}, [{"host": "spark-2", "value": B}]),
        (
            {"spark-1": A, "spark-3": "", "spark-2": None},
            [
                {"host": "spark-2", "value": None},
                {"host": "spark-3", "value": None},
            ],
        ),
        ({"spark-1": A}, []),
    ],
)
def test_differences(values, expected):
    assert differences(values, "spark-1") == expected
    assert vllm_image.image_differences(values, "spark-1") == expected


def test_mismatch_report_names_both_ids():
    assert mismatch_report({"spark-1": A, "spark-2": B, "spark-3": ""}, "spark-1", "its image ID") == [
        f"spark-2 holds {B} as its image ID, the head spark-1 holds {A}",
        f"spark-3 holds nothing as its image ID, the head spark-1 holds {A}",
    ]


def test_filters_refuse_bad_input():
    with pytest.raises(AnsibleFilterError, match="spark-1 has no value"):
        vllm_image.image_differences({"spark-2": A}, "spark-1")
    with pytest.raises(AnsibleFilterError, match="mapping of host"):
        vllm_image.image_mismatch_report(["spark-1"], "spark-1")
