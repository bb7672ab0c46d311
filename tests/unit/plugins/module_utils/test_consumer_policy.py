"""The preflight policy on GPU consumers: which are stale, and what the operator is told."""

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _consumer_policy as policy

EMBEDDINGS = {
    "pid": 4242,
    "process_name": "/usr/bin/python3",
    "used_memory_mib": 12288,
    "gpu_uuid": "GPU-1",
    "type": "C",
    "container": {
        "id": "5109bd2e78e4" + "0" * 52,
        "name": "vllm-embeddings",
        "image": "vllm/vllm-openai:v0.10.1",
        "labels": {},
    },
}
OWN = {
    **EMBEDDINGS,
    "pid": 17,
    "container": {
        **EMBEDDINGS["container"],
        "name": "sparkops-lab-vllm",
        "labels": {policy.LABEL_KEY: "lab"},
    },
}
OTHER_CLUSTER = {
    **OWN,
    "pid": 18,
    "container": {**OWN["container"], "labels": {policy.LABEL_KEY: "other"}},
}
BARE = {"pid": 99, "process_name": "python3", "used_memory_mib": None, "gpu_uuid": "GPU-1", "container": None}
XORG = {
    "pid": 1234,
    "process_name": "/usr/lib/xorg/Xorg",
    "used_memory_mib": 60,
    "type": "G",
    "container": None,
}
COMPOSE = {
    **EMBEDDINGS,
    "pid": 55,
    "container": {
        **EMBEDDINGS["container"],
        "name": "rag-embeddings-1",
        "labels": {"com.docker.compose.project": "rag", "com.docker.compose.service": "embeddings"},
    },
}


def verdicts(consumers, **kwargs):
    kwargs.setdefault("label_key", policy.LABEL_KEY)
    kwargs.setdefault("cluster_name", "lab")
    return [c["verdict"] for c in policy.classify(consumers, **kwargs)]


@pytest.mark.parametrize(
    ("consumer", "kwargs", "expected"),
    [
        (EMBEDDINGS, {}, "stale"),
        (OWN, {}, "own"),
        (OTHER_CLUSTER, {}, "stale"),
        (BARE, {}, "stale"),
        (XORG, {}, "graphics"),
        (XORG, {"headless": True}, "stale"),
        (EMBEDDINGS, {"allowlist": [{"container": "^vllm-embeddings$"}]}, "allowed"),
        (EMBEDDINGS, {"allowlist": [{"image": "^vllm/vllm-openai"}]}, "allowed"),
        (EMBEDDINGS, {"allowlist": [{"process": "python3$"}]}, "allowed"),
        # Every key given must match.
        (EMBEDDINGS, {"allowlist": [{"container": "^vllm-embeddings$", "image": "^other/"}]}, "stale"),
        (BARE, {"allowlist": [{"container": ".*"}]}, "stale"),
        (BARE, {"allowlist": [{"process": "^python3$"}]}, "allowed"),
    ],
)
def test_verdicts(consumer, kwargs, expected):
    assert verdicts([consumer], **kwargs) == [expected]


def test_verdict_keeps_the_consumer_and_says_why():
    (result,) = policy.classify(
        [EMBEDDINGS],
        label_key=policy.LABEL_KEY,
        cluster_name="lab",
        allowlist=[{"container": "emb", "reason": "RAG"}],
    )
    assert result["pid"] == 4242
    assert result["why"] == "allowlisted (RAG)"


def test_report_names_host_container_image_pid_and_memory():
    lines = policy.report(
        "spark-2", policy.classify([EMBEDDINGS, OWN], label_key=policy.LABEL_KEY, cluster_name="lab")
    )
    assert lines == [
        "spark-2: container vllm-embeddings (image vllm/vllm-openai:v0.10.1), PID 4242 /usr/bin/python3, "
        "12288 MiB (12.0 GiB) of GPU memory. "
        "Stop it: docker update --restart=no vllm-embeddings && docker stop vllm-embeddings"
    ]


def test_report_on_bare_process_never_suggests_a_container_command():
    (line,) = policy.report(
        "spark-1", policy.classify([BARE], label_key=policy.LABEL_KEY, cluster_name="lab")
    )
    assert "no container" in line and "memory unknown" in line and "docker" not in line


def test_compose_container_is_stopped_through_compose():
    assert policy.stop_command(COMPOSE) == "docker compose -p rag stop embeddings"


@pytest.mark.parametrize(
    ("allowlist", "fragment"),
    [
        (["vllm-embeddings"], "must be a mapping"),
        ([{}], "at least one of container, image, process"),
        ([{"name": "x"}], "at least one of"),
        ([{"container": "x", "host": "spark-2"}], "unknown keys ['host']"),
        ([{"container": "("}], "is not a regular expression"),
    ],
)
def test_bad_allowlist_entries_are_named(allowlist, fragment):
    problems = policy.validate_allowlist(allowlist)
    assert len(problems) == 1
    assert fragment in problems[0]


def test_good_allowlist_has_no_problems():
    assert (
        policy.validate_allowlist([{"container": "^a$", "image": "b", "process": "c", "reason": "r"}]) == []
    )
