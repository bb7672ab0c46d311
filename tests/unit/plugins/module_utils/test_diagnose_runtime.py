# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Diagnose II: the run-time findings, the wider nets, and clean logs that stay clean.

Every case is a real excerpt in tests/fixtures/diagnose/ (its first line names the
source), read as it was published and again dressed the ways logs reach an operator:
under a Ray worker prefix, a docker compose service column, ANSI colours, rsyslog's
escaped colours, and Ray's de-duplication suffix.
"""

import re

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose import (
    FINDING_IDS,
    diagnose_paths,
    diagnose_text,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.rules_runtime import XID_MEANING
from conftest import FIXTURES

WRITTEN = FIXTURES / "diagnose"
CORPUS = WRITTEN / "corpus_v1"

# (fixture, findings in order with severity, root cause, a phrase the first evidence cites)
CASES = [
    (
        "uma_nvrm_no_memory_gb10_vllm-41834.log",
        [("uma_driver_out_of_memory", "error")],
        "uma_driver_out_of_memory",
        "NV_ERR_NO_MEMORY",
    ),
    (
        "uma_single_nvrm_line_healthy_vllm-56824.log",
        [("uma_driver_out_of_memory", "warning")],
        None,
        "NV_ERR_NO_MEMORY",
    ),
    (
        "rdma_ibv_reg_mr_enomem_nccl-tests-206.log",
        [("rdma_memory_registration_failed", "error")],
        "rdma_memory_registration_failed",
        "ibv_reg_mr_iova2 failed with error Cannot allocate memory",
    ),
    (
        "ray_missing_in_image_vllm-754.log",
        [("ray_missing_in_image", "error")],
        "ray_missing_in_image",
        "Ray is not installed",
    ),
    (
        "worker_env_overwritten_then_nccl.log",
        [("worker_env_overwritten_by_head", "error"), ("nccl_socket_connect_failed", "error")],
        "worker_env_overwritten_by_head",
        "Overwriting environment variable NCCL_SOCKET_IFNAME",
    ),
    (
        "gpu_xid_13_31_vllm-5901.log",
        [("gpu_xid_error", "error")],
        "gpu_xid_error",
        "Xid (PCI:0000:43:00): 13",
    ),
    (
        "gpu_xid_79_fallen_off_bus_nvsentinel-155.log",
        [("nvidia_driver_unavailable", "error")],
        "nvidia_driver_unavailable",
        "fallen off the bus",
    ),
    (
        "gpu_arch_no_kernel_image.log",
        [("gpu_arch_unsupported", "error")],
        "gpu_arch_unsupported",
        "no kernel image is available",
    ),
    (
        "engine_rpc_timeout_gb10_tp2.log",
        [("engine_rpc_timeout", "error")],
        "engine_rpc_timeout",
        "No available shared memory broadcast block",
    ),
    (
        "cudagraph_estimate_negative_gb10_vllm-44740.log",
        [("cudagraph_memory_estimate_negative", "warning")],
        None,
        "Estimated CUDA graph memory: -20.50 GiB",
    ),
    (
        "model_files_unavailable_hf.log",
        [("model_files_unavailable", "error")],
        "model_files_unavailable",
        "Cache directory not found",
    ),
    (
        "nccl_library_mismatch_vllm-4257.log",
        [("nccl_library_mismatch", "error")],
        "nccl_library_mismatch",
        "Failed to load NCCL library",
    ),
    (
        "nccl_versions_disagree.log",
        [("nccl_library_mismatch", "warning")],
        None,
        "NCCL version 2.28.9",
    ),
    (
        "ray_gcs_lost_ray-34334.log",
        [("ray_gcs_lost", "error")],
        "ray_gcs_lost",
        "Failed to connect to GCS within 60 seconds",
    ),
    # --- wider nets for existing findings ---
    (
        "ray_oom_system_memory_low_ray-28774.log",
        [("ray_oom_kill", "error")],
        "ray_oom_kill",
        "System memory low at node with IP 172.31.66.10",
    ),
    (
        "ray_oom_summary_syslog_escaped.log",
        [("ray_oom_kill", "error")],
        "ray_oom_kill",
        "killed due to memory pressure (OOM)",
    ),
    (
        "gloo_loopback_vllm-7074.log",
        [("gloo_interface", "error")],
        "gloo_interface",
        "Using the loopback address as fallback",
    ),
    (
        "nccl_last_error_no_socket_interface_mambatree-14.log",
        [("nccl_socket_connect_failed", "error")],
        "nccl_socket_connect_failed",
        "Bootstrap : no socket interface found",
    ),
    # --- clean ---
    ("clean_gb10_benign_warnings.log", [], None, None),
    ("nccl_socket_only_no_ib_device_nccl-847.log", [], None, None),
]

# Each dress turns a physical line into the form another tool prints it in.
DRESSES = {
    "as published": lambda line: line,
    "ray worker prefix": lambda line: f"(RayWorkerWrapper pid=588, ip=192.168.200.13) {line}",
    "docker compose": lambda line: f"vllm-head-1  | {line}",
    "ansi colour": lambda line: f"\x1b[36m(EngineCore_DP0 pid=412)\x1b[0m {line}",
    "syslog escaped colour": lambda line: (
        f"Apr 09 01:15:02 spark-1 bash[2211]: #033[36m(raylet)#033[0m {line}"
    ),
}


# How the fixtures' wrapped continuations start (indented, or the tail of a cut word).
CONTINUATIONS = (" ", "MORY]")
RUNTIME_IDS = {
    "uma_driver_out_of_memory",
    "rdma_memory_registration_failed",
    "ray_missing_in_image",
    "worker_env_overwritten_by_head",
    "gpu_xid_error",
    "gpu_arch_unsupported",
    "engine_rpc_timeout",
    "cudagraph_memory_estimate_negative",
    "model_files_unavailable",
    "nccl_library_mismatch",
    "ray_gcs_lost",
}


def _lines(name):
    return (WRITTEN / name).read_text(encoding="utf-8").splitlines()


def _dressed(name, dress):
    lines = _lines(name)
    # The source line stays first and undressed; a wrapped continuation stays bare.
    out = [lines[0]]
    for line in lines[1:]:
        out.append(line if not line or line.startswith(CONTINUATIONS) else DRESSES[dress](line))
    return "\n".join(out) + "\n"


def _summary(result):
    return [(item["id"], item["severity"]) for item in result["findings"]]


@pytest.mark.parametrize(("name", "expected", "root", "cited"), CASES)
def test_real_excerpt(name, expected, root, cited):
    result = diagnose_paths([str(WRITTEN / name)])
    assert _summary(result) == expected
    assert result["root_cause"] == root
    if expected:
        first = result["findings"][0]
        assert any(cited in item["text"] for item in first["evidence"]), first["evidence"]
        assert first["fix"]
        assert first["summary"]


@pytest.mark.parametrize("dress", [name for name in DRESSES if name != "as published"])
@pytest.mark.parametrize(("name", "expected", "root", "cited"), CASES)
def test_real_excerpt_dressed(name, expected, root, cited, dress):
    result = diagnose_text(_dressed(name, dress))
    assert _summary(result) == expected
    assert result["root_cause"] == root


# A single NVRM line repeated is a burst, no longer the single line (see below).
DEDUPLICATED = [
    case for case in CASES if case[1] and case[0] != "uma_single_nvrm_line_healthy_vllm-56824.log"
]


@pytest.mark.parametrize(("name", "expected", "root", "cited"), DEDUPLICATED)
def test_real_excerpt_deduplicated_by_ray(name, expected, root, cited):
    """Ray's "[repeated Nx across cluster]" copy, after the error, counts the lines it stands for."""
    lines = _lines(name)
    # The first line is the source line, which may quote the error too.
    index = next(i for i, line in enumerate(lines) if i and cited in line)
    lines[index] += " [repeated 7x across cluster]"
    result = diagnose_text("\n".join(lines))
    assert _summary(result) == expected
    repeated = [item.get("repeated") for item in result["findings"][0]["evidence"]]
    assert 7 in repeated


def test_every_runtime_id_has_a_real_case_as_first_finding():
    assert set(FINDING_IDS) >= RUNTIME_IDS
    assert {expected[0][0] for _, expected, _, _ in CASES if expected} >= RUNTIME_IDS


# --- what the summaries say -----------------------------------------------------------


def test_xid_summary_names_each_xid_with_its_meaning():
    result = diagnose_paths([str(WRITTEN / "gpu_xid_13_31_vllm-5901.log")])
    summary = result["findings"][0]["summary"]
    assert f"Xid 13: {XID_MEANING[13]}" in summary
    assert f"Xid 31: {XID_MEANING[31]}" in summary
    assert "application" in summary


def test_xid_79_is_the_driver_finding_not_an_xid_finding():
    result = diagnose_text(
        "NVRM: Xid (PCI:0000:01:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
    )
    assert _summary(result) == [("nvidia_driver_unavailable", "error")]
    assert "Xid 79" in result["findings"][0]["summary"]


def test_a_hardware_xid_says_so():
    text = "NVRM: Xid (PCI:0000:9b:00): 94, pid=1234, name=python3, Contained ECC error"
    assert "not the application" in diagnose_text(text)["findings"][0]["summary"]


def test_rdma_summary_is_not_a_gid_problem():
    result = diagnose_paths([str(WRITTEN / "rdma_ibv_reg_mr_enomem_nccl-tests-206.log")])
    finding = result["findings"][0]
    assert "ibv_reg_mr_iova2 failed (Cannot allocate memory)" in finding["summary"]
    assert "not the problem" in finding["summary"]
    assert "`ray_cluster_memlock_unlimited: true`" in finding["fix"]


def test_an_ibv_failure_other_than_enomem_stays_an_ib_error():
    text = "spark-2:1:2 [0] misc/ibvwrap.cc:160 NCCL WARN Call to ibv_modify_qp failed with error Connection timed out"
    assert _summary(diagnose_text(text)) == [("nccl_ib_error", "error")]


def test_env_overwrite_of_other_variables_is_not_a_finding():
    text = "WARNING 03-30 18:45:37 [utils.py:2102] Overwriting environment variable CUDA_VISIBLE_DEVICES from '0' to '1'"
    assert _summary(diagnose_text(text)) == []


def test_env_overwrite_names_the_variable_and_both_values():
    result = diagnose_paths([str(WRITTEN / "worker_env_overwritten_then_nccl.log")])
    first = result["findings"][0]
    assert "NCCL_SOCKET_IFNAME, NCCL_IB_HCA" in first["summary"]
    assert "'enP2p1s0f1np1' became 'enp1s0f1np1'" in first["summary"]
    assert first["evidence"][0]["host"] == "192.168.200.13"
    assert result["explained"] == [
        {
            "id": "nccl_socket_connect_failed",
            "explained_by": ["worker_env_overwritten_by_head"],
            "reported": True,
        }
    ]


def test_rpc_timeout_on_nccl_2_28_names_the_known_hang():
    text = (
        "(RayWorkerWrapper pid=588, ip=192.168.200.13) INFO 04-09 01:02:30 [pynccl.py:70] vLLM is using nccl==2.28.9\n"
        "(EngineCore pid=171) ERROR 07-16 08:23:49 [core.py:1242] TimeoutError: RPC call to sample_tokens timed out.\n"
    )
    finding = diagnose_text(text)["findings"][0]
    assert finding["id"] == "engine_rpc_timeout"
    assert "NCCL 2.28.9" in finding["summary"]
    assert "2.30.4" in finding["fix"]


def test_broadcast_notice_before_serving_is_silent_and_after_it_a_warning():
    notice = (
        "(EngineCore_DP0 pid=26418) INFO 10-27 11:52:18 [shm_broadcast.py:466] No available shared memory "
        "broadcast block found in 60 seconds. This typically happens when some processes are hanging or "
        "doing some time-consuming work (e.g. compilation)."
    )
    assert _summary(diagnose_text(notice)) == []
    serving = "(APIServer pid=1) INFO:     Application startup complete.\n" + notice
    assert _summary(diagnose_text(serving)) == [("engine_rpc_timeout", "warning")]


def test_negative_estimate_before_an_oom_is_the_root_cause():
    lines = _lines("cudagraph_estimate_negative_gb10_vllm-44740.log")
    text = "\n".join([*lines, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."])
    result = diagnose_text(text)
    assert _summary(result) == [("cudagraph_memory_estimate_negative", "error"), ("cuda_oom", "error")]
    assert result["root_cause"] == "cudagraph_memory_estimate_negative"


def test_a_positive_estimate_is_silent():
    assert _summary(diagnose_text("Estimated CUDA graph memory: 0.36 GiB total")) == []


def test_nccl_versions_that_agree_are_silent():
    text = "spark-2:588:588 [0] NCCL INFO NCCL version 2.27.3+cuda12.9\nvLLM is using nccl==2.27.3\n"
    assert _summary(diagnose_text(text)) == []


def test_gcs_lost_is_not_the_join_time_gcs_failure():
    join = "gcs_rpc_client.h:151: Failed to connect to GCS at address 192.168.2.40:6379 within 5 seconds."
    assert [item[0] for item in _summary(diagnose_text(join))] == ["ray_node_ip_mismatch"]


def test_the_uma_phrase_is_found_across_the_wrap():
    result = diagnose_paths([str(WRITTEN / "uma_nvrm_no_memory_gb10_vllm-41834.log")])
    evidence = result["findings"][0]["evidence"]
    assert [item["line"] for item in evidence] == [2, 3, 4, 6]


def test_one_nvrm_line_repeated_is_a_burst():
    lines = _lines("uma_single_nvrm_line_healthy_vllm-56824.log")
    result = diagnose_text("\n".join([*lines[:-1], lines[-1] + " [repeated 7x across cluster]"]))
    assert _summary(result) == [("uma_driver_out_of_memory", "error")]


def test_one_nvrm_line_next_to_a_failure_is_an_error():
    lines = _lines("uma_single_nvrm_line_healthy_vllm-56824.log")
    text = "\n".join([*lines, "RuntimeError: Engine core initialization failed. See root cause above."])
    result = diagnose_text(text)
    assert result["root_cause"] == "uma_driver_out_of_memory"


# --- the socket-only run -----------------------------------------------------------------

ROCE_CONTEXT = {
    "hosts": {
        "spark-1": {"ib_address": "192.168.200.12", "ib_interface": "enp1s0f1np1"},
        "spark-2": {"ib_address": "192.168.200.13", "ib_interface": "enp1s0f1np1"},
    }
}


def test_socket_only_run_is_an_error_when_the_inventory_says_roce():
    result = diagnose_paths([str(WRITTEN / "nccl_socket_only_no_ib_device_nccl-847.log")], ROCE_CONTEXT)
    assert _summary(result) == [("nccl_ib_error", "error")]
    assert "fell back to TCP sockets" in result["findings"][0]["summary"]


def test_socket_only_run_across_hosts_without_roce_in_the_inventory_is_a_warning():
    plain = {"hosts": {"a": {"ansible_host": "10.0.0.5"}, "b": {"ansible_host": "10.0.0.6"}}}
    result = diagnose_paths([str(WRITTEN / "nccl_socket_only_no_ib_device_nccl-847.log")], plain)
    assert _summary(result) == [("nccl_ib_error", "warning")]


# --- a watchdog timeout wrapped over three lines -------------------------------------------


def test_watchdog_timeout_wrapped_at_80_columns():
    line = (
        "[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 "
        "milliseconds before timing out."
    )
    wrapped = "\n".join(line[at : at + 80] for at in range(0, len(line), 80))
    result = diagnose_text(wrapped)
    assert _summary(result) == [("nccl_collective_timeout", "error")]


# --- the labelled corpus (tests/fixtures/diagnose/corpus_v1/labels.tsv) ---------------------


def _corpus():
    rows = []
    for row in (CORPUS / "labels.tsv").read_text(encoding="utf-8").splitlines():
        if row and not row.startswith("#"):
            name, expected = row.split("\t")[:2]
            rows.append((name, [] if expected == "-" else expected.split(",")))
    return rows


@pytest.mark.parametrize(("name", "expected"), _corpus())
def test_labelled_corpus(name, expected):
    result = diagnose_paths([str(CORPUS / name)])
    found = {item["id"] for item in result["findings"]}
    errors = [item["id"] for item in result["findings"] if item["severity"] == "error"]
    if expected:
        assert set(expected) <= found, _summary(result)
    else:
        assert errors == [], _summary(result)


def test_a_provenance_line_is_not_read_as_log():
    header = '# Source: GitHub vllm-project/vllm issue #11251 ("[Bug]: torch.OutOfMemoryError for 0.6.4")'
    assert (
        _summary(
            diagnose_text(
                header + "\nINFO 12-20 20:25:46 worker.py:241] Memory profiling takes 19.77 seconds"
            )
        )
        == []
    )
    # Anywhere else a "#" line is log (nccl-tests prints "#  Rank  1 ...").
    assert (
        re.search(
            "cuda_oom", str(_summary(diagnose_text("x\n# CUDA out of memory. Tried to allocate 2 GiB")))
        )
        is not None
    )
