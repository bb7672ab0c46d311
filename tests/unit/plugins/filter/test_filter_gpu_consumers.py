"""The filters preflight templates call."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkops.vllm.plugins.filter.gpu_consumers import FilterModule

FILTERS = FilterModule().filters()
CONSUMER = {
    "pid": 7,
    "process_name": "python3",
    "used_memory_mib": 2048,
    "container": {
        "id": "a" * 64,
        "name": "vllm",
        "image": "img",
        "labels": {"io.sparkops.vllm.cluster": "lab"},
    },
}


def test_own_labels_is_the_label_preflight_recognises():
    labels = FILTERS["own_labels"]("lab")
    consumer = {**CONSUMER, "container": {**CONSUMER["container"], "labels": labels}}
    assert FILTERS["gpu_consumer_verdicts"]([consumer], "lab")[0]["verdict"] == "own"
    assert FILTERS["gpu_consumer_verdicts"]([consumer], "other")[0]["verdict"] == "stale"


def test_bad_allowlist_raises_with_an_example():
    with pytest.raises(
        AnsibleFilterError, match=r"preflight_gpu_consumer_allowlist: entry 0 .*Example entry"
    ):
        FILTERS["gpu_consumer_verdicts"]([], "lab", allowlist=["vllm"])


def test_report_filter_lists_only_stale():
    classified = FILTERS["gpu_consumer_verdicts"]([CONSUMER], "other")
    (line,) = FILTERS["gpu_consumer_report"](classified, "spark-1")
    assert line.startswith("spark-1: container vllm (image img), PID 7 python3, 2048 MiB (2.0 GiB)")
